/* The executor's planner connection (see worker.h): connect, hello,
 * heartbeats, frames from the planner, reconnect with backoff, and an
 * orderly stop. The runner child is in worker_runner.c and worker_child.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker_internal.h"

/* The planner's period until its welcome says otherwise; with
 * AA_WORKER_DEAD_BEATS it bounds connect + hello to 10 s. */
#define HELLO_BEAT_MS 1000

typedef enum { CONN_CONNECTING, CONN_HELLO, CONN_READY, CONN_CLOSING } conn_state_t;

struct aa_conn {
  aa_worker_t *w;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_timer_t tick; /* heartbeats and the silence check */
  uv_connect_t connect_req;
  uv_getaddrinfo_t gai;
  uv_shutdown_t shutdown_req;
  int refs;       /* open handles + pending getaddrinfo; freed at 0 */
  bool resolving; /* gai is pending */
  conn_state_t state;
  int heartbeat_ms;
  uint64_t last_rx; /* uv_now of the last frame (or of the connect attempt) */
  aa_frame_reader_t reader;
  char read_buf[65536];
};

typedef struct {
  uv_write_t req;
  aa_conn_t *conn;
  char *buf;
} write_req_t;

static void schedule_retry(aa_worker_t *w);
static void begin_stop(aa_worker_t *w);

void aa_worker__log(aa_worker_t *w, const char *fmt, ...) {
  char ts[32];
  time_t now = time(NULL);
  struct tm tm;
  strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
  fprintf(w->log, "%s executor: ", ts);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(w->log, fmt, ap);
  va_end(ap);
  fputc('\n', w->log);
  fflush(w->log);
}

/* ---- connection lifetime ---------------------------------------------- */

static void conn_unref(aa_conn_t *c) {
  if (--c->refs > 0) return;
  aa_worker_t *w = c->w;
  aa_frame_reader_free(&c->reader);
  free(c);
  if (!w->stopping) schedule_retry(w);
}

static void on_conn_handle_closed(uv_handle_t *h) { conn_unref(h->data); }

/* Closes the connection now; pending writes are cancelled. A new attempt
 * follows (after the backoff) unless the worker is stopping. */
static void conn_close(aa_conn_t *c) {
  aa_worker_t *w = c->w;
  if (w->conn == c) w->conn = NULL;
  if (c->state == CONN_CLOSING && uv_is_closing(&c->h.handle)) return;
  c->state = CONN_CLOSING;
  /* A runner's result would have nobody to go to. */
  if (w->runner.active && !w->runner.orphaned) {
    w->runner.orphaned = true;
    aa_worker__runner_kill(w, AA_PROTO_RUN_OK);
  }
  if (c->resolving) uv_cancel((uv_req_t *)&c->gai);
  if (!uv_is_closing((uv_handle_t *)&c->tick)) uv_close((uv_handle_t *)&c->tick, on_conn_handle_closed);
  if (!uv_is_closing(&c->h.handle)) uv_close(&c->h.handle, on_conn_handle_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  aa_conn_t *c = req->data;
  if (!uv_is_closing(&c->h.handle)) uv_close(&c->h.handle, on_conn_handle_closed);
}

/* Closes after what was written so far has gone out (an error reply, bye). */
static void conn_close_after_writes(aa_conn_t *c) {
  aa_worker_t *w = c->w;
  if (c->state == CONN_CLOSING) return;
  if (w->conn == c) w->conn = NULL;
  c->state = CONN_CLOSING;
  if (w->runner.active && !w->runner.orphaned) {
    w->runner.orphaned = true;
    aa_worker__runner_kill(w, AA_PROTO_RUN_OK);
  }
  uv_close((uv_handle_t *)&c->tick, on_conn_handle_closed);
  c->shutdown_req.data = c;
  if (uv_shutdown(&c->shutdown_req, &c->h.stream, on_shutdown)) uv_close(&c->h.handle, on_conn_handle_closed);
}

/* ---- writing ----------------------------------------------------------- */

static void on_written(uv_write_t *req, int status) {
  write_req_t *wr = (write_req_t *)req;
  aa_conn_t *c = wr->conn;
  free(wr->buf);
  free(wr);
  /* A planner that stopped reading (or went away) fails the write with
   * EPIPE: reconnect now rather than after the silence check. The handle
   * outlives its write callbacks, so c is still valid here. */
  if (status < 0 && status != UV_ECANCELED && c->state != CONN_CLOSING) {
    aa_worker__log(c->w, "lost the planner at %s: write failed: %s", c->w->addr_text, uv_strerror(status));
    conn_close(c);
  }
}

/* Takes ownership of buf. */
static void conn_write(aa_conn_t *c, char *buf, size_t len) {
  write_req_t *wr = malloc(sizeof *wr);
  if (!wr) {
    free(buf);
    return;
  }
  wr->conn = c;
  wr->buf = buf;
  uv_buf_t b = uv_buf_init(buf, (unsigned)len);
  if (uv_write(&wr->req, &c->h.stream, &b, 1, on_written)) {
    free(buf);
    free(wr);
  }
}

static void conn_send(aa_conn_t *c, const aa_msg_t *m) {
  char *buf;
  size_t len;
  if (aa_msg_encode(m, &buf, &len)) {
    aa_worker__log(c->w, "cannot encode %s: %s", aa_msg_type_name(m->type), aa_last_error());
    return;
  }
  conn_write(c, buf, len);
}

static void conn_send_error(aa_conn_t *c, uint64_t id, int code, const char *message) {
  char *buf;
  size_t len;
  if (!aa_msg_encode_error(&buf, &len, id, code, message)) conn_write(c, buf, len);
}

void aa_worker__send(aa_worker_t *w, const aa_msg_t *m) {
  if (w->conn && w->conn->state == CONN_READY) conn_send(w->conn, m);
}

/* ---- frames from the planner ------------------------------------------ */

static void on_job(aa_conn_t *c, const aa_msg_t *m) {
  aa_worker_t *w = c->w;
  const aa_msg_job_t *job = &m->job;
  if (w->runner.active) {
    char text[128];
    snprintf(text, sizeof text, "executor busy with job %llu", (unsigned long long)w->runner.job);
    aa_worker__log(w, "job %llu refused: %s", (unsigned long long)job->job, text);
    conn_send_error(c, m->id, AA_EINVAL, text);
    return;
  }
  if (aa_worker__runner_start(w, job)) {
    aa_worker__log(w, "job %llu: %s", (unsigned long long)job->job, aa_last_error());
    aa_msg_t r = {.type = AA_MSG_RESULT};
    r.result = (aa_msg_result_t){
        .job = job->job, .run = job->run, .status = AA_PROTO_RUN_ERROR, .error = (char *)aa_last_error()};
    conn_send(c, &r);
  }
}

static void on_welcome(aa_conn_t *c, const aa_msg_welcome_t *wm) {
  aa_worker_t *w = c->w;
  c->state = CONN_READY;
  c->heartbeat_ms = wm->heartbeat_ms;
  w->backoff_ms = AA_WORKER_BACKOFF_MIN_MS;
  uv_timer_set_repeat(&c->tick, (uint64_t)c->heartbeat_ms);
  uv_timer_again(&c->tick);
  aa_worker__log(
      w, "connected to %s as executor %llu (%s on host %s), heartbeat %d ms; its gangs listen on %s",
      w->addr_text, (unsigned long long)wm->peer_id, w->name, w->host, c->heartbeat_ms, w->address);
}

/* Handles one decoded frame. Returns nonzero when the connection was closed. */
static int on_message(aa_conn_t *c, const aa_msg_t *m) {
  aa_worker_t *w = c->w;
  if (m->type == AA_MSG_ERROR) {
    aa_worker__log(w, "planner error %d: %s", m->error.code, m->error.message);
    /* An answer to the runner's store request (kv_set, kv_get carry the
     * runner's own ids): the runner is the one that must know. */
    if (m->id && c->state == CONN_READY) aa_worker__runner_answer(w, m);
    if (c->state == CONN_HELLO) {
      if (m->error.code == AA_EPERM) {
        snprintf(w->fatal_msg, sizeof w->fatal_msg, "the planner at %s refused us: %s", w->addr_text,
                 m->error.message);
        w->fatal = AA_EPERM;
        conn_close(c);
        begin_stop(w);
      } else {
        conn_close(c);
      }
      return 1;
    }
    return 0;
  }
  if (c->state == CONN_HELLO) {
    if (m->type == AA_MSG_WELCOME) {
      on_welcome(c, &m->welcome);
      return 0;
    }
    aa_worker__log(w, "protocol error: %s before welcome", aa_msg_type_name(m->type));
    conn_send_error(c, m->id, AA_EFORMAT, "expected welcome");
    conn_close_after_writes(c);
    return 1;
  }
  switch (m->type) {
  case AA_MSG_HEARTBEAT: return 0;
  case AA_MSG_JOB: on_job(c, m); return 0;
  case AA_MSG_KV_VALUE: aa_worker__runner_answer(w, m); return 0;
  case AA_MSG_CANCEL:
    if (w->runner.active && !w->runner.orphaned && w->runner.job == m->cancel.job) {
      aa_worker__log(w, "job %llu: cancelled", (unsigned long long)m->cancel.job);
      aa_worker__runner_kill(w, AA_PROTO_RUN_CANCELLED);
    }
    return 0;
  case AA_MSG_ABORT:
    /* Another rank of the gang failed: the survivors' collectives would
     * notice too, but only after a probe or a timeout. */
    if (w->runner.active && !w->runner.orphaned && w->runner.job == m->abort.job &&
        w->runner.run == m->abort.run) {
      aa_worker__log(w, "job %llu run %llu: aborted%s%s", (unsigned long long)m->abort.job,
                     (unsigned long long)m->abort.run, m->abort.reason ? ": " : "",
                     m->abort.reason ? m->abort.reason : "");
      snprintf(w->runner.abort_reason, sizeof w->runner.abort_reason, "%s",
               m->abort.reason && m->abort.reason[0] ? m->abort.reason : "another rank failed");
      aa_worker__runner_kill(w, AA_PROTO_RUN_CANCELLED);
    }
    return 0;
  case AA_MSG_BYE:
    aa_worker__log(w, "the planner said bye%s%s", m->bye.reason ? ": " : "",
                   m->bye.reason ? m->bye.reason : "");
    conn_close(c);
    return 1;
  default:
    aa_worker__log(w, "protocol error: unexpected %s from the planner", aa_msg_type_name(m->type));
    conn_send_error(c, m->id, AA_EFORMAT, "an executor does not accept this message");
    conn_close_after_writes(c);
    return 1;
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  aa_conn_t *c = h->data;
  *buf = uv_buf_init(c->read_buf, sizeof c->read_buf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  aa_conn_t *c = s->data;
  aa_worker_t *w = c->w;
  if (c->state == CONN_CLOSING) return;
  if (nread < 0) {
    aa_worker__log(w, "lost the planner at %s: %s", w->addr_text,
                   nread == UV_EOF ? "connection closed" : uv_strerror((int)nread));
    conn_close(c);
    return;
  }
  c->last_rx = uv_now(&w->loop);
  const char *p = buf->base;
  size_t left = (size_t)nread;
  while (left) {
    size_t used, plen;
    const void *payload;
    int rc = aa_frame_reader_feed(&c->reader, p, left, &used, &payload, &plen);
    aa_msg_t m;
    if (rc == 1) {
      int drc = aa_msg_decode(payload, plen, &m);
      if (drc) rc = drc;
    }
    if (rc < 0) {
      aa_worker__log(w, "bad frame from the planner: %s; reconnecting", aa_last_error());
      conn_send_error(c, 0, rc, aa_last_error());
      conn_close_after_writes(c);
      return;
    }
    p += used;
    left -= used;
    if (rc == 1) {
      int closed = on_message(c, &m);
      aa_msg_free(&m);
      if (closed) return;
    }
  }
}

static void on_tick(uv_timer_t *t) {
  aa_conn_t *c = t->data;
  aa_worker_t *w = c->w;
  int beat = c->state == CONN_READY ? c->heartbeat_ms : HELLO_BEAT_MS;
  uint64_t silent = uv_now(&w->loop) - c->last_rx;
  if (silent > (uint64_t)beat * AA_WORKER_DEAD_BEATS) {
    aa_worker__log(w, "the planner at %s has been silent for %llu ms; reconnecting", w->addr_text,
                   (unsigned long long)silent);
    conn_close(c);
    return;
  }
  if (c->state != CONN_READY) return;
  aa_msg_t m = {.type = AA_MSG_HEARTBEAT};
  if (w->runner.active && !w->runner.orphaned) m.heartbeat.job = w->runner.job;
  conn_send(c, &m);
}

/* ---- connecting -------------------------------------------------------- */

static void send_hello(aa_conn_t *c) {
  aa_worker_t *w = c->w;
  aa_msg_t m = {.type = AA_MSG_HELLO};
  m.hello.role = AA_PROTO_ROLE_EXECUTOR;
  m.hello.has_device = true;
  const aa_worker_device_t *d = &w->dev;
  m.hello.device = (aa_msg_device_t){.kind = d->cuda >= 0 ? AA_PROTO_DEV_CUDA : AA_PROTO_DEV_CPU,
                                     .name = w->name,
                                     .index = d->cuda >= 0 ? d->cuda : 0,
                                     .memory = w->memory,
                                     .host = w->host,
                                     .pid = (int)getpid()};
  if (d->cuda >= 0) {
    m.hello.device.sm_count = d->sm_count;
    m.hello.device.cc_major = d->cc_major;
    m.hello.device.cc_minor = d->cc_minor;
    m.hello.device.peak_bf16_flops = d->peak_bf16_flops;
  }
  m.hello.token = w->token_len ? w->token : NULL;
  conn_send(c, &m);
}

/* The address this host has toward the planner, which the ranks of a
 * gang on other hosts can likely reach too: the local end of the TCP
 * connection; 127.0.0.1 over a unix socket (every rank is on this host). */
static void local_address(aa_conn_t *c) {
  aa_worker_t *w = c->w;
  struct sockaddr_storage ss;
  int len = sizeof ss;
  const void *ip = NULL;
  snprintf(w->address, sizeof w->address, "127.0.0.1");
  if (!w->addr.tcp || uv_tcp_getsockname(&c->h.tcp, (struct sockaddr *)&ss, &len)) return;
  if (ss.ss_family == AF_INET) ip = &((struct sockaddr_in *)&ss)->sin_addr;
  if (ss.ss_family == AF_INET6) ip = &((struct sockaddr_in6 *)&ss)->sin6_addr;
  char text[INET6_ADDRSTRLEN];
  if (ip && inet_ntop(ss.ss_family, ip, text, sizeof text))
    snprintf(w->address, sizeof w->address, "%s", text);
}

static void on_connect(uv_connect_t *req, int status) {
  aa_conn_t *c = req->data;
  aa_worker_t *w = c->w;
  if (c->state == CONN_CLOSING) return;
  if (status < 0) {
    aa_worker__log(w, "cannot reach the planner at %s: %s; retrying in %.1f s", w->addr_text,
                   uv_strerror(status), w->backoff_ms / 1000.0);
    conn_close(c);
    return;
  }
  c->state = CONN_HELLO;
  c->last_rx = uv_now(&w->loop);
  if (!w->address_given) local_address(c);
  int rc = uv_read_start(&c->h.stream, on_alloc, on_read);
  if (rc) {
    aa_worker__log(w, "read from %s: %s", w->addr_text, uv_strerror(rc));
    conn_close(c);
    return;
  }
  send_hello(c);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  aa_conn_t *c = req->data;
  aa_worker_t *w = c->w;
  c->resolving = false;
  if (c->state == CONN_CLOSING || status < 0) {
    if (status < 0 && c->state != CONN_CLOSING) {
      aa_worker__log(w, "cannot resolve %s: %s; retrying in %.1f s", w->addr.host, uv_strerror(status),
                     w->backoff_ms / 1000.0);
      conn_close(c);
    }
    uv_freeaddrinfo(res);
    conn_unref(c);
    return;
  }
  int rc = uv_tcp_connect(&c->connect_req, &c->h.tcp, res->ai_addr, on_connect);
  uv_freeaddrinfo(res);
  conn_unref(c);
  if (rc) {
    aa_worker__log(w, "connect to %s: %s; retrying in %.1f s", w->addr_text, uv_strerror(rc),
                   w->backoff_ms / 1000.0);
    conn_close(c);
  }
}

static void start_connect(aa_worker_t *w) {
  aa_conn_t *c = calloc(1, sizeof *c);
  if (!c) {
    schedule_retry(w);
    return;
  }
  c->w = w;
  c->state = CONN_CONNECTING;
  c->heartbeat_ms = HELLO_BEAT_MS;
  c->last_rx = uv_now(&w->loop);
  c->h.handle.data = c->tick.data = c->connect_req.data = c->gai.data = c;
  aa_frame_reader_init(&c->reader, 0);
  uv_timer_init(&w->loop, &c->tick);
  uv_timer_start(&c->tick, on_tick, HELLO_BEAT_MS, HELLO_BEAT_MS);
  c->refs = 2;
  w->conn = c;
  if (w->addr.tcp) {
    uv_tcp_init(&w->loop, &c->h.tcp);
    char port[16];
    snprintf(port, sizeof port, "%d", w->addr.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int rc = uv_getaddrinfo(&w->loop, &c->gai, on_resolved, w->addr.host, port, &hints);
    if (rc) {
      aa_worker__log(w, "resolve %s: %s", w->addr.host, uv_strerror(rc));
      conn_close(c);
      return;
    }
    c->refs++;
    c->resolving = true;
  } else {
    uv_pipe_init(&w->loop, &c->h.pipe, 0);
    uv_pipe_connect(&c->connect_req, &c->h.pipe, w->addr.path, on_connect);
  }
}

static void on_retry(uv_timer_t *t) {
  aa_worker_t *w = t->data;
  if (!w->stopping) start_connect(w);
}

static void schedule_retry(aa_worker_t *w) {
  uv_timer_start(&w->retry, on_retry, (uint64_t)w->backoff_ms, 0);
  w->backoff_ms = w->backoff_ms * 2 > AA_WORKER_BACKOFF_MAX_MS ? AA_WORKER_BACKOFF_MAX_MS : w->backoff_ms * 2;
}

/* ---- stopping ---------------------------------------------------------- */

static void on_plain_closed(uv_handle_t *h) { (void)h; }

/* Stops in order: bye to the planner, the runner killed and reaped, every
 * handle closed, so the loop ends by itself. */
static void begin_stop(aa_worker_t *w) {
  if (w->stopping) return;
  w->stopping = true;
  aa_worker__runner_shutdown(w);
  aa_conn_t *c = w->conn;
  if (c && c->state == CONN_READY) {
    aa_msg_t bye = {.type = AA_MSG_BYE};
    bye.bye.reason = "executor stopping";
    conn_send(c, &bye);
    conn_close_after_writes(c);
  } else if (c) {
    conn_close(c);
  }
  uv_close((uv_handle_t *)&w->retry, on_plain_closed);
  uv_close((uv_handle_t *)&w->sigchld, on_plain_closed);
  if (w->signals) {
    uv_close((uv_handle_t *)&w->sigint, on_plain_closed);
    uv_close((uv_handle_t *)&w->sigterm, on_plain_closed);
    if (w->hup) uv_close((uv_handle_t *)&w->sighup, on_plain_closed);
  }
}

static void on_wake(uv_async_t *a) {
  aa_worker_t *w = a->data;
  if (w->stop_requested) begin_stop(w);
}

static void on_signal(uv_signal_t *s, int signum) {
  aa_worker_t *w = s->data;
  if (signum == SIGCHLD) {
    aa_worker__runner_sigchld(w);
    return;
  }
  aa_worker__log(w, "%s: stopping", strsignal(signum));
  begin_stop(w);
}

/* ---- public ------------------------------------------------------------ */

/* The CPU's model name from /proc/cpuinfo, else "cpu". */
static void cpu_model(char *out, size_t n) {
  snprintf(out, n, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10)) continue;
    char *v = strchr(line, ':');
    if (!v) break;
    v++;
    while (*v == ' ' || *v == '\t')
      v++;
    v[strcspn(v, "\r\n")] = 0;
    if (*v) snprintf(out, n, "%s", v);
    break;
  }
  fclose(f);
}

/* Cuts s to at most max bytes without splitting a UTF-8 character. */
static void cut_utf8(char *s, size_t max) {
  size_t n = strlen(s);
  if (n <= max) return;
  while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
    max--;
  s[max] = 0;
}

int aa_worker_create(aa_worker_t **out, const aa_worker_opts_t *o) {
  /* A planner that closes while we write must be a failed write (then a
   * reconnect), never a SIGPIPE that ends the executor. */
  signal(SIGPIPE, SIG_IGN);
  int cuda, rc;
  if ((rc = aa_proto_parse_device(o->device, &cuda))) return rc;
  if (o->threads < 0) return aa_error(AA_EINVAL, "threads must be >= 0");
  aa_worker_device_t dev;
  if ((rc = aa_worker__probe_device(cuda, &dev))) return rc;
  aa_worker_t *w = calloc(1, sizeof *w);
  if (!w) return aa_error(AA_ENOMEM, "out of memory");
  w->dev = dev;
  char text[AA_ADDR_PATH_MAX + 16];
  if (!o->planner)
    rc = aa_default_planner_addr(text, sizeof text);
  else
    snprintf(text, sizeof text, "%s", o->planner);
  if (rc || (rc = aa_addr_parse(&w->addr, text))) goto fail;
  aa_addr_format(&w->addr, w->addr_text, sizeof w->addr_text);
  char def_token[4096 + 16];
  const char *token_file = o->token_file;
  if (w->addr.tcp && !token_file && aa_default_token_file(def_token, sizeof def_token) == 1) token_file = def_token;
  if (token_file && (rc = aa_token_load(token_file, w->token, &w->token_len))) goto fail;
  w->threads = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (o->name) {
    if (!o->name[0]) {
      rc = aa_error(AA_EINVAL, "--name must not be empty");
      goto fail;
    }
    snprintf(w->name, sizeof w->name, "%s", o->name);
  } else if (cuda >= 0) {
    snprintf(w->name, sizeof w->name, "%s", dev.name);
  } else {
    char model[400];
    cpu_model(model, sizeof model);
    snprintf(w->name, sizeof w->name, "%.230s (%d threads)", model, w->threads);
  }
  cut_utf8(w->name, AA_PROTO_NAME_MAX);
  if (o->host) {
    if (!o->host[0] || strlen(o->host) > AA_PROTO_NAME_MAX) {
      rc = aa_error(AA_EINVAL, "--host must be 1..%d bytes", AA_PROTO_NAME_MAX);
      goto fail;
    }
    snprintf(w->host, sizeof w->host, "%s", o->host);
    /* hello carries it: it must be text the protocol takes (UTF-8, no NUL). */
    aa_msg_t probe = {.type = AA_MSG_BYE, .bye.reason = w->host};
    char *buf;
    size_t len;
    if (aa_msg_encode(&probe, &buf, &len)) {
      rc = aa_error(AA_EINVAL, "--host must be valid UTF-8 text");
      goto fail;
    }
    free(buf);
  } else if (gethostname(w->host, sizeof w->host - 1) || !w->host[0]) {
    snprintf(w->host, sizeof w->host, "localhost");
  }
  if (o->address) {
    if ((rc = aa_worker_parse_address(o->address))) goto fail;
    snprintf(w->address, sizeof w->address, "%s", o->address);
    w->address_given = true;
  } else {
    snprintf(w->address, sizeof w->address, "127.0.0.1");
  }
  w->memory_limit = o->memory_limit;
  w->memory = o->memory_limit ? o->memory_limit
              : cuda >= 0     ? dev.memory
                              : (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
  if (!w->memory) w->memory = 1;
  w->log = o->log ? o->log : stderr;
  w->backoff_ms = AA_WORKER_BACKOFF_MIN_MS;
  if ((rc = uv_loop_init(&w->loop))) {
    rc = aa_error(AA_EINTERNAL, "uv_loop_init: %s", uv_strerror(rc));
    goto fail;
  }
  uv_timer_init(&w->loop, &w->retry);
  uv_signal_init(&w->loop, &w->sigchld);
  uv_async_init(&w->loop, &w->wake, on_wake);
  /* aa_worker_stop may come from another thread at any time until destroy,
   * so the async handle lives that long, without keeping the loop up. */
  uv_unref((uv_handle_t *)&w->wake);
  w->retry.data = w->sigchld.data = w->wake.data = w;
  uv_signal_start(&w->sigchld, on_signal, SIGCHLD);
  *out = w;
  return 0;
fail:
  free(w);
  return rc;
}

void aa_worker_handle_signals(aa_worker_t *w) {
  if (w->signals) return;
  w->signals = true;
  uv_signal_init(&w->loop, &w->sigint);
  uv_signal_init(&w->loop, &w->sigterm);
  w->sigint.data = w->sigterm.data = w;
  uv_signal_start(&w->sigint, on_signal, SIGINT);
  uv_signal_start(&w->sigterm, on_signal, SIGTERM);
  /* SIGHUP (its terminal closed) stops it in order, as SIGTERM does, unless
   * it was started with SIGHUP ignored (nohup): then it stays ignored. */
  if (!aa_signal_ignored(SIGHUP)) {
    uv_signal_init(&w->loop, &w->sighup);
    w->sighup.data = w;
    uv_signal_start(&w->sighup, on_signal, SIGHUP);
    w->hup = true;
  }
}

int aa_worker_run(aa_worker_t *w) {
  if (w->stopping) return aa_error(AA_EINVAL, "the worker has already run");
  const aa_worker_device_t *d = &w->dev;
  char gpu[160] = "";
  if (d->cuda >= 0) {
    char peak[48] = "peak bf16 unknown";
    if (d->peak_bf16_flops > 0) snprintf(peak, sizeof peak, "peak bf16 %.0f TFLOP/s", d->peak_bf16_flops / 1e12);
    snprintf(gpu, sizeof gpu, "cuda:%d, sm_%d%d, %d SMs, %s, ", d->cuda, d->cc_major, d->cc_minor, d->sm_count, peak);
  }
  aa_worker__log(w, "%s, %s%d threads, memory %llu bytes%s; planner %s", w->name, gpu, w->threads,
                 (unsigned long long)w->memory, w->memory_limit ? " (limit)" : "", w->addr_text);
  if (w->stop_requested)
    begin_stop(w);
  else
    start_connect(w);
  uv_run(&w->loop, UV_RUN_DEFAULT);
  if (w->fatal) return aa_error(w->fatal, "%s", w->fatal_msg);
  return 0;
}

void aa_worker_stop(aa_worker_t *w) {
  w->stop_requested = 1;
  uv_async_send(&w->wake);
}

const char *aa_worker_device_name(const aa_worker_t *w) { return w->name; }

int aa_worker_parse_address(const char *address) {
  unsigned char buf[sizeof(struct in6_addr)];
  if (address && strlen(address) < AA_WORKER_ADDRESS_MAX &&
      (inet_pton(AF_INET, address, buf) == 1 || inet_pton(AF_INET6, address, buf) == 1))
    return 0;
  return aa_error(AA_EINVAL, "--address '%.64s': expected a numeric IPv4 or IPv6 address such as 10.0.0.5",
                  address ? address : "(null)");
}

void aa_worker__fingerprint(const aa_worker_t *w, char out[AA_CALIB_DEVICE_MAX]) {
  const char *kind = w->dev.cuda >= 0 ? "cuda" : "cpu";
  char tail[32];
  snprintf(tail, sizeof tail, ":%lluMiB", (unsigned long long)(w->memory >> 20));
  size_t room = AA_CALIB_DEVICE_MAX - 1 - strlen(kind) - 1 - strlen(tail), n = strlen(w->name);
  if (n > room) {
    n = room;
    while (n > 0 && ((unsigned char)w->name[n] & 0xC0) == 0x80)
      n--; /* do not split a UTF-8 character */
  }
  snprintf(out, AA_CALIB_DEVICE_MAX, "%s:%.*s%s", kind, (int)n, w->name, tail);
}

void aa_worker_destroy(aa_worker_t *w) {
  if (!w) return;
  if (!w->stopping) begin_stop(w);
  uv_close((uv_handle_t *)&w->wake, on_plain_closed);
  uv_run(&w->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&w->loop)) aa_worker__log(w, "internal: handles left open at exit");
  free(w);
}
