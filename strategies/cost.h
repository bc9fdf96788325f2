/* What a strategy costs before it runs: the memory each rank must hold,
 * the work it does per token and what its collectives move per step. Pure
 * arithmetic on the architecture and the strategy, so the planner (which
 * must not link the engine) can prune and compare candidates;
 * tests/test_cost.c holds it to the engine's own accounting, so the two
 * cannot drift apart unnoticed.
 * Rules and their justification: docs/service.md "Jobs", step 3. */
#ifndef AA_COST_H
#define AA_COST_H

#include <stdint.h>

#include "../common/mem.h"
#include "strategy.h"

/* Bytes one rank of a resolved strategy allocates, by memory kind, on a
 * model with sequences of seq_len tokens: exactly what the engine
 * allocates for the model, ZeRO over the data group (its shards and
 * scratch included), the activations and the workspace, as
 * strategies/sizes.h computes them for both. Not counted: a backend's own
 * scratch (a CUDA context's cuBLAS workspace and attention scratch; none on
 * the CPU), so on a GPU the total is a lower bound of the run's peak: a
 * strategy whose total is over a device's memory cannot run on it. */
typedef struct aa_cost_mem {
  size_t bytes[AA_MEM_NKINDS];
  size_t total;
} aa_cost_mem_t;

/* Under pipeline parallelism a rank's bytes depend on its stage and on
 * the m micro-batches of a step (the activations its schedule keeps in
 * flight): aa_cost_memory_stage gives pipeline rank `stage`'s, and
 * aa_cost_memory the most any stage needs (both ignore m and stage at pp
 * 1). A strategy the pipeline rules refuse gives zeros. */
void aa_cost_memory(const aa_arch_t *arch, const aa_strategy_t *s, int m, aa_cost_mem_t *out);
void aa_cost_memory_stage(const aa_arch_t *arch, const aa_strategy_t *s, int m, int stage, aa_cost_mem_t *out);

/* "19.8 MiB (params 1.6 MiB, grads 3.2 MiB, optim 9.5 MiB, acts 707.0 KiB,
 * workspace 4.8 MiB)" into out (n bytes, truncated to fit). */
void aa_cost_mem_describe(const aa_cost_mem_t *m, char *out, size_t n);

/* Floating-point operations one rank executes per token its tensor group
 * trains (the tokens of one data-parallel replica; every rank of a tensor
 * group works on the same tokens): 6 per parameter the rank holds for the
 * forward and backward GEMMs plus 12·L·C·T / tp for attention (its n_head /
 * tp heads): the usual 6N + 12LCT of the whole model at tp = 1, with N
 * counting the embedding, which the tied output layer multiplies by. Plus
 * the forward a checkpointing mode runs again: full recomputes each
 * checkpointed block (2 per block parameter the rank holds + 4·C·T / tp
 * for attention), selective only the GELU (counted as 0: no GEMM). A rank
 * of a strategy that trains r tokens/s runs at r / dp × this FLOP/s. */
double aa_cost_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s);

/* A lower bound of the FLOPs one rank executes per token its tensor group
 * trains, whatever the implementation: the weight matrices' GEMMs only
 * (qkv, proj, fc, fcproj and the tied V x C output layer: 2 per element
 * forward, 4 backward), plus the 2 per element of each block that full
 * checkpointing runs forward again, the tp ranks of a tensor group sharing
 * them evenly (a padded vocabulary only adds work). Nothing for attention
 * scores (a causal kernel may skip half of them), biases, LayerNorm or the
 * position table (a lookup). So a strategy of dp replicas on dp × tp
 * devices of peak P FLOP/s cannot train faster than dp × P / this
 * (= dp × tp × P / the whole model's GEMM FLOPs per token). */
double aa_cost_min_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s);

/* --- collectives --------------------------------------------------------------------------
 *
 * What one rank's collectives move per optimizer step, by process group and
 * kind, as the engine schedules them. A call's size is its message as
 * nccl-tests counts it: an all-reduce's buffer (n elements), an
 * all-gather's gathered result and a reduce-scatter's input (each n·t for
 * n elements per rank over a group of t). A ring moves 2(t-1)/t of an
 * all-reduce's size through each rank's link and (t-1)/t of the others'
 * (nccl-tests' bus bandwidth factors; aa_cost_comm_ring_bytes). Every rank
 * of a group makes the same calls with the same sizes. A group of one moves
 * nothing: its figures are 0, whatever the engine calls in place.
 *
 * The tensor group (tp ranks; N = micro_batch × seq_len tokens, C =
 * d_model, L = n_layer, k = the blocks full checkpointing recomputes, fp32
 * payloads; the schedule of the engine's tensor parallelism, issue 17),
 * per micro-batch:
 *   without sequence parallelism: all-reduce (N·C) after the embedding,
 *     after each block's attention projection and MLP output (2L), of the
 *     input gradients of each block's qkv and fc (2L), of the final
 *     LayerNorm's input gradient (1), and again the forward's 2 per
 *     recomputed block (2k); all-gather of the vocabulary-parallel
 *     cross-entropy's 3 floats per token (size 3·N·tp).
 *   with sequence parallelism (the residual stream split along the
 *     sequence): reduce-scatter (size N·C) for the embedding, each block's 2
 *     row-parallel outputs (2L), its 2 input gradients (2L), the final
 *     LayerNorm's input gradient (1) and the recomputed blocks (2k);
 *     all-gather (size N·C) of each block's 2 LayerNorm outputs forward
 *     (2L), in backward of its 2 output gradients and again its 2
 *     LayerNorm outputs (4L), of the final LayerNorm's output forward and
 *     backward (2), of the embedding's output gradient (1) and for the
 *     recomputed blocks (2k), plus the cross-entropy's (size 3·N·tp);
 *     all-reduce of each block's two LayerNorms' weight and bias gradients
 *     (L, 4·C each) and the final LayerNorm's (1, 2·C).
 *   per step: the gradient norm's all-reduce (1 float).
 * The data group (dp ranks; ZeRO stage aa_sizes_zero_stage(zero, dp), on
 * the rank's own units of U = n_layer + 2, its tensor slice of each:
 * n_u elements, chunks c_u = ceil(n_u / dp), engine/optim.h), per step of
 * A micro-batches:
 *   always: the loss's all-reduce (1 float).
 *   stage 0: all-reduce of each unit's gradient (size n_u) once per step.
 *   stages 1-3: the gradient norm's all-reduce (1 float) and reduce-scatter
 *     of each unit's gradient (size dp·c_u): once per step at stage 1, every
 *     micro-batch from stage 2.
 *   stages 1-2: all-gather of each unit's updated fp32 parameters (size
 *     dp·c_u) once per step.
 *   stage 3: all-gather of the parameters (size dp·c_u, in the amp type)
 *     before the forward or backward reads a unit its slot no longer holds
 *     (engine/optim.h): every unit in the first forward of a step, each
 *     block but the last in its backward, each block but the first in the
 *     forward and each but the last in the backward of every later
 *     micro-batch: 2L + 1 + 2(A - 1)(L - 1) gathers.
 * The pipeline group is not modelled (pp = 1 in this engine). */
typedef enum {
  AA_COST_ALL_REDUCE,
  AA_COST_ALL_GATHER,
  AA_COST_REDUCE_SCATTER,
  AA_COST_COLLECTIVES
} aa_cost_collective_t;

/* One kind of collective on one group, per optimizer step. */
typedef struct aa_cost_calls {
  uint64_t calls; /* collective calls */
  uint64_t elems; /* their sizes (above) summed, in elements */
  uint64_t bytes; /* the same in bytes: elems times each call's element size */
} aa_cost_calls_t;

typedef struct aa_cost_group {
  int ranks; /* the group's size (dp, tp) */
  aa_cost_calls_t kind[AA_COST_COLLECTIVES];
  uint64_t bytes; /* the kinds' bytes summed */
} aa_cost_group_t;

typedef struct aa_cost_comm {
  aa_cost_group_t data, tensor;
} aa_cost_comm_t;

/* The collectives of one rank of resolved strategy s per optimizer step of
 * accum micro-batches (aa_strategy_accum_steps) into *out. */
void aa_cost_comm(const aa_arch_t *arch, const aa_strategy_t *s, int accum, aa_cost_comm_t *out);

/* Bytes one rank of group g sends per step with ring algorithms:
 * 2(t-1)/t of the all-reduces' bytes plus (t-1)/t of the others'. */
double aa_cost_comm_ring_bytes(const aa_cost_group_t *g);

/* "6 all-reduces (1.5 MiB), 1 all-gather (12.0 KiB)": each kind with calls,
 * its sizes summed, or "nothing", into out (n bytes, truncated to fit). */
void aa_cost_group_describe(const aa_cost_group_t *g, char *out, size_t n);

/* Whether strategy a does at least the work of b and can therefore not be
 * faster, for b measured on the same device kind (cuda: 1 for a CUDA pool,
 * 0 for CPUs): same parallel degrees, sequence parallelism (which trades
 * activation memory for other collectives) and micro-batch, and each knob
 * of a at b's or a costlier one, at least one costlier: checkpointing (none <
 * selective < full: more recompute, the same everything else), ZeRO 3 over
 * ZeRO 2 (the same compute and optimizer shard plus the parameter
 * all-gathers of forward and backward) and, on CPUs only, bf16/fp16 over
 * fp32 (the CPU computes in fp32 either way and converts 16-bit storage on
 * top). On GPUs 16-bit is faster and ZeRO 0/1/2 trade communication for
 * optimizer work, so neither order holds there or between those stages.
 * On a non-zero return, why (naming the costlier knobs) is written to why. */
int aa_cost_dominated(const aa_strategy_t *a, const aa_strategy_t *b, int cuda, char *why, size_t why_len);

#endif
