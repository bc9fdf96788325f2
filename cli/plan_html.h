/* The page of a plan from a profile (`autoaccel plan MODEL --pool
 * PROFILE:N --html FILE`): one self-contained HTML document (inline SVG,
 * as report_html.h: no script, no style sheet, no address).
 *
 * It holds, in order:
 *   - a header: the model, the pool, where the op times came from, the
 *     counts and the time the plan took;
 *   - svg#mfu-memory: every predicted strategy's MFU against its memory per
 *     GPU (as squares counting them past AA_PLAN_PAGE_POINTS), the
 *     device's memory as a vertical line, the Pareto front (the best MFU
 *     reachable within each amount of memory) as a line through its
 *     strategies, each with its key in a title, and the best strategies
 *     shown in the table as larger points, the first labelled;
 *   - table#best: the best strategies with the columns of the text table;
 *   - ul#assumptions: what the predictions rest on.
 * Memory: a few KiB plus 160 bytes a point for the first
 * AA_PLAN_PAGE_POINTS, whatever the number of candidates. */
#ifndef AA_CLI_PLAN_HTML_H
#define AA_CLI_PLAN_HTML_H

#include <jansson.h>
#include <stdio.h>

#define AA_PLAN_PAGE_POINTS 2000

typedef struct aa_plan_page aa_plan_page_t;

/* A page whose memory axis ends at the device's memory_bytes (> 0). NULL
 * with AA_ENOMEM set. */
aa_plan_page_t *aa_plan_page_new(double memory_bytes);

/* One predicted strategy: its key (copied), bytes per GPU and MFU (0..1). */
void aa_plan_page_add(aa_plan_page_t *pg, const char *key, double bytes, double mfu);

/* Writes the document: `title` (escaped), `summary` (an object of
 * name -> string or number, shown as the header's rows, in order), `best`
 * (the array `plan --json` gives as "strategies") and `assumptions` (an
 * array of strings), all borrowed. AA_EIO when f reports a write error. */
int aa_plan_page_write(const aa_plan_page_t *pg, FILE *f, const char *title, const json_t *summary,
                       const json_t *best, const json_t *assumptions);

void aa_plan_page_free(aa_plan_page_t *pg);

#endif
