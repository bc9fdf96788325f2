/* Per-rank sizes (sizes.h): the one place the engine's allocations and the
 * cost model's predictions come from. */
#include "sizes.h"

#include <string.h>

/* --- parameter units ----------------------------------------------------------------- */

int aa_sizes_units(const aa_arch_t *a) { return a->n_layer + 2; }

/* ln1 2C, qkv 3C^2 + 3C, proj C^2 + C, ln2 2C, fc FC + F, fcproj FC + C. */
static size_t block_numel(const aa_arch_t *a) {
  const size_t C = (size_t)a->d_model, F = (size_t)a->d_ff;
  return 4 * C * C + 2 * F * C + 9 * C + F;
}

size_t aa_sizes_unit_numel(const aa_arch_t *a, int u) {
  const size_t C = (size_t)a->d_model;
  if (u == 0) return ((size_t)a->vocab_size + (size_t)a->seq_len) * C;
  return u <= a->n_layer ? block_numel(a) : 2 * C;
}

int aa_sizes_zero_stage(int zero, int dp) { return dp > 1 ? zero : 0; }

size_t aa_sizes_chunk(size_t n, int dp) { return (n + (size_t)dp - 1) / (size_t)dp; }

int aa_sizes_slot(const aa_arch_t *a, int u) { return u == 0 ? 0 : u == aa_sizes_units(a) - 1 ? 2 : 1; }

/* --- state ----------------------------------------------------------------------------- */

static aa_buf_size_t buf(int allocated, size_t numel, aa_dtype_t dtype, aa_mem_kind_t kind) {
  return (aa_buf_size_t){allocated ? numel : 0, dtype, kind};
}

void aa_sizes_model(const aa_arch_t *a, aa_dtype_t amp, int zero, aa_model_sizes_t *out) {
  const size_t n = (size_t)aa_arch_param_count(a);
  const int mixed = amp != AA_F32;
  /* Under amp the fp32 parameters are the master weights, which the ZeRO
   * accounting counts with the optimizer state; the 16-bit copy is what
   * the model computes with. */
  out->params = buf(mixed ? zero == 0 : zero < 3, n, AA_F32, mixed ? AA_MEM_OPTIM : AA_MEM_PARAMS);
  out->grads = buf(zero < 2, n, AA_F32, AA_MEM_GRADS);
  out->params16 = buf(mixed && zero < 3, n, amp, AA_MEM_PARAMS);
}

void aa_sizes_zero(const aa_arch_t *a, aa_dtype_t amp, int zero, int dp, aa_zero_sizes_t *out) {
  memset(out, 0, sizeof *out);
  /* The largest chunk c, and the largest padded unit (dp * c) of each slot;
   * dp times the largest chunk is the widest padded unit of all. */
  size_t max_chunk = 0, padded[3] = {0};
  for (int u = 0; u < aa_sizes_units(a); u++) {
    size_t c = aa_sizes_chunk(aa_sizes_unit_numel(a, u), dp);
    int k = aa_sizes_slot(a, u);
    out->shard += c;
    if (c > max_chunk) max_chunk = c;
    if ((size_t)dp * c > padded[k]) padded[k] = (size_t)dp * c;
  }
  const int mixed = amp != AA_F32;
  const size_t S = out->shard;
  out->moment = buf(1, zero ? S : (size_t)aa_arch_param_count(a), AA_F32, AA_MEM_OPTIM);
  out->gshard = buf(zero >= 2, S, AA_F32, AA_MEM_GRADS);
  out->master = buf(zero >= 1 && mixed, S, AA_F32, AA_MEM_OPTIM);
  out->pshard = buf(zero == 3, S, amp, AA_MEM_PARAMS);
  out->piece = buf(zero >= 1, max_chunk, AA_F32, AA_MEM_WORKSPACE);
  out->padded = buf(zero == 1 || zero == 2, (size_t)dp * max_chunk, AA_F32, AA_MEM_WORKSPACE);
  out->scalars = buf(dp > 1, 16, AA_F32, AA_MEM_WORKSPACE);
  for (int k = 0; k < 3; k++) {
    out->gunit[k] = buf(zero >= 2, padded[k], AA_F32, AA_MEM_WORKSPACE);
    out->punit[k] = buf(zero == 3, padded[k], AA_F32, AA_MEM_WORKSPACE);
    out->punit16[k] = buf(zero == 3 && mixed, padded[k], amp, AA_MEM_WORKSPACE);
  }
}

/* --- activations and workspace -------------------------------------------------------- */

size_t aa_sizes_field_numel(const aa_arch_t *a, int B, int T, aa_act_field_t f) {
  const size_t N = (size_t)B * (size_t)T, C = (size_t)a->d_model, F = (size_t)a->d_ff;
  switch (f) {
  case AA_ACT_QKV: return 3 * N * C;
  case AA_ACT_FCH:
  case AA_ACT_FCHG: return N * F;
  default: return N * C;
  }
}

int aa_sizes_block_full(aa_ckpt_mode_t ckpt, int ckpt_layers, int l) {
  return ckpt == AA_CKPT_FULL && (ckpt_layers == 0 || l < ckpt_layers);
}

/* Whether block l keeps field f for backward. A fully checkpointed block
 * keeps only its output, which is the next block's input; a selective one
 * drops the GELU output, which backward recomputes from its input. */
static int kept(aa_ckpt_mode_t ckpt, int ckpt_layers, int l, int f) {
  if (aa_sizes_block_full(ckpt, ckpt_layers, l)) return f == AA_ACT_RES3;
  return ckpt != AA_CKPT_SELECTIVE || f != AA_ACT_FCHG;
}

/* Takes the next buffer of `bytes` from an allocation of *size bytes so
 * far: its offset, with every buffer a whole number of 64-byte slices. */
static size_t take(size_t *size, size_t bytes) {
  size_t at = *size;
  *size += (bytes + 63) & ~(size_t)63;
  return at;
}

void aa_sizes_acts(const aa_arch_t *a, int B, int T, aa_dtype_t amp, aa_ckpt_mode_t ckpt, int ckpt_layers,
                   aa_act_layout_t *o, aa_act_block_t *blocks) {
  const size_t C = (size_t)a->d_model, V = (size_t)a->vocab_size, F = (size_t)a->d_ff;
  const size_t N = (size_t)B * (size_t)T, es = aa_dtype_size(amp), f4 = sizeof(float);
  const size_t stats = (4 + (size_t)a->n_head) * N * f4;
  const int mixed = amp != AA_F32;
  int any_full = 0, need[AA_ACT_FIELDS] = {0};
  size_t st = 0, ws = 0;
  memset(o, 0xff, sizeof *o); /* every offset AA_SIZES_NONE (all bits set) until taken */
  o->encoded = take(&st, N * C * es);
  for (int l = 0; l < a->n_layer; l++) {
    aa_act_block_t b;
    for (int f = 0; f < AA_ACT_FIELDS; f++) {
      b.field[f] = AA_SIZES_NONE;
      if (kept(ckpt, ckpt_layers, l, f)) b.field[f] = take(&st, aa_sizes_field_numel(a, B, T, f) * es);
      else need[f] = 1;
    }
    b.stats = AA_SIZES_NONE;
    if (aa_sizes_block_full(ckpt, ckpt_layers, l)) any_full = 1;
    else b.stats = take(&st, stats);
    if (blocks) blocks[l] = b;
  }
  o->lnf = take(&st, N * C * f4);
  o->lnf_stats = take(&st, 2 * N * f4);
  o->logits = take(&st, N * V * f4);
  o->losses = take(&st, N * f4);

  /* Under amp every field is computed in fp32 staging; in fp32 only the
   * fields some block does not keep need a place to be computed in. The
   * block output always has its place: the store, or under amp ws_res. */
  for (int f = 0; f < AA_ACT_FIELDS; f++)
    if (f != AA_ACT_RES3 && (mixed || need[f]))
      o->ws_field[f] = take(&ws, aa_sizes_field_numel(a, B, T, f) * f4);
  if (mixed) {
    o->ws_res[0] = take(&ws, N * C * f4);
    o->ws_res[1] = take(&ws, N * C * f4);
    o->wblock = take(&ws, block_numel(a) * f4);
    o->wpre = take(&ws, aa_sizes_unit_numel(a, 0) * f4);
    o->wpost = take(&ws, 2 * C * f4);
  }
  if (any_full) o->ws_stats = take(&ws, stats);
  o->dres = take(&ws, N * C * f4);
  o->dln = take(&ws, N * C * f4);
  o->dqkv = take(&ws, 3 * N * C * f4);
  o->datty = take(&ws, N * C * f4);
  o->dfch = take(&ws, N * F * f4);
  o->dfch_gelu = take(&ws, N * F * f4);
  o->acts = st;
  o->workspace = ws;
}

/* --- one rank -------------------------------------------------------------------------- */

static void add(size_t bytes[AA_MEM_NKINDS], const aa_buf_size_t *b) {
  bytes[b->kind] += b->numel * aa_dtype_size(b->dtype);
}

void aa_sizes_rank(const aa_arch_t *a, const aa_strategy_t *s, size_t bytes[AA_MEM_NKINDS]) {
  memset(bytes, 0, AA_MEM_NKINDS * sizeof bytes[0]);
  /* ZeRO shards over the data group only. */
  const int zero = aa_sizes_zero_stage(s->zero, s->dp);
  aa_model_sizes_t m;
  aa_sizes_model(a, s->amp, zero, &m);
  add(bytes, &m.params);
  add(bytes, &m.grads);
  add(bytes, &m.params16);
  aa_zero_sizes_t z;
  aa_sizes_zero(a, s->amp, zero, s->dp, &z);
  const aa_buf_size_t *each[] = {&z.moment, &z.moment, &z.gshard, &z.master, &z.pshard, &z.piece, &z.padded,
                                 &z.scalars};
  for (size_t i = 0; i < sizeof each / sizeof each[0]; i++) add(bytes, each[i]);
  for (int k = 0; k < 3; k++) {
    add(bytes, &z.gunit[k]);
    add(bytes, &z.punit[k]);
    add(bytes, &z.punit16[k]);
  }
  aa_act_layout_t l;
  aa_sizes_acts(a, s->micro_batch, a->seq_len, s->amp, s->ckpt, s->ckpt_layers, &l, NULL);
  bytes[AA_MEM_ACTS] += l.acts;
  bytes[AA_MEM_WORKSPACE] += l.workspace;
}
