/* Process groups: the collectives that data, tensor, pipeline and expert
 * parallelism and ZeRO need, with one NCCL-shaped API over four backends:
 *
 *   shm   CPU ranks on one host. The group meets in a POSIX shared-memory
 *         segment named by the rendezvous; ranks wait on process-shared
 *         futexes: they sleep rather than spin (a waiter looks for up to
 *         200 us, yielding the CPU between looks, before it sleeps), so 4
 *         ranks on 2 cores still make progress.
 *   nccl  CUDA devices (built when the CUDA toolkit and NCCL are found).
 *         "nccl:": ranks on one host meet in a shm segment as above, rank
 *         0 makes the NCCL unique id and hands it to the others there,
 *         then all call ncclCommInitRank. "nccl-hosts:": ranks on any
 *         hosts meet in a gloo group (through opts->store and
 *         opts->address, as below; on an executor the store is the
 *         planner's relay), which carries the id instead. The group that
 *         carried the id stays beside NCCL for aborts (comm_nccl.c).
 *   gloo  CPU ranks on any hosts (Debian's libgloo, the library PyTorch
 *         uses for CPU collectives; TCP). Each rank listens on
 *         opts->address; the ranks find each other through opts->store
 *         under keys prefixed by the rendezvous name and connect in a full
 *         mesh, which every group split from the family reuses. Gloo only
 *         moves bytes: reductions are summed here in rank order, with
 *         shm's code, so the results are shm's bits. AA_EUNSUPPORTED in a
 *         build without libgloo. The first gloo group of a process sets
 *         SIGPIPE to SIG_IGN if it was SIG_DFL (gloo writes with writev,
 *         so a write to a dead peer would kill the process).
 *   self   the group of one a single process trains over (aa_comm_self):
 *         every collective is the identity, a copy or nothing, and never
 *         waits; no rendezvous. In-place calls serve any memory (nothing is
 *         touched); out-of-place ones copy with memcpy, so host memory.
 *
 * The rendezvous text (common/rendezvous.h: "shm:/aa-<tag>-<nonce>",
 * "nccl:/aa-<tag>-<nonce>", "gloo:/aa-<tag>-<nonce>" or
 * "nccl-hosts:/aa-<tag>-<nonce>") is made by the planner and travels to
 * every rank in its job message. The engine knows nothing of sockets: a runner builds
 * the group from the text alone.
 *
 * Semantics follow NCCL: every rank of a group calls the same collectives in
 * the same order with the same counts and dtype. Buffers are host memory for
 * shm and device memory for nccl (the device work that produces a send
 * buffer must be finished, e.g. synchronised, before the call; the result is
 * complete when the call returns). send and recv may be the same pointer
 * (in place) for all_reduce and broadcast, for all_gather when send is
 * recv's own slice (recv + rank * count) and for reduce_scatter when recv is
 * send's own slice (send + rank * count), as NCCL allows. A count of 0 is a
 * no-op. Every call blocks until its result is in recv.
 *
 * Families: the group made by aa_comm_init and every group split from it,
 * directly or not, form one family. They share one shm segment, so an
 * abort, a timeout or a dead rank in any of them fails all of them (a
 * training job with a broken group is broken). A process uses a family
 * from the thread that called aa_comm_init, or from threads that take turns
 * with it; that thread must outlive the family's last aa_comm_destroy
 * (shm: the rank's liveness is a robust mutex that thread holds). A gloo
 * family runs two threads of its own (gloo's socket loop and the abort
 * watcher) until its last aa_comm_destroy.
 *
 * Results are deterministic and identical on every rank: a sum is taken in
 * rank order 0..world-1 in fp32 (16-bit inputs are widened, summed in fp32
 * and rounded once), whatever the arrival order.
 *
 * Failure: a call that waits longer than the group's timeout for its peers
 * (opts->timeout_ms, measured per wait, so a long transfer that makes
 * progress does not time out) returns AA_ETIMEOUT and fails the family;
 * once any rank has called aa_comm_abort, timed out, or died while a peer
 * waited for it (noticed within about 100 ms, also while it is an unreaped
 * zombie), every pending and later call on every rank of the family returns
 * AA_ECANCELLED within about 100 ms. The group is then unusable; destroy
 * it. Errors carry an aa_error() message naming the collective, the rank
 * and the peer(s) that did not arrive or the rank that died. Details:
 * docs/comm.md.
 *
 * gloo differs: ranks learn of a failure through closed connections. A
 * rank that fails (timeout, abort, a peer's connection closed) closes all
 * of its connections, so every rank waiting on it fails in turn
 * (AA_ECANCELLED "the connection to rank R closed: it died, failed or
 * aborted": a peer cannot tell which); a dead process's sockets close at
 * once (measured 3-25 ms to cancel every other rank). A host that vanishes
 * without closing its sockets (power loss, partition) is noticed only at
 * the timeout. A timed-out rank names the peer its own wait was on, which
 * may itself be waiting for the missing rank. send blocks until the
 * receiver has posted the matching recv (no buffering). Mismatched counts
 * are not named as such: the transfers do not match and time out. */
#ifndef AA_COMM_H
#define AA_COMM_H

#include <stddef.h>

#include "../common/aa.h"
#include "../common/rendezvous.h"

typedef struct aa_comm aa_comm_t;

typedef enum { AA_COMM_SUM = 0, AA_COMM_AVG = 1 } aa_comm_op_t;

/* A key-value store the ranks of a gloo group meet through: each rank sets
 * its listening address under a key and reads its peers'. The planner's
 * relay (an executor's runner asks its parent, which asks the planner) and
 * a private directory (aa_comm_dir_store, for one host and the tests) are
 * the two the project uses. Keys are at most AA_COMM_STORE_KEY_MAX bytes of
 * [A-Za-z0-9_./-]; values at most AA_COMM_STORE_VALUE_MAX bytes. set stores
 * (a key is set once); get waits up to timeout_ms for the key and returns
 * its value in *value (malloc'd, the caller frees) and *len. Both return 0
 * or a negative aa error with the message set (AA_ETIMEOUT when the key
 * never came). Called only from the thread that joins the group. */
#define AA_COMM_STORE_KEY_MAX 200
#define AA_COMM_STORE_VALUE_MAX 65536
typedef struct aa_comm_store {
  void *ctx;
  int (*set)(void *ctx, const char *key, const void *value, size_t len);
  int (*get)(void *ctx, const char *key, int timeout_ms, void **value, size_t *len);
} aa_comm_store_t;

/* A store in the private directory dir (one host: the tests, and local
 * ranks of `autoaccel train --backend gloo`): a key is a file there,
 * written to a temporary name (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600)
 * and renamed into place without replacing, so a reader sees a whole value
 * and a key is set once; get polls (0.5 ms, doubling to 20 ms) until the
 * file appears or the timeout. dir is made by the caller, who removes it
 * with its files afterwards; it must be owned by this user and not group-
 * or world-writable (AA_EPERM otherwise), so no other user can plant or
 * read a key. Ranks in several processes each open their own store on the
 * same directory. *out is set on success and freed with
 * aa_comm_dir_store_free (NULL or a freed store is a no-op). */
int aa_comm_dir_store(aa_comm_store_t *out, const char *dir);
void aa_comm_dir_store_free(aa_comm_store_t *s);
/* Removes the store directory dir and the keys the ranks left in it
 * (entries of the directory only, never following a link); for the caller
 * that made it, once every rank has joined or failed. */
void aa_comm_dir_store_remove(const char *dir);

typedef struct aa_comm_opts {
  int timeout_ms; /* longest wait for peers (join, each collective); 0 = 30000 */
  /* gloo and nccl-hosts only: where the ranks meet (required for a "gloo:"
   * or "nccl-hosts:" rendezvous),
   * and the numeric IP address this rank listens on, which its peers dial
   * (NULL = "127.0.0.1"; ranks on several hosts need an address the
   * others can reach). Borrowed for the duration of aa_comm_init. */
  const aa_comm_store_t *store;
  const char *address;
} aa_comm_opts_t;

/* Joins the group described by rendezvous as `rank` of `world`. Blocks until
 * every rank has joined or the timeout passes (AA_ETIMEOUT naming the ranks
 * that did not come). Ranks may arrive in any order: rank 0 creates the shm
 * segment, the others retry opening it until the timeout; the segment is
 * unlinked once all have joined (or by every rank whose join failed), so
 * nothing is left in /dev/shm even if every rank is killed later. opts may
 * be NULL. AA_EUNSUPPORTED for "nccl:" and "nccl-hosts:" in a build
 * without CUDA/NCCL;
 * AA_EINVAL for a bad rendezvous, rank or world (shm: at most 256 ranks) or
 * a segment made for another world. *out is transferred (aa_comm_destroy)
 * and set only on success. gloo and nccl-hosts: AA_EINVAL for a missing store (or
 * callback) or an address that is not a numeric IP of this host;
 * AA_ETIMEOUT "rank R did not join" when a peer's key never came. */
int aa_comm_init(aa_comm_t **out, const char *rendezvous, int rank, int world, const aa_comm_opts_t *opts);

/* A group of one (rank 0 of 1, backend "self"), made without a rendezvous:
 * a single process is a group of one, so the engine runs the same code over
 * it as over a gang. Its splits are groups of one of the same family;
 * aa_comm_abort fails the family as for any group. *out is transferred
 * (aa_comm_destroy) and set only on success (AA_ENOMEM otherwise). */
int aa_comm_self(aa_comm_t **out);

/* A sub-group of the ranks of parent with the same color, ordered by key
 * then parent rank (as ncclCommSplit / MPI_Comm_split). Every rank of the
 * parent must call it; color < 0 means "in no group" and gives *out = NULL.
 * Data/tensor/pipeline groups are built this way from the strategy's rank
 * order. The sub-group belongs to parent's family and has its timeout; it
 * may outlive parent. shm: a family holds at most 2 * world + 2 live groups
 * (AA_EUNSUPPORTED past that); a destroyed group's room is reused. gloo:
 * no limit, and no new connection (one all-gather over parent). *out is
 * transferred (aa_comm_destroy) and set only on success. */
int aa_comm_split(aa_comm_t *parent, int color, int key, aa_comm_t **out);

int aa_comm_rank(const aa_comm_t *c);
int aa_comm_world(const aa_comm_t *c);
const char *aa_comm_backend(const aa_comm_t *c); /* "shm", "gloo", "nccl", "self" */

/* recv(count) = op over ranks of send(count). */
int aa_comm_all_reduce(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype, aa_comm_op_t op);
/* recv(count) = rank's slice [rank*count, (rank+1)*count) of op over ranks of
 * send(world*count). */
int aa_comm_reduce_scatter(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype,
                           aa_comm_op_t op);
/* recv(world*count): slice r = send(count) of rank r. */
int aa_comm_all_gather(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype);
/* recv(count) = send(count) of root (send is read on root only). */
int aa_comm_broadcast(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dtype, int root);
/* Point to point (pipeline stages): matched send/recv pairs with the same
 * count and dtype, delivered in the order they were sent. send may return
 * before the peer has received (shm buffers up to two chunks of the
 * message), but in general it blocks until the peer receives: two ranks
 * that both send a large message to each other before receiving deadlock
 * (and time out), as with NCCL outside a group. peer != own rank. */
int aa_comm_send(aa_comm_t *c, const void *buf, size_t count, aa_dtype_t dtype, int peer);
int aa_comm_recv(aa_comm_t *c, void *buf, size_t count, aa_dtype_t dtype, int peer);
/* A ring step (context parallelism's ring attention): send(count) to rank
 * `to` while receiving recv(count) from rank `from`, without the deadlock
 * that both sending first would risk (even ranks send first, odd ones
 * receive first). send and recv must not overlap. Every rank of the ring
 * calls it in the same step. A group of one moves nothing. */
int aa_comm_sendrecv(aa_comm_t *c, const void *send, int to, void *recv, int from, size_t count,
                     aa_dtype_t dtype);
/* All-to-all with per-peer sizes (MPI_Alltoallv; expert parallelism's token
 * dispatch and combine). For every rank j of the group, in elements of
 * dtype: send(send_offsets[j], send_counts[j]) goes to rank j, and
 * recv(recv_offsets[i], recv_counts[i]) is filled with what rank i sent to
 * this rank. Every array has one entry per rank (aa_comm_world); counts may
 * be 0, and the entry for the own rank is a local copy (send_counts[rank]
 * must equal recv_counts[rank]). recv_counts[i] must equal rank i's
 * send_counts[this rank]: a rank learns them from its peers first with
 * aa_comm_all_to_all_counts (or knows them, as in the combine step, whose
 * counts are the dispatch's swapped). Refused with AA_EINVAL and nothing
 * moved: NULL arrays, a NULL buffer with a count, an element offset + count
 * that overflows, recv ranges that overlap each other, send and recv spans
 * that overlap (there is no in-place form), a self count that disagrees.
 * A peer's count that disagrees with recv_counts: shm names it
 * (AA_EINVAL, the family fails); gloo and nccl cannot see it, and the
 * transfers time out (see the top of this file). Buffers and counts are
 * borrowed for the call. */
int aa_comm_all_to_all_v(aa_comm_t *c, const void *send, const size_t *send_counts,
                         const size_t *send_offsets, void *recv, const size_t *recv_counts,
                         const size_t *recv_offsets, aa_dtype_t dtype);
/* The counts exchange before an all_to_all_v: recv_counts[i] = rank i's
 * send_counts[this rank], for every rank i (an all-to-all of one size_t per
 * peer). Both arrays are host memory of one entry per rank, on every
 * backend (nccl exchanges them over its host carrier, not the GPU), and
 * must not overlap. */
int aa_comm_all_to_all_counts(aa_comm_t *c, const size_t *send_counts, size_t *recv_counts);
int aa_comm_barrier(aa_comm_t *c);

/* Marks the group's family failed for every rank (safe from a signal
 * handler and from another thread: an atomic store and futex wakes; gloo:
 * an atomic store and a write to a pipe, whose watcher thread interrupts
 * the pending waits and closes the connections): their pending and later
 * calls return AA_ECANCELLED. */
void aa_comm_abort(aa_comm_t *c);

/* Leaves the group and frees c; never waits for peers, so it returns even
 * when they are dead. The last handle of a family in a process leaves the
 * family (nccl: ncclCommAbort if the group failed, else finalize and
 * destroy). NULL is a no-op. */
void aa_comm_destroy(aa_comm_t *c);

#endif
