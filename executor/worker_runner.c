/* The runner child seen from the executor parent: fork, the channel it
 * reports on (and asks its gang's store through), the time limit, kill,
 * reap, and the one result that always follows.
 *
 * Why fork and not uv_spawn of /proc/self/exe: the job is already decoded in
 * memory, so the child runs it directly, with nothing to serialise again or
 * parse from a command line. libuv's uv_process cannot watch a forked pid,
 * so the parent reaps the child itself: a SIGCHLD uv_signal_t calls
 * waitpid(pid, WNOHANG) for the runner's pid only (never -1, so a host
 * process's other children are left to their owners). The parent has never
 * touched OpenMP or BLAS, whose thread pools would not survive a fork. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker_internal.h"

#include "../strategies/layout.h"

static size_t min_nonzero(size_t a, size_t b) { return !a ? b : !b ? a : a < b ? a : b; }

/* Sends the run's one result: the child's own if it sent one, otherwise
 * what its end says (killed on purpose, died by a signal, exited silent). */
static void send_final(aa_worker_t *w) {
  aa_runner_t *r = &w->runner;
  if (r->orphaned) return;
  if (r->have_result) {
    aa_worker__send(w, &r->result);
    return;
  }
  char text[AA_PROTO_TEXT_MAX + 1];
  aa_msg_t m = {.type = AA_MSG_RESULT};
  m.result.job = r->job;
  m.result.run = r->run;
  m.result.rank = r->rank;
  memcpy(m.result.coord, r->coord, sizeof m.result.coord);
  m.result.error = text;
  if (r->killed_for == AA_PROTO_RUN_TIMEOUT) {
    m.result.status = AA_PROTO_RUN_TIMEOUT;
    snprintf(text, sizeof text, "runner still running at the time limit; killed");
  } else if (r->killed_for == AA_PROTO_RUN_CANCELLED) {
    m.result.status = AA_PROTO_RUN_CANCELLED;
    if (r->abort_reason[0]) {
      if (snprintf(text, sizeof text, "aborted by the planner: %s", r->abort_reason) >= (int)sizeof text)
        aa_proto_utf8_trim(text); /* cut to the frame's limit, maybe inside a character */
    } else {
      snprintf(text, sizeof text, "cancelled");
    }
  } else if (WIFSIGNALED(r->wstatus)) {
    int sig = WTERMSIG(r->wstatus);
    m.result.status = AA_PROTO_RUN_CRASHED;
    snprintf(text, sizeof text, "runner killed by signal %d (%s)", sig, strsignal(sig));
  } else {
    m.result.status = AA_PROTO_RUN_CRASHED;
    snprintf(text, sizeof text, "runner exited with status %d without a result",
             WIFEXITED(r->wstatus) ? WEXITSTATUS(r->wstatus) : -1);
  }
  aa_worker__log(w, "job %llu run %llu: %s", (unsigned long long)r->job, (unsigned long long)r->run, text);
  aa_worker__send(w, &m);
}

void aa_worker__coords(const aa_strategy_t *st, int rank, int coord[AA_AXES]) {
  aa_layout_t lay;
  int ok = st && aa_layout_of(&lay, st, rank) == 0;
  for (int a = 0; a < AA_AXES; a++) coord[a] = ok && lay.coord[a] < AA_PROTO_WORLD_MAX ? lay.coord[a] : 0;
}

static void on_pipe_closed(uv_handle_t *h) {
  aa_worker_t *w = h->data;
  aa_runner_t *r = &w->runner;
  aa_frame_reader_free(&r->reader);
  aa_msg_free(&r->result);
  r->have_result = false;
  r->active = false;
}

static void on_timer_closed(uv_handle_t *h) { (void)h; }

/* The run is over once the child is reaped and its channel has ended
 * (every frame it wrote has been read). */
static void maybe_finish(aa_worker_t *w) {
  aa_runner_t *r = &w->runner;
  if (!r->reaped || !r->eof || uv_is_closing((uv_handle_t *)&r->pipe)) return;
  uv_timer_stop(&r->timer);
  send_final(w);
  uv_close((uv_handle_t *)&r->timer, on_timer_closed);
  uv_close((uv_handle_t *)&r->pipe, on_pipe_closed);
}

static void try_reap(aa_worker_t *w) {
  aa_runner_t *r = &w->runner;
  if (!r->active || r->reaped) return;
  pid_t p;
  do
    p = waitpid(r->pid, &r->wstatus, WNOHANG);
  while (p < 0 && errno == EINTR);
  if (p == r->pid || (p < 0 && errno == ECHILD)) {
    if (p < 0) r->wstatus = 0; /* someone else reaped it; its status is lost */
    r->reaped = true;
    r->pid = 0;
    maybe_finish(w);
  }
}

void aa_worker__runner_sigchld(aa_worker_t *w) { try_reap(w); }

/* A frame from our own child: progress is relayed at once, the result is
 * kept until the child is gone. A frame that does not decode means the
 * child is broken: it is killed and reported crashed. */
static void on_child_frame(aa_worker_t *w, const void *payload, size_t len) {
  aa_runner_t *r = &w->runner;
  aa_msg_t m;
  if (aa_msg_decode(payload, len, &m)) {
    aa_worker__log(w, "job %llu: bad frame from the runner: %s", (unsigned long long)r->job, aa_last_error());
    aa_worker__runner_kill(w, AA_PROTO_RUN_OK);
    return;
  }
  if (m.type == AA_MSG_PROGRESS) {
    if (!r->orphaned) aa_worker__send(w, &m);
    aa_msg_free(&m);
  } else if (m.type == AA_MSG_KV_SET || m.type == AA_MSG_KV_GET) {
    /* The store of its gang: the planner keeps it, tagged with the run the
     * child runs (which it cannot change) and answers with the child's id. */
    uint64_t run = m.type == AA_MSG_KV_SET ? m.kv_set.run : m.kv_get.run;
    if (run != r->run) {
      aa_worker__log(w, "job %llu: the runner asked the store of run %llu, not its own %llu",
                     (unsigned long long)r->job, (unsigned long long)run, (unsigned long long)r->run);
      aa_msg_free(&m);
      aa_worker__runner_kill(w, AA_PROTO_RUN_OK);
      return;
    }
    if (!r->orphaned) aa_worker__send(w, &m);
    aa_msg_free(&m);
  } else if (m.type == AA_MSG_RESULT && !r->have_result) {
    r->result = m;
    r->have_result = true;
    if (m.result.status != AA_PROTO_RUN_OK)
      aa_worker__log(w, "job %llu run %llu: %s%s%s", (unsigned long long)r->job, (unsigned long long)r->run,
                     m.result.status == AA_PROTO_RUN_OOM ? "oom" : "error", m.result.error ? ": " : "",
                     m.result.error ? m.result.error : "");
  } else {
    aa_msg_free(&m);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  aa_worker_t *w = h->data;
  *buf = uv_buf_init(w->runner.read_buf, sizeof w->runner.read_buf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  aa_worker_t *w = s->data;
  aa_runner_t *r = &w->runner;
  if (nread < 0) {
    uv_read_stop(s);
    r->eof = true;
    try_reap(w);
    maybe_finish(w);
    return;
  }
  const char *p = buf->base;
  size_t left = (size_t)nread;
  while (left && !r->eof) {
    size_t used;
    const void *payload;
    size_t plen;
    int rc = aa_frame_reader_feed(&r->reader, p, left, &used, &payload, &plen);
    if (rc < 0) {
      aa_worker__log(w, "job %llu: bad frame from the runner: %s", (unsigned long long)r->job,
                     aa_last_error());
      aa_worker__runner_kill(w, AA_PROTO_RUN_OK);
      uv_read_stop(s);
      r->eof = true;
      maybe_finish(w);
      return;
    }
    p += used;
    left -= used;
    if (rc == 1) on_child_frame(w, payload, plen);
  }
}

static void on_time_limit(uv_timer_t *t) {
  aa_worker_t *w = t->data;
  aa_worker__log(w, "job %llu run %llu: time limit reached, killing the runner",
                 (unsigned long long)w->runner.job, (unsigned long long)w->runner.run);
  aa_worker__runner_kill(w, AA_PROTO_RUN_TIMEOUT);
}

void aa_worker__runner_kill(aa_worker_t *w, aa_proto_run_status_t why) {
  aa_runner_t *r = &w->runner;
  /* A rank of a gang that was killed from outside is often still unreaped
   * when the planner's abort for it arrives: it is reported as it died. */
  try_reap(w);
  if (!r->active || r->reaped) return;
  if (r->killed_for == AA_PROTO_RUN_OK) r->killed_for = why;
  kill(r->pid, SIGKILL);
}

typedef struct {
  uv_write_t req;
  aa_worker_t *w;
  char *buf;
} child_write_t;

static void on_child_written(uv_write_t *req, int status) {
  child_write_t *cw = (child_write_t *)req;
  (void)status; /* a child that went away is reaped and reported as it ended */
  cw->w->runner.writes--;
  free(cw->buf);
  free(cw);
}

void aa_worker__runner_answer(aa_worker_t *w, const aa_msg_t *m) {
  aa_runner_t *r = &w->runner;
  if (!r->active || r->orphaned || r->eof || uv_is_closing((uv_handle_t *)&r->pipe)) return;
  if (m->type == AA_MSG_KV_VALUE && m->kv_value.run != r->run) return; /* an earlier run's */
  /* The child asks one key at a time: more queued answers than the bound
   * means it stopped reading; it is killed rather than let grow this
   * process's memory. */
  if (r->writes >= 64) {
    aa_worker__log(w, "job %llu: the runner does not read its store's answers; killing it",
                   (unsigned long long)r->job);
    aa_worker__runner_kill(w, AA_PROTO_RUN_OK);
    return;
  }
  child_write_t *cw = calloc(1, sizeof *cw);
  size_t len;
  if (!cw || aa_msg_encode(m, &cw->buf, &len)) {
    free(cw);
    aa_worker__log(w, "job %llu: cannot pass the planner's %s to the runner", (unsigned long long)r->job,
                   aa_msg_type_name(m->type));
    return;
  }
  cw->w = w;
  uv_buf_t b = uv_buf_init(cw->buf, (unsigned)len);
  if (uv_write(&cw->req, (uv_stream_t *)&r->pipe, &b, 1, on_child_written)) {
    free(cw->buf);
    free(cw);
    return;
  }
  r->writes++;
}

int aa_worker__fork_channel(pid_t *pid, int *fd) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds))
    return aa_error(AA_EIO, "socketpair: %s", strerror(errno));
  /* Buffered output would be written twice, once by each process. */
  fflush(NULL);
  *pid = fork();
  if (*pid < 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    return aa_error(AA_EIO, "fork: %s", strerror(e));
  }
  close(fds[*pid == 0 ? 0 : 1]);
  *fd = fds[*pid == 0 ? 1 : 0];
  return 0;
}

int aa_worker__runner_start(aa_worker_t *w, const aa_msg_job_t *job) {
  aa_runner_t *r = &w->runner;
  size_t limit = min_nonzero(w->memory_limit, (size_t)job->memory_limit);
  pid_t pid;
  int fd, rc;
  if ((rc = aa_worker__fork_channel(&pid, &fd))) return rc;
  if (pid == 0) {
    char fingerprint[AA_CALIB_DEVICE_MAX];
    aa_worker__fingerprint(w, fingerprint);
    aa_worker__child_main(job, fd, w->threads, w->dev.cuda, limit, fingerprint, w->address);
  }
  memset(r, 0, sizeof *r);
  r->active = true;
  r->pid = pid;
  r->job = job->job;
  r->run = job->run;
  r->rank = job->rank;
  /* The dead runner's place, for the result its parent then makes (a
   * strategy that does not parse leaves 0s; the child reports why). */
  aa_strategy_t st;
  int parsed = job->strategy && !aa_strategy_parse(&st, job->strategy, "job strategy");
  aa_worker__coords(parsed ? &st : NULL, job->rank, r->coord);
  aa_frame_reader_init(&r->reader, 0);
  uv_pipe_init(&w->loop, &r->pipe, 0);
  uv_timer_init(&w->loop, &r->timer);
  r->pipe.data = r->timer.data = w;
  rc = uv_pipe_open(&r->pipe, fd);
  if (rc)
    close(fd);
  else
    rc = uv_read_start((uv_stream_t *)&r->pipe, on_alloc, on_read);
  if (rc) {
    /* Without the channel the run cannot report; it ends as crashed once reaped. */
    aa_worker__log(w, "job %llu: runner channel: %s", (unsigned long long)job->job, uv_strerror(rc));
    r->eof = true;
    aa_worker__runner_kill(w, AA_PROTO_RUN_OK);
  }
  if (job->time_limit_s > 0) uv_timer_start(&r->timer, on_time_limit, (uint64_t)job->time_limit_s * 1000, 0);
  aa_worker__log(w, "job %llu run %llu: %s in runner %d (memory limit %zu bytes, 0 = none)",
                 (unsigned long long)job->job, (unsigned long long)job->run,
                 job->kind == AA_PROTO_JOB_TRAIN       ? "training"
                 : job->kind == AA_PROTO_JOB_CALIBRATE ? "calibration"
                                                       : "dry run",
                 (int)pid, limit);
  try_reap(w);
  return 0;
}

void aa_worker__runner_shutdown(aa_worker_t *w) {
  aa_runner_t *r = &w->runner;
  if (!r->active) return;
  r->orphaned = true;
  if (!r->reaped) {
    kill(r->pid, SIGKILL);
    while (waitpid(r->pid, &r->wstatus, 0) < 0 && errno == EINTR) {
    }
    r->reaped = true;
    r->pid = 0;
  }
  r->eof = true;
  if (!uv_is_closing((uv_handle_t *)&r->pipe)) {
    uv_close((uv_handle_t *)&r->timer, on_timer_closed);
    uv_close((uv_handle_t *)&r->pipe, on_pipe_closed);
  }
}
