/* Inline SVG for the CLI's self-contained HTML pages (`report --html`,
 * `plan --html`): one chart geometry, axes with round ticks, escaped text,
 * and the squares a dense chart draws its points in. No script, no style
 * sheet, no address: the pages open the same offline. */
#ifndef AA_CLI_SVG_H
#define AA_CLI_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Every chart is W x H user units with the plot inside the margins. */
enum { AA_SVG_W = 720, AA_SVG_H = 420, AA_SVG_ML = 80, AA_SVG_MR = 30, AA_SVG_MT = 20, AA_SVG_MB = 56 };
#define AA_SVG_PW (AA_SVG_W - AA_SVG_ML - AA_SVG_MR)
#define AA_SVG_PH (AA_SVG_H - AA_SVG_MT - AA_SVG_MB)
/* A density chart's squares: CELL x CELL user units, COLS x ROWS of them
 * (the top row and right column cut to the plot). */
#define AA_SVG_CELL 10
#define AA_SVG_COLS ((AA_SVG_PW + AA_SVG_CELL - 1) / AA_SVG_CELL)
#define AA_SVG_ROWS ((AA_SVG_PH + AA_SVG_CELL - 1) / AA_SVG_CELL)

/* Text from the input, escaped for element content and attribute values. */
void aa_svg_esc(FILE *f, const char *s);
/* A round tick step giving about 5 ticks up to max (> 0). */
double aa_svg_tick_step(double max);
/* The axis top: a little over max (so no point sits on the frame), rounded
 * up to a whole tick; 1 when nothing is positive. */
double aa_svg_axis_max(double max);
/* A value's position on the x and y axes up to max. */
double aa_svg_x(double v, double max);
double aa_svg_y(double v, double max);
/* <svg id=... ><title>title</title> and a white background. */
void aa_svg_open(FILE *f, const char *id, const char *title);
/* Axes with ticks and grid lines; ymax = 0 draws no y ticks. */
void aa_svg_axes(FILE *f, double xmax, const char *xlabel, double ymax, const char *ylabel);
/* The square (0..cells-1) of v on an axis of `cells` squares up to max,
 * of a plot `plot` units long; points outside the axis go to its ends. */
size_t aa_svg_cell(double v, double max, int plot, int cells);

#endif
