/* The gloo process group (comm.h, backend "gloo"; design in docs/comm.md):
 * the collectives, in C, over one primitive of the C++ shim
 * (comm_gloo.cc): an exchange posts a list of sends and receives between
 * world ranks and waits for all of them.
 *
 * A family (the group of aa_comm_init and its splits) shares one
 * full-mesh TCP context. A group is a map from its ranks to world ranks and
 * a 30-bit id every member computes alike (0 for the world, a hash of the
 * parent's id, its split count and the color for a split), so a split makes
 * no connection. A transfer's gloo slot is the group id, the group's
 * sequence number of the exchange and the direction (plus a flag and the
 * per-peer message count for send/recv), so groups sharing a connection
 * never match each other's transfers.
 *
 * The collectives move at most CHUNK bytes per peer per exchange, so each
 * wait of the group's timeout covers a bounded transfer and the temporary
 * memory of a reduction stays near CHUNK. Reductions use the shm backend's
 * code (aa__comm_reduce): each element is summed by one rank, in rank
 * order, in fp32, and sent to the others, so results are the same bits as
 * shm's on every rank.
 *
 *   reduce_scatter  every rank sends slice j to rank j; rank r sums what it
 *                   received with its own slice, in rank order
 *   all_reduce      per chunk: reduce_scatter of aligned slices, then each
 *                   rank sends its reduced slice to every other; a small
 *                   one (SMALL) in one exchange: every rank gathers every
 *                   buffer and sums them all itself, in rank order
 *   all_gather      each rank sends its part to every other
 *   broadcast       the root sends to every other rank
 *   barrier         one byte each way between every two ranks
 *   send/recv       one exchange per chunk, in the pair's message order */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"

#define CHUNK ((size_t)4 << 20) /* bytes per peer per exchange */
#define SMALL ((size_t)64 << 10) /* all_reduce receives at most this in one exchange */
#define ID_MASK 0x3fffffffu     /* group ids: 30 bits of the slot */

enum { CAUSE_ABORT = 1, CAUSE_TIMEOUT = 2, CAUSE_CLOSED = 3, CAUSE_ERROR = 4 };

/* A process's share of a family: the context and the failed word. */
typedef struct {
  int refs; /* handles on the family's groups (their users take turns, comm.h) */
  aa__gx_t *gx;
  int wrank, wsize;
  _Atomic uint32_t failed; /* 0, or cause << 24 | (world rank it concerns + 1) */
} gfam_t;

struct aa__gloo {
  gfam_t *fam;
  uint32_t id;     /* the group's slot namespace */
  uint32_t seq;    /* exchanges of collectives made */
  uint32_t splits; /* aa_comm_split calls made on this group */
  int rank, n;     /* in the group */
  int timeout_ms;
  int *wr;                    /* n world ranks, in group order */
  uint32_t *nsent;            /* n: messages sent to each member (send/recv) */
  uint32_t *nrecv;            /* n: messages received from each member */
  aa__gx_op_t *ops;           /* 2 * n scratch ops */
  const unsigned char **srcs; /* n scratch pointers */
};

#ifndef AA_HAVE_GLOO
/* Without libgloo the shim is absent; aa_comm_init refuses "gloo:" first. */
int aa__gx_connect(aa__gx_t **out, const aa_comm_store_t *store, const char *prefix, const char *address,
                   int rank, int world, int timeout_ms, aa__gx_err_t *err) {
  (void)out, (void)store, (void)prefix, (void)address, (void)rank, (void)world, (void)timeout_ms;
  *err = (aa__gx_err_t){-1, -1, "built without gloo"};
  return AA_EUNSUPPORTED;
}
int aa__gx_exchange(aa__gx_t *g, const aa__gx_op_t *ops, int n, int timeout_ms, aa__gx_err_t *err) {
  (void)g, (void)ops, (void)n, (void)timeout_ms;
  *err = (aa__gx_err_t){-1, -1, "built without gloo"};
  return AA_EUNSUPPORTED;
}
void aa__gx_abort(aa__gx_t *g) { (void)g; }
void aa__gx_free(aa__gx_t *g) { (void)g; }
int aa__gloo_supported(void) {
  return aa_error(AA_EUNSUPPORTED,
                  "the gloo backend: built without gloo (libgloo-dev was not found by CMake)");
}
#else
int aa__gloo_supported(void) { return 0; }
#endif

/* --- messages ----------------------------------------------------------------------------- */

/* Formats "what: rank R of N[ (world rank W)]: message" into the last error. */
static int fail(const aa__gloo_t *s, int code, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(const aa__gloo_t *s, int code, const char *what, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (s->id == 0) return aa_error(code, "%s: rank %d of %d: %s", what, s->rank, s->n, msg);
  return aa_error(code, "%s: rank %d of %d (world rank %d): %s", what, s->rank, s->n, s->fam->wrank, msg);
}

/* "rank g" for a member ("rank g (world rank w)" in a sub-group), "world
 * rank w" for a rank outside the group. */
static void peer_name(const aa__gloo_t *s, int wrank, char *buf, size_t n) {
  for (int g = 0; g < s->n; g++)
    if (s->wr[g] == wrank) {
      if (s->id == 0)
        snprintf(buf, n, "rank %d", g);
      else
        snprintf(buf, n, "rank %d (world rank %d)", g, wrank);
      return;
    }
  snprintf(buf, n, "world rank %d", wrank);
}

/* Marks the family failed (the first cause is kept); async-signal-safe. */
static void fam_fail(gfam_t *f, int cause, int wrank) {
  uint32_t expected = 0, v = (uint32_t)cause << 24 | (uint32_t)(wrank + 1);
  atomic_compare_exchange_strong(&f->failed, &expected, v);
}

static int cancelled(const aa__gloo_t *s, const char *what) {
  uint32_t v = atomic_load(&s->fam->failed);
  char who[64];
  peer_name(s, (int)(v & 0xffffffu) - 1, who, sizeof who);
  switch (v >> 24) {
  case CAUSE_ABORT: return fail(s, AA_ECANCELLED, what, "the group was aborted by %s (aa_comm_abort)", who);
  case CAUSE_TIMEOUT:
    return fail(s, AA_ECANCELLED, what, "the group was aborted: %s timed out waiting for its peers", who);
  case CAUSE_CLOSED:
    return fail(s, AA_ECANCELLED, what, "the group was aborted: the connection to %s closed", who);
  default: return fail(s, AA_ECANCELLED, what, "the group was aborted after an error on %s", who);
  }
}

int aa__gloo_check(aa__gloo_t *s, const char *what) {
  return atomic_load(&s->fam->failed) ? cancelled(s, what) : 0;
}

void aa__gloo_abort(aa__gloo_t *s, int cause) {
  fam_fail(s->fam,
           cause == AA__ABORT_TIMEOUT ? CAUSE_TIMEOUT
           : cause == AA__ABORT_ERROR ? CAUSE_ERROR
           : cause == AA__ABORT_DIED  ? CAUSE_CLOSED
                                      : CAUSE_ABORT,
           s->fam->wrank);
  aa__gx_abort(s->fam->gx);
}

int aa__gloo_rank(const aa__gloo_t *s) { return s->rank; }
int aa__gloo_world(const aa__gloo_t *s) { return s->n; }
int aa__gloo_timeout_ms(const aa__gloo_t *s) { return s->timeout_ms; }

/* --- the exchange ---------------------------------------------------------------------------- */

/* The slot of a collective's transfer from world rank a to world rank b. */
static uint64_t coll_slot(const aa__gloo_t *s, int a, int b) {
  return (uint64_t)(a < b) << 62 | (uint64_t)s->id << 32 | s->seq;
}

/* The slot of the k-th point-to-point message from world rank a to b. */
static uint64_t p2p_slot(const aa__gloo_t *s, int a, int b, uint32_t k) {
  return (uint64_t)1 << 63 | (uint64_t)(a < b) << 62 | (uint64_t)s->id << 32 | k;
}

/* Adds a transfer of bytes with group member g to s->ops[*n]. Bits 24-31
 * of the slot's sequence number are mixed with a hash of the byte count:
 * a send and a recv whose sizes differ (ranks that disagree on a count)
 * then never match and time out, where gloo would abort the receiving
 * process on a message larger than its buffer. Two live transfers cannot
 * collide: their sequence numbers would be 2^24 apart. */
static void post(aa__gloo_t *s, int *n, int g, int is_send, const void *ptr, size_t bytes, uint64_t slot) {
  if (!bytes) return;
  uint64_t h = aa_fnv1a(AA_FNV_INIT, &bytes, sizeof bytes) & 0xff;
  s->ops[(*n)++] = (aa__gx_op_t){s->wr[g], is_send, (void *)ptr, bytes, slot ^ h << 24};
}

/* Runs s->ops[0..n) as one exchange. A failure fails the family (the shim
 * has closed this rank's connections, so its peers fail too) and is worded
 * with the collective, this rank and the peer concerned. */
static int run(aa__gloo_t *s, int n, const char *what) {
  if (atomic_load(&s->fam->failed)) return cancelled(s, what);
  aa__gx_err_t err = {-1, -1, ""};
  int rc = aa__gx_exchange(s->fam->gx, s->ops, n, s->timeout_ms, &err);
  if (!rc) return 0;
  char who[64] = "no peer";
  int wpeer = err.op >= 0 && err.op < n ? s->ops[err.op].peer : -1;
  if (wpeer >= 0) peer_name(s, wpeer, who, sizeof who);
  if (rc == AA_ETIMEOUT) {
    fam_fail(s->fam, CAUSE_TIMEOUT, s->fam->wrank);
    return fail(s, rc, what, "timed out after %d ms waiting for %s to %s", s->timeout_ms, who,
                wpeer >= 0 && s->ops[err.op].is_send ? "receive" : "send");
  }
  uint32_t before = atomic_load(&s->fam->failed);
  if (before) return cancelled(s, what); /* aborted here, or failed earlier */
  if (rc == AA_ECANCELLED && wpeer >= 0) {
    fam_fail(s->fam, CAUSE_CLOSED, wpeer);
    return fail(s, rc, what, "the connection to %s closed: it died, failed or aborted (gloo: %s)", who,
                err.why);
  }
  fam_fail(s->fam, CAUSE_ERROR, s->fam->wrank);
  return fail(s, rc, what, "%s (gloo: %s)", who, err.why);
}

/* --- joining, splitting, leaving ---------------------------------------------------------------- */

static aa__gloo_t *group_new(gfam_t *f, uint32_t id, int rank, int n, int timeout_ms) {
  aa__gloo_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->fam = f;
  s->id = id;
  s->rank = rank;
  s->n = n;
  s->timeout_ms = timeout_ms;
  s->wr = calloc((size_t)n, sizeof *s->wr);
  s->nsent = calloc((size_t)n, sizeof *s->nsent);
  s->nrecv = calloc((size_t)n, sizeof *s->nrecv);
  s->ops = calloc(2 * (size_t)n, sizeof *s->ops);
  s->srcs = calloc((size_t)n, sizeof *s->srcs);
  if (!s->wr || !s->nsent || !s->nrecv || !s->ops || !s->srcs) {
    free(s->wr), free(s->nsent), free(s->nrecv), free(s->ops), free(s->srcs), free(s);
    return NULL;
  }
  return s;
}

int aa__gloo_init(aa__gloo_t **out, const char *name, int rank, int world, int timeout_ms,
                  const aa_comm_store_t *store, const char *address) {
  gfam_t *f = calloc(1, sizeof *f);
  aa__gloo_t *s = f ? group_new(f, 0, rank, world, timeout_ms) : NULL;
  if (!s) {
    free(f);
    return aa_error(AA_ENOMEM, "aa_comm_init: out of memory");
  }
  f->refs = 1;
  f->wrank = rank;
  f->wsize = world;
  for (int g = 0; g < world; g++)
    s->wr[g] = g;
  aa__gx_err_t err = {-1, -1, ""};
  int rc = aa__gx_connect(&f->gx, store, name, address, rank, world, timeout_ms, &err);
  if (rc) {
    if (rc == AA_ETIMEOUT && err.rank >= 0)
      fail(s, rc, "aa_comm_init", "timed out after %d ms: rank %d did not join (%s)", timeout_ms, err.rank,
           err.why);
    else if (rc == AA_ETIMEOUT)
      fail(s, rc, "aa_comm_init", "timed out after %d ms connecting to its peers (gloo: %s)", timeout_ms,
           err.why);
    else if (err.rank >= 0)
      fail(s, rc, "aa_comm_init", "the store failed for rank %d's key: %s", err.rank, err.why);
    else
      fail(s, rc, "aa_comm_init", "listening on %s and connecting to the peers: %s", address, err.why);
    aa__gloo_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* Over the parent: all-gather every member's (color, key); the members of
 * this color in (key, parent rank) order form the child, whose id every
 * member derives from the parent's id, its split count and the color. */
int aa__gloo_split(aa__gloo_t *p, int color, int key, aa__gloo_t **out) {
  int n = p->n, rc;
  int32_t mine[2] = {color, key};
  int32_t *ck = malloc((size_t)n * 2 * sizeof *ck);
  int *order = malloc((size_t)n * sizeof *order);
  if (!ck || !order) {
    rc = aa_error(AA_ENOMEM, "aa_comm_split: out of memory");
    goto cleanup;
  }
  if ((rc = aa__gloo_all_gather(p, mine, ck, sizeof mine, "aa_comm_split"))) goto cleanup;
  uint32_t nsplit = p->splits++;
  if (color < 0) {
    *out = NULL;
    goto cleanup;
  }
  int m = 0, me = -1;
  for (int g = 0; g < n; g++) { /* insertion sort by (key, parent rank) */
    if (ck[2 * g] != color) continue;
    int at = m++;
    while (at > 0 && ck[2 * order[at - 1] + 1] > ck[2 * g + 1]) {
      order[at] = order[at - 1];
      at--;
    }
    order[at] = g;
  }
  for (int i = 0; i < m; i++)
    if (order[i] == p->rank) me = i;
  uint32_t h[3] = {p->id, nsplit, (uint32_t)color};
  uint32_t id = (uint32_t)aa_fnv1a(AA_FNV_INIT, h, sizeof h) & ID_MASK;
  if (id == 0) id = 1; /* 0 is the world's */
  aa__gloo_t *s = group_new(p->fam, id, me, m, p->timeout_ms);
  if (!s) {
    rc = aa_error(AA_ENOMEM, "aa_comm_split: out of memory");
    goto cleanup;
  }
  for (int i = 0; i < m; i++)
    s->wr[i] = p->wr[order[i]];
  p->fam->refs++;
  *out = s;
cleanup:
  free(ck);
  free(order);
  return rc;
}

void aa__gloo_destroy(aa__gloo_t *s) {
  if (!s) return;
  gfam_t *f = s->fam;
  if (--f->refs == 0) {
    aa__gx_free(f->gx);
    free(f);
  }
  free(s->wr), free(s->nsent), free(s->nrecv), free(s->ops), free(s->srcs), free(s);
}

/* --- collectives --------------------------------------------------------------------------------- */

int aa__gloo_reduce_scatter(aa__gloo_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                            aa_comm_op_t op) {
  size_t e = aa_dtype_size(dt), peers = s->n > 1 ? (size_t)s->n - 1 : 1;
  size_t chunk = CHUNK / (e * peers) ? CHUNK / (e * peers) : 1;
  if (chunk > count) chunk = count;
  const unsigned char *in = send;
  unsigned char *out = recv, *tmp = malloc(peers * chunk * e);
  if (!tmp) return fail(s, AA_ENOMEM, "reduce_scatter", "out of memory");
  int rc = 0;
  for (size_t off = 0; off < count && !rc; off += chunk) {
    size_t c = count - off < chunk ? count - off : chunk;
    int n = 0, me = s->wr[s->rank];
    for (int g = 0, t = 0; g < s->n; g++) {
      if (g == s->rank) continue;
      post(s, &n, g, 1, in + ((size_t)g * count + off) * e, c * e, coll_slot(s, me, s->wr[g]));
      post(s, &n, g, 0, tmp + (size_t)t++ * c * e, c * e, coll_slot(s, s->wr[g], me));
    }
    s->seq++;
    if ((rc = run(s, n, "reduce_scatter"))) break;
    for (int k = 0, t = 0; k < s->n; k++)
      s->srcs[k] = k == s->rank ? in + ((size_t)k * count + off) * e : tmp + (size_t)t++ * c * e;
    aa__comm_reduce(out + off * e, s->srcs, s->n, c, dt, op);
  }
  free(tmp);
  return rc;
}

/* A small all_reduce in one exchange instead of two: every rank sends its
 * whole buffer to every other and sums all of them itself, in rank order
 * with the same code, so every rank computes the same bits as the sliced
 * path. Gloo's rendezvous protocol costs about two round trips per
 * exchange, which is most of a small call's time. */
static int all_reduce_small(aa__gloo_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                            aa_comm_op_t op) {
  size_t bytes = count * aa_dtype_size(dt);
  unsigned char *tmp = malloc(((size_t)s->n - 1) * bytes);
  if (!tmp) return fail(s, AA_ENOMEM, "all_reduce", "out of memory");
  int n = 0, me = s->wr[s->rank];
  for (int g = 0, t = 0; g < s->n; g++) {
    if (g == s->rank) continue;
    post(s, &n, g, 1, send, bytes, coll_slot(s, me, s->wr[g]));
    post(s, &n, g, 0, tmp + (size_t)t++ * bytes, bytes, coll_slot(s, s->wr[g], me));
  }
  s->seq++;
  int rc = run(s, n, "all_reduce");
  if (!rc) {
    for (int k = 0, t = 0; k < s->n; k++)
      s->srcs[k] = k == s->rank ? send : tmp + (size_t)t++ * bytes;
    aa__comm_reduce(recv, s->srcs, s->n, count, dt, op);
  }
  free(tmp);
  return rc;
}

int aa__gloo_all_reduce(aa__gloo_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                        aa_comm_op_t op) {
  if (s->n > 1 && count * aa_dtype_size(dt) * ((size_t)s->n - 1) <= SMALL)
    return all_reduce_small(s, send, recv, count, dt, op);
  size_t e = aa_dtype_size(dt), chunk = CHUNK / e;
  if (chunk > count) chunk = count;
  size_t lo, hi, most;
  aa__comm_slice(chunk, s->n, 0, &lo, &most); /* the largest slice of a chunk */
  const unsigned char *in = send;
  unsigned char *out = recv, *tmp = malloc((s->n > 1 ? (size_t)s->n - 1 : 1) * most * e);
  if (!tmp) return fail(s, AA_ENOMEM, "all_reduce", "out of memory");
  int rc = 0, me = s->wr[s->rank];
  for (size_t off = 0; off < count && !rc; off += chunk) {
    size_t c = count - off < chunk ? count - off : chunk, mlo, mhi;
    aa__comm_slice(c, s->n, s->rank, &mlo, &mhi);
    /* Each member's slice to its owner; the own slice from every member. */
    int n = 0;
    for (int g = 0, t = 0; g < s->n; g++) {
      if (g == s->rank) continue;
      aa__comm_slice(c, s->n, g, &lo, &hi);
      post(s, &n, g, 1, in + (off + lo) * e, (hi - lo) * e, coll_slot(s, me, s->wr[g]));
      post(s, &n, g, 0, tmp + (size_t)t++ * most * e, (mhi - mlo) * e, coll_slot(s, s->wr[g], me));
    }
    s->seq++;
    if ((rc = run(s, n, "all_reduce"))) break;
    if (mhi > mlo) {
      for (int k = 0, t = 0; k < s->n; k++)
        s->srcs[k] = k == s->rank ? in + (off + mlo) * e : tmp + (size_t)t++ * most * e;
      aa__comm_reduce(out + (off + mlo) * e, s->srcs, s->n, mhi - mlo, dt, op);
    }
    /* The reduced slices to everyone. */
    n = 0;
    for (int g = 0; g < s->n; g++) {
      if (g == s->rank) continue;
      aa__comm_slice(c, s->n, g, &lo, &hi);
      post(s, &n, g, 1, out + (off + mlo) * e, (mhi - mlo) * e, coll_slot(s, me, s->wr[g]));
      post(s, &n, g, 0, out + (off + lo) * e, (hi - lo) * e, coll_slot(s, s->wr[g], me));
    }
    s->seq++;
    rc = run(s, n, "all_reduce");
  }
  free(tmp);
  return rc;
}

int aa__gloo_all_gather(aa__gloo_t *s, const void *send, void *recv, size_t bytes, const char *what) {
  const unsigned char *in = send;
  unsigned char *out = recv;
  int me = s->wr[s->rank];
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t c = bytes - off < CHUNK ? bytes - off : CHUNK;
    int n = 0;
    for (int g = 0; g < s->n; g++) {
      if (g == s->rank) continue;
      post(s, &n, g, 1, in + off, c, coll_slot(s, me, s->wr[g]));
      post(s, &n, g, 0, out + (size_t)g * bytes + off, c, coll_slot(s, s->wr[g], me));
    }
    s->seq++;
    int rc = run(s, n, what);
    if (rc) return rc;
  }
  unsigned char *own = out + (size_t)s->rank * bytes;
  if (own != in) memmove(own, in, bytes); /* in place: send is already recv's own slice */
  return 0;
}

int aa__gloo_broadcast(aa__gloo_t *s, const void *send, void *recv, size_t bytes, int root) {
  const unsigned char *in = send;
  unsigned char *out = recv;
  int me = s->wr[s->rank];
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t c = bytes - off < CHUNK ? bytes - off : CHUNK;
    int n = 0;
    if (s->rank == root) {
      for (int g = 0; g < s->n; g++)
        if (g != root) post(s, &n, g, 1, in + off, c, coll_slot(s, me, s->wr[g]));
    } else {
      post(s, &n, root, 0, out + off, c, coll_slot(s, s->wr[root], me));
    }
    s->seq++;
    int rc = run(s, n, "broadcast");
    if (rc) return rc;
  }
  if (s->rank == root && out != in) memcpy(out, in, bytes);
  return 0;
}

/* all_to_all_v in rounds: round k moves bytes [k * CHUNK, (k + 1) * CHUNK)
 * of every message this rank sends or receives, and the rank stops after
 * its last non-empty round. The pair (a, b) takes the same rounds on both
 * sides (a's send count to b is b's recv count from a), so no rank waits on
 * a round its peer skips; ranks that have nothing left stop early. The
 * number of rounds is not known to the whole group, so every round of one
 * call shares the call's sequence number, advanced once at the end: round
 * k's slot carries seq + k, and the hash of (the piece's size, the whole
 * message's size) in place of post's, so ranks that disagree on a count
 * never match (they time out, as for send/recv). Seq + k may equal a later
 * call's number, but a rank leaves the call only when every transfer of
 * the pair has been posted on both sides, so no later transfer can be
 * taken for one of these. */
int aa__gloo_all_to_all_v(aa__gloo_t *s, const void *send, const size_t *send_counts,
                          const size_t *send_offsets, void *recv, const size_t *recv_counts,
                          const size_t *recv_offsets, size_t esize, const char *what) {
  const unsigned char *in = send;
  unsigned char *out = recv;
  int me = s->wr[s->rank], rc = 0;
  for (size_t k = 0;; k++) {
    size_t done = k * CHUNK;
    int n = 0;
    for (int g = 0; g < s->n; g++) {
      if (g == s->rank) continue;
      for (int is_send = 1; is_send >= 0; is_send--) {
        size_t total = (is_send ? send_counts[g] : recv_counts[g]) * esize;
        if (total <= done) continue;
        size_t c = total - done < CHUNK ? total - done : CHUNK, h[2] = {c, total};
        uint64_t hash = aa_fnv1a(AA_FNV_INIT, h, sizeof h) & 0xff;
        uint64_t slot = (uint64_t)(is_send ? me < s->wr[g] : s->wr[g] < me) << 62 | (uint64_t)s->id << 32 |
                        (uint32_t)(s->seq + (uint32_t)k);
        void *ptr =
            is_send ? (void *)(in + send_offsets[g] * esize + done) : out + recv_offsets[g] * esize + done;
        s->ops[n++] = (aa__gx_op_t){s->wr[g], is_send, ptr, c, slot ^ hash << 24};
      }
    }
    if (!n || (rc = run(s, n, what))) break;
  }
  s->seq++;
  if (!rc && send_counts[s->rank])
    memcpy(out + recv_offsets[s->rank] * esize, in + send_offsets[s->rank] * esize,
           send_counts[s->rank] * esize);
  return rc;
}

int aa__gloo_barrier(aa__gloo_t *s) {
  static const unsigned char token = 1;
  unsigned char *got = malloc((size_t)s->n);
  if (!got) return fail(s, AA_ENOMEM, "barrier", "out of memory");
  int n = 0, me = s->wr[s->rank];
  for (int g = 0; g < s->n; g++) {
    if (g == s->rank) continue;
    post(s, &n, g, 1, &token, 1, coll_slot(s, me, s->wr[g]));
    post(s, &n, g, 0, got + g, 1, coll_slot(s, s->wr[g], me));
  }
  s->seq++;
  int rc = run(s, n, "barrier");
  free(got);
  return rc;
}

int aa__gloo_send(aa__gloo_t *s, const void *buf, size_t bytes, int peer) {
  const unsigned char *in = buf;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t c = bytes - off < CHUNK ? bytes - off : CHUNK;
    int n = 0;
    post(s, &n, peer, 1, in + off, c, p2p_slot(s, s->wr[s->rank], s->wr[peer], s->nsent[peer]++));
    int rc = run(s, n, "send");
    if (rc) return rc;
  }
  return 0;
}

int aa__gloo_recv(aa__gloo_t *s, void *buf, size_t bytes, int peer) {
  unsigned char *out = buf;
  for (size_t off = 0; off < bytes; off += CHUNK) {
    size_t c = bytes - off < CHUNK ? bytes - off : CHUNK;
    int n = 0;
    post(s, &n, peer, 0, out + off, c, p2p_slot(s, s->wr[peer], s->wr[s->rank], s->nrecv[peer]++));
    int rc = run(s, n, "recv");
    if (rc) return rc;
  }
  return 0;
}
