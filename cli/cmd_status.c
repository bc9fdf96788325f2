/* `autoaccel status [JOB]` and `autoaccel cancel JOB`: the planner's state
 * (executors, queue, recent jobs) or one job, and stopping a job. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "strategies/strategy.h"

/* ", from KEY" for the strategy a job's search started from, if any. */
static void print_from(const json_t *from) {
  if (!json_is_object(from)) return;
  char *text = json_dumps(from, JSON_COMPACT), key[AA_STRATEGY_KEY_MAX];
  aa_strategy_t s;
  if (text && !aa_strategy_parse(&s, text, "the job's strategy to start from")) {
    aa_strategy_key(&s, key);
    printf(", from %s", key);
  } else {
    printf(", from a strategy that cannot be read");
  }
  free(text);
}

static const char *jstr(const json_t *o, const char *k, const char *dflt) {
  const char *s = json_string_value(json_object_get(o, k));
  return s ? s : dflt;
}

static long long jint(const json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? (long long)json_number_value(v) : 0;
}

static const char *fmt_time(char buf[32], const json_t *v) {
  if (!json_is_number(v)) return "-";
  time_t t = (time_t)json_number_value(v);
  struct tm tm;
  if (!localtime_r(&t, &tm) || !strftime(buf, 32, "%Y-%m-%d %H:%M:%S", &tm)) return "-";
  return buf;
}

static const char *fmt_id(char buf[32], const json_t *v) {
  if (!json_is_number(v)) return "-";
  snprintf(buf, 32, "%lld", (long long)json_number_value(v));
  return buf;
}

/* "45 (20 ok, 3 pruned, 1 running)": the non-zero run counts of a job. */
static void print_run_counts(FILE *f, const json_t *runs) {
  static const char *keys[] = {"queued", "running", "ok", "oom", "error", "timeout", "crashed", "pruned", "cancelled"};
  fprintf(f, "%lld", jint(runs, "total"));
  const char *sep = " (";
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    long long n = jint(runs, keys[i]);
    if (!n) continue;
    fprintf(f, "%s%lld %s", sep, n, keys[i]);
    sep = ", ";
  }
  if (strcmp(sep, " (")) fprintf(f, ")");
}

static void print_job(const json_t *job) {
  json_t *model = json_object_get(job, "model"), *opts = json_object_get(job, "options");
  char t[3][32], b[32];
  printf("job %lld: %s (%s) on %s\n", jint(job, "id"), jstr(model, "name", "?"), jstr(model, "hash", "?"),
         jstr(job, "hardware", "hardware not yet known"));
  printf("status:    %s%s\n", jstr(job, "status", "?"),
         json_is_true(json_object_get(job, "from_store")) ? " (answered from the store)" : "");
  printf("submitted: %s  started: %s  finished: %s\n", fmt_time(t[0], json_object_get(job, "submitted_at")),
         fmt_time(t[1], json_object_get(job, "started_at")), fmt_time(t[2], json_object_get(job, "finished_at")));
  if (json_is_object(opts)) {
    printf("options:   train %s, refresh %s, exhaustive %s", json_is_true(json_object_get(opts, "train")) ? "yes" : "no",
           json_is_true(json_object_get(opts, "refresh")) ? "yes" : "no",
           json_is_true(json_object_get(opts, "exhaustive")) ? "yes" : "no");
    if (jint(opts, "time_limit_s")) printf(", time limit %lld s", jint(opts, "time_limit_s"));
    if (jint(opts, "max_dryruns")) printf(", max dry runs %lld", jint(opts, "max_dryruns"));
    json_t *ex = json_object_get(opts, "exclude");
    size_t i;
    json_t *e;
    json_array_foreach(ex, i, e) printf("%s%s", i ? "," : ", exclude ", json_string_value(e) ? json_string_value(e) : "?");
    json_t *in = json_object_get(opts, "include");
    json_array_foreach(in, i, e) printf("%s%s", i ? "," : ", include ", json_string_value(e) ? json_string_value(e) : "?");
    print_from(json_object_get(opts, "from"));
    printf("\n");
    if (jstr(opts, "out_dir", NULL)) printf("out:       %s\n", jstr(opts, "out_dir", ""));
  }
  printf("runs:      ");
  print_run_counts(stdout, json_object_get(job, "runs"));
  printf("\nbest run:  %s\n", fmt_id(b, json_object_get(job, "best_run")));
  if (jstr(job, "strategy_file", NULL)) printf("strategy:  %s\n", jstr(job, "strategy_file", ""));
  if (jstr(job, "note", NULL)) printf("note:      %s\n", jstr(job, "note", ""));
  if (jstr(job, "error", NULL)) printf("error:     %s\n", jstr(job, "error", ""));
  json_t *w = json_object_get(job, "waiting");
  if (json_is_object(w))
    printf("waiting:   %s since %s\n", jstr(w, "for", "?"), fmt_time(t[0], json_object_get(w, "since")));
}

static void print_planner(const json_t *root) {
  json_t *p = json_object_get(root, "planner"), *ex = json_object_get(root, "executors"),
         *queue = json_object_get(root, "queue"), *jobs = json_object_get(root, "jobs"), *v;
  size_t i;
  char b[4][32];
  printf("planner %s (pid %lld) at %s, up %lld s\nstore %s\n", jstr(p, "version", "?"), jint(p, "pid"),
         jstr(p, "address", "?"), jint(p, "uptime_s"), jstr(p, "store", "?"));
  printf("\nexecutors: %zu\n", json_array_size(ex));
  if (json_array_size(ex)) {
    printf("  %4s  %-5s %-10s %-6s %-12s %-16s %7s  %s\n", "ID", "KIND", "MEMORY", "STATE", "JOB/RUN/RANK", "HOST",
           "PID", "HARDWARE");
    json_array_foreach(ex, i, v) {
      char jr[100];
      snprintf(jr, sizeof jr, "%s/%s/%s", fmt_id(b[1], json_object_get(v, "job")),
               fmt_id(b[2], json_object_get(v, "run")), fmt_id(b[3], json_object_get(v, "rank")));
      printf("  %4lld  %-5s %-10s %-6s %-12s %-16s %7lld  %s\n", jint(v, "id"), jstr(v, "kind", "?"),
             aa_client_fmt_bytes(b[0], (double)jint(v, "memory"), json_is_number(json_object_get(v, "memory"))),
             jstr(v, "state", "?"), json_is_number(json_object_get(v, "job")) ? jr : "-", jstr(v, "host", "?"),
             jint(v, "pid"), jstr(v, "hardware", jstr(v, "name", "?")));
    }
  }
  json_t *hosts = json_object_get(root, "hosts");
  if (json_array_size(hosts)) printf("\nhosts: %zu\n", json_array_size(hosts));
  json_array_foreach(hosts, i, v) {
    json_t *hx = json_object_get(v, "executors"), *e;
    size_t k;
    printf("  %s: %zu executor%s\n    %4s  %-5s %-8s  %s\n", jstr(v, "host", "?"), json_array_size(hx),
           json_array_size(hx) == 1 ? "" : "s", "ID", "STATE", "RUN", "DEVICE");
    json_array_foreach(hx, k, e) {
      printf("    %4lld  %-5s %-8s  %s\n", jint(e, "id"),
             json_is_number(json_object_get(e, "run")) ? "busy" : "idle",
             fmt_id(b[0], json_object_get(e, "run")), jstr(e, "device", "?"));
    }
  }
  printf("\nrunning: %s  queue:", fmt_id(b[0], json_object_get(root, "running")));
  if (!json_array_size(queue)) printf(" empty");
  json_array_foreach(queue, i, v) printf(" %s", fmt_id(b[0], v));
  printf("\n");
  json_array_foreach(json_object_get(root, "waiting"), i, v) {
    if (!i) printf("waiting for executors:\n");
    printf("  job %lld: %s since %s\n", jint(v, "job"), jstr(v, "for", "?"), fmt_time(b[0], json_object_get(v, "since")));
  }
  printf("\njobs: %zu recent\n", json_array_size(jobs));
  if (json_array_size(jobs)) {
    printf("  %4s  %-20s %-16s %-11s %-19s  %s\n", "ID", "MODEL", "HASH", "STATUS", "SUBMITTED", "RUNS");
    json_array_foreach(jobs, i, v) {
      json_t *m = json_object_get(v, "model");
      if (!m) {
        printf("  %4lld  (unreadable: %s)\n", jint(v, "id"), jstr(v, "error", "?"));
        continue;
      }
      printf("  %4lld  %-20s %-16s %-11s %-19s  ", jint(v, "id"), jstr(m, "name", "?"), jstr(m, "hash", "?"),
             jstr(v, "status", "?"), fmt_time(b[0], json_object_get(v, "submitted_at")));
      print_run_counts(stdout, json_object_get(v, "runs"));
      if (json_is_true(json_object_get(v, "from_store"))) printf(" from the store");
      printf("\n");
    }
  }
}

static void status_usage(FILE *f) {
  fprintf(f, "usage: autoaccel status [JOB] [--json] [--planner ADDR] [--token-file FILE]\n\n"
             "Without JOB: the planner (version, pid, address, store), its executors, the hosts with\n"
             "their executors (and the run of each busy one), the queue, the jobs waiting for executors\n"
             "(what for, since when) and the 20 newest jobs. With JOB: that job's model, hardware,\n"
             "status, times, options, run counts by status, best run, strategy file and, while it\n"
             "waits for executors, what for.\n\n"
             "options:\n"
             "  --json              print the planner's reply JSON (docs/service.md)\n"
             "  --planner ADDR      unix:PATH or tcp:HOST:PORT (default unix:<state dir>/planner.sock)\n"
             "  --token-file FILE   the planner's token (a mode 0600 file; on TCP the default is\n"
             "                      <state dir>/token, where a planner of that state dir keeps it)\n"
             "  -h, --help          this help\n\n"
             "Exit codes: 0 success, 1 failure (no planner, unknown job), 2 usage.\n");
}

static void cancel_usage(FILE *f) {
  fprintf(f, "usage: autoaccel cancel JOB [--planner ADDR] [--token-file FILE]\n\n"
             "Cancels a queued or running job: its running run is stopped and recorded cancelled.\n\n"
             "options:\n"
             "  --planner ADDR      unix:PATH or tcp:HOST:PORT (default unix:<state dir>/planner.sock)\n"
             "  --token-file FILE   the planner's token (a mode 0600 file; on TCP the default is\n"
             "                      <state dir>/token, where a planner of that state dir keeps it)\n"
             "  -h, --help          this help\n\n"
             "Exit codes: 0 cancelled, 1 failure (no planner, unknown job, job already over), 2 usage.\n");
}

/* Options shared by status and cancel; returns -1 to go on, else an exit code. */
static int parse(const char *cmd, int argc, char **argv, void (*usage)(FILE *), bool allow_json, const char **planner,
                 const char **token_file, bool *json, uint64_t *job, bool job_required) {
  static const struct option longopts[] = {{"planner", required_argument, 0, 'p'},
                                           {"token-file", required_argument, 0, 'k'},
                                           {"json", no_argument, 0, 'j'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': *planner = optarg; break;
    case 'k': *token_file = optarg; break;
    case 'j':
      if (!allow_json) goto bad;
      *json = true;
      break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default:
    bad:
      fprintf(stderr, "autoaccel %s: unknown option or missing value: '%s'\n", cmd, argv[optind - 1]);
      usage(stderr);
      return AA_EXIT_USAGE;
    }
  }
  if (argc - optind > 1 || (job_required && argc - optind != 1)) {
    fprintf(stderr, "autoaccel %s: expected %s JOB\n", cmd, job_required ? "exactly one" : "at most one");
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  if (optind < argc) {
    long long v = aa_cli_parse_int(cmd, "JOB", argv[optind], 1, INT64_MAX);
    if (v < 0) return AA_EXIT_USAGE;
    *job = (uint64_t)v;
  }
  return -1;
}

int aa_cmd_status(int argc, char **argv) {
  const char *planner = NULL, *token_file = NULL;
  bool json = false;
  uint64_t job = 0;
  int code = parse("status", argc, argv, status_usage, true, &planner, &token_file, &json, &job, false);
  if (code >= 0) return code;
  aa_client_t *c;
  char *text;
  if (aa_client_connect(&c, planner, token_file)) return aa_cli_fail("status");
  int rc = aa_client_status(c, job, &text);
  aa_client_close(c);
  if (rc) return aa_cli_fail("status");
  json_t *root;
  code = aa_client_reply_json("status", text, json, &root);
  if (code >= 0) return code;
  if (job) print_job(json_object_get(root, "job"));
  else print_planner(root);
  json_decref(root);
  return AA_EXIT_OK;
}

int aa_cmd_cancel(int argc, char **argv) {
  const char *planner = NULL, *token_file = NULL;
  bool json = false;
  uint64_t job = 0;
  int code = parse("cancel", argc, argv, cancel_usage, false, &planner, &token_file, &json, &job, true);
  if (code >= 0) return code;
  aa_client_t *c;
  if (aa_client_connect(&c, planner, token_file)) return aa_cli_fail("cancel");
  aa_msg_t req = {.type = AA_MSG_CANCEL, .cancel = {.job = job}}, ack;
  int rc = aa_client_request(c, &req, &ack);
  aa_client_close(c);
  if (rc) return aa_cli_fail("cancel");
  aa_msg_free(&ack);
  printf("cancelled job %llu\n", (unsigned long long)job);
  return AA_EXIT_OK;
}
