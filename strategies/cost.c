/* The cost model's arithmetic (cost.h). The activation layout mirrors
 * engine/model.c's layout(): tests/test_cost.c compares the two on a grid
 * of shapes and options, and a dry run's accounting against the total. */
#include "cost.h"

#include <stdio.h>
#include <string.h>

/* The engine carves every buffer in 64-byte slices. */
static size_t slice(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* Parameters of one block: ln1 2C, qkv 3C^2 + 3C, proj C^2 + C, ln2 2C,
 * fc FC + F, fcproj FC + C (the engine's unit of ZeRO sharding, and what
 * amp widens into its workspace one block at a time). */
static size_t block_numel(const aa_arch_t *a) {
  const size_t C = a->d_model, F = a->d_ff;
  return 4 * C * C + 2 * F * C + 9 * C + F;
}

static int block_full(aa_ckpt_mode_t ckpt, int ckpt_layers, int l) {
  return ckpt == AA_CKPT_FULL && (ckpt_layers == 0 || l < ckpt_layers);
}

void aa_cost_act_bytes(const aa_arch_t *arch, int B, int T, aa_dtype_t amp, aa_ckpt_mode_t ckpt, int ckpt_layers,
                       size_t *acts, size_t *workspace) {
  const size_t C = arch->d_model, V = arch->vocab_size, F = arch->d_ff, N = (size_t)B * T, NH = arch->n_head;
  const size_t es = aa_dtype_size(amp), f4 = sizeof(float);
  const size_t stats = (4 + NH) * N * f4; /* ln1/ln2 mean and rstd, the attention logsumexp */
  /* A block's fields: ln1, qkv, attention out, residual, ln2, fc, GELU,
   * block output; a checkpointed block keeps only its output, a
   * selective one all but the GELU output. */
  const size_t field[8] = {N * C, 3 * N * C, N * C, N * C, N * C, N * F, N * F, N * C};
  enum { GELU = 6, OUT = 7 };
  size_t st = slice(N * C * es), ws = 0;
  int any_full = 0, need[8] = {0};
  for (int l = 0; l < arch->n_layer; l++) {
    int full = block_full(ckpt, ckpt_layers, l);
    for (int f = 0; f < 8; f++) {
      int kept = full ? f == OUT : ckpt == AA_CKPT_SELECTIVE ? f != GELU : 1;
      if (kept) st += slice(field[f] * es);
      else need[f] = 1;
    }
    if (full) any_full = 1;
    else st += slice(stats);
  }
  st += slice(N * C * f4) + slice(2 * N * f4) + slice(N * V * f4) + slice(N * f4); /* lnf, its stats, logits, losses */
  /* fp32 staging for every field under amp, else for those some block does
   * not keep; the block output always has its place. */
  for (int f = 0; f < OUT; f++)
    if (amp != AA_F32 || need[f]) ws += slice(field[f] * f4);
  if (amp != AA_F32)
    ws += 2 * slice(N * C * f4) + slice(block_numel(arch) * f4) +
          slice((V + (size_t)arch->seq_len) * C * f4) + slice(2 * C * f4);
  if (any_full) ws += slice(stats);
  ws += 3 * slice(N * C * f4) + slice(3 * N * C * f4) + 2 * slice(N * F * f4); /* activation gradients */
  *acts = st;
  *workspace = ws;
}

/* The elements of one rank's ZeRO shard: each unit (the embeddings, each
 * block, the final LayerNorm) is cut in `world` equal chunks, rounded up. */
static size_t shard_numel(const aa_arch_t *a, int world) {
  const size_t C = a->d_model, w = (size_t)world;
  const size_t pre = ((size_t)a->vocab_size + (size_t)a->seq_len) * C, block = block_numel(a);
  return (pre + w - 1) / w + (size_t)a->n_layer * ((block + w - 1) / w) + (2 * C + w - 1) / w;
}

void aa_cost_memory(const aa_arch_t *arch, const aa_strategy_t *s, aa_cost_mem_t *out) {
  memset(out, 0, sizeof *out);
  const size_t n = (size_t)aa_arch_param_count(arch), f4 = sizeof(float);
  const int world = s->dp * s->tp * s->pp, zero = world > 1 ? s->zero : 0; /* one rank has nothing to shard */
  const int amp = s->amp != AA_F32;
  const size_t shard = world > 1 ? shard_numel(arch, world) : n;
  size_t *b = out->bytes;
  /* Flat buffers are allocated whole, not in slices. The model
   * (engine/model.c aa_gpt_create): fp32 parameters (the master copy
   * under amp, counted as optimizer state) unless sharded, gradients below
   * stage 2, the 16-bit copy under amp below stage 3. */
  const size_t e16 = aa_dtype_size(s->amp);
  if (amp ? zero == 0 : zero < 3) b[amp ? AA_MEM_OPTIM : AA_MEM_PARAMS] += n * f4;
  if (zero < 2) b[AA_MEM_GRADS] += n * f4;
  if (amp && zero < 3) b[AA_MEM_PARAMS] += n * e16;
  /* The optimizer (engine/optim.c): AdamW's two moments over the shard
   * (everything at stage 0), the gradient shard from stage 2, the fp32
   * master shard under amp from stage 1 (in fp32 the fp32 parameter shard
   * at stage 3), the 16-bit parameter shard at stage 3 under amp. */
  b[AA_MEM_OPTIM] += 2 * (zero ? shard : n) * f4;
  if (zero >= 2) b[AA_MEM_GRADS] += shard * f4;
  if (zero == 3 || (zero >= 1 && amp)) b[amp ? AA_MEM_OPTIM : AA_MEM_PARAMS] += shard * f4;
  if (zero == 3 && amp) b[AA_MEM_PARAMS] += shard * e16;
  aa_cost_act_bytes(arch, s->micro_batch, arch->seq_len, s->amp, s->ckpt, s->ckpt_layers, &b[AA_MEM_ACTS],
                    &b[AA_MEM_WORKSPACE]);
  for (int k = 0; k < AA_MEM_NKINDS; k++) out->total += b[k];
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
  const double C = arch->d_model, T = arch->seq_len, L = arch->n_layer;
  return 6.0 * (double)aa_arch_param_count(arch) + 12.0 * L * C * T +
         recomputed_blocks(arch, s) * (2.0 * (double)block_numel(arch) + 4.0 * C * T);
}

double aa_cost_min_flops_per_token(const aa_arch_t *arch, const aa_strategy_t *s) {
  const double C = arch->d_model, F = arch->d_ff, L = arch->n_layer, V = arch->vocab_size;
  const double block = 4 * C * C + 2 * F * C; /* qkv 3C^2, proj C^2, fc and fcproj FC each */
  return 6.0 * (L * block + V * C) + 2.0 * block * recomputed_blocks(arch, s);
}

int aa_cost_dominated(const aa_strategy_t *a, const aa_strategy_t *b, int cuda, char *why, size_t why_len) {
  if (a->dp != b->dp || a->tp != b->tp || a->pp != b->pp || a->micro_batch != b->micro_batch) return 0;
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
