/* `autoaccel auto MODEL.json`: the one-command path. Starts a planner on a
 * thread of this process (a private unix socket in the state directory) and
 * the local executors as child processes, submits the model like
 * `submit --wait --train`, prints the runs and the outcome, and stops
 * everything again: no socket file and no child are left behind, on
 * failure and on SIGINT/SIGTERM too. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "common/aa.h"
#include "common/mem.h"
#include "common/spec.h"
#include "planner/planner.h"
#include "proto/addr.h"

#define AUTO_EXECUTORS_MAX AA_CLI_DEVICES_MAX
#define AUTO_STOP_GRACE_S 5.0
#define AUTO_REGISTER_S 60 /* for every executor to say hello */

typedef struct auto_ctx {
  pid_t pids[AUTO_EXECUTORS_MAX]; /* executors; 0 once reaped */
  int status[AUTO_EXECUTORS_MAX]; /* their wait status once reaped */
  int n;
  const char *log_path;
} auto_ctx_t;

static void *planner_thread(void *p) {
  aa_planner_run(p);
  return NULL;
}

/* Forks and execs the engine binary (`engine`, cli.h) as `executor` with
 * its output in log_fd: the executors are engine processes, this one (the
 * planner's) never loads the engine. Everything
 * the child does before exec is async-signal-safe: the planner thread may
 * hold locks at the time of the fork. */
static int spawn_executor(pid_t *out, const char *engine, char *const argv[], int log_fd) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return aa_error(AA_EIO, "fork: %s", strerror(errno));
  if (pid == 0) {
    /* Own process group: a Ctrl-C reaches auto, which stops the executors
     * in order; the death signal covers an auto that is killed outright. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(engine, argv);
    _exit(127);
  }
  *out = pid;
  return 0;
}

/* Called while the job runs: fails once an executor has exited. They only
 * exit when something went wrong, and the job would otherwise wait forever
 * for it (a gang of N ranks needs all N). */
static int check_executors(void *data) {
  auto_ctx_t *a = data;
  for (int i = 0; i < a->n; i++) {
    if (!a->pids[i]) continue;
    int st;
    if (waitpid(a->pids[i], &st, WNOHANG) != a->pids[i]) continue;
    a->pids[i] = 0;
    a->status[i] = st;
    if (WIFSIGNALED(st))
      return aa_error(AA_ECONN, "an executor died (signal %d) before the job ended; see %s", WTERMSIG(st),
                      a->log_path);
    return aa_error(AA_ECONN, "an executor exited (status %d) before the job ended; see %s", WEXITSTATUS(st),
                    a->log_path);
  }
  return 0;
}

/* Waits until the planner has all n executors: a job's hardware is the
 * pool connected when it is created, so submitting earlier would search
 * fewer devices than asked for. */
static int wait_for_executors(aa_client_t *client, auto_ctx_t *a, int n) {
  double end = aa_now() + AUTO_REGISTER_S;
  for (;;) {
    char *text = NULL;
    int rc = aa_client_status(client, 0, &text);
    if (rc) return rc;
    json_t *root = json_loads(text, 0, NULL);
    free(text);
    size_t have = json_array_size(json_object_get(root, "executors"));
    json_decref(root);
    if (have >= (size_t)n) return 0;
    if ((rc = check_executors(a))) return rc;
    if (aa_client_interrupted()) return aa_error(AA_ECANCELLED, "interrupted");
    if (aa_now() >= end)
      return aa_error(AA_ETIMEOUT, "only %zu of %d executors registered within %d s; see %s", have, n,
                      AUTO_REGISTER_S, a->log_path);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* SIGTERM to every executor, a grace period, then SIGKILL; all reaped. */
static void stop_executors(auto_ctx_t *a) {
  for (int i = 0; i < a->n; i++)
    if (a->pids[i]) kill(a->pids[i], SIGTERM);
  double end = aa_now() + AUTO_STOP_GRACE_S;
  for (;;) {
    int left = 0;
    for (int i = 0; i < a->n; i++) {
      if (!a->pids[i]) continue;
      pid_t r = waitpid(a->pids[i], &a->status[i], WNOHANG);
      if (r == a->pids[i] || (r < 0 && errno == ECHILD)) a->pids[i] = 0;
      else left++;
    }
    if (!left) return;
    if (aa_now() >= end) break;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  for (int i = 0; i < a->n; i++) {
    if (!a->pids[i]) continue;
    kill(a->pids[i], SIGKILL);
    while (waitpid(a->pids[i], &a->status[i], 0) < 0 && errno == EINTR) {
    }
    a->pids[i] = 0;
  }
}

/* The job whose search measured job `job`'s best run (a job answered from
 * the store ran nothing itself), or 0. */
static long long measured_by(aa_client_t *client, uint64_t job) {
  char *text = NULL, q[64];
  long long by = 0;
  if (aa_client_status(client, job, &text)) return 0;
  json_t *st = json_loads(text, 0, NULL);
  free(text);
  json_t *best = json_object_get(json_object_get(st, "job"), "best_run");
  if (json_is_integer(best)) {
    snprintf(q, sizeof q, "{\"id\": %lld}", (long long)json_integer_value(best));
    text = NULL;
    if (!aa_client_query(client, "run", q, &text)) {
      json_t *r = json_loads(text, 0, NULL);
      json_t *id = json_object_get(json_object_get(r, "run"), "job");
      if (json_is_integer(id) && json_integer_value(id) != (json_int_t)job) by = json_integer_value(id);
      json_decref(r);
    }
    free(text);
  }
  json_decref(st);
  return by;
}

/* OUT/report.html: the page `report JOB --html` writes, made while the
 * planner still runs; its path is the last line. A job answered from the
 * store gets the page of the search that measured its answer. */
static void write_report(aa_client_t *client, uint64_t job, const char *out_dir) {
  char path[AA_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/report.html", out_dir);
  int rc = aa_mkdirs(out_dir);
  if (!rc) rc = aa_client_report_html(client, (long long)job, path, NULL);
  long long by = 0;
  if (rc == AA_EINVAL && (by = measured_by(client, job)) > 0)
    rc = aa_client_report_html(client, by, path, NULL);
  if (rc)
    printf("report: none (%s)\n", aa_last_error());
  else if (by)
    printf("report: %s (job %lld's search, which measured this answer)\n", path, by);
  else
    printf("report: %s\n", path);
  fflush(stdout);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: autoaccel auto MODEL.json [options]\n\n"
          "Finds the fastest way to train MODEL.json on this machine and trains it that way, in one\n"
          "command: starts a planner and executors for the local devices, dry-runs the candidate\n"
          "strategies, prints every run, saves the best as OUT/strategy.json and trains with it.\n"
          "Everything is recorded in the state directory's store, so `autoaccel query` finds it later.\n\n"
          "options:\n"
          "  --devices cpu:N       run N CPU executors (default cpu:1); the search tries data\n"
          "                        parallelism (and ZeRO) over up to N of them\n"
          "  --devices cuda        one executor per visible GPU (CUDA_VISIBLE_DEVICES applies)\n"
          "  --devices cuda:I,J    one executor on each of these CUDA ordinals\n"
          "  --threads N           CPU threads per executor (default: the cores / executors)\n"
          "  --home DIR            state directory (default $AUTOACCEL_HOME, else ~/.autoaccel)\n"
          "  --out DIR             strategy.json and the training outputs (default runs/<model name>)\n"
          "  --exclude M1,M2       methods not to search (e.g. fp16,checkpoint)\n"
          "  --include M1,M2       methods every candidate must use (same names, e.g. zero1,amp)\n"
          "  --from FILE           start from this strategy file: measure it first, then the\n"
          "                        strategies that differ from it in at most 2 knobs, nearest first\n"
          "  --refresh             measure again even if the store has results for this model\n"
          "  --exhaustive          dry-run every strategy that can fit (no search shortcuts)\n"
          "  --max-dryruns N       stop the search after N dry runs (0 = no limit)\n"
          "  --time-limit S        stop the search after S seconds (0 = none)\n"
          "  --warmup-steps N      untimed steps per dry run (default 1)\n"
          "  --measured-steps N    timed steps per dry run (default 4)\n"
          "  --memory-limit BYTES  the executors' memory limit (e.g. 2G); a strategy predicted past it\n"
          "                        is not run, one that goes past it is oom\n"
          "  --cpu-backend B       process groups of CPU gangs: auto (shm on this host; the\n"
          "                        default), gloo (TCP over loopback, as across hosts) or shm\n"
          "  --no-train            search and save the strategy only\n"
          "  -h, --help            this help\n\n"
          "The planner's and executors' log goes to <state dir>/auto-<pid>.log (removed on success).\n"
          "Exit codes: 0 success, 1 failure (bad spec, no strategy could run, training failed,\n"
          "interrupted), 2 usage.\n");
  aa_cli_set_help(f);
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "autoaccel auto: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  usage(stderr);
  return AA_EXIT_USAGE;
}

int aa_cmd_auto(int argc, char **argv) {
  static const struct option longopts[] = {
      {"devices", required_argument, 0, 'd'},      {"threads", required_argument, 0, 't'},
      {"home", required_argument, 0, 'H'},         {"out", required_argument, 0, 'o'},
      {"exclude", required_argument, 0, 'e'},      {"refresh", no_argument, 0, 'r'},
      {"exhaustive", no_argument, 0, 'x'},         {"max-dryruns", required_argument, 0, 'm'},
      {"time-limit", required_argument, 0, 'l'},   {"warmup-steps", required_argument, 0, 'W'},
      {"measured-steps", required_argument, 0, 'S'}, {"memory-limit", required_argument, 0, 'M'},
      {"no-train", no_argument, 0, 'n'},           {"help", no_argument, 0, 'h'},
      {"include", required_argument, 0, 'i'},      {"from", required_argument, 0, 'f'},
      {"cpu-backend", required_argument, 0, 'B'},  {0, 0, 0, 0}};
  aa_submit_opts_t so = {.wait = true, .train = true, .runs_table = true, .embedded = true};
  const char *home_opt = NULL, *memory_limit = NULL, *cpu_backend = NULL;
  aa_cli_devices_t devs = {.n = 1, .cuda = {-1}};
  const char *devices_arg = "cpu:1";
  int threads = 0, warmup = -1, measured = 0, c;
  long long v;
  aa_cli_sets_t sets = {0};
  if (aa_cli_take_sets(&argc, argv, longopts, "auto", &sets)) return AA_EXIT_USAGE;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'd':
      if (aa_cli_parse_devices(optarg, &devs)) return usage_error("%s", aa_last_error());
      devices_arg = optarg;
      break;
    case 't':
      if ((v = aa_cli_parse_int("auto", "--threads", optarg, 1, 1024)) < 0) return AA_EXIT_USAGE;
      threads = (int)v;
      break;
    case 'H': home_opt = optarg; break;
    case 'o': so.out_dir = optarg; break;
    case 'e': so.exclude = optarg; break;
    case 'i': so.include = optarg; break;
    case 'f': so.from = optarg; break;
    case 'r': so.refresh = true; break;
    case 'x': so.exhaustive = true; break;
    case 'm':
      if ((v = aa_cli_parse_int("auto", "--max-dryruns", optarg, 0, 1000000)) < 0) return AA_EXIT_USAGE;
      so.max_dryruns = (int)v;
      break;
    case 'l':
      if ((v = aa_cli_parse_int("auto", "--time-limit", optarg, 0, AA_PROTO_TIME_LIMIT_MAX)) < 0) return AA_EXIT_USAGE;
      so.time_limit_s = (int)v;
      break;
    case 'W':
      if ((v = aa_cli_parse_int("auto", "--warmup-steps", optarg, 0, 1000000)) < 0) return AA_EXIT_USAGE;
      warmup = (int)v;
      break;
    case 'S':
      if ((v = aa_cli_parse_int("auto", "--measured-steps", optarg, 1, 1000000)) < 0) return AA_EXIT_USAGE;
      measured = (int)v;
      break;
    case 'M': {
      size_t bytes;
      if (aa_mem_parse_bytes(optarg, &bytes) || !bytes)
        return usage_error("--memory-limit: expected a positive byte count such as 512M, got '%s'", optarg);
      memory_limit = optarg;
      break;
    }
    case 'B':
      /* The planner's own option and wording: auto passes it on. */
      if (strcmp(optarg, "auto") && strcmp(optarg, "shm") && strcmp(optarg, "gloo"))
        return usage_error("--cpu-backend: expected auto, shm or gloo, got '%s'", optarg);
      cpu_backend = optarg;
      break;
    case 'n': so.train = false; break;
    case 'h': usage(stdout); return AA_EXIT_OK;
    default: return usage_error("unknown option or missing value: '%s'", argv[optind - 1]);
    }
  }
  if (optind != argc - 1) return usage_error("expected exactly one MODEL.json%s", "");
  const char *model_path = argv[optind];
  if (aa_client_check_methods(so.exclude, so.include)) return usage_error("%s", aa_last_error());

  if (aa_cli_resolve_devices(&devs, devices_arg)) return aa_cli_fail("auto");
  const int n_exec = devs.n;
  const bool on_cuda = devs.cuda[0] >= 0;

  aa_model_spec_t spec;
  char home[AA_PATH_MAX], out_dir[AA_PATH_MAX], sock[AA_PATH_MAX], addr[AA_PATH_MAX + 8], log_path[AA_PATH_MAX + 32];
  if (aa_cli_spec_load(&spec, model_path, &sets) || aa_spec_require_planned(&spec, on_cuda, model_path) ||
      aa_spec_require_data(&spec, model_path))
    return aa_cli_fail("auto");
  so.spec = &spec;
  char *from_json = NULL;
  if (so.from && aa_client_load_from(so.from, &spec, &from_json)) return aa_cli_fail("auto");
  free(from_json);
  char rel_out[AA_PATH_MAX];
  if (so.out_dir) snprintf(rel_out, sizeof rel_out, "%s", so.out_dir);
  else snprintf(rel_out, sizeof rel_out, "runs/%s", spec.name);
  if (aa_client_abspath(rel_out, out_dir, sizeof out_dir)) return aa_cli_fail("auto");
  so.out_dir = out_dir;
  if (home_opt) {
    if (aa_client_abspath(home_opt, home, sizeof home)) return aa_cli_fail("auto");
  } else if (aa_home_dir(home, sizeof home)) {
    return aa_cli_fail("auto");
  }
  int pid = (int)getpid();
  if (snprintf(sock, sizeof sock, "%s/auto-%d.sock", home, pid) >= AA_ADDR_PATH_MAX) {
    fprintf(stderr, "autoaccel auto: state directory '%s' is too long for a unix socket path (at most %d bytes): "
                    "pass a shorter --home\n", home, AA_ADDR_PATH_MAX - 1);
    return AA_EXIT_FAIL;
  }
  snprintf(addr, sizeof addr, "unix:%s", sock);
  snprintf(log_path, sizeof log_path, "%s/auto-%d.log", home, pid);
  if (!threads) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    threads = cores > n_exec ? (int)(cores / n_exec) : 1;
  }
  if (aa_mkdirs(home)) return aa_cli_fail("auto");

  /* Everything below is undone at `cleanup`, in reverse. */
  int code = AA_EXIT_FAIL, log_fd = -1;
  FILE *log = NULL;
  aa_planner_t *planner = NULL;
  pthread_t thread;
  bool thread_started = false;
  auto_ctx_t ctx = {.log_path = log_path};
  aa_client_t *client = NULL;

  aa_client_catch_signals();
  /* The embedded planner writes to sockets whose peers may be gone. */
  signal(SIGPIPE, SIG_IGN);
  /* O_NOFOLLOW: a symlink planted at the log's name in a shared home is
   * refused, never written through. */
  log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log_fd < 0 || !(log = fdopen(dup(log_fd), "a"))) {
    fprintf(stderr, "autoaccel auto: cannot write the log %s: %s\n", log_path, strerror(errno));
    goto cleanup;
  }
  setvbuf(log, NULL, _IOLBF, 0);
  /* The embedded planner lives for this one model: it does not resume
   * jobs an earlier stop interrupted (the daemon does), which would make
   * this command wait for another model's search. */
  aa_planner_opts_t po = {.home = home, .socket_path = sock, .warmup_steps = warmup, .measured_steps = measured,
                          .max_resumes = -1, .cpu_backend = cpu_backend, .log = log};
  if (aa_planner_create(&planner, &po)) {
    aa_cli_fail("auto");
    goto cleanup;
  }
  /* The planner thread must not take the signals meant for this one. */
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  int err = pthread_create(&thread, NULL, planner_thread, planner);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    fprintf(stderr, "autoaccel auto: cannot start the planner thread: %s\n", strerror(err));
    goto cleanup;
  }
  thread_started = true;

  char engine[4200];
  if (aa_cli_engine_path(engine, sizeof engine)) {
    aa_cli_fail("auto");
    goto cleanup;
  }
  char threads_s[16];
  snprintf(threads_s, sizeof threads_s, "%d", threads);
  char device_s[32] = "cpu";
  char *eargv[] = {"autoaccel", "executor", "--planner", addr, "--threads", threads_s, "--device", device_s,
                   memory_limit ? "--memory-limit" : NULL, (char *)memory_limit, NULL};
  for (int i = 0; i < n_exec; i++) {
    if (on_cuda) snprintf(device_s, sizeof device_s, "cuda:%d", devs.cuda[i]);
    if (spawn_executor(&ctx.pids[i], engine, eargv, log_fd)) {
      aa_cli_fail("auto");
      goto cleanup;
    }
    ctx.n++;
  }
  printf("auto: planner at %s (state %s), %d %s executor%s with %d thread%s; log %s\n", addr, home, n_exec,
         on_cuda ? "cuda" : "cpu", n_exec > 1 ? "s" : "", threads, threads > 1 ? "s" : "", log_path);
  fflush(stdout);
  if (aa_client_connect(&client, addr, NULL) || wait_for_executors(client, &ctx, n_exec)) {
    aa_cli_fail("auto");
    goto cleanup;
  }
  so.tick = check_executors;
  so.tick_data = &ctx;
  uint64_t job = 0;
  code = aa_client_submit(client, "auto", &so, &job, NULL);
  if (job && !aa_client_interrupted()) write_report(client, job, out_dir);

cleanup:
  aa_client_close(client);
  stop_executors(&ctx);
  if (planner) {
    aa_planner_stop(planner);
    if (thread_started) pthread_join(thread, NULL);
    aa_planner_destroy(planner);
  }
  unlink(sock); /* normally gone with the planner; never left behind */
  if (log) fclose(log);
  if (log_fd >= 0) close(log_fd);
  if (code == AA_EXIT_OK) unlink(log_path);
  else if (log) fprintf(stderr, "autoaccel auto: the planner's and executors' log is %s\n", log_path);
  return code;
}
