/* `autoaccel query best|runs|run|jobs`: the planner's store, as tables or
 * as the planner's JSON verbatim (--json). The runs table is shared with
 * `autoaccel auto` (aa_client_print_runs). */
#include <ctype.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "common/axis.h"

static const char *jstr(const json_t *o, const char *k, const char *dflt) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : dflt;
}

static double jnum(const json_t *o, const char *k, bool *present) {
  json_t *v = json_object_get(o, k);
  *present = json_is_number(v);
  return *present ? json_number_value(v) : 0;
}

void aa_client_print_runs(FILE *f, const json_t *runs, bool with_job) {
  size_t i, keyw = 8;
  json_t *r;
  json_array_foreach(runs, i, r) {
    size_t n = strlen(jstr(r, "key", "-"));
    if (n > keyw) keyw = n;
  }
  if (with_job) fprintf(f, "%5s %5s ", "RUN", "JOB");
  fprintf(f, "%-6s %-*s %-9s %10s %8s %7s %10s  %s\n", "KIND", (int)keyw, "STRATEGY", "STATUS", "TOK/S", "STEP MS",
          "SPREAD", "PEAK", "NOTE");
  json_array_foreach(runs, i, r) {
    char rate[32], ms[32] = "-", spread[32] = "-", peak[32], note[160] = "";
    bool has;
    double v = jnum(r, "tokens_per_s", &has);
    aa_client_fmt_rate(rate, v, has);
    v = jnum(r, "step_ms_median", &has);
    if (has) snprintf(ms, sizeof ms, "%.1f", v);
    v = jnum(r, "step_ms_spread", &has);
    if (has) snprintf(spread, sizeof spread, "%.1f", v);
    v = jnum(r, "peak_bytes", &has);
    aa_client_fmt_bytes(peak, v, has);
    double loss = jnum(r, "final_loss", &has);
    const char *err = jstr(r, "error", NULL);
    if (err) snprintf(note, sizeof note, "%s", err);
    else if (has && !strcmp(jstr(r, "kind", ""), "train")) snprintf(note, sizeof note, "final loss %.4f", loss);
    bool id_has, job_has;
    double id = jnum(r, "id", &id_has), job = jnum(r, "job", &job_has);
    if (with_job) fprintf(f, "%5.0f %5.0f ", id, job);
    fprintf(f, "%-6s %-*s %-9s %10s %8s %7s %10s  %s\n", jstr(r, "kind", "?"), (int)keyw, jstr(r, "key", "-"),
            jstr(r, "status", "?"), rate, ms, spread, peak, note);
  }
}

/* One run, then each rank's own figures: where its step time goes
 * (forward, backward, optimizer, pipeline communication, pipeline wait,
 * the expert all-to-alls). */
static void print_run(const json_t *root) {
  json_t *run = json_object_get(root, "run"), *ranks = json_object_get(root, "ranks"), *one = json_array();
  json_array_append(one, run);
  aa_client_print_runs(stdout, one, true);
  json_decref(one);
  if (!json_array_size(ranks)) {
    printf("no per-rank figures (a run that has not finished, was pruned, or is older than them)\n");
    return;
  }
  _Static_assert(AA_PROTO_TIME_KINDS == 6, "one column per time kind");
  /* One coordinate column per axis (common/axis.h), headed by its key. */
  printf("\n%4s", "RANK");
  for (int a = 0; a < AA_AXES; a++) {
    char head[8];
    snprintf(head, sizeof head, "%s", aa_axis_info((aa_axis_t)a)->key);
    for (char *c = head; *c; c++)
      *c = (char)toupper((unsigned char)*c);
    printf(" %3s", head);
  }
  printf("  %-9s %8s %9s %9s %9s %9s %9s %10s %10s\n", "STATUS", "STEP MS", "FORWARD", "BACKWARD",
         "OPTIMIZER", "PP COMM", "BUBBLE", "ALL-TO-ALL", "PEAK");
  size_t i;
  json_t *k;
  json_array_foreach(ranks, i, k) {
    char ms[32] = "-", t[AA_PROTO_TIME_KINDS][32], peak[32];
    bool has;
    double v = jnum(k, "step_ms_median", &has);
    if (has) snprintf(ms, sizeof ms, "%.1f", v);
    json_t *times = json_object_get(k, "times_ms");
    for (int j = 0; j < AA_PROTO_TIME_KINDS; j++) {
      v = jnum(times, aa_proto_time_kind_name((aa_proto_time_kind_t)j), &has);
      if (has) snprintf(t[j], sizeof t[j], "%.2f", v);
      else snprintf(t[j], sizeof t[j], "-");
    }
    v = jnum(k, "peak_bytes", &has);
    aa_client_fmt_bytes(peak, v, has);
    printf("%4.0f", jnum(k, "rank", &has));
    for (int a = 0; a < AA_AXES; a++) {
      char name[32];
      snprintf(name, sizeof name, "%s_rank", aa_axis_info((aa_axis_t)a)->key);
      printf(" %3.0f", jnum(k, name, &has));
    }
    printf("  %-9s %8s %9s %9s %9s %9s %9s %10s %10s\n", jstr(k, "status", "?"), ms, t[0], t[1], t[2], t[3],
           t[4], t[5], peak);
    if (jstr(k, "error", NULL)) printf("     error: %s\n", jstr(k, "error", ""));
  }
}

static void print_jobs(const json_t *jobs) {
  size_t i;
  json_t *v;
  printf("%5s  %-20s %-16s %-11s %-9s %s\n", "JOB", "MODEL", "HASH", "STATUS", "BEST RUN", "HARDWARE");
  json_array_foreach(jobs, i, v) {
    json_t *m = json_object_get(v, "model"), *best = json_object_get(v, "best_run");
    char b[32] = "-";
    if (json_is_number(best)) snprintf(b, sizeof b, "%.0f", json_number_value(best));
    printf("%5.0f  %-20s %-16s %-11s %-9s %s%s\n", json_number_value(json_object_get(v, "id")), jstr(m, "name", "?"),
           jstr(m, "hash", "?"), jstr(v, "status", "?"), b, jstr(v, "hardware", "-"),
           json_is_true(json_object_get(v, "from_store")) ? "  (from the store)" : "");
    if (jstr(v, "error", NULL)) printf("       error: %s\n", jstr(v, "error", ""));
  }
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: autoaccel query best --model MODEL [--hardware FP]\n"
          "       autoaccel query runs [--job N] [--model MODEL] [--hardware FP] [--status S1,S2]\n"
          "                            [--kind dryrun|train] [--key-prefix P] [--order id|best] [--limit N]\n"
          "       autoaccel query run RUN\n"
          "       autoaccel query jobs [--model MODEL] [--status S1,S2] [--limit N]\n\n"
          "Asks the planner's store (with no planner running on the state directory and no --planner,\n"
          "reads the store itself, read-only, and says so on stderr):\n"
          "  best   the best measured dry run of a model on each hardware (or on --hardware FP)\n"
          "  runs   runs of a job, or runs matching the filters (status ok, oom, error, timeout,\n"
          "         crashed, pruned, cancelled, queued, running)\n"
          "  run    one run and each rank's own figures: its mesh coordinates, step time by\n"
          "         forward, backward, optimizer, pipeline communication and pipeline wait\n"
          "  jobs   jobs, newest first (status queued, running, done, failed, cancelled, interrupted)\n\n"
          "options:\n"
          "  --model MODEL       a model spec file (its architecture hash) or a 16-hex-digit hash\n"
          "  --hardware FP       a hardware fingerprint such as 'cpu:NAME:24000MiBx1'\n"
          "  --json              print the planner's reply JSON verbatim\n"
          "  --planner ADDR      unix:PATH or tcp:HOST:PORT (default unix:<state dir>/planner.sock)\n"
          "  --token-file FILE   the planner's token (a mode 0600 file; on TCP the default is\n"
          "                      <state dir>/token, where a planner of that state dir keeps it)\n"
          "  -h, --help          this help\n\n"
          "Exit codes: 0 success, 1 failure (no planner, bad model file, refused query), 2 usage.\n");
  aa_cli_set_help(f);
}

enum { OPT_JOB = 1, OPT_MODEL = 2, OPT_HW = 4, OPT_STATUS = 8, OPT_KIND = 16, OPT_PREFIX = 32, OPT_ORDER = 64,
       OPT_LIMIT = 128 };

static int bad_usage(const char *fmt, const char *arg) {
  fprintf(stderr, "autoaccel query: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  usage(stderr);
  return AA_EXIT_USAGE;
}

/* Adds "--status a,b" as a JSON array of strings. */
static int add_list(json_t *args, const char *key, const char *text) {
  aa_msg_strlist_t l;
  if (aa_client_split_list(text, "--status", &l)) return -1;
  json_t *a = json_array();
  for (size_t i = 0; i < l.n; i++) json_array_append_new(a, json_string(l.v[i]));
  aa_client_strlist_free(&l);
  return json_object_set_new(args, key, a);
}

int aa_cmd_query(int argc, char **argv) {
  static const struct option longopts[] = {
      {"job", required_argument, 0, 'J'},     {"model", required_argument, 0, 'm'},
      {"hardware", required_argument, 0, 'H'}, {"status", required_argument, 0, 's'},
      {"kind", required_argument, 0, 'K'},    {"key-prefix", required_argument, 0, 'P'},
      {"order", required_argument, 0, 'O'},   {"limit", required_argument, 0, 'l'},
      {"planner", required_argument, 0, 'p'}, {"token-file", required_argument, 0, 'k'},
      {"json", no_argument, 0, 'j'},          {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *planner = NULL, *token_file = NULL, *model = NULL, *hardware = NULL, *status = NULL, *kind = NULL,
             *prefix = NULL, *order = NULL;
  long long job = 0, limit = 0;
  bool json = false;
  int seen = 0, c;
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout);
    return AA_EXIT_OK;
  }
  if (argc < 2 || argv[1][0] == '-')
    return bad_usage("expected what to query: best, runs, run or jobs%s", "");
  const char *what = argv[1];
  int allowed;
  if (!strcmp(what, "best")) allowed = OPT_MODEL | OPT_HW;
  else if (!strcmp(what, "runs")) allowed = OPT_JOB | OPT_MODEL | OPT_HW | OPT_STATUS | OPT_KIND | OPT_PREFIX | OPT_ORDER | OPT_LIMIT;
  else if (!strcmp(what, "jobs")) allowed = OPT_MODEL | OPT_STATUS | OPT_LIMIT;
  else if (!strcmp(what, "run")) allowed = 0;
  else return bad_usage("unknown query '%s' (expected best, runs, run or jobs)", what);
  argc--;
  argv++;
  aa_cli_sets_t sets = {0};
  if (aa_cli_take_sets(&argc, argv, longopts, "query", &sets)) return AA_EXIT_USAGE;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'J':
      if ((job = aa_cli_parse_int("query", "--job", optarg, 1, INT64_MAX)) < 0) return AA_EXIT_USAGE;
      seen |= OPT_JOB;
      break;
    case 'm': model = optarg; seen |= OPT_MODEL; break;
    case 'H': hardware = optarg; seen |= OPT_HW; break;
    case 's': status = optarg; seen |= OPT_STATUS; break;
    case 'K':
      if (strcmp(optarg, "dryrun") && strcmp(optarg, "train")) return bad_usage("--kind is dryrun or train, not '%s'", optarg);
      kind = optarg;
      seen |= OPT_KIND;
      break;
    case 'P': prefix = optarg; seen |= OPT_PREFIX; break;
    case 'O':
      if (strcmp(optarg, "id") && strcmp(optarg, "best")) return bad_usage("--order is id or best, not '%s'", optarg);
      order = optarg;
      seen |= OPT_ORDER;
      break;
    case 'l':
      if ((limit = aa_cli_parse_int("query", "--limit", optarg, 1, 1000000)) < 0) return AA_EXIT_USAGE;
      seen |= OPT_LIMIT;
      break;
    case 'p': planner = optarg; break;
    case 'k': token_file = optarg; break;
    case 'j': json = true; break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default: return bad_usage("unknown option or missing value: '%s'", argv[optind - 1]);
    }
  }
  long long run = 0;
  if (!strcmp(what, "run")) {
    if (optind != argc - 1) return bad_usage("query run needs exactly one RUN id%s", "");
    if ((run = aa_cli_parse_int("query", "RUN", argv[optind++], 1, INT64_MAX)) < 0) return AA_EXIT_USAGE;
  }
  if (optind != argc) return bad_usage("unexpected argument '%s'", argv[optind]);
  if (seen & ~allowed) {
    fprintf(stderr, "autoaccel query: 'query %s' takes only the options its usage line shows\n", what);
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  if (!strcmp(what, "best") && !model) return bad_usage("query best needs --model MODEL%s", "");
  if (sets.n && !model) return bad_usage("--set overrides the spec given by --model MODEL%s", "");
  char hash[17];
  if (model) {
    int rc = aa_client_model_hash_set(model, sets.v, (size_t)sets.n, hash);
    if (rc == AA_EINVAL && !strncmp(aa_last_error(), "--model", 7)) {
      fprintf(stderr, "autoaccel query: %s\n", aa_last_error());
      return AA_EXIT_USAGE;
    }
    if (rc) return aa_cli_fail("query");
  }
  json_t *args = json_object();
  if (run) json_object_set_new(args, "id", json_integer(run));
  if (job) json_object_set_new(args, "job", json_integer(job));
  if (model) json_object_set_new(args, "model", json_string(hash));
  if (hardware) json_object_set_new(args, "hardware", json_string(hardware));
  if (status && add_list(args, "status", status)) {
    json_decref(args);
    fprintf(stderr, "autoaccel query: %s\n", aa_last_error());
    return AA_EXIT_USAGE;
  }
  if (kind) json_object_set_new(args, "kind", json_string(kind));
  if (prefix) json_object_set_new(args, "key_prefix", json_string(prefix));
  if (order) json_object_set_new(args, "order", json_string(order));
  /* Long answers come in pages; every page is asked for and merged. */
  const char *key = !strcmp(what, "jobs") ? "jobs" : !strcmp(what, "best") ? "best" : "runs";
  aa_client_t *cl;
  json_t *root = NULL;
  int rc = aa_client_connect_or_store(&cl, "query", planner, token_file);
  if (!rc && run) { /* one run: one answer, no pages */
    char *a = json_dumps(args, JSON_COMPACT), *text = NULL;
    rc = a ? aa_client_query(cl, what, a, &text) : aa_error(AA_ENOMEM, "query: no memory");
    if (!rc && !(root = json_loads(text, 0, NULL)))
      rc = aa_error(AA_EFORMAT, "query run: the planner's answer is not JSON");
    free(a);
    free(text);
    aa_client_close(cl);
  } else if (!rc) {
    rc = aa_client_query_pages(cl, what, args, limit, key, &root);
    aa_client_close(cl);
  }
  json_decref(args);
  if (rc) return aa_cli_fail("query");
  if (json) {
    if (json_dumpf(root, stdout, JSON_COMPACT | JSON_ENSURE_ASCII) || printf("\n") < 0) {
      json_decref(root);
      fprintf(stderr, "autoaccel query: cannot write the answer\n");
      return AA_EXIT_FAIL;
    }
    json_decref(root);
    return AA_EXIT_OK;
  }
  if (run) {
    print_run(root);
    json_decref(root);
    return AA_EXIT_OK;
  }
  json_t *list = json_object_get(root, key);
  if (!json_array_size(list)) printf("no %s\n", !strcmp(what, "jobs") ? "jobs" : "runs");
  else if (!strcmp(what, "jobs")) print_jobs(list);
  else aa_client_print_runs(stdout, list, true);
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(root, "unreadable"), i, v)
    printf("run %lld cannot be read from the store: %s\n", (long long)json_integer_value(json_object_get(v, "id")),
           json_string_value(json_object_get(v, "error")) ? json_string_value(json_object_get(v, "error")) : "?");
  json_decref(root);
  return AA_EXIT_OK;
}
