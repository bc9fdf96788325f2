/* Inside the process groups of comm.h: the handle comm.c dispatches from and
 * the four backends behind it. Only comm/comm*.c include this.
 *
 * comm.c checks the arguments (ranges, NULL buffers, sizes that overflow)
 * and the group's failed state, then calls the backend. comm_shm.c is the
 * shared-memory group; comm_nccl.c drives NCCL and keeps a shm group of the
 * same ranks beside it, which bootstraps NCCL and carries the abort word and
 * the liveness of the ranks (so a dead rank or aa_comm_abort stops an NCCL
 * wait too); comm_gloo.c is the TCP group, whose collectives are built on
 * one exchange primitive of the C++ shim comm_gloo.cc (aa__gx_*);
 * comm_self.c is the group of one, which has neither. The aa__
 * names are internal; they are not part of the API. */
#ifndef AA_COMM_INTERNAL_H
#define AA_COMM_INTERNAL_H

#include "comm.h"

typedef struct aa__shm aa__shm_t;
typedef struct aa__nccl aa__nccl_t;
typedef struct aa__self aa__self_t;
typedef struct aa__gloo aa__gloo_t;

/* Exactly one of shm, gloo and self is set: self for a group of one made by
 * aa_comm_self (or split from one), gloo for a "gloo:" or "nccl-hosts:"
 * rendezvous, shm otherwise. nccl is set beside shm ("nccl:", one host) or
 * gloo ("nccl-hosts:"): that group, the carrier, bootstrapped the
 * communicator and carries the family's abort (and, shm, the ranks'
 * liveness); the collectives go to nccl. */
struct aa_comm {
  int rank, world;
  aa__gloo_t *gloo; /* owned: the gloo group (comm_gloo.c); nccl-hosts: the carrier */
  aa__shm_t *shm;   /* owned: the group in shared memory; nccl: the carrier */
  aa__nccl_t *nccl; /* owned: NULL for the shm, gloo and self backends */
  aa__self_t *self; /* one reference to the family of a group of one */
};

/* --- comm_reduce.c (the host backends' arithmetic) --------------------------------------- */

/* Member k's part [lo, hi) of c elements split over n members, each part
 * starting on a cache line (the last ones may be empty). */
void aa__comm_slice(size_t c, int n, int k, size_t *lo, size_t *hi);
/* dst(len) = op over k = 0..n-1, in that order, of src[k](len), summed in
 * fp32 (16-bit inputs widened) and rounded once to dt; AVG divides the fp32
 * sum by n. dst may be one of the sources (the same elements). */
void aa__comm_reduce(void *dst, const unsigned char *const *src, int n, size_t len, aa_dtype_t dt,
                     aa_comm_op_t op);

/* --- comm_self.c ---------------------------------------------------------------------- */

/* A group of one in parent's family (parent->self); *out = NULL for color < 0. */
int aa__self_split(aa_comm_t *parent, int color, aa_comm_t **out);
/* 0, or AA_ECANCELLED naming `what` once the family was aborted. */
int aa__self_check(const aa__self_t *f, const char *what);
/* Marks the family aborted (async-signal-safe: one store). */
void aa__self_abort(aa__self_t *f);
/* Every collective of a group of one: recv = send, nothing done in place.
 * Returns 0, the collective's result. */
int aa__self_copy(const void *send, void *recv, size_t bytes);
/* Drops one reference to the family; the last frees it. */
void aa__self_release(aa__self_t *f);

/* --- comm_shm.c ---------------------------------------------------------------------- */

/* Joins the segment `name` (a POSIX shm name, "/aa-...") as rank of world;
 * see aa_comm_init. timeout_ms > 0. */
int aa__shm_init(aa__shm_t **out, const char *name, int rank, int world, int timeout_ms);
/* Sub-group of parent (see aa_comm_split); *out = NULL for color < 0. */
int aa__shm_split(aa__shm_t *parent, int color, int key, aa__shm_t **out);
int aa__shm_timeout_ms(const aa__shm_t *s);
int aa__shm_rank(const aa__shm_t *s);
int aa__shm_world(const aa__shm_t *s);

/* 0 while the group is usable; AA_ECANCELLED, with the message prefixed by
 * `what`, once it was aborted or a member was found dead. Peers are probed
 * (a robust-mutex trylock each) only when probe_peers is set. */
int aa__shm_check(aa__shm_t *s, const char *what, int probe_peers);
/* Marks the whole family failed (async-signal-safe): cause AA__ABORT_*. */
enum { AA__ABORT_CALLED = 1, AA__ABORT_DIED = 2, AA__ABORT_TIMEOUT = 3, AA__ABORT_ERROR = 4 };
void aa__shm_abort(aa__shm_t *s, int cause);

/* Byte-level data paths (all_gather, broadcast, send/recv move bytes; only
 * reductions look at the dtype). `what` names the caller in messages. */
int aa__shm_all_reduce(aa__shm_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                       aa_comm_op_t op);
int aa__shm_reduce_scatter(aa__shm_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                           aa_comm_op_t op);
int aa__shm_all_gather(aa__shm_t *s, const void *send, void *recv, size_t bytes, const char *what);
int aa__shm_broadcast(aa__shm_t *s, const void *send, void *recv, size_t bytes, int root, const char *what);
int aa__shm_send(aa__shm_t *s, const void *buf, size_t bytes, int peer);
int aa__shm_recv(aa__shm_t *s, void *buf, size_t bytes, int peer);
/* all_to_all_v in bytes: counts and offsets are in elements of esize
 * bytes (checked by comm.c); the own rank's part is copied locally. */
int aa__shm_all_to_all_v(aa__shm_t *s, const void *send, const size_t *send_counts,
                         const size_t *send_offsets, void *recv, const size_t *recv_counts,
                         const size_t *recv_offsets, size_t esize, const char *what);
int aa__shm_barrier(aa__shm_t *s, const char *what);
void aa__shm_destroy(aa__shm_t *s);

/* --- comm_nccl.c (stubs answering AA_EUNSUPPORTED when built without NCCL) ----------- */

/* 0 if this build has the nccl backend, else AA_EUNSUPPORTED with the reason. */
int aa__nccl_supported(void);
/* Builds c->nccl over the already joined carrier (c->shm or c->gloo): rank
 * 0 makes the unique id and broadcasts it through the carrier, all call
 * ncclCommInitRank on the current CUDA device. */
int aa__nccl_init(aa_comm_t *c);
/* child's carrier is the split of parent's (NULL when the rank is in no
 * group); builds child->nccl from parent's, and sets child's rank and
 * world. */
int aa__nccl_split(aa_comm_t *parent, int color, int key, aa_comm_t *child);
int aa__nccl_all_reduce(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                        aa_comm_op_t op);
int aa__nccl_reduce_scatter(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                            aa_comm_op_t op);
int aa__nccl_all_gather(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt);
int aa__nccl_broadcast(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt, int root);
int aa__nccl_send(aa_comm_t *c, const void *buf, size_t count, aa_dtype_t dt, int peer);
int aa__nccl_recv(aa_comm_t *c, void *buf, size_t count, aa_dtype_t dt, int peer);
/* ncclSend/ncclRecv per peer (itself included) in one NCCL group. */
int aa__nccl_all_to_all_v(aa_comm_t *c, const void *send, const size_t *send_counts,
                          const size_t *send_offsets, void *recv, const size_t *recv_counts,
                          const size_t *recv_offsets, aa_dtype_t dt);
int aa__nccl_barrier(aa_comm_t *c);
/* Frees c->nccl (ncclCommAbort if the group failed, else destroy). */
void aa__nccl_destroy(aa_comm_t *c);

/* --- comm_gloo.c: the gloo group, collectives built on one exchange primitive --------- */

/* 0 if this build has the gloo backend, else AA_EUNSUPPORTED with the reason. */
int aa__gloo_supported(void);
/* Joins the gloo group `name` (the key prefix) as rank of world through
 * store, listening on address (checked by the caller: a numeric IP);
 * timeout_ms > 0. */
int aa__gloo_init(aa__gloo_t **out, const char *name, int rank, int world, int timeout_ms,
                  const aa_comm_store_t *store, const char *address);
int aa__gloo_split(aa__gloo_t *parent, int color, int key, aa__gloo_t **out);
int aa__gloo_rank(const aa__gloo_t *s);
int aa__gloo_world(const aa__gloo_t *s);
/* 0 while the family is usable, else AA_ECANCELLED prefixed by `what`. */
int aa__gloo_check(aa__gloo_t *s, const char *what);
int aa__gloo_timeout_ms(const aa__gloo_t *s);
/* Fails the family (async-signal-safe); cause AA__ABORT_* (the messages of
 * the family's later calls name it). */
void aa__gloo_abort(aa__gloo_t *s, int cause);
int aa__gloo_all_reduce(aa__gloo_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                        aa_comm_op_t op);
int aa__gloo_reduce_scatter(aa__gloo_t *s, const void *send, void *recv, size_t count, aa_dtype_t dt,
                            aa_comm_op_t op);
int aa__gloo_all_gather(aa__gloo_t *s, const void *send, void *recv, size_t bytes, const char *what);
int aa__gloo_broadcast(aa__gloo_t *s, const void *send, void *recv, size_t bytes, int root);
int aa__gloo_send(aa__gloo_t *s, const void *buf, size_t bytes, int peer);
int aa__gloo_recv(aa__gloo_t *s, void *buf, size_t bytes, int peer);
int aa__gloo_all_to_all_v(aa__gloo_t *s, const void *send, const size_t *send_counts,
                          const size_t *send_offsets, void *recv, const size_t *recv_counts,
                          const size_t *recv_offsets, size_t esize, const char *what);
int aa__gloo_barrier(aa__gloo_t *s);
void aa__gloo_destroy(aa__gloo_t *s);

/* --- comm_gloo.cc: the C++ shim over libgloo (every exception caught there) ---------- */

/* One full-mesh TCP context of a family: every group of the family moves
 * its bytes over it, in its own slots. */
typedef struct aa__gx aa__gx_t;

/* One transfer of an exchange: bytes from/to ptr with world rank peer, in
 * gloo slot `slot` (sender and receiver name the same slot). */
typedef struct {
  int peer;
  int is_send;
  void *ptr;
  size_t bytes;
  uint64_t slot;
} aa__gx_op_t;

/* Why a shim call failed, for the C side to word the message. */
typedef struct {
  int op;        /* the exchange op whose wait failed, -1 for none */
  int rank;      /* connect: the world rank that did not come, -1 if unknown */
  char why[384]; /* gloo's (or the store's) own words */
} aa__gx_err_t;

/* Creates the context of world ranks listening on address, connected in a
 * full mesh through store under keys prefixed by prefix; each wait (a store
 * key, a connection) lasts at most timeout_ms. AA_ETIMEOUT when a rank did
 * not come (err->rank), AA_ECONN/AA_EINVAL for sockets and addresses. */
int aa__gx_connect(aa__gx_t **out, const aa_comm_store_t *store, const char *prefix, const char *address,
                   int rank, int world, int timeout_ms, aa__gx_err_t *err);
/* Posts every op, then waits for each in order, each wait at most
 * timeout_ms. 0; AA_ETIMEOUT (gloo then closes every connection);
 * AA_ECANCELLED after aa__gx_abort or when a peer's connection closed
 * (err->op names the transfer). On any failure the context's connections
 * are closed, so the peers waiting on this rank fail too. */
int aa__gx_exchange(aa__gx_t *g, const aa__gx_op_t *ops, int n, int timeout_ms, aa__gx_err_t *err);
/* Async-signal-safe (an atomic store and a write to a pipe): a watcher
 * thread then interrupts the pending waits and closes the connections. */
void aa__gx_abort(aa__gx_t *g);
/* Closes the connections, stops the watcher and frees g; never waits for
 * peers. NULL is a no-op. */
void aa__gx_free(aa__gx_t *g);

#endif
