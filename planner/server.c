/* The planner's loop: the listening sockets (unix, optional TCP), one
 * connection per peer with its frame reader, the close queue, the tick
 * (heartbeats, dead peers) and the orderly stop.
 *
 * Connections follow Redis's rules: a peer's declared frame length is
 * checked before anything is buffered; a bad frame gets one error reply, a
 * sanitized log sample and a close after the reply is written; a
 * connection is never freed inside its own callback but put on a close
 * queue that an idle handle drains; nothing a peer sends stops the loop. */
#include "planner_internal.h"

#include "../common/json.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

void aa__planner_log(aa_planner_t *p, const char *fmt, ...) {
  char when[32];
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  FILE *f = p->log ? p->log : stderr;
  va_list ap;
  va_start(ap, fmt);
  flockfile(f);
  fprintf(f, "%s planner: ", when);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  funlockfile(f);
  fflush(f);
  va_end(ap);
}

/* --- the close queue ------------------------------------------------------------ */

static void maybe_finish_stop(aa_planner_t *p);

static void unlink_conn(aa_conn_t *c) {
  aa_planner_t *p = c->p;
  if (c->prev) c->prev->next = c->next;
  else if (p->conns == c) p->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
}


static void on_conn_closed(uv_handle_t *h) {
  aa_conn_t *c = h->data;
  aa_planner_t *p = c->p;
  unlink_conn(c);
  aa_frame_reader_free(&c->reader);
  free(c->dev.name);
  free(c->dev.host);
  free(c);
  p->nconns--;
  maybe_finish_stop(p);
}

static void on_reap(uv_idle_t *h) {
  aa_planner_t *p = h->data;
  while (p->close_q) {
    aa_conn_t *c = p->close_q;
    p->close_q = c->close_next;
    uv_close(&c->h.handle, on_conn_closed);
  }
  uv_idle_stop(h);
}

static void enqueue_close(aa_conn_t *c) {
  if (c->queued) return;
  c->queued = true;
  c->close_next = c->p->close_q;
  c->p->close_q = c;
  uv_idle_start(&c->p->reaper, on_reap);
}

/* Role-specific teardown, once: an executor's run is lost, a client's
 * waits end. */
static void teardown(aa_conn_t *c, const char *why) {
  if (c->dropped) return;
  c->dropped = true;
  uv_read_stop(&c->h.stream);
  if (c->role == AA_CONN_EXECUTOR) aa__registry_executor_gone(c, why);
  else if (c->role == AA_CONN_CLIENT) aa__jobs_client_gone(c);
}

void aa__conn_drop(aa_conn_t *c, const char *why) {
  teardown(c, why);
  enqueue_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  enqueue_close(req->data);
}

/* Closes c once the frames queued on it are written (the error reply of a
 * protocol error, the bye of a stop). */
static void drop_after_writes(aa_conn_t *c, const char *why) {
  teardown(c, why);
  if (c->shutting || c->queued) return;
  c->shutting = true;
  c->shutdown_req.data = c;
  if (uv_shutdown(&c->shutdown_req, &c->h.stream, on_shutdown)) enqueue_close(c);
}

/* --- writing ---------------------------------------------------------------------- */

typedef struct {
  uv_write_t req;
  char *buf;
} wreq_t;

static void on_written(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  aa_conn_t *c = req->data;
  free(w->buf);
  free(w);
  if (status < 0 && !c->dropped) aa__conn_drop(c, "disconnected");
}

/* Queues buf (transferred) on c. */
static void conn_write(aa_conn_t *c, char *buf, size_t len) {
  if (c->dropped) {
    free(buf);
    return;
  }
  wreq_t *w = malloc(sizeof *w);
  if (!w) {
    free(buf);
    aa__conn_drop(c, "disconnected (no memory for a write)");
    return;
  }
  w->buf = buf;
  w->req.data = c;
  uv_buf_t b = uv_buf_init(buf, (unsigned)len);
  if (uv_write(&w->req, &c->h.stream, &b, 1, on_written)) {
    free(buf);
    free(w);
    aa__conn_drop(c, "disconnected");
  }
}

int aa__conn_send(aa_conn_t *c, const aa_msg_t *m) {
  if (c->dropped) return 0;
  char *buf;
  size_t len;
  int rc = aa_msg_encode(m, &buf, &len);
  if (rc) {
    aa__planner_log(c->p, "cannot encode %s for %s: %s", aa_msg_type_name(m->type), c->peer, aa_last_error());
    return rc;
  }
  conn_write(c, buf, len);
  return 0;
}

void aa__conn_send_error(aa_conn_t *c, uint64_t id, int code, const char *message) {
  if (c->dropped) return;
  char *buf;
  size_t len;
  if (!aa_msg_encode_error(&buf, &len, id, code, message)) conn_write(c, buf, len);
}

void aa__conn_fail(aa_conn_t *c, uint64_t id, int code, const char *message, const void *sample, size_t n) {
  if (c->dropped) return;
  char hex[3 * 24 + 8] = "";
  const unsigned char *b = sample;
  size_t k = n < 24 ? n : 24, o = 0;
  for (size_t i = 0; i < k; i++) o += (size_t)snprintf(hex + o, sizeof hex - o, "%s%02x", i ? " " : "", b[i]);
  if (n > k) snprintf(hex + o, sizeof hex - o, " ...");
  char safe[160];
  aa_json_sanitize(safe, sizeof safe, message);
  aa__planner_log(c->p, "protocol error from %s: %s (code %d)%s%s%s; closing", c->peer, safe, code,
                  sample ? ", first bytes [" : "", sample ? hex : "", sample ? "]" : "");
  /* The peer learns that the close is deliberate, not a crash. */
  char full[AA_PROTO_TEXT_MAX];
  snprintf(full, sizeof full, "%.4000s; connection closed", message);
  aa__conn_send_error(c, id, code, full);
  drop_after_writes(c, "closed after a protocol error");
}

/* --- reading --------------------------------------------------------------------- */

static void dispatch(aa_conn_t *c, aa_msg_t *m, const void *payload, size_t n) {
  if (c->role == AA_CONN_HELLO) {
    if (m->type != AA_MSG_HELLO) {
      char msg[128];
      snprintf(msg, sizeof msg, "expected hello as the first message, got %s", aa_msg_type_name(m->type));
      aa__conn_fail(c, m->id, AA_EFORMAT, msg, payload, n);
      return;
    }
    aa__registry_hello(c, m);
    return;
  }
  switch (m->type) {
  case AA_MSG_HEARTBEAT: return;
  case AA_MSG_BYE: aa__conn_drop(c, "said bye"); return;
  default: break;
  }
  if (c->role == AA_CONN_CLIENT) {
    switch (m->type) {
    case AA_MSG_SUBMIT: aa__jobs_on_submit(c, m); return;
    case AA_MSG_CANCEL: aa__jobs_on_cancel(c, m); return;
    case AA_MSG_STATUS: {
      char *text = NULL;
      int rc;
      if (m->status.job) {
        json_t *j;
        rc = aa__report_job(c->p->store, c->p->home, (int64_t)m->status.job, &j);
        if (!rc) {
          json_t *o = json_pack("{s:o}", "job", j);
          if (!(text = aa__report_dump(o))) rc = aa_error(AA_ENOMEM, "status: no memory");
          json_decref(o);
        }
      } else {
        rc = aa__report_status(c->p, &text);
      }
      if (rc) {
        aa__conn_send_error(c, m->id, rc, aa_last_error());
        return;
      }
      aa_msg_t r = {.type = AA_MSG_REPLY, .id = m->id, .reply.json = text};
      aa__conn_send(c, &r);
      free(text);
      return;
    }
    case AA_MSG_QUERY: {
      char *text = NULL;
      int rc = aa__report_query(c->p->store, c->p->home, m->query.what, m->query.args, &text);
      if (rc) {
        aa__conn_send_error(c, m->id, rc, aa_last_error());
        return;
      }
      aa_msg_t r = {.type = AA_MSG_REPLY, .id = m->id, .reply.json = text};
      aa__conn_send(c, &r);
      free(text);
      return;
    }
    default: break;
    }
  } else {
    switch (m->type) {
    case AA_MSG_PROGRESS: aa__jobs_on_progress(c, m); return;
    case AA_MSG_RESULT: aa__jobs_on_result(c, m); return;
    case AA_MSG_ERROR: aa__jobs_on_executor_error(c, m); return;
    default: break;
    }
  }
  char msg[128];
  snprintf(msg, sizeof msg, "%s: not accepted from %s", aa_msg_type_name(m->type),
           c->role == AA_CONN_CLIENT ? "a client" : "an executor");
  aa__conn_fail(c, m->id, AA_EFORMAT, msg, payload, n);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  aa_conn_t *c = h->data;
  *buf = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  aa_conn_t *c = s->data;
  if (c->dropped) return;
  if (nread < 0) {
    if (c->reader.hdr_n || c->reader.need) {
      aa__planner_log(c->p, "%s closed the connection in the middle of a frame", c->peer);
      aa__conn_send_error(c, 0, AA_EPARSE, "truncated frame: the connection ended inside it");
      drop_after_writes(c, "disconnected");
      return;
    }
    if (c->role == AA_CONN_CLIENT && nread != UV_EOF)
      aa__planner_log(c->p, "client %llu: %s", (unsigned long long)c->id, uv_strerror((int)nread));
    aa__conn_drop(c, "disconnected");
    return;
  }
  c->last_seen = aa_now();
  const char *data = buf->base;
  size_t left = (size_t)nread;
  while (left > 0 && !c->dropped) {
    size_t used = 0, n = 0;
    const void *payload = NULL;
    int rc = aa_frame_reader_feed(&c->reader, data, left, &used, &payload, &n);
    if (rc < 0) {
      aa__conn_fail(c, 0, rc, aa_last_error(), data, left);
      return;
    }
    data += used;
    left -= used;
    if (rc == 0) break;
    aa_msg_t m;
    if ((rc = aa_msg_decode(payload, n, &m))) {
      aa__conn_fail(c, 0, rc, aa_last_error(), payload, n);
      return;
    }
    dispatch(c, &m, payload, n);
    aa_msg_free(&m);
  }
}

/* --- accepting -------------------------------------------------------------------- */

static void peer_name(aa_conn_t *c) {
  if (!c->tcp) {
    snprintf(c->peer, sizeof c->peer, "unix socket");
    return;
  }
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char host[64] = "?";
  int port = 0;
  if (!uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &len)) {
    if (ss.ss_family == AF_INET) {
      uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    } else if (ss.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
      port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
  }
  snprintf(c->peer, sizeof c->peer, "tcp %s:%d", host, port);
}

static void on_connection(uv_stream_t *server, int status) {
  aa_planner_t *p = server->data;
  if (status < 0) {
    aa__planner_log(p, "accept: %s", uv_strerror(status));
    return;
  }
  aa_conn_t *c = calloc(1, sizeof *c);
  if (!c) {
    aa__planner_log(p, "accept: no memory for a connection");
    return;
  }
  c->p = p;
  c->tcp = server == (uv_stream_t *)&p->tcp_srv;
  int rc = c->tcp ? uv_tcp_init(&p->loop, &c->h.tcp) : uv_pipe_init(&p->loop, &c->h.pipe, 0);
  if (rc) {
    free(c);
    aa__planner_log(p, "accept: %s", uv_strerror(rc));
    return;
  }
  c->h.handle.data = c;
  p->nconns++;
  aa_frame_reader_init(&c->reader, 0);
  c->last_seen = aa_now();
  c->next = p->conns; /* on the list from now until its close callback */
  if (p->conns) p->conns->prev = c;
  p->conns = c;
  if ((rc = uv_accept(server, &c->h.stream)) || (rc = uv_read_start(&c->h.stream, on_alloc, on_read))) {
    aa__planner_log(p, "accept: %s", uv_strerror(rc));
    c->dropped = true;
    enqueue_close(c);
    return;
  }
  peer_name(c);
}

/* --- the unix socket ---------------------------------------------------------------- */

/* Refuses a path where a live planner answers; removes a stale socket. */
static int clear_socket_path(const char *path) {
  struct stat sb;
  if (lstat(path, &sb)) return errno == ENOENT ? 0 : aa_error(AA_EIO, "%s: %s", path, strerror(errno));
  if (!S_ISSOCK(sb.st_mode)) return aa_error(AA_EIO, "%s exists and is not a socket; not removing it", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return aa_error(AA_EIO, "socket: %s", strerror(errno));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  int err = errno;
  close(fd);
  if (live) return aa_error(AA_EIO, "another planner is listening on %s", path);
  if (err != ECONNREFUSED && err != ENOENT)
    return aa_error(AA_EIO, "cannot tell whether a planner listens on %s: %s", path, strerror(err));
  if (unlink(path) && errno != ENOENT) return aa_error(AA_EIO, "cannot remove the stale socket %s: %s", path, strerror(errno));
  return 0;
}

static int listen_unix(aa_planner_t *p) {
  int rc = clear_socket_path(p->socket_path);
  if (rc) return rc;
  if ((rc = uv_pipe_init(&p->loop, &p->unix_srv, 0))) return aa_error(AA_EIO, "pipe: %s", uv_strerror(rc));
  p->unix_open = true;
  p->unix_srv.data = p;
  if ((rc = uv_pipe_bind(&p->unix_srv, p->socket_path)))
    return aa_error(AA_EIO, "cannot bind %s: %s", p->socket_path, uv_strerror(rc));
  /* Nobody can connect before listen, so the mode is set in time. */
  struct stat sb;
  if (chmod(p->socket_path, 0600) || stat(p->socket_path, &sb))
    return aa_error(AA_EIO, "%s: %s", p->socket_path, strerror(errno));
  p->sock_created = true;
  p->sock_dev = sb.st_dev;
  p->sock_ino = sb.st_ino;
  if ((rc = uv_listen((uv_stream_t *)&p->unix_srv, 64, on_connection)))
    return aa_error(AA_EIO, "cannot listen on %s: %s", p->socket_path, uv_strerror(rc));
  return 0;
}

static int listen_tcp(aa_planner_t *p, const char *text) {
  aa_addr_t a;
  char full[AA_ADDR_HOST_MAX + 16];
  snprintf(full, sizeof full, "tcp:%s", strncmp(text, "tcp:", 4) ? text : text + 4);
  int rc = aa_addr_parse(&a, full);
  if (rc) return aa_error_wrap(rc, "--listen");
  if (!aa_addr_is_loopback(a.host) && !p->token_len)
    return aa_error(AA_EPERM, "--listen %s: a host that is not loopback needs --token-file", text);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
  char port[16];
  snprintf(port, sizeof port, "%d", a.port);
  int g = getaddrinfo(a.host, port, &hints, &res);
  if (g) return aa_error(AA_EINVAL, "--listen %s: %s", text, gai_strerror(g));
  if ((rc = uv_tcp_init(&p->loop, &p->tcp_srv))) {
    freeaddrinfo(res);
    return aa_error(AA_EIO, "tcp: %s", uv_strerror(rc));
  }
  p->tcp_open = true;
  p->tcp_srv.data = p;
  rc = uv_tcp_bind(&p->tcp_srv, res->ai_addr, 0);
  freeaddrinfo(res);
  if (!rc) rc = uv_listen((uv_stream_t *)&p->tcp_srv, 64, on_connection);
  if (rc) return aa_error(AA_EIO, "cannot listen on %s: %s", text, uv_strerror(rc));
  aa_addr_format(&a, p->tcp_address, sizeof p->tcp_address);
  return 0;
}

/* --- tick, stop, signals ----------------------------------------------------------- */

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* The stop is over when every connection is closed: then the planner's own
 * handles go, and uv_run returns. */
static void maybe_finish_stop(aa_planner_t *p) {
  if (!p->stopping || p->nconns > 0 || p->handles_closed) return;
  p->handles_closed = true;
  close_handle((uv_handle_t *)&p->tick);
  close_handle((uv_handle_t *)&p->kick);
  close_handle((uv_handle_t *)&p->wake);
  close_handle((uv_handle_t *)&p->reaper);
  if (p->signals_open) {
    close_handle((uv_handle_t *)&p->sig_int);
    close_handle((uv_handle_t *)&p->sig_term);
  }
}

static void begin_stop(aa_planner_t *p, const char *why) {
  if (p->stopping) return;
  p->stopping = true;
  p->stop_started = aa_now();
  aa__planner_log(p, "stopping (%s)", why);
  if (p->unix_open) close_handle((uv_handle_t *)&p->unix_srv);
  if (p->tcp_open) close_handle((uv_handle_t *)&p->tcp_srv);
  aa__jobs_interrupt(p);
  aa_msg_t bye = {.type = AA_MSG_BYE, .bye.reason = "the planner is stopping"};
  for (aa_conn_t *c = p->conns; c; c = c->next) {
    if (c->dropped) continue;
    if (c->role != AA_CONN_HELLO) aa__conn_send(c, &bye);
    drop_after_writes(c, "closed: the planner is stopping");
  }
  uv_timer_stop(&p->kick);
  maybe_finish_stop(p);
}

static void on_tick(uv_timer_t *t) {
  aa_planner_t *p = t->data;
  if (!p->stopping) {
    aa__registry_tick(p);
    aa__planner_kick(p); /* the search time limit, executors that came back */
    return;
  }
  /* A peer that does not read its bye does not hold the stop up. */
  if ((aa_now() - p->stop_started) * 1000 >= AA_PLANNER_STOP_GRACE_MS)
    for (aa_conn_t *c = p->conns; c; c = c->next) enqueue_close(c);
}

static void on_kick(uv_timer_t *t) {
  aa_planner_t *p = t->data;
  if (!p->stopping) aa__jobs_schedule(p);
}

void aa__planner_kick(aa_planner_t *p) {
  if (!p->stopping && !p->handles_closed) uv_timer_start(&p->kick, on_kick, 0, 0);
}

static void on_wake(uv_async_t *a) {
  aa_planner_t *p = a->data;
  if (p->stop_requested) begin_stop(p, "asked to stop");
}

static void on_signal(uv_signal_t *s, int signum) {
  aa_planner_t *p = s->data;
  begin_stop(p, signum == SIGINT ? "SIGINT" : "SIGTERM");
}

/* --- the public API ------------------------------------------------------------------ */

static int make_home(const char *home) {
  struct stat sb;
  if (!stat(home, &sb)) {
    if (!S_ISDIR(sb.st_mode)) return aa_error(AA_EIO, "%s is not a directory", home);
    return 0;
  }
  int rc = aa_mkdirs(home);
  if (rc) return rc;
  if (chmod(home, 0700)) return aa_error(AA_EIO, "%s: %s", home, strerror(errno));
  return 0;
}

static int setup(aa_planner_t *p, const aa_planner_opts_t *o) {
  int rc;
  if (o->home) snprintf(p->home, sizeof p->home, "%s", o->home);
  else if ((rc = aa_home_dir(p->home, sizeof p->home))) return rc;
  if ((rc = make_home(p->home))) return rc;
  const char *sock = o->socket_path;
  char def[AA_PATH_MAX + 32];
  if (!sock) {
    snprintf(def, sizeof def, "%s/planner.sock", p->home);
    sock = def;
  }
  if (strlen(sock) >= sizeof p->socket_path)
    return aa_error(AA_EINVAL, "unix socket path %s is %zu bytes, longer than %zu", sock, strlen(sock),
                    sizeof p->socket_path - 1);
  snprintf(p->socket_path, sizeof p->socket_path, "%s", sock);
  snprintf(p->address, sizeof p->address, "unix:%s", p->socket_path);
  if (o->store_path) snprintf(p->store_path, sizeof p->store_path, "%s", o->store_path);
  else snprintf(p->store_path, sizeof p->store_path, "%.4080s/store.db", p->home);
  if (o->token_file && (rc = aa_token_load(o->token_file, p->token, &p->token_len))) return rc;
  if (o->heartbeat_ms < 0 || o->heartbeat_ms > 3600000 || (o->heartbeat_ms && o->heartbeat_ms < 100))
    return aa_error(AA_EINVAL, "heartbeat_ms %d must be in 100..3600000", o->heartbeat_ms);
  p->heartbeat_ms = o->heartbeat_ms ? o->heartbeat_ms : 1000;
  p->dead_after_ms = o->dead_after_ms > 0 ? o->dead_after_ms : 10 * p->heartbeat_ms;
  if (p->dead_after_ms < p->heartbeat_ms)
    return aa_error(AA_EINVAL, "dead_after_ms %d must be at least heartbeat_ms %d", p->dead_after_ms, p->heartbeat_ms);
  p->warmup_steps = o->warmup_steps < 0 ? 1 : o->warmup_steps;
  p->measured_steps = o->measured_steps > 0 ? o->measured_steps : 4;
  if (o->dryrun_time_limit_s < 0 || o->dryrun_time_limit_s > AA_PROTO_TIME_LIMIT_MAX)
    return aa_error(AA_EINVAL, "dry-run time limit %d s must be in 0..%d", o->dryrun_time_limit_s,
                    AA_PROTO_TIME_LIMIT_MAX);
  p->dryrun_time_limit_s = o->dryrun_time_limit_s > 0 ? o->dryrun_time_limit_s : 300;
  p->log = o->log;
  p->started = aa_now();

  int jobs_interrupted = 0, runs_crashed = 0;
  if ((rc = aa_store_open(&p->store, p->store_path, 0))) return rc;
  if ((rc = aa_store_recover(p->store, &jobs_interrupted, &runs_crashed))) return rc;
  if (jobs_interrupted || runs_crashed)
    aa__planner_log(p, "recovered the store: %d jobs interrupted, %d runs crashed", jobs_interrupted, runs_crashed);
  char dir[AA_PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%.4080s/strategies", p->home);
  if ((rc = aa_mkdirs(dir))) return rc;
  if ((rc = aa__jobs_load_queue(p))) return rc;

  if ((rc = uv_loop_init(&p->loop))) return aa_error(AA_EIO, "uv_loop_init: %s", uv_strerror(rc));
  p->loop_ready = true;
  uv_timer_init(&p->loop, &p->tick);
  uv_timer_init(&p->loop, &p->kick);
  uv_idle_init(&p->loop, &p->reaper);
  if ((rc = uv_async_init(&p->loop, &p->wake, on_wake))) return aa_error(AA_EIO, "uv_async_init: %s", uv_strerror(rc));
  p->tick.data = p->kick.data = p->reaper.data = p->wake.data = p;
  if ((rc = listen_unix(p))) return rc;
  if (o->tcp && (rc = listen_tcp(p, o->tcp))) return rc;
  return 0;
}

int aa_planner_create(aa_planner_t **out, const aa_planner_opts_t *opts) {
  aa_planner_opts_t none = {0};
  aa_planner_t *p = calloc(1, sizeof *p);
  if (!p) return aa_error(AA_ENOMEM, "planner: no memory");
  int rc = setup(p, opts ? opts : &none);
  if (rc) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", aa_last_error());
    aa_planner_destroy(p);
    return aa_error(rc, "%s", msg);
  }
  aa__planner_log(p, "listening on %s%s%s; store %s; heartbeat %d ms, dead after %d ms", p->address,
                  p->tcp_address[0] ? " and " : "", p->tcp_address, p->store_path, p->heartbeat_ms, p->dead_after_ms);
  *out = p;
  return 0;
}

void aa_planner_handle_signals(aa_planner_t *p) { p->signals_wanted = true; }

const char *aa_planner_address(const aa_planner_t *p) { return p->address; }

void aa_planner_stop(aa_planner_t *p) {
  p->stop_requested = 1;
  uv_async_send(&p->wake);
}

int aa_planner_run(aa_planner_t *p) {
  if (p->handles_closed) return aa_error(AA_EINVAL, "planner: already stopped");
  if (p->signals_wanted && !p->signals_open) {
    uv_signal_init(&p->loop, &p->sig_int);
    uv_signal_init(&p->loop, &p->sig_term);
    p->sig_int.data = p->sig_term.data = p;
    uv_signal_start(&p->sig_int, on_signal, SIGINT);
    uv_signal_start(&p->sig_term, on_signal, SIGTERM);
    p->signals_open = true;
  }
  uv_timer_start(&p->tick, on_tick, (uint64_t)p->heartbeat_ms, (uint64_t)p->heartbeat_ms);
  aa__planner_kick(p);
  if (p->stop_requested) begin_stop(p, "asked to stop");
  uv_run(&p->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&p->loop);
  if (rc) return aa_error(AA_EINTERNAL, "planner: handles left open after the stop: %s", uv_strerror(rc));
  p->loop_ready = false;
  aa__planner_log(p, "stopped");
  return 0;
}

void aa_planner_destroy(aa_planner_t *p) {
  if (!p) return;
  if (p->loop_ready) {
    /* Never run, or run returned early: close what create opened. */
    if (!p->stopping) begin_stop(p, "destroyed");
    else maybe_finish_stop(p);
    if (!p->handles_closed) {
      p->stopping = true;
      maybe_finish_stop(p);
    }
    uv_run(&p->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&p->loop)) aa__planner_log(p, "handles left open at destroy");
  }
  struct stat sb;
  if (p->sock_created && !stat(p->socket_path, &sb) && sb.st_dev == p->sock_dev && sb.st_ino == p->sock_ino)
    unlink(p->socket_path);
  aa__jobs_free(p);
  aa_store_close(p->store);
  free(p);
}
