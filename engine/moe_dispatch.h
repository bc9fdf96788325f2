/* Expert parallelism's token dispatcher (issue 33; Megatron's
 * expert_model_parallel_size with its all-to-all dispatcher): the ranks of
 * an expert group (engine/mesh.h m->expert, ep ranks) each hold E/ep of a
 * MoE layer's E experts, rank q the slice [q E/ep, (q + 1) E/ep), and each
 * routes its own tokens over all E experts (kernels/cpu/cpu_moe.h
 * aa_cpu_moe_route, capacity included: a rank drops what one process
 * routing the same micro-batch drops). The dispatcher then moves every
 * permuted row to the rank that holds its expert and the outputs back:
 *
 *   plan      the per-expert row counts exchanged (aa_comm_all_to_all_counts)
 *   dispatch  xp (rows, C) in the route's expert order -> xl (local rows, C),
 *             sorted by local expert, then source rank, then the source's
 *             order (its tokens' order), so each local expert's rows are
 *             contiguous for one grouped GEMM (aa_cpu_moe_experts_*);
 *   combine   yl (local rows, C) -> yp (rows, C), dispatch's inverse.
 *
 * Both moves are permutations, each the other's transpose, so the backward
 * uses the same two: dyl = dispatch(dyp), then dxp = combine(dxl). Every
 * call is a collective over the group: its ranks call plan, dispatch and
 * combine in the same order. Each move is one all_to_all_v per local
 * expert, whose receive offsets put the rows in sorted order with no copy.
 * At ep 1 the moves are copies (the group of one sends to itself). */
#ifndef AA_MOE_DISPATCH_H
#define AA_MOE_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "../comm/comm.h"

typedef struct aa_moe_dispatch {
  aa_comm_t *group; /* the expert group (borrowed) */
  int ep, me;       /* its ranks, this rank's place: it holds experts [me El, (me + 1) El) */
  int E, El;        /* experts of the layer, experts of this rank (E / ep) */
  int rows;         /* the rows this rank computes, after plan */
  int cap;          /* the most rows the caller's buffers hold (aa_moe_dispatch_init) */
  int sent;         /* the rows this rank routed (the route's kept slots), after plan */
  int32_t *route;   /* (E + 1) the route's offsets (its rows by expert) */
  int32_t *counts;  /* (ep El) rows rank s routes to local expert j, at s El + j */
  int32_t *offsets; /* (El + 1) local expert j's rows [offsets[j], offsets[j + 1]) of xl */
  size_t *scratch;  /* (4 ep) element counts and offsets of one all_to_all_v */
} aa_moe_dispatch_t;

/* Prepares a dispatcher over group (borrowed; must outlive it) for layers
 * of E experts whose local rows (xl, yl) have room for cap rows (ep N k
 * for a route of N tokens and top-k: every rank sending every slot here):
 * the group's size must divide E (else AA_EINVAL), E <=
 * AA_MOE_MAX_EXPERTS, 0 <= cap <= AA_MOE_MAX_SLOTS. On failure nothing is
 * allocated and *d is zeroed. */
int aa_moe_dispatch_init(aa_moe_dispatch_t *d, aa_comm_t *group, int E, int cap);
/* Frees the dispatcher's arrays and zeroes it; a zeroed one is a no-op. */
void aa_moe_dispatch_free(aa_moe_dispatch_t *d);

/* The counts exchange for one routing: offsets (E + 1), a route's
 * (aa_moe_route_t offsets, its rows by expert). Sets d->rows (the rows
 * dispatch delivers: the sum over the group of the rows routed to this
 * rank's experts) and d->offsets. AA_EINVAL when the peers' counts add up
 * to more than cap rows (nothing moved; a route's kept slots never do). A
 * collective over the group. */
int aa_moe_dispatch_plan(aa_moe_dispatch_t *d, const int32_t *offsets);

/* xl(d->rows, C) = the rows of every rank's xp(sent, C) routed to this
 * rank's experts, sorted as the file comment says; overwritten. Collective. */
int aa_moe_dispatch(aa_moe_dispatch_t *d, float *xl, const float *xp, int C);
/* yp(sent, C) = the rows of yl(d->rows, C) sent back to where dispatch
 * took them from; overwritten. Collective. */
int aa_moe_combine(aa_moe_dispatch_t *d, float *yp, const float *yl, int C);

#endif
