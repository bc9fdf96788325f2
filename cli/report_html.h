/* The HTML report of one job (`autoaccel report JOB --html FILE`): a pure
 * function from the planner's JSON (docs/service.md "Replies") to one
 * self-contained HTML document. Inline SVG only: no script, no style sheet
 * or font from elsewhere, no address of any kind, so the file opens the same
 * offline, from a mail attachment or a CI artifact.
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
 *     to three example keys).
 * A part without data says so in a sentence instead of drawing an empty
 * chart. Every string taken from the input is escaped (& < > " '). Every
 * element is closed explicitly (void ones as <x/>), so a simple tag checker
 * can verify the output. */
#ifndef AA_CLI_REPORT_HTML_H
#define AA_CLI_REPORT_HTML_H

#include <jansson.h>

/* Builds the report. `job` is a JOB object (its "best_run" picks the run to
 * mark), `runs` an array of RUN objects (the job's runs; entries that are
 * not objects are skipped), `best` the `query run` answer for the best run
 * ({"run": RUN, "ranks": [RANK, ...]}) or NULL when there is none. All three
 * are borrowed. On success *out is the NUL-terminated document (malloc'd,
 * transferred: free). Errors: AA_EINVAL when job is not an object or runs
 * not an array, AA_ENOMEM. *out is set only on success. */
int aa_report_html(char **out, const json_t *job, const json_t *runs, const json_t *best);

/* The class of a pruned run's reason (the planner's words, docs/service.md
 * "Jobs"), into out (n bytes): the rule that pruned it without the
 * candidate's own figures, so that runs pruned by one rule count together
 * in `auto`'s summary and the report's table. An unknown reason is its own
 * class (less a leading "not measured: "). */
void aa_report_reason_class(const char *reason, char *out, size_t n);

#endif
