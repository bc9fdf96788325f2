/* The cost model's arithmetic (cost.h). What a rank holds is sizes.h's,
 * the same figures the engine allocates by. */
#include "cost.h"

#include <stdio.h>
#include <string.h>

#include "sizes.h"

/* Elements of unit u on one rank of s, its tensor slice included: the one
 * call to aa_sizes_unit_numel here, which gains the tensor degree when the
 * engine learns tensor parallelism (issue 17). */
static size_t rank_unit_numel(const aa_arch_t *a, const aa_strategy_t *s, int u) {
  (void)s;
  return aa_sizes_unit_numel(a, u);
}

void aa_cost_memory(const aa_arch_t *arch, const aa_strategy_t *s, aa_cost_mem_t *out) {
  memset(out, 0, sizeof *out);
  aa_sizes_rank(arch, s, out->bytes);
  for (int k = 0; k < AA_MEM_NKINDS; k++) out->total += out->bytes[k];
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
  double params = 0;
  for (int u = 0; u < aa_sizes_units(arch); u++)
    params += (double)rank_unit_numel(arch, s, u);
  return 6.0 * params + 12.0 * L * C * T / tp +
         recomputed_blocks(arch, s) * (2.0 * (double)rank_unit_numel(arch, s, 1) + 4.0 * C * T / tp);
}

double aa_cost_min_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s) {
  const double C = arch->d_model, F = arch->d_ff, L = arch->n_layer, V = arch->vocab_size;
  const double block = 4 * C * C + 2 * F * C; /* qkv 3C^2, proj C^2, fc and fcproj FC each */
  return (6.0 * (L * block + V * C) + 2.0 * block * recomputed_blocks(arch, s)) / s->tp;
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
