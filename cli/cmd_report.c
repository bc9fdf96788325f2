/* `autoaccel report JOB --html FILE`: one job's search as a self-contained
 * HTML page (cli/report_html.h), from the planner's answers to `status
 * JOB`, `query run BEST` and the pages of `query runs --job JOB`, which
 * the report takes one at a time (a job's runs are never all in memory). */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "common/file.h"
#include "report_html.h"

/* A --from-json fixture is a test's own file; this bounds a mistaken one. */
#define REPORT_JSON_MAX (64u << 20)

static void usage(FILE *f) {
  fprintf(
      f, "usage: autoaccel report JOB --html FILE [--planner ADDR] [--token-file FILE]\n\n"
         "Writes one job's search as a single HTML file that needs nothing else to open: inline SVG\n"
         "charts, no scripts, no fonts or style sheets from elsewhere. It holds a header (model, job,\n"
         "hardware, the best strategy and its tokens/s, runs by status), predicted against measured\n"
         "tokens/s of every dry run (a scatter with the y = x line), tokens/s against peak memory of\n"
         "every ok dry run with the chosen strategy marked, the best run's per-rank time breakdown\n"
         "(stacked bars) and the pruned candidates grouped by reason. Asks a running planner, and takes\n"
         "the runs page by page: a chart of more than 2000 points draws their density instead. With no\n"
         "planner running on the state directory (and no --planner), reads its store directly, read-only.\n\n"
         "options:\n"
         "  --html FILE         the file to write (replaced atomically; a symlink there is replaced,\n"
         "                      never followed)\n"
         "  --planner ADDR      unix:PATH or tcp:HOST:PORT (default unix:<state dir>/planner.sock)\n"
         "  --token-file FILE   the planner's token (a mode 0600 file; on TCP the default is\n"
         "                      <state dir>/token, where a planner of that state dir keeps it)\n"
         "  --from-json FILE    for the tests: build the page from FILE, {\"job\": JOB, \"runs\": [RUN...],\n"
         "                      \"best\": {\"run\": RUN, \"ranks\": [RANK...]}}, without a planner (no JOB)\n"
         "  -h, --help          this help\n\n"
         "Exit codes: 0 written, 1 failure (no planner, unknown job, a job without runs, a file that\n"
         "cannot be written), 2 usage.\n");
}

static int bad_usage(const char *msg, const char *arg) {
  fprintf(stderr, "autoaccel report: %s%s%s\n", msg, arg ? ": " : "", arg ? arg : "");
  usage(stderr);
  return AA_EXIT_USAGE;
}

/* Parses the planner's reply text (consumed) into *out (transferred). */
static int parse_reply(char *text, const char *what, json_t **out) {
  json_error_t jerr;
  json_t *v = json_loads(text, 0, &jerr);
  free(text);
  if (!json_is_object(v)) {
    json_decref(v);
    return aa_error(AA_EFORMAT, "the planner's answer to %s is not a JSON object: %s", what, jerr.text);
  }
  *out = v;
  return 0;
}

/* aa_client_query_each's callback: the report takes each run as its page
 * arrives, so the command holds one page of runs at a time. */
static int take_run(json_t *run, void *data) { return aa_report_add_run(data, run); }

/* Asks the planner (or the store, client.h) for job `id` and its best run's
 * `query run` answer, starts the report from them, then gives it the job's
 * runs page by page. *out (transferred) is set only on success. */
static int fetch(aa_client_t *c, long long id, aa_report_t **out) {
  json_t *st = NULL, *best = NULL, *args = NULL;
  aa_report_t *rep = NULL;
  char *text = NULL;
  int rc = aa_client_status(c, (uint64_t)id, &text);
  if (!rc) rc = parse_reply(text, "status", &st);
  json_t *job = json_object_get(st, "job");
  if (!rc && !json_is_object(job)) rc = aa_error(AA_EFORMAT, "the planner's answer to status has no job");
  json_t *best_id = json_object_get(job, "best_run");
  if (!rc && json_is_integer(best_id)) {
    char q[64];
    snprintf(q, sizeof q, "{\"id\": %lld}", (long long)json_integer_value(best_id));
    text = NULL;
    if (!(rc = aa_client_query(c, "run", q, &text))) rc = parse_reply(text, "query run", &best);
  }
  if (!rc) rc = aa_report_new(&rep, job, best);
  if (!rc) {
    args = json_pack("{sI}", "job", (json_int_t)id);
    rc = args ? aa_client_query_each(c, "runs", args, 0, "runs", take_run, NULL, rep)
              : aa_error(AA_ENOMEM, "out of memory");
  }
  json_decref(args);
  json_decref(st);
  json_decref(best);
  if (rc) {
    aa_report_free(rep);
    return rc;
  }
  *out = rep;
  return 0;
}

/* Builds the report from a --from-json fixture; *job_id gets the job's id.
 * Outputs are set only on success. */
static int load(const char *path, aa_report_t **out, long long *job_id) {
  char *text;
  size_t n;
  int rc = aa_read_file(path, REPORT_JSON_MAX, "a report fixture", &text, &n);
  if (rc) return rc;
  json_error_t jerr;
  json_t *root = json_loadb(text, n, 0, &jerr);
  free(text);
  if (!json_is_object(root)) {
    json_decref(root);
    return aa_error(AA_EPARSE, "%s: not a JSON object: %s (line %d)", path, jerr.text, jerr.line);
  }
  json_t *job = json_object_get(root, "job"), *runs = json_object_get(root, "runs"), *run;
  json_t *best = json_object_get(root, "best");
  aa_report_t *rep = NULL;
  rc = aa_report_new(&rep, job, json_is_object(best) ? best : NULL);
  if (!rc && !json_is_array(runs)) rc = aa_error(AA_EINVAL, "report: the runs are not a JSON array");
  size_t i;
  json_array_foreach(runs, i, run) {
    if (rc) break;
    rc = aa_report_add_run(rep, run);
  }
  long long id = json_integer_value(json_object_get(job, "id"));
  json_decref(root);
  if (rc) {
    aa_report_free(rep);
    return rc;
  }
  *out = rep;
  *job_id = id;
  return 0;
}

/* Writes the page into `path`, replaced atomically: a failure leaves no
 * file behind. */
static int write_html(const char *path, const aa_report_t *rep) {
  aa_wfile_t w;
  int rc = aa_wfile_open(&w, path, 0644);
  if (rc) return rc;
  if ((rc = aa_report_write(rep, w.f))) {
    aa_wfile_abort(&w);
    return aa_error_wrap(rc, "%s", path);
  }
  return aa_wfile_commit(&w);
}

int aa_client_report_html(aa_client_t *c, long long id, const char *path, size_t *runs) {
  aa_report_t *rep = NULL;
  int rc = fetch(c, id, &rep);
  if (!rc && !aa_report_runs(rep))
    rc = aa_error(AA_EINVAL, "job %lld has no runs yet: nothing to report", id);
  if (!rc) rc = write_html(path, rep);
  if (!rc && runs) *runs = aa_report_runs(rep);
  aa_report_free(rep);
  return rc;
}

int aa_cmd_report(int argc, char **argv) {
  static const struct option longopts[] = {{"html", required_argument, 0, 'o'},
                                           {"planner", required_argument, 0, 'p'},
                                           {"token-file", required_argument, 0, 'k'},
                                           {"from-json", required_argument, 0, 'f'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *html_path = NULL, *planner = NULL, *token_file = NULL, *from = NULL;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'o': html_path = optarg; break;
    case 'p': planner = optarg; break;
    case 'k': token_file = optarg; break;
    case 'f': from = optarg; break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default: return bad_usage("unknown option or missing value", argv[optind - 1]);
    }
  }
  long long id = 0;
  if (from) {
    if (optind != argc) return bad_usage("--from-json takes no JOB", argv[optind]);
  } else {
    if (argc - optind != 1) return bad_usage("expected exactly one JOB", NULL);
    if ((id = aa_cli_parse_int("report", "JOB", argv[optind], 1, INT64_MAX)) < 0) return AA_EXIT_USAGE;
  }
  if (!html_path) return bad_usage("--html FILE is required", NULL);

  size_t runs = 0;
  int rc;
  if (from) {
    aa_report_t *rep = NULL;
    rc = load(from, &rep, &id);
    if (!rc && !aa_report_runs(rep))
      rc = aa_error(AA_EINVAL, "job %lld has no runs yet: nothing to report", id);
    if (!rc) rc = write_html(html_path, rep);
    if (!rc) runs = aa_report_runs(rep);
    aa_report_free(rep);
  } else {
    aa_client_t *cl = NULL;
    rc = aa_client_connect_or_store(&cl, "report", planner, token_file);
    if (!rc) rc = aa_client_report_html(cl, id, html_path, &runs);
    aa_client_close(cl);
  }
  if (!rc) printf("wrote %s: job %lld, %zu runs\n", html_path, id, runs);
  return rc ? aa_cli_fail("report") : AA_EXIT_OK;
}
