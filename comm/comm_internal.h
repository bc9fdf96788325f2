/* Inside the process groups of comm.h: the handle comm.c dispatches from and
 * the three backends behind it. Only comm/comm*.c include this.
 *
 * comm.c checks the arguments (ranges, NULL buffers, sizes that overflow)
 * and the group's failed state, then calls the backend. comm_shm.c is the
 * shared-memory group; comm_nccl.c drives NCCL and keeps a shm group of the
 * same ranks beside it, which bootstraps NCCL and carries the abort word and
 * the liveness of the ranks (so a dead rank or aa_comm_abort stops an NCCL
 * wait too); comm_self.c is the group of one, which has neither. The aa__
 * names are internal; they are not part of the API. */
#ifndef AA_COMM_INTERNAL_H
#define AA_COMM_INTERNAL_H

#include "comm.h"

typedef struct aa__shm aa__shm_t;
typedef struct aa__nccl aa__nccl_t;
typedef struct aa__self aa__self_t;

/* Exactly one of shm and self is set: self for a group of one made by
 * aa_comm_self (or split from one), shm otherwise. */
struct aa_comm {
  int rank, world;
  aa__shm_t *shm;   /* owned: the group in shared memory (nccl: its bootstrap and liveness) */
  aa__nccl_t *nccl; /* owned: NULL for the shm and self backends */
  aa__self_t *self; /* one reference to the family of a group of one */
};

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
int aa__shm_barrier(aa__shm_t *s, const char *what);
void aa__shm_destroy(aa__shm_t *s);

/* --- comm_nccl.c (stubs answering AA_EUNSUPPORTED when built without NCCL) ----------- */

/* 0 if this build has the nccl backend, else AA_EUNSUPPORTED with the reason. */
int aa__nccl_supported(void);
/* Builds c->nccl over the already joined c->shm: rank 0 makes the unique id
 * and broadcasts it through the shm group, all call ncclCommInitRank on the
 * current CUDA device. */
int aa__nccl_init(aa_comm_t *c);
/* child->shm is the split shm group; builds child->nccl from parent's. */
int aa__nccl_split(aa_comm_t *parent, int color, int key, aa_comm_t *child);
int aa__nccl_all_reduce(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                        aa_comm_op_t op);
int aa__nccl_reduce_scatter(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                            aa_comm_op_t op);
int aa__nccl_all_gather(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt);
int aa__nccl_broadcast(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt, int root);
int aa__nccl_send(aa_comm_t *c, const void *buf, size_t count, aa_dtype_t dt, int peer);
int aa__nccl_recv(aa_comm_t *c, void *buf, size_t count, aa_dtype_t dt, int peer);
int aa__nccl_barrier(aa_comm_t *c);
/* Frees c->nccl (ncclCommAbort if the group failed, else destroy). */
void aa__nccl_destroy(aa_comm_t *c);

#endif
