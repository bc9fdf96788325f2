/* Per-rank sizes (sizes.h): the one place the engine's allocations and the
 * cost model's predictions come from. */
#include "sizes.h"

#include <math.h>
#include <string.h>

/* --- parameter units ----------------------------------------------------------------- */

void aa_sizes_tp(const aa_arch_t *a, int tp, aa_tp_dims_t *d) {
  if (tp < 1) tp = 1;
  *d = (aa_tp_dims_t){.tp = tp,
                      .C = a->d_model,
                      .NH = a->n_head / tp,
                      .Cl = a->d_model / tp,
                      .F = a->d_ff / tp,
                      .V = a->vocab_size,
                      .Vl = (a->vocab_size + tp - 1) / tp};
  d->llama = aa_arch_is_llama(a);
  d->qkvb = d->llama && a->qkv_bias;
  d->HS = a->d_model / a->n_head;
  d->NKV = aa_arch_kv_heads(a) / tp;
  d->KVl = d->NKV * d->HS;
  d->QKV = d->Cl + 2 * d->KVl;
  d->FH = d->llama ? 2 * d->F : d->F;
  d->Fe = a->moe.d_ff_expert / aa_sizes_etp(a, tp);
}

int aa_sizes_etp(const aa_arch_t *a, int tp) { return a->moe.etp > 1 && tp > 1 ? tp : 1; }

const aa_arch_t *aa_sizes_set_etp(aa_arch_t *copy, const aa_arch_t *a, const aa_strategy_t *s) {
  const int want = s->etp > 1 ? s->etp : 0;
  if ((a->moe.etp > 1 ? a->moe.etp : 0) == want) return a;
  *copy = *a;
  copy->moe.etp = want;
  return copy;
}

void aa_sizes_vocab_rows(const aa_arch_t *a, int tp, int r, int *lo, int *valid) {
  aa_tp_dims_t d;
  aa_sizes_tp(a, tp, &d);
  int from = r * d.Vl, left = d.V - from;
  *lo = from;
  *valid = left < 0 ? 0 : left < d.Vl ? left : d.Vl;
}

int aa_sizes_units(const aa_arch_t *a) { return a->n_layer + 2; }

/* ln1 2C, qkv 3 Cl C + 3 Cl, proj C Cl + C, ln2 2C, fc F C + F, fcproj C F
 * + C: the column-parallel layers (qkv, fc) split their rows and biases,
 * the row-parallel ones (proj, fcproj) their columns, and keep their
 * biases whole. */
static size_t block_numel(const aa_tp_dims_t *d) {
  const size_t C = (size_t)d->C, Cl = (size_t)d->Cl, F = (size_t)d->F;
  /* llama: ln1 C, q|k|v QKV C (and their biases QKV, Qwen2's), proj C Cl, ln2 C, gate|up 2 F C,
   * down C F. */
  if (d->llama) return 2 * C + (size_t)d->QKV * (C + (d->qkvb ? 1 : 0)) + C * Cl + 3 * F * C;
  return 4 * C * Cl + 2 * F * C + 6 * C + 3 * Cl + F;
}

/* An MoE block's (aa_arch_is_moe_layer) on a rank of an expert group of
 * ep: the llama block without its SwiGLU MLP (3 F C), with the router E C,
 * the rank's E / ep routed experts and the S shared experts, 3 Fe C each
 * (Fe the rank's share of their width: d_ff_expert / tp when the experts
 * are split over the tensor ranks, else all of it), and the shared
 * experts' gate C. */
static size_t moe_block_numel(const aa_arch_t *a, const aa_tp_dims_t *d, int ep) {
  const aa_moe_t *m = &a->moe;
  const size_t El = (size_t)(m->experts / (ep > 1 ? ep : 1)), C = (size_t)d->C;
  const size_t mlp = (size_t)m->experts * C + (El + (size_t)m->shared_experts) * 3 * (size_t)d->Fe * C +
                     (m->shared_experts && m->shared_expert_gate ? C : 0);
  return block_numel(d) - 3 * (size_t)d->F * C + mlp;
}

/* Block l's parameters on a rank of d. */
static size_t layer_numel(const aa_arch_t *a, const aa_tp_dims_t *d, int ep, int l) {
  return aa_arch_is_moe_layer(a, l) ? moe_block_numel(a, d, ep) : block_numel(d);
}

/* The largest block's parameters (the amp staging of one block's weights). */
static size_t max_block_numel(const aa_arch_t *a, const aa_tp_dims_t *d) {
  size_t most = block_numel(d);
  if (aa_arch_moe_layers(a) && moe_block_numel(a, d, 1) > most) most = moe_block_numel(a, d, 1);
  return most;
}

size_t aa_sizes_unit_numel(const aa_arch_t *a, int tp, int u) { return aa_sizes_unit_numel_ep(a, tp, 1, u); }

size_t aa_sizes_unit_numel_ep(const aa_arch_t *a, int tp, int ep, int u) {
  aa_tp_dims_t d;
  aa_sizes_tp(a, tp, &d);
  /* llama: wte alone (no position table); lnf.w and the untied head's slice. */
  if (u == 0) return ((size_t)d.Vl + (d.llama ? 0 : (size_t)a->seq_len)) * (size_t)d.C;
  if (u <= a->n_layer) return layer_numel(a, &d, ep, u - 1);
  return d.llama ? ((size_t)d.Vl + 1) * (size_t)d.C : 2 * (size_t)d.C;
}

size_t aa_sizes_params(const aa_arch_t *a, int tp) {
  size_t n = 0;
  for (int u = 0; u < aa_sizes_units(a); u++)
    n += aa_sizes_unit_numel(a, tp, u);
  return n;
}

size_t aa_sizes_unit_held(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, int u) {
  return aa_pp_holds_unit(pp, a, u) ? aa_sizes_unit_numel(a, tp, u) : 0;
}

/* unit u's elements on a rank of an expert group of ep, if pp holds it. */
static size_t unit_held_ep(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp, int u) {
  return aa_pp_holds_unit(pp, a, u) ? aa_sizes_unit_numel_ep(a, tp, ep, u) : 0;
}

size_t aa_sizes_params_held(const aa_arch_t *a, int tp, const aa_pp_place_t *pp) {
  return aa_sizes_params_held_ep(a, tp, 1, pp);
}

size_t aa_sizes_params_held_ep(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp) {
  size_t n = 0;
  for (int u = 0; u < aa_sizes_units(a); u++)
    n += unit_held_ep(a, tp, ep, pp, u);
  return n;
}

int aa_sizes_unit_pieces(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp, int u,
                         aa_sizes_piece_t out[AA_SIZES_PIECES_MAX]) {
  const size_t n = unit_held_ep(a, tp, ep, pp, u);
  out[0] = (aa_sizes_piece_t){0, n, 0};
  if (ep <= 1 || !n || u < 1 || u > a->n_layer || !aa_arch_is_moe_layer(a, u - 1)) return 1;
  /* Block layout (engine/model.h): the dense tensors through router.w,
   * then experts.w13 | experts.w2, then the shared experts and, under
   * shared_expert_gate, their gate (1, C). */
  const aa_moe_t *m = &a->moe;
  const size_t per = 3 * (size_t)m->d_ff_expert / (size_t)aa_sizes_etp(a, tp) * (size_t)a->d_model,
               experts = (size_t)(m->experts / ep) * per,
               shared = (size_t)m->shared_experts * per +
                        (m->shared_experts && m->shared_expert_gate ? (size_t)a->d_model : 0),
               head = n - experts - shared;
  out[0].n = head;
  out[1] = (aa_sizes_piece_t){head, experts, 1};
  if (!shared) return 2;
  out[2] = (aa_sizes_piece_t){head + experts, shared, 0};
  return 3;
}

int aa_sizes_piece_ranks(const aa_sizes_piece_t *p, int replicas, int ep) {
  return p->expert && ep > 1 ? replicas / ep : replicas;
}

int aa_sizes_zero_stage(int zero, int dp) { return dp > 1 ? zero : 0; }

size_t aa_sizes_chunk(size_t n, int dp) { return (n + (size_t)dp - 1) / (size_t)dp; }

int aa_sizes_replicas(const aa_strategy_t *s) { return s->degree[AA_AXIS_DATA] * s->degree[AA_AXIS_CONTEXT]; }

int64_t aa_sizes_rank_tokens(const aa_arch_t *a, const aa_strategy_t *s) {
  return (int64_t)s->micro_batch * (a->seq_len / s->degree[AA_AXIS_CONTEXT]);
}

int aa_sizes_slot(const aa_arch_t *a, int u) { return u == 0 ? 0 : u == aa_sizes_units(a) - 1 ? 2 : 1; }

/* --- state ----------------------------------------------------------------------------- */

static aa_buf_size_t buf(int allocated, size_t numel, aa_dtype_t dtype, aa_mem_kind_t kind) {
  return (aa_buf_size_t){allocated ? numel : 0, dtype, kind};
}

void aa_sizes_model(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                    aa_model_sizes_t *out) {
  aa_sizes_model_ep(a, tp, 1, pp, amp, zero, out);
}

void aa_sizes_model_ep(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                       aa_model_sizes_t *out) {
  const size_t n = aa_sizes_params_held_ep(a, tp, ep, pp);
  const int mixed = amp != AA_F32;
  /* Under amp the fp32 parameters are the master weights, which the ZeRO
   * accounting counts with the optimizer state; the 16-bit copy is what
   * the model computes with. */
  out->params = buf(mixed ? zero == 0 : zero < 3, n, AA_F32, mixed ? AA_MEM_OPTIM : AA_MEM_PARAMS);
  out->grads = buf(zero < 2, n, AA_F32, AA_MEM_GRADS);
  out->params16 = buf(mixed && zero < 3, n, amp, AA_MEM_PARAMS);
}

void aa_sizes_zero(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, aa_dtype_t amp, int zero, int dp,
                   aa_zero_sizes_t *out) {
  aa_sizes_zero_ep(a, tp, 1, pp, amp, zero, dp, out);
}

void aa_sizes_zero_ep(const aa_arch_t *a, int tp, int ep, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                      int dp, aa_zero_sizes_t *out) {
  memset(out, 0, sizeof *out);
  /* The largest chunk c, the largest padded piece (its group's size times
   * c), the largest padded extent of a unit in each slot and of all. */
  size_t max_chunk = 0, max_piece = 0, max_extent = 0, padded[3] = {0};
  for (int u = 0; u < aa_sizes_units(a); u++) {
    aa_sizes_piece_t pc[AA_SIZES_PIECES_MAX];
    const int np = aa_sizes_unit_pieces(a, tp, ep, pp, u, pc), k = aa_sizes_slot(a, u);
    size_t extent = 0;
    for (int i = 0; i < np; i++) {
      const size_t w = (size_t)aa_sizes_piece_ranks(&pc[i], dp, ep), c = aa_sizes_chunk(pc[i].n, (int)w);
      out->shard += c;
      if (c > max_chunk) max_chunk = c;
      if (w * c > max_piece) max_piece = w * c;
      if (pc[i].off + w * c > extent) extent = pc[i].off + w * c;
    }
    if (extent > padded[k]) padded[k] = extent;
    if (extent > max_extent) max_extent = extent;
  }
  const int mixed = amp != AA_F32;
  const size_t S = out->shard;
  out->moment = buf(1, zero ? S : aa_sizes_params_held_ep(a, tp, ep, pp), AA_F32, AA_MEM_OPTIM);
  out->gshard = buf(zero >= 2, S, AA_F32, AA_MEM_GRADS);
  out->master = buf(zero >= 1 && mixed, S, AA_F32, AA_MEM_OPTIM);
  out->pshard = buf(zero == 3, S, amp, AA_MEM_PARAMS);
  out->piece = buf(zero >= 1, max_chunk, AA_F32, AA_MEM_WORKSPACE);
  out->padded = buf(zero == 1, max_piece, AA_F32, AA_MEM_WORKSPACE);
  out->scalars = buf(dp > 1, 16, AA_F32, AA_MEM_WORKSPACE);
  /* Every stage-3 gather happens while the blocks' gradient slot is idle:
   * in the forward, and in the backward before a block's gradient is asked
   * for or after it is reduced (wte's and lnf's weights are fetched before
   * any gradient). So a 16-bit unit lands there when it fits. */
  out->punit16_in_grads = zero == 3 && mixed && padded[1] * sizeof(float) >= max_extent * aa_dtype_size(amp);
  out->punit16 = buf(zero == 3 && mixed && !out->punit16_in_grads, max_extent, amp, AA_MEM_WORKSPACE);
  out->padded_slot = -1;
  /* An untied head (llama) is lnf's unit: its gradient is reduced before
   * the blocks' backward starts, and wte's is asked for after it ends, so
   * slot 2's gradient shares slot 0's buffer, sized for the larger. */
  const int untied = aa_arch_is_llama(a);
  for (int k = 0; k < 3; k++) {
    out->gslot[k] = untied && k == 2 ? 0 : k;
    out->punit[k] = buf(zero == 3, padded[k], AA_F32, AA_MEM_WORKSPACE);
  }
  if (untied && padded[2] > padded[0]) padded[0] = padded[2];
  for (int k = 0; k < 3; k++) {
    out->gunit[k] = buf(zero >= 2 && out->gslot[k] == k, padded[k], AA_F32, AA_MEM_WORKSPACE);
    /* Every padded piece lies inside its unit's slot, so some slot holds
     * the largest (at ep 1 exactly: dp * max_chunk). */
    if (zero == 2 && out->padded_slot < 0 && out->gunit[k].numel >= max_piece) out->padded_slot = k;
  }
}

/* --- activations and workspace -------------------------------------------------------- */

/* The rank's tokens of the residual stream: all B T, or its share under
 * sequence parallelism. */
static size_t stream_tokens(const aa_act_shape_t *sh) {
  const size_t N = (size_t)sh->B * (size_t)sh->T;
  return sh->sp && sh->tp > 1 ? N / (size_t)sh->tp : N;
}

size_t aa_sizes_field_numel(const aa_arch_t *a, const aa_act_shape_t *sh, aa_act_field_t f) {
  aa_tp_dims_t d;
  aa_sizes_tp(a, sh->tp, &d);
  const size_t N = (size_t)sh->B * (size_t)sh->T, Ns = stream_tokens(sh);
  switch (f) {
  case AA_ACT_QKV: return N * (size_t)d.QKV;
  case AA_ACT_ATTY: return N * (size_t)d.Cl;
  case AA_ACT_FCH: return N * (size_t)d.FH;
  case AA_ACT_FCHG: return N * (size_t)d.F;
  default: return Ns * (size_t)d.C;
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

void aa_sizes_moe_acts(const aa_arch_t *a, size_t N, int ep, aa_moe_acts_t *o) {
  const size_t E = (size_t)a->moe.experts, k = (size_t)a->moe.top_k;
  const size_t Fe = (size_t)(a->moe.d_ff_expert / (a->moe.etp > 1 ? a->moe.etp : 1));
  const size_t S = (size_t)a->moe.shared_experts, C = (size_t)a->d_model, R = N * k, f4 = sizeof(float);
  const size_t g = (size_t)(ep > 1 ? ep : 1), margin = (size_t)ceil(AA_MOE_EP_MARGIN * (double)R);
  const size_t Rl = g > 1 && margin < g * R ? margin : g * R;
  size_t n = 0;
  o->logits = take(&n, N * E * f4);
  o->probs = take(&n, N * E * f4);
  o->xp = take(&n, R * C * f4);
  o->h = take(&n, Rl * 2 * Fe * f4);
  o->act = take(&n, Rl * Fe * f4);
  o->yp = take(&n, R * C * f4);
  o->hs = take(&n, S * N * 2 * Fe * f4);
  o->as = take(&n, S * N * Fe * f4);
  o->xl = o->yl = AA_SIZES_NONE;
  if (g > 1) {
    o->xl = take(&n, Rl * C * f4);
    o->yl = take(&n, Rl * C * f4);
  }
  o->rows = Rl;
  o->bytes = n;
  o->route_bytes = 16 * R + 4 * (2 * E + 1);
  /* The dispatcher's arrays (engine/moe_dispatch.h): the route's offsets,
   * the counts, the local and arrival offsets, four size_t per rank of the
   * group, the counts exchanged as floats. */
  if (g > 1) o->route_bytes += 4 * (3 * E + E / g + 3) + 16 * E + 32 * g;
}

/* Block l's kept buffers, taken from *st (offsets from where *st counts
 * from); need[f] is set for a field some block does not keep. A chunk's
 * last block under pipeline parallelism (out_elsewhere) keeps its output
 * in the send buffer instead. Returns whether the block is recomputed whole. */
static int take_block(const aa_arch_t *a, const aa_act_shape_t *sh, int l, int out_elsewhere, size_t *st,
                      size_t stats, int need[AA_ACT_FIELDS], aa_act_block_t *b) {
  const size_t es = aa_dtype_size(sh->amp);
  const int moe = aa_arch_is_moe_layer(a, l);
  b->moe = AA_SIZES_NONE;
  for (int f = 0; f < AA_ACT_FIELDS; f++) {
    b->field[f] = AA_SIZES_NONE;
    if (moe && (f == AA_ACT_FCH || f == AA_ACT_FCHG)) continue; /* no SwiGLU MLP */
    if (kept(sh->ckpt, sh->ckpt_layers, l, f) && !(f == AA_ACT_RES3 && out_elsewhere))
      b->field[f] = take(st, aa_sizes_field_numel(a, sh, f) * es);
    else if (f != AA_ACT_RES3 || !out_elsewhere)
      need[f] = 1;
  }
  b->stats = AA_SIZES_NONE;
  if (aa_sizes_block_full(sh->ckpt, sh->ckpt_layers, l)) return 1;
  b->stats = take(st, stats);
  if (moe) {
    aa_moe_acts_t ma;
    aa_sizes_moe_acts(a, (size_t)sh->B * (size_t)sh->T, sh->ep, &ma);
    b->moe = take(st, ma.bytes);
  }
  return 0;
}

/* The final LayerNorm's output and statistics, the logits and the losses
 * (fp32), taken from *st: the whole model's, or the last stage's. */
static void take_head(aa_act_layout_t *o, size_t *st, size_t N, size_t Ns, size_t C, size_t Vl) {
  const size_t f4 = sizeof(float);
  o->lnf = take(st, Ns * C * f4);
  o->lnf_stats = take(st, 2 * Ns * f4);
  o->logits = take(st, N * Vl * f4);
  o->losses = take(st, N * f4);
}

void aa_sizes_acts(const aa_arch_t *a, const aa_act_shape_t *sh, aa_act_layout_t *o, aa_act_block_t *blocks) {
  aa_tp_dims_t d;
  aa_sizes_tp(a, sh->tp, &d);
  const size_t C = (size_t)d.C, Cl = (size_t)d.Cl, Vl = (size_t)d.Vl, F = (size_t)d.F;
  const size_t N = (size_t)sh->B * (size_t)sh->T, Ns = stream_tokens(sh), es = aa_dtype_size(sh->amp);
  const size_t f4 = sizeof(float), stats = (4 * Ns + (size_t)d.NH * N) * f4;
  const int mixed = sh->amp != AA_F32, tp = d.tp > 1, sp = tp && sh->sp;
  const aa_pp_place_t *pp = sh->pipe && sh->pipe->pp > 1 ? sh->pipe : NULL;
  int any_full = 0, any_full_moe = 0, need[AA_ACT_FIELDS] = {0};
  size_t st = 0, ws = 0;
  memset(o, 0xff, sizeof *o); /* every offset AA_SIZES_NONE (all bits set) until taken */
  if (blocks) memset(blocks, 0xff, (size_t)a->n_layer * sizeof *blocks); /* blocks not held: none */
  if (!pp) {
    o->encoded = take(&st, Ns * C * es);
    for (int l = 0; l < a->n_layer; l++) {
      aa_act_block_t b;
      int full = take_block(a, sh, l, 0, &st, stats, need, &b);
      any_full |= full;
      any_full_moe |= full && aa_arch_is_moe_layer(a, l);
      if (blocks) blocks[l] = b;
    }
    take_head(o, &st, N, Ns, C, Vl);
    o->slot_bytes = st;
  } else {
    /* Each chunk's layout from the start of a slot; the slot as large as
     * the largest, the pool's slots back to back. */
    size_t most = 0;
    for (int c = 0; c < pp->vpp; c++) {
      size_t slot = 0;
      for (int l = pp->lo[c]; l < pp->hi[c]; l++) {
        aa_act_block_t b;
        int full = take_block(a, sh, l, l == pp->hi[c] - 1, &slot, stats, need, &b);
        any_full |= full;
        any_full_moe |= full && aa_arch_is_moe_layer(a, l);
        if (blocks) blocks[l] = b;
      }
      if (pp->last && c == pp->vpp - 1) o->stash = take(&slot, Ns * C * f4);
      if (slot > most) most = slot;
    }
    o->slot_bytes = most;
    st = most * (size_t)pp->slots;
    if (pp->last) take_head(o, &st, N, Ns, C, Vl);
    o->act_buf = st;
    for (int k = 0; k < pp->act_bufs; k++)
      take(&st, Ns * C * es);
    o->grad_buf = st;
    for (int k = 0; k < pp->grad_bufs; k++)
      take(&st, Ns * C * f4);
  }

  /* Under amp every field is computed in fp32 staging; in fp32 only the
   * fields some block does not keep need a place to be computed in. The
   * block output always has its place: the store or the send buffer, or
   * under amp ws_res. */
  for (int f = 0; f < AA_ACT_FIELDS; f++)
    if (f != AA_ACT_RES3 && (mixed || need[f]))
      o->ws_field[f] = take(&ws, aa_sizes_field_numel(a, sh, f) * f4);
  if (mixed) {
    o->ws_res[0] = take(&ws, Ns * C * f4);
    o->ws_res[1] = take(&ws, Ns * C * f4);
  }
  /* At stage 3 the model computes with the fp32 units ZeRO gathers
   * (punit): a widened copy of them would never be read. A LoRA base is
   * never sharded (engine/lora.h): always widened. */
  if (mixed && (sh->zero < 3 || a->lora.r)) {
    o->wblock = take(&ws, max_block_numel(a, &d) * f4);
    if (aa_pp_holds_unit(pp, a, 0)) o->wpre = take(&ws, aa_sizes_unit_numel(a, d.tp, 0) * f4);
    if (aa_pp_holds_unit(pp, a, a->n_layer + 1))
      o->wpost = take(&ws, aa_sizes_unit_numel(a, d.tp, a->n_layer + 1) * f4);
  }
  if (any_full) o->ws_stats = take(&ws, stats);
  if (pp) o->send = take(&ws, Ns * C * es);
  o->dres = take(&ws, Ns * C * f4);
  o->dln = take(&ws, (sp ? Ns : N) * C * f4);
  /* A block's backward is done with the MLP's gradients before it writes
   * the attention's: the two pairs share one region, the larger pair's. */
  size_t mlp = ws, att = ws;
  o->dfch = take(&mlp, N * (size_t)d.FH * f4);
  o->dfch_gelu = take(&mlp, N * F * f4);
  o->dqkv = take(&att, N * (size_t)d.QKV * f4);
  o->datty = take(&att, N * Cl * f4);
  ws = mlp > att ? mlp : att;
  if (tp) o->xent = take(&ws, ((size_t)d.tp + 1) * 3 * N * f4);
  if (tp || pp) o->scalars = take(&ws, 16 * f4);
  if (sp) {
    o->full = take(&ws, N * C * f4);
    o->partial = take(&ws, N * C * f4);
    o->lngrad = take(&ws, 4 * C * f4);
  }
  if (sh->cp > 1) {
    o->ring = take(&ws, 2 * 2 * N * (size_t)(2 * d.KVl) * f4);
    o->ring_out = take(&ws, N / 2 * Cl * f4);
    o->ring_lse = take(&ws, (size_t)d.NH * N / 2 * f4);
    o->ring_delta = take(&ws, (size_t)d.NH * N * f4);
  }
  o->host = 0;
  /* The routing maps of the MoE blocks the rank holds: a pipeline stage
   * keeps one per activation slot (each micro-batch in flight routes into
   * its own until its backward). */
  int moe_blocks = 0;
  for (int l = 0; l < a->n_layer; l++)
    moe_blocks += aa_arch_is_moe_layer(a, l) && aa_pp_holds_unit(pp, a, l + 1);
  if (pp) moe_blocks *= pp->slots;
  if (moe_blocks) {
    aa_moe_acts_t ma;
    aa_sizes_moe_acts(a, N, sh->ep, &ma);
    const size_t R = N * (size_t)a->moe.top_k;
    o->moe_dxp = take(&ws, R * C * f4);
    o->moe_dyp = take(&ws, R * C * f4);
    /* With the experts split over the tensor ranks the routing weights'
     * gradient and, under shared_expert_gate, the gate's (C) are summed
     * over the tensor group in one all-reduce (engine/model.c moe_backward). */
    o->moe_dweight = take(&ws, (R + (a->moe.etp > 1 && sh->tp > 1 ? C : 0)) * f4);
    o->moe_dlogits = take(&ws, N * (size_t)a->moe.experts * f4);
    if (ma.xl != AA_SIZES_NONE) {
      o->moe_dxl = take(&ws, ma.rows * C * f4);
      o->moe_dyl = take(&ws, ma.rows * C * f4);
    }
    /* Under sequence parallelism an MoE block computes on the gathered
     * tokens (every tensor rank the same), its input gradient whole too. */
    if (sp) o->moe_dx = take(&ws, N * C * f4);
    o->host = (size_t)moe_blocks * ma.route_bytes;
    /* A fully checkpointed MoE block keeps nothing: its recompute needs
     * one block's MoE buffers, shared by every such block. */
    if (any_full_moe) o->ws_moe = take(&ws, ma.bytes);
  }
  if (a->lora.r) {
    size_t most = 0; /* the widest target's output on the rank */
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      int in, out, row;
      aa_lora_shape(a, t, sh->tp, &in, &out, &row);
      if ((a->lora.targets >> t & 1) && (size_t)out > most) most = (size_t)out;
    }
    o->lora = take(&ws, (2 * (size_t)a->lora.r + most) * N * f4);
  }
  o->acts = st;
  o->workspace = ws;
}

/* --- one rank -------------------------------------------------------------------------- */

static void add(size_t bytes[AA_MEM_NKINDS], const aa_buf_size_t *b) {
  bytes[b->kind] += b->numel * aa_dtype_size(b->dtype);
}

/* Pipeline rank `stage`'s place with m micro-batches into *place, and
 * it (NULL at pp 1, which has none) into *pp. */
static int rank_place(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage, aa_pp_place_t *place,
                      aa_pp_place_t **pp) {
  *pp = NULL;
  if (s->degree[AA_AXIS_PIPELINE] == 1) return 0;
  int rc = aa_pp_place(a, s, m, stage, place);
  if (!rc) *pp = place;
  return rc;
}

/* The blocks place pp holds (every block at pp 1). */
static int blocks_held(const aa_arch_t *a, const aa_pp_place_t *pp) {
  if (!pp || pp->pp <= 1) return a->n_layer;
  int n = 0;
  for (int c = 0; c < pp->vpp; c++)
    n += pp->hi[c] - pp->lo[c];
  return n;
}

void aa_sizes_lora(const aa_arch_t *a, int tp, const aa_pp_place_t *pp, aa_dtype_t amp, int zero,
                   int replicas, aa_lora_sizes_t *out) {
  const size_t n = (size_t)blocks_held(a, pp) * (size_t)aa_lora_block_numel(a, tp);
  const size_t w = replicas > 1 ? (size_t)replicas : 1, shard = zero >= 1 ? n / w + n % w : n;
  out->adapters = n;
  out->shard = shard;
  out->base = buf(1, aa_sizes_params_held_ep(a, tp, 1, pp), amp, AA_MEM_PARAMS);
  out->params = buf(1, n, AA_F32, zero >= 3 ? AA_MEM_WORKSPACE : AA_MEM_PARAMS);
  out->grads = buf(1, n, AA_F32, zero >= 2 ? AA_MEM_WORKSPACE : AA_MEM_GRADS);
  out->moment = buf(1, shard, AA_F32, AA_MEM_OPTIM);
  out->gshard = buf(1, zero >= 2 ? shard : 0, AA_F32, AA_MEM_GRADS);
  out->pshard = buf(1, zero >= 3 ? shard : 0, AA_F32, AA_MEM_PARAMS);
}

/* The model's states of the rank placed at pp, added into bytes. */
static void states_at(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *pp,
                      size_t bytes[AA_MEM_NKINDS]) {
  /* ZeRO shards over the ranks that hold the same slice of the model: the
   * data group, times the context group (Megatron's). */
  const int replicas = aa_sizes_replicas(s);
  const int zero = aa_sizes_zero_stage(s->zero, replicas);
  if (a->lora.r) {
    aa_lora_sizes_t ls;
    aa_sizes_lora(a, s->degree[AA_AXIS_TENSOR], pp, s->amp, zero, replicas, &ls);
    const aa_buf_size_t *each[] = {&ls.base,   &ls.params, &ls.grads, &ls.moment,
                                   &ls.moment, &ls.gshard, &ls.pshard};
    for (size_t i = 0; i < sizeof each / sizeof each[0]; i++)
      add(bytes, each[i]);
    return;
  }
  aa_model_sizes_t ms;
  aa_sizes_model_ep(a, s->degree[AA_AXIS_TENSOR], s->ep, pp, s->amp, zero, &ms);
  add(bytes, &ms.params);
  add(bytes, &ms.grads);
  add(bytes, &ms.params16);
  aa_zero_sizes_t z;
  aa_sizes_zero_ep(a, s->degree[AA_AXIS_TENSOR], s->ep, pp, s->amp, zero, replicas, &z);
  const aa_buf_size_t *each[] = {&z.moment, &z.moment, &z.gshard, &z.master,
                                 &z.pshard, &z.piece,  &z.padded, &z.scalars};
  for (size_t i = 0; i < sizeof each / sizeof each[0]; i++)
    add(bytes, each[i]);
  add(bytes, &z.punit16);
  for (int k = 0; k < 3; k++) {
    add(bytes, &z.gunit[k]);
    add(bytes, &z.punit[k]);
  }
}

/* The activations and workspace of the rank placed at pp, added into
 * bytes. */
static void acts_at(const aa_arch_t *a, const aa_strategy_t *s, const aa_pp_place_t *pp,
                    size_t bytes[AA_MEM_NKINDS]) {
  const int cp = s->degree[AA_AXIS_CONTEXT];
  aa_act_layout_t l;
  const aa_act_shape_t sh = {.B = s->micro_batch,
                             .T = a->seq_len / cp,
                             .tp = s->degree[AA_AXIS_TENSOR],
                             .sp = s->sp,
                             .cp = cp,
                             .ep = s->ep,
                             .amp = s->amp,
                             .ckpt = s->ckpt,
                             .ckpt_layers = s->ckpt_layers,
                             .zero = aa_sizes_zero_stage(s->zero, aa_sizes_replicas(s)),
                             .pipe = pp};
  aa_sizes_acts(a, &sh, &l, NULL);
  bytes[AA_MEM_ACTS] += l.acts + l.host;
  bytes[AA_MEM_WORKSPACE] += l.workspace;
}

int aa_sizes_rank_states(const aa_arch_t *a, const aa_strategy_t *s, int stage, size_t bytes[AA_MEM_NKINDS]) {
  aa_arch_t copy;
  a = aa_sizes_set_etp(&copy, a, s);
  memset(bytes, 0, AA_MEM_NKINDS * sizeof bytes[0]);
  aa_pp_place_t place, *pp;
  int rc = rank_place(a, s, 0, stage, &place, &pp);
  if (!rc) states_at(a, s, pp, bytes);
  return rc;
}

int aa_sizes_rank_acts(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage,
                       size_t bytes[AA_MEM_NKINDS]) {
  aa_arch_t copy;
  a = aa_sizes_set_etp(&copy, a, s);
  memset(bytes, 0, AA_MEM_NKINDS * sizeof bytes[0]);
  aa_pp_place_t place, *pp;
  int rc = rank_place(a, s, m, stage, &place, &pp);
  if (!rc) acts_at(a, s, pp, bytes);
  return rc;
}

int aa_sizes_rank(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage, size_t bytes[AA_MEM_NKINDS]) {
  aa_arch_t copy;
  a = aa_sizes_set_etp(&copy, a, s);
  memset(bytes, 0, AA_MEM_NKINDS * sizeof bytes[0]);
  aa_pp_place_t place, *pp;
  int rc = rank_place(a, s, m, stage, &place, &pp);
  if (rc) return rc;
  states_at(a, s, pp, bytes);
  acts_at(a, s, pp, bytes);
  return 0;
}
