/* The mixture-of-experts layer's ops on the CPU (issue 33, first slice):
 * Mixtral's sparse MoE block (Hugging Face MixtralSparseMoeBlock) as
 * separate forward/backward ops, with DeepSeek-style shared experts, the
 * Switch/GShard load-balancing loss and ST-MoE's router z-loss. The
 * engine's MoE blocks call them (engine/model.c, on the CPU backend).
 *
 * Why not in kernels/ops.h's own list: routing keeps a map and produces
 * host-side offsets (which decide the size of each expert's GEMM) and
 * statistics for the log; a CUDA backend must bring the E offsets back to
 * the host before it launches the per-expert GEMMs (cuda_moe.h). So the
 * MoE ops have a table of their own, kernels/moe_ops.h, which aa_ops_t's
 * moe entry points to and the engine calls (cpu_moe_ops.c wraps these).
 *
 * The block, for x(N,C) (N tokens, C = d_model), E experts of width F, top-k
 * routing and S shared experts:
 *   logits(N,E) = x wr^T               router, wr(E,C), no bias
 *   probs(N,E)  = softmax(logits)
 *   expert(N,k) = the k largest logits of each row, best first; equal
 *                 logits go to the lower expert index
 *   weight(N,k) = probs of the chosen / their sum   (Mixtral's renormalisation;
 *                 the probs as they are when r->raw, Qwen-MoE's norm_topk_prob false)
 *   out(N,C)    = sum_j weight[n,j] expert_e(x[n])  over the kept slots
 *               + sum_s shared_s(x[n])              (unweighted, or times
 *                 sigmoid(x[n] . wg) when gated as Qwen-MoE's is)
 * with expert_e(x) = w2_e (silu(w1_e x) * w3_e x). Expert weights are laid
 * out w13(E,2F,C), rows [w1_e (F,C); w3_e (F,C)] per expert (so one GEMM
 * gives [gate | up], the layout of ops.h's swiglu), and w2(E,C,F); shared
 * experts the same, ws13(S,2F,C) and ws2(S,C,F).
 *
 * Routing: the N*k slots (token n, choice j) are ordered by a stable counting
 * sort on the expert, so each expert's rows are contiguous and in token
 * order. Dropless by default; with a capacity factor c > 0 an expert keeps
 * its first capacity = ceil(c N k / E) slots in token order and drops the
 * rest: a dropped slot adds nothing to its token's output (the residual
 * around the block carries the token) and its weight is not renormalised
 * away (Switch Transformer's behaviour).
 *
 * Losses (both scalars, added by the caller to the training loss):
 *   aux = aux_coef * E * sum_e (c_e / N) * P_e
 *     c_e = the slots routed to e before any drop (sum_e c_e = N k),
 *     P_e = mean over tokens of probs[n,e];
 *   this is Hugging Face's load_balancing_loss_func for one layer without a
 *   padding mask, times router_aux_loss_coef as MixtralForCausalLM applies
 *   it. In the Switch form aux = coef E sum_e f_e P_e with f_e = c_e / (N k)
 *   it is that loss times k (identical for k = 1). c_e carries no gradient.
 *   z = z_coef * mean over tokens of logsumexp(logits[n])^2.
 *
 * Conventions are ops.h's: row-major float32, shapes in comments, backward
 * ops accumulate (+=) into their gradient outputs unless a comment says
 * otherwise, pointers never alias, and every result is deterministic for a
 * fixed thread count (and does not depend on it: no sum is split between
 * threads except inside OpenBLAS's GEMMs). */
#ifndef AA_CPU_MOE_H
#define AA_CPU_MOE_H

#include <stdint.h>

/* Bounds on the shapes a routing map accepts, so that every count and offset
 * fits an int32 (N k < 2^31) and top-k's per-token scan stays small. */
#define AA_MOE_MAX_EXPERTS 1024
#define AA_MOE_MAX_SLOTS (1 << 30)

/* The routing of one batch: which experts each token goes to, with what
 * weight, and where its rows sit in the expert-ordered (permuted) buffers.
 * Filled by aa_cpu_moe_route; the arrays are owned by the map. */
typedef struct aa_moe_route {
  int N, E, k;
  int capacity;     /* slots each expert keeps (N k when dropless) */
  int raw;          /* set by the caller: 1 keeps the chosen probabilities as weights (Qwen-MoE's
                       norm_topk_prob false), 0 (as allocated) renormalises them to sum 1 (the
                       CUDA ops, cuda_moe.h, likewise) */
  int rows;         /* kept slots = rows of the permuted buffers */
  int32_t *expert;  /* (N,k) chosen experts, best first */
  float *weight;    /* (N,k) their renormalised probabilities */
  int32_t *row;     /* (N,k) the permuted row of each slot, -1 if dropped */
  int32_t *slot;    /* (N k) slot n k + j of each permuted row (first rows used) */
  int32_t *counts;  /* (E) slots routed to each expert before dropping (c_e) */
  int32_t *offsets; /* (E+1) expert e owns permuted rows [offsets[e], offsets[e+1]) */
} aa_moe_route_t;

/* What a routing did, for the training log. */
typedef struct aa_moe_stats {
  int min_tokens; /* fewest rows an expert computed (kept slots) */
  int max_tokens; /* most rows an expert computed */
  int dropped;    /* slots dropped by the capacity (0 when dropless) */
} aa_moe_stats_t;

/* Allocates a routing map for N tokens, E experts, top-k: 1 <= k <= E <=
 * AA_MOE_MAX_EXPERTS, N >= 1, N k <= AA_MOE_MAX_SLOTS. On success *out owns
 * its arrays until aa_cpu_moe_route_free; on failure (AA_EINVAL for shapes
 * out of bounds, AA_ENOMEM) *out is untouched and the reason is in
 * aa_last_error(). */
int aa_cpu_moe_route_alloc(aa_moe_route_t *out, int N, int E, int k);
/* Frees the map's arrays and zeroes *r; a zeroed map is a no-op. */
void aa_cpu_moe_route_free(aa_moe_route_t *r);

/* Router forward: logits(N,E) = x(N,C) wr(E,C)^T (OpenBLAS sgemm), probs(N,E)
 * = softmax of each row (max-subtracted). Both are overwritten. */
void aa_cpu_moe_router_forward(float *logits, float *probs, const float *x, const float *wr, int N, int C,
                               int E);

/* Top-k, renormalisation and the expert-ordered map, from the router's
 * logits and probs (N,E) of r's N and E: fills every array of r, its
 * capacity and rows, and *stats when stats is not NULL. The choice compares
 * logits (softmax is monotone, and the logits have not been rounded
 * through exp); equal logits go to the lower expert index. capacity_factor
 * <= 0 is dropless; otherwise capacity = ceil(capacity_factor N k / E),
 * computed in double, and slots past it are dropped in token order.
 * Returns 0, or AA_EINVAL for a NaN capacity factor (r is then unchanged). */
int aa_cpu_moe_route(aa_moe_route_t *r, aa_moe_stats_t *stats, const float *logits, const float *probs,
                     float capacity_factor);
/* The capacity of each expert for `slots` slots over E experts:
 * ceil(capacity_factor slots / E) in double, at most slots; slots (every
 * slot kept) when capacity_factor <= 0. */
int aa_cpu_moe_capacity(float capacity_factor, long long slots, int E);
/* The kept slots and the expert-ordered map from r's chosen experts
 * (r->expert, as aa_cpu_moe_route leaves it), when r's N tokens are
 * `segments` equal runs of a larger batch in which before(segments,E)
 * (borrowed; NULL: all 0) counts the slots routed to each expert ahead of
 * each run: a slot is kept while its expert's slots before it in the
 * larger batch number under capacity. Fills counts (r's own c_e), row,
 * slot, offsets, capacity, rows and *stats (if not NULL; min and max over
 * r's kept rows). This is how a context rank, which holds chunks of every
 * sequence, keeps what one process keeps of the whole micro-batch.
 * Returns 0, or AA_EINVAL when capacity < 0 or segments does not divide N
 * (r is then unchanged). */
int aa_cpu_moe_route_keep(aa_moe_route_t *r, aa_moe_stats_t *stats, int capacity, int segments,
                          const int32_t *before);

/* Permute: xp(rows,C)[r] = x(N,C)[token of permuted row r]; overwritten. */
void aa_cpu_moe_permute(float *xp, const float *x, const aa_moe_route_t *r, int C);
/* dx(N,C) += the gradient of permute: each token's kept rows of dxp(rows,C)
 * added in slot order. */
void aa_cpu_moe_permute_backward(float *dx, const float *dxp, const aa_moe_route_t *r, int C);

/* Unpermute: out(N,C) = sum over token n's kept slots j, in order, of
 * weight[n,j] * yp(rows,C)[row[n,j]]; a token with no kept slot gets 0.
 * Overwritten. */
void aa_cpu_moe_unpermute(float *out, const float *yp, const aa_moe_route_t *r, int C);
/* Unpermute's backward given dout(N,C): dyp(rows,C)[row[n,j]] +=
 * weight[n,j] dout[n], dweight(N,k)[n,j] += dout[n] . yp[row[n,j]] (nothing
 * for a dropped slot). */
void aa_cpu_moe_unpermute_backward(float *dyp, float *dweight, const float *dout, const float *yp,
                                   const aa_moe_route_t *r, int C);

/* The grouped expert SwiGLU over the permuted rows: expert e takes rows
 * [offsets[e], offsets[e+1]) of xp(rows,C) and, with one sgemm per GEMM,
 * writes h = xp w13_e^T (rows,2F) = [gate | up] and a = silu(gate) * up
 * (rows,F), both kept for backward, and yp = a w2_e^T (rows,C). Experts with
 * no rows are skipped. offsets (E+1) is a routing map's; every output is
 * overwritten. */
void aa_cpu_moe_experts_forward(float *yp, float *h, float *a, const float *xp, const float *w13,
                                const float *w2, const int32_t *offsets, int E, int C, int F);
/* Its backward given dyp(rows,C): dxp(rows,C) += the input gradient,
 * dw13(E,2F,C) and dw2(E,C,F) += each expert's weight gradients. Uses
 * (rows,3F) floats of scratch, allocated and freed inside. */
void aa_cpu_moe_experts_backward(float *dxp, float *dw13, float *dw2, const float *dyp, const float *xp,
                                 const float *h, const float *a, const float *w13, const float *w2,
                                 const int32_t *offsets, int E, int C, int F);

/* Shared experts: out(N,C) += sum over s < S of shared_s(x), each a SwiGLU
 * expert of width F on every token, weights ws13(S,2F,C) and ws2(S,C,F);
 * hs(S,N,2F) and as(S,N,F) are kept for backward (overwritten). Note the +=:
 * call it after unpermute, which overwrites out. S = 0 does nothing. */
void aa_cpu_moe_shared_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                               const float *ws2, int S, int N, int C, int F);
/* dx(N,C), dws13, dws2 += the gradients given dout(N,C) (the block's). */
void aa_cpu_moe_shared_backward(float *dx, float *dws13, float *dws2, const float *dout, const float *x,
                                const float *hs, const float *as, const float *ws13, const float *ws2, int S,
                                int N, int C, int F);

/* Qwen-MoE's gated shared experts (Qwen2MoeSparseMoeBlock's
 * shared_expert_gate): out(N,C) += g[n] * sum over s < S of shared_s(x),
 * g[n] = sigmoid(x[n] . wg), wg (C) (the gate's Linear(C, 1) weight), one
 * gate for the S shared experts together (Qwen's one shared expert of width
 * S F is S experts of width F summed: SwiGLU is separable over its width).
 * hs and as as aa_cpu_moe_shared_forward's; g is recomputed in the
 * backward (N dot products), so nothing more is kept. S >= 1. */
void aa_cpu_moe_shared_gate_forward(float *out, float *hs, float *as, const float *x, const float *ws13,
                                    const float *ws2, const float *wg, int S, int N, int C, int F);
/* dx(N,C), dws13, dws2 and dwg(C) += the gradients given dout(N,C). Uses
 * 2 N C + N floats of scratch, allocated and freed inside. */
void aa_cpu_moe_shared_gate_backward(float *dx, float *dws13, float *dws2, float *dwg, const float *dout,
                                     const float *x, const float *hs, const float *as, const float *ws13,
                                     const float *ws2, const float *wg, int S, int N, int C, int F);

/* The auxiliary losses of the routing above (formulas in the file comment),
 * summed in double: *aux (load balancing) and *z (router z-loss). */
void aa_cpu_moe_losses(float *aux, float *z, const float *logits, const float *probs, const aa_moe_route_t *r,
                       float aux_coef, float z_coef);

/* Router backward. dlogits(N,E) is OVERWRITTEN with the gradient of the
 * logits: from dweight(N,k) (unpermute's) through the renormalisation and
 * the softmax, plus dloss times the gradients of aux and z (dloss = the
 * training loss's derivative w.r.t. aux + z, e.g. 1 / accumulation steps).
 * Then dx(N,C) += dlogits wr and dwr(E,C) += dlogits^T x. */
void aa_cpu_moe_router_backward(float *dx, float *dwr, float *dlogits, const float *dweight, const float *x,
                                const float *wr, const float *logits, const float *probs,
                                const aa_moe_route_t *r, int C, float aux_coef, float z_coef, float dloss);

#endif
