/* Expert parallelism's token dispatcher (issue 33; Megatron's
 * expert_model_parallel_size with its all-to-all dispatcher): the ranks of
 * an expert group (engine/mesh.h m->expert, ep ranks) each hold E/ep of a
 * MoE layer's E experts, rank q the slice [q E/ep, (q + 1) E/ep), and each
 * routes its own tokens over all E experts (kernels/cpu/cpu_moe.h
 * aa_cpu_moe_route, capacity included: a rank drops what one process
 * routing the same micro-batch drops). The dispatcher then moves every
 * permuted row to the rank that holds its expert and the outputs back:
 *
 *   plan      the per-expert row counts exchanged (one aa_comm_all_to_all_v)
 *   dispatch  xp (rows, C) in the route's expert order -> xl (local rows, C),
 *             sorted by local expert, then source rank, then the source's
 *             order (its tokens' order), so each local expert's rows are
 *             contiguous for one grouped GEMM (aa_cpu_moe_experts_*);
 *   combine   yl (local rows, C) -> yp (rows, C), dispatch's inverse.
 *
 * Both moves are permutations, each the other's transpose, so the backward
 * uses the same two: dyl = dispatch(dyp), then dxp = combine(dxl). Every
 * call is a collective over the group: its ranks call plan, dispatch and
 * combine in the same order. plan is one all_to_all_v of the El counts a
 * peer (each as two exact floats, its low and high 16 bits); each move is
 * one all_to_all_v of every local expert's rows, which arrive grouped by
 * source rank (a peer's rows for local experts 0..El-1 back to back) and a
 * local copy through the caller's stage puts them in the expert-major
 * order above (Megatron's sort_chunks_by_idxs). At ep 1 the moves are
 * copies (the group of one sends to itself).
 *
 * Buffers: the caller's local-row buffers hold `room` rows, sized for the
 * expected load with a margin (strategies/sizes.h AA_MOE_EP_MARGIN), not
 * the worst case of ep N k. When a step's counts (plan) deliver more, the
 * dispatcher grows its own overflow buffer of row_floats floats a row,
 * charged to the accountant as activations, and the caller uses it for
 * that call's local rows (aa_moe_dispatch_overflow); it is kept (never
 * shrunk) so a later step as skewed allocates nothing.
 *
 * Memory: host memory, unless aa_moe_dispatch_backend names a backend
 * whose memory the caller's row buffers are (CUDA: device memory over an
 * NCCL group, whose all-to-all takes device pointers). Then the moves copy
 * rows with its rows_copy, wait for its enqueued ops (sync) before each
 * all-to-all, the counts travel through a small buffer of its memory, and
 * the overflow is allocated there. */
#ifndef AA_MOE_DISPATCH_H
#define AA_MOE_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "../comm/comm.h"
#include "../common/mem.h"
#include "../kernels/ops.h"

typedef struct aa_moe_dispatch {
  aa_comm_t *group; /* the expert group (borrowed) */
  int ep, me;       /* its ranks, this rank's place: it holds experts [me El, (me + 1) El) */
  int E, El;        /* experts of the layer, experts of this rank (E / ep) */
  int rows;         /* the rows this rank computes, after plan */
  int cap;          /* the most rows plan accepts (ep N k: every rank sending every slot here) */
  int room;         /* the rows the caller's buffers hold (aa_moe_dispatch_init) */
  int sent;         /* the rows this rank routed (the route's kept slots), after plan */
  int32_t *route;   /* (E + 1) the route's offsets (its rows by expert) */
  int32_t *counts;  /* (ep El) rows rank s routes to local expert j, at s El + j */
  int32_t *offsets; /* (El + 1) local expert j's rows [offsets[j], offsets[j + 1]) of xl */
  int32_t *src;     /* (ep El + 1) rank s's rows of local expert j at src[s El + j] in arrival order */
  size_t *scratch;  /* (4 ep) element counts and offsets of one all_to_all_v */
  float *fcounts;   /* (4 ep El) the counts exchanged, two floats each way */
  aa_mem_t *mem;    /* the accountant the overflow is charged to (borrowed; may be NULL) */
  size_t row_floats; /* floats a local row takes in the overflow */
  float *over;       /* the overflow: over_rows rows of row_floats floats, or NULL */
  int over_rows;
  int grown;      /* how many plans grew the overflow */
  const aa_ops_t *ops; /* the backend of the row buffers (aa_moe_dispatch_backend), NULL: host memory */
  float *dcounts;      /* (4 E) the counts exchanged, in that backend's memory (NULL on the host) */
  double seconds; /* time spent in the group's all-to-alls, for the caller to take and reset */
} aa_moe_dispatch_t;

/* Prepares a dispatcher over group (borrowed; must outlive it) for layers
 * of E experts: plan accepts at most cap rows (ep N k for a route of N
 * tokens and top-k: every rank sending every slot here); the caller's
 * local rows (xl, yl, ...) hold room (<= cap) rows, and more go to the
 * overflow of row_floats floats a row, charged to mem (may be NULL). The
 * group's size must divide E (else AA_EINVAL), E <= AA_MOE_MAX_EXPERTS,
 * 0 <= room <= cap <= AA_MOE_MAX_SLOTS. On failure nothing is allocated
 * and *d is zeroed. */
int aa_moe_dispatch_init(aa_moe_dispatch_t *d, aa_comm_t *group, int E, int cap, int room, size_t row_floats,
                         aa_mem_t *mem);
/* Makes ops the backend whose memory the row buffers are (the file
 * comment's "Memory"): the caller's xl, yl, xp, yp and stage, and the
 * overflow. Call after init, before the first plan. NULL or the CPU's table
 * keeps host memory. 0, or the counts buffer's allocation failure. */
int aa_moe_dispatch_backend(aa_moe_dispatch_t *d, const aa_ops_t *ops);
/* Frees the dispatcher's arrays and overflow (uncharged) and zeroes it; a
 * zeroed one is a no-op. */
void aa_moe_dispatch_free(aa_moe_dispatch_t *d);

/* The counts exchange for one routing: offsets (E + 1), a route's
 * (aa_moe_route_t offsets, its rows by expert). Sets d->rows (the rows
 * dispatch delivers: the sum over the group of the rows routed to this
 * rank's experts) and d->offsets. AA_EINVAL when the peers' counts add up
 * to more than cap rows (nothing moved; a route's kept slots never do).
 * More than room rows grow the overflow (AA_EOOM past the accountant's
 * limit, AA_ENOMEM). A collective over the group. */
int aa_moe_dispatch_plan(aa_moe_dispatch_t *d, const int32_t *offsets);
/* After plan: NULL when the caller's buffers hold d->rows, else the
 * overflow (d->rows rows of row_floats floats) the caller carves its local
 * rows from for this plan's moves. */
float *aa_moe_dispatch_overflow(const aa_moe_dispatch_t *d);

/* xl(d->rows, C) = the rows of every rank's xp(sent, C) routed to this
 * rank's experts, sorted as the file comment says; overwritten. stage
 * (d->rows, C) is scratch the rows arrive in, overlapping neither.
 * Collective. */
int aa_moe_dispatch(aa_moe_dispatch_t *d, float *xl, const float *xp, int C, float *stage);
/* yp(sent, C) = the rows of yl(d->rows, C) sent back to where dispatch
 * took them from; overwritten; stage as dispatch's. Collective. */
int aa_moe_combine(aa_moe_dispatch_t *d, float *yp, const float *yl, int C, float *stage);

#endif
