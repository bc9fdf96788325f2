/* The page of a plan from a profile (plan_html.h). */
#include "plan_html.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/aa.h"
#include "strategies/strategy.h"
#include "svg.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct {
  double x, y; /* GiB a GPU, MFU in percent */
  char key[AA_STRATEGY_KEY_MAX];
} point_t;

struct aa_plan_page {
  double xmax; /* the memory axis's end, GiB */
  double memory;
  size_t n;                                /* points added */
  point_t *pts;                            /* the first AA_PLAN_PAGE_POINTS */
  size_t count[AA_SVG_COLS * AA_SVG_ROWS]; /* every point, by square */
  point_t front[AA_SVG_COLS];              /* the best MFU of each memory column; y < 0: none */
  double ymax;                             /* the largest MFU seen, percent */
};

aa_plan_page_t *aa_plan_page_new(double memory_bytes) {
  aa_plan_page_t *pg = calloc(1, sizeof *pg);
  if (pg) pg->pts = calloc(AA_PLAN_PAGE_POINTS, sizeof *pg->pts);
  if (!pg || !pg->pts) {
    if (pg) free(pg);
    aa_error(AA_ENOMEM, "plan: no memory for the page");
    return NULL;
  }
  pg->memory = memory_bytes / GIB;
  pg->xmax = aa_svg_axis_max(pg->memory);
  for (int c = 0; c < AA_SVG_COLS; c++)
    pg->front[c].y = -1;
  return pg;
}

/* The y axis's end: MFU in percent, up to 100. */
#define YMAX 100.0

void aa_plan_page_add(aa_plan_page_t *pg, const char *key, double bytes, double mfu) {
  point_t p = {.x = bytes / GIB, .y = 100 * mfu};
  snprintf(p.key, sizeof p.key, "%s", key);
  if (pg->n < AA_PLAN_PAGE_POINTS) pg->pts[pg->n] = p;
  pg->n++;
  if (p.y > pg->ymax) pg->ymax = p.y;
  size_t c = aa_svg_cell(p.x, pg->xmax, AA_SVG_PW, AA_SVG_COLS),
         r = aa_svg_cell(p.y, YMAX, AA_SVG_PH, AA_SVG_ROWS);
  pg->count[r * AA_SVG_COLS + c]++;
  if (p.y > pg->front[c].y || (p.y == pg->front[c].y && p.x < pg->front[c].x)) pg->front[c] = p;
}

void aa_plan_page_free(aa_plan_page_t *pg) {
  if (!pg) return;
  free(pg->pts);
  free(pg);
}

static double num(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

static void chart(const aa_plan_page_t *pg, FILE *f, const json_t *best) {
  const bool density = pg->n > AA_PLAN_PAGE_POINTS;
  fprintf(f,
          "<h2>MFU against memory per GPU</h2>\n<p>One point per strategy predicted (%zu): its bytes per "
          "GPU across, its MFU up. The grey line is the device's memory; the red line the Pareto front "
          "(the best MFU within each amount of memory), through its strategies; the larger points are "
          "the best strategies of the table below, the first labelled.",
          pg->n);
  if (density)
    fprintf(f,
            " They are too many to draw one by one (the page draws up to %d): each square gathers the "
            "strategies that fall in it, darker for more, and its title says how many.",
            AA_PLAN_PAGE_POINTS);
  fprintf(f, "</p>\n");
  if (!pg->n) {
    fprintf(f, "<p class=\"none\" id=\"mfu-memory\">No strategy was predicted.</p>\n");
    return;
  }
  const double xmax = pg->xmax, ymax = aa_svg_axis_max(pg->ymax < YMAX ? pg->ymax : YMAX);
  aa_svg_open(f, "mfu-memory", "MFU against memory per GPU, the Pareto front and the best strategies");
  aa_svg_axes(f, xmax, "memory per GPU (GiB)", ymax, "MFU (%)");
  const double mx = aa_svg_x(pg->memory, xmax);
  fprintf(f,
          "<line id=\"device-memory\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888888\" "
          "stroke-dasharray=\"4 3\"><title>the device's memory: %.1f GiB</title></line>\n",
          mx, AA_SVG_MT, mx, AA_SVG_MT + AA_SVG_PH, pg->memory);
  if (!density) {
    for (size_t i = 0; i < pg->n; i++) {
      const point_t *p = &pg->pts[i];
      fprintf(f,
              "<circle class=\"strategy\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#1f77b4\" "
              "fill-opacity=\"0.5\"><title>",
              aa_svg_x(p->x, xmax), aa_svg_y(p->y, ymax));
      aa_svg_esc(f, p->key);
      fprintf(f, ": %.1f GiB, MFU %.1f %%</title></circle>\n", p->x, p->y);
    }
  } else {
    size_t most = 0;
    for (size_t i = 0; i < (size_t)AA_SVG_COLS * AA_SVG_ROWS; i++)
      if (pg->count[i] > most) most = pg->count[i];
    for (int r = 0; r < AA_SVG_ROWS; r++)
      for (int c = 0; c < AA_SVG_COLS; c++) {
        size_t n = pg->count[(size_t)r * AA_SVG_COLS + (size_t)c];
        if (!n) continue;
        int w = AA_SVG_PW - c * AA_SVG_CELL < AA_SVG_CELL ? AA_SVG_PW - c * AA_SVG_CELL : AA_SVG_CELL;
        int h = AA_SVG_PH - r * AA_SVG_CELL < AA_SVG_CELL ? AA_SVG_PH - r * AA_SVG_CELL : AA_SVG_CELL;
        double y0 = (double)(r * AA_SVG_CELL) / AA_SVG_PH * YMAX,
               y1 = (double)(r * AA_SVG_CELL + h) / AA_SVG_PH * YMAX;
        double x0 = (double)(c * AA_SVG_CELL) / AA_SVG_PW * xmax,
               x1 = (double)(c * AA_SVG_CELL + w) / AA_SVG_PW * xmax;
        if (y0 > ymax) continue;
        fprintf(f,
                "<rect class=\"cell\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"#1f77b4\" "
                "fill-opacity=\"%.2f\"><title>%zu strateg%s: %.1f to %.1f GiB, MFU %.1f to %.1f "
                "%%</title></rect>\n",
                AA_SVG_ML + c * AA_SVG_CELL, aa_svg_y(y1 < ymax ? y1 : ymax, ymax), w,
                aa_svg_y(y0, ymax) - aa_svg_y(y1 < ymax ? y1 : ymax, ymax),
                0.15 + 0.85 * log1p((double)n) / log1p((double)most), n, n == 1 ? "y" : "ies", x0, x1, y0,
                y1);
      }
  }
  /* The front: walking up the memory columns, each strategy better than
   * every one to its left. */
  fprintf(f, "<polyline id=\"pareto\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" points=\"");
  double best_y = -1;
  for (int c = 0; c < AA_SVG_COLS; c++)
    if (pg->front[c].y > best_y) {
      best_y = pg->front[c].y;
      fprintf(f, "%.1f,%.1f ", aa_svg_x(pg->front[c].x, xmax), aa_svg_y(pg->front[c].y, ymax));
    }
  fprintf(f, "\"/>\n");
  best_y = -1;
  for (int c = 0; c < AA_SVG_COLS; c++)
    if (pg->front[c].y > best_y) {
      const point_t *p = &pg->front[c];
      best_y = p->y;
      fprintf(f, "<circle class=\"front\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d62728\"><title>front: ",
              aa_svg_x(p->x, xmax), aa_svg_y(p->y, ymax));
      aa_svg_esc(f, p->key);
      fprintf(f, ": %.1f GiB, MFU %.1f %%</title></circle>\n", p->x, p->y);
    }
  size_t i;
  const json_t *s;
  json_array_foreach(best, i, s) {
    double x = aa_svg_x(num(s, "peak_bytes") / GIB, xmax), y = aa_svg_y(100 * num(s, "mfu"), ymax);
    const char *key = json_string_value(json_object_get(s, "key"));
    fprintf(f,
            "<circle class=\"best\" cx=\"%.1f\" cy=\"%.1f\" r=\"7\" fill=\"none\" stroke=\"#000000\" "
            "stroke-width=\"2\"><title>%zu: ",
            x, y, i + 1);
    aa_svg_esc(f, key ? key : "?");
    fprintf(f, "</title></circle>\n");
    if (i == 0) {
      bool left = x > AA_SVG_ML + AA_SVG_PW / 2;
      fprintf(f, "<text id=\"best-label\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-weight=\"bold\">",
              left ? x - 12 : x + 12, y < AA_SVG_MT + 20 ? y + 18 : y - 10, left ? "end" : "start");
      aa_svg_esc(f, key ? key : "?");
      fprintf(f, "</text>\n");
    }
  }
  fprintf(f, "</svg>\n");
}

static void table(FILE *f, const json_t *best) {
  fprintf(f, "<h2>The best strategies</h2>\n<table id=\"best\">\n<thead><tr><th>rank</th><th>strategy</th>"
             "<th>tokens/s</th><th>TFLOP/s per GPU</th><th>MFU</th><th>step s</th><th>GiB per GPU</th>"
             "<th>bubble</th><th>communication</th></tr></thead>\n<tbody>\n");
  size_t i;
  const json_t *s;
  json_array_foreach(best, i, s) {
    const char *key = json_string_value(json_object_get(s, "key"));
    fprintf(f, "<tr><td class=\"num\">%zu</td><td><code>", i + 1);
    aa_svg_esc(f, key ? key : "?");
    fprintf(f,
            "</code></td><td class=\"num\">%.0f</td><td class=\"num\">%.1f</td><td class=\"num\">%.1f %%</td>"
            "<td class=\"num\">%.3f</td><td class=\"num\">%.1f</td><td class=\"num\">%.1f %%</td>"
            "<td class=\"num\">%.1f %%</td></tr>\n",
            num(s, "tokens_per_s"), num(s, "tflops_per_gpu"), 100 * num(s, "mfu"), num(s, "step_ms") / 1e3,
            num(s, "peak_bytes") / GIB, 100 * num(s, "bubble"), 100 * num(s, "comm_share"));
  }
  fprintf(f, "</tbody>\n</table>\n");
}

int aa_plan_page_write(const aa_plan_page_t *pg, FILE *f, const char *title, const json_t *summary,
                       const json_t *best, const json_t *assumptions) {
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>");
  aa_svg_esc(f, title);
  fprintf(f,
          "</title>\n<style>body{font-family:sans-serif;margin:2em;max-width:75em;color:#222}"
          "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}"
          "td.num{text-align:right}svg{display:block}p.none{color:#666}</style>\n</head>\n<body>\n<h1>");
  aa_svg_esc(f, title);
  fprintf(f, "</h1>\n<table id=\"summary\">\n<tbody>\n");
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)summary, k, v) {
    fprintf(f, "<tr><th>");
    aa_svg_esc(f, k);
    fprintf(f, "</th><td>");
    if (json_is_string(v))
      aa_svg_esc(f, json_string_value(v));
    else
      fprintf(f, "%g", json_number_value(v));
    fprintf(f, "</td></tr>\n");
  }
  fprintf(f, "</tbody>\n</table>\n");
  chart(pg, f, best);
  table(f, best);
  fprintf(f, "<h2>Assumptions</h2>\n<ul id=\"assumptions\">\n");
  size_t i;
  json_array_foreach(assumptions, i, v) {
    fprintf(f, "<li>");
    aa_svg_esc(f, json_string_value(v) ? json_string_value(v) : "");
    fprintf(f, "</li>\n");
  }
  fprintf(f, "</ul>\n</body>\n</html>\n");
  if (fflush(f) || ferror(f)) return aa_error(AA_EIO, "plan: cannot write the page");
  return 0;
}
