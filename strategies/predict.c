/* The step-time model (predict.h): a rank's ops at the strategy's shapes,
 * each timed by the calibration, plus its groups' collectives on the
 * calibration's alpha-beta lines, composed the way the engine schedules
 * them. Rules: docs/service.md "Calibration".
 *
 * The op inventory mirrors engine/model.c's passes over one micro-batch on
 * a rank (N = micro_batch x T tokens with T = seq_len / cp, the rank's
 * share of each sequence, Ns = N / tp under sequence parallelism, else N;
 * C, Cl, F, NH and Vl the rank's, sizes.h):
 *   per block, forward and backward: LayerNorm (Ns, C), the qkv GEMM (N,
 *     C, 3Cl), attention (micro_batch, T, Cl, NH), the projection (N,
 *     Cl, C), the residual add (Ns·C), LayerNorm, the fc GEMM (N, C, F),
 *     GELU (N·F), the fc projection (N, F, C), the residual add;
 *   the first virtual stage: the embedding (N, C; the vocabulary-parallel
 *     lookup at every tp);
 *   the last: the final LayerNorm (Ns, C), the tied head (N, C, Vl) and the
 *     cross-entropy (N, Vl);
 *   recomputed in backward: the GELU of every block (selective), the whole
 *     forward of each block full checkpointing drops;
 *   per step: AdamW over the rank's parameters, or its ZeRO shard.
 * The llama family (engine/model.h) runs the same passes with its own ops:
 * RMSNorm (Ns, C) for each norm and the final one; the qkv GEMM (N, C,
 * QKV) with QKV = Cl + 2 KVl; RoPE on its q and k (forward in the forward
 * pass, the transposed rotation in the backward: dqkv after attention's
 * backward); grouped-query attention; the MLP's first GEMM (N, C, FH) with
 * FH = 2F (gate | up) and SwiGLU (N, F) in GELU's place (recomputed under
 * selective checkpointing); the head from head.w (the same (N, C, Vl)
 * GEMM). RoPE and grouped-query attention are shaped (B·NKV, T, NH / NKV,
 * HS), as calib.h says why. An MoE layer of the llama family
 * (aa_arch_is_moe_layer) runs, in its MLP's place, the router GEMM, its
 * softmax and top-k, the permutes and each routed and shared expert's
 * GEMMs and SwiGLU (moe_ops), timed at the even load of N k / E rows an
 * expert; under expert parallelism its E / ep experts at f·ep N k / E rows
 * each, and the expert group's all-to-alls (cost.h) at f times their even
 * bytes, on the critical path with the tensor group's collectives, f the
 * busiest rank's load imbalance (predict.h moe_imbalance).
 * Under context parallelism (cp > 1; engine/model.c ring_forward and
 * ring_backward) a rank holds two chunks of Tc = seq_len / (2 cp) tokens
 * of each sequence, and each block's attention is the ring's blocks of
 * chunk shape (S = micro_batch·NKV, Tc, G = NH / NKV, HS) in place of
 * ATTENTION or GQA: in the forward 2 causal diagonal blocks (RING_DIAG)
 * and 2 cp - 1 blocks of earlier keys merged into the result
 * (RING_BLOCK); in the backward the diagonals' (with the final result's
 * delta) and the blocks', and one accumulate of the key and value
 * gradients that come home (2·micro_batch·Tc·2 KVl floats: half a
 * RESIDUAL backward, which is two accumulates); each ring (forward,
 * backward, recomputed) first packs the rank's keys and values (the k|v
 * columns of its rows: the same count, half a RESIDUAL backward); a
 * recomputed block runs its forward ring again. The ring's kernels are fp32
 * whatever the amp (a calibration's key); a profile prices them at the
 * amp, as it prices the attention they split (ring_ops). The embedding and
 * RoPE run once per chunk (each at its place in the sequence): 2 calls of
 * Tc positions. The ring's transfers are the context group's (cost.h).
 * On CPUs with 16-bit storage the engine also rounds each activation and
 * activation gradient it keeps or sends (a CAST forward) and widens the
 * weights and kept activations it reads (a CAST backward), and per step
 * rounds the updated parameters; those casts are counted as block_forward,
 * block_restore, blocks_backward and the head make them (ZeRO 3's widened
 * gathers are counted as the block weights' widening they replace). */
#include "predict.h"

#include "pipeline.h"
#include "sizes.h"
#include "space.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One op shape of a rank's step and how often each of its kernels runs. */
typedef struct item {
  aa_op_shape_t shape;
  aa_dtype_t dtype; /* what the engine runs and a calibration measures it in */
  /* What a device profile's roofline prices it at: dtype, but for the
   * ring's blocks the strategy's attention precision (ring_ops). */
  aa_dtype_t roof_dtype;
  bool per_step; /* the optimizer's, once a step; else once per micro-batch */
  /* Calls per micro-batch (or step): of the forward kernel in the forward
   * pass, of the backward kernel in the forward pass (a widening cast),
   * of the forward kernel in the backward pass (recompute, rounding), of
   * the backward kernel in the backward pass. */
  double ff, bf, fb, bb;
} item_t;

/* Enough for one rank's step: 13 block shapes, 9 an MoE block adds, 3
 * outer ones, a dozen casts. */
#define ITEMS_MAX 64

typedef struct inventory {
  int n;
  item_t it[ITEMS_MAX];
} inventory_t;

/* Field by field: aa_op_shape_t has padding after its enum, which memcmp
 * would compare too. Priced by a profile at roof_dtype (item_t). */
static void add_priced(inventory_t *v, aa_op_kind_t op, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                       aa_dtype_t dtype, aa_dtype_t roof_dtype, bool per_step, double ff, double bf,
                       double fb, double bb) {
  aa_op_shape_t s = {op, {d0, d1, d2, d3}};
  if (ff == 0 && bf == 0 && fb == 0 && bb == 0) return;
  for (int i = 0; i < v->n; i++) {
    item_t *x = &v->it[i];
    if (x->per_step == per_step && x->dtype == dtype && x->roof_dtype == roof_dtype &&
        aa_op_shape_equal(&x->shape, &s)) {
      x->ff += ff;
      x->bf += bf;
      x->fb += fb;
      x->bb += bb;
      return;
    }
  }
  if (v->n < ITEMS_MAX) v->it[v->n++] = (item_t){s, dtype, roof_dtype, per_step, ff, bf, fb, bb};
}

static void add(inventory_t *v, aa_op_kind_t op, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
                aa_dtype_t dtype, bool per_step, double ff, double bf, double fb, double bb) {
  add_priced(v, op, d0, d1, d2, d3, dtype, dtype, per_step, ff, bf, fb, bb);
}

/* A round (CAST forward) in the forward (pass 0) or backward pass (1). */
static void round16(inventory_t *v, int64_t n, int pass, double calls) {
  add(v, AA_OP_CAST, n, 0, 0, 0, AA_F32, false, pass ? 0 : calls, 0, pass ? calls : 0, 0);
}
static void widen16(inventory_t *v, int64_t n, int pass, double calls) {
  add(v, AA_OP_CAST, n, 0, 0, 0, AA_F32, false, 0, pass ? 0 : calls, 0, pass ? calls : 0);
}

/* The MLP's activation over N tokens, GELU (gpt2) or SwiGLU (llama), with
 * add's counts: in the block's passes, and recomputed under selective
 * checkpointing. */
static void act_op(inventory_t *v, const aa_tp_dims_t *d, int64_t N, aa_dtype_t dt, double ff, double bf,
                   double fb, double bb) {
  if (d->llama)
    add(v, AA_OP_SWIGLU, N, d->F, 0, 0, dt, false, ff, bf, fb, bb);
  else
    add(v, AA_OP_GELU, N * d->F, 0, 0, 0, dt, false, ff, bf, fb, bb);
}

/* A linear layer (N, C, OC) with add's counts. Its weight frozen (LoRA):
 * the backward computes only the input's gradient, one product timed as
 * the forward kernel of the transposed shape (N, OC, C). */
static void gemm(inventory_t *v, int64_t N, int64_t C, int64_t OC, aa_dtype_t dt, bool frozen, double ff,
                 double fb, double bb) {
  if (!frozen) {
    add(v, AA_OP_MATMUL, N, C, OC, 0, dt, false, ff, 0, fb, bb);
    return;
  }
  add(v, AA_OP_MATMUL, N, C, OC, 0, dt, false, ff, 0, fb, 0);
  add(v, AA_OP_MATMUL, N, OC, C, 0, dt, false, 0, 0, bb, 0);
}

/* A block's LoRA adapters (a->lora.r > 0) with add's counts: per target
 * A x (N, in, r) and B (A x) (N, r, out) forward; in the backward A x is
 * recomputed (a forward call) and both run their backward (input and
 * adapter gradients). */
static void lora_ops(inventory_t *v, const aa_arch_t *a, int tp, int64_t N, aa_dtype_t dt, double ff,
                     double fb, double bb) {
  for (int t = 0; a->lora.r && t < AA_LORA_NTARGETS; t++) {
    if (!(a->lora.targets & (1 << t))) continue;
    int in, out, row;
    aa_lora_shape(a, t, tp, &in, &out, &row);
    add(v, AA_OP_MATMUL, N, in, a->lora.r, 0, dt, false, ff, 0, fb + bb, bb);
    add(v, AA_OP_MATMUL, N, a->lora.r, out, 0, dt, false, ff, 0, fb, bb);
  }
}

/* Context parallelism's ring attention of one block (the top of this
 * file), with block_ops' counts. Its kernels are fp32 whatever the amp,
 * which is what a calibration measures them in; a device profile prices
 * them at dt, the precision it prices ATTENTION and GQA at: the ring's
 * blocks are the same flash scheme as the engine's attention
 * (kernels/cuda/cuda_attention_ring.cu, cuda_attention.cu, both fp32 on
 * CUDA cores today), so the two run at one rate, and pricing the ring alone
 * at the fp32 vector peak made cp's attention 15 times dp's on an H100
 * (docs/device-profiles.md "Context parallelism"). */
static void ring_ops(inventory_t *v, const aa_tp_dims_t *d, int64_t B, int64_t Tc, int cp, aa_dtype_t dt,
                     double ff, double fb, double bb) {
  const int64_t S = B * d->NKV, G = d->NH / d->NKV;
  add_priced(v, AA_OP_RING_DIAG, S, Tc, G, d->HS, AA_F32, dt, false, 2 * ff, 0, 2 * fb, 2 * bb);
  add_priced(v, AA_OP_RING_BLOCK, S, Tc, G, d->HS, AA_F32, dt, false, (2 * cp - 1) * ff, 0, (2 * cp - 1) * fb,
             (2 * cp - 1) * bb);
  /* Packing the rank's keys and values for the ring (each ring, recomputed
   * ones too) and adding their returning gradient: each half a RESIDUAL
   * backward (which is two accumulates). */
  add(v, AA_OP_RESIDUAL, 2 * B * Tc * 2 * d->KVl, 0, 0, 0, AA_F32, false, 0, ff / 2, 0, bb + fb / 2);
}

/* The ops of an MoE layer's feed-forward in place of the MLP's
 * (docs/training-knobs.md "Mixture of experts"), over N tokens (every
 * token of the micro-batch on every rank: its experts are whole on each,
 * sizes.h), with block_ops' counts. Existing kinds express each of them:
 *   the router GEMM (N, C, E);
 *   its softmax, top-k and the aux and z losses as XENT (N, E): a softmax
 *     over each row of E logits, its backward writing the (N, E) gradient;
 *   permute and unpermute as a RESIDUAL of the E·Ne kept rows' elements,
 *     twice forward (each reads and writes about one such array), once
 *     backward (whose two accumulates are unpermute's scatter and
 *     permute's gather);
 *   each expert's GEMMs (Ne, C, 2Fe) and (Ne, Fe, C) and its SwiGLU (Ne,
 *     Fe), Ne = aa_cost_expert_rows, E times, Fe the rank's share of the
 *     width (d_ff_expert / tp with the experts split over the tensor
 *     ranks, sizes.h aa_sizes_etp); under expert parallelism (ep > 1)
 *     each of the rank's E / ep experts at ceil(f·ep Ne) rows, the rows
 *     its expert group dispatched to the busiest rank, f its load
 *     imbalance (the all-to-alls are the expert group's, cost.h);
 *   each shared expert's at N rows, S times.
 * The MoE buffers are kept whatever the checkpointing mode short of full
 * (sizes.h), so selective checkpointing recomputes no SwiGLU here. */
static void moe_ops(inventory_t *v, const aa_arch_t *a, const aa_tp_dims_t *d, int ep, double f, int64_t N,
                    aa_dtype_t dt, double ff, double fb, double bb) {
  const aa_moe_t *m = &a->moe;
  const int64_t S = m->shared_experts, Fe = d->Fe, Ne = aa_cost_expert_rows(m, N);
  /* The rank's experts and each one's rows (the busiest rank's: f·ep·Ne
   * rounded up, less a hair so that an exact product is not pushed past
   * itself by rounding in f). */
  const int64_t E = m->experts / ep, Nl = ep > 1 ? (int64_t)ceil(f * (double)(ep * Ne) - 1e-9) : Ne;
  add(v, AA_OP_MATMUL, N, d->C, m->experts, 0, dt, false, ff, 0, fb, bb);
  add(v, AA_OP_XENT, N, m->experts, 0, 0, dt, false, ff, 0, fb, bb);
  add(v, AA_OP_RESIDUAL, m->experts * Ne * d->C, 0, 0, 0, dt, false, 2 * ff, 0, 2 * fb, bb);
  add(v, AA_OP_MATMUL, Nl, d->C, 2 * Fe, 0, dt, false, E * ff, 0, E * fb, E * bb);
  add(v, AA_OP_SWIGLU, Nl, Fe, 0, 0, dt, false, E * ff, 0, E * fb, E * bb);
  add(v, AA_OP_MATMUL, Nl, Fe, d->C, 0, dt, false, E * ff, 0, E * fb, E * bb);
  add(v, AA_OP_MATMUL, N, d->C, 2 * Fe, 0, dt, false, S * ff, 0, S * fb, S * bb);
  add(v, AA_OP_SWIGLU, N, Fe, 0, 0, dt, false, S * ff, 0, S * fb, S * bb);
  add(v, AA_OP_MATMUL, N, Fe, d->C, 0, dt, false, S * ff, 0, S * fb, S * bb);
}

/* The ops of one block's forward, `ff` times in the forward pass and `fb`
 * times in the backward pass (recompute); backward `bb` times; an MoE
 * block's (moe) with moe_ops in the MLP's place. RoPE's
 * forward kernel runs in the forward, its backward (the transposed
 * rotation of dqkv) in the backward; under context parallelism once per
 * chunk. */
static void block_ops(inventory_t *v, const aa_arch_t *a, const aa_strategy_t *s, const aa_tp_dims_t *d,
                      bool moe, double f, aa_dtype_t dt, double ff, double fb, double bb) {
  const int cp = s->degree[AA_AXIS_CONTEXT];
  const int64_t B = s->micro_batch, T = a->seq_len / cp, N = B * T,
                Ns = s->sp ? N / s->degree[AA_AXIS_TENSOR] : N;
  const aa_op_kind_t norm = d->llama ? AA_OP_RMSNORM : AA_OP_LAYERNORM;
  const bool fz = a->lora.r > 0; /* LoRA: the base frozen */
  add(v, norm, Ns, d->C, 0, 0, dt, false, 2 * ff, 0, 2 * fb, 2 * bb);
  if (fz) lora_ops(v, a, s->degree[AA_AXIS_TENSOR], N, dt, ff, fb, bb);
  gemm(v, N, d->C, d->QKV, dt, fz, ff, fb, bb);
  if (d->llama) {
    const int64_t S = B * d->NKV, G = d->NH / d->NKV;
    if (cp == 1)
      add(v, AA_OP_ROPE, S, T, G, d->HS, dt, false, ff, 0, fb, bb);
    else
      add(v, AA_OP_ROPE, S, T / 2, G, d->HS, dt, false, 2 * ff, 0, 2 * fb, 2 * bb);
  }
  if (cp > 1)
    ring_ops(v, d, B, T / 2, cp, dt, ff, fb, bb);
  else if (d->llama)
    add(v, AA_OP_GQA, B * d->NKV, T, d->NH / d->NKV, d->HS, dt, false, ff, 0, fb, bb);
  else
    add(v, AA_OP_ATTENTION, B, T, d->Cl, d->NH, dt, false, ff, 0, fb, bb);
  gemm(v, N, d->Cl, d->C, dt, fz, ff, fb, bb);
  add(v, AA_OP_RESIDUAL, Ns * d->C, 0, 0, 0, dt, false, 2 * ff, 0, 2 * fb, 2 * bb);
  if (moe) {
    moe_ops(v, a, d, s->ep > 1 ? s->ep : 1, f, N, dt, ff, fb, bb);
    return;
  }
  gemm(v, N, d->C, d->FH, dt, fz, ff, fb, bb);
  act_op(v, d, N, dt, ff, 0, fb, bb);
  gemm(v, N, d->F, d->C, dt, fz, ff, fb, bb);
}

/* The element counts of a block's 16-bit fields on a rank: the residual
 * stream's (Ns C), qkv's (N QKV), the attention output's (N Cl), the MLP's
 * first GEMM's output (N FH) and its activation's (N F). */
typedef struct {
  int64_t NsC, NQKV, NCl, NFH, NF;
} widths_t;

/* The rounds of `calls` blocks' forwards (block_forward) in pass `pass`:
 * six of the residual stream (ln1, res2 twice, ln2, res3 twice), qkv once
 * (llama: twice, before and after RoPE), the attention output, and, of
 * the `dense` of them that are not MoE blocks (whose buffers stay fp32),
 * the MLP's first GEMM's output and its activation. */
static void block_rounds(inventory_t *v, const widths_t *w, int llama, int pass, double calls, double dense) {
  round16(v, w->NsC, pass, 6 * calls);
  round16(v, w->NQKV, pass, (llama ? 2 : 1) * calls);
  round16(v, w->NCl, pass, calls);
  round16(v, w->NFH, pass, dense);
  round16(v, w->NF, pass, dense);
}

/* The load imbalance strategy s's busiest expert rank is timed at:
 * min(ep, imbalance, or AA_PREDICT_MOE_IMBALANCE when it is 0 or less);
 * 1 without expert parallelism (a rank then computes every expert's rows,
 * however they spread). */
static double rank_imbalance(const aa_arch_t *a, const aa_strategy_t *s, double imbalance) {
  if (s->ep < 2 || a->moe.experts < 1) return 1;
  const double f = imbalance > 0 ? imbalance : AA_PREDICT_MOE_IMBALANCE;
  return f < 1 ? 1 : f > s->ep ? s->ep : f;
}

double aa_predict_imbalance(const aa_arch_t *arch, const aa_strategy_t *s, double max_tokens) {
  if (arch->moe.experts < 1 || !(max_tokens >= 1) || s->micro_batch < 1) return 0;
  /* Under context parallelism the engine's counts are the context group's
   * (summed over its ranks, engine/model.c), so max_tokens is over the
   * whole sequences, not the rank's chunks. */
  const double N = (double)aa_sizes_rank_tokens(arch, s) * s->degree[AA_AXIS_CONTEXT],
               even = N * arch->moe.top_k / arch->moe.experts;
  const double f = even > 0 ? max_tokens / even : 0;
  return f < 1 ? 1 : f;
}

/* The inventory of pipeline rank `stage` of resolved s, its expert rows
 * at load imbalance f (rank_imbalance); AA_EINVAL for a strategy the
 * pipeline rules refuse. */
static int inventory(const aa_arch_t *a, const aa_strategy_t *s, int stage, int cuda, double f,
                     inventory_t *v) {
  aa_arch_t split; /* s's experts split over the tensor ranks: d.Fe their share */
  a = aa_sizes_set_etp(&split, a, s);
  aa_pp_place_t pl;
  int rc = aa_pp_place(a, s, 0, stage, &pl);
  if (rc) return rc;
  aa_tp_dims_t d;
  aa_sizes_tp(a, s->degree[AA_AXIS_TENSOR], &d);
  /* Grouped-query shapes need whole kv heads on every tensor rank (what
   * aa_strategy_resolve checks; this is for a strategy it did not see). */
  if (d.llama && (d.NKV < 1 || d.NH % d.NKV))
    return aa_error(AA_EINVAL, "tp %d does not divide the %d key/value heads", s->degree[AA_AXIS_TENSOR],
                    aa_arch_kv_heads(a));
  const aa_dtype_t dt = cuda ? s->amp : AA_F32;
  const bool casts = !cuda && s->amp != AA_F32;
  const int64_t N = aa_sizes_rank_tokens(a, s), Ns = s->sp ? N / s->degree[AA_AXIS_TENSOR] : N;
  const widths_t w = {Ns * d.C, N * d.QKV, N * d.Cl, N * d.FH, N * d.F};
  const int64_t NsC = w.NsC;
  const bool selective = s->ckpt == AA_CKPT_SELECTIVE;
  const int R = aa_sizes_replicas(s), zs = aa_sizes_zero_stage(s->zero, R), L = a->n_layer,
            ep = s->ep > 1 ? s->ep : 1;
  /* Blocks held and recomputed whole, dense ([0]) and MoE ([1]). */
  int nbk[2] = {0, 0}, nfk[2] = {0, 0}, starts = 0;
  v->n = 0;
  for (int c = 0; c < pl.vpp; c++) {
    if (!(c == 0 && pl.first)) starts++; /* a chunk whose input arrives from the previous stage */
    for (int l = pl.lo[c]; l < pl.hi[c]; l++) {
      const int k = aa_arch_is_moe_layer(a, l) != 0;
      nbk[k]++;
      nfk[k] += aa_sizes_block_full(s->ckpt, s->ckpt_layers, l) != 0;
    }
  }
  const int nb = nbk[0] + nbk[1], nfull = nfk[0] + nfk[1], nkept = nb - nfull;
  for (int k = 0; k < 2; k++)
    if (nbk[k]) block_ops(v, a, s, &d, k == 1, f, dt, nbk[k], nfk[k], nbk[k]);
  if (selective) act_op(v, &d, N, dt, 0, 0, nbk[0], 0); /* the dropped output, recomputed */
  /* The embedding: under context parallelism one call per chunk. */
  const int chunks = s->degree[AA_AXIS_CONTEXT] > 1 ? 2 : 1;
  /* LoRA: the frozen embedding has no gradient to compute. */
  if (pl.first) add(v, AA_OP_ENCODER, N / chunks, d.C, 0, 0, dt, false, chunks, 0, 0, a->lora.r ? 0 : chunks);
  if (pl.last) {
    add(v, d.llama ? AA_OP_RMSNORM : AA_OP_LAYERNORM, Ns, d.C, 0, 0, dt, false, 1, 0, 0, 1);
    gemm(v, N, d.C, d.Vl, dt, a->lora.r > 0, 1, 0, 1);
    add(v, AA_OP_XENT, N, d.Vl, 0, 0, dt, false, 1, 0, 0, 1);
  }
  /* A dense and an MoE block's weights (each kind's first block). */
  size_t block_n[2] = {0, 0};
  for (int l = a->n_layer - 1; l >= 0; l--)
    block_n[aa_arch_is_moe_layer(a, l) != 0] =
        aa_sizes_unit_numel_ep(a, s->degree[AA_AXIS_TENSOR], ep, 1 + l);
  const int nkd = nbk[0] - nfk[0]; /* dense blocks whose fields are kept */
  if (casts) {
    /* Forward: each block's rounds and its weights widened; a received
     * chunk input widened; the embedding's and the final norm's outputs
     * rounded. */
    block_rounds(v, &w, d.llama, 0, nb, nbk[0]);
    for (int k = 0; k < 2; k++)
      widen16(v, (int64_t)block_n[k], 0, nbk[k]);
    widen16(v, NsC, 0, starts);
    round16(v, NsC, 0, pl.first + pl.last);
    /* Backward: weights and input widened per block; kept fields widened
     * (the activation's output only where selective checkpointing keeps
     * it) or the dropped ones recomputed; the activation gradients rounded
     * (dqkv twice for llama: after attention and after RoPE). */
    for (int k = 0; k < 2; k++)
      widen16(v, (int64_t)block_n[k], 1, nbk[k]);
    widen16(v, NsC, 1, nb);
    block_rounds(v, &w, d.llama, 1, nfull, nfk[0]);
    widen16(v, NsC, 1, 3 * nkept);
    widen16(v, w.NQKV, 1, nkept);
    widen16(v, w.NCl, 1, nkept);
    widen16(v, w.NFH, 1, nkd);
    widen16(v, w.NF, 1, selective ? 0 : nkd);
    round16(v, w.NF, 1, (selective ? nkd : 0) + nbk[0]);
    round16(v, w.NFH, 1, nbk[0]);
    round16(v, NsC, 1, 4 * nb);
    round16(v, w.NCl, 1, nb);
    round16(v, w.NQKV, 1, (d.llama ? 2 : 1) * nb);
    if (pl.last) {
      round16(v, N * d.Vl, 1, 1);
      round16(v, NsC, 1, 2);
      widen16(v, NsC, 1, 1);
    }
  }
  /* The optimizer: AdamW over what the rank updates (in fp32 whatever the
   * amp): its parameters, or from ZeRO 1 its shard (each piece's chunk,
   * an expert slice's over its expert-data group); then under 16-bit
   * storage the updated parameters rounded and the outer weights widened
   * once (pass_begin, aa_zero_publish). */
  const size_t held = aa_sizes_params_held_ep(a, s->degree[AA_AXIS_TENSOR], ep, &pl);
  aa_zero_sizes_t zsz;
  aa_sizes_zero_ep(a, s->degree[AA_AXIS_TENSOR], ep, &pl, s->amp, zs, R, &zsz);
  size_t upd = zs == 0 ? held : zsz.shard;
  if (a->lora.r) { /* the adapters only (their shard from ZeRO 1) */
    aa_lora_sizes_t ls;
    aa_sizes_lora(a, s->degree[AA_AXIS_TENSOR], &pl, s->amp, zs, R, &ls);
    upd = ls.moment.numel;
  }
  add(v, AA_OP_ADAMW, (int64_t)upd, 0, 0, 0, AA_F32, true, 1, 0, 0, 0);
  if (casts) {
    add(v, AA_OP_CAST, (int64_t)(zs == 3 ? upd : held), 0, 0, 0, AA_F32, true, 1, 0, 0, 0);
    size_t pre = aa_sizes_unit_held(a, s->degree[AA_AXIS_TENSOR], &pl, 0),
           post = aa_sizes_unit_held(a, s->degree[AA_AXIS_TENSOR], &pl, L + 1);
    if (zs < 3 && pre) add(v, AA_OP_CAST, (int64_t)pre, 0, 0, 0, AA_F32, true, 0, 1, 0, 0);
    if (zs < 3 && post) add(v, AA_OP_CAST, (int64_t)post, 0, 0, 0, AA_F32, true, 0, 1, 0, 0);
  }
  return 0;
}

size_t aa_predict_ops(const aa_arch_t *arch, const aa_strategy_t *s, int stage, int cuda, aa_calib_op_t *out,
                      size_t cap) {
  inventory_t v;
  if (inventory(arch, s, stage, cuda, rank_imbalance(arch, s, 0), &v)) return 0;
  size_t n = 0;
  for (int i = 0; i < v.n; i++) {
    bool seen = false;
    for (int j = 0; j < i && !seen; j++)
      seen = v.it[j].dtype == v.it[i].dtype && aa_op_shape_equal(&v.it[j].shape, &v.it[i].shape);
    if (seen) continue;
    if (n < cap) out[n] = (aa_calib_op_t){.shape = v.it[i].shape, .dtype = v.it[i].dtype};
    n++;
  }
  return n;
}

/* ---- lookups with stand-ins ---------------------------------------------------- */

/* The measured op for shape s in dtype; else with a profile its roofline
 * time in roof_dtype (item_t); else the nearest of its kind and dtype (in
 * the log of each dimension it uses) scaled by the work ratio; else, with
 * a roofline fitted to the calibration, its class's measured rate in
 * roof_dtype. Into *fwd and *bwd; AA_EINVAL
 * when none of these can time it. c may be NULL (a profile alone). */
static int op_time(const aa_calib_t *c, const aa_roofline_t *roof, const aa_op_shape_t *s, aa_dtype_t dtype,
                   aa_dtype_t roof_dtype, double *fwd, double *bwd, aa_predict_t *p) {
  const aa_calib_op_t *o = c ? aa_calib_find_op(c, s, dtype) : NULL, *best = NULL;
  if (o) {
    *fwd = o->fwd_s;
    *bwd = o->bwd_s;
    return 0;
  }
  if (roof && roof->profile) {
    aa_roofline_op(roof, s, roof_dtype, fwd, bwd);
    p->ops_modelled++;
    return 0;
  }
  double best_d = INFINITY;
  for (int i = 0; c && i < c->n_op; i++) {
    const aa_calib_op_t *x = &c->op[i];
    if (x->shape.op != s->op || x->dtype != dtype) continue;
    double dist = 0;
    for (int k = 0; k < 4; k++)
      if (s->d[k] > 0 && x->shape.d[k] > 0) {
        double r = log((double)s->d[k] / (double)x->shape.d[k]);
        dist += r * r;
      }
    if (dist < best_d) best_d = dist, best = x;
  }
  if (!best) {
    if (roof && aa_roofline_knows(roof, aa_roof_class_of(s->op))) {
      aa_roofline_op(roof, s, roof_dtype, fwd, bwd);
      p->ops_modelled++;
      return 0;
    }
    return aa_error(AA_EINVAL, "the calibration has no %s op in %s: calibrate the model on this device kind",
                    aa_op_kind_name(s->op), aa_dtype_name(dtype));
  }
  double ratio = aa_op_work(s) / aa_op_work(&best->shape);
  *fwd = best->fwd_s * ratio;
  *bwd = best->bwd_s * ratio;
  p->ops_estimated++;
  return 0;
}

/* The line of kind k for groups of t ranks: measured, or the nearest
 * measured size of that kind (else the all-reduce's, else any kind's),
 * its latency scaled by (t - 1) / (t0 - 1). */
static int link_line(const aa_calib_t *c, aa_cost_collective_t k, int t, double *lat, double *bw,
                     int *estimated) {
  const aa_calib_link_t *l = aa_calib_find_link(c, k, t);
  if (l) {
    *lat = l->latency_s;
    *bw = l->bytes_per_s;
    return 0;
  }
  const aa_cost_collective_t kinds[3] = {k, AA_COST_ALL_REDUCE, AA_COST_COLLECTIVES};
  for (int pass = 0; pass < 3 && !l; pass++) {
    double best = INFINITY;
    for (int i = 0; i < c->n_link; i++) {
      const aa_calib_link_t *x = &c->link[i];
      if (kinds[pass] != AA_COST_COLLECTIVES && x->kind != kinds[pass]) continue;
      double dist = fabs(log((double)x->ranks / t));
      if (dist < best || (dist == best && x->ranks < l->ranks)) best = dist, l = x;
    }
  }
  if (!l)
    return aa_error(AA_EINVAL,
                    "the calibration measured no collectives (it ran on one device): calibrate on a "
                    "pool of at least two devices to predict strategies with process groups");
  *lat = l->latency_s * (double)(t - 1) / (double)(l->ranks - 1);
  *bw = l->bytes_per_s;
  (*estimated)++;
  return 0;
}

/* Where a group's collectives are timed: a calibration's lines (c; NULL
 * with a profile and no calibration), or, with a profile (roof), a ring
 * on the links of a group with `per_node` of its ranks in each node (a
 * calibration's line of exactly the kind and size still wins). */
typedef struct lines_of {
  const aa_calib_t *c;
  const aa_roofline_t *roof; /* with a profile, else NULL */
  int per_node;
} lines_of_t;

/* Seconds group g's collectives take on one rank: per kind, calls x
 * latency + the bytes through its link (cost.h's ring convention: 2(t-1)/t
 * of an all-reduce's, (t-1)/t of an all-gather's or reduce-scatter's, a
 * point-to-point message whole) / bandwidth. A send and a receive are
 * one transfer each between two ranks: the send line at 2 ranks. */
static int group_time(const lines_of_t *ln, const aa_cost_group_t *g, double *out, aa_predict_t *p) {
  *out = 0;
  if (g->ranks < 2) return 0;
  const double t = g->ranks;
  for (int k = 0; k < AA_COST_COLLECTIVES; k++) {
    const aa_cost_calls_t *x = &g->kind[k];
    if (!x->calls) continue;
    bool p2p = k == AA_COST_SEND || k == AA_COST_RECV;
    double lat = 0, bw = 1, share = p2p ? 1 : k == AA_COST_ALL_REDUCE ? 2 * (t - 1) / t : (t - 1) / t;
    const aa_cost_collective_t kind = p2p ? AA_COST_SEND : (aa_cost_collective_t)k;
    const int ranks = p2p ? 2 : g->ranks;
    const aa_calib_link_t *l = ln->c ? aa_calib_find_link(ln->c, kind, ranks) : NULL;
    if (ln->roof && l) {
      lat = l->latency_s;
      bw = l->bytes_per_s;
    } else if (ln->roof) {
      aa_roofline_link(ln->roof, kind, ranks, ln->per_node, &lat, &bw);
      p->links_modelled++;
    } else if (!ln->c) {
      return aa_error(AA_EINVAL, "no calibration and no device profile to time the collectives with");
    } else {
      int rc = link_line(ln->c, kind, ranks, &lat, &bw, &p->links_estimated);
      if (rc) return rc;
    }
    *out += (double)x->calls * lat + share * (double)x->bytes / bw;
  }
  return 0;
}

/* CPU executors sharing a host's cores: the rate of one relative to an
 * uncontended one, min(1, cores / (ranks x threads)); 1 on its own host. */
static double share(int cores, int ranks, int threads) {
  if (cores <= 0) return 1;
  double want = (double)ranks * (threads > 0 ? threads : 1);
  return want > cores ? cores / want : 1;
}

/* Where each group's collectives are timed (lines_of_t). */
typedef struct lines {
  lines_of_t tensor, context, data, pipeline, embedding, expert, expert_data;
} lines_t;

/* One pipeline rank's step by part (the fields of aa_predict_t): its ops
 * timed from c (may be NULL with a profile) and roof, its groups on ln. */
static int predict_stage(const aa_arch_t *a, const aa_strategy_t *s, int m, int stage, const aa_calib_t *c,
                         const aa_roofline_t *roof, int cuda, const lines_t *ln, double fast, double slow,
                         double imbalance, aa_predict_t *p) {
  inventory_t v;
  const double fx = rank_imbalance(a, s, imbalance);
  int rc = inventory(a, s, stage, cuda, fx, &v);
  if (rc) return rc;
  double fwd_mb = 0, bwd_mb = 0, opt = 0;
  for (int i = 0; i < v.n; i++) {
    const item_t *x = &v.it[i];
    double f = 0, b = 0;
    if ((rc = op_time(c, roof, &x->shape, x->dtype, x->roof_dtype, &f, &b, p))) return rc;
    if (x->per_step)
      opt += x->ff * f + x->bf * b;
    else {
      fwd_mb += x->ff * f + x->bf * b;
      bwd_mb += x->fb * f + x->bb * b;
    }
  }
  aa_cost_comm_t cc;
  aa_cost_comm_stage(a, s, m, stage, &cc);
  /* The busiest rank receives f times the even rows (and, a few bytes, f
   * times the even counts): its all-to-alls carry that much. */
  aa_cost_calls_t *a2a = &cc.expert.kind[AA_COST_ALL_TO_ALL];
  if (fx != 1) a2a->bytes = (uint64_t)llround((double)a2a->bytes * fx);
  p->moe_imbalance = fx;
  double emb, ed;
  if ((rc = group_time(&ln->tensor, &cc.tensor, &p->tensor_comm_s, p)) ||
      (rc = group_time(&ln->expert, &cc.expert, &p->expert_comm_s, p)) ||
      (rc = group_time(&ln->expert_data, &cc.expert_data, &ed, p)) ||
      (rc = group_time(&ln->context, &cc.context, &p->context_comm_s, p)) ||
      (rc = group_time(&ln->pipeline, &cc.pipeline, &p->pipeline_comm_s, p)) ||
      (rc = group_time(&ln->data, &cc.data, &p->data_comm_s, p)) ||
      (rc = group_time(&ln->embedding, &cc.embedding, &emb, p)))
    return rc;
  p->data_comm_s += emb + ed;
  p->bubble = aa_cost_bubble(s, m);
  /* Two bounds of the step, the larger wins:
   * - the critical path: this rank's ops at the rate they run alone
   *   (fast), the collectives, stretched by the bubble;
   * - the host's throughput: every rank on the host computes its ops at the
   *   rate the host's cores give when all of them compute at once (slow).
   * Without oversubscription slow = fast and the first is the larger. On a
   * CPU host with more rank threads than cores, a pipeline rank waiting in
   * the bubble leaves its core to the others, so the bubble costs less than
   * its share: it is hidden up to the host's throughput. */
  const double comm = p->tensor_comm_s + p->pipeline_comm_s + p->context_comm_s + p->expert_comm_s;
  const double path = (m * (fwd_mb + bwd_mb) * fast + comm) / (1 - p->bubble) + opt * fast;
  const double host = m * (fwd_mb + bwd_mb) * slow + comm + opt * slow;
  const double f = path >= host ? fast : slow;
  p->forward_s = m * fwd_mb * f;
  p->backward_s = m * bwd_mb * f;
  p->optimizer_s = opt * f;
  const double busy = p->forward_s + p->backward_s + comm;
  p->bubble_s = path >= host ? busy / (1 - p->bubble) - busy : 0; /* hidden when the host's cores bound */
  p->step_s = busy + p->bubble_s + p->optimizer_s + p->data_comm_s;
  return 0;
}

int aa_predict(const aa_model_spec_t *spec, const aa_strategy_t *s, const aa_calib_t *c,
               const aa_predict_pool_t *pool, aa_predict_t *out) {
  const aa_arch_t *a = &spec->arch;
  const int ranks = (int)aa_strategy_world(s), m = aa_strategy_accum_steps(s, spec);
  if (pool->devices < ranks)
    return aa_error(AA_EINVAL, "the pool's %d devices are fewer than the strategy's %d ranks", pool->devices,
                    ranks);
  if (s->micro_batch < 1 || m < 1)
    return aa_error(AA_EINVAL, "the strategy is not resolved for the model (micro_batch %d)", s->micro_batch);
  aa_pp_place_t pl;
  int rc = aa_pp_place(a, s, m, 0, &pl);
  if (rc) return rc;
  const aa_roofline_t *roof = pool->roofline;
  const bool profiled = roof && roof->profile;
  if (!c && !profiled)
    return aa_error(AA_EINVAL, "no calibration and no device profile to predict the strategy from");
  const int cuda = c ? c->cuda : 1;
  /* A gang larger than a host spans hosts: host_devices of its ranks share
   * one host's cores. */
  const bool across = pool->host_devices > 0 && ranks > pool->host_devices;
  const int on_host = across ? pool->host_devices : ranks;
  const int tp = s->degree[AA_AXIS_TENSOR], cp = s->degree[AA_AXIS_CONTEXT], dp = s->degree[AA_AXIS_DATA],
            pp = s->degree[AA_AXIS_PIPELINE];
  const aa_calib_t *span = across && pool->inter && pool->inter->n_link ? pool->inter : c;
  bool ring_across = false, data_across = false;
  lines_t ln;
  if (profiled) {
    /* Megatron's rank order (tensor fastest, then context, data,
     * pipeline) on nodes of G devices: how many of each group's ranks share
     * a node. A group inside one node takes a measured line of the
     * calibration, one across nodes the inter-host calibration's; else
     * the profile's links. */
    const int G = pool->host_devices > 0 ? pool->host_devices : ranks;
    const int in_t = tp < G ? tp : G, per_t = tp <= G ? G / tp : 1, stride_p = tp * cp * dp;
    const int in_c = cp < per_t ? cp : per_t, in_d = dp * cp < per_t ? dp * cp : per_t;
    const int in_p = stride_p < G ? (pp < G / stride_p ? pp : G / stride_p) : 1;
    const int in_e = (pp - 1) * stride_p < G ? 2 : 1;
    /* Expert groups of ep consecutive replicas, expert-data groups of
     * the replicas ep apart (layout.h aa_layout_expert). */
    const int ep = s->ep > 1 ? s->ep : 1, in_x = ep < in_d ? ep : in_d, in_xd = in_d / in_x;
#define ON(k, n) ((lines_of_t){(k) >= (n) ? c : pool->inter, roof, (k)})
    ln = (lines_t){ON(in_t, tp), ON(in_c, cp), ON(in_d, dp * cp),      ON(in_p, pp),
                   ON(in_e, 2),  ON(in_x, ep), ON(in_xd, dp * cp / ep)};
#undef ON
  } else {
    /* Its data, pipeline and embedding groups take the inter-host lines
     * (or the intra-host ones, counted as stand-ins). Its context groups
     * stay inside a host when one holds whole tensor x context blocks
     * (predict.h); the data group of dp x cp ranks is then, at dp 1, a
     * context group. The tensor group never crosses hosts. */
    ring_across = across && cp > 1 && pool->host_devices % (tp * cp) != 0;
    data_across = across && (dp > 1 || ring_across);
    ln = (lines_t){.tensor = {c, NULL, 0},
                   .context = {ring_across ? span : c, NULL, 0},
                   .data = {data_across ? span : c, NULL, 0},
                   .pipeline = {span, NULL, 0},
                   .embedding = {span, NULL, 0},
                   .expert = {data_across ? span : c, NULL, 0},
                   .expert_data = {data_across ? span : c, NULL, 0}};
  }
  /* Ops were timed with c->ranks executors computing at once on its host;
   * the pool's run on_host executors on pool->host_cores. */
  double slow = 1, fast = 1;
  if (!cuda) {
    int threads = pool->threads > 0 ? pool->threads : c->threads;
    slow = share(c->host_cores, c->ranks, c->threads) / share(pool->host_cores, on_host, threads);
    fast = share(c->host_cores, c->ranks, c->threads) / share(pool->host_cores, 1, threads);
  }
  aa_predict_t best = {0}, p;
  int ops_est = 0, links_est = 0, ops_mod = 0, links_mod = 0;
  for (int r = 0; r < pp; r++) {
    memset(&p, 0, sizeof p);
    if ((rc = predict_stage(a, s, m, r, c, roof, cuda, &ln, fast, slow, pool->moe_imbalance, &p))) return rc;
    ops_est += p.ops_estimated;
    links_est += p.links_estimated;
    ops_mod += p.ops_modelled;
    links_mod += p.links_modelled;
    if (!profiled && across && span == c) /* intra-host lines stood in */
      links_est += (aa_sizes_replicas(s) > 1 && data_across) + (pp > 1) + ring_across;
    if (r == 0 || p.step_s > best.step_s) {
      best = p;
      best.stage = r;
    }
  }
  best.ops_estimated = ops_est;
  best.links_estimated = links_est;
  best.ops_modelled = ops_mod;
  best.links_modelled = links_mod;
  best.across_hosts = across;
  best.tokens_per_s = (double)spec->train.global_batch * a->seq_len / best.step_s;
  aa_cost_memory(a, s, m, &best.mem);
  *out = best;
  return 0;
}

/* ---- what to measure ------------------------------------------------------------ */

/* The distinct (shape, dtype) pairs seen, in an open-addressed hash set
 * that keeps the order of arrival. */
typedef struct shape_set {
  size_t n, cap;      /* entries, and the table's slots (a power of two, twice the most entries) */
  aa_calib_op_t *ops; /* [cap / 2] in order */
  int32_t *slot;      /* [cap]: index into ops, -1 empty */
} shape_set_t;

static uint64_t shape_hash(const aa_calib_op_t *o) {
  uint64_t h = AA_FNV_INIT;
  h = aa_fnv1a(h, &o->shape.op, sizeof o->shape.op);
  h = aa_fnv1a(h, o->shape.d, sizeof o->shape.d);
  return aa_fnv1a(h, &o->dtype, sizeof o->dtype);
}

static void set_put(shape_set_t *st, const aa_calib_op_t *o) {
  if (st->n >= st->cap / 2) return; /* full: more shapes than any model has; the count stops */
  size_t i = shape_hash(o) & (st->cap - 1);
  for (; st->slot[i] >= 0; i = (i + 1) & (st->cap - 1)) {
    const aa_calib_op_t *x = &st->ops[st->slot[i]];
    if (x->dtype == o->dtype && aa_op_shape_equal(&x->shape, &o->shape)) return;
  }
  st->slot[i] = (int32_t)st->n;
  st->ops[st->n++] = *o;
}

size_t aa_predict_wanted(const aa_model_spec_t *spec, int max_devices, int cuda, aa_calib_op_t *out,
                         size_t cap) {
  static const struct {
    aa_pp_schedule_t sched;
    int vpp;
    aa_pp_partition_t part;
  } shapes[] = {{AA_SCHEDULE_1F1B, 1, AA_PARTITION_UNIFORM},
                {AA_SCHEDULE_1F1B, 1, AA_PARTITION_PARAMETERS},
                {AA_SCHEDULE_INTERLEAVED, 2, AA_PARTITION_UNIFORM},
                {AA_SCHEDULE_INTERLEAVED, 2, AA_PARTITION_PARAMETERS}};
  static const aa_ckpt_mode_t ckpts[] = {AA_CKPT_NONE, AA_CKPT_SELECTIVE, AA_CKPT_FULL};
  const aa_space_pool_t pool = {.devices = max_devices,
                                .global_batch = spec->train.global_batch,
                                .cuda = cuda != 0,
                                .arch = &spec->arch};
  shape_set_t st = {.cap = 1u << 17};
  st.ops = malloc(st.cap / 2 * sizeof *st.ops);
  st.slot = malloc(st.cap * sizeof *st.slot);
  size_t nl = aa_space_layouts(NULL, 0, &pool);
  aa_space_layout_t *layouts = malloc((nl ? nl : 1) * sizeof *layouts);
  aa_strategy_t *s = malloc(sizeof *s);
  int *mbs = malloc(sizeof(int) * (size_t)(spec->train.global_batch > 0 ? spec->train.global_batch : 1));
  size_t n = 0;
  if (!st.ops || !st.slot || !layouts || !s || !mbs) goto cleanup;
  memset(st.slot, 0xff, st.cap * sizeof *st.slot);
  aa_space_layouts(layouts, nl, &pool);
  aa_dtype_t amps[3];
  size_t namp = aa_space_precisions(amps, 3, cuda != 0, 0);
  for (size_t li = 0; li < nl; li++) {
    const aa_space_layout_t *l = &layouts[li];
    size_t nmb = aa_space_micro_batches(mbs, (size_t)spec->train.global_batch,
                                        spec->train.global_batch / l->degree[AA_AXIS_DATA]);
    /* ZeRO shards over the data x context ranks (sizes.h). */
    const int replicas = l->degree[AA_AXIS_DATA] * l->degree[AA_AXIS_CONTEXT];
    for (size_t h = 0; h < (l->degree[AA_AXIS_PIPELINE] > 1 ? sizeof shapes / sizeof shapes[0] : 1); h++)
      for (int z = 0; z <= (replicas > 1 ? 3 : 0); z++) {
        /* The expert-parallel degrees' shapes too (larger expert GEMMs). */
        int eps[32];
        size_t nep = aa_space_experts(eps, 32, &spec->arch, replicas, 0);
        for (size_t e = 0; e < nep && e < 32; e++)
          for (size_t ai = 0; ai < namp; ai++)
            for (size_t k = 0; k < sizeof ckpts / sizeof ckpts[0]; k++)
              for (size_t b = 0; b < nmb; b++) {
                aa_strategy_default(s);
                memcpy(s->degree, l->degree, sizeof s->degree);
                s->sp = l->sp;
                s->schedule = shapes[h].sched, s->vpp = shapes[h].vpp, s->partition = shapes[h].part;
                s->zero = z, s->ep = eps[e], s->amp = amps[ai], s->ckpt = ckpts[k], s->micro_batch = mbs[b];
                if (aa_strategy_resolve(s, spec, 0)) continue;
                for (int r = 0; r < s->degree[AA_AXIS_PIPELINE]; r++) {
                  aa_calib_op_t ops[ITEMS_MAX];
                  size_t no = aa_predict_ops(&spec->arch, s, r, cuda, ops, ITEMS_MAX);
                  for (size_t i = 0; i < no && i < ITEMS_MAX; i++)
                    set_put(&st, &ops[i]);
                }
              }
      }
  }
  n = st.n;
  memcpy(out, st.ops, (n < cap ? n : cap) * sizeof *out);

cleanup:
  free(mbs);
  free(s);
  free(layouts);
  free(st.slot);
  free(st.ops);
  return n;
}
