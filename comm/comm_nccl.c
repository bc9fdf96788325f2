/* The nccl backend of comm.h: CUDA ranks on one host ("nccl:") or on many
 * ("nccl-hosts:").
 *
 * The ranks first form a host group under the same name, the carrier: a
 * shm group (comm_shm.c) on one host, a gloo group (comm_gloo.c, met
 * through the caller's store, as PyTorch meets NCCL ranks through its
 * TCPStore) across hosts. Rank 0 makes the NCCL unique id and broadcasts
 * it over the carrier, then every rank calls ncclCommInitRank on its
 * current CUDA device (the runner chose it with cudaSetDevice). The carrier
 * stays beside the NCCL communicator: its failed word is how aa_comm_abort
 * (which must be async-signal-safe, so cannot call NCCL) reaches a rank
 * that waits on the GPU, and on one host its rank mutexes tell a dead rank.
 * Across hosts a dead or failed peer is seen by NCCL itself (its
 * connections close: ncclRemoteError / ncclSystemError), by the planner,
 * which aborts the gang's other ranks when one ends badly or its host goes
 * silent, or at the group's deadline.
 *
 * The communicators are non-blocking (config.blocking = 0), so no NCCL call
 * blocks: each call is followed by a poll of ncclCommGetAsyncError and, for
 * collectives, cudaStreamQuery on our stream, with short sleeps, the group's
 * deadline and a look at the carrier every 100 ms. A deadline, an abort or a
 * dead peer ends in ncclCommAbort instead of a hang. Buffers are device
 * memory. Every call returns when its result is in the receive buffer.
 *
 * Unverified on a GPU (see docs/comm.md): this file is compiled with
 * -Wall -Wextra -Werror but has not run. */
#include "comm_internal.h"

#if defined(AA_HAVE_CUDA) && defined(AA_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROBE_MS 100
#define SPIN_S 50e-6 /* poll without sleeping this long: most collectives end within it */
#define MAX_SLEEP_US 1000

struct aa__nccl {
  ncclComm_t comm;     /* NULL once aborted */
  cudaStream_t stream; /* blocking, but not ordered after the backend's own stream: callers sync it first (comm.h) */
  float *scratch;      /* device: the barrier's one element */
  int broken;          /* aborted: every later call fails */
};

/* --- the carrier: c->gloo across hosts, else c->shm --------------------------------------- */

static int carrier_timeout_ms(const aa_comm_t *c) {
  return c->gloo ? aa__gloo_timeout_ms(c->gloo) : aa__shm_timeout_ms(c->shm);
}

/* 0 while the family is usable; probe_peers: shm also looks for dead ranks
 * (a gloo carrier has no such probe: see the top of the file). */
static int carrier_check(aa_comm_t *c, const char *what, int probe_peers) {
  return c->gloo ? aa__gloo_check(c->gloo, what) : aa__shm_check(c->shm, what, probe_peers);
}

static void carrier_abort(aa_comm_t *c, int cause) {
  if (c->gloo)
    aa__gloo_abort(c->gloo, cause);
  else
    aa__shm_abort(c->shm, cause);
}

/* buf(bytes) of rank 0 to every rank, in place. */
static int carrier_broadcast0(aa_comm_t *c, void *buf, size_t bytes, const char *what) {
  return c->gloo ? aa__gloo_broadcast(c->gloo, buf, buf, bytes, 0)
                 : aa__shm_broadcast(c->shm, buf, buf, bytes, 0, what);
}

/* Gives the communicator up: ncclCommAbort, and the carrier's failed word
 * so the family's other groups stop too; on one host that word is shared
 * by every rank, across hosts the peers learn it from NCCL (the aborted
 * communicator's connections close) or the planner. */
static void nccl_abort(aa_comm_t *c, int cause) {
  aa__nccl_t *n = c->nccl;
  if (n && n->comm) ncclCommAbort(n->comm);
  if (n) {
    n->comm = NULL;
    n->broken = 1;
  }
  carrier_abort(c, cause);
}

static int nccl_code(ncclResult_t r) {
  switch (r) {
  case ncclInvalidArgument:
  case ncclInvalidUsage: return AA_EINVAL;
  case ncclRemoteError:
  case ncclSystemError: return AA_ECONN;
  default: return AA_EINTERNAL;
  }
}

/* Translates an NCCL failure at file:line, like nccl-tests' NCCLCHECK, and
 * aborts the group: after an NCCL error the communicator is unusable. */
static int nccl_fail(aa_comm_t *c, ncclComm_t comm, const char *what, const char *call, ncclResult_t r,
                     const char *file, int line) {
  const char *last = comm ? ncclGetLastError(comm) : NULL;
  int code = aa_error(nccl_code(r), "%s: rank %d of %d: %s failed: %s%s%s (%s:%d)", what, c->rank, c->world,
                      call, ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "", file, line);
  nccl_abort(c, AA__ABORT_ERROR);
  return code;
}

static int cuda_fail(aa_comm_t *c, const char *what, const char *call, cudaError_t e, const char *file,
                     int line) {
  int code = aa_error(e == cudaErrorMemoryAllocation ? AA_EOOM : AA_EINTERNAL,
                      "%s: rank %d of %d: %s failed: %s (%s:%d)", what, c->rank, c->world, call,
                      cudaGetErrorString(e), file, line);
  nccl_abort(c, AA__ABORT_ERROR);
  return code;
}

#define NCCL_TRY(c, comm, what, call)                                                                        \
  do {                                                                                                       \
    ncclResult_t r_ = (call);                                                                                \
    if (r_ != ncclSuccess && r_ != ncclInProgress)                                                           \
      return nccl_fail(c, comm, what, #call, r_, __FILE__, __LINE__);                                        \
  } while (0)

#define CUDA_TRY(c, what, call)                                                                              \
  do {                                                                                                       \
    cudaError_t e_ = (call);                                                                                 \
    if (e_ != cudaSuccess) return cuda_fail(c, what, #call, e_, __FILE__, __LINE__);                         \
  } while (0)

static void sleep_us(long us) {
  struct timespec ts = {0, us * 1000L};
  nanosleep(&ts, NULL);
}

/* Polls until comm is no longer in progress and, with stream, our stream
 * has drained; the carrier is looked at every PROBE_MS and the deadline is
 * the group's timeout. */
static int nccl_wait(aa_comm_t *c, ncclComm_t comm, cudaStream_t stream, const char *what) {
  int timeout_ms = carrier_timeout_ms(c);
  double t0 = aa_now(), deadline = t0 + timeout_ms * 1e-3, next_probe = t0 + PROBE_MS * 1e-3;
  long nap = 10;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    NCCL_TRY(c, comm, what, ncclCommGetAsyncError(comm, &st));
    if (st != ncclSuccess && st != ncclInProgress)
      return nccl_fail(c, comm, what, "the communicator", st, __FILE__, __LINE__);
    if (st == ncclSuccess) {
      if (!stream) return 0;
      cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return 0;
      if (e != cudaErrorNotReady) return cuda_fail(c, what, "cudaStreamQuery", e, __FILE__, __LINE__);
    }
    double t = aa_now();
    if (t >= next_probe) {
      int rc = carrier_check(c, what, 1);
      if (rc) {
        nccl_abort(c, AA__ABORT_ERROR);
        return rc;
      }
      next_probe = t + PROBE_MS * 1e-3;
    }
    if (t >= deadline) {
      nccl_abort(c, AA__ABORT_TIMEOUT);
      return aa_error(AA_ETIMEOUT,
                      "%s: rank %d of %d: did not complete within %d ms (a peer did not take part); "
                      "the communicator was aborted",
                      what, c->rank, c->world, timeout_ms);
    }
    if (t - t0 >= SPIN_S) {
      sleep_us(nap);
      nap = nap * 2 < MAX_SLEEP_US ? nap * 2 : MAX_SLEEP_US;
    }
  }
}

static ncclDataType_t nccl_type(aa_dtype_t dt) {
  return dt == AA_BF16 ? ncclBfloat16 : dt == AA_F16 ? ncclFloat16 : ncclFloat32;
}

/* The usable communicator, or AA_ECANCELLED. */
static int usable(aa_comm_t *c, const char *what) {
  if (c->nccl->broken || !c->nccl->comm)
    return aa_error(AA_ECANCELLED, "%s: rank %d of %d: the NCCL communicator was aborted", what, c->rank,
                    c->world);
  return 0;
}

static int nccl_new(aa_comm_t *c, const char *what) {
  c->nccl = calloc(1, sizeof *c->nccl);
  if (!c->nccl) return aa_error(AA_ENOMEM, "%s: out of memory", what);
  CUDA_TRY(c, what, cudaStreamCreate(&c->nccl->stream));
  CUDA_TRY(c, what, cudaMalloc((void **)&c->nccl->scratch, sizeof(float)));
  CUDA_TRY(c, what, cudaMemset(c->nccl->scratch, 0, sizeof(float)));
  return 0;
}

int aa__nccl_supported(void) { return 0; }

int aa__nccl_init(aa_comm_t *c) {
  const char *what = "aa_comm_init";
  struct {
    int32_t rc;
    ncclUniqueId id;
  } boot;
  memset(&boot, 0, sizeof boot);
  if (c->rank == 0) boot.rc = (int32_t)ncclGetUniqueId(&boot.id);
  int rc = carrier_broadcast0(c, &boot, sizeof boot, what);
  if (rc) return rc;
  if (boot.rc != ncclSuccess)
    return aa_error(nccl_code((ncclResult_t)boot.rc),
                    "%s: rank %d of %d: rank 0 could not make the NCCL unique id: %s", what, c->rank,
                    c->world, ncclGetErrorString((ncclResult_t)boot.rc));
  if ((rc = nccl_new(c, what))) return rc;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  NCCL_TRY(c, NULL, what, ncclCommInitRankConfig(&c->nccl->comm, c->world, boot.id, c->rank, &cfg));
  return nccl_wait(c, c->nccl->comm, NULL, what);
}

int aa__nccl_split(aa_comm_t *parent, int color, int key, aa_comm_t *child) {
  const char *what = "aa_comm_split";
  int rc = usable(parent, what);
  if (rc) return rc;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nc = NULL;
  ncclComm_t pc = parent->nccl->comm;
  NCCL_TRY(parent, pc, what, ncclCommSplit(pc, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &cfg));
  if ((rc = nccl_wait(parent, pc, NULL, what))) {
    /* Non-blocking: nc is already a handle, owned by nobody else yet. */
    if (nc) ncclCommAbort(nc);
    return rc;
  }
  if (!child->shm && !child->gloo) {
    if (nc) ncclCommDestroy(nc);
    return 0;
  }
  if (!nc)
    return aa_error(AA_EINTERNAL, "%s: rank %d of %d: ncclCommSplit gave no communicator", what, parent->rank,
                    parent->world);
  child->rank = child->gloo ? aa__gloo_rank(child->gloo) : aa__shm_rank(child->shm);
  child->world = child->gloo ? aa__gloo_world(child->gloo) : aa__shm_world(child->shm);
  if ((rc = nccl_new(child, what))) {
    ncclCommAbort(nc);
    return rc;
  }
  child->nccl->comm = nc;
  return nccl_wait(child, nc, NULL, what);
}

int aa__nccl_all_reduce(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                        aa_comm_op_t op) {
  int rc = usable(c, "all_reduce");
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  NCCL_TRY(c, n->comm, "all_reduce",
           ncclAllReduce(send, recv, count, nccl_type(dt), op == AA_COMM_AVG ? ncclAvg : ncclSum, n->comm,
                         n->stream));
  return nccl_wait(c, n->comm, n->stream, "all_reduce");
}

int aa__nccl_reduce_scatter(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                            aa_comm_op_t op) {
  int rc = usable(c, "reduce_scatter");
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  NCCL_TRY(c, n->comm, "reduce_scatter",
           ncclReduceScatter(send, recv, count, nccl_type(dt), op == AA_COMM_AVG ? ncclAvg : ncclSum, n->comm,
                             n->stream));
  return nccl_wait(c, n->comm, n->stream, "reduce_scatter");
}

int aa__nccl_all_gather(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt) {
  int rc = usable(c, "all_gather");
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  NCCL_TRY(c, n->comm, "all_gather", ncclAllGather(send, recv, count, nccl_type(dt), n->comm, n->stream));
  return nccl_wait(c, n->comm, n->stream, "all_gather");
}

int aa__nccl_broadcast(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt, int root) {
  int rc = usable(c, "broadcast");
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  NCCL_TRY(c, n->comm, "broadcast",
           ncclBroadcast(send, recv, count, nccl_type(dt), root, n->comm, n->stream));
  return nccl_wait(c, n->comm, n->stream, "broadcast");
}

int aa__nccl_send(aa_comm_t *c, const void *buf, size_t count, aa_dtype_t dt, int peer) {
  int rc = usable(c, "send");
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  NCCL_TRY(c, n->comm, "send", ncclSend(buf, count, nccl_type(dt), peer, n->comm, n->stream));
  return nccl_wait(c, n->comm, n->stream, "send");
}

int aa__nccl_recv(aa_comm_t *c, void *buf, size_t count, aa_dtype_t dt, int peer) {
  int rc = usable(c, "recv");
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  NCCL_TRY(c, n->comm, "recv", ncclRecv(buf, count, nccl_type(dt), peer, n->comm, n->stream));
  return nccl_wait(c, n->comm, n->stream, "recv");
}

/* One NCCL group of a ncclSend and a ncclRecv per peer with a non-empty
 * message, the own rank included (NCCL copies that pair itself), as
 * nccl-tests' alltoall and PyTorch's all_to_all_single do. The group is
 * always ended, even after a failed call inside it, so this thread's NCCL
 * group depth stays balanced; the first failure is reported. */
int aa__nccl_all_to_all_v(aa_comm_t *c, const void *send, const size_t *send_counts,
                          const size_t *send_offsets, void *recv, const size_t *recv_counts,
                          const size_t *recv_offsets, aa_dtype_t dt) {
  const char *what = "all_to_all_v";
  int rc = usable(c, what);
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  size_t e = aa_dtype_size(dt);
  ncclDataType_t t = nccl_type(dt);
  ncclResult_t first = ncclSuccess;
  const char *call = "";
  NCCL_TRY(c, n->comm, what, ncclGroupStart());
  for (int p = 0; p < c->world && first == ncclSuccess; p++) {
    ncclResult_t r = ncclSuccess;
    if (send_counts[p] &&
        (r = ncclSend((const char *)send + send_offsets[p] * e, send_counts[p], t, p, n->comm, n->stream)) !=
            ncclSuccess &&
        r != ncclInProgress) {
      first = r;
      call = "ncclSend";
    } else if (recv_counts[p] &&
               (r = ncclRecv((char *)recv + recv_offsets[p] * e, recv_counts[p], t, p, n->comm, n->stream)) !=
                   ncclSuccess &&
               r != ncclInProgress) {
      first = r;
      call = "ncclRecv";
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (first != ncclSuccess) return nccl_fail(c, n->comm, what, call, first, __FILE__, __LINE__);
  if (end != ncclSuccess && end != ncclInProgress)
    return nccl_fail(c, n->comm, what, "ncclGroupEnd()", end, __FILE__, __LINE__);
  return nccl_wait(c, n->comm, n->stream, what);
}

int aa__nccl_barrier(aa_comm_t *c) {
  int rc = usable(c, "barrier");
  if (rc) return rc;
  aa__nccl_t *n = c->nccl;
  NCCL_TRY(c, n->comm, "barrier",
           ncclAllReduce(n->scratch, n->scratch, 1, ncclFloat32, ncclSum, n->comm, n->stream));
  return nccl_wait(c, n->comm, n->stream, "barrier");
}

/* A healthy communicator is finalized (flushed) and destroyed; a failed one,
 * or one whose finalize does not complete, is aborted, which never waits
 * for peers. */
void aa__nccl_destroy(aa_comm_t *c) {
  aa__nccl_t *n = c->nccl;
  if (!n) return;
  if (n->comm) {
    if (n->broken || carrier_check(c, "aa_comm_destroy", 0)) {
      ncclCommAbort(n->comm);
    } else {
      ncclResult_t r = ncclCommFinalize(n->comm);
      if ((r == ncclSuccess || r == ncclInProgress) && !nccl_wait(c, n->comm, NULL, "aa_comm_destroy"))
        ncclCommDestroy(n->comm);
      else if (n->comm)
        ncclCommAbort(n->comm);
    }
  }
  if (n->scratch) cudaFree(n->scratch);
  if (n->stream) cudaStreamDestroy(n->stream);
  free(n);
  c->nccl = NULL;
}

#else /* built without CUDA or NCCL */

static int unsupported(void) {
  return aa_error(AA_EUNSUPPORTED, "the nccl backend: built without CUDA/NCCL");
}

int aa__nccl_supported(void) { return unsupported(); }
int aa__nccl_init(aa_comm_t *c) {
  (void)c;
  return unsupported();
}
int aa__nccl_split(aa_comm_t *parent, int color, int key, aa_comm_t *child) {
  (void)parent, (void)color, (void)key, (void)child;
  return unsupported();
}
int aa__nccl_all_reduce(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                        aa_comm_op_t op) {
  (void)c, (void)send, (void)recv, (void)count, (void)dt, (void)op;
  return unsupported();
}
int aa__nccl_reduce_scatter(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt,
                            aa_comm_op_t op) {
  (void)c, (void)send, (void)recv, (void)count, (void)dt, (void)op;
  return unsupported();
}
int aa__nccl_all_gather(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt) {
  (void)c, (void)send, (void)recv, (void)count, (void)dt;
  return unsupported();
}
int aa__nccl_broadcast(aa_comm_t *c, const void *send, void *recv, size_t count, aa_dtype_t dt, int root) {
  (void)c, (void)send, (void)recv, (void)count, (void)dt, (void)root;
  return unsupported();
}
int aa__nccl_send(aa_comm_t *c, const void *buf, size_t count, aa_dtype_t dt, int peer) {
  (void)c, (void)buf, (void)count, (void)dt, (void)peer;
  return unsupported();
}
int aa__nccl_recv(aa_comm_t *c, void *buf, size_t count, aa_dtype_t dt, int peer) {
  (void)c, (void)buf, (void)count, (void)dt, (void)peer;
  return unsupported();
}
int aa__nccl_all_to_all_v(aa_comm_t *c, const void *send, const size_t *send_counts,
                          const size_t *send_offsets, void *recv, const size_t *recv_counts,
                          const size_t *recv_offsets, aa_dtype_t dt) {
  (void)c, (void)send, (void)send_counts, (void)send_offsets, (void)recv, (void)recv_counts,
      (void)recv_offsets, (void)dt;
  return unsupported();
}
int aa__nccl_barrier(aa_comm_t *c) {
  (void)c;
  return unsupported();
}
void aa__nccl_destroy(aa_comm_t *c) { (void)c; }

#endif
