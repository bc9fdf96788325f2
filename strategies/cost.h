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
 * allocates for the model, ZeRO over the data x context ranks (its shards and
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

/* Floating-point operations one rank executes per token its pipeline
 * replica trains (the tokens of one data-parallel replica; every rank of
 * a tensor group, and every stage of a pipeline, works on the same
 * tokens; under context parallelism per token of its context rank's
 * share, below). aa_cost_flops_per_token_stage: pipeline rank `stage`'s; 6 per
 * parameter of the rank's blocks (of an MoE layer's, its active ones: the
 * router and the k routed and S shared experts a token passes, not the
 * E - k others) for the forward and backward GEMMs plus
 * 12·C·T / tp per block for attention (its n_head / tp heads), and on the
 * last stage 6 per element of wte|wpe (the tied head, which the 6N
 * convention charges for the whole unit) and of lnf; the embedding on the
 * first stage is a lookup (0). So the stages sum to the usual 6N + 12LCT
 * of the whole model at tp = 1, N counting the embedding, which the tied
 * output layer multiplies by. The llama family's head is untied (head.w,
 * in the last unit with lnf.w): the last stage counts 6 per element of
 * that unit and nothing for wte, so the stages sum to 6N + 12LCT with N
 * not counting the embedding (attention's 12·C·T is the same under
 * grouped-query attention: every query head still attends). Plus the forward a checkpointing mode runs
 * again: full recomputes each checkpointed block of the rank (2 per block
 * parameter + 4·C·T / tp for attention), selective only the GELU or
 * SwiGLU (counted as 0: no GEMM). aa_cost_flops_per_token: the most any stage executes,
 * the one a pipeline's pace follows (at pp = 1 the one rank's). Context
 * parallelism leaves them unchanged: a context rank holds 1 / cp of each
 * sequence, and each of its tokens costs what it costs at cp = 1, its
 * query still attending over its whole causal prefix (the keys come
 * around the ring; the 2 cp chunks, two a rank from either end, give
 * every rank the same share of the causal attention). A rank of a
 * strategy that trains r tokens/s runs at r / (dp × cp) × its stage's
 * FLOP/s. 0 for a strategy the pipeline rules refuse (pipeline.h) or a
 * stage outside 0..pp-1. */
double aa_cost_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s);
double aa_cost_flops_per_token_stage(const aa_arch_t *arch, const aa_strategy_t *s, int stage);

/* A lower bound of the FLOPs one rank executes per token its pipeline
 * replica trains, whatever the implementation: the weight matrices' GEMMs
 * only (qkv, proj, fc, fcproj of the rank's blocks, for llama q|k|v
 * (C + 2·KV) x C, proj, gate|up 2F x C and down, an MoE layer's router
 * E x C and its k routed and S shared experts' 3 Fe x C in the MLP's
 * place, and, on the last
 * stage, the V x C output layer: 2 per element forward, 4 backward),
 * plus the 2 per element of each of its blocks that full checkpointing
 * runs forward again, the tp ranks of a tensor group sharing them evenly
 * (a padded vocabulary only adds work); per token a context rank holds,
 * as above. Nothing for attention scores (a
 * causal kernel may skip half of them), biases, LayerNorm or the position
 * table (a lookup). aa_cost_min_flops_per_token_stage: pipeline rank
 * `stage`'s; aa_cost_min_flops_per_token: the most loaded stage's. Every
 * stage works through every token of its replica's (of its context
 * rank's 1 / cp share), so a strategy of dp replicas on dp × tp × pp × cp
 * devices of peak P FLOP/s cannot train faster than dp × cp × P /
 * aa_cost_min_flops_per_token (at pp = 1 and cp = 1: dp × tp × P / the
 * whole model's GEMM FLOPs per token; the bubble only lowers it). 0 as
 * above. */
double aa_cost_min_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s);
double aa_cost_min_flops_per_token_stage(const aa_arch_t *arch, const aa_strategy_t *s, int stage);

/* The share of a step a pipeline rank of s waits with m micro-batches a
 * step (its bubble): (pp − 1) / (m + pp − 1); under the interleaved
 * schedule, whose chunks are vpp times shorter, the bubble's time is
 * divided by vpp, so its share is (pp − 1) / (vpp m + pp − 1) (Narayanan et
 * al. 2021, "Efficient Large-Scale Language Model Training on GPU
 * Clusters Using Megatron-LM", sections 2.2.1-2.2.2; GPipe and 1F1B have
 * the same bubble, 1F1B keeps fewer activations). Counts forward and
 * backward alike; 0 at pp = 1. A rank busy for time t per step then takes
 * t / (1 − bubble). aa_pp_bubble (pipeline.h) for s's schedule. */
double aa_cost_bubble(const aa_strategy_t *s, int m);

/* --- collectives --------------------------------------------------------------------------
 *
 * What one rank's collectives move per optimizer step, by process group and
 * kind, as the engine schedules them. A call's size is its message as
 * nccl-tests counts it: an all-reduce's buffer (n elements), an
 * all-gather's gathered result and a reduce-scatter's input (each n·t for
 * n elements per rank over a group of t), a send's or a receive's message.
 * A ring moves 2(t-1)/t of an all-reduce's size through each rank's link
 * and (t-1)/t of the other collectives' (nccl-tests' bus bandwidth
 * factors; aa_cost_comm_ring_bytes); a send goes out whole. Every rank of
 * the tensor, data and context groups makes the same calls with the same
 * sizes; a pipeline rank's depend on its stage. A group of one moves nothing: its
 * figures are 0, whatever the engine calls in place.
 *
 * Under pipeline parallelism (pp > 1) every figure is pipeline rank
 * `stage`'s: its blocks (L_r of them, k_r of which full checkpointing
 * recomputes) and units stand in for the model's below, the embedding's
 * calls are the first stage's and the final LayerNorm's and the
 * cross-entropy's the last's. At pp = 1 one rank holds everything (L_r =
 * L, k_r = k, first and last).
 *
 * The tensor group (tp ranks; N = micro_batch × seq_len / cp tokens, the
 * rank's (under context parallelism its two chunks of each sequence), C =
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
 *   an MoE block, at expert_tensor_parallel_size 1 (its experts whole on
 *     every tensor rank), has no MLP reduction: 2 fewer calls a block and 1
 *     fewer a recomputed one than above; with its experts split over the
 *     tensor ranks (s->etp = tp) it has them (under sequence parallelism
 *     its input gradient is an all-reduce of N·C, not a reduce-scatter),
 *     plus one all-reduce of N·k floats (+ C under shared_expert_gate)
 *     for the routing weights' and the gate's gradients.
 *   per step: the gradient norm's all-reduce (1 float).
 * The data group (R = dp × cp ranks, the replicas of engine/mesh.h: under
 * context parallelism every rank of a context group holds the same slice of
 * the model and computes gradients from its own tokens, so the engine
 * averages gradients and shards ZeRO over the data and context ranks
 * together, Megatron's data-parallel group with context parallelism; one
 * group here, of R ranks, since that is the group the engine's calls run
 * on. ZeRO stage aa_sizes_zero_stage(zero, R), on the units of U =
 * n_layer + 2 the rank holds (under pipeline parallelism its blocks,
 * wte|wpe on the first and last stage, lnf on the last:
 * aa_sizes_unit_held), its tensor slice of each: n_u elements, chunks c_u
 * = ceil(n_u / R), engine/optim.h), per step of A micro-batches:
 *   always: the loss's all-reduce (1 float).
 *   stage 0: all-reduce of each unit's gradient (size n_u) once per step.
 *   stages 1-3: the gradient norm's all-reduce (1 float) and reduce-scatter
 *     of each unit's gradient (size R·c_u): once per step at stage 1, every
 *     micro-batch from stage 2.
 *   stages 1-2: all-gather of each unit's updated fp32 parameters (size
 *     R·c_u) once per step.
 *   stage 3: all-gather of the parameters (size R·c_u, in the amp type)
 *     before the forward or backward reads a unit its slot no longer holds
 *     (engine/optim.h): wte|wpe and lnf once a step where held, and a
 *     block each time a pass reaches it while the one block slot holds
 *     another. At pp = 1 the passes alternate forward (blocks up) and
 *     backward (down): every unit in the first forward, each block but the
 *     last in its backward, each block but the first in the forward and
 *     each but the last in the backward of every later micro-batch, 2L + 1
 *     + 2(A - 1)(L - 1) gathers. Under pipeline parallelism the passes are
 *     the rank's forwards and backwards in its plan's order (pipeline.h),
 *     each walking its chunk's blocks up or down.
 *   Each of these runs once per piece of the unit (sizes.h
 *   aa_sizes_unit_pieces: the unit itself at ep 1), n_u and R·c_u then the
 *   piece's; under expert parallelism an MoE block's expert slices go to
 *   the expert-data group below instead, a block's gathers at stage 3 as
 *   the first block's pieces.
 * The pipeline group (pp ranks; each micro-batch's activations cross the
 * boundary between virtual stages k and k + 1, S = pp × vpp of them, Ns·C
 * elements with Ns = N / tp under sequence parallelism, else N), per
 * micro-batch and chunk of the rank: a send of the chunk's output forward
 * (in the storage dtype: the amp type, or fp32) unless it is the last
 * virtual stage, and a receive of its input unless it is the first; in
 * backward a send of the input's gradient (fp32) unless it is the first
 * and a receive of the output's gradient unless it is the last. With
 * micro-batches a step that is A·vpp sends each way on a middle rank.
 * The context group (cp ranks; context parallelism's ring attention,
 * engine/model.c ring_forward and ring_backward): a ring step is a
 * sendrecv, a send to the next rank and a receive from the previous one,
 * which the backends run one after the other (comm.h), so each counts one
 * send and one receive, of the rank's keys and values for the micro-batch
 * (its two chunks' k|v columns, packed: N·2 KVl elements, KVl the width of
 * the rank's key heads, sizes.h; fp32 whatever the amp: the ring's
 * kernels are fp32). Per
 * micro-batch, for each block of the rank: cp − 1 steps in the forward,
 * 2 cp − 2 in the backward (cp − 1 for the blocks, cp − 2 for the key and
 * value gradients that travel with them, and 1 that brings each rank its
 * own), and cp − 1 again for each block full checkpointing recomputes:
 * A (L_r (3 cp − 3) + k_r (cp − 1)) sends a step and as many receives.
 * With MoE layers, per micro-batch and MoE block of the rank (and again
 * for each one recomputed) one all-reduce of 3 E floats: each expert's
 * count and router probability sum over the group (the load-balancing
 * loss of the whole micro-batch, engine/model.c moe_context_reduce).
 * The embedding group (Megatron's: the first and the last pipeline rank,
 * which hold the two copies of wte|wpe, tied to the head): one all-reduce
 * of unit 0's gradient a step (size (ceil(V / tp) + T)·C, fp32) so the
 * copies stay equal; 2 ranks on the first and last stage at pp > 1, else
 * a group of one (nothing). The llama family has no such group (its head
 * is untied, its last stage holds no wte): a group of one everywhere.
 * Its other groups move what gpt2's do at the same sizes: the tensor
 * group's activations are C wide whatever the kv heads, its RMSNorm
 * gradients travel in the same 2·C slots (the bias half 0), and the data
 * group's units are its own (sizes.h).
 * The expert group (ep ranks, s->ep > 1; engine/moe_dispatch.c: each
 * rank routes its N tokens' k slots to the E experts, which sit E / ep a
 * rank), per micro-batch, for each MoE block of the rank, one counts
 * exchange (an all-to-all of the El = E / ep local experts' counts a peer,
 * two floats each: 2 E floats) and one all-to-all of the rows (fp32, size
 * El·ep·Ne·C for Ne = aa_cost_expert_rows: the even load) for each of the
 * forward's dispatch and combine and the backward's, so 1 counts and 4 row
 * all-to-alls a block, and 1 counts and 2 row ones again for each MoE
 * block full checkpointing recomputes; per step the gradient norm's
 * all-reduce of the expert slices' squares (1 float).
 * The expert-data group (E_d = dp·cp / ep ranks that hold the same
 * experts; nothing over a group of one): the data group's collectives
 * above for each MoE block's expert slices (n = El·3·Fe·C elements,
 * chunks c = ceil(n / E_d)), which then leave the data group's calls for
 * that unit: the engine reduces, shards and gathers the unit piece by
 * piece, its dense tensors before the experts (attention, norms and
 * router) and after them (the shared experts, when there are any) over
 * the data group. So at stage 0 one all-reduce of n a step; from stage 1
 * reduce-scatters of E_d·c (once a step at stage 1, every micro-batch
 * from 2), at stages 1-2 an all-gather of E_d·c a step, at stage 3 the
 * gathers (amp type) each time a block's parameters are. */
typedef enum {
  AA_COST_ALL_REDUCE,
  AA_COST_ALL_GATHER,
  AA_COST_REDUCE_SCATTER,
  AA_COST_SEND,       /* point-to-point, to one peer */
  AA_COST_RECV,       /* point-to-point, from one peer */
  AA_COST_ALL_TO_ALL, /* every rank a share to every other (expert parallelism's token exchange);
                         its size is a rank's whole buffer, of which (t-1)/t leaves the rank */
  AA_COST_COLLECTIVES
} aa_cost_collective_t;

/* One kind of collective on one group, per optimizer step. */
typedef struct aa_cost_calls {
  uint64_t calls; /* collective calls */
  uint64_t elems; /* their sizes (above) summed, in elements */
  uint64_t bytes; /* the same in bytes: elems times each call's element size */
} aa_cost_calls_t;

typedef struct aa_cost_group {
  int ranks; /* the group's size (dp x cp, tp, pp, cp; 2 or 1 for the embedding group) */
  aa_cost_calls_t kind[AA_COST_COLLECTIVES];
  uint64_t bytes; /* the kinds' bytes summed (sends and receives both) */
} aa_cost_group_t;

typedef struct aa_cost_comm {
  aa_cost_group_t data, tensor, pipeline, embedding, context;
  /* expert parallelism's: expert of s->ep ranks (else one); expert_data of
   * the data ranks / ep, over which an MoE block's expert slices go when
   * ep > 1 (else it carries nothing) */
  aa_cost_group_t expert, expert_data;
} aa_cost_comm_t;

/* The rows each routed expert computes of an MoE layer over N tokens of
 * one rank: even routing (the expected load of a balanced router, which
 * the auxiliary loss trains toward), ceil(N k / E) rows an expert, capped
 * by the capacity ceil(c N k / E) when a capacity factor c > 0 drops
 * slots (kernels/cpu/cpu_moe.h aa_cpu_moe_route). No margin for
 * imbalance: a balanced step's. Under expert parallelism a local expert
 * computes ep times as many, from the ep ranks of its group. */
int64_t aa_cost_expert_rows(const aa_moe_t *m, int64_t N);

/* The collectives of pipeline rank `stage` of resolved strategy s (any
 * stage at pp = 1) per optimizer step of accum micro-batches
 * (aa_strategy_accum_steps; under pipeline parallelism the m of the
 * schedule) into *out. A strategy the pipeline rules refuse, or a stage
 * outside 0..pp-1, gives zeros (the groups' sizes still set).
 * aa_cost_comm: the stage whose groups move the most bytes in all. */
void aa_cost_comm(const aa_arch_t *arch, const aa_strategy_t *s, int accum, aa_cost_comm_t *out);
void aa_cost_comm_stage(const aa_arch_t *arch, const aa_strategy_t *s, int accum, int stage, aa_cost_comm_t *out);

/* Bytes one rank of group g sends per step: with ring algorithms
 * 2(t-1)/t of the all-reduces' bytes plus (t-1)/t of the other
 * collectives' (an all-to-all keeps 1/t of its buffer at home), and its
 * sends whole. */
double aa_cost_comm_ring_bytes(const aa_cost_group_t *g);

/* "6 all-reduces (1.5 MiB), 1 all-gather (12.0 KiB), 4 sends (8.0 KiB)": each kind with calls,
 * its sizes summed, or "nothing", into out (n bytes, truncated to fit). */
void aa_cost_group_describe(const aa_cost_group_t *g, char *out, size_t n);

/* Whether strategy a does at least the work of b and can therefore not be
 * faster, for b measured on the same device kind (cuda: 1 for a CUDA pool,
 * 0 for CPUs): same parallel degrees on every axis (a context degree
 * trades per-token work for ring transfers: two strategies that differ in
 * it are never compared), sequence parallelism (which trades
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
