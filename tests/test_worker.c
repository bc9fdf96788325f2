/* The executor process (executor/worker*.c) against a planner played by
 * this test on a unix socket: hello, heartbeats, every way a run can end,
 * busy, a bad frame, a lost planner, SIGTERM and a refused token; and two
 * executors as one gang (a data-parallel run whose ranks meet at a
 * rendezvous, an abort, a killed rank; a gloo gang whose ranks meet
 * through the relay this test plays). The executors run as real child
 * processes and fork real runners. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"
#include "common/rendezvous.h"
#include "common/spec.h"
#include "engine/data.h"
#include "engine/train.h"
#include "executor/worker.h"
#include "executor/worker_internal.h"
#include "proto/msg.h"
#include "strategies/calib.h"
#include "strategies/strategy.h"

static char tmpdir[256], sock_path[300], model_json_path[300];
/* --host and --address of the next start_worker (NULL: the defaults). */
static const char *worker_host, *worker_address;
static char *model_json, *strategy_json;

static int listen_unix(void) {
  unlink(sock_path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(sock_path) >= sizeof a.sun_path) return -1;
  memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4)) {
    perror("listen");
    close(fd);
    return -1;
  }
  return fd;
}

static int accept_within(int lfd, int ms) {
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  if (poll(&p, 1, ms) != 1) return -1;
  return accept(lfd, NULL, NULL);
}

/* The executor under test, in a child process; exits 1 when run fails. */
static pid_t start_worker(const char *token_file, size_t memory_limit) {
  fflush(stderr);
  pid_t pid = fork();
  if (pid) return pid;
  char addr[320];
  snprintf(addr, sizeof addr, "unix:%s", sock_path);
  FILE *log = fopen("/dev/null", "w");
  aa_worker_opts_t o = {.planner = addr,
                        .threads = 1,
                        .token_file = token_file,
                        .memory_limit = memory_limit,
                        .host = worker_host,
                        .address = worker_address,
                        .log = getenv("AA_TEST_VERBOSE") ? stderr : log};
  aa_worker_t *w;
  int rc = aa_worker_create(&w, &o);
  if (!rc) {
    aa_worker_handle_signals(w);
    rc = aa_worker_run(w);
    aa_worker_destroy(w);
  }
  fclose(log);
  /* exit, not _exit: under the sanitizers the leak check runs on the executor too. */
  exit(rc ? 1 : 0);
}

typedef struct {
  int fd;
  aa_frame_reader_t r;
  char buf[65536];
  size_t off, len;
} peer_t;

static void peer_init(peer_t *p, int fd) {
  memset(p, 0, sizeof *p);
  p->fd = fd;
  aa_frame_reader_init(&p->r, 0);
}

static void peer_close(peer_t *p) {
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
  aa_frame_reader_free(&p->r);
}

/* Next message within ms: 1, or 0 on timeout, -1 on EOF or a bad frame. */
static int recv_msg(peer_t *p, aa_msg_t *m, int ms) {
  double end = aa_now() + ms / 1e3;
  for (;;) {
    while (p->off < p->len) {
      size_t used, plen;
      const void *payload;
      int rc = aa_frame_reader_feed(&p->r, p->buf + p->off, p->len - p->off, &used, &payload, &plen);
      if (rc < 0) return -1;
      p->off += used;
      if (rc == 1) return aa_msg_decode(payload, plen, m) ? -1 : 1;
    }
    int left = (int)((end - aa_now()) * 1e3);
    if (left <= 0) return 0;
    struct pollfd pf = {.fd = p->fd, .events = POLLIN};
    if (poll(&pf, 1, left) != 1) return 0;
    ssize_t n = read(p->fd, p->buf, sizeof p->buf);
    if (n <= 0) return -1;
    p->off = 0;
    p->len = (size_t)n;
  }
}

/* Encodes m and writes it whole: 1, or 0 (an encode failure is printed). */
static int write_msg(peer_t *p, const aa_msg_t *m) {
  char *buf;
  size_t len;
  if (aa_msg_encode(m, &buf, &len)) {
    fprintf(stderr, "encode: %s\n", aa_last_error());
    return 0;
  }
  int ok = write(p->fd, buf, len) == (ssize_t)len;
  free(buf);
  return ok;
}

/* Next message that is not a heartbeat; *job_beats counts heartbeats naming
 * a job. Each heartbeat is answered with one, as a planner's own beats would
 * keep the executor from taking this side for dead (10 silent beats) while
 * a test waits on a long run. The echo's write is not checked: the executor
 * may close right after its beat. */
static int recv_non_beat(peer_t *p, aa_msg_t *m, int ms, int *job_beats) {
  for (;;) {
    int rc = recv_msg(p, m, ms);
    if (rc != 1 || m->type != AA_MSG_HEARTBEAT) return rc;
    if (job_beats && m->heartbeat.job) (*job_beats)++;
    aa_msg_free(m);
    aa_msg_t beat = {.type = AA_MSG_HEARTBEAT};
    (void)write_msg(p, &beat);
  }
}

static void send_msg(peer_t *p, const aa_msg_t *m) { CHECK(write_msg(p, m)); }

/* Accepts the executor, checks its hello (from pid `worker`; 0 = any), welcomes it (heartbeat 100 ms). */
static int welcome(int lfd, peer_t *p, pid_t worker, int ms) {
  int fd = accept_within(lfd, ms);
  CHECK(fd >= 0);
  if (fd < 0) return -1;
  peer_init(p, fd);
  aa_msg_t m;
  CHECK(recv_msg(p, &m, 5000) == 1);
  CHECK(m.type == AA_MSG_HELLO);
  if (m.type != AA_MSG_HELLO) return -1;
  CHECK(m.hello.role == AA_PROTO_ROLE_EXECUTOR && m.hello.has_device);
  CHECK(m.hello.device.kind == AA_PROTO_DEV_CPU && m.hello.device.index == 0);
  CHECK_MSG(strstr(m.hello.device.name, " (1 threads)") != NULL, "%s", m.hello.device.name);
  CHECK(m.hello.device.memory > 0 && (!worker || m.hello.device.pid == worker) && m.hello.device.host[0]);
  CHECK_MSG(!worker_host || !strcmp(m.hello.device.host, worker_host), "host %s", m.hello.device.host);
  aa_msg_free(&m);
  aa_msg_t w = {.type = AA_MSG_WELCOME};
  w.welcome.peer_id = 1;
  w.welcome.heartbeat_ms = 100;
  send_msg(p, &w);
  return 0;
}

static uint64_t next_run = 1;

/* A job message of one rank, the next run; its strings are borrowed. */
static aa_msg_t job_msg(uint64_t job, int kind, const char *model, const char *strategy, uint64_t measured,
                        int time_limit, uint64_t memory_limit, const char *out_dir) {
  aa_msg_t m = {.type = AA_MSG_JOB, .id = job};
  m.job = (aa_msg_job_t){.job = job,
                         .run = next_run++,
                         .kind = kind,
                         .model = (char *)model,
                         .strategy = (char *)strategy,
                         .warmup_steps = 1,
                         .measured_steps = measured,
                         .time_limit_s = time_limit,
                         .memory_limit = memory_limit,
                         .world = 1,
                         .out_dir = (char *)out_dir};
  return m;
}

static void send_job(peer_t *p, uint64_t job, int kind, const char *model, const char *strategy,
                     uint64_t measured, int time_limit, uint64_t memory_limit, const char *out_dir) {
  aa_msg_t m = job_msg(job, kind, model, strategy, measured, time_limit, memory_limit, out_dir);
  send_msg(p, &m);
}

/* Waits for the result of job (progress frames counted into *progress). */
static int wait_result(peer_t *p, uint64_t job, aa_msg_t *res, int *progress, int ms) {
  for (;;) {
    aa_msg_t m;
    int rc = recv_non_beat(p, &m, ms, NULL);
    CHECK(rc == 1);
    if (rc != 1) return -1;
    if (m.type == AA_MSG_PROGRESS) {
      CHECK(m.progress.job == job && m.progress.step <= m.progress.total);
      if (progress) (*progress)++;
      aa_msg_free(&m);
      continue;
    }
    CHECK_MSG(m.type == AA_MSG_RESULT, "got %s", aa_msg_type_name(m.type));
    CHECK(m.result.job == job);
    *res = m;
    return m.type == AA_MSG_RESULT ? 0 : -1;
  }
}

/* The runner child of the executor (the one child it has while a job runs). */
static pid_t runner_of(pid_t worker) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)worker, (int)worker);
  for (int i = 0; i < 100; i++) {
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
      if (fscanf(f, "%d", &pid) != 1) pid = 0;
      fclose(f);
    }
    if (pid > 0) return pid;
    usleep(20000);
  }
  return 0;
}

static void wait_first_progress(peer_t *p) {
  aa_msg_t m;
  CHECK(recv_non_beat(p, &m, 20000, NULL) == 1);
  CHECK(m.type == AA_MSG_PROGRESS && m.progress.step == 1 && !strcmp(m.progress.phase, "warmup"));
  aa_msg_free(&m);
}

AA_TEST(every_way_a_run_ends_is_reported_and_the_executor_survives) {
  int lfd = listen_unix();
  pid_t w = start_worker(NULL, 0);
  peer_t p;
  if (welcome(lfd, &p, w, 10000)) goto out;
  aa_msg_t m, res;
  CHECK(recv_msg(&p, &m, 2000) == 1);
  CHECK(m.type == AA_MSG_HEARTBEAT && m.heartbeat.job == 0);
  aa_msg_free(&m);

  /* ok: progress for the first and last step, heartbeats naming the job. */
  send_job(&p, 1, AA_PROTO_JOB_DRYRUN, model_json, strategy_json, 3, 0, 0, NULL);
  int progress = 0, first = 0, last = 0, beats = 0;
  for (;;) {
    CHECK(recv_non_beat(&p, &m, 30000, &beats) == 1);
    if (m.type != AA_MSG_PROGRESS) break;
    first += m.progress.step == 1 && !strcmp(m.progress.phase, "warmup");
    last += m.progress.step == 4 && m.progress.total == 4 && !strcmp(m.progress.phase, "measure");
    progress++;
    aa_msg_free(&m);
  }
  CHECK(first == 1 && last == 1);
  CHECK(m.type == AA_MSG_RESULT && m.result.job == 1 && m.result.status == AA_PROTO_RUN_OK);
  CHECK(m.result.tokens_per_s > 0 && m.result.step_ms_median > 0 && m.result.peak.total > 0);
  CHECK(m.result.peak.acts > 0 && m.result.has_final_loss && !m.result.error);
  /* A single process is rank 0 at (0, 0, 0) and sends its breakdown. */
  CHECK(m.result.rank == 0 && m.result.coord[AA_AXIS_DATA] == 0 && m.result.coord[AA_AXIS_TENSOR] == 0 &&
        m.result.coord[AA_AXIS_PIPELINE] == 0);
  CHECK(m.result.has_times);
  aa_msg_free(&m);

  /* busy, then cancelled */
  send_job(&p, 2, AA_PROTO_JOB_DRYRUN, model_json, strategy_json, 100000, 0, 0, NULL);
  wait_first_progress(&p);
  send_job(&p, 3, AA_PROTO_JOB_DRYRUN, model_json, strategy_json, 3, 0, 0, NULL);
  CHECK(recv_non_beat(&p, &m, 5000, NULL) == 1);
  while (m.type == AA_MSG_PROGRESS) {
    aa_msg_free(&m);
    CHECK(recv_non_beat(&p, &m, 5000, NULL) == 1);
  }
  CHECK(m.type == AA_MSG_ERROR && m.id == 3 && m.error.code == AA_EINVAL);
  CHECK_MSG(m.type == AA_MSG_ERROR && strstr(m.error.message, "executor busy with job 2"), "%s",
            m.type == AA_MSG_ERROR ? m.error.message : "");
  aa_msg_free(&m);
  aa_msg_t cancel = {.type = AA_MSG_CANCEL};
  cancel.cancel.job = 2;
  send_msg(&p, &cancel);
  if (!wait_result(&p, 2, &res, NULL, 10000)) {
    CHECK(res.result.status == AA_PROTO_RUN_CANCELLED);
    aa_msg_free(&res);
  }

  /* crashed: kill -9 of the runner */
  send_job(&p, 4, AA_PROTO_JOB_DRYRUN, model_json, strategy_json, 100000, 0, 0, NULL);
  wait_first_progress(&p);
  pid_t r = runner_of(w);
  CHECK(r > 0);
  if (r > 0) kill(r, SIGKILL);
  if (!wait_result(&p, 4, &res, NULL, 10000)) {
    CHECK(res.result.status == AA_PROTO_RUN_CRASHED);
    CHECK_MSG(res.result.error && !strcmp(res.result.error, "runner killed by signal 9 (Killed)"), "%s",
              res.result.error ? res.result.error : "(none)");
    CHECK(!res.result.has_times); /* nothing timed reached the executor */
    aa_msg_free(&res);
  }

  /* timeout */
  send_job(&p, 5, AA_PROTO_JOB_DRYRUN, model_json, strategy_json, 100000, 1, 0, NULL);
  if (!wait_result(&p, 5, &res, NULL, 10000)) {
    CHECK(res.result.status == AA_PROTO_RUN_TIMEOUT);
    aa_msg_free(&res);
  }

  /* oom, with the accountant's message */
  send_job(&p, 6, AA_PROTO_JOB_DRYRUN, model_json, strategy_json, 2, 0, 65536, NULL);
  if (!wait_result(&p, 6, &res, NULL, 10000)) {
    CHECK(res.result.status == AA_PROTO_RUN_OOM);
    CHECK_MSG(res.result.error && strstr(res.result.error, "out of memory"), "%s",
              res.result.error ? res.result.error : "(none)");
    aa_msg_free(&res);
  }

  /* error: a strategy the engine refuses, a model that does not parse */
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.micro_batch = 3;
  char *bad_strategy;
  CHECK(aa_strategy_to_json(&st, &bad_strategy) == 0);
  send_job(&p, 7, AA_PROTO_JOB_DRYRUN, model_json, bad_strategy, 2, 0, 0, NULL);
  free(bad_strategy);
  if (!wait_result(&p, 7, &res, NULL, 10000)) {
    CHECK(res.result.status == AA_PROTO_RUN_ERROR);
    CHECK(res.result.error && strstr(res.result.error, "micro_batch"));
    CHECK(!res.result.inputs); /* another strategy may run */
    aa_msg_free(&res);
  }
  /* error on the inputs: the data is gone, which no strategy changes */
  aa_model_spec_t gone;
  char *gone_json = NULL;
  CHECK(aa_spec_parse(&gone, model_json, NULL, "test") == 0);
  snprintf(gone.train_data, sizeof gone.train_data, "%s/no-such-train.bin", tmpdir);
  CHECK(aa_spec_to_json(&gone, &gone_json) == 0);
  send_job(&p, 11, AA_PROTO_JOB_DRYRUN, gone_json, strategy_json, 2, 0, 0, NULL);
  free(gone_json);
  if (!wait_result(&p, 11, &res, NULL, 10000)) {
    CHECK(res.result.status == AA_PROTO_RUN_ERROR && res.result.inputs);
    CHECK_MSG(res.result.error && strstr(res.result.error, "training data: ") &&
                  strstr(res.result.error, "no-such-train.bin"),
              "%s", res.result.error ? res.result.error : "(none)");
    aa_msg_free(&res);
  }
  send_job(&p, 8, AA_PROTO_JOB_DRYRUN, "{\"name\": 5}", strategy_json, 2, 0, 0, NULL);
  if (!wait_result(&p, 8, &res, NULL, 10000)) {
    CHECK(res.result.status == AA_PROTO_RUN_ERROR);
    CHECK_MSG(res.result.error && strstr(res.result.error, "job 8 model"), "%s",
              res.result.error ? res.result.error : "(none)");
    aa_msg_free(&res);
  }

  /* train: the outputs of `autoaccel train` under out_dir */
  char out[400], path[500];
  snprintf(out, sizeof out, "%s/train9", tmpdir);
  send_job(&p, 9, AA_PROTO_JOB_TRAIN, model_json, strategy_json, 3, 0, 0, out);
  if (!wait_result(&p, 9, &res, NULL, 30000)) {
    CHECK_MSG(res.result.status == AA_PROTO_RUN_OK, "%s", res.result.error ? res.result.error : "");
    CHECK(res.result.has_final_loss);
    aa_msg_free(&res);
  }
  const char *files[] = {"train.log", "losses.txt", "summary.json", "final.ckpt"};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", out, files[i]);
    CHECK_MSG(access(path, F_OK) == 0, "%s", path);
  }
  snprintf(path, sizeof path, "%s/losses.txt", out);
  FILE *f = fopen(path, "r");
  int lines = 0;
  for (int ch; f && (ch = fgetc(f)) != EOF;)
    lines += ch == '\n';
  if (f) fclose(f);
  CHECK(lines == 3);

  /* train into a directory that belongs to someone else than the job's
   * user: the runner refuses it before writing anything there */
  snprintf(out, sizeof out, "%s/train10", tmpdir);
  CHECK(mkdir(out, 0777) == 0);
  uid_t other = geteuid() == 65534 ? 65533 : 65534;
  aa_msg_t j10 = job_msg(10, AA_PROTO_JOB_TRAIN, model_json, strategy_json, 3, 0, 0, out);
  j10.job.has_owner = true;
  j10.job.owner = other;
  send_msg(&p, &j10);
  if (!wait_result(&p, 10, &res, NULL, 30000)) {
    char want[128];
    snprintf(want, sizeof want, "belongs to uid %u, not to the job's user (uid %u)", (unsigned)geteuid(),
             (unsigned)other);
    CHECK(res.result.status == AA_PROTO_RUN_ERROR);
    CHECK_MSG(res.result.error && strstr(res.result.error, want), "%s", res.result.error ? res.result.error : "");
    aa_msg_free(&res);
  }
  snprintf(path, sizeof path, "%s/train.log", out);
  CHECK(access(path, F_OK) != 0);

  /* a frame that does not decode: an error reply, then a new connection */
  unsigned char junk[] = {0, 0, 0, 1, 0xc1};
  CHECK(write(p.fd, junk, sizeof junk) == (ssize_t)sizeof junk);
  CHECK(recv_non_beat(&p, &m, 5000, NULL) == 1);
  CHECK(m.type == AA_MSG_ERROR && m.error.code == AA_EPARSE);
  aa_msg_free(&m);
  CHECK(recv_non_beat(&p, &m, 5000, NULL) == -1);
  peer_close(&p);
  if (welcome(lfd, &p, w, 10000)) goto out;

  /* planner lost while a run goes on: the runner is stopped, the executor comes back */
  send_job(&p, 10, AA_PROTO_JOB_DRYRUN, model_json, strategy_json, 100000, 0, 0, NULL);
  wait_first_progress(&p);
  r = runner_of(w);
  peer_close(&p);
  if (welcome(lfd, &p, w, 10000)) goto out;
  CHECK(r > 0 && kill(r, 0) != 0);

  /* SIGTERM: bye, exit 0 */
  kill(w, SIGTERM);
  CHECK(recv_non_beat(&p, &m, 5000, NULL) == 1);
  CHECK(m.type == AA_MSG_BYE);
  aa_msg_free(&m);
  int status;
  CHECK(waitpid(w, &status, 0) == w);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  w = 0;
out:
  if (w) {
    kill(w, SIGKILL);
    waitpid(w, NULL, 0);
  }
  peer_close(&p);
  close(lfd);
}

/* Rank `rank` of a world-2 dry run of `measured` steps, run `run` of job `job`. */
static void send_rank(peer_t *p, uint64_t job, uint64_t run, const char *strategy, int rank, const char *rdv,
                      uint64_t measured) {
  aa_msg_t m = {.type = AA_MSG_JOB, .id = run};
  m.job = (aa_msg_job_t){.job = job,
                         .run = run,
                         .kind = AA_PROTO_JOB_DRYRUN,
                         .model = model_json,
                         .strategy = (char *)strategy,
                         .warmup_steps = 1,
                         .measured_steps = measured,
                         .rank = rank,
                         .world = 2,
                         .rendezvous = (char *)rdv};
  send_msg(p, &m);
}

/* A calibrate job for rank `rank` of `world` (rdv: the gang's; NULL alone). */
static void send_calibrate(peer_t *p, uint64_t job, uint64_t run, int rank, int world, const char *rdv) {
  aa_msg_t m = {.type = AA_MSG_JOB, .id = run};
  m.job = (aa_msg_job_t){.job = job,
                         .run = run,
                         .kind = AA_PROTO_JOB_CALIBRATE,
                         .model = model_json,
                         .strategy = strategy_json,
                         .measured_steps = 1,
                         .time_limit_s = 60,
                         .rank = rank,
                         .world = world,
                         .rendezvous = (char *)rdv};
  send_msg(p, &m);
}

/* The planner's relay (planner/relay.c) as this test plays it, for one
 * run: it keeps what the ranks set, answers a get once its key is set,
 * only to the executor that asked, with the get's id and tagged with the
 * run. `bogus` sends each answer a twin first, tagged with another run
 * and carrying a value no rank could use; `refuse` answers the first get
 * with an error frame instead. */
#define RELAY_MAX 32
typedef struct {
  char *key;
  void *value;
  size_t n;
} relay_key_t;
typedef struct {
  int who; /* the index in p of the executor that asked */
  uint64_t id;
  char *key;
} relay_wait_t;
typedef struct {
  uint64_t run;
  bool bogus, refuse;
  int nkeys, nwaits, sets, gets, refused;
  relay_key_t keys[RELAY_MAX];
  relay_wait_t waits[RELAY_MAX];
} relay_t;

static void relay_answer(peer_t *p, const relay_t *rl, uint64_t id, const char *key, const void *value,
                         size_t n) {
  aa_msg_t m = {.type = AA_MSG_KV_VALUE, .id = id};
  if (rl->bogus) {
    m.kv_value = (aa_msg_kv_t){
        .run = rl->run + 1000, .key = (char *)key, .value = {.p = (void *)"not-an-address", .n = 14}};
    send_msg(p, &m);
  }
  m.kv_value = (aa_msg_kv_t){.run = rl->run, .key = (char *)key, .value = {.p = (void *)value, .n = n}};
  send_msg(p, &m);
}

/* Serves a kv_set or kv_get that executor `who` (p[who]) sent: 1, or 0
 * when m is no store request. The request must name the relay's run. */
static int relay_serve(relay_t *rl, peer_t p[2], int who, const aa_msg_t *m) {
  if (m->type != AA_MSG_KV_SET && m->type != AA_MSG_KV_GET) return 0;
  const aa_msg_kv_t *kv = m->type == AA_MSG_KV_SET ? &m->kv_set : &m->kv_get;
  CHECK_MSG(kv->run == rl->run && m->id > 0, "executor %d: %s of run %llu, id %llu", who,
            aa_msg_type_name(m->type), (unsigned long long)kv->run, (unsigned long long)m->id);
  if (m->type == AA_MSG_KV_SET) {
    rl->sets++;
    CHECK(rl->nkeys < RELAY_MAX);
    if (rl->nkeys == RELAY_MAX) return 1;
    int k = rl->nkeys++;
    rl->keys[k].key = strdup(kv->key);
    rl->keys[k].value = malloc(kv->value.n ? kv->value.n : 1);
    memcpy(rl->keys[k].value, kv->value.p, kv->value.n);
    rl->keys[k].n = kv->value.n;
    /* The set answers the gets that waited for it. */
    for (int i = 0; i < rl->nwaits;) {
      if (strcmp(rl->waits[i].key, kv->key)) {
        i++;
        continue;
      }
      relay_answer(&p[rl->waits[i].who], rl, rl->waits[i].id, kv->key, kv->value.p, kv->value.n);
      free(rl->waits[i].key);
      rl->waits[i] = rl->waits[--rl->nwaits];
    }
    return 1;
  }
  rl->gets++;
  if (rl->refuse && !rl->refused++) {
    char *buf, text[128];
    size_t len;
    snprintf(text, sizeof text, "kv_get: executor %d is not a rank of run %llu", who + 1,
             (unsigned long long)rl->run);
    CHECK(aa_msg_encode_error(&buf, &len, m->id, AA_EPERM, text) == 0);
    CHECK(write(p[who].fd, buf, len) == (ssize_t)len);
    free(buf);
    return 1;
  }
  for (int k = 0; k < rl->nkeys; k++)
    if (!strcmp(rl->keys[k].key, kv->key)) {
      relay_answer(&p[who], rl, m->id, kv->key, rl->keys[k].value, rl->keys[k].n);
      return 1;
    }
  CHECK(rl->nwaits < RELAY_MAX);
  if (rl->nwaits < RELAY_MAX)
    rl->waits[rl->nwaits++] = (relay_wait_t){.who = who, .id = m->id, .key = strdup(kv->key)};
  return 1;
}

static void relay_free(relay_t *rl) {
  for (int k = 0; k < rl->nkeys; k++)
    free(rl->keys[k].key), free(rl->keys[k].value);
  for (int i = 0; i < rl->nwaits; i++)
    free(rl->waits[i].key);
  rl->nkeys = rl->nwaits = 0;
}

/* Waits for the results of job from the executors of p that want[r] says
 * run it, answering both executors' heartbeats meanwhile (a planner that
 * listened to one executor only would make the other take it for dead
 * after 10 silent beats) and their store requests through relay (NULL: a
 * store request is unexpected); progress frames are counted into
 * progress[r]. 0, or -1 when one did not come (no result is kept then). */
static int wait_results(peer_t p[2], const int want[2], uint64_t job, aa_msg_t res[2], int progress[2],
                        relay_t *relay, int ms) {
  int got[2] = {!want[0], !want[1]}, bad = 0;
  double end = aa_now() + ms / 1e3;
  while ((!got[0] || !got[1]) && !bad && aa_now() < end) {
    for (int r = 0; r < 2 && !bad; r++) {
      aa_msg_t m;
      int rc = want[r] && got[r] ? 0 : recv_non_beat(&p[r], &m, 20, NULL);
      bad = rc < 0;
      if (rc != 1) continue;
      if (want[r] && m.type == AA_MSG_PROGRESS && m.progress.job == job) {
        progress[r]++;
        aa_msg_free(&m);
      } else if (want[r] && relay && relay_serve(relay, p, r, &m)) {
        aa_msg_free(&m);
      } else if (want[r] && m.type == AA_MSG_RESULT && m.result.job == job) {
        res[r] = m;
        got[r] = 1;
      } else {
        CHECK_MSG(0, "executor %d: unexpected %s", r, aa_msg_type_name(m.type));
        aa_msg_free(&m);
      }
    }
  }
  CHECK_MSG(got[0] && got[1], "job %llu: result of rank 0 %s, of rank 1 %s", (unsigned long long)job,
            got[0] ? "here" : "missing", got[1] ? "here" : "missing");
  if (got[0] && got[1]) return 0;
  for (int r = 0; r < 2; r++)
    if (want[r] && got[r]) aa_msg_free(&res[r]);
  return -1;
}

/* Checks a calibrate job's result from rank 0 of `world`: ok, with a
 * calibration of that many ranks that parses, named for the executor's
 * device ("cpu:<name> (1 threads):<MiB>MiB"). */
static void check_calib_result(const aa_msg_t *res, int world) {
  CHECK_MSG(res->result.status == AA_PROTO_RUN_OK, "%s", res->result.error ? res->result.error : "");
  CHECK(res->result.calib != NULL && res->result.tokens_per_s == 0);
  if (!res->result.calib) return;
  aa_calib_t *c = calloc(1, sizeof *c);
  int rc = aa_calib_parse(c, res->result.calib, "result.calib");
  CHECK_MSG(rc == 0, "%s", aa_last_error());
  size_t n = strlen(c->device);
  CHECK_MSG(!strncmp(c->device, "cpu:", 4) && strstr(c->device, " (1 threads):") && n > 3 &&
                !strcmp(c->device + n - 3, "MiB"),
            "%s", c->device);
  CHECK(c->ranks == world && c->threads == 1 && c->cuda == 0 && c->n_op > 0);
  CHECK(!strcmp(c->backend, world > 1 ? "shm" : "self") && c->n_link == (world > 1 ? 5 : 0));
  free(c);
}

AA_TEST(a_gang_of_two_executors_runs_one_group_and_a_rank_that_dies_stops_the_other) {
  int lfd = listen_unix();
  pid_t w[2] = {0, 0};
  peer_t p[2] = {{.fd = -1}, {.fd = -1}};
  aa_msg_t res[2];
  char rdv[AA_RENDEZVOUS_MAX];
  /* One at a time, so that p[i] is w[i]'s connection: the kill below picks
   * a runner by its executor's pid, and two executors started together
   * may connect in either order. */
  for (int i = 0; i < 2; i++) {
    w[i] = start_worker(NULL, 0);
    if (welcome(lfd, &p[i], w[i], 10000)) goto out;
  }
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.degree[AA_AXIS_DATA] = 2;
  st.zero = 1;
  st.micro_batch = 1;
  char *dp2;
  CHECK(aa_strategy_to_json(&st, &dp2) == 0);

  /* ok: both ranks report the group's throughput and their own peak. */
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_worker") == 0);
  for (int r = 0; r < 2; r++)
    send_rank(&p[r], 20, 200, dp2, r, rdv, 3);
  for (int r = 0; r < 2; r++) {
    if (wait_result(&p[r], 20, &res[r], NULL, 30000)) goto out_free;
    CHECK_MSG(res[r].result.status == AA_PROTO_RUN_OK, "rank %d: %s", r,
              res[r].result.error ? res[r].result.error : "");
    CHECK(res[r].result.run == 200 && res[r].result.tokens_per_s > 0 && res[r].result.peak.total > 0);
    /* Every rank reports its own place (dp = 2: rank r is data rank r) and
     * its own breakdown; its figures may be 0 where the engine does not
     * time a kind, so only their presence is checked. */
    CHECK_MSG(res[r].result.rank == r && res[r].result.coord[AA_AXIS_DATA] == r &&
                  res[r].result.coord[AA_AXIS_TENSOR] == 0 && res[r].result.coord[AA_AXIS_PIPELINE] == 0,
              "rank %d reported rank %d at dp %d tp %d pp %d", r, res[r].result.rank,
              res[r].result.coord[AA_AXIS_DATA], res[r].result.coord[AA_AXIS_TENSOR],
              res[r].result.coord[AA_AXIS_PIPELINE]);
    CHECK(res[r].result.has_times);
  }
  /* Each rank times its own steps, so the throughputs differ a little;
   * the loss is the group's mean on every rank. */
  CHECK(res[0].result.has_final_loss && res[0].result.final_loss == res[1].result.final_loss);
  for (int r = 0; r < 2; r++)
    aa_msg_free(&res[r]);

  /* calibrate, alone and as a gang: rank 0's result carries the
   * calibration, the other rank's is an ok without one. */
  send_calibrate(&p[0], 25, 205, 0, 1, NULL);
  int progress[2] = {0, 0};
  if (!wait_results(p, (const int[]){1, 0}, 25, res, progress, NULL, 60000)) {
    check_calib_result(&res[0], 1);
    CHECK_MSG(progress[0] >= 1, "%d progress frames", progress[0]);
    aa_msg_free(&res[0]);
  }
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_worker") == 0);
  for (int r = 0; r < 2; r++)
    send_calibrate(&p[r], 26, 206, r, 2, rdv);
  if (wait_results(p, (const int[]){1, 1}, 26, res, progress, NULL, 60000)) goto out_free;
  check_calib_result(&res[0], 2);
  CHECK(res[1].result.status == AA_PROTO_RUN_OK && res[1].result.rank == 1 && !res[1].result.calib);
  for (int r = 0; r < 2; r++)
    aa_msg_free(&res[r]);

  /* abort: the executor kills its rank and says why; the other rank's
   * group notices the dead peer and fails on its own. */
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_worker") == 0);
  for (int r = 0; r < 2; r++)
    send_rank(&p[r], 21, 201, dp2, r, rdv, 100000);
  wait_first_progress(&p[0]);
  aa_msg_t abort = {.type = AA_MSG_ABORT};
  abort.abort = (aa_msg_abort_t){.job = 21, .run = 201, .reason = "rank 0 (executor 1) ended oom"};
  send_msg(&p[1], &abort);
  if (!wait_result(&p[1], 21, &res[1], NULL, 10000)) {
    CHECK(res[1].result.status == AA_PROTO_RUN_CANCELLED);
    CHECK_MSG(res[1].result.error &&
                  !strcmp(res[1].result.error, "aborted by the planner: rank 0 (executor 1) ended oom"),
              "%s", res[1].result.error ? res[1].result.error : "(none)");
    aa_msg_free(&res[1]);
  }
  if (!wait_result(&p[0], 21, &res[0], NULL, 10000)) {
    CHECK(res[0].result.status == AA_PROTO_RUN_ERROR);
    aa_msg_free(&res[0]);
  }

  /* kill -9 of one rank's runner: the other rank ends with an error within
   * 10 s without any word from the planner (its group's timeout and probes). */
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_worker") == 0);
  for (int r = 0; r < 2; r++)
    send_rank(&p[r], 22, 202, dp2, r, rdv, 100000);
  wait_first_progress(&p[0]);
  pid_t victim = runner_of(w[1]);
  CHECK(victim > 0);
  double t0 = aa_now();
  if (victim > 0) kill(victim, SIGKILL);
  if (!wait_result(&p[0], 22, &res[0], NULL, 10000)) {
    double dt = aa_now() - t0;
    CHECK_MSG(dt < 10, "the surviving rank took %.1f s", dt);
    CHECK(res[0].result.status == AA_PROTO_RUN_ERROR && res[0].result.error);
    fprintf(stderr, "  the surviving rank failed %.2f s after the kill: %s\n", dt,
            res[0].result.error ? res[0].result.error : "");
    aa_msg_free(&res[0]);
  }
  if (!wait_result(&p[1], 22, &res[1], NULL, 10000)) {
    CHECK(res[1].result.status == AA_PROTO_RUN_CRASHED);
    CHECK(res[1].result.rank == 1 &&
          !res[1].result.has_times); /* the executor names its dead runner's rank */
    aa_msg_free(&res[1]);
  }
  CHECK(kill(w[0], 0) == 0 && kill(w[1], 0) == 0);

  /* A pipeline of two stages: each rank reports its stage and its own
   * breakdown (the first stage waits for the second's gradients, so it
   * has a bubble); a killed stage ends the other within seconds and is
   * reported crashed, as a killed data rank is. */
  aa_strategy_t ps;
  aa_strategy_default(&ps);
  ps.degree[AA_AXIS_PIPELINE] = 2;
  ps.micro_batch = 1;
  char *pp2;
  CHECK(aa_strategy_to_json(&ps, &pp2) == 0);
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_worker") == 0);
  for (int r = 0; r < 2; r++)
    send_rank(&p[r], 23, 203, pp2, r, rdv, 3);
  for (int r = 0; r < 2; r++) {
    if (wait_result(&p[r], 23, &res[r], NULL, 30000)) continue;
    CHECK_MSG(res[r].result.status == AA_PROTO_RUN_OK, "stage %d: %s", r,
              res[r].result.error ? res[r].result.error : "");
    CHECK_MSG(res[r].result.rank == r && res[r].result.coord[AA_AXIS_DATA] == 0 &&
                  res[r].result.coord[AA_AXIS_PIPELINE] == r,
              "stage %d reported rank %d at dp %d pp %d", r, res[r].result.rank,
              res[r].result.coord[AA_AXIS_DATA], res[r].result.coord[AA_AXIS_PIPELINE]);
    CHECK(res[r].result.has_times && res[r].result.times.ms[AA_PROTO_TIME_FORWARD] > 0 &&
          res[r].result.times.ms[AA_PROTO_TIME_BACKWARD] > 0);
    aa_msg_free(&res[r]);
  }
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "shm", "test_worker") == 0);
  for (int r = 0; r < 2; r++)
    send_rank(&p[r], 24, 204, pp2, r, rdv, 100000);
  wait_first_progress(&p[0]);
  victim = runner_of(w[1]);
  CHECK(victim > 0);
  t0 = aa_now();
  if (victim > 0) kill(victim, SIGKILL);
  if (!wait_result(&p[0], 24, &res[0], NULL, 10000)) {
    double dt = aa_now() - t0;
    CHECK_MSG(dt < 10, "the surviving stage took %.1f s", dt);
    CHECK(res[0].result.status == AA_PROTO_RUN_ERROR && res[0].result.error);
    fprintf(stderr, "  the surviving stage failed %.2f s after the kill: %s\n", dt,
            res[0].result.error ? res[0].result.error : "");
    aa_msg_free(&res[0]);
  }
  if (!wait_result(&p[1], 24, &res[1], NULL, 10000)) {
    CHECK(res[1].result.status == AA_PROTO_RUN_CRASHED && res[1].result.rank == 1 &&
          res[1].result.coord[AA_AXIS_PIPELINE] == 1);
    aa_msg_free(&res[1]);
  }
  CHECK(kill(w[0], 0) == 0 && kill(w[1], 0) == 0);
  free(pp2);
out_free:
  free(dp2);
out:
  for (int i = 0; i < 2; i++) {
    if (w[i] > 0) {
      kill(w[i], SIGTERM);
      waitpid(w[i], NULL, 0);
    }
    peer_close(&p[i]);
  }
  close(lfd);
}

static void send_kv_value(peer_t *p, uint64_t id, uint64_t run, const char *key, const char *value) {
  aa_msg_t m = {.type = AA_MSG_KV_VALUE, .id = id};
  m.kv_value =
      (aa_msg_kv_t){.run = run, .key = (char *)key, .value = {.p = (void *)value, .n = strlen(value)}};
  send_msg(p, &m);
}

/* Two executors run a gloo gang whose ranks meet through this test's
 * relay: each runner child asks its executor, the executor asks the
 * planner tagged with the run, and the answers travel back the same way.
 * An answer tagged with another run stops at the executor; a refused get
 * reaches the rank, worded as the planner worded it. */
AA_TEST(a_gloo_gangs_ranks_meet_through_their_executors_and_the_planners_relay) {
#ifndef AA_HAVE_GLOO
  SKIP("built without gloo");
#endif
  int lfd = listen_unix();
  pid_t w[2] = {0, 0};
  peer_t p[2] = {{.fd = -1}, {.fd = -1}};
  const char *hosts[2] = {"rack7-node3", "rack7-node4"};
  aa_msg_t res[2];
  int progress[2] = {0, 0};
  relay_t rl = {.run = 5001, .bogus = true};
  char rdv[AA_RENDEZVOUS_MAX], *dp2 = NULL;
  /* gloo listens on --address, which must be an address of this host. */
  worker_address = "127.0.0.1";
  for (int i = 0; i < 2; i++) {
    worker_host = hosts[i];
    w[i] = start_worker(NULL, 0);
    int rc = welcome(lfd, &p[i], w[i], 10000); /* checks hello's host */
    CHECK(rc == 0);
    if (rc) break;
  }
  worker_host = worker_address = NULL;
  if (p[0].fd < 0 || p[1].fd < 0) goto out;
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.degree[AA_AXIS_DATA] = 2;
  st.micro_batch = 1;
  CHECK(aa_strategy_to_json(&st, &dp2) == 0);

  /* A dry run of the gang: both ranks end ok, having met through the relay. */
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "gloo", "j21r5001") == 0);
  for (int r = 0; r < 2; r++)
    send_rank(&p[r], 21, rl.run, dp2, r, rdv, 1);
  if (!wait_results(p, (const int[]){1, 1}, 21, res, progress, &rl, 30000)) {
    for (int r = 0; r < 2; r++) {
      CHECK_MSG(res[r].result.status == AA_PROTO_RUN_OK && res[r].result.rank == r &&
                    res[r].result.coord[AA_AXIS_DATA] == r,
                "rank %d: %s", r, res[r].result.error ? res[r].result.error : "");
      aa_msg_free(&res[r]);
    }
  }
  CHECK_MSG(rl.sets >= 2 && rl.gets >= 2 && rl.nwaits == 0, "%d sets, %d gets, %d unanswered", rl.sets,
            rl.gets, rl.nwaits);
  relay_free(&rl);

  /* Rank 1 alone: its get is refused, and the rank says so. */
  rl = (relay_t){.run = 5002, .refuse = true};
  CHECK(aa_rendezvous_new(rdv, sizeof rdv, "gloo", "j22r5002") == 0);
  send_rank(&p[1], 22, rl.run, dp2, 1, rdv, 1);
  if (!wait_results(p, (const int[]){0, 1}, 22, res, progress, &rl, 30000)) {
    CHECK_MSG(
        res[1].result.status == AA_PROTO_RUN_ERROR && res[1].result.error &&
            strstr(res[1].result.error, "the planner refused the get: kv_get: executor 2 is not a rank"),
        "%s", res[1].result.error ? res[1].result.error : "(none)");
    aa_msg_free(&res[1]);
  }
  CHECK(rl.refused == 1);
  relay_free(&rl);

  /* The executors are still serving: a SIGTERM ends each cleanly. */
  for (int i = 0; i < 2; i++) {
    int status;
    kill(w[i], SIGTERM);
    CHECK(waitpid(w[i], &status, 0) == w[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    w[i] = 0;
  }
out:
  free(dp2);
  for (int i = 0; i < 2; i++) {
    if (w[i] > 0) {
      kill(w[i], SIGKILL);
      waitpid(w[i], NULL, 0);
    }
    peer_close(&p[i]);
  }
  close(lfd);
}

/* The runner's side of the store alone, over a socketpair whose other end
 * this test plays (the parent): what it writes, what it waits for, and how
 * each way a get can fail is worded. */
AA_TEST(the_runners_store_waits_for_its_answer_and_says_why_it_failed) {
  signal(SIGPIPE, SIG_IGN);
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  aa_comm_store_t st;
  CHECK(aa_worker__child_store(sv[0], 77, &st) == 0);
  peer_t parent;
  peer_init(&parent, sv[1]);
  aa_msg_t m;
  uint64_t id;
  /* A set is written at once and not waited for. */
  CHECK(st.set(st.ctx, "g/addr/0", "10.0.0.1", 8) == 0);
  CHECK(recv_msg(&parent, &m, 1000) == 1 && m.type == AA_MSG_KV_SET && m.kv_set.run == 77 &&
        !strcmp(m.kv_set.key, "g/addr/0") && m.kv_set.value.n == 8 &&
        !memcmp(m.kv_set.value.p, "10.0.0.1", 8));
  aa_msg_free(&m);
  /* A key nobody sets: the get gives up at its timeout. */
  void *v = NULL;
  size_t n = 0;
  double t0 = aa_now();
  CHECK(st.get(st.ctx, "g/addr/1", 200, &v, &n) == AA_ETIMEOUT);
  CHECK_MSG(strstr(aa_last_error(), "store: key g/addr/1 of run 77 was not set within 200 ms"), "%s",
            aa_last_error());
  CHECK(aa_now() - t0 >= 0.19 && aa_now() - t0 < 2);
  CHECK(recv_msg(&parent, &m, 1000) == 1 && m.type == AA_MSG_KV_GET && !strcmp(m.kv_get.key, "g/addr/1"));
  id = m.id;
  aa_msg_free(&m);
  /* The late answer to that get, then the answer to the next: only the
   * second is taken. */
  send_kv_value(&parent, id, 77, "g/addr/1", "late");
  send_kv_value(&parent, id + 1, 77, "g/addr/2", "10.0.0.3");
  CHECK(st.get(st.ctx, "g/addr/2", 2000, &v, &n) == 0);
  CHECK(v && n == 8 && !memcmp(v, "10.0.0.3", 8));
  free(v);
  CHECK(recv_msg(&parent, &m, 1000) == 1 && m.type == AA_MSG_KV_GET && m.id == id + 1);
  aa_msg_free(&m);
  /* A refusal is the planner's code and words. */
  char *buf;
  size_t len;
  CHECK(aa_msg_encode_error(&buf, &len, id + 2, AA_EPERM, "kv_get: executor 4 is not a rank of run 77") == 0);
  CHECK(write(sv[1], buf, len) == (ssize_t)len);
  free(buf);
  CHECK(st.get(st.ctx, "g/addr/3", 2000, &v, &n) == AA_EPERM);
  CHECK_MSG(strstr(aa_last_error(), "store: the planner refused the get: kv_get: executor 4 is not a rank"),
            "%s", aa_last_error());
  /* The executor going away ends a wait at once. */
  shutdown(sv[1], SHUT_WR);
  t0 = aa_now();
  CHECK(st.get(st.ctx, "g/addr/4", 5000, &v, &n) == AA_ECONN);
  CHECK_MSG(strstr(aa_last_error(), "store: the executor closed the channel while key g/addr/4 was awaited"),
            "%s", aa_last_error());
  CHECK(aa_now() - t0 < 1);
  peer_close(&parent);
  CHECK(st.set(st.ctx, "g/addr/5", "x", 1) == AA_ECONN);
  CHECK(strstr(aa_last_error(), "store: the executor closed the channel to its runner"));
  aa_worker__child_store_free(&st);
  close(sv[0]);
}

AA_TEST(executor_addresses_must_be_numeric) {
  CHECK(aa_worker_parse_address("10.0.0.5") == 0);
  CHECK(aa_worker_parse_address("fe80::1") == 0);
  CHECK(aa_worker_parse_address("node-7") == AA_EINVAL && strstr(aa_last_error(), "numeric IPv4 or IPv6"));
  CHECK(aa_worker_parse_address("10.0.0.5:80") == AA_EINVAL);
  CHECK(aa_worker_parse_address("") == AA_EINVAL);
}

/* The planner names the engine's time kinds from the protocol's list,
 * which must be the engine's (the executor asserts their order), the
 * all-to-all included. */
AA_TEST(the_protocol_names_the_engines_time_kinds) {
  CHECK((int)AA_TIME_KINDS == (int)AA_PROTO_TIME_KINDS &&
        !strcmp(aa_time_kind_name(AA_TIME_ALL_TO_ALL), "all_to_all"));
  for (int k = 0; k < AA_PROTO_TIME_KINDS; k++)
    CHECK_MSG(!strcmp(aa_time_kind_name((aa_time_kind_t)k), aa_proto_time_kind_name((aa_proto_time_kind_t)k)),
              "kind %d: engine %s, protocol %s", k, aa_time_kind_name((aa_time_kind_t)k),
              aa_proto_time_kind_name((aa_proto_time_kind_t)k));
}

AA_TEST(executor_waits_for_a_planner_that_is_not_up_yet) {
  unlink(sock_path);
  pid_t w = start_worker(NULL, 0);
  usleep(500000);
  int lfd = listen_unix();
  peer_t p = {.fd = -1};
  /* The backoff is at most 0.8 s after half a second of refusals. */
  CHECK(welcome(lfd, &p, w, 3000) == 0);
  kill(w, SIGINT);
  int status;
  CHECK(waitpid(w, &status, 0) == w);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  peer_close(&p);
  close(lfd);
}

AA_TEST(a_refused_token_stops_the_executor_with_status_1) {
  char token[400];
  snprintf(token, sizeof token, "%s/token", tmpdir);
  FILE *f = fopen(token, "w");
  fputs("wrong-token\n", f);
  fclose(f);
  chmod(token, 0600);
  int lfd = listen_unix();
  pid_t w = start_worker(token, 1 << 30);
  int fd = accept_within(lfd, 5000);
  CHECK(fd >= 0);
  peer_t p;
  peer_init(&p, fd);
  aa_msg_t m;
  CHECK(recv_msg(&p, &m, 5000) == 1);
  CHECK(m.type == AA_MSG_HELLO && m.hello.token && !strcmp(m.hello.token, "wrong-token"));
  CHECK(m.hello.device.memory == 1 << 30);
  aa_msg_free(&m);
  char *buf;
  size_t len;
  CHECK(aa_msg_encode_error(&buf, &len, 0, AA_EPERM, "permission denied: wrong token") == 0);
  CHECK(write(fd, buf, len) == (ssize_t)len);
  free(buf);
  int status;
  CHECK(waitpid(w, &status, 0) == w);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  peer_close(&p);
  close(lfd);
}

AA_TEST(device_names_parse_strictly) {
  int k = 7;
  CHECK(aa_proto_parse_device(NULL, &k) == 0 && k == -1);
  CHECK(aa_proto_parse_device("cpu", &k) == 0 && k == -1);
  CHECK(aa_proto_parse_device("cuda:0", &k) == 0 && k == 0);
  CHECK(aa_proto_parse_device("cuda:1023", &k) == 0 && k == 1023);
  const char *bad[] = {"cuda", "cuda:", "cuda:-1", "cuda:+1", "cuda:1024", "cuda:1x", "cuda:0,1", "gpu:0", "CPU", ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    k = 7;
    CHECK_MSG(aa_proto_parse_device(bad[i], &k) == AA_EINVAL, "'%s' was accepted", bad[i]);
    CHECK_MSG(strstr(aa_last_error(), "expected cpu or cuda:N") != NULL, "%s", aa_last_error());
  }
}

/* Ordinal 1023 exists on no machine: without a GPU (or a CUDA build) the
 * probe says why CUDA cannot be used, with a GPU it names the bad ordinal.
 * Either way the executor is not created and the message names the device. */
AA_TEST(a_cuda_device_that_cannot_be_used_is_refused_with_the_reason) {
  aa_worker_opts_t o = {.device = "cuda:1023"};
  aa_worker_t *w = NULL;
  int rc = aa_worker_create(&w, &o);
  CHECK_MSG(rc == AA_EUNSUPPORTED || rc == AA_EINVAL, "rc %d", rc);
  CHECK(w == NULL);
  CHECK_MSG(strstr(aa_last_error(), "--device cuda:1023: ") != NULL, "%s", aa_last_error());
  o.device = "tpu";
  CHECK(aa_worker_create(&w, &o) == AA_EINVAL);
  CHECK(w == NULL);
  /* The count is asked the same way; a machine without a GPU says so. */
  int n = -1;
  rc = aa_worker_cuda_devices(&n);
  CHECK_MSG(rc == 0 ? n > 0 : rc == AA_EUNSUPPORTED && n == 0 && aa_last_error()[0], "rc %d n %d", rc, n);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_worker_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(sock_path, sizeof sock_path, "%s/planner.sock", tmpdir);
  char train_bin[300], val_bin[300];
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", tmpdir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", tmpdir);
  snprintf(model_json_path, sizeof model_json_path, "%s/model.json", tmpdir);
  if (aa_data_synth(train_bin, val_bin, 100000, 0.1, 42)) {
    fprintf(stderr, "synth: %s\n", aa_last_error());
    return 1;
  }
  char json[2048];
  snprintf(
      json, sizeof json,
      "{\"name\": \"w\", \"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 32, \"d_ff\": 64, "
      "\"seq_len\": 16, \"vocab_size\": 256}, \"train\": {\"global_batch\": 4, \"steps\": 10, \"lr\": 0.003, "
      "\"eval_every\": 0, \"eval_batches\": 2, \"seed\": 7}, \"data\": {\"train\": \"%s\", \"val\": \"%s\"}}",
      train_bin, val_bin);
  aa_model_spec_t spec;
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.micro_batch = 2;
  if (aa_spec_parse(&spec, json, NULL, "test") || aa_spec_to_json(&spec, &model_json) ||
      aa_strategy_to_json(&st, &strategy_json)) {
    fprintf(stderr, "setup: %s\n", aa_last_error());
    return 1;
  }
  RUN(every_way_a_run_ends_is_reported_and_the_executor_survives);
  RUN(a_gang_of_two_executors_runs_one_group_and_a_rank_that_dies_stops_the_other);
  RUN(a_gloo_gangs_ranks_meet_through_their_executors_and_the_planners_relay);
  RUN(the_runners_store_waits_for_its_answer_and_says_why_it_failed);
  RUN(executor_addresses_must_be_numeric);
  RUN(the_protocol_names_the_engines_time_kinds);
  RUN(executor_waits_for_a_planner_that_is_not_up_yet);
  RUN(a_refused_token_stops_the_executor_with_status_1);
  RUN(device_names_parse_strictly);
  RUN(a_cuda_device_that_cannot_be_used_is_refused_with_the_reason);
  free(model_json);
  free(strategy_json);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
  return aa_test_summary();
}
