/* The runner child: one job in a process of its own (see worker_internal.h).
 * It owns nothing of the parent's loop: it closes every inherited descriptor
 * but stdio and its channel, restores default signal handling, runs the job
 * on the engine, and writes progress and result frames to the channel; a
 * rank of a gang also asks its gang's store through it (the relay: parent,
 * then planner). */
#define _GNU_SOURCE /* close_range */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/file.h"
#include "../common/spec.h"
#include "../dryrun/calibrate.h"
#include "../dryrun/dryrun.h"
#include "../engine/launch.h"
#include "../strategies/strategy.h"
#include "worker_internal.h"

_Static_assert(AA_PROTO_KV_KEY_MAX == AA_COMM_STORE_KEY_MAX &&
                   AA_PROTO_KV_VALUE_MAX == AA_COMM_STORE_VALUE_MAX,
               "the relay's limits are the store's");

/* At most this many progress frames per second, besides the first and the last step. */
#define PROGRESS_PER_S 5

typedef struct {
  int fd;
  uint64_t job, run;
  /* This rank's place in the gang and, once the strategy parsed, in its
   * mesh (by aa_axis_t): every result names them, a failed one too. */
  int rank, coord[AA_AXES];
  double last_sent;
} child_t;

/* The protocol names the engine's time kinds for the planner, which never
 * includes the engine: both lists must be the same, in the same order
 * (tests/test_worker.c compares the names). */
_Static_assert((int)AA_TIME_KINDS == (int)AA_PROTO_TIME_KINDS, "engine and protocol time kinds differ");
_Static_assert((int)AA_TIME_FORWARD == (int)AA_PROTO_TIME_FORWARD &&
                   (int)AA_TIME_BACKWARD == (int)AA_PROTO_TIME_BACKWARD &&
                   (int)AA_TIME_OPTIMIZER == (int)AA_PROTO_TIME_OPTIMIZER &&
                   (int)AA_TIME_PIPELINE_COMM == (int)AA_PROTO_TIME_PIPELINE_COMM &&
                   (int)AA_TIME_BUBBLE == (int)AA_PROTO_TIME_BUBBLE &&
                   (int)AA_TIME_ALL_TO_ALL == (int)AA_PROTO_TIME_ALL_TO_ALL,
               "engine and protocol time kinds are in different orders");

/* A parent that is gone cannot receive anything: exiting is all that is left. */
static void write_frame(child_t *c, const aa_msg_t *m) {
  char *buf;
  size_t len;
  if (aa_msg_encode(m, &buf, &len)) _exit(3);
  for (size_t off = 0; off < len;) {
    ssize_t n = write(c->fd, buf + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(4);
    off += (size_t)n;
  }
  free(buf);
}

static double clamp(double x, double hi) { return isfinite(x) && x > 0 ? (x < hi ? x : hi) : 0; }

static void on_step(const aa_train_step_info_t *info, void *data) {
  child_t *c = data;
  double now = aa_now();
  int edge = info->step == 1 || info->step == info->total;
  if (!edge && now - c->last_sent < 1.0 / PROGRESS_PER_S) return;
  if (!isfinite(info->loss)) return; /* the frame requires a finite loss */
  c->last_sent = now;
  aa_msg_t m = {.type = AA_MSG_PROGRESS};
  m.progress = (aa_msg_progress_t){.job = c->job,
                                   .run = c->run,
                                   .step = (uint64_t)info->step,
                                   .total = (uint64_t)info->total,
                                   .tokens_per_s = clamp(info->tokens_per_s, 1e12),
                                   .loss = info->loss,
                                   .phase = (char *)info->phase};
  write_frame(c, &m);
}

/* Sends the run's result. t (may be NULL: the run failed before it
 * trained) gives this rank's time breakdown. */
static void send_result(child_t *c, aa_proto_run_status_t status, const char *error, double tokens_per_s,
                        double median, double spread, const aa_mem_t *mem, bool has_loss, double loss,
                        bool inputs, const aa_train_result_t *t) {
  aa_msg_t m = {.type = AA_MSG_RESULT};
  aa_msg_result_t *r = &m.result;
  r->job = c->job;
  r->run = c->run;
  r->rank = c->rank;
  memcpy(r->coord, c->coord, sizeof r->coord);
  if (t) {
    r->has_times = true;
    for (int k = 0; k < AA_PROTO_TIME_KINDS; k++)
      r->times.ms[k] = clamp(t->time_ms[k], 1e9);
    r->has_moe_max_tokens = t->moe_max_tokens > 0;
    r->moe_max_tokens = clamp(t->moe_max_tokens, 2147483648.0);
  }
  r->status = status;
  r->tokens_per_s = clamp(tokens_per_s, 1e12);
  r->step_ms_median = clamp(median, 1e9);
  r->step_ms_spread = clamp(spread, 1e9);
  if (mem)
    r->peak = (aa_msg_peak_t){.params = mem->peak[AA_MEM_PARAMS],
                              .grads = mem->peak[AA_MEM_GRADS],
                              .optim = mem->peak[AA_MEM_OPTIM],
                              .acts = mem->peak[AA_MEM_ACTS],
                              .workspace = mem->peak[AA_MEM_WORKSPACE],
                              .total = mem->peak_total};
  r->inputs = inputs;
  r->has_final_loss = has_loss && isfinite(loss);
  r->final_loss = r->has_final_loss ? loss : 0;
  char text[AA_PROTO_TEXT_MAX + 1];
  if (error) {
    /* The message goes through the error encoder's rules on the other side
     * too, but a result must encode here: cut it to the limit. */
    snprintf(text, sizeof text, "%s", error[0] ? error : aa_strerror(AA_EINTERNAL));
    r->error = text;
  }
  write_frame(c, &m);
}

static void send_failure(child_t *c, int rc) {
  send_result(c, rc == AA_EOOM ? AA_PROTO_RUN_OOM : AA_PROTO_RUN_ERROR, aa_last_error(), 0, 0, 0, NULL, false,
              0, rc == AA_EINPUT, NULL);
}

/* The job's out_dir, made if missing, must belong to the user who
 * submitted the job (the planner checked it then; it is checked again
 * here, where the files are written, in case it changed hands). An
 * executor running as root would otherwise write wherever a path led. */
static int out_dir_ready(const aa_msg_job_t *job) {
  uid_t uid; /* the protocol bounds owner below UINT32_MAX */
  int rc =
      aa_dir_open_owned(NULL, &uid, "out_dir", job->out_dir, job->has_owner ? (uid_t)job->owner : 0, true);
  if (rc == AA_EPERM)
    return aa_error(AA_EPERM,
                    "out_dir %s belongs to uid %u, not to the job's user (uid %llu): not writing there",
                    job->out_dir, (unsigned)uid, (unsigned long long)job->owner);
  return rc;
}

/* A training job: the outputs `autoaccel train` would write, under out_dir.
 * Ranks of a gang share out_dir: rank 0 writes the log, the losses and the
 * summary (the engine's rule), so the others log nowhere instead of
 * truncating rank 0's train.log. l holds the rank and the run's threads,
 * strategy and memory limit; the rest of its run is set here. */
static int run_train(child_t *c, const aa_msg_job_t *job, aa_launch_t *l) {
  if (!job->out_dir)
    return aa_error(AA_EINVAL, "job %llu: a train job needs out_dir", (unsigned long long)job->job);
  if (job->measured_steps > (uint64_t)1 << 30)
    return aa_error(AA_EINVAL, "job %llu: %llu training steps is too many", (unsigned long long)job->job,
                    (unsigned long long)job->measured_steps);
  int rc = out_dir_ready(job);
  if (rc) return rc;
  char log_path[AA_PATH_MAX + 32], losses[AA_PATH_MAX + 32], summary[AA_PATH_MAX + 32];
  snprintf(log_path, sizeof log_path, "%s/train.log", job->out_dir);
  snprintf(losses, sizeof losses, "%s/losses.txt", job->out_dir);
  snprintf(summary, sizeof summary, "%s/summary.json", job->out_dir);
  const char *log_to = job->rank == 0 ? log_path : "/dev/null";
  /* out_dir may be writable by others: never write through a symlink there. */
  FILE *log;
  if ((rc = aa_file_open_write(log_to, false, 0666, &log))) return rc;
  aa_train_opts_t *o = &l->opts;
  o->steps = (int)job->measured_steps;
  o->checkpoint_every = -1;
  o->log_every = 10;
  o->out_dir = job->out_dir;
  o->losses_path = losses;
  o->summary_json = summary;
  o->log = log;
  o->on_step = on_step;
  o->step_data = c;
  aa_train_result_t r;
  rc = aa_launch_rank(l, &r);
  if (fclose(log) && !rc) rc = aa_error(AA_EIO, "%s: write failed", log_to);
  if (rc) return rc;
  send_result(c, AA_PROTO_RUN_OK, NULL, r.tokens_per_s, r.step_ms_median, r.step_ms_spread, &r.mem,
              r.steps_done > 0, r.final_loss, false, &r);
  return 0;
}

static int run_dryrun(child_t *c, const aa_msg_job_t *job, aa_launch_t *l) {
  if (job->warmup_steps > 1000000 || job->measured_steps > 1000000)
    return aa_error(AA_EINVAL, "job %llu: %llu + %llu dry-run steps is too many",
                    (unsigned long long)job->job, (unsigned long long)job->warmup_steps,
                    (unsigned long long)job->measured_steps);
  aa_dryrun_opts_t o = {.threads = l->opts.threads,
                        .warmup_steps = (int)job->warmup_steps,
                        .measured_steps = (int)job->measured_steps,
                        .memory_limit = l->opts.memory_limit,
                        .on_step = on_step,
                        .step_data = c};
  aa_train_result_t t;
  aa_dryrun_result_t r;
  int rc = aa_dryrun_train_opts(l->opts.strategy, &o, &l->opts);
  if (rc || (rc = aa_launch_rank(l, &t))) return rc;
  aa_dryrun_result_of(&t, &r);
  send_result(c, AA_PROTO_RUN_OK, NULL, r.tokens_per_s, r.step_ms_median, r.step_ms_spread, &r.mem,
              r.has_loss, r.final_loss, false, &t);
  return 0;
}

/* A calibration's progress, as a training's: throttled, first and last always. */
static void on_calibrate(int done, int total, void *data) {
  child_t *c = data;
  double now = aa_now();
  if (done != 1 && done != total && now - c->last_sent < 1.0 / PROGRESS_PER_S) return;
  c->last_sent = now;
  aa_msg_t m = {.type = AA_MSG_PROGRESS};
  m.progress = (aa_msg_progress_t){.job = c->job,
                                   .run = c->run,
                                   .step = (uint64_t)done,
                                   .total = (uint64_t)total,
                                   .phase = (char *)"calibrate"};
  write_frame(c, &m);
}

/* A calibration job: the rank joins its gang as every rank does, times the
 * model's ops and the gang's collectives, and rank 0 sends the
 * measurements as the result's calib text (the others an ok without it,
 * so that the planner hears from every rank). The job's time limit bounds
 * the run; half of it is the calibration's budget. */
static int run_calibrate(child_t *c, const aa_msg_job_t *job, aa_launch_t *l, const char *fingerprint) {
  char device[32] = "cpu";
  if (l->cuda >= 0) snprintf(device, sizeof device, "cuda:%d", l->cuda);
  aa_calib_t *cal = malloc(sizeof *cal);
  if (!cal) return aa_error(AA_ENOMEM, "out of memory");
  aa_comm_t *comm = NULL;
  int rc = aa_launch_join(l, &comm);
  aa_calibrate_opts_t o = {.threads = l->opts.threads,
                           .device = device,
                           .comm = comm,
                           .max_devices = job->world,
                           .budget_s = job->time_limit_s > 0 ? job->time_limit_s / 2.0 : 0,
                           .memory_limit = l->opts.memory_limit,
                           .fingerprint = fingerprint,
                           .on_progress = on_calibrate,
                           .progress_data = c};
  if (!rc) rc = aa_calibrate(l->spec, &o, cal);
  if (rc && comm) aa_comm_abort(comm);
  aa_comm_destroy(comm);
  char *text = NULL;
  if (!rc && job->rank == 0 && !(text = aa_calib_to_json(cal))) rc = AA_ENOMEM;
  if (text && strlen(text) > AA_PROTO_JSON_MAX)
    rc = aa_error(AA_EINVAL, "the calibration's %zu bytes of JSON do not fit a result frame", strlen(text));
  free(cal);
  if (rc) {
    free(text);
    return rc;
  }
  aa_msg_t m = {.type = AA_MSG_RESULT};
  m.result = (aa_msg_result_t){
      .job = c->job, .run = c->run, .rank = c->rank, .status = AA_PROTO_RUN_OK, .calib = text};
  write_frame(c, &m);
  free(text);
  return 0;
}

/* --- the gang's store, through the parent ------------------------------------------------- */

typedef struct {
  int fd;
  uint64_t run;
  uint64_t next_id; /* request ids: the planner's answers echo them */
  aa_frame_reader_t reader;
  char buf[4096];
  size_t off, len; /* read but not yet fed to the reader */
} child_store_t;

/* Writes one frame whole: 0, or AA_ECONN / the encode error. */
static int store_write(child_store_t *cs, const aa_msg_t *m) {
  char *buf;
  size_t len;
  int rc = aa_msg_encode(m, &buf, &len);
  if (rc) return rc;
  for (size_t off = 0; off < len;) {
    ssize_t n = write(cs->fd, buf + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      free(buf);
      return aa_error(AA_ECONN, "store: the executor closed the channel to its runner");
    }
    off += (size_t)n;
  }
  free(buf);
  return 0;
}

static int store_set(void *ctx, const char *key, const void *value, size_t len) {
  child_store_t *cs = ctx;
  aa_msg_t m = {.type = AA_MSG_KV_SET, .id = cs->next_id++};
  m.kv_set = (aa_msg_kv_t){.run = cs->run, .key = (char *)key, .value = {.p = (void *)value, .n = len}};
  int rc = store_write(cs, &m);
  return rc == AA_EINVAL ? aa_error(AA_EINVAL, "store: cannot set key: %s", aa_last_error()) : rc;
}

/* Waits until *deadline for the next frame from the parent: 1 with *m
 * decoded, 0 on timeout, or a negative error (the channel ended, a bad
 * frame). */
static int store_next(child_store_t *cs, double deadline, aa_msg_t *m) {
  for (;;) {
    while (cs->off < cs->len) {
      size_t used, plen;
      const void *payload;
      int rc =
          aa_frame_reader_feed(&cs->reader, cs->buf + cs->off, cs->len - cs->off, &used, &payload, &plen);
      if (rc < 0) return rc;
      cs->off += used;
      if (rc == 1) return aa_msg_decode(payload, plen, m) ? AA_EFORMAT : 1;
    }
    int left = (int)((deadline - aa_now()) * 1000);
    if (left <= 0) return 0;
    struct pollfd pf = {.fd = cs->fd, .events = POLLIN};
    int k = poll(&pf, 1, left);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return aa_error(AA_EIO, "store: poll: %s", strerror(errno));
    if (k == 0) return 0;
    ssize_t n = read(cs->fd, cs->buf, sizeof cs->buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return AA_ECONN;
    cs->off = 0;
    cs->len = (size_t)n;
  }
}

static int store_get(void *ctx, const char *key, int timeout_ms, void **value, size_t *len) {
  child_store_t *cs = ctx;
  uint64_t id = cs->next_id++;
  aa_msg_t m = {.type = AA_MSG_KV_GET, .id = id};
  m.kv_get = (aa_msg_kv_t){.run = cs->run, .key = (char *)key};
  int rc = store_write(cs, &m);
  if (rc) return rc == AA_EINVAL ? aa_error(AA_EINVAL, "store: cannot get key: %s", aa_last_error()) : rc;
  double deadline = aa_now() + (timeout_ms > 0 ? timeout_ms : 0) / 1000.0;
  for (;;) {
    aa_msg_t a;
    rc = store_next(cs, deadline, &a);
    if (rc == 0)
      return aa_error(AA_ETIMEOUT, "store: key %s of run %llu was not set within %d ms", key,
                      (unsigned long long)cs->run, timeout_ms);
    if (rc == AA_ECONN)
      return aa_error(AA_ECONN, "store: the executor closed the channel while key %s was awaited", key);
    if (rc < 0) return aa_error(rc, "store: a bad frame from the executor while key %s was awaited", key);
    if (a.type == AA_MSG_ERROR) {
      /* A refusal of this get or of an earlier set: either way the
       * group this rank is joining cannot form. */
      rc = aa_error(a.error.code, "store: the planner refused %s: %s", a.id == id ? "the get" : "a set",
                    a.error.message);
      aa_msg_free(&a);
      return rc;
    }
    if (a.type == AA_MSG_KV_VALUE && a.id == id && !strcmp(a.kv_value.key, key)) {
      *value = a.kv_value.value.p; /* malloc'd by the decoder, at least 1 byte */
      *len = a.kv_value.value.n;
      a.kv_value.value.p = NULL;
      aa_msg_free(&a);
      return 0;
    }
    aa_msg_free(&a); /* an answer to an earlier, abandoned get */
  }
}

int aa_worker__child_store(int fd, uint64_t run, aa_comm_store_t *out) {
  child_store_t *cs = calloc(1, sizeof *cs);
  if (!cs) return aa_error(AA_ENOMEM, "out of memory");
  cs->fd = fd;
  cs->run = run;
  cs->next_id = 1;
  aa_frame_reader_init(&cs->reader, 0);
  *out = (aa_comm_store_t){.ctx = cs, .set = store_set, .get = store_get};
  return 0;
}

void aa_worker__child_store_free(aa_comm_store_t *s) {
  child_store_t *cs = s ? s->ctx : NULL;
  if (!cs) return;
  aa_frame_reader_free(&cs->reader);
  free(cs);
  s->ctx = NULL;
}

void aa_worker__child_main(const aa_msg_job_t *job, int fd, int threads, int cuda, size_t memory_limit,
                           const char *fingerprint, const char *address) {
  /* Die with the executor: a runner nobody waits for only burns the cores. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  /* A closing terminal's SIGHUP reaches the runner too (same process
   * group); its executor decides whether that stops the job. */
  signal(SIGHUP, SIG_IGN);
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_IGN); /* a closed pipe is a failed write, handled there */
  /* The planner socket and the loop's descriptors stay with the parent: the
   * planner must see the connection close when the executor goes, whatever
   * the runner is doing. */
  if (fd != 3) {
    if (dup2(fd, 3) < 0) _exit(5);
    fd = 3;
  }
  close_range(4, ~0u, 0);
  child_t c = {.fd = fd, .job = job->job, .run = job->run, .rank = job->rank};
  char origin[64];
  snprintf(origin, sizeof origin, "job %llu model", (unsigned long long)job->job);
  aa_model_spec_t spec;
  aa_strategy_t st;
  int rc = aa_spec_parse(&spec, job->model, NULL, origin);
  if (!rc) {
    snprintf(origin, sizeof origin, "job %llu strategy", (unsigned long long)job->job);
    rc = aa_strategy_parse(&st, job->strategy, origin);
  }
  aa_worker__coords(rc ? NULL : &st, job->rank, c.coord);
  /* The rank starts as every rank does (engine/launch.h): its device, its
   * group from the rendezvous, the run, the abort that stops its peers if
   * it fails. */
  aa_launch_t l = {.spec = &spec,
                   .rank = job->rank,
                   .world = job->world,
                   .rendezvous = job->rendezvous,
                   .cuda = cuda,
                   .opts = {.threads = threads, .strategy = &st, .memory_limit = memory_limit}};
  /* A gang's ranks meet through the planner's store for the run (gloo and
   * nccl-hosts groups use it; shm and nccl ignore it) and listen on the
   * executor's address. */
  aa_comm_store_t store = {0};
  if (!rc && job->world > 1 && !(rc = aa_worker__child_store(fd, job->run, &store))) {
    l.comm.store = &store;
    l.comm.address = address;
  }
  if (!rc && job->kind == AA_PROTO_JOB_TRAIN)
    rc = run_train(&c, job, &l);
  else if (!rc && job->kind == AA_PROTO_JOB_CALIBRATE)
    rc = run_calibrate(&c, job, &l, fingerprint);
  else if (!rc)
    rc = run_dryrun(&c, job, &l);
  if (rc) send_failure(&c, rc);
  aa_worker__child_store_free(&store);
  _exit(0);
}
