/* The planner's loop: its limits, the listening sockets (unix, TCP with a
 * token), what each decoded message does, the tick (heartbeats, dead
 * peers, deadlines) and the orderly stop. The connections themselves are
 * in conn.c. */
#include "planner_internal.h"

#include "../common/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
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

/* --- messages -------------------------------------------------------------------- */

void aa__planner_dispatch(aa_conn_t *c, aa_msg_t *m, const void *payload, size_t n) {
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
    case AA_MSG_CALIB_IMPORT: aa__calib_on_import(c, m); return;
    case AA_MSG_STATUS: {
      char *text = NULL;
      int rc;
      if (m->status.job) {
        json_t *j;
        rc = aa__report_job(c->p->store, c->p->home, (int64_t)m->status.job, &j);
        if (!rc) {
          aa__jobs_annotate(c->p, j);
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
      aa__conn_reply(c, m->id, text);
      free(text);
      return;
    }
    case AA_MSG_QUERY: {
      if (!strcmp(m->query.what, "plan")) { /* predictions: off the loop */
        aa__plan_start(c, m->id, m->query.args);
        return;
      }
      char *text = NULL;
      int rc = aa__report_query(c->p->store, c->p->home, m->query.what, m->query.args, &text, c->p);
      if (rc) {
        aa__conn_send_error(c, m->id, rc, aa_last_error());
        return;
      }
      aa__conn_reply(c, m->id, text);
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
  if (unlink(path) && errno != ENOENT)
    return aa_error(AA_EIO, "cannot remove the stale socket %s: %s", path, strerror(errno));
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
  /* Nobody can connect before listen, so the mode is set in time. The
   * name is not followed if it was replaced by a link since the bind (a
   * shared --socket directory): the mode of what it points to is not ours
   * to change. */
  struct stat sb;
  if (fchmodat(AT_FDCWD, p->socket_path, 0600, AT_SYMLINK_NOFOLLOW) || lstat(p->socket_path, &sb))
    return aa_error(AA_EIO, "%s: %s", p->socket_path, strerror(errno));
  if (!S_ISSOCK(sb.st_mode))
    return aa_error(AA_EIO, "%s was replaced by something that is not a socket while the planner bound it",
                    p->socket_path);
  p->sock_created = true;
  p->sock_dev = sb.st_dev;
  p->sock_ino = sb.st_ino;
  if ((rc = uv_listen((uv_stream_t *)&p->unix_srv, 64, aa__conn_on_connection)))
    return aa_error(AA_EIO, "cannot listen on %s: %s", p->socket_path, uv_strerror(rc));
  return 0;
}

/* Whether a resolved address is a wildcard (every interface). */
static bool is_wildcard(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
  if (sa->sa_family == AF_INET6)
    return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return false;
}

int aa__planner_numeric_host(const struct sockaddr *sa, char *out, size_t n) {
  snprintf(out, n, "?");
  if (sa->sa_family == AF_INET) {
    uv_ip4_name((const struct sockaddr_in *)sa, out, n);
    return ntohs(((const struct sockaddr_in *)sa)->sin_port);
  }
  if (sa->sa_family == AF_INET6) {
    uv_ip6_name((const struct sockaddr_in6 *)sa, out, n);
    return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
  }
  return 0;
}

/* Every TCP peer presents a token: --token-file's, else <home>/token. When
 * that file does not exist yet, a token is drawn here (32 random bytes in
 * hex) and *fresh is set: save_token writes it once the planner listens,
 * so a --listen that fails leaves no token file behind. The unix socket's
 * mode protects only the unix socket: on loopback TCP any local user could
 * connect. */
static int load_or_draw_token(aa_planner_t *p, bool *fresh) {
  char path[AA_PATH_MAX + 16];
  snprintf(path, sizeof path, "%.4080s/token", p->home);
  int rc = aa_token_load(path, p->token, &p->token_len);
  if (rc != AA_ENOENT) return rc;
  unsigned char raw[32];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
    return aa_error(AA_EIO, "cannot make a token for %s: getrandom: %s", path, strerror(errno));
  for (size_t i = 0; i < sizeof raw; i++)
    snprintf(p->token + 2 * i, 3, "%02x", raw[i]);
  p->token_len = 2 * sizeof raw;
  *fresh = true;
  return 0;
}

/* Writes the token drawn by load_or_draw_token to <home>/token, mode 0600,
 * with O_EXCL|O_NOFOLLOW: a file or link that appeared meanwhile is never
 * written through. */
static int save_token(aa_planner_t *p) {
  char path[AA_PATH_MAX + 16], line[AA_TOKEN_MAX + 2];
  snprintf(path, sizeof path, "%.4080s/token", p->home);
  int len = snprintf(line, sizeof line, "%s\n", p->token);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return aa_error(AA_EIO, "cannot create the token file %s: %s", path, strerror(errno));
  ssize_t w = write(fd, line, (size_t)len);
  if (close(fd) || w != len) {
    unlink(path);
    return aa_error(AA_EIO, "cannot write the token file %s", path);
  }
  aa__planner_log(
      p, "made a token for TCP peers in %s (mode 0600): give it to executors and clients with --token-file",
      path);
  return 0;
}

/* Listens on TCP at the address `text` resolves to. The address decides,
 * not the text: a name that resolves to a wildcard address would listen
 * on every interface while the user believed otherwise, so only a literal
 * wildcard (0.0.0.0, [::]) may do that. */
static int listen_tcp(aa_planner_t *p, const char *text) {
  aa_addr_t a;
  char full[AA_ADDR_HOST_MAX + 16];
  snprintf(full, sizeof full, "tcp:%s", strncmp(text, "tcp:", 4) ? text : text + 4);
  int rc = aa_addr_parse(&a, full);
  if (rc) return aa_error_wrap(rc, "--listen");
  bool fresh = false;
  if (!p->token_len && (rc = load_or_draw_token(p, &fresh))) return rc; /* none from --token-file */
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
  char port[16], host[64];
  snprintf(port, sizeof port, "%d", a.port);
  int g = getaddrinfo(a.host, port, &hints, &res);
  if (g) return aa_error(AA_EINVAL, "--listen %s: %s", text, gai_strerror(g));
  aa__planner_numeric_host(res->ai_addr, host, sizeof host);
  bool literal_any = !strcmp(a.host, "0.0.0.0") || !strcmp(a.host, "::");
  if (is_wildcard(res->ai_addr) && !literal_any) {
    freeaddrinfo(res);
    return aa_error(
        AA_EINVAL,
        "--listen %s: %s resolves to %s, which listens on every interface; write %s:%d if that is "
        "what you mean",
        text, a.host, host, strchr(host, ':') ? "[::]" : "0.0.0.0", a.port);
  }
  if ((rc = uv_tcp_init(&p->loop, &p->tcp_srv))) {
    freeaddrinfo(res);
    return aa_error(AA_EIO, "tcp: %s", uv_strerror(rc));
  }
  p->tcp_open = true;
  p->tcp_srv.data = p;
  rc = uv_tcp_bind(&p->tcp_srv, res->ai_addr, 0);
  freeaddrinfo(res);
  if (!rc) rc = uv_listen((uv_stream_t *)&p->tcp_srv, 64, aa__conn_on_connection);
  if (rc) return aa_error(AA_EIO, "cannot listen on %s: %s", text, uv_strerror(rc));
  if (fresh && (rc = save_token(p))) return rc;
  snprintf(a.host, sizeof a.host, "%s", host); /* the address it resolved to and is bound to */
  aa_addr_format(&a, p->tcp_address, sizeof p->tcp_address);
  return 0;
}

/* --- tick, stop, signals ----------------------------------------------------------- */

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* The stop is over when every connection is closed: then the planner's own
 * handles go, and uv_run returns. */
void aa__planner_maybe_finish_stop(aa_planner_t *p) {
  if (!p->stopping || p->nconns > 0 || p->handles_closed) return;
  p->handles_closed = true;
  close_handle((uv_handle_t *)&p->tick);
  close_handle((uv_handle_t *)&p->kick);
  close_handle((uv_handle_t *)&p->wake);
  close_handle((uv_handle_t *)&p->reaper);
  close_handle((uv_handle_t *)&p->turn);
  if (p->signals_open) {
    close_handle((uv_handle_t *)&p->sig_int);
    close_handle((uv_handle_t *)&p->sig_term);
    if (p->hup_open) close_handle((uv_handle_t *)&p->sig_hup);
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
    aa__conn_drop_after_writes(c, "closed: the planner is stopping");
  }
  uv_timer_stop(&p->kick);
  aa__planner_maybe_finish_stop(p);
}

static void on_tick(uv_timer_t *t) {
  aa_planner_t *p = t->data;
  if (!p->stopping) {
    aa__conn_check_deadlines(p, aa_now());
    aa__registry_tick(p);
    aa__jobs_tick(p);
    aa__planner_kick(p); /* the search time limit, executors that came back */
    return;
  }
  /* A peer that does not read its bye does not hold the stop up. */
  if ((aa_now() - p->stop_started) * 1000 >= AA_PLANNER_STOP_GRACE_MS)
    for (aa_conn_t *c = p->conns; c; c = c->next)
      aa__conn_enqueue_close(c);
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
  begin_stop(p, signum == SIGINT ? "SIGINT" : signum == SIGTERM ? "SIGTERM" : "SIGHUP: its terminal closed");
}

/* --- the public API ------------------------------------------------------------------ */

/* The state directory holds the store, the socket and the token: only
 * its owner may enter it. A directory made earlier with a wider mode is
 * narrowed (and the log says so); one owned by somebody else is refused. */
static int make_home(aa_planner_t *p, const char *home) {
  struct stat sb;
  if (stat(home, &sb)) {
    int rc = aa_mkdirs(home);
    if (rc) return rc;
    if (chmod(home, 0700)) return aa_error(AA_EIO, "%s: %s", home, strerror(errno));
    return 0;
  }
  if (!S_ISDIR(sb.st_mode)) return aa_error(AA_EIO, "%s is not a directory", home);
  if (sb.st_uid != geteuid())
    return aa_error(AA_EPERM, "state directory %s belongs to uid %u, not to this user (uid %u)", home,
                    (unsigned)sb.st_uid, (unsigned)geteuid());
  if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
    if (chmod(home, 0700)) return aa_error(AA_EIO, "%s: %s", home, strerror(errno));
    aa__planner_log(p, "state directory %s was mode %03o; now 0700", home, (unsigned)(sb.st_mode & 0777));
  }
  return 0;
}

/* The limits: one table gives each its name, range and default
 * (docs/service.md "Limits"; Redis's config table). Options are ints
 * except the byte counts (write_queue_max, input_buffer_max). 0 in the
 * options means the default. */
typedef struct {
  const char *name;
  size_t opt, lim; /* offsetof in aa_planner_opts_t and aa_planner_limits_t */
  bool bytes;      /* long long option, size_t limit */
  long long min, max, def;
} limit_t;

#define LIMIT(n, mn, mx, d)                                                                                  \
  { #n, offsetof(aa_planner_opts_t, n), offsetof(aa_planner_limits_t, n), false, mn, mx, d }
static const limit_t limits[] = {
    LIMIT(max_connections, AA_PLANNER_UNIX_RESERVE + 1, 1000000, 1024),
    LIMIT(max_unauthenticated, 1, 1000000, 64),
    LIMIT(hello_timeout_ms, 100, 3600000, 10000),
    LIMIT(frame_timeout_ms, 100, 3600000, 30000),
    {"write_queue_max", offsetof(aa_planner_opts_t, write_queue_max),
     offsetof(aa_planner_limits_t, write_queue_max), true, 4096, 1LL << 40, 32LL << 20},
    /* At least one whole frame, its header and a deferred read: a lone
     * peer sending the largest frame is never over the budget. */
    {"input_buffer_max", offsetof(aa_planner_opts_t, input_buffer_max),
     offsetof(aa_planner_limits_t, input_buffer_max), true, 17LL << 20, 1LL << 40, 64LL << 20},
    LIMIT(placement_timeout_s, 1, AA_PROTO_TIME_LIMIT_MAX, 3600),
};
#undef LIMIT

/* Fills p->lim from the options. The connection cap never exceeds what the
 * descriptor limit allows, so the planner refuses peers itself rather than
 * failing accept() for its owner too. */
static int set_limits(aa_planner_t *p, const aa_planner_opts_t *o) {
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    const limit_t *l = &limits[i];
    const char *ob = (const char *)o;
    char *lb = (char *)&p->lim;
    long long v = l->bytes ? *(const long long *)(ob + l->opt) : *(const int *)(ob + l->opt);
    if (v == 0) v = l->def;
    if (v < l->min || v > l->max)
      return aa_error(AA_EINVAL, "planner: %s %lld must be in %lld..%lld", l->name, v, l->min, l->max);
    if (l->bytes)
      *(size_t *)(lb + l->lim) = (size_t)v;
    else
      *(int *)(lb + l->lim) = (int)v;
  }
  p->lim.max_resumes = o->max_resumes < 0 ? 0 : o->max_resumes > 0 ? o->max_resumes : 3;
  if (p->lim.max_resumes > 1000)
    return aa_error(AA_EINVAL, "planner: max_resumes %d must be in 0..1000", o->max_resumes);
  struct rlimit rl;
  if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY) {
    long long room = (long long)rl.rlim_cur - AA_PLANNER_FD_RESERVE;
    if (room < AA_PLANNER_UNIX_RESERVE + 1) room = AA_PLANNER_UNIX_RESERVE + 1;
    if (room < p->lim.max_connections) p->lim.max_connections = (int)room;
  }
  return 0;
}

static int setup(aa_planner_t *p, const aa_planner_opts_t *o) {
  int rc;
  if (o->home)
    snprintf(p->home, sizeof p->home, "%s", o->home);
  else if ((rc = aa_home_dir(p->home, sizeof p->home)))
    return rc;
  p->log = o->log;
  if ((rc = make_home(p, p->home))) return rc;
  const char *sock = o->socket_path;
  char def[AA_PATH_MAX + 32];
  if (!sock) {
    snprintf(def, sizeof def, "%s/planner.sock", p->home);
    sock = def;
  }
  if (strlen(sock) >= sizeof p->socket_path)
    return aa_error(AA_EINVAL, "unix socket path %s is %zu bytes, longer than %zu", sock, strlen(sock),
                    sizeof p->socket_path - 1);
  memcpy(p->socket_path, sock, strlen(sock) + 1); /* fits: checked above */
  snprintf(p->address, sizeof p->address, "unix:%s", p->socket_path);
  if (o->store_path)
    snprintf(p->store_path, sizeof p->store_path, "%s", o->store_path);
  else
    snprintf(p->store_path, sizeof p->store_path, "%.4080s/store.db", p->home);
  if (o->token_file && (rc = aa_token_load(o->token_file, p->token, &p->token_len))) return rc;
  if ((rc = set_limits(p, o))) return rc;
  if (o->heartbeat_ms < 0 || o->heartbeat_ms > 3600000 || (o->heartbeat_ms && o->heartbeat_ms < 100))
    return aa_error(AA_EINVAL, "heartbeat_ms %d must be in 100..3600000", o->heartbeat_ms);
  p->heartbeat_ms = o->heartbeat_ms ? o->heartbeat_ms : 1000;
  p->dead_after_ms = o->dead_after_ms > 0 ? o->dead_after_ms : 10 * p->heartbeat_ms;
  if (p->dead_after_ms < p->heartbeat_ms)
    return aa_error(AA_EINVAL, "dead_after_ms %d must be at least heartbeat_ms %d", p->dead_after_ms,
                    p->heartbeat_ms);
  p->warmup_steps = o->warmup_steps < 0 ? 1 : o->warmup_steps;
  p->measured_steps = o->measured_steps > 0 ? o->measured_steps : 4;
  if (o->dryrun_time_limit_s < 0 || o->dryrun_time_limit_s > AA_PROTO_TIME_LIMIT_MAX)
    return aa_error(AA_EINVAL, "dry-run time limit %d s must be in 0..%d", o->dryrun_time_limit_s,
                    AA_PROTO_TIME_LIMIT_MAX);
  p->dryrun_time_limit_s = o->dryrun_time_limit_s > 0 ? o->dryrun_time_limit_s : 300;
  if (!o->cpu_backend || !strcmp(o->cpu_backend, "auto"))
    p->cpu_backend = AA_CPU_BACKEND_AUTO;
  else if (!strcmp(o->cpu_backend, "shm"))
    p->cpu_backend = AA_CPU_BACKEND_SHM;
  else if (!strcmp(o->cpu_backend, "gloo"))
    p->cpu_backend = AA_CPU_BACKEND_GLOO;
  else
    return aa_error(AA_EINVAL, "planner: cpu_backend '%s' must be one of auto, shm, gloo", o->cpu_backend);
  p->started = aa_now();

  aa_store_recovery_t rec = {0};
  if ((rc = aa_store_open(&p->store, p->store_path, 0))) return rc;
  if ((rc = aa_store_recover(p->store, p->lim.max_resumes, &rec))) return rc;
  if (rec.jobs_requeued || rec.jobs_interrupted || rec.runs_crashed)
    aa__planner_log(p,
                    "recovered the store: %d interrupted jobs queued again to resume, %d left interrupted, "
                    "%d runs crashed",
                    rec.jobs_requeued, rec.jobs_interrupted, rec.runs_crashed);
  char dir[AA_PATH_MAX + 32];
  snprintf(dir, sizeof dir, "%.4080s/strategies", p->home);
  if ((rc = aa_mkdirs(dir))) return rc;
  if ((rc = aa__jobs_load_queue(p))) return rc;

  if ((rc = uv_loop_init(&p->loop))) return aa_error(AA_EIO, "uv_loop_init: %s", uv_strerror(rc));
  p->loop_ready = true;
  uv_timer_init(&p->loop, &p->tick);
  uv_timer_init(&p->loop, &p->kick);
  uv_idle_init(&p->loop, &p->reaper);
  uv_idle_init(&p->loop, &p->turn);
  if ((rc = uv_async_init(&p->loop, &p->wake, on_wake)))
    return aa_error(AA_EIO, "uv_async_init: %s", uv_strerror(rc));
  p->tick.data = p->kick.data = p->reaper.data = p->turn.data = p->wake.data = p;
  if ((rc = listen_unix(p))) return rc;
  if (o->tcp && (rc = listen_tcp(p, o->tcp))) return rc;
  return 0;
}

int aa_planner_create(aa_planner_t **out, const aa_planner_opts_t *opts) {
  /* libuv writes with write(2): a peer gone mid-reply would raise SIGPIPE,
   * whose default action ends the process (Redis ignores it likewise). */
  signal(SIGPIPE, SIG_IGN);
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
                  p->tcp_address[0] ? " and " : "", p->tcp_address, p->store_path, p->heartbeat_ms,
                  p->dead_after_ms);
  aa__planner_log(
      p,
      "limits: %d connections (%d kept for the unix socket), %d TCP peers before hello (%d per source), "
      "hello within %d ms, a frame within %d ms, %zu bytes queued per peer, %zu bytes of input held for all "
      "peers, placement wait %d s",
      p->lim.max_connections, AA_PLANNER_UNIX_RESERVE, p->lim.max_unauthenticated, aa__admit_share(p),
      p->lim.hello_timeout_ms, p->lim.frame_timeout_ms, p->lim.write_queue_max, p->lim.input_buffer_max,
      p->lim.placement_timeout_s);
  static const char *const backends[] = {"auto (shm on one host, gloo across hosts)",
                                         "shm (every gang on one host)", "gloo (on one host too)"};
  aa__planner_log(p, "CPU gangs: %s", backends[p->cpu_backend]);
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
    /* A terminal that closes sends SIGHUP, whose default would end the
     * planner on the spot and leave its socket behind: it stops in order
     * instead. Started under nohup (SIGHUP ignored), it keeps ignoring it. */
    if (!aa_signal_ignored(SIGHUP)) {
      uv_signal_init(&p->loop, &p->sig_hup);
      p->sig_hup.data = p;
      uv_signal_start(&p->sig_hup, on_signal, SIGHUP);
      p->hup_open = true;
    }
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
    if (!p->stopping)
      begin_stop(p, "destroyed");
    else
      aa__planner_maybe_finish_stop(p);
    if (!p->handles_closed) {
      p->stopping = true;
      aa__planner_maybe_finish_stop(p);
    }
    uv_run(&p->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&p->loop)) aa__planner_log(p, "handles left open at destroy");
  }
  struct stat sb;
  if (p->sock_created && !lstat(p->socket_path, &sb) && sb.st_dev == p->sock_dev && sb.st_ino == p->sock_ino)
    unlink(p->socket_path);
  aa__jobs_free(p);
  aa_store_close(p->store);
  free(p);
}
