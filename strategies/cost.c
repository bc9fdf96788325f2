/* The cost model's arithmetic (cost.h). What a rank holds is sizes.h's,
 * the same figures the engine allocates by. */
#include "cost.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sizes.h"

void aa_cost_memory_stage(const aa_arch_t *arch, const aa_strategy_t *s, int m, int stage,
                          aa_cost_mem_t *out) {
  memset(out, 0, sizeof *out);
  if (aa_sizes_rank(arch, s, m, stage, out->bytes)) memset(out->bytes, 0, sizeof out->bytes);
  for (int k = 0; k < AA_MEM_NKINDS; k++)
    out->total += out->bytes[k];
}

void aa_cost_memory(const aa_arch_t *arch, const aa_strategy_t *s, int m, aa_cost_mem_t *out) {
  aa_cost_memory_stage(arch, s, m, 0, out);
  for (int st = 1; st < s->degree[AA_AXIS_PIPELINE]; st++) {
    aa_cost_mem_t c;
    aa_cost_memory_stage(arch, s, m, st, &c);
    if (c.total > out->total) *out = c;
  }
}

void aa_cost_mem_describe(const aa_cost_mem_t *m, char *out, size_t n) {
  char b[AA_MEM_NKINDS + 1][32];
  for (int k = 0; k < AA_MEM_NKINDS; k++)
    aa_mem_fmt(b[k], m->bytes[k]);
  snprintf(out, n, "%s (params %s, grads %s, optim %s, acts %s, workspace %s)",
           aa_mem_fmt(b[AA_MEM_NKINDS], m->total), b[AA_MEM_PARAMS], b[AA_MEM_GRADS], b[AA_MEM_OPTIM],
           b[AA_MEM_ACTS], b[AA_MEM_WORKSPACE]);
}

/* What pipeline rank `stage` of s holds (its blocks; no plan), or -1 for
 * a stage outside 0..pp-1 or a strategy the pipeline rules refuse. At pp 1
 * the one rank holds everything, first and last. */
static int place_of(const aa_arch_t *a, const aa_strategy_t *s, int stage, aa_pp_place_t *p) {
  if (stage < 0 || stage >= (s->degree[AA_AXIS_PIPELINE] > 1 ? s->degree[AA_AXIS_PIPELINE] : 1)) return -1;
  return aa_pp_place(a, s, 0, stage, p) ? -1 : 0;
}

/* Block l's parameters one token's forward touches on a tensor rank of
 * tp: its unit's, less, for an MoE layer, the E - k experts the token is
 * not routed to (3 Fe C each, Fe the rank's share of their width: all of
 * it at expert_tensor_parallel_size 1, which computes every expert whole
 * on every tensor rank, d_ff_expert / tp with them split; sizes.h). */
static double active_numel(const aa_arch_t *a, int tp, int l) {
  double n = (double)aa_sizes_unit_numel(a, tp, 1 + l);
  if (aa_arch_is_moe_layer(a, l)) {
    aa_tp_dims_t d;
    aa_sizes_tp(a, tp, &d);
    n -= (double)(a->moe.experts - a->moe.top_k) * 3.0 * d.Fe * a->d_model;
  }
  return n;
}

/* Block l's weight matrices one token's forward multiplies by (tp 1):
 * gpt2: qkv 3C^2, proj C^2, fc and fcproj FC each; llama: q|k|v C (C +
 * 2 KV) with KV = n_kv_head x head size, proj C^2, gate|up 2FC, down FC;
 * an MoE layer's in the MLP's place: the router EC and its k routed and S
 * shared experts, 3 Fe C each. */
static double matrices(const aa_arch_t *a, int tp, int l) {
  (void)tp; /* per tensor rank: the caller divides */
  const double C = a->d_model, F = a->d_ff, KV = (double)aa_arch_kv_heads(a) * (C / a->n_head);
  if (!aa_arch_is_llama(a)) return 4 * C * C + 2 * F * C;
  const double mlp = aa_arch_is_moe_layer(a, l) ? (double)aa_arch_moe_mlp_params(a, a->moe.top_k) : 3 * F * C;
  return C * (C + 2 * KV) + C * C + mlp;
}

/* What p's blocks add up to: how many it holds (*blocks) and recomputes
 * whole under full checkpointing (*recomputed), and, with per, per(a, tp,
 * l) summed over the held ones (*held) and the recomputed ones (*again). */
static void held_blocks(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *p,
                        double (*per)(const aa_arch_t *, int, int), int *blocks, int *recomputed,
                        double *held, double *again) {
  *blocks = *recomputed = 0;
  *held = *again = 0;
  for (int c = 0; c < p->vpp; c++)
    for (int l = p->lo[c]; l < p->hi[c]; l++) {
      const double x = per ? per(a, s->degree[AA_AXIS_TENSOR], l) : 0;
      const int full = aa_sizes_block_full(s->ckpt, s->ckpt_layers, l) != 0;
      ++*blocks;
      *recomputed += full;
      *held += x;
      *again += full ? x : 0;
    }
}

/* LoRA (a->lora.r > 0), per token and block on a tensor rank of tp: the
 * adapters' forward 2 r (in + out) a target (fwd_only), and a backward that
 * recomputes A x (2 r in), then B's gradient and B^T's product (2 r out
 * each), A's gradient and the input's (2 r in each): r (8 in + 6 out). */
static double lora_block_flops(const aa_arch_t *a, int tp, int fwd_only) {
  double f = 0, fw = 0;
  for (int t = 0; a->lora.r && t < AA_LORA_NTARGETS; t++) {
    if (!(a->lora.targets & (1 << t))) continue;
    int in, out, row;
    aa_lora_shape(a, t, tp, &in, &out, &row);
    f += (double)a->lora.r * (8.0 * in + 6.0 * out);
    fw += 2.0 * a->lora.r * ((double)in + out);
  }
  return fwd_only ? fw : f;
}

double aa_cost_flops_per_token_stage(const aa_arch_t *arch, const aa_strategy_t *s, int stage) {
  aa_arch_t split;
  arch = aa_sizes_set_etp(&split, arch, s);
  aa_pp_place_t p;
  if (place_of(arch, s, stage, &p)) return 0;
  int nb, nk;
  double block, again;
  held_blocks(arch, s, &p, active_numel, &nb, &nk, &block, &again);
  const double C = arch->d_model, T = arch->seq_len, Lr = nb, tp = s->degree[AA_AXIS_TENSOR];
  /* The head and lnf on the last stage: gpt2's head is tied to wte|wpe
   * (unit 0), llama's is head.w, in the last unit with lnf.w. The
   * embedding on the first stage is a lookup. */
  const double head =
      aa_arch_is_llama(arch) ? 0 : (double)aa_sizes_unit_numel(arch, s->degree[AA_AXIS_TENSOR], 0);
  const double ends =
      p.last ? head + (double)aa_sizes_unit_numel(arch, s->degree[AA_AXIS_TENSOR], arch->n_layer + 1) : 0;
  /* Per token the rank holds, whatever cp (cost.h): T stays the whole
   * sequence, each query attending over its whole prefix. */
  if (arch->lora.r) {
    /* The frozen base: forward and input gradient (4 a weight), no weight
     * gradient; the adapters' own (lora_block_flops), again forward for a
     * recomputed block. */
    const double tp1 = s->degree[AA_AXIS_TENSOR], lb = lora_block_flops(arch, (int)tp1, 0),
                 lf = lora_block_flops(arch, (int)tp1, 1);
    return 4.0 * (block + ends) + Lr * lb + 12.0 * Lr * C * T / tp + 2.0 * again + nk * lf +
           nk * 4.0 * C * T / tp;
  }
  return 6.0 * (block + ends) + 12.0 * Lr * C * T / tp + 2.0 * again + nk * 4.0 * C * T / tp;
}

double aa_cost_min_flops_per_token_stage(const aa_arch_t *arch, const aa_strategy_t *s, int stage) {
  aa_pp_place_t p;
  if (place_of(arch, s, stage, &p)) return 0;
  int nb, nk;
  double block, again;
  held_blocks(arch, s, &p, matrices, &nb, &nk, &block, &again);
  const double C = arch->d_model, V = arch->vocab_size;
  if (arch->lora.r) /* frozen base: no weight gradients; the adapters at tp 1 */
    return (4.0 * (block + (p.last ? V * C : 0)) + 2.0 * again + nb * lora_block_flops(arch, 1, 0)) /
           s->degree[AA_AXIS_TENSOR];
  return (6.0 * (block + (p.last ? V * C : 0)) + 2.0 * again) / s->degree[AA_AXIS_TENSOR];
}

/* The most any pipeline stage of s executes by f. */
static double most_loaded(double (*f)(const aa_arch_t *, const aa_strategy_t *, int), const aa_arch_t *arch,
                          const aa_strategy_t *s) {
  double most = 0;
  for (int st = 0; st < (s->degree[AA_AXIS_PIPELINE] > 1 ? s->degree[AA_AXIS_PIPELINE] : 1); st++) {
    double x = f(arch, s, st);
    if (x > most) most = x;
  }
  return most;
}

double aa_cost_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s) {
  return most_loaded(aa_cost_flops_per_token_stage, arch, s);
}

double aa_cost_min_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s) {
  return most_loaded(aa_cost_min_flops_per_token_stage, arch, s);
}

double aa_cost_bubble(const aa_strategy_t *s, int m) {
  return aa_pp_bubble(s->schedule, s->degree[AA_AXIS_PIPELINE], s->vpp, m);
}

/* --- collectives (cost.h) ------------------------------------------------------------------ */

/* Adds `calls` calls of size n elements of `elem` bytes each to kind k of g. */
static void add(aa_cost_group_t *g, aa_cost_collective_t k, uint64_t calls, uint64_t n, size_t elem) {
  g->kind[k].calls += calls;
  g->kind[k].elems += calls * n;
  g->kind[k].bytes += calls * n * elem;
  g->bytes += calls * n * elem;
}

/* 1 for an MoE layer, else 0 (held_blocks' per: counts them). */
static double moe_layer(const aa_arch_t *a, int tp, int l) {
  (void)tp;
  return aa_arch_is_moe_layer(a, l) ? 1 : 0;
}

/* A block's LoRA adapter elements that every tensor rank holds whole: a
 * column target's A (r, in), a row target's B (out, r). */
static uint64_t lora_replicated(const aa_arch_t *a) {
  uint64_t n = 0;
  for (int t = 0; a->lora.r && t < AA_LORA_NTARGETS; t++) {
    int in, out, row;
    aa_lora_shape(a, t, 1, &in, &out, &row);
    if (a->lora.targets >> t & 1) n += (uint64_t)a->lora.r * (uint64_t)(row ? out : in);
  }
  return n;
}

/* The tensor group's collectives per step (cost.h) on place p: its
 * blocks, the embedding's calls on the first stage, the final
 * LayerNorm's and the cross-entropy's on the last. An MoE block's experts
 * are whole on every tensor rank at expert_tensor_parallel_size 1
 * (sizes.h), which computes them for all the tokens: its output and its
 * input's gradient are whole on each, so it has no MLP reduction, forward
 * (the fc projection's) or backward (the fc input gradient's): 2 fewer a
 * block, 1 fewer a recomputed one. With the experts split over the tensor
 * ranks (s->etp > 1; engine/model.h) the block sums its partial output
 * as a dense MLP does (an all-reduce, under sequence parallelism a
 * reduce-scatter; again when recomputed), its input gradient the same
 * way (N·C: under sequence parallelism the rank keeps its rows, a
 * reduce-scatter), and its routing weights' gradients with the shared
 * experts' gate's (N·k + C floats under shared_expert_gate) by one more. */
static void tensor_comm(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *p, uint64_t A,
                        aa_cost_group_t *g) {
  const uint64_t t = (uint64_t)s->degree[AA_AXIS_TENSOR], N = (uint64_t)aa_sizes_rank_tokens(a, s);
  const uint64_t C = (uint64_t)a->d_model, NC = N * C, e = p->first ? 1 : 0, f = p->last ? 1 : 0;
  int nb, nk;
  double nm, nmk;
  held_blocks(a, s, p, moe_layer, &nb, &nk, &nm, &nmk);
  const uint64_t L = (uint64_t)nb, k = (uint64_t)nk,
                 reduce = 4 * L + 2 * k - 2 * (uint64_t)nm - (uint64_t)nmk;
  const size_t f4 = sizeof(float);
  const uint64_t split = aa_sizes_etp(a, (int)t) > 1, outs = split * (uint64_t)(nm + nmk),
                 ins = split * (uint64_t)nm;
  if (split)
    add(g, AA_COST_ALL_REDUCE, A * ins, N * (uint64_t)a->moe.top_k + (a->moe.shared_expert_gate ? C : 0), f4);
  if (!s->sp) {
    add(g, AA_COST_ALL_REDUCE, A * (e + reduce + f + outs + ins), NC, f4);
  } else {
    add(g, AA_COST_REDUCE_SCATTER, A * (e + reduce + f + outs + ins), NC, f4);
    add(g, AA_COST_ALL_GATHER, A * (6 * L + 2 * f + e + 2 * k), NC, f4);
    if (!a->lora.r) { /* the LayerNorms' gradients (LoRA: frozen, none) */
      add(g, AA_COST_ALL_REDUCE, A * L, 4 * C, f4);
      add(g, AA_COST_ALL_REDUCE, A * f, 2 * C, f4);
    }
  }
  /* LoRA: the replicated halves' gradient terms summed (engine/model.h
   * aa_gpt_lora_reduce_grads) where the data group reduces the adapters'
   * gradient (engine/lora.c aa_lora_reduce): once a step, or after every
   * micro-batch at ZeRO 2-3 without a pipeline, whose schedule reduces
   * once. */
  if (a->lora.r) {
    const int each =
        aa_sizes_zero_stage(s->zero, aa_sizes_replicas(s)) >= 2 && s->degree[AA_AXIS_PIPELINE] == 1;
    add(g, AA_COST_ALL_REDUCE, each ? A : 1, L * lora_replicated(a), f4);
  }
  add(g, AA_COST_ALL_GATHER, A * f, 3 * N * t, f4); /* the cross-entropy's max, sum and target logit */
  add(g, AA_COST_ALL_REDUCE, 1, 1, f4);             /* the gradient norm */
}

/* Walks blocks [lo, hi) up or down with the one block slot of ZeRO stage
 * 3, which holds block *held: a gather each time it must hold another. */
static void walk(int lo, int hi, int up, int *held, uint64_t *gathers) {
  for (int i = 0; i < hi - lo; i++) {
    int l = up ? lo + i : hi - 1 - i;
    if (l != *held) ++*gathers, *held = l;
  }
}

/* The block gathers of ZeRO stage 3 on place p in a step: its passes in
 * the order of plan's rank p->stage (NULL at pp 1: forward and backward
 * of the whole model, A times). */
static uint64_t block_gathers(const aa_pp_place_t *p, const aa_pp_plan_t *plan, uint64_t A) {
  int held = -1;
  uint64_t n = 0;
  if (!plan) {
    for (uint64_t i = 0; i < A; i++) {
      walk(p->lo[0], p->hi[0], 1, &held, &n);
      walk(p->lo[0], p->hi[0], 0, &held, &n);
    }
    return n;
  }
  for (int i = 0; i < plan->n_ops[p->stage]; i++) {
    const aa_pp_op_t *op = &plan->ops[p->stage][i];
    if (op->kind == AA_PP_FORWARD || op->kind == AA_PP_BACKWARD)
      walk(p->lo[op->chunk], p->hi[op->chunk], op->kind == AA_PP_FORWARD, &held, &n);
  }
  return n;
}

int64_t aa_cost_expert_rows(const aa_moe_t *m, int64_t N) {
  if (m->experts < 1) return 0;
  const int64_t E = m->experts, slots = N * m->top_k, even = (slots + E - 1) / E;
  if (m->capacity_factor <= 0) return even;
  const int64_t cap = (int64_t)ceil((double)m->capacity_factor * (double)slots / (double)E);
  return cap < even ? cap : even;
}

/* Adds `calls` of collective k over each of unit u's pieces (sizes.h
 * aa_sizes_unit_pieces) on place p to the group that holds the piece: the
 * data group g, or for an MoE block's expert slices the expert-data group
 * ed (nothing over a group of one). An all-reduce moves the piece; the
 * others its padded chunks (the group's size times the chunk) in elements
 * of elem bytes. */
static void piece_comm(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *p, int u,
                       aa_cost_collective_t k, uint64_t calls, size_t elem, aa_cost_group_t *g,
                       aa_cost_group_t *ed) {
  aa_sizes_piece_t pc[AA_SIZES_PIECES_MAX];
  const int dp = aa_sizes_replicas(s),
            np = aa_sizes_unit_pieces(a, s->degree[AA_AXIS_TENSOR], s->ep, p, u, pc);
  for (int i = 0; i < np; i++) {
    const int w = aa_sizes_piece_ranks(&pc[i], dp, s->ep);
    if (!pc[i].n || w == 1 || !calls) continue;
    const uint64_t n = k == AA_COST_ALL_REDUCE ? pc[i].n : (uint64_t)w * aa_sizes_chunk(pc[i].n, w);
    add(pc[i].expert ? ed : g, k, calls, n, elem);
  }
}

/* The data group's collectives per step (cost.h, engine/optim.h) on place
 * p: only the units it holds, over the dp x cp replicas, a piece at a
 * time; under expert parallelism the expert slices over the expert-data
 * group ed. */
static void data_comm(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *p,
                      const aa_pp_plan_t *plan, uint64_t A, aa_cost_group_t *g, aa_cost_group_t *ed) {
  const int dp = aa_sizes_replicas(s), stage = aa_sizes_zero_stage(s->zero, dp), U = aa_sizes_units(a);
  const size_t f4 = sizeof(float);
  add(g, AA_COST_ALL_REDUCE, 1, 1, f4);                 /* the loss */
  if (stage >= 1) add(g, AA_COST_ALL_REDUCE, 1, 1, f4); /* the gradient norm */
  if (a->lora.r) {
    /* Only the adapters are reduced (the frozen base has no gradient):
     * their gradient once a step (stage 0 all-reduced; from 1 reduce-
     * scattered, at 2-3 every micro-batch), the updated slices gathered
     * back once a step into the whole copy the passes read (engine/lora.h;
     * the tail of fewer than dp elements every rank holds is left out). */
    aa_lora_sizes_t ls;
    aa_sizes_lora(a, s->degree[AA_AXIS_TENSOR], p->pp > 1 ? p : NULL, s->amp, stage, dp, &ls);
    if (stage == 0) {
      add(g, AA_COST_ALL_REDUCE, 1, ls.adapters, f4);
    } else {
      add(g, AA_COST_REDUCE_SCATTER, stage == 1 ? 1 : A, ls.adapters, f4);
      add(g, AA_COST_ALL_GATHER, 1, ls.adapters, f4);
    }
    (void)plan;
    (void)ed;
    (void)U;
    return;
  }
  for (int u = 0; u < U; u++) {
    if (stage == 0)
      piece_comm(a, s, p, u, AA_COST_ALL_REDUCE, 1, f4, g, ed);
    else
      piece_comm(a, s, p, u, AA_COST_REDUCE_SCATTER, stage == 1 ? 1 : A, f4, g, ed);
    if (stage == 1 || stage == 2) piece_comm(a, s, p, u, AA_COST_ALL_GATHER, 1, f4, g, ed);
  }
  if (stage == 3) {
    /* wte|wpe and lnf once a step where held; the blocks (each as the
     * first's pieces) as the passes walk them through their one slot. */
    const size_t e = aa_dtype_size(s->amp);
    for (int u = 0; u < U; u += U - 1)
      piece_comm(a, s, p, u, AA_COST_ALL_GATHER, 1, e, g, ed);
    piece_comm(a, s, NULL, 1, AA_COST_ALL_GATHER, block_gathers(p, plan, A), e, g, ed);
  }
}

/* The expert group's all-to-alls per step (cost.h, engine/moe_dispatch.c)
 * on place p: per micro-batch and MoE block one counts exchange and 4 row
 * moves, and 1 and 2 again for a recomputed one; the gradient norm's
 * all-reduce once. */
static void expert_comm(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *p, uint64_t A,
                        aa_cost_group_t *g) {
  int nb, nk;
  double nm, nmk;
  held_blocks(a, s, p, moe_layer, &nb, &nk, &nm, &nmk);
  const uint64_t ep = (uint64_t)s->ep, El = (uint64_t)(a->moe.experts / s->ep),
                 rows = ep * (uint64_t)aa_cost_expert_rows(&a->moe, aa_sizes_rank_tokens(a, s));
  const uint64_t m = (uint64_t)nm, mk = (uint64_t)nmk;
  add(g, AA_COST_ALL_TO_ALL, A * (m + mk), 2 * ep * El, sizeof(float));
  add(g, AA_COST_ALL_TO_ALL, A * (4 * m + 2 * mk), El * rows * (uint64_t)a->d_model, sizeof(float));
  add(g, AA_COST_ALL_REDUCE, 1, 1, sizeof(float));
}

/* The pipeline group's sends and receives per step (cost.h) on place p:
 * per micro-batch and chunk, the activations forward across each
 * boundary the chunk has in the storage dtype, their gradients back in
 * fp32. */
static void pipeline_comm(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *p, uint64_t A,
                          aa_cost_group_t *g) {
  const uint64_t N = (uint64_t)aa_sizes_rank_tokens(a, s);
  const uint64_t Ns = s->sp && s->degree[AA_AXIS_TENSOR] > 1 ? N / (uint64_t)s->degree[AA_AXIS_TENSOR] : N,
                 n = Ns * (uint64_t)a->d_model;
  const size_t es = aa_dtype_size(s->amp), f4 = sizeof(float);
  const int S = p->pp * p->vpp;
  for (int c = 0; c < p->vpp; c++) {
    const int k = c * p->pp + p->stage;
    if (k < S - 1) {
      add(g, AA_COST_SEND, A, n, es);
      add(g, AA_COST_RECV, A, n, f4);
    }
    if (k > 0) {
      add(g, AA_COST_RECV, A, n, es);
      add(g, AA_COST_SEND, A, n, f4);
    }
  }
}

/* The context group's ring steps per step (cost.h) on place p: per
 * micro-batch and block, cp - 1 forward, 2 cp - 2 backward and cp - 1
 * more for a recomputed block, each a send and a receive of the rank's
 * keys and values (the k|v columns of its q|k|v rows) in fp32; and per
 * micro-batch and MoE block the load-balancing sums' all-reduce (3 E
 * floats, engine/model.c moe_context_reduce) and, with a capacity factor,
 * the gather of every rank's slot counts per chunk and expert (cp 2B E
 * int32, moe_context_keep), again for a recomputed one. */
static void context_comm(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *p, uint64_t A,
                         aa_cost_group_t *g) {
  aa_tp_dims_t d;
  aa_sizes_tp(a, s->degree[AA_AXIS_TENSOR], &d);
  int nb, nk;
  double nm, nmk;
  held_blocks(a, s, p, moe_layer, &nb, &nk, &nm, &nmk);
  add(g, AA_COST_ALL_REDUCE, A * (uint64_t)(nm + nmk), 3 * (uint64_t)a->moe.experts, sizeof(float));
  if (a->moe.capacity_factor > 0)
    add(g, AA_COST_ALL_GATHER, A * (uint64_t)(nm + nmk),
        (uint64_t)s->degree[AA_AXIS_CONTEXT] * 2 * (uint64_t)s->micro_batch * (uint64_t)a->moe.experts,
        sizeof(int32_t));
  const uint64_t c = (uint64_t)s->degree[AA_AXIS_CONTEXT],
                 n = (uint64_t)aa_sizes_rank_tokens(a, s) * 2 * d.KVl;
  const uint64_t steps = A * ((uint64_t)nb * (3 * c - 3) + (uint64_t)nk * (c - 1));
  add(g, AA_COST_SEND, steps, n, sizeof(float));
  add(g, AA_COST_RECV, steps, n, sizeof(float));
}

void aa_cost_comm_stage(const aa_arch_t *arch, const aa_strategy_t *s, int accum, int stage,
                        aa_cost_comm_t *out) {
  memset(out, 0, sizeof *out);
  aa_arch_t split;
  arch = aa_sizes_set_etp(&split, arch, s);
  const uint64_t A = accum > 0 ? (uint64_t)accum : 1;
  out->data.ranks = aa_sizes_replicas(s);
  out->tensor.ranks = s->degree[AA_AXIS_TENSOR];
  out->pipeline.ranks = s->degree[AA_AXIS_PIPELINE];
  out->context.ranks = s->degree[AA_AXIS_CONTEXT];
  out->embedding.ranks = 1;
  const int ep = s->ep > 1 && arch->moe.experts > 0 ? s->ep : 1;
  out->expert.ranks = ep;
  out->expert_data.ranks = out->data.ranks / ep;
  aa_pp_place_t p;
  aa_pp_plan_t plan, *pl = NULL;
  /* Placed with A micro-batches, which checks that the schedule suits them
   * (from its memoised buffers); ZeRO 3's gathers follow the schedule's
   * order, which only the whole plan has. */
  if (aa_pp_place(arch, s, s->degree[AA_AXIS_PIPELINE] > 1 ? (int)A : 0, stage, &p)) return;
  if (s->degree[AA_AXIS_PIPELINE] > 1 && aa_sizes_zero_stage(s->zero, out->data.ranks) == 3) {
    if (aa_pp_plan(s->schedule, s->degree[AA_AXIS_PIPELINE], p.vpp, (int)A, &plan)) return;
    pl = &plan;
  }
  if (out->data.ranks > 1) data_comm(arch, s, &p, pl, A, &out->data, &out->expert_data);
  if (ep > 1) expert_comm(arch, s, &p, A, &out->expert);
  if (s->degree[AA_AXIS_TENSOR] > 1) tensor_comm(arch, s, &p, A, &out->tensor);
  if (s->degree[AA_AXIS_CONTEXT] > 1) context_comm(arch, s, &p, A, &out->context);
  if (s->degree[AA_AXIS_PIPELINE] > 1) {
    pipeline_comm(arch, s, &p, A, &out->pipeline);
    /* llama's head is untied: no second copy of wte to keep equal. */
    if ((p.first || p.last) && !aa_arch_is_llama(arch)) {
      out->embedding.ranks = 2;
      add(&out->embedding, AA_COST_ALL_REDUCE, 1, aa_sizes_unit_numel(arch, s->degree[AA_AXIS_TENSOR], 0),
          sizeof(float));
    }
    if (pl) aa_pp_plan_free(pl);
  }
}

static uint64_t comm_bytes(const aa_cost_comm_t *c) {
  return c->data.bytes + c->tensor.bytes + c->pipeline.bytes + c->embedding.bytes + c->context.bytes +
         c->expert.bytes + c->expert_data.bytes;
}

void aa_cost_comm(const aa_arch_t *arch, const aa_strategy_t *s, int accum, aa_cost_comm_t *out) {
  aa_cost_comm_stage(arch, s, accum, 0, out);
  for (int st = 1; st < s->degree[AA_AXIS_PIPELINE]; st++) {
    aa_cost_comm_t c;
    aa_cost_comm_stage(arch, s, accum, st, &c);
    if (comm_bytes(&c) > comm_bytes(out)) *out = c;
  }
}

double aa_cost_comm_ring_bytes(const aa_cost_group_t *g) {
  if (g->ranks < 2) return 0;
  const double t = g->ranks, share = (t - 1) / t;
  return share *
             (2.0 * (double)g->kind[AA_COST_ALL_REDUCE].bytes + (double)g->kind[AA_COST_ALL_GATHER].bytes +
              (double)g->kind[AA_COST_REDUCE_SCATTER].bytes + (double)g->kind[AA_COST_ALL_TO_ALL].bytes) +
         (double)g->kind[AA_COST_SEND].bytes;
}

void aa_cost_group_describe(const aa_cost_group_t *g, char *out, size_t n) {
  static const char *const names[AA_COST_COLLECTIVES] = {"all-reduce", "all-gather", "reduce-scatter",
                                                         "send",       "receive",    "all-to-all"};
  size_t o = 0;
  if (n == 0) return;
  out[0] = '\0';
  for (int k = 0; k < AA_COST_COLLECTIVES && o < n; k++) {
    if (!g->kind[k].calls) continue;
    char b[32];
    o += (size_t)snprintf(out + o, n - o, "%s%llu %s%s (%s)", o ? ", " : "",
                          (unsigned long long)g->kind[k].calls, names[k], g->kind[k].calls == 1 ? "" : "s",
                          aa_mem_fmt(b, (size_t)g->kind[k].bytes));
  }
  if (!o) snprintf(out, n, "nothing");
}

int aa_cost_dominated(const aa_strategy_t *a, const aa_strategy_t *b, int cuda, char *why, size_t why_len) {
  /* Every axis's degree, the context's included. */
  if (memcmp(a->degree, b->degree, sizeof a->degree) || a->sp != b->sp || a->micro_batch != b->micro_batch ||
      (a->ep > 1 ? a->ep : 1) != (b->ep > 1 ? b->ep : 1))
    return 0;
  if (a->ckpt == AA_CKPT_FULL && b->ckpt == AA_CKPT_FULL && a->ckpt_layers != b->ckpt_layers) return 0;
  /* Each knob: 0 = the same, 1 = a costlier, -1 = not comparable or cheaper. */
  int ckpt = a->ckpt == b->ckpt ? 0 : a->ckpt > b->ckpt ? 1 : -1;
  int zero = a->zero == b->zero ? 0 : a->zero == 3 && b->zero == 2 ? 1 : -1;
  int amp = a->amp == b->amp ? 0 : !cuda && b->amp == AA_F32 ? 1 : -1;
  if (ckpt < 0 || zero < 0 || amp < 0 || ckpt + zero + amp == 0) return 0;
  if (why && why_len) {
    size_t o = 0;
    why[0] = 0;
    if (ckpt && o < why_len)
      o += (size_t)snprintf(why + o, why_len - o, "%s checkpointing instead of %s",
                            aa_ckpt_mode_name(a->ckpt), aa_ckpt_mode_name(b->ckpt));
    if (zero && o < why_len)
      o += (size_t)snprintf(why + o, why_len - o, "%sZeRO 3 instead of 2", o ? ", " : "");
    if (amp && o < why_len)
      snprintf(why + o, why_len - o, "%s%s storage on a CPU instead of fp32", o ? ", " : "",
               a->amp == AA_BF16 ? "bf16" : "fp16");
  }
  return 1;
}
