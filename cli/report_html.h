/* The HTML report of one job (`autoaccel report JOB --html FILE`): from
 * the planner's JSON (docs/service.md "Replies") to one self-contained HTML
 * document. Inline SVG only: no script, no style sheet or font from
 * elsewhere, no address of any kind, so the file opens the same offline,
 * from a mail attachment or a CI artifact.
 *
 * The document holds, in order:
 *   - a header: model, job id, hardware, status, the best strategy key and
 *     its tokens/s, the search's verdict on it (td#note, when the job has a
 *     note), the number of runs of each status;
 *   - svg#pred-vs-measured: predicted against measured tokens/s of every
 *     dry run that has both, as a scatter with the y = x line;
 *   - svg#throughput-memory: tokens/s against peak memory of every ok dry
 *     run, the job's best run drawn larger and labelled with its key;
 *   - svg#rank-breakdown: the best run's per-rank time breakdown (forward,
 *     backward, optimizer, pipeline_comm, bubble), one stacked horizontal
 *     bar per rank;
 *   - table#pruned: the pruned candidates grouped by reason (count and up
 *     to three example keys; past 64 reasons, the rest in one row).
 * A part without data says so in a sentence instead of drawing an empty
 * chart. A chart of more than AA_REPORT_POINTS_MAX points draws them as
 * densities (squares that count the runs falling in them, with their
 * counts in titles) and says so, so the file stays under a megabyte or so
 * whatever the number of runs. Every string taken from the input is
 * escaped (& < > " '). Every element is closed explicitly (void ones as
 * <x/>), so a simple tag checker can verify the output.
 *
 * A report takes the runs one at a time (aa_report_add_run, as the pages
 * of `query runs` arrive) and keeps only what the page draws: about 16
 * bytes per point of each chart, a few counters, and keys for the first
 * AA_REPORT_POINTS_MAX points and three examples per reason; never the
 * runs' JSON. */
#ifndef AA_CLI_REPORT_HTML_H
#define AA_CLI_REPORT_HTML_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* Points a chart draws one by one, each with its key in a title; a chart
 * with more draws densities. */
#define AA_REPORT_POINTS_MAX 2000

typedef struct aa_report aa_report_t;

/* Starts the report of `job`, a JOB object (its "best_run" picks the run
 * to mark), with `best`, the `query run` answer for the best run ({"run":
 * RUN, "ranks": [RANK, ...]}) or NULL when there is none. Both are borrowed
 * (copied). Errors: AA_EINVAL when job is not an object, AA_ENOMEM. *out
 * (transferred: aa_report_free) is set only on success. */
int aa_report_new(aa_report_t **out, const json_t *job, const json_t *best);

/* Takes one RUN object (borrowed, not kept): it is counted by its status,
 * and its figures go to the charts and the pruned table. A value that is
 * not an object is counted as a run of another status and drawn nowhere.
 * Errors: AA_ENOMEM (the run may be partly taken; the report can still be
 * written or freed). */
int aa_report_add_run(aa_report_t *r, const json_t *run);

/* How many runs the report has taken. */
size_t aa_report_runs(const aa_report_t *r);

/* Writes the document to f (borrowed). AA_EIO when f reports a write
 * error, AA_ENOMEM. */
int aa_report_write(const aa_report_t *r, FILE *f);

/* Frees a report; NULL is a no-op. */
void aa_report_free(aa_report_t *r);

/* The whole document in one string: aa_report_new, aa_report_add_run for
 * each entry of `runs` (an array), aa_report_write. All three are borrowed.
 * On success *out is the NUL-terminated document (malloc'd, transferred:
 * free). Errors: AA_EINVAL when job is not an object or runs not an
 * array, AA_ENOMEM. *out is set only on success. */
int aa_report_html(char **out, const json_t *job, const json_t *runs, const json_t *best);

/* The class of a pruned run's reason (the planner's words, docs/service.md
 * "Jobs"), into out (n bytes): the rule that pruned it without the
 * candidate's own figures, so that runs pruned by one rule count together
 * in `auto`'s summary and the report's table. An unknown reason is its own
 * class (less a leading "not measured: "). */
void aa_report_reason_class(const char *reason, char *out, size_t n);

#endif
