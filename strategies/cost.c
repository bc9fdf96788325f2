/* The cost model's arithmetic (cost.h). What a rank holds is sizes.h's,
 * the same figures the engine allocates by. */
#include "cost.h"

#include <stdio.h>
#include <string.h>

#include "sizes.h"

void aa_cost_memory_stage(const aa_arch_t *arch, const aa_strategy_t *s, int m, int stage, aa_cost_mem_t *out) {
  memset(out, 0, sizeof *out);
  if (aa_sizes_rank(arch, s, m, stage, out->bytes)) memset(out->bytes, 0, sizeof out->bytes);
  for (int k = 0; k < AA_MEM_NKINDS; k++) out->total += out->bytes[k];
}

void aa_cost_memory(const aa_arch_t *arch, const aa_strategy_t *s, int m, aa_cost_mem_t *out) {
  aa_cost_memory_stage(arch, s, m, 0, out);
  for (int st = 1; st < s->pp; st++) {
    aa_cost_mem_t c;
    aa_cost_memory_stage(arch, s, m, st, &c);
    if (c.total > out->total) *out = c;
  }
}

void aa_cost_mem_describe(const aa_cost_mem_t *m, char *out, size_t n) {
  char b[AA_MEM_NKINDS + 1][32];
  for (int k = 0; k < AA_MEM_NKINDS; k++) aa_mem_fmt(b[k], m->bytes[k]);
  snprintf(out, n, "%s (params %s, grads %s, optim %s, acts %s, workspace %s)", aa_mem_fmt(b[AA_MEM_NKINDS], m->total),
           b[AA_MEM_PARAMS], b[AA_MEM_GRADS], b[AA_MEM_OPTIM], b[AA_MEM_ACTS], b[AA_MEM_WORKSPACE]);
}

/* The blocks whose forward full checkpointing runs again (0 otherwise). */
static double recomputed_blocks(const aa_arch_t *arch, const aa_strategy_t *s) {
  if (s->ckpt != AA_CKPT_FULL) return 0;
  return s->ckpt_layers > 0 && s->ckpt_layers < arch->n_layer ? s->ckpt_layers : arch->n_layer;
}

double aa_cost_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s) {
  const double C = arch->d_model, T = arch->seq_len, L = arch->n_layer, tp = s->tp;
  return 6.0 * (double)aa_sizes_params(arch, s->tp) + 12.0 * L * C * T / tp +
         recomputed_blocks(arch, s) * (2.0 * (double)aa_sizes_unit_numel(arch, s->tp, 1) + 4.0 * C * T / tp);
}

double aa_cost_min_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s) {
  const double C = arch->d_model, F = arch->d_ff, L = arch->n_layer, V = arch->vocab_size;
  const double block = 4 * C * C + 2 * F * C; /* qkv 3C^2, proj C^2, fc and fcproj FC each */
  return (6.0 * (L * block + V * C) + 2.0 * block * recomputed_blocks(arch, s)) / s->tp;
}

/* --- collectives (cost.h) ------------------------------------------------------------------ */

/* Adds `calls` calls of size n elements of `elem` bytes each to kind k of g. */
static void add(aa_cost_group_t *g, aa_cost_collective_t k, uint64_t calls, uint64_t n, size_t elem) {
  g->kind[k].calls += calls;
  g->kind[k].elems += calls * n;
  g->kind[k].bytes += calls * n * elem;
  g->bytes += calls * n * elem;
}

/* The tensor group's collectives per step (cost.h). */
static void tensor_comm(const aa_arch_t *a, const aa_strategy_t *s, uint64_t A, aa_cost_group_t *g) {
  const uint64_t t = (uint64_t)s->tp, N = (uint64_t)s->micro_batch * (uint64_t)a->seq_len;
  const uint64_t C = (uint64_t)a->d_model, L = (uint64_t)a->n_layer, NC = N * C;
  const uint64_t k = (uint64_t)recomputed_blocks(a, s);
  const size_t f4 = sizeof(float);
  if (!s->sp) {
    add(g, AA_COST_ALL_REDUCE, A * (1 + 4 * L + 1 + 2 * k), NC, f4);
  } else {
    add(g, AA_COST_REDUCE_SCATTER, A * (1 + 4 * L + 1 + 2 * k), NC, f4);
    add(g, AA_COST_ALL_GATHER, A * (6 * L + 2 + 1 + 2 * k), NC, f4);
    add(g, AA_COST_ALL_REDUCE, A * L, 4 * C, f4);
    add(g, AA_COST_ALL_REDUCE, A, 2 * C, f4);
  }
  add(g, AA_COST_ALL_GATHER, A, 3 * N * t, f4); /* the cross-entropy's max, sum and target logit */
  add(g, AA_COST_ALL_REDUCE, 1, 1, f4);         /* the gradient norm */
}

/* The data group's collectives per step (cost.h, engine/optim.h). */
static void data_comm(const aa_arch_t *a, const aa_strategy_t *s, uint64_t A, aa_cost_group_t *g) {
  const int dp = s->dp, stage = aa_sizes_zero_stage(s->zero, dp), U = aa_sizes_units(a);
  const uint64_t L = (uint64_t)a->n_layer;
  const size_t f4 = sizeof(float);
  add(g, AA_COST_ALL_REDUCE, 1, 1, f4);                 /* the loss */
  if (stage >= 1) add(g, AA_COST_ALL_REDUCE, 1, 1, f4); /* the gradient norm */
  for (int u = 0; u < U; u++) {
    const uint64_t n = aa_sizes_unit_numel(a, s->tp, u), padded = (uint64_t)dp * aa_sizes_chunk(n, dp);
    if (stage == 0)
      add(g, AA_COST_ALL_REDUCE, 1, n, f4);
    else
      add(g, AA_COST_REDUCE_SCATTER, stage == 1 ? 1 : A, padded, f4);
    if (stage == 1 || stage == 2) add(g, AA_COST_ALL_GATHER, 1, padded, f4);
  }
  if (stage == 3) {
    /* Each unit once in the first forward; the blocks (one slot) again as
     * the passes walk them: all but the last in the first backward, all
     * but one in every later forward and backward. */
    const size_t e = aa_dtype_size(s->amp);
    for (int u = 0; u < U; u++) {
      const uint64_t n = aa_sizes_unit_numel(a, s->tp, u);
      add(g, AA_COST_ALL_GATHER, 1, (uint64_t)dp * aa_sizes_chunk(n, dp), e);
    }
    const uint64_t nb = aa_sizes_unit_numel(a, s->tp, 1), again = (L - 1) + 2 * (A - 1) * (L - 1);
    add(g, AA_COST_ALL_GATHER, again, (uint64_t)dp * aa_sizes_chunk(nb, dp), e);
  }
}

void aa_cost_comm(const aa_arch_t *arch, const aa_strategy_t *s, int accum, aa_cost_comm_t *out) {
  memset(out, 0, sizeof *out);
  const uint64_t A = accum > 0 ? (uint64_t)accum : 1;
  out->data.ranks = s->dp;
  out->tensor.ranks = s->tp;
  if (s->dp > 1) data_comm(arch, s, A, &out->data);
  if (s->tp > 1) tensor_comm(arch, s, A, &out->tensor);
}

double aa_cost_comm_ring_bytes(const aa_cost_group_t *g) {
  if (g->ranks < 2) return 0;
  const double t = g->ranks, share = (t - 1) / t;
  return share * (2.0 * (double)g->kind[AA_COST_ALL_REDUCE].bytes +
                  (double)g->kind[AA_COST_ALL_GATHER].bytes + (double)g->kind[AA_COST_REDUCE_SCATTER].bytes);
}

void aa_cost_group_describe(const aa_cost_group_t *g, char *out, size_t n) {
  static const char *const names[AA_COST_COLLECTIVES] = {"all-reduce", "all-gather", "reduce-scatter"};
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
  if (a->dp != b->dp || a->tp != b->tp || a->pp != b->pp || a->sp != b->sp || a->micro_batch != b->micro_batch)
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
      o += (size_t)snprintf(why + o, why_len - o, "%s checkpointing instead of %s", aa_ckpt_mode_name(a->ckpt),
                            aa_ckpt_mode_name(b->ckpt));
    if (zero && o < why_len)
      o += (size_t)snprintf(why + o, why_len - o, "%sZeRO 3 instead of 2", o ? ", " : "");
    if (amp && o < why_len)
      snprintf(why + o, why_len - o, "%s%s storage on a CPU instead of fp32", o ? ", " : "",
               a->amp == AA_BF16 ? "bf16" : "fp16");
  }
  return 1;
}
