/* `autoaccel submit MODEL.json`: send a model to the planner to search (and
 * train), and with --wait relay the job's progress until it ends. The
 * submit-and-wait path is shared with `autoaccel auto` (aa_client_submit). */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "common/spec.h"
#include "eta.h"
#include "report_html.h"
#include "strategies/strategy.h"

/* Progress display: a live line redrawn with \r on a terminal, otherwise
 * plain lines (one per result, a progress line now and then). */
typedef struct relay {
  FILE *f;
  bool live;        /* f is a terminal */
  bool line_drawn;  /* a live line is on screen and must be cleared first */
  uint64_t run;     /* run of the last progress frame */
  bool run_train;   /* that run is the training run */
  double run_t0;    /* when its first progress frame came */
  uint64_t step0;   /* and at which step */
  double last_line; /* when the last plain progress line was printed */
  int results;      /* result frames seen */
  /* The search's ETA (eta.h): from the first dry run's first frame to the
   * last dry run's result, and how many dry runs ended in that time. */
  double search_t0, dry_end;
  long long dry_done;
} relay_t;

static void relay_clear(relay_t *r) {
  if (r->line_drawn) fprintf(r->f, "\r\033[K");
  r->line_drawn = false;
}

static void relay_progress(relay_t *r, const aa_msg_progress_t *p) {
  double now = aa_now();
  bool new_run = p->run != r->run;
  if (new_run) {
    r->run = p->run;
    r->run_t0 = now;
    r->step0 = p->step;
    r->run_train = p->phase && !strcmp(p->phase, "train");
  }
  char eta[32], rate[32], head[64];
  double eta_s = -1;
  if (r->run_train) {
    eta_s = p->step > r->step0 ? aa_eta_steps(p->step - r->step0, now - r->run_t0, p->step, p->total) : -1;
  } else {
    if (!r->search_t0 && p->index) r->search_t0 = now; /* index 0: the calibration, not a dry run */
    long long left = p->count >= p->index && p->index ? (long long)(p->count - p->index + 1) : 0;
    eta_s = aa_eta_search(r->dry_done, r->dry_end - r->search_t0, left,
                          now - (r->dry_done ? r->dry_end : r->search_t0));
  }
  aa_eta_format(eta, eta_s);
  aa_client_fmt_rate(rate, p->tokens_per_s, true);
  if (r->run_train) snprintf(head, sizeof head, "training");
  else if (p->count) snprintf(head, sizeof head, "dry run %llu of %llu", (unsigned long long)p->index,
                              (unsigned long long)p->count);
  else snprintf(head, sizeof head, "run %llu", (unsigned long long)p->run);
  char loss[48] = "";
  if (r->run_train) snprintf(loss, sizeof loss, "  loss %.4f", p->loss);
  char line[512];
  snprintf(line, sizeof line, "%s  %s  %s %llu/%llu%s  %s tok/s  ETA %s", head, p->key ? p->key : "",
           p->phase ? p->phase : "step", (unsigned long long)p->step, (unsigned long long)p->total, loss, rate, eta);
  if (r->live) {
    /* A line wider than the terminal would wrap, and \r could not redraw it. */
    struct winsize ws;
    if (!ioctl(fileno(r->f), TIOCGWINSZ, &ws) && ws.ws_col > 1 && ws.ws_col <= sizeof line) line[ws.ws_col - 1] = '\0';
    fprintf(r->f, "\r\033[K%s", line);
    r->line_drawn = true;
  } else if (new_run || now - r->last_line >= 10) {
    fprintf(r->f, "%s\n", line);
    r->last_line = now;
  }
  fflush(r->f);
}

static const char *run_status_name(aa_proto_run_status_t s) {
  static const char *names[] = {"ok", "oom", "error", "timeout", "crashed", "cancelled"};
  return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static void relay_result(relay_t *r, const aa_msg_result_t *res) {
  relay_clear(r);
  char rate[32], peak[32];
  bool train = res->run == r->run && r->run_train;
  fprintf(r->f, "%s %-9s %-40s", train ? "train " : "dryrun", run_status_name(res->status), res->key ? res->key : "");
  if (res->status == AA_PROTO_RUN_OK) {
    fprintf(r->f, " %10s tok/s  peak %s", aa_client_fmt_rate(rate, res->tokens_per_s, true),
            aa_client_fmt_bytes(peak, (double)res->peak.total, true));
    if (train && res->has_final_loss) fprintf(r->f, "  final loss %.4f", res->final_loss);
  } else if (res->error && *res->error) {
    fprintf(r->f, " %s", res->error);
  }
  fprintf(r->f, "\n");
  fflush(r->f);
  r->results++;
  if (!train && r->search_t0) {
    r->dry_done++;
    r->dry_end = aa_now();
  }
}

static const char *jstr(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static double jnum(const json_t *o, const char *k, bool *present) {
  json_t *v = json_object_get(o, k);
  if (present) *present = json_is_number(v);
  return json_is_number(v) ? json_number_value(v) : 0;
}

/* Prints the end of a waited job from the reply JSON; returns the exit code. */

/* When the training outputs are on this machine (always so for `auto`), the
 * validation loss beside the data's unigram entropy says whether the model
 * learned anything; summary.json written by the runner holds both. */
static void print_validation(const char *dir) {
  if (!dir) return;
  char p[AA_PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/summary.json", dir);
  json_t *s = json_load_file(p, 0, NULL);
  if (!s) return;
  json_t *val = json_object_get(s, "val_loss"), *ent = json_object_get(s, "unigram_entropy");
  if (json_is_number(val) && json_is_number(ent))
    printf("validation loss %.4f (unigram entropy of the data: %.4f nats)\n", json_number_value(val),
           json_number_value(ent));
  json_decref(s);
}

static int print_outcome(aa_client_t *c, const char *cmd, uint64_t job_id, const char *reply, const char *out_dir) {
  json_error_t jerr;
  json_t *root = json_loads(reply, 0, &jerr), *job = NULL, *status_root = NULL;
  if (!json_is_object(root)) {
    json_decref(root);
    fprintf(stderr, "autoaccel %s: the planner's reply is not a JSON object: %s\n", cmd, jerr.text);
    return AA_EXIT_FAIL;
  }
  job = json_object_get(root, "job");
  if (json_is_integer(job)) { /* a planner that names the job only: ask for it */
    char *text;
    if (!aa_client_status(c, (uint64_t)json_integer_value(job), &text)) {
      status_root = json_loads(text, 0, NULL);
      free(text);
      job = json_object_get(status_root, "job");
    }
  }
  const char *status = jstr(job, "status");
  long long id = (long long)job_id;
  json_t *best = json_object_get(root, "best"), *train = json_object_get(root, "train");
  char rate[32], peak[32];
  bool has;
  if (json_is_true(json_object_get(job, "from_store"))) printf("answered from the store (no dry run)\n");
  json_t *runs = json_object_get(job, "runs");
  if (json_is_object(runs) && !json_is_true(json_object_get(job, "from_store"))) {
    printf("job %lld: %lld runs:", id, (long long)jnum(runs, "total", NULL));
    const char *keys[] = {"ok", "oom", "error", "timeout", "crashed", "pruned", "cancelled"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
      long long n = (long long)jnum(runs, keys[i], NULL);
      if (n) printf(" %lld %s", n, keys[i]);
    }
    printf("\n");
  }
  if (json_is_object(best)) {
    double tps = jnum(best, "tokens_per_s", &has);
    aa_client_fmt_rate(rate, tps, has);
    double pk = jnum(best, "peak_bytes", &has);
    printf("best: %s  %s tok/s  peak %s\n", jstr(best, "key") ? jstr(best, "key") : "?", rate,
           aa_client_fmt_bytes(peak, pk, has));
  }
  if (jstr(job, "note")) printf("how sure: %s\n", jstr(job, "note"));
  const char *sfile = jstr(root, "strategy_file");
  if (!sfile) sfile = jstr(job, "strategy_file");
  if (sfile) printf("strategy saved to %s\n", sfile);
  if (out_dir && json_is_object(best)) {
    char p[AA_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/strategy.json", out_dir);
    if ((!sfile || strcmp(p, sfile)) && !access(p, F_OK)) printf("strategy saved to %s\n", p);
  }
  if (json_is_object(train)) {
    const char *ts = jstr(train, "status");
    double loss = jnum(train, "final_loss", &has);
    const char *dir = jstr(json_object_get(job, "options"), "out_dir");
    if (ts && !strcmp(ts, "ok")) {
      printf("trained: %s tok/s", aa_client_fmt_rate(rate, jnum(train, "tokens_per_s", NULL), true));
      if (has) printf(", final loss %.4f", loss);
      printf("%s%s\n", dir ? ", outputs in " : "", dir ? dir : "");
      print_validation(dir);
    } else {
      printf("training %s: %s\n", ts ? ts : "?", jstr(train, "error") ? jstr(train, "error") : "no message");
    }
  }
  int code;
  if (status && !strcmp(status, "done")) {
    printf("job %lld done\n", id);
    code = AA_EXIT_OK;
  } else {
    const char *err = jstr(job, "error");
    fprintf(stderr, "autoaccel %s: job %lld %s: %s\n", cmd, id, status ? status : "ended",
            err ? err : "no strategy could run");
    code = AA_EXIT_FAIL;
  }
  json_decref(status_root);
  json_decref(root);
  return code;
}


/* Prints the pruned runs as one line per reason with how many it pruned,
 * most first. */
static void print_pruned(const json_t *runs) {
  json_t *counts = json_object();
  size_t i, total = 0;
  json_t *r;
  json_array_foreach(runs, i, r) {
    if (strcmp(json_string_value(json_object_get(r, "status")) ?: "", "pruned")) continue;
    char cls[512];
    aa_report_reason_class(json_string_value(json_object_get(r, "error")) ?: "no reason recorded", cls, sizeof cls);
    json_object_set_new(counts, cls, json_integer(json_integer_value(json_object_get(counts, cls)) + 1));
    total++;
  }
  if (total) printf("not run (%zu strategies), by reason:\n", total);
  while (json_object_size(counts)) {
    const char *key, *top = NULL;
    json_t *v;
    json_int_t most = 0;
    json_object_foreach(counts, key, v) if (json_integer_value(v) > most) {
      most = json_integer_value(v);
      top = key;
    }
    printf("  %4lld  %s\n", (long long)most, top);
    json_object_del(counts, top);
  }
  json_decref(counts);
}

/* Prints the runs the job measured as a table, then the strategies it did
 * not run grouped by reason (`query runs --job N` lists each); a failing
 * query is reported and skipped, since the outcome still follows. */
static void print_runs_table(aa_client_t *c, uint64_t job, const char *reply) {
  json_t *args = json_pack("{s:I}", "job", (json_int_t)job), *root = NULL;
  int rc = aa_client_query_pages(c, "runs", args, 0, "runs", &root);
  json_decref(args);
  if (rc) {
    fprintf(stderr, "autoaccel: could not list the runs of job %llu: %s\n", (unsigned long long)job,
            aa_last_error());
    return;
  }
  json_t *runs = json_object_get(root, "runs"), *measured = json_array(), *r;
  size_t i;
  json_array_foreach(runs, i, r) if (strcmp(json_string_value(json_object_get(r, "status")) ?: "", "pruned"))
      json_array_append(measured, r);
  printf("\nruns of job %llu:\n", (unsigned long long)job);
  if (json_array_size(measured)) aa_client_print_runs(stdout, measured, false);
  else if (!json_array_size(runs)) {
    /* No run: answered from the store, or a job that ended before any. */
    json_t *r = json_loads(reply, 0, NULL), *j = json_object_get(r, "job");
    const char *st = json_string_value(json_object_get(j, "status")),
               *err = json_string_value(json_object_get(j, "error"));
    if (json_is_true(json_object_get(j, "from_store")))
      printf("none (answered from the store)\n");
    else if (st && strcmp(st, "done"))
      printf("none: job %llu %s before any run: %s\n", (unsigned long long)job, st,
             err ? err : "no reason given");
    else
      printf("none\n");
    json_decref(r);
  }
  print_pruned(runs);
  if (json_array_size(runs) > json_array_size(measured))
    printf("(each with its reason: autoaccel query runs --job %llu, on this state directory)\n",
           (unsigned long long)job);
  printf("\n");
  json_decref(measured);
  json_decref(root);
}

/* Waits for the ack of submit `id`. The planner creates a job (and acks it)
 * only once an executor is connected, so this waits without a deadline,
 * saying so after a few seconds, and runs the tick meanwhile. */
static int await_ack(aa_client_t *c, const aa_submit_opts_t *o, uint64_t id, uint64_t *job) {
  double start = aa_now(), next_tick = start + 0.5;
  bool noted = false;
  for (;;) {
    aa_msg_t m;
    int rc = aa_client_recv(c, &m, 500);
    if (rc && rc != AA_ETIMEOUT) return rc;
    if (!rc) {
      if (m.type == AA_MSG_ERROR && (m.id == id || m.id == 0)) return aa_client_error(&m);
      bool done = m.type == AA_MSG_ACK && m.id == id;
      if (done) *job = m.ack.job;
      bool bye = m.type == AA_MSG_BYE;
      aa_msg_free(&m);
      if (done) return 0;
      if (bye) return aa_error(AA_ECONN, "the planner at %s is shutting down", aa_client_address(c));
    }
    double now = aa_now();
    if (o->tick && now >= next_tick) {
      next_tick = now + 0.5;
      if ((rc = o->tick(o->tick_data))) return rc;
    }
    if (!noted && now - start >= 3) {
      fprintf(stderr, "waiting for the planner to accept the job (is an executor connected?)\n");
      noted = true;
    }
  }
}

/* Reads the frames of a waited submit until its reply; *reply receives the
 * JSON text (transferred). */
static int wait_job(aa_client_t *c, const aa_submit_opts_t *o, uint64_t id, relay_t *r, char **reply) {
  double next_tick = aa_now() + 0.5;
  for (;;) {
    aa_msg_t m;
    int rc = aa_client_recv(c, &m, 500);
    if (o->tick && aa_now() >= next_tick) {
      next_tick = aa_now() + 0.5;
      int trc = o->tick(o->tick_data);
      if (trc) {
        if (!rc) aa_msg_free(&m);
        return trc;
      }
    }
    if (rc == AA_ETIMEOUT) continue;
    if (rc) return rc;
    switch (m.type) {
    case AA_MSG_PROGRESS: relay_progress(r, &m.progress); break;
    case AA_MSG_RESULT: relay_result(r, &m.result); break;
    case AA_MSG_REPLY:
      if (m.id == id) {
        *reply = m.reply.json;
        m.reply.json = NULL;
        aa_msg_free(&m);
        return 0;
      }
      break;
    case AA_MSG_ERROR:
      rc = aa_error(m.error.code < 0 && m.error.code >= -1000 ? m.error.code : AA_EINTERNAL, "%s",
                    m.error.message ? m.error.message : "error");
      aa_msg_free(&m);
      return rc;
    case AA_MSG_BYE:
      aa_msg_free(&m);
      return aa_error(AA_ECONN, "the planner at %s shut down before the job ended", aa_client_address(c));
    default: break;
    }
    aa_msg_free(&m);
  }
}

int aa_client_load_from(const char *path, const aa_model_spec_t *spec, char **json) {
  aa_strategy_t s, r;
  if (aa_strategy_load(&s, path)) return AA_EINVAL;
  r = s;
  if (aa_strategy_resolve(&r, spec, (int)aa_strategy_world(&r)))
    return aa_error_wrap(AA_EINVAL, "--from %s: the strategy does not fit model %s", path, spec->name);
  return aa_strategy_to_json(&s, json);
}

int aa_client_submit(aa_client_t *c, const char *cmd, const aa_submit_opts_t *o, uint64_t *job_out, char **reply_out) {
  char *model = NULL, out_dir[AA_PATH_MAX], *reply = NULL, *from = NULL;
  aa_msg_strlist_t exclude = {0}, include = {0};
  int code = AA_EXIT_FAIL, rc;
  if (aa_spec_to_json(o->spec, &model) ||
      (o->exclude && aa_client_split_list(o->exclude, "--exclude", &exclude)) ||
      (o->include && aa_client_split_list(o->include, "--include", &include)) ||
      (o->from && aa_client_load_from(o->from, o->spec, &from)) ||
      (o->out_dir && aa_client_abspath(o->out_dir, out_dir, sizeof out_dir))) {
    free(model);
    aa_client_strlist_free(&exclude);
    aa_client_strlist_free(&include);
    free(from);
    return aa_cli_fail(cmd);
  }
  aa_msg_t req = {.type = AA_MSG_SUBMIT,
                  .submit = {.model = model, .wait = o->wait, .train = o->train, .refresh = o->refresh,
                             .time_limit_s = o->time_limit_s, .exclude = exclude, .max_dryruns = o->max_dryruns,
                             .exhaustive = o->exhaustive, .out_dir = o->out_dir ? out_dir : NULL,
                             .include = include, .from = from}};
  uint64_t job = 0;
  rc = aa_client_send(c, &req);
  free(model);
  free(from);
  aa_client_strlist_free(&exclude);
  aa_client_strlist_free(&include);
  if (!rc) rc = await_ack(c, o, req.id, &job);
  if (rc == AA_ECANCELLED && aa_client_interrupted()) {
    fprintf(stderr, "autoaccel %s: interrupted before the planner accepted the job\n", cmd);
    return AA_EXIT_FAIL;
  }
  if (rc) return aa_cli_fail(cmd);
  if (job_out) *job_out = job;
  if (!o->wait) {
    if (o->json) printf("{\"job\": %llu}\n", (unsigned long long)job);
    else printf("submitted job %llu\n", (unsigned long long)job);
    return AA_EXIT_OK;
  }
  relay_t r = {.f = o->json ? stderr : stdout};
  r.live = isatty(fileno(r.f));
  fprintf(r.f, "job %llu: %s submitted to %s\n", (unsigned long long)job, o->spec->name, aa_client_address(c));
  fflush(r.f);
  rc = wait_job(c, o, req.id, &r, &reply);
  relay_clear(&r);
  fflush(r.f);
  if (rc == AA_ECANCELLED && aa_client_interrupted() && o->embedded) {
    fprintf(stderr, "autoaccel %s: interrupted: stopping job %llu\n", cmd, (unsigned long long)job);
    return AA_EXIT_FAIL;
  }
  if (rc == AA_ECANCELLED && aa_client_interrupted()) {
    fprintf(stderr, "autoaccel %s: interrupted; job %llu goes on in the planner (autoaccel cancel %llu stops it)\n",
            cmd, (unsigned long long)job, (unsigned long long)job);
    return AA_EXIT_FAIL;
  }
  if (rc) return aa_cli_fail(cmd);
  if (o->json) {
    printf("%s\n", reply);
    json_t *root = json_loads(reply, 0, NULL);
    const char *st = json_string_value(json_object_get(json_object_get(root, "job"), "status"));
    code = !st || !strcmp(st, "done") ? AA_EXIT_OK : AA_EXIT_FAIL;
    json_decref(root);
  } else {
    if (o->runs_table) print_runs_table(c, job, reply);
    code = print_outcome(c, cmd, job, reply, o->out_dir ? out_dir : NULL);
  }
  if (reply_out) *reply_out = reply;
  else free(reply);
  return code;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: autoaccel submit MODEL.json [--wait] [--train] [options]\n\n"
          "Validates MODEL.json here, then sends it to the planner, which dry-runs the training\n"
          "strategies on its executors, records every run in its store and saves the fastest as a\n"
          "strategy file (and trains with it when --train is given).\n\n"
          "options:\n"
          "  --wait              stay until the job ends: show its progress, each finished run, the\n"
          "                      best strategy and the training result\n"
          "  --train             train with the best strategy after the search\n"
          "  --refresh           measure again even if the store has results for this model\n"
          "  --exhaustive        dry-run every strategy that can fit (no search shortcuts)\n"
          "  --exclude M1,M2     methods not to search (e.g. fp16,checkpoint,zero3)\n"
          "  --include M1,M2     methods every candidate must use (same names, e.g. zero1,amp)\n"
          "  --from FILE         start from this strategy file: measure it first, then the\n"
          "                      strategies that differ from it in at most 2 knobs, nearest first\n"
          "  --max-dryruns N     stop the search after N dry runs (0 = no limit)\n"
          "  --time-limit S      stop the search after S seconds (0 = none)\n"
          "  --out DIR           write strategy.json and the training outputs to DIR\n"
          "  --planner ADDR      unix:PATH or tcp:HOST:PORT (default unix:<state dir>/planner.sock)\n"
          "  --token-file FILE   the planner's token (a mode 0600 file; on TCP the default is\n"
             "                      <state dir>/token, where a planner of that state dir keeps it)\n"
          "  --json              print the planner's reply as JSON ({\"job\": N} without --wait)\n"
          "  -h, --help          this help\n\n"
          "Without --wait prints \"submitted job N\". The state directory is $AUTOACCEL_HOME, else\n"
          "~/.autoaccel. Exit codes: 0 submitted (with --wait: the job is done), 1 failure (bad spec,\n"
          "no planner, the job failed), 2 usage.\n");
  aa_cli_set_help(f);
}

int aa_cmd_submit(int argc, char **argv) {
  static const struct option longopts[] = {
      {"wait", no_argument, 0, 'w'},         {"train", no_argument, 0, 'T'},
      {"refresh", no_argument, 0, 'r'},      {"exhaustive", no_argument, 0, 'x'},
      {"exclude", required_argument, 0, 'e'}, {"max-dryruns", required_argument, 0, 'm'},
      {"include", required_argument, 0, 'i'}, {"from", required_argument, 0, 'f'},
      {"time-limit", required_argument, 0, 'l'}, {"out", required_argument, 0, 'o'},
      {"planner", required_argument, 0, 'p'}, {"token-file", required_argument, 0, 'k'},
      {"json", no_argument, 0, 'j'},         {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  aa_submit_opts_t o = {0};
  const char *planner = NULL, *token_file = NULL;
  long long v;
  int c;
  aa_cli_sets_t sets = {0};
  if (aa_cli_take_sets(&argc, argv, longopts, "submit", &sets)) return AA_EXIT_USAGE;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'w': o.wait = true; break;
    case 'T': o.train = true; break;
    case 'r': o.refresh = true; break;
    case 'x': o.exhaustive = true; break;
    case 'e': o.exclude = optarg; break;
    case 'i': o.include = optarg; break;
    case 'f': o.from = optarg; break;
    case 'm':
      if ((v = aa_cli_parse_int("submit", "--max-dryruns", optarg, 0, 1000000)) < 0) return AA_EXIT_USAGE;
      o.max_dryruns = (int)v;
      break;
    case 'l':
      if ((v = aa_cli_parse_int("submit", "--time-limit", optarg, 0, AA_PROTO_TIME_LIMIT_MAX)) < 0)
        return AA_EXIT_USAGE;
      o.time_limit_s = (int)v;
      break;
    case 'o': o.out_dir = optarg; break;
    case 'p': planner = optarg; break;
    case 'k': token_file = optarg; break;
    case 'j': o.json = true; break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default:
      fprintf(stderr, "autoaccel submit: unknown option or missing value: '%s'\n", argv[optind - 1]);
      usage(stderr);
      return AA_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "autoaccel submit: expected exactly one MODEL.json\n");
    usage(stderr);
    return AA_EXIT_USAGE;
  }
  const char *model_path = argv[optind];
  if (aa_client_check_methods(o.exclude, o.include)) { /* a usage error, before any file or socket is touched */
    fprintf(stderr, "autoaccel submit: %s\n", aa_last_error());
    return AA_EXIT_USAGE;
  }
  /* The spec is checked before connecting, so a bad file says so even when
   * no planner runs. */
  aa_model_spec_t spec;
  if (aa_cli_spec_load(&spec, model_path, &sets) || aa_spec_require_data(&spec, model_path))
    return aa_cli_fail("submit");
  o.spec = &spec;
  char *from_json = NULL;
  if (o.from && aa_client_load_from(o.from, &spec, &from_json)) return aa_cli_fail("submit");
  free(from_json);
  aa_client_t *cl;
  if (aa_client_connect(&cl, planner, token_file)) return aa_cli_fail("submit");
  if (o.wait) aa_client_catch_signals();
  int code = aa_client_submit(cl, "submit", &o, NULL, NULL);
  aa_client_close(cl);
  return code;
}
