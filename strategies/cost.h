/* What a strategy costs before it runs: the memory each rank must hold and
 * the work it does per token. Pure arithmetic on the architecture and the
 * strategy, so the planner (which must not link the engine) can prune and
 * compare candidates; tests/test_cost.c holds it to the engine's own
 * accounting, so the two cannot drift apart unnoticed.
 * Rules and their justification: docs/service.md "Jobs", step 3. */
#ifndef AA_COST_H
#define AA_COST_H

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

void aa_cost_memory(const aa_arch_t *arch, const aa_strategy_t *s, aa_cost_mem_t *out);

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
