/* Inline SVG for the CLI's HTML pages (svg.h). */
#include "svg.h"

#include <math.h>

/* Text from the input, escaped for element content and attribute values. */
void aa_svg_esc(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '&': fputs("&amp;", f); break;
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '"': fputs("&quot;", f); break;
    case '\'': fputs("&#39;", f); break;
    default: fputc(*s, f);
    }
  }
}

/* A round tick step giving about 5 ticks up to max (> 0). */
double aa_svg_tick_step(double max) {
  double raw = max / 5, p = pow(10, floor(log10(raw))), f = raw / p;
  return p * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10);
}

/* The axis top: a little over max (so no point sits on the frame), rounded
 * up to a whole tick; 1 when nothing is positive. */
double aa_svg_axis_max(double max) {
  if (!(max > 0)) return 1;
  max *= 1.04;
  double s = aa_svg_tick_step(max);
  return ceil(max / s) * s;
}

double aa_svg_x(double v, double max) { return AA_SVG_ML + v / max * AA_SVG_PW; }
double aa_svg_y(double v, double max) { return AA_SVG_MT + AA_SVG_PH - v / max * AA_SVG_PH; }

void aa_svg_open(FILE *f, const char *id, const char *title) {
  fprintf(f, "<svg id=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" ", id, AA_SVG_W, AA_SVG_H,
          AA_SVG_W, AA_SVG_H);
  fprintf(f, "role=\"img\" font-family=\"sans-serif\" font-size=\"12\"><title>%s</title>\n", title);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", AA_SVG_W, AA_SVG_H);
}

/* Axes with ticks and grid lines; ymax = 0 draws no y ticks (the rank chart
 * labels its rows itself). */
void aa_svg_axes(FILE *f, double xmax, const char *xlabel, double ymax, const char *ylabel) {
  double st = aa_svg_tick_step(xmax);
  for (double v = 0; v <= xmax * (1 + 1e-9); v += st) {
    double x = aa_svg_x(v, xmax);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e0e0e0\"/>\n", x, AA_SVG_MT, x,
            AA_SVG_MT + AA_SVG_PH);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, AA_SVG_MT + AA_SVG_PH + 16,
            v);
  }
  if (ymax > 0) {
    st = aa_svg_tick_step(ymax);
    for (double v = 0; v <= ymax * (1 + 1e-9); v += st) {
      double y = aa_svg_y(v, ymax);
      fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", AA_SVG_ML, y,
              AA_SVG_ML + AA_SVG_PW, y);
      fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", AA_SVG_ML - 6, y + 4, v);
    }
  }
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", AA_SVG_ML,
          AA_SVG_MT + AA_SVG_PH, AA_SVG_ML + AA_SVG_PW, AA_SVG_MT + AA_SVG_PH);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000000\"/>\n", AA_SVG_ML, AA_SVG_MT,
          AA_SVG_ML, AA_SVG_MT + AA_SVG_PH);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", AA_SVG_ML + AA_SVG_PW / 2,
          AA_SVG_H - 12, xlabel);
  if (ylabel)
    fprintf(f, "<text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
            AA_SVG_MT + AA_SVG_PH / 2, ylabel);
}

/* The square (0..cells-1) of v on an axis of `cells` squares up to max;
 * points outside the axis go to its ends. */
size_t aa_svg_cell(double v, double max, int plot, int cells) {
  double c = floor(v / max * plot / AA_SVG_CELL);
  return c < 0 ? 0 : c >= cells ? (size_t)cells - 1 : (size_t)c;
}
