/* Process groups (comm.h): the checks every backend shares, then dispatch to
 * comm_shm.c, comm_gloo.c, comm_nccl.c or comm_self.c. Arguments are checked here so
 * every backend rejects the same calls with the same messages; the group's
 * failed state is checked first, so a call after an abort returns
 * AA_ECANCELLED at once. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_internal.h"

#define DEFAULT_TIMEOUT_MS 30000

static int bad(const aa_comm_t *c, const char *what, const char *why) {
  return aa_error(AA_EINVAL, "%s: rank %d of %d: %s", what, c->rank, c->world, why);
}

/* 0 while the group's family is usable, else AA_ECANCELLED. */
static int usable(aa_comm_t *c, const char *what) {
  if (c->self) return aa__self_check(c->self, what);
  if (c->gloo) return aa__gloo_check(c->gloo, what);
  return aa__shm_check(c->shm, what, 0);
}

/* The checks of a data-moving call: the group is usable, the dtype and op
 * are known, `per_rank` elements times `mult` fit in size_t bytes, and the
 * buffers that will be touched are not NULL. */
static int check(aa_comm_t *c, const char *what, aa_dtype_t dt, int op, size_t count, size_t mult,
                 const void *a, const void *b) {
  if (!c) return aa_error(AA_EINVAL, "%s: the group is NULL", what);
  int rc = usable(c, what);
  if (rc) return rc;
  if (dt != AA_F32 && dt != AA_BF16 && dt != AA_F16) return bad(c, what, "unknown dtype");
  if (op != AA_COMM_SUM && op != AA_COMM_AVG) return bad(c, what, "unknown reduction op");
  if (count > SIZE_MAX / aa_dtype_size(dt) / mult)
    return bad(c, what, "the element count overflows the byte size");
  if (count && (!a || !b)) return bad(c, what, "a buffer is NULL");
  return 0;
}

/* A gloo group: the store and the address are checked here, so a bad one is
 * refused before anything listens or waits. */
static int init_gloo(aa_comm_t **out, const char *name, int rank, int world, int timeout_ms,
                     const aa_comm_opts_t *opts) {
  int rc = aa__gloo_supported();
  if (rc) return aa_error_wrap(rc, "aa_comm_init");
  const aa_comm_store_t *st = opts ? opts->store : NULL;
  if (!st || !st->set || !st->get)
    return aa_error(
        AA_EINVAL,
        "aa_comm_init: rank %d of %d: a gloo group (gloo:, nccl-hosts:) needs opts->store with set and get",
        rank, world);
  const char *addr = opts->address ? opts->address : "127.0.0.1";
  struct sockaddr_storage sa = {0};
  struct sockaddr_in *v4 = (struct sockaddr_in *)&sa;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&sa;
  socklen_t len = sizeof *v4;
  if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
  } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof *v6;
  } else {
    return aa_error(AA_EINVAL,
                    "aa_comm_init: rank %d of %d: address '%.64s' is not a numeric IPv4 or IPv6 address",
                    rank, world, addr);
  }
  /* An address of no interface here would fail inside gloo, which leaks
   * on that path; a bind to a free port tells first. */
  int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len)) {
    int e = errno;
    if (fd >= 0) close(fd);
    return aa_error(AA_EINVAL, "aa_comm_init: rank %d of %d: cannot listen on %s: %s", rank, world, addr,
                    strerror(e));
  }
  close(fd);
  aa_comm_t *c = calloc(1, sizeof *c);
  if (!c) return aa_error(AA_ENOMEM, "aa_comm_init: out of memory");
  c->rank = rank;
  c->world = world;
  rc = aa__gloo_init(&c->gloo, name, rank, world, timeout_ms, st, addr);
  if (rc) {
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int aa_comm_init(aa_comm_t **out, const char *rendezvous, int rank, int world, const aa_comm_opts_t *opts) {
  if (!out || !rendezvous) return aa_error(AA_EINVAL, "aa_comm_init: NULL argument");
  const char *backend, *name;
  int rc = aa_rendezvous_parse(rendezvous, &backend, &name);
  if (rc) return aa_error_wrap(rc, "aa_comm_init");
  if (world < 1 || rank < 0 || rank >= world)
    return aa_error(AA_EINVAL, "aa_comm_init: rank %d of a group of %d is out of range", rank, world);
  int timeout_ms = opts && opts->timeout_ms ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
  if (timeout_ms < 0) return aa_error(AA_EINVAL, "aa_comm_init: timeout_ms %d is negative", timeout_ms);
  if (!strcmp(backend, "gloo")) return init_gloo(out, name, rank, world, timeout_ms, opts);
  int hosts = !strcmp(backend, "nccl-hosts"), nccl = hosts || !strcmp(backend, "nccl");
  if (nccl) {
    /* Refuse before anyone creates a segment that the others would wait on. */
    rc = aa__nccl_supported();
    if (rc) return aa_error_wrap(rc, "aa_comm_init");
  }
  aa_comm_t *c = NULL;
  if (hosts) { /* the carrier across hosts is a gloo group */
    if ((rc = init_gloo(&c, name, rank, world, timeout_ms, opts))) return rc;
  } else {
    if (!(c = calloc(1, sizeof *c))) return aa_error(AA_ENOMEM, "aa_comm_init: out of memory");
    c->rank = rank;
    c->world = world;
    rc = aa__shm_init(&c->shm, name, rank, world, timeout_ms);
  }
  if (!rc && nccl && (rc = aa__nccl_init(c))) {
    if (c->gloo)
      aa__gloo_abort(c->gloo, AA__ABORT_ERROR);
    else
      aa__shm_abort(c->shm, AA__ABORT_ERROR);
  }
  if (rc) {
    if (c->nccl) aa__nccl_destroy(c);
    if (c->gloo) aa__gloo_destroy(c->gloo);
    aa__shm_destroy(c->shm);
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int aa_comm_split(aa_comm_t *parent, int color, int key, aa_comm_t **out) {
  if (!parent || !out) return aa_error(AA_EINVAL, "aa_comm_split: NULL argument");
  int rc = usable(parent, "aa_comm_split");
  if (rc) return rc;
  if (parent->self) return aa__self_split(parent, color, out);
  aa_comm_t *c = calloc(1, sizeof *c);
  if (!c) return aa_error(AA_ENOMEM, "aa_comm_split: out of memory");
  /* The host group first (gloo or shm; nccl's carrier), then nccl's split,
   * which every rank of the parent joins too. */
  if (parent->gloo)
    rc = aa__gloo_split(parent->gloo, color < 0 ? -1 : color, key, &c->gloo);
  else
    rc = aa__shm_split(parent->shm, color < 0 ? -1 : color, key, &c->shm);
  if (!rc && parent->nccl) rc = aa__nccl_split(parent, color, key, c);
  if (rc || (!c->shm && !c->gloo)) {
    if (c->nccl) aa__nccl_destroy(c);
    if (c->gloo) aa__gloo_destroy(c->gloo);
    aa__shm_destroy(c->shm);
    free(c);
    if (!rc) *out = NULL;
    return rc;
  }
  c->rank = c->gloo ? aa__gloo_rank(c->gloo) : aa__shm_rank(c->shm);
  c->world = c->gloo ? aa__gloo_world(c->gloo) : aa__shm_world(c->shm);
  *out = c;
  return 0;
}

int aa_comm_rank(const aa_comm_t *c) { return c ? c->rank : -1; }
int aa_comm_world(const aa_comm_t *c) { return c ? c->world : -1; }
const char *aa_comm_backend(const aa_comm_t *c) {
  return !c ? "" : c->self ? "self" : c->nccl ? "nccl" : c->gloo ? "gloo" : "shm";
}

int aa_comm_all_reduce(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype,
                       aa_comm_op_t op) {
  int rc = check(c, "all_reduce", dtype, op, count, 1, send, recv);
  if (rc || !count) return rc;
  if (c->self) return aa__self_copy(send, recv, count * aa_dtype_size(dtype));
  if (c->nccl) return aa__nccl_all_reduce(c, send, recv, count, dtype, op);
  if (c->gloo) return aa__gloo_all_reduce(c->gloo, send, recv, count, dtype, op);
  return aa__shm_all_reduce(c->shm, send, recv, count, dtype, op);
}

int aa_comm_reduce_scatter(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype,
                           aa_comm_op_t op) {
  int rc = check(c, "reduce_scatter", dtype, op, count, c ? (size_t)c->world : 1, send, recv);
  if (rc || !count) return rc;
  if (c->self) return aa__self_copy(send, recv, count * aa_dtype_size(dtype));
  if (c->nccl) return aa__nccl_reduce_scatter(c, send, recv, count, dtype, op);
  if (c->gloo) return aa__gloo_reduce_scatter(c->gloo, send, recv, count, dtype, op);
  return aa__shm_reduce_scatter(c->shm, send, recv, count, dtype, op);
}

int aa_comm_all_gather(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype) {
  int rc = check(c, "all_gather", dtype, AA_COMM_SUM, count, c ? (size_t)c->world : 1, send, recv);
  if (rc || !count) return rc;
  if (c->self) return aa__self_copy(send, recv, count * aa_dtype_size(dtype));
  if (c->nccl) return aa__nccl_all_gather(c, send, recv, count, dtype);
  if (c->gloo) return aa__gloo_all_gather(c->gloo, send, recv, count * aa_dtype_size(dtype), "all_gather");
  return aa__shm_all_gather(c->shm, send, recv, count * aa_dtype_size(dtype), "all_gather");
}

int aa_comm_broadcast(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype, int root) {
  int rc = check(c, "broadcast", dtype, AA_COMM_SUM, count, 1, recv, recv);
  if (rc) return rc;
  if (root < 0 || root >= c->world) return bad(c, "broadcast", "the root is not a rank of the group");
  if (count && c->rank == root && !send) return bad(c, "broadcast", "the root's send buffer is NULL");
  if (!count) return 0;
  if (c->self) return aa__self_copy(send, recv, count * aa_dtype_size(dtype));
  if (c->nccl) return aa__nccl_broadcast(c, send, recv, count, dtype, root);
  if (c->gloo) return aa__gloo_broadcast(c->gloo, send, recv, count * aa_dtype_size(dtype), root);
  return aa__shm_broadcast(c->shm, send, recv, count * aa_dtype_size(dtype), root, "broadcast");
}

int aa_comm_send(aa_comm_t *c, const void *buf, size_t count, aa_dtype_t dtype, int peer) {
  int rc = check(c, "send", dtype, AA_COMM_SUM, count, 1, buf, buf);
  if (rc) return rc;
  if (peer < 0 || peer >= c->world || peer == c->rank)
    return bad(c, "send", "the peer is not another rank of the group");
  if (!count) return 0;
  if (c->nccl) return aa__nccl_send(c, buf, count, dtype, peer);
  if (c->gloo) return aa__gloo_send(c->gloo, buf, count * aa_dtype_size(dtype), peer);
  return aa__shm_send(c->shm, buf, count * aa_dtype_size(dtype), peer);
}

int aa_comm_recv(aa_comm_t *c, void *buf, size_t count, aa_dtype_t dtype, int peer) {
  int rc = check(c, "recv", dtype, AA_COMM_SUM, count, 1, buf, buf);
  if (rc) return rc;
  if (peer < 0 || peer >= c->world || peer == c->rank)
    return bad(c, "recv", "the peer is not another rank of the group");
  if (!count) return 0;
  if (c->nccl) return aa__nccl_recv(c, buf, count, dtype, peer);
  if (c->gloo) return aa__gloo_recv(c->gloo, buf, count * aa_dtype_size(dtype), peer);
  return aa__shm_recv(c->shm, buf, count * aa_dtype_size(dtype), peer);
}

int aa_comm_sendrecv(aa_comm_t *c, const void *send, int to, void *recv, int from, size_t count,
                     aa_dtype_t dtype) {
  if (!c) return aa_error(AA_EINVAL, "sendrecv: the group is NULL");
  if (c->world == 1) return 0; /* nothing moves in a group of one: the ring is the rank itself */
  /* Even ranks send first, odd ones receive first: along a ring every
   * chain of waits ends at an odd rank, which receives at once, so no
   * cycle of blocked sends can form, whatever the size of the ring (a
   * ring of odd size has two even ranks side by side, and the second's
   * send waits only until the first has sent). */
  int rc;
  if (c->rank % 2 == 0) {
    rc = aa_comm_send(c, send, count, dtype, to);
    if (!rc) rc = aa_comm_recv(c, recv, count, dtype, from);
  } else {
    rc = aa_comm_recv(c, recv, count, dtype, from);
    if (!rc) rc = aa_comm_send(c, send, count, dtype, to);
  }
  return rc;
}

/* One rank's non-empty range [lo, hi) of a buffer, for the overlap check. */
typedef struct {
  size_t lo, hi;
  int peer;
} range_t;

static int range_cmp(const void *a, const void *b) {
  const range_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The span [*lo, *hi) of buf's non-empty ranges, in addresses (0, 0 when
 * every count is 0). */
static void span(const void *buf, const size_t *counts, const size_t *offsets, int n, size_t e, uintptr_t *lo,
                 uintptr_t *hi) {
  *lo = UINTPTR_MAX;
  *hi = 0;
  for (int j = 0; j < n; j++) {
    if (!counts[j]) continue;
    uintptr_t a = (uintptr_t)buf + offsets[j] * e, b = a + counts[j] * e;
    if (a < *lo) *lo = a;
    if (b > *hi) *hi = b;
  }
  if (*hi == 0) *lo = 0;
}

/* The checks of an all_to_all_v before anything moves: the group, the
 * dtype, the arrays, each range's byte size, the buffers of non-empty
 * ranges, the own rank's counts, and that no two recv ranges and no send
 * and recv spans overlap. */
static int check_v(aa_comm_t *c, const char *what, const void *send, const size_t *sc, const size_t *so,
                   const void *recv, const size_t *rc, const size_t *ro, aa_dtype_t dt) {
  int err = check(c, what, dt, AA_COMM_SUM, 0, 1, NULL, NULL);
  if (err) return err;
  if (!sc || !so || !rc || !ro) return bad(c, what, "a counts or offsets array is NULL");
  int n = c->world;
  size_t e = aa_dtype_size(dt), most = SIZE_MAX / e;
  int sends = 0, recvs = 0;
  for (int j = 0; j < n; j++) {
    if (so[j] > most || sc[j] > most - so[j])
      return aa_error(AA_EINVAL,
                      "%s: rank %d of %d: send_offsets[%d] + send_counts[%d] overflows the byte size", what,
                      c->rank, n, j, j);
    if (ro[j] > most || rc[j] > most - ro[j])
      return aa_error(AA_EINVAL,
                      "%s: rank %d of %d: recv_offsets[%d] + recv_counts[%d] overflows the byte size", what,
                      c->rank, n, j, j);
    sends |= sc[j] != 0;
    recvs |= rc[j] != 0;
  }
  if (sends && !send) return bad(c, what, "send is NULL but a send count is not 0");
  if (recvs && !recv) return bad(c, what, "recv is NULL but a recv count is not 0");
  if (sc[c->rank] != rc[c->rank])
    return aa_error(AA_EINVAL,
                    "%s: rank %d of %d: send_counts[%d] = %zu to itself, but recv_counts[%d] = %zu", what,
                    c->rank, n, c->rank, sc[c->rank], c->rank, rc[c->rank]);
  uintptr_t slo, shi, rlo, rhi;
  span(send, sc, so, n, e, &slo, &shi);
  span(recv, rc, ro, n, e, &rlo, &rhi);
  if (slo < rhi && rlo < shi)
    return bad(c, what, "the send and recv ranges overlap (all_to_all_v has no in-place form)");
  range_t *r = malloc((size_t)n * sizeof *r);
  if (!r) return aa_error(AA_ENOMEM, "%s: out of memory", what);
  int m = 0;
  for (int j = 0; j < n; j++)
    if (rc[j]) r[m++] = (range_t){ro[j], ro[j] + rc[j], j};
  qsort(r, (size_t)m, sizeof *r, range_cmp);
  for (int k = 1; k < m; k++)
    if (r[k].lo < r[k - 1].hi) {
      err = aa_error(AA_EINVAL, "%s: rank %d of %d: the recv ranges of rank %d and rank %d overlap", what,
                     c->rank, n, r[k - 1].peer, r[k].peer);
      break;
    }
  free(r);
  return err;
}

int aa_comm_all_to_all_v(aa_comm_t *c, const void *send, const size_t *send_counts,
                         const size_t *send_offsets, void *recv, const size_t *recv_counts,
                         const size_t *recv_offsets, aa_dtype_t dtype) {
  const char *what = "all_to_all_v";
  int rc = check_v(c, what, send, send_counts, send_offsets, recv, recv_counts, recv_offsets, dtype);
  if (rc) return rc;
  size_t e = aa_dtype_size(dtype);
  if (c->self)
    return send_counts[0] ? aa__self_copy((const char *)send + send_offsets[0] * e,
                                          (char *)recv + recv_offsets[0] * e, send_counts[0] * e)
                          : 0;
  if (c->nccl)
    return aa__nccl_all_to_all_v(c, send, send_counts, send_offsets, recv, recv_counts, recv_offsets, dtype);
  if (c->gloo)
    return aa__gloo_all_to_all_v(c->gloo, send, send_counts, send_offsets, recv, recv_counts, recv_offsets, e,
                                 what);
  return aa__shm_all_to_all_v(c->shm, send, send_counts, send_offsets, recv, recv_counts, recv_offsets, e,
                              what);
}

int aa_comm_all_to_all_counts(aa_comm_t *c, const size_t *send_counts, size_t *recv_counts) {
  const char *what = "all_to_all_counts";
  if (!c) return aa_error(AA_EINVAL, "%s: the group is NULL", what);
  int rc = usable(c, what);
  if (rc) return rc;
  if (!send_counts || !recv_counts) return bad(c, what, "a counts array is NULL");
  size_t n = (size_t)c->world;
  if (send_counts < recv_counts + n && recv_counts < send_counts + n)
    return bad(c, what, "send_counts and recv_counts overlap");
  if (c->self) return aa__self_copy(send_counts, recv_counts, sizeof *send_counts);
  /* One size_t per peer, at offset j for rank j. nccl's buffers are device
   * memory, so its counts travel over its host carrier (c->gloo or c->shm),
   * a group of the same ranks. */
  size_t *ones = malloc(2 * n * sizeof *ones);
  if (!ones) return aa_error(AA_ENOMEM, "%s: out of memory", what);
  size_t *at = ones + n;
  for (size_t j = 0; j < n; j++) {
    ones[j] = 1;
    at[j] = j;
  }
  if (c->gloo)
    rc = aa__gloo_all_to_all_v(c->gloo, send_counts, ones, at, recv_counts, ones, at, sizeof *send_counts,
                               what);
  else
    rc =
        aa__shm_all_to_all_v(c->shm, send_counts, ones, at, recv_counts, ones, at, sizeof *send_counts, what);
  free(ones);
  return rc;
}

int aa_comm_barrier(aa_comm_t *c) {
  if (!c) return aa_error(AA_EINVAL, "barrier: the group is NULL");
  int rc = usable(c, "barrier");
  if (rc || c->self) return rc;
  if (c->nccl) return aa__nccl_barrier(c);
  if (c->gloo) return aa__gloo_barrier(c->gloo);
  return aa__shm_barrier(c->shm, "barrier");
}

void aa_comm_abort(aa_comm_t *c) {
  if (c && c->self) aa__self_abort(c->self);
  else if (c && c->gloo)
    aa__gloo_abort(c->gloo, AA__ABORT_CALLED);
  else if (c) aa__shm_abort(c->shm, AA__ABORT_CALLED);
}

void aa_comm_destroy(aa_comm_t *c) {
  if (!c) return;
  if (c->self) aa__self_release(c->self);
  if (c->nccl) aa__nccl_destroy(c); /* before its carrier, which it looks at */
  if (c->gloo) aa__gloo_destroy(c->gloo);
  aa__shm_destroy(c->shm);
  free(c);
}
