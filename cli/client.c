/* A blocking planner client on plain sockets: connect with a deadline,
 * hello/welcome, request ids, frames read through aa_frame_reader with
 * poll() timeouts, heartbeats while a reply is awaited. */
#define _GNU_SOURCE
#include "client.h"
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/aa.h"
#include "common/mem.h"
#include "common/spec.h"
#include "planner/planner.h"
#include "proto/addr.h"
#include "strategies/space.h"

#define CLIENT_READ_CHUNK 65536

struct aa_client {
  int fd;
  char addr[AA_ADDR_PATH_MAX + 16];
  aa_frame_reader_t reader;
  char *in;              /* bytes read from the socket, not yet fed to the reader */
  size_t in_off, in_len; /* the unfed bytes are in[in_off .. in_len) */
  uint64_t next_id;
  int heartbeat_ms; /* from welcome */
  double last_sent; /* aa_now() of the last frame we wrote */
  aa_planner_reader_t *store; /* set: no planner, queries answered from the store (fd -1) */
};

static volatile sig_atomic_t g_signal;
/* The last connect failed because nothing listens at the address (no
 * socket file, or a refused connection): aa_client_connect_or_store's cue. */
static bool g_nobody;

static void on_signal(int sig) { g_signal = sig; }

void aa_client_catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if (!aa_signal_ignored(SIGHUP)) sigaction(SIGHUP, &sa, NULL);
}

int aa_client_interrupted(void) { return g_signal; }

const char *aa_client_address(const aa_client_t *c) { return c->addr; }

static int no_planner(const char *addr, int err) {
  g_nobody = err == ENOENT || err == ECONNREFUSED;
  if (g_nobody) return aa_error(AA_ECONN, "no planner at %s: is `autoaccel planner` running?", addr);
  return aa_error(AA_ECONN, "cannot connect to the planner at %s: %s", addr, strerror(err));
}

/* Connects fd to sa with a deadline: a non-blocking connect, then poll. The
 * socket is left blocking; all later waits go through poll. */
static int connect_deadline(int fd, const struct sockaddr *sa, socklen_t len, const char *addr, int timeout_ms) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK))
    return aa_error(AA_EIO, "fcntl on the planner socket: %s", strerror(errno));
  if (connect(fd, sa, len)) {
    if (errno != EINPROGRESS && errno != EAGAIN) return no_planner(addr, errno);
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int n;
    do n = poll(&p, 1, timeout_ms);
    while (n < 0 && errno == EINTR && !g_signal);
    if (n < 0) return g_signal ? aa_error(AA_ECANCELLED, "interrupted") : aa_error(AA_EIO, "poll: %s", strerror(errno));
    if (n == 0) return aa_error(AA_ETIMEOUT, "the planner at %s did not accept a connection within %d s", addr,
                                timeout_ms / 1000);
    int err = 0;
    socklen_t elen = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen)) err = errno;
    if (err) return no_planner(addr, err);
  }
  if (fcntl(fd, F_SETFL, flags)) return aa_error(AA_EIO, "fcntl on the planner socket: %s", strerror(errno));
  return 0;
}

static int open_socket(const aa_addr_t *a, const char *text, int *out) {
  int rc;
  if (!a->tcp) {
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    snprintf(un.sun_path, sizeof un.sun_path, "%s", a->path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return aa_error(AA_EIO, "socket: %s", strerror(errno));
    if ((rc = connect_deadline(fd, (struct sockaddr *)&un, sizeof un, text, AA_CLIENT_CONNECT_MS))) {
      close(fd);
      return rc;
    }
    *out = fd;
    return 0;
  }
  char port[16];
  snprintf(port, sizeof port, "%d", a->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int gai = getaddrinfo(a->host, port, &hints, &res);
  if (gai) return aa_error(AA_ECONN, "planner address %s: %s", text, gai_strerror(gai));
  rc = aa_error(AA_ECONN, "no planner at %s: is `autoaccel planner` running?", text);
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (!(rc = connect_deadline(fd, ai->ai_addr, ai->ai_addrlen, text, AA_CLIENT_CONNECT_MS))) {
      *out = fd;
      break;
    }
    close(fd);
    if (rc == AA_ECANCELLED) break;
  }
  freeaddrinfo(res);
  return rc;
}

static int write_all(aa_client_t *c, const char *buf, size_t len) {
  while (len) {
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return aa_error(AA_ECONN, "lost the planner at %s: %s", c->addr, strerror(errno));
    }
    buf += n;
    len -= (size_t)n;
  }
  c->last_sent = aa_now();
  return 0;
}

int aa_client_send(aa_client_t *c, aa_msg_t *m) {
  if (c->store) return aa_error(AA_ECONN, "no planner running (the store %s answers queries only)", c->addr);
  if (!m->id && m->type != AA_MSG_HEARTBEAT && m->type != AA_MSG_BYE && m->type != AA_MSG_HELLO)
    m->id = c->next_id++;
  char *frame;
  size_t len;
  int rc = aa_msg_encode(m, &frame, &len);
  if (rc) return rc;
  rc = write_all(c, frame, len);
  free(frame);
  return rc;
}

static int send_heartbeat(aa_client_t *c) {
  aa_msg_t hb = {.type = AA_MSG_HEARTBEAT};
  return aa_client_send(c, &hb);
}

/* Feeds buffered bytes to the reader; 1 with a decoded message in *out
 * when a frame completed, 0 when more bytes are needed. */
static int next_buffered(aa_client_t *c, aa_msg_t *out) {
  while (c->in_off < c->in_len) {
    size_t used;
    const void *payload;
    size_t plen;
    int rc = aa_frame_reader_feed(&c->reader, c->in + c->in_off, c->in_len - c->in_off, &used, &payload, &plen);
    if (rc < 0) return aa_error_wrap(rc, "bad frame from the planner");
    c->in_off += used;
    if (rc == 1) {
      if ((rc = aa_msg_decode(payload, plen, out))) return aa_error_wrap(rc, "bad message from the planner");
      return 1;
    }
  }
  c->in_off = c->in_len = 0;
  return 0;
}

int aa_client_recv(aa_client_t *c, aa_msg_t *out, int timeout_ms) {
  if (c->store) return aa_error(AA_ECONN, "no planner running (the store %s answers queries only)", c->addr);
  double deadline = timeout_ms < 0 ? INFINITY : aa_now() + timeout_ms / 1000.0;
  for (;;) {
    aa_msg_t m;
    int rc = next_buffered(c, &m);
    if (rc < 0) return rc;
    if (rc == 1) {
      if (m.type == AA_MSG_HEARTBEAT) {
        aa_msg_free(&m);
        continue;
      }
      *out = m;
      return 0;
    }
    if (g_signal) return aa_error(AA_ECANCELLED, "interrupted by signal %d", (int)g_signal);
    double now = aa_now();
    if (now >= deadline) return aa_error(AA_ETIMEOUT, "the planner at %s did not answer within %d s", c->addr,
                                         timeout_ms / 1000);
    /* Wake for the next heartbeat we owe and at least twice a second. */
    double wait_s = fmin(deadline - now, 0.5);
    if (c->heartbeat_ms > 0) {
      double hb_due = c->last_sent + c->heartbeat_ms / 2000.0 - now;
      if (hb_due <= 0) {
        if ((rc = send_heartbeat(c))) return rc;
        continue;
      }
      wait_s = fmin(wait_s, hb_due);
    }
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int n = poll(&p, 1, (int)ceil(wait_s * 1000));
    if (n < 0) {
      if (errno == EINTR) continue;
      return aa_error(AA_EIO, "poll: %s", strerror(errno));
    }
    if (n == 0) continue; /* the loop checks the deadline and the heartbeat */
    ssize_t got = recv(c->fd, c->in, CLIENT_READ_CHUNK, 0);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return aa_error(AA_ECONN, "lost the planner at %s: %s", c->addr, strerror(errno));
    }
    if (got == 0) return aa_error(AA_ECONN, "the planner at %s closed the connection", c->addr);
    c->in_off = 0;
    c->in_len = (size_t)got;
  }
}

int aa_client_error(aa_msg_t *m) {
  int code = m->error.code;
  if (code >= 0 || code < -1000) code = AA_EINTERNAL;
  int rc = aa_error(code, "%s", m->error.message ? m->error.message : aa_strerror(code));
  aa_msg_free(m);
  return rc;
}

int aa_client_request(aa_client_t *c, aa_msg_t *req, aa_msg_t *reply) {
  req->id = 0;
  int rc = aa_client_send(c, req);
  if (rc) return rc;
  for (;;) {
    aa_msg_t m;
    if ((rc = aa_client_recv(c, &m, AA_CLIENT_REQUEST_MS))) return rc;
    bool answer = m.type == AA_MSG_ACK || m.type == AA_MSG_REPLY || m.type == AA_MSG_ERROR;
    if (m.type == AA_MSG_ERROR && (m.id == req->id || m.id == 0)) return aa_client_error(&m);
    if (m.type == AA_MSG_BYE) {
      aa_msg_free(&m);
      return aa_error(AA_ECONN, "the planner at %s is shutting down", c->addr);
    }
    if (answer && m.id == req->id) {
      *reply = m;
      return 0;
    }
    aa_msg_free(&m); /* progress of another request, or a stray frame */
  }
}

int aa_client_connect(aa_client_t **out, const char *addr, const char *token_file) {
  char def[AA_ADDR_PATH_MAX + 16], token[AA_TOKEN_MAX + 1];
  size_t token_len = 0;
  int rc;
  if (!addr) {
    if ((rc = aa_default_planner_addr(def, sizeof def))) return rc;
    addr = def;
  }
  aa_addr_t a;
  g_nobody = false;
  if ((rc = aa_addr_parse(&a, addr))) return rc;
  char def_token[4096 + 16];
  if (a.tcp && !token_file && aa_default_token_file(def_token, sizeof def_token) == 1) token_file = def_token;
  if (token_file && (rc = aa_token_load(token_file, token, &token_len))) return rc;
  aa_client_t *c = calloc(1, sizeof *c);
  if (!c || !(c->in = malloc(CLIENT_READ_CHUNK))) {
    free(c);
    return aa_error(AA_ENOMEM, "out of memory");
  }
  c->fd = -1;
  c->next_id = 1;
  aa_addr_format(&a, c->addr, sizeof c->addr);
  if ((rc = aa_frame_reader_init(&c->reader, 0)) || (rc = open_socket(&a, c->addr, &c->fd))) goto fail;
  aa_msg_t hello = {.type = AA_MSG_HELLO, .hello = {.role = AA_PROTO_ROLE_CLIENT, .token = token_file ? token : NULL}};
  if ((rc = aa_client_send(c, &hello))) goto fail;
  aa_msg_t m;
  if ((rc = aa_client_recv(c, &m, AA_CLIENT_CONNECT_MS))) {
    if (rc == AA_ECONN) rc = aa_error(AA_ECONN, "the planner at %s closed the connection after hello", c->addr);
    goto fail;
  }
  if (m.type == AA_MSG_ERROR) {
    if (m.error.code == AA_EPERM) {
      aa_msg_free(&m);
      rc = token_file ? aa_error(AA_EPERM, "permission denied: the planner at %s refused the token in %s", c->addr,
                                 token_file)
                      : aa_error(AA_EPERM, "permission denied: the planner wants a token (--token-file)");
    } else {
      rc = aa_error_wrap(aa_client_error(&m), "the planner at %s refused the connection", c->addr);
    }
    goto fail;
  }
  if (m.type != AA_MSG_WELCOME) {
    rc = aa_error(AA_EFORMAT, "the planner at %s answered hello with '%s'", c->addr, aa_msg_type_name(m.type));
    aa_msg_free(&m);
    goto fail;
  }
  c->heartbeat_ms = m.welcome.heartbeat_ms;
  aa_msg_free(&m);
  *out = c;
  return 0;
fail:
  if (c->fd >= 0) close(c->fd);
  aa_frame_reader_free(&c->reader);
  free(c->in);
  free(c);
  return rc;
}

int aa_client_connect_or_store(aa_client_t **out, const char *cmd, const char *addr, const char *token_file) {
  int rc = aa_client_connect(out, addr, token_file);
  if (!rc || addr || !g_nobody) return rc;
  char why[512];
  snprintf(why, sizeof why, "%s", aa_last_error());
  aa_client_t *c = calloc(1, sizeof *c);
  if (!c) return aa_error(AA_ENOMEM, "out of memory");
  c->fd = -1;
  if ((rc = aa_planner_reader_open(&c->store, NULL))) {
    free(c);
    return aa_error_wrap(rc, "%s; and the store cannot be read", why);
  }
  snprintf(c->addr, sizeof c->addr, "%s", aa_planner_reader_path(c->store));
  fprintf(stderr, "autoaccel %s: no planner running: read the store %s directly\n", cmd, c->addr);
  *out = c;
  return 0;
}

bool aa_client_is_store(const aa_client_t *c) { return c->store != NULL; }

void aa_client_close(aa_client_t *c) {
  if (!c) return;
  if (c->store) {
    aa_planner_reader_close(c->store);
    free(c);
    return;
  }
  aa_msg_t bye = {.type = AA_MSG_BYE};
  char *frame;
  size_t len;
  if (!aa_msg_encode(&bye, &frame, &len)) {
    (void)!send(c->fd, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(frame);
  }
  close(c->fd);
  aa_frame_reader_free(&c->reader);
  free(c->in);
  free(c);
}

int aa_client_request_json(aa_client_t *c, aa_msg_t *req, char **json) {
  aa_msg_t r;
  int rc = aa_client_request(c, req, &r);
  if (rc) return rc;
  if (r.type != AA_MSG_REPLY) {
    rc = aa_error(AA_EFORMAT, "the planner answered '%s' where a reply was expected", aa_msg_type_name(r.type));
    aa_msg_free(&r);
    return rc;
  }
  *json = r.reply.json;
  r.reply.json = NULL;
  aa_msg_free(&r);
  return 0;
}

int aa_client_query(aa_client_t *c, const char *what, const char *args, char **json) {
  if (c->store) return aa_planner_reader_query(c->store, what, args, json);
  aa_msg_t q = {.type = AA_MSG_QUERY, .query = {.what = (char *)what, .args = (char *)args}};
  return aa_client_request_json(c, &q, json);
}

int aa_client_query_each(aa_client_t *c, const char *what, const json_t *args, long long limit,
                         const char *list, aa_client_row_cb row, aa_client_row_cb bad, void *data) {
  json_t *a = json_deep_copy(args);
  long long offset = 0, seen = 0;
  int rc = a ? 0 : aa_error(AA_ENOMEM, "out of memory");
  while (!rc) {
    if (offset) json_object_set_new(a, "offset", json_integer(offset));
    if (limit) json_object_set_new(a, "limit", json_integer(limit - seen));
    char *args_text = json_dumps(a, JSON_COMPACT), *text = NULL;
    if (!args_text) rc = aa_error(AA_ENOMEM, "out of memory");
    if (!rc) rc = aa_client_query(c, what, args_text, &text);
    free(args_text);
    if (rc) break;
    json_error_t jerr;
    json_t *page = json_loads(text, 0, &jerr);
    free(text);
    if (!json_is_object(page)) {
      json_decref(page);
      rc = aa_error(AA_EFORMAT, "the planner's reply is not a JSON object: %s", jerr.text);
      break;
    }
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(page, list), i, v) {
      if (!rc) rc = row(v, data);
      seen++;
    }
    json_array_foreach(json_object_get(page, "unreadable"), i, v) {
      if (!rc && bad) rc = bad(v, data);
    }
    json_t *next = json_object_get(page, "next_offset");
    bool more = json_is_integer(next) && json_integer_value(next) > offset && (!limit || seen < limit);
    if (more) offset = json_integer_value(next);
    json_decref(page);
    if (!more) break;
  }
  json_decref(a);
  return rc;
}

/* aa_client_query_pages's callbacks: append a row to a JSON array. */
static int append_row(json_t *row, void *data) {
  return json_array_append(data, row) ? aa_error(AA_ENOMEM, "out of memory") : 0;
}

typedef struct pages {
  json_t *rows, *bad;
} pages_t;
static int append_good(json_t *row, void *data) { return append_row(row, ((pages_t *)data)->rows); }
static int append_bad(json_t *row, void *data) { return append_row(row, ((pages_t *)data)->bad); }

int aa_client_query_pages(aa_client_t *c, const char *what, const json_t *args, long long limit,
                          const char *list, json_t **out) {
  pages_t pg = {json_array(), json_array()};
  json_t *all = json_object();
  int rc = all && pg.rows && pg.bad ? 0 : aa_error(AA_ENOMEM, "out of memory");
  if (!rc) rc = aa_client_query_each(c, what, args, limit, list, append_good, append_bad, &pg);
  if (rc) {
    json_decref(all);
    json_decref(pg.rows);
    json_decref(pg.bad);
    return rc;
  }
  json_object_set_new(all, list, pg.rows);
  if (json_array_size(pg.bad))
    json_object_set_new(all, "unreadable", pg.bad);
  else
    json_decref(pg.bad);
  *out = all;
  return 0;
}

int aa_client_status(aa_client_t *c, uint64_t job, char **json) {
  if (c->store) {
    if (!job) return aa_error(AA_ECONN, "no planner running (read the store %s)", c->addr);
    return aa_planner_reader_job(c->store, job, json);
  }
  aa_msg_t q = {.type = AA_MSG_STATUS, .status = {.job = job}};
  return aa_client_request_json(c, &q, json);
}

void aa_client_strlist_free(aa_msg_strlist_t *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  l->v = NULL;
  l->n = 0;
}

int aa_client_split_list(const char *text, const char *opt, aa_msg_strlist_t *out) {
  aa_msg_strlist_t l = {0};
  if (!(l.v = calloc(AA_PROTO_EXCLUDE_MAX, sizeof *l.v))) return aa_error(AA_ENOMEM, "out of memory");
  const char *p = text;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == 0 || n > AA_PROTO_METHOD_MAX) {
      aa_client_strlist_free(&l);
      return aa_error(AA_EINVAL, "%s: each entry must be 1..%d bytes, in '%s'", opt, AA_PROTO_METHOD_MAX, text);
    }
    if (l.n == AA_PROTO_EXCLUDE_MAX) {
      aa_client_strlist_free(&l);
      return aa_error(AA_EINVAL, "%s: at most %d entries", opt, AA_PROTO_EXCLUDE_MAX);
    }
    if (!(l.v[l.n] = strndup(p, n))) {
      aa_client_strlist_free(&l);
      return aa_error(AA_ENOMEM, "out of memory");
    }
    l.n++;
    if (!end) break;
    p = end + 1;
  }
  *out = l;
  return 0;
}

int aa_client_check_methods(const char *exclude, const char *include) {
  aa_msg_strlist_t ex = {0}, in = {0};
  unsigned mask = 0, set = 0;
  int rc = exclude ? aa_client_split_list(exclude, "--exclude", &ex) : 0;
  if (!rc && include) rc = aa_client_split_list(include, "--include", &in);
  if (!rc) rc = aa_space_exclude_mask((const char *const *)ex.v, ex.n, &mask);
  if (!rc) rc = aa_space_include_set((const char *const *)in.v, in.n, mask, &set);
  aa_client_strlist_free(&ex);
  aa_client_strlist_free(&in);
  return rc;
}

static bool is_hash(const char *s) {
  size_t n = strlen(s);
  if (n != 16) return false;
  for (size_t i = 0; i < n; i++)
    if (!isxdigit((unsigned char)s[i])) return false;
  return true;
}

int aa_client_model_hash(const char *value, char hash[17]) {
  return aa_client_model_hash_set(value, NULL, 0, hash);
}

int aa_client_model_hash_set(const char *value, const char *const *sets, size_t n_sets, char hash[17]) {
  size_t n = strlen(value);
  bool path = strchr(value, '/') || (n >= 5 && !strcmp(value + n - 5, ".json"));
  struct stat st;
  if (is_hash(value) && !(path || stat(value, &st) == 0)) {
    if (n_sets)
      return aa_error(AA_EINVAL, "--model: --set overrides a spec file, not a model hash ('%s')", value);
    for (size_t i = 0; i < 16; i++) hash[i] = (char)tolower((unsigned char)value[i]);
    hash[16] = '\0';
    return 0;
  }
  if (!path && stat(value, &st) != 0)
    return aa_error(AA_EINVAL, "--model: '%s' is neither a model spec file nor a 16-hex-digit model hash", value);
  aa_model_spec_t spec;
  int rc = aa_spec_load_set(&spec, value, sets, n_sets);
  if (rc) return rc;
  aa_arch_hash(&spec.arch, hash);
  return 0;
}

int aa_client_abspath(const char *path, char *out, size_t n) {
  int len;
  if (path[0] == '/') {
    len = snprintf(out, n, "%s", path);
  } else {
    char cwd[AA_PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return aa_error(AA_EIO, "getcwd: %s", strerror(errno));
    while (path[0] == '.' && path[1] == '/') path += 2;
    len = !strcmp(path, ".") ? snprintf(out, n, "%s", cwd) : snprintf(out, n, "%s/%s", cwd, path);
  }
  if (len < 0 || (size_t)len >= n) return aa_error(AA_EINVAL, "path '%s' is too long", path);
  return 0;
}

const char *aa_client_fmt_rate(char buf[32], double v, bool present) {
  if (!present) snprintf(buf, 32, "-");
  else if (v >= 100) snprintf(buf, 32, "%.0f", v);
  else snprintf(buf, 32, "%.1f", v);
  return buf;
}

const char *aa_client_fmt_bytes(char buf[32], double v, bool present) {
  if (!present || v < 0) {
    snprintf(buf, 32, "-");
    return buf;
  }
  return aa_mem_fmt(buf, (size_t)v);
}

int aa_client_reply_json(const char *cmd, char *text, bool raw, json_t **root) {
  if (raw) {
    printf("%s\n", text);
    free(text);
    return AA_EXIT_OK;
  }
  json_error_t jerr;
  json_t *r = json_loads(text, 0, &jerr);
  free(text);
  if (!json_is_object(r)) {
    json_decref(r);
    fprintf(stderr, "autoaccel %s: the planner's reply is not a JSON object: %s\n", cmd, jerr.text);
    return AA_EXIT_FAIL;
  }
  *root = r;
  return -1;
}
