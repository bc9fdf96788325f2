/* The planner's connections: accepting them within the caps, reading
 * frames under the limits and deadlines of docs/service.md "Limits",
 * writing within the per-peer bound, and the close queue.
 *
 * Connections follow Redis's rules: a peer's declared frame length is
 * checked before anything is buffered, and until its hello is accepted a
 * peer may declare only a small frame; a bad frame gets one error reply, a
 * sanitized log sample and a close after the reply is written; a peer that
 * does not read what it asked for is closed once the bytes queued for it
 * pass a bound; a connection is never freed inside its own callback but put
 * on a close queue that an idle handle drains; nothing a peer sends stops
 * the loop. What all peers together make the planner hold of unfinished
 * input has a budget too, past which the largest holder is closed (Redis's
 * maxmemory-clients); who may wait for a hello is admit.c's business. */
#define _GNU_SOURCE /* struct ucred (SO_PEERCRED) */
#include "planner_internal.h"

#include "../common/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* --- the close queue ------------------------------------------------------------ */

static void unturn(aa_conn_t *c);

static void unlink_conn(aa_conn_t *c) {
  aa_planner_t *p = c->p;
  if (c->prev)
    c->prev->next = c->next;
  else if (p->conns == c)
    p->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->next = c->prev = NULL;
}

/* A connection stops counting against its caps, and what it holds of
 * input against the input budget, when it is torn down (its buffers go
 * with its close callback, a moment later). */
static void uncount(aa_conn_t *c) {
  aa__admit_leave(c);
  if (c->counted_tcp) {
    c->counted_tcp = false;
    c->p->ntcp--;
  }
  c->p->input_held -= c->held;
  c->held = 0;
}

static void on_conn_closed(uv_handle_t *h) {
  aa_conn_t *c = h->data;
  aa_planner_t *p = c->p;
  p->nclosing--;
  uncount(c);
  unturn(c);
  free(c->stash);
  unlink_conn(c);
  aa_frame_reader_free(&c->reader);
  free(c->dev.name);
  free(c->dev.host);
  free(c);
  p->nconns--;
  aa__planner_maybe_finish_stop(p);
}

/* Closes c's handle: its descriptor is released at once, its memory in
 * on_conn_closed. */
static void close_handle_now(aa_conn_t *c) {
  c->queued = true;
  c->p->nclosing++;
  uv_close(&c->h.handle, on_conn_closed);
}

static void on_reap(uv_idle_t *h) {
  aa_planner_t *p = h->data;
  while (p->close_q) {
    aa_conn_t *c = p->close_q;
    p->close_q = c->close_next;
    close_handle_now(c);
  }
  uv_idle_stop(h);
}

void aa__conn_enqueue_close(aa_conn_t *c) {
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
  uncount(c);
  unturn(c);
  uv_read_stop(&c->h.stream);
  if (c->role == AA_CONN_EXECUTOR)
    aa__registry_executor_gone(c, why);
  else if (c->role == AA_CONN_CLIENT)
    aa__jobs_client_gone(c);
}

void aa__conn_drop(aa_conn_t *c, const char *why) {
  teardown(c, why);
  aa__conn_enqueue_close(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  aa__conn_enqueue_close(req->data);
}

void aa__conn_drop_after_writes(aa_conn_t *c, const char *why) {
  teardown(c, why);
  if (c->shutting || c->queued) return;
  c->shutting = true;
  c->shutdown_req.data = c;
  if (uv_shutdown(&c->shutdown_req, &c->h.stream, on_shutdown)) aa__conn_enqueue_close(c);
}

/* "client 3 (unix socket)", "executor 2 (tcp 10.0.0.5:41234)", "peer (tcp ...)". */
const char *aa__conn_name(const aa_conn_t *c, char *buf, size_t n) {
  const char *who = c->role == AA_CONN_EXECUTOR ? "executor" : c->role == AA_CONN_CLIENT ? "client" : "peer";
  if (c->id)
    snprintf(buf, n, "%s %llu (%s)", who, (unsigned long long)c->id, c->peer);
  else
    snprintf(buf, n, "%s (%s)", who, c->peer);
  return buf;
}

/* --- writing ---------------------------------------------------------------------- */

typedef struct {
  uv_write_t req;
  char *buf;
} wreq_t;

/* What one queued write costs beyond its bytes (the request, the
 * allocator's bookkeeping): counted against the bound too, so that many
 * small frames cannot hold more than the bound says. */
#define WRITE_OVERHEAD (sizeof(wreq_t) + 64)

static void on_written(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  aa_conn_t *c = req->data;
  c->writes--;
  free(w->buf);
  free(w);
  if (status < 0 && !c->dropped) aa__conn_drop(c, "disconnected");
}

/* Queues buf (transferred) on c. A peer that leaves more than
 * write_queue_max bytes unread is closed without waiting for them: it
 * asked for more than it reads (Redis's client output buffer limit). */
static void conn_write(aa_conn_t *c, char *buf, size_t len) {
  if (c->dropped) {
    free(buf);
    return;
  }
  size_t queued = uv_stream_get_write_queue_size(&c->h.stream) + c->writes * WRITE_OVERHEAD;
  if (queued + len + WRITE_OVERHEAD > c->p->lim.write_queue_max) {
    char who[128];
    aa__planner_log(
        c->p, "%s does not read its replies: %zu bytes queued, %zu more would pass the bound of %zu; closing",
        aa__conn_name(c, who, sizeof who), queued, len, c->p->lim.write_queue_max);
    free(buf);
    aa__conn_drop(c, "closed: it did not read what it asked for");
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
    return;
  }
  c->writes++;
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

void aa__conn_reply(aa_conn_t *c, uint64_t id, const char *json) {
  aa_msg_t r = {.type = AA_MSG_REPLY, .id = id, .reply.json = (char *)json};
  if (aa__conn_send(c, &r))
    aa__conn_send_error(
        c, id, AA_EINVAL,
        "the answer does not fit in one frame: ask for less (a smaller limit, or pages with offset)");
}

void aa__conn_fail(aa_conn_t *c, uint64_t id, int code, const char *message, const void *sample, size_t n) {
  if (c->dropped) return;
  char hex[3 * 24 + 8] = "";
  const unsigned char *b = sample;
  size_t k = n < 24 ? n : 24, o = 0;
  for (size_t i = 0; i < k; i++)
    o += (size_t)snprintf(hex + o, sizeof hex - o, "%s%02x", i ? " " : "", b[i]);
  if (n > k) snprintf(hex + o, sizeof hex - o, " ...");
  char safe[160];
  aa_json_sanitize(safe, sizeof safe, message);
  aa__planner_log(c->p, "protocol error from %s: %s (code %d)%s%s%s; closing", c->peer, safe, code,
                  sample ? ", first bytes [" : "", sample ? hex : "", sample ? "]" : "");
  /* The peer learns that the close is deliberate, not a crash. */
  char full[AA_PROTO_TEXT_MAX];
  snprintf(full, sizeof full, "%.4000s; connection closed", message);
  aa__conn_send_error(c, id, code, full);
  aa__conn_drop_after_writes(c, "closed after a protocol error");
}

/* --- reading --------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  /* One buffer for every connection: libuv hands it to on_read before it
   * asks for another, and the frame reader copies what it keeps. */
  aa_conn_t *c = h->data;
  *buf = uv_buf_init(c->p->rbuf, sizeof c->p->rbuf);
}

/* The peer said hello and was admitted: full frames from now on, and it
 * no longer counts against the cap on TCP connections waiting for hello. */
void aa__conn_admitted(aa_conn_t *c) {
  aa_frame_reader_set_max(&c->reader, 0);
  aa__admit_leave(c);
}

/* --- the input budget ------------------------------------------------------------ */

/* Counts again what c holds of input (a partly read frame, a deferred
 * read), then, while every peer together holds more than
 * input_buffer_max, closes the one that holds the most: many peers each
 * holding a frame one byte short of complete cannot grow the planner past
 * the budget, and a peer sending one whole frame alone never passes it. */
static void account_input(aa_conn_t *c) {
  aa_planner_t *p = c->p;
  size_t now = c->dropped ? 0 : aa_frame_reader_held(&c->reader) + (c->stash ? c->stash_n : 0);
  p->input_held = p->input_held - c->held + now;
  c->held = now;
  while (p->input_held > p->lim.input_buffer_max) {
    aa_conn_t *big = NULL;
    for (aa_conn_t *o = p->conns; o; o = o->next)
      if (!o->dropped && o->held && (!big || o->held > big->held)) big = o;
    if (!big) break;
    char who[128];
    aa__planner_log(
        p,
        "%zu bytes of unfinished input held for all peers, past the bound of %zu: closing %s, which "
        "holds the most (%zu bytes)",
        p->input_held, p->lim.input_buffer_max, aa__conn_name(big, who, sizeof who), big->held);
    aa__conn_send_error(big, 0, AA_ECONN,
                        "the planner holds too much unfinished input from its peers, and the most from this "
                        "connection; connection closed");
    aa__conn_drop_after_writes(big, "closed: it held the most unfinished input");
  }
}

/* Decodes and acts on the frames in data[0..len), at most
 * AA_PLANNER_FRAMES_PER_TURN of them: one peer that pipelines costly
 * requests must not hold the loop (and every other peer's heartbeats).
 * Returns the bytes consumed; fewer than len means the budget ran out. */
static size_t process(aa_conn_t *c, const char *data, size_t len) {
  size_t off = 0;
  for (int frames = 0; off < len && !c->dropped;) {
    if (frames == AA_PLANNER_FRAMES_PER_TURN) return off;
    size_t used = 0, n = 0;
    const void *payload = NULL;
    int rc = aa_frame_reader_feed(&c->reader, data + off, len - off, &used, &payload, &n);
    if (rc < 0) {
      char msg[AA_PROTO_TEXT_MAX];
      if (c->role == AA_CONN_HELLO)
        snprintf(msg, sizeof msg, "%s (before hello, frames are limited to %d bytes)", aa_last_error(),
                 AA_PLANNER_HELLO_FRAME_MAX);
      else
        snprintf(msg, sizeof msg, "%s", aa_last_error());
      aa__conn_fail(c, 0, rc, msg, data + off, len - off);
      return len;
    }
    off += used;
    if (rc == 0) break;
    frames++;
    c->frame_started = 0;
    aa_msg_t m;
    if ((rc = aa_msg_decode(payload, n, &m))) {
      aa__conn_fail(c, 0, rc, aa_last_error(), payload, n);
      return len;
    }
    if (c->role == AA_CONN_EXECUTOR && (m.type == AA_MSG_KV_SET || m.type == AA_MSG_KV_GET))
      aa__relay_on_message(c, &m); /* a gang's store (relay.c) */
    else
      aa__planner_dispatch(c, &m, payload, n);
    aa_msg_free(&m);
  }
  return len;
}

/* The deadline of a frame runs from its first byte. */
static void note_partial_frame(aa_conn_t *c, double now) {
  if (!c->dropped && aa_frame_reader_mid_frame(&c->reader) && !c->frame_started) c->frame_started = now;
}

/* Keeps the bytes of a read that the budget did not reach and stops
 * reading from c until its next turn (on_turn) has used them. */
static void defer(aa_conn_t *c, const char *rest, size_t n) {
  aa_planner_t *p = c->p;
  char *keep = malloc(n);
  if (!keep) {
    aa__conn_drop(c, "disconnected (no memory to defer its requests)");
    return;
  }
  memcpy(keep, rest, n);
  c->stash = keep;
  c->stash_n = n;
  c->stash_off = 0;
  uv_read_stop(&c->h.stream);
  c->turn_next = p->turns;
  p->turns = c;
  uv_idle_start(&p->turn, aa__conn_on_turn);
}

/* Takes c off the list of deferred connections. Its stash stays until the
 * close callback: a teardown may come from inside process(), which is
 * still reading the stash. */
static void unturn(aa_conn_t *c) {
  for (aa_conn_t **pc = &c->p->turns; *pc; pc = &(*pc)->turn_next)
    if (*pc == c) {
      *pc = c->turn_next;
      break;
    }
  c->turn_next = NULL;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

void aa__conn_on_turn(uv_idle_t *h) {
  aa_planner_t *p = h->data;
  aa_conn_t *list = p->turns;
  p->turns = NULL;
  double now = aa_now();
  for (aa_conn_t *c = list, *next; c; c = next) {
    next = c->turn_next;
    c->turn_next = NULL;
    if (c->dropped || !c->stash) continue; /* the close callback frees the stash */
    c->last_seen = now;                    /* not silent: the planner is behind with what it sent */
    size_t used = process(c, c->stash + c->stash_off, c->stash_n - c->stash_off);
    c->stash_off += used;
    note_partial_frame(c, now);
    if (c->dropped) continue;
    if (c->stash_off < c->stash_n) { /* the budget ran out again */
      c->turn_next = p->turns;
      p->turns = c;
      account_input(c);
      continue;
    }
    free(c->stash);
    c->stash = NULL;
    c->stash_n = c->stash_off = 0;
    account_input(c);
    if (!c->dropped && uv_read_start(&c->h.stream, on_alloc, on_read)) aa__conn_drop(c, "disconnected");
  }
  if (!p->turns) uv_idle_stop(h);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  aa_conn_t *c = s->data;
  if (c->dropped) return;
  if (nread < 0) {
    if (aa_frame_reader_mid_frame(&c->reader)) {
      aa__planner_log(c->p, "%s closed the connection in the middle of a frame", c->peer);
      aa__conn_send_error(c, 0, AA_EPARSE, "truncated frame: the connection ended inside it");
      aa__conn_drop_after_writes(c, "disconnected");
      return;
    }
    if (c->role == AA_CONN_CLIENT && nread != UV_EOF)
      aa__planner_log(c->p, "client %llu: %s", (unsigned long long)c->id, uv_strerror((int)nread));
    aa__conn_drop(c, "disconnected");
    return;
  }
  double now = aa_now();
  c->last_seen = now;
  size_t used = process(c, buf->base, (size_t)nread);
  if (!c->dropped && used < (size_t)nread) defer(c, buf->base + used, (size_t)nread - used);
  note_partial_frame(c, now);
  if (!c->dropped) account_input(c);
}

/* --- deadlines ----------------------------------------------------------------------- */

static void refusal_second(aa_planner_t *p, double now);

void aa__conn_check_deadlines(aa_planner_t *p, double now) {
  refusal_second(p, now);
  aa_conn_t *next;
  for (aa_conn_t *c = p->conns; c; c = next) {
    next = c->next;
    if (c->dropped) continue;
    char who[128];
    if (c->role == AA_CONN_HELLO && (now - c->accepted_at) * 1000 >= p->lim.hello_timeout_ms) {
      aa__planner_log(p, "%s sent no hello within %d ms: closed", aa__conn_name(c, who, sizeof who),
                      p->lim.hello_timeout_ms);
      aa__conn_send_error(c, 0, AA_ETIMEOUT, "no hello in time; connection closed");
      aa__conn_drop_after_writes(c, "no hello in time");
    } else if (c->frame_started > 0 && (now - c->frame_started) * 1000 >= p->lim.frame_timeout_ms) {
      aa__planner_log(p, "%s began a frame %.0f s ago and has not finished it (limit %d ms): closed",
                      aa__conn_name(c, who, sizeof who), now - c->frame_started, p->lim.frame_timeout_ms);
      aa__conn_send_error(c, 0, AA_ETIMEOUT, "a frame took too long to arrive; connection closed");
      aa__conn_drop_after_writes(c, "closed: a frame took too long");
    }
  }
}

/* --- accepting -------------------------------------------------------------------- */

/* Names c's peer for the log ("tcp HOST:PORT", "unix socket"); a TCP
 * peer's address goes to *ss (zeroed when it cannot be read). */
static void peer_name(aa_conn_t *c, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof *ss);
  if (!c->tcp) {
    snprintf(c->peer, sizeof c->peer, "unix socket");
    return;
  }
  int len = sizeof *ss;
  char host[64] = "?";
  int port = 0;
  if (!uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)ss, &len))
    port = aa__planner_numeric_host((struct sockaddr *)ss, host, sizeof host);
  snprintf(c->peer, sizeof c->peer, "tcp %s:%d", host, port);
}

/* The user at the other end of a unix socket (the kernel's word, not the
 * peer's). */
static void peer_uid(aa_conn_t *c) {
  uv_os_fd_t fd;
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (!c->tcp && !uv_fileno(&c->h.handle, &fd) && !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
    c->uid = cred.uid;
    c->has_uid = true;
  }
}

/* Why a new connection cannot be admitted, or NULL. The unix socket
 * (mode 0600: the owner) keeps unix_reserve connections that TCP peers
 * cannot take, so strangers cannot lock the owner out. Connections whose
 * handle is closing hold no descriptor and do not count. */
static const char *over_cap(const aa_planner_t *p, bool tcp) {
  if (p->nconns - p->nclosing >= p->lim.max_connections) return "the planner has its maximum of connections";
  if (tcp && p->ntcp >= p->lim.max_connections - AA_PLANNER_UNIX_RESERVE)
    return "TCP connections are at their maximum";
  return NULL;
}

/* Starts a new second of refusals, logging how many the last one did not
 * log one by one. */
static void refusal_second(aa_planner_t *p, double now) {
  if (now - p->refusal_window < 1.0) return;
  if (p->refusals_unlogged)
    aa__planner_log(p, "refused %d more connections in the last second (not logged one by one)",
                    p->refusals_unlogged);
  p->refusal_window = now;
  p->refusals_logged = p->refusals_unlogged = 0;
}

/* Logs a refusal: every one while they are rare, then a count per second,
 * so a flood of connections cannot fill the log. */
static void log_refusal(aa_planner_t *p, const char *peer, const char *why) {
  refusal_second(p, aa_now());
  if (p->refusals_logged < AA_PLANNER_REFUSALS_LOGGED) {
    p->refusals_logged++;
    aa__planner_log(p, "refused a connection from %s: %s (%d open)", peer, why, p->nconns);
  } else {
    p->refusals_unlogged++;
  }
}

/* A connection for the next peer of a listener (tcp: the TCP one), its
 * handle initialised and on p->conns, counted in nconns, from now until its
 * close callback. Returns 0, UV_ENOMEM, or the handle's init error (nothing
 * is left allocated then). */
static int conn_new(aa_planner_t *p, bool tcp, aa_conn_t **out) {
  aa_conn_t *c = calloc(1, sizeof *c);
  if (!c) return UV_ENOMEM;
  c->p = p;
  c->tcp = tcp;
  int rc = tcp ? uv_tcp_init(&p->loop, &c->h.tcp) : uv_pipe_init(&p->loop, &c->h.pipe, 0);
  if (rc) {
    free(c);
    return rc;
  }
  c->h.handle.data = c;
  p->nconns++;
  c->next = p->conns;
  if (p->conns) p->conns->prev = c;
  p->conns = c;
  *out = c;
  return 0;
}

/* Writes an error frame to c if the socket takes it now (never queued),
 * so that a peer closed on purpose learns why. */
static void say_before_close(aa_conn_t *c, const char *msg) {
  char *buf;
  size_t len;
  if (!aa_msg_encode_error(&buf, &len, 0, AA_ECONN, msg)) {
    uv_buf_t b = uv_buf_init(buf, (unsigned)len);
    uv_try_write(&c->h.stream, &b, 1);
    free(buf);
  }
}

/* Closes the accepted connection c at once with an error frame that says
 * why: the peer learns it was refused, not dropped. Closed now, not
 * through the close queue: uv_close releases the descriptor at once, so a
 * burst of refusals cannot exhaust them. */
static void refuse_accepted(aa_conn_t *c, const char *why) {
  log_refusal(c->p, c->peer, why);
  char msg[160];
  snprintf(msg, sizeof msg, "connection refused: %s; try again later", why);
  say_before_close(c, msg);
  teardown(c, "refused");
  close_handle_now(c);
}

/* Accepts the pending connection of `server` and refuses it. */
static void refuse(aa_planner_t *p, uv_stream_t *server, const char *why) {
  aa_conn_t *c;
  if (conn_new(p, server == (uv_stream_t *)&p->tcp_srv, &c)) return;
  if (uv_accept(server, &c->h.stream)) {
    c->dropped = true;
    close_handle_now(c);
    return;
  }
  struct sockaddr_storage ss;
  peer_name(c, &ss);
  refuse_accepted(c, why);
}

/* Closes v, a TCP peer still silent before its hello, to make room for
 * the newcomer c (admit.c says which one goes). Closed now, as a refusal
 * is: its descriptor is free for the newcomer. */
static void displace(aa_conn_t *v, const aa_conn_t *c, int source_n) {
  aa_planner_t *p = v->p;
  char why[512];
  if (source_n >= aa__admit_share(p))
    snprintf(why, sizeof why,
             "%s, without a hello after %.1f s, the oldest of the %d waiting connections of its source (the "
             "share of one source), for %s",
             v->peer, aa_now() - v->accepted_at, source_n, c->peer);
  else
    snprintf(why, sizeof why,
             "%s, without a hello after %.1f s, the oldest of %d waiting TCP connections, for %s", v->peer,
             aa_now() - v->accepted_at, p->ntcp_hello, c->peer);
  refusal_second(p, aa_now());
  if (p->refusals_logged < AA_PLANNER_REFUSALS_LOGGED) {
    p->refusals_logged++;
    aa__planner_log(p, "made room for a new connection: closed %s", why);
  } else {
    p->refusals_unlogged++;
  }
  say_before_close(v,
                   "connection closed: it sent no hello while newer peers waited for room; connect and say "
                   "hello at once");
  teardown(v, "displaced before its hello");
  if (!v->queued) close_handle_now(v);
}

void aa__conn_on_connection(uv_stream_t *server, int status) {
  aa_planner_t *p = server->data;
  if (status < 0) {
    aa__planner_log(p, "accept: %s", uv_strerror(status));
    return;
  }
  bool tcp = server == (uv_stream_t *)&p->tcp_srv;
  const char *why = over_cap(p, tcp);
  /* A TCP newcomer may take the place of a silent peer rather than be
   * refused: only peers that said hello hold the TCP connections for good. */
  if (why && !(tcp && p->ntcp_hello > 0)) {
    refuse(p, server, why);
    return;
  }
  aa_conn_t *c;
  int rc = conn_new(p, tcp, &c);
  if (rc) {
    aa__planner_log(p, "accept: %s", rc == UV_ENOMEM ? "no memory for a connection" : uv_strerror(rc));
    return;
  }
  aa_frame_reader_init(&c->reader, AA_PLANNER_HELLO_FRAME_MAX);
  c->accepted_at = c->last_seen = aa_now();
  if ((rc = uv_accept(server, &c->h.stream)) || (rc = uv_read_start(&c->h.stream, on_alloc, on_read))) {
    aa__planner_log(p, "accept: %s", uv_strerror(rc));
    teardown(c, "accept failed");
    aa__conn_enqueue_close(c);
    return;
  }
  struct sockaddr_storage ss;
  peer_name(c, &ss);
  peer_uid(c);
  if (!tcp) return;
  int source_n;
  aa_conn_t *v = aa__admit_make_room(p, (struct sockaddr *)&ss, why != NULL, &source_n);
  if (v) {
    displace(v, c, source_n);
  } else if (why) { /* at the cap, and every waiting peer has spoken */
    refuse_accepted(c, why);
    return;
  }
  if (aa__admit_enter(c, (struct sockaddr *)&ss)) {
    aa__planner_log(p, "accept: no memory to count %s", c->peer);
    teardown(c, "no memory");
    aa__conn_enqueue_close(c);
    return;
  }
  p->ntcp++;
  c->counted_tcp = true;
}
