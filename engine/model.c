/* GPT-2 model on the backend op table: parameter table, activation
 * buffers, forward and backward. Kernels do the math; this file only wires
 * shapes and buffers, so it is the same for every backend. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/moe_ops.h"
#include "strategies/sizes.h"

/* Per-block activation fields (strategies/sizes.h, which lays them out),
 * by the short names the wiring below uses on every line. The attention
 * probabilities are never stored (ops.h: the backward recomputes them from
 * the per-row logsumexp, which lives with the statistics). */
enum {
  F_LN1 = AA_ACT_LN1,
  F_QKV = AA_ACT_QKV,
  F_ATTY = AA_ACT_ATTY,
  F_RES2 = AA_ACT_RES2,
  F_LN2 = AA_ACT_LN2,
  F_FCH = AA_ACT_FCH,
  F_FCHG = AA_ACT_FCHG,
  F_RES3 = AA_ACT_RES3,
  NF = AA_ACT_FIELDS
};
/* Statistics of a block, fp32, kept whenever the block keeps anything but
 * its output: ln1 mean/rstd, ln2 mean/rstd, each (B,T), then the attention
 * logsumexp (B,NH,T) (the slice sizes.h sizes). */
enum { S_LN1M, S_LN1R, S_LN2M, S_LN2R, NS };
#define LSE(st, N) ((st) + (size_t)NS * (N))

/* What a block keeps for backward, in the storage dtype; NULL = not kept. */
typedef struct {
  void *f[NF];
  float *stats; /* fp32 */
  char *moe;    /* an MoE block's kept buffers (sizes.h aa_moe_acts_t), fp32; NULL for a dense block */
} block_store_t;

/* fp32 views of one block's activations while computing it. */
typedef struct {
  float *f[NF];
  float *stats;
} block_view_t;

struct aa_acts {
  /* Kept activations (AA_MEM_ACTS), one allocation. */
  void *store;
  size_t store_bytes;
  void *encoded; /* (B,T,C) encoder output, storage dtype */
  block_store_t *blocks;
  float *lnf, *lnf_stats; /* (B,T,C), 2*(B,T): fp32 */
  float *logits;          /* (B,T,V) fp32; probabilities after a forward with targets */
  float *losses;          /* (B,T) */
  /* Workspace (AA_MEM_WORKSPACE), one allocation. Buffers the options do
   * not need stay NULL. */
  void *ws;
  size_t ws_bytes;
  float *wsf[NF];     /* one block's fp32 fields: staging under amp, recompute targets */
  float *ws_res[2];   /* amp: fp32 residual stream, by block parity; ws_res[1] holds the encoder output */
  float *ws_stats;    /* statistics of a recomputed block */
  float *wblock, *wpre, *wpost; /* amp: fp32 weights of one block, of wte+wpe, of lnf */
  /* Activation gradients, reused by every block (consumed as soon as produced). */
  float *dres;             /* (B,T,C) gradient of the residual stream (a pipeline stage points it at a
                              stash or a gradient buffer for a pass; dres_ws is its own) */
  float *dres_ws;
  float *dln;              /* (B,T,C) */
  float *dqkv;             /* (B,T,3C) */
  float *datty;            /* (B,T,C) */
  float *dfch, *dfch_gelu; /* (B,T,F) */
  /* Tensor parallelism (NULL without): the cross-entropy's parts, this
   * rank's (N,3) then every rank's (tp,N,3); host values on their way
   * through the group; and with sequence parallelism a whole (N,C) gathered
   * from the ranks' tokens, a (N,C) partial sum on its way to the
   * reduce-scatter, and a block's LayerNorm gradients (4C) on their way to
   * the all-reduce. */
  float *xent, *scalars, *full, *partial, *lngrad;
  /* Context parallelism (NULL without): the ring's two buffers (each a
   * rank's keys and values, its k|v columns packed, then their gradient
   * on its way back), one block's attention of a chunk's queries and its
   * logsumexp, and the backward's delta of both chunks. */
  float *ring, *ring_out, *ring_lse, *ring_delta;
  /* LoRA (NULL without): one target's A x and its gradient (N,r) each, and
   * (N,out) for its B A x or its scaled output gradient (sizes.h lora). */
  float *lora_u, *lora_du, *lora_tmp;
  /* MoE blocks (NULL in a dense model): the backward's gradients of the
   * permuted rows (dxp, dyp), of the routing weights and of the router
   * logits, reused by every MoE block; the layout of one block's kept
   * buffers (offsets from block_store_t moe). */
  float *moe_dxp, *moe_dyp, *moe_dweight, *moe_dlogits;
  float *moe_dxl, *moe_dyl; /* ep > 1: the gradients of the rows the rank's experts computed */
  float *moe_dx;            /* sequence parallelism: an MoE block's whole input gradient */
  char *ws_moe; /* where a fully checkpointed MoE block is recomputed */
  aa_moe_acts_t moe_off;
  size_t host_bytes; /* the routing maps' bytes, counted as activations */
  /* Pipeline parallelism (sizes.h aa_act_layout_t): where each block's
   * kept buffers lie in a slot, the slots' size, the input buffers
   * (encoded points at the one in use), the gradient receive buffers, the
   * send buffer and the last chunk's stash (of the slot in use). */
  aa_act_block_t *off;
  size_t slot_bytes, stash_off;
  void *act_buf0;
  float *grad_buf0, *stash;
  void *send;
  int32_t *inputs, *targets; /* (B,T) copies of the last batch, backend memory (inputs: of the input
                                buffer in use; the first stage keeps one per input buffer) */
  int32_t *inputs_all;
  float *host_losses;        /* (B,T) host copy of losses */
  int have_targets;
};

/* How a rank's tensor is cut from the whole one (model.h): kept whole,
 * a block of rows (rows_lo.. of the whole), q/k/v's head blocks, or a block
 * of columns in every row. */
typedef enum { WHOLE, ROWS, HEADS, COLS } split_t;

/* Appends tensor `name` of the rank's shape (d0, d1) (d1 = 0: 1-D) cut
 * from the whole (g0, g1) as split says; *g is the whole model's element
 * count so far. ROWS takes `rows` rows from row `lo`; HEADS three blocks of
 * d0 / 3 rows from lo, C + lo and 2C + lo (C = g0 / 3); COLS d1 columns
 * from column lo of each of the d0 rows. */
typedef struct {
  aa_tensor_desc_t *out;
  int n;         /* tensors so far */
  size_t local;  /* the rank's elements so far */
  size_t global; /* the whole model's */
  int ep, er;    /* the expert group's size and the rank's place in it */
  int etp, r;    /* the tensor ranks each expert is split over (aa_sizes_etp) and the rank's place */
} table_t;

static void add_tensor(table_t *tb, const char *name, int layer, int d0, int d1, int g0, int g1, split_t split,
                       int lo, int rows) {
  aa_tensor_desc_t *t = &tb->out[tb->n++];
  size_t *g = &tb->global;
  snprintf(t->name, sizeof t->name, "%s", name);
  t->offset = tb->local;
  t->ndim = d1 ? 2 : 1;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
  t->layer = layer;
  t->decay = t->ndim == 2;
  const size_t w = (size_t)(g1 ? g1 : 1); /* elements in a whole row */
  t->goffset = *g;
  t->gnumel = (size_t)g0 * w;
  t->replicated = split == WHOLE;
  t->expert = 0; /* llama_table marks the expert slices */
  t->runs = 1;
  t->run_n = t->numel;
  t->run_global = *g;
  t->run_lstride = t->run_gstride = 0;
  if (split == ROWS) {
    t->runs = rows > 0;
    t->run_n = (size_t)rows * w;
    t->run_global = *g + (size_t)lo * w;
  } else if (split == HEADS) {
    t->runs = 3;
    t->run_n = t->run_lstride = (size_t)(d0 / 3) * w;
    t->run_gstride = (size_t)(g0 / 3) * w;
    t->run_global = *g + (size_t)lo * w;
  } else if (split == COLS) {
    t->runs = d0;
    t->run_n = t->run_lstride = (size_t)d1;
    t->run_gstride = (size_t)g1;
    t->run_global = *g + (size_t)lo;
  }
  tb->local += t->numel;
  *g += t->gnumel;
}

/* Appends n experts' w13 (n 2Fe,C; w13 set) or w2 (n C,Fe) of ng in the
 * whole tensor from expert e0 (n < ng: expert parallelism's row slice).
 * Under tb->etp > 1 the rank's share is rows [r Fl, (r + 1) Fl) of each
 * expert's w1 and w3 halves (2n runs Fe rows apart) or those columns of
 * each of w2's n C rows, Fl = Fe / etp. */
static void add_experts(table_t *tb, const char *name, int layer, int n, int ng, int e0, int w13, int C,
                        int Fe) {
  const int Fl = Fe / tb->etp;
  const int d0 = w13 ? n * 2 * Fl : n * C, d1 = w13 ? C : Fl;
  const split_t sp = tb->etp > 1 ? COLS : n < ng ? ROWS : WHOLE;
  add_tensor(tb, name, layer, d0, d1, w13 ? ng * 2 * Fe : ng * C, w13 ? C : Fe, sp,
             w13 ? e0 * 2 * Fe : e0 * C, d0);
  if (tb->etp == 1) return;
  aa_tensor_desc_t *t = &tb->out[tb->n - 1];
  const size_t Cz = (size_t)C, F = (size_t)Fe, L = (size_t)Fl, at = (size_t)tb->r * L;
  t->runs = w13 ? 2 * n : n * C;
  t->run_n = t->run_lstride = w13 ? L * Cz : L;
  t->run_gstride = w13 ? F * Cz : F;
  t->run_global = t->goffset + (w13 ? ((size_t)e0 * 2 * F + at) * Cz : (size_t)e0 * Cz * F + at);
}

/* Tensors before the first block (gpt2: wte, wpe; llama: wte), in a dense
 * block (llama: 3 more with q/k/v biases), and the ones an MoE block has
 * beyond a dense llama block's (its router, routed and shared experts
 * replace gate, up and down; the shared experts' gate follows them). */
static int n_pre(const aa_arch_t *a) { return aa_arch_is_llama(a) ? 1 : 2; }
static int qkv_biases(const aa_arch_t *a) { return aa_arch_is_llama(a) && a->qkv_bias ? 3 : 0; }
static int per_layer(const aa_arch_t *a) {
  return aa_arch_is_llama(a) ? AA_LLAMA_TENSORS_PER_LAYER + qkv_biases(a) : AA_TENSORS_PER_LAYER;
}
static int moe_extra(const aa_arch_t *a) {
  return a->moe.shared_experts ? 2 + (a->moe.shared_expert_gate ? 1 : 0) : 0;
}
/* MoE blocks before block l (every `every`-th from block 0). */
static int moe_before(const aa_arch_t *a, int l) {
  return a->moe.experts > 0 && a->moe.every > 0 ? (l + a->moe.every - 1) / a->moe.every : 0;
}

int aa_gpt_n_tensors(const aa_arch_t *a) {
  return n_pre(a) + a->n_layer * per_layer(a) + moe_before(a, a->n_layer) * moe_extra(a) + 2;
}

/* llama's blocks: ln1.w, q.w, k.w, v.w (q|k|v contiguous: one GEMM makes
 * a token's q, k and v), with qkv_bias q.b, k.b, v.b (contiguous too: the
 * GEMM's one bias), proj.w, ln2.w, gate.w, up.w (contiguous: one GEMM
 * makes [gate | up]), down.w; and after them lnf.w, head.w. The
 * column-parallel q, k, v, gate and up split their rows (heads, kv heads,
 * MLP columns) and q, k and v their biases with them, the row-parallel
 * proj and down their columns, the head its vocabulary rows as wte does. */
static void llama_table(table_t *tb, const aa_arch_t *a, const aa_tp_dims_t *d, int r, int vlo, int vvalid) {
  const int C = d->C, Cl = d->Cl, F = d->F, GF = a->d_ff, KVl = d->KVl, GKV = d->KVl * d->tp;
  const int E = a->moe.experts, Fe = a->moe.d_ff_expert, S = a->moe.shared_experts;
  enum { NT = AA_LLAMA_TENSORS_PER_LAYER + 3 };
  char n[32];
  add_tensor(tb, "wte", -1, d->Vl, C, a->vocab_size, C, ROWS, vlo, vvalid);
  for (int l = 0; l < a->n_layer; l++) {
    /* An MoE block (the router whole on every tensor rank, the experts too
     * at expert_tensor_parallel_size 1, else split as add_experts says): its attention half as a dense
     * block's, then router.w (E,C), experts.w13 (E 2Fe,C) = per expert [w1; w3], experts.w2 (E C,Fe), and
     * with shared experts shared.w13 (S 2Fe,C) and shared.w2 (S C,Fe) (kernels/cpu/cpu_moe.h's layouts), and
     * their gate shared.gate (1,C) under shared_expert_gate. */
    const int moe = aa_arch_is_moe_layer(a, l), qb = qkv_biases(a);
    static const char *names[NT] = {"ln1.w", "q.w",    "k.w",   "v.w",    "q.b",  "k.b",
                                    "v.b",   "proj.w", "ln2.w", "gate.w", "up.w", "down.w"};
    const struct {
      int d0, d1, g0, g1;
      split_t split;
      int lo, rows;
    } t[NT] = {{C, 0, C, 0, WHOLE, 0, 0},
               {Cl, C, C, C, ROWS, r * Cl, Cl},
               {KVl, C, GKV, C, ROWS, r * KVl, KVl},
               {KVl, C, GKV, C, ROWS, r * KVl, KVl},
               {Cl, 0, C, 0, ROWS, r * Cl, Cl},
               {KVl, 0, GKV, 0, ROWS, r * KVl, KVl},
               {KVl, 0, GKV, 0, ROWS, r * KVl, KVl},
               {C, Cl, C, C, COLS, r * Cl, 0},
               {C, 0, C, 0, WHOLE, 0, 0},
               {F, C, GF, C, ROWS, r * F, F},
               {F, C, GF, C, ROWS, r * F, F},
               {C, F, C, GF, COLS, r * F, 0}};
    for (int i = 0; i < (moe ? 9 : NT); i++) {
      if (!qb && i >= 4 && i < 7) continue; /* no q/k/v biases */
      snprintf(n, sizeof n, "h%d.%s", l, names[i]);
      add_tensor(tb, n, l, t[i].d0, t[i].d1, t[i].g0, t[i].g1, t[i].split, t[i].lo, t[i].rows);
    }
    if (!moe) continue;
    /* Under expert parallelism the routed experts are the rank's rows
     * of the whole tensors: El experts from e0. */
    const int El = E / tb->ep, e0 = tb->er * El;
    static const char *xn[6] = {"router.w",   "experts.w13", "experts.w2",
                                "shared.w13", "shared.w2",   "shared.gate"};
    for (int i = 0; i < 3 + moe_extra(a); i++) {
      snprintf(n, sizeof n, "h%d.%s", l, xn[i]);
      if (i == 0 || i == 5)
        add_tensor(tb, n, l, i ? 1 : E, C, i ? 1 : E, C, WHOLE, 0, 0);
      else if (i < 3)
        add_experts(tb, n, l, El, E, e0, i == 1, C, Fe);
      else
        add_experts(tb, n, l, S, S, 0, i == 3, C, Fe);
      tb->out[tb->n - 1].expert = tb->ep > 1 && (i == 1 || i == 2);
    }
  }
  add_tensor(tb, "lnf.w", -1, C, 0, C, 0, WHOLE, 0, 0);
  add_tensor(tb, "head.w", -1, d->Vl, C, a->vocab_size, C, ROWS, vlo, vvalid);
}

void aa_gpt_tensor_table(const aa_arch_t *a, int tp, int r, aa_tensor_desc_t *out) {
  aa_gpt_tensor_table_pp(a, tp, r, NULL, out);
}

/* gpt2's tensors: wte, wpe, the blocks (model.h), lnf.w, lnf.b. */
static void gpt2_table(table_t *tb, const aa_arch_t *a, const aa_tp_dims_t *d, int r, int vlo, int vvalid) {
  const int C = d->C, Cl = d->Cl, F = d->F, GF = a->d_ff;
  char n[32];
  add_tensor(tb, "wte", -1, d->Vl, C, a->vocab_size, C, ROWS, vlo, vvalid);
  add_tensor(tb, "wpe", -1, a->seq_len, C, a->seq_len, C, WHOLE, 0, 0);
  for (int l = 0; l < a->n_layer; l++) {
    static const char *names[AA_TENSORS_PER_LAYER] = {"ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b",
                                                      "ln2.w", "ln2.b", "fc.w", "fc.b", "fcproj.w", "fcproj.b"};
    /* The rank's shape, the whole one, and how it is cut. */
    const struct {
      int d0, d1, g0, g1;
      split_t split;
      int lo, rows;
    } t[AA_TENSORS_PER_LAYER] = {
        {C, 0, C, 0, WHOLE, 0, 0},        {C, 0, C, 0, WHOLE, 0, 0},
        {3 * Cl, C, 3 * C, C, HEADS, r * Cl, 0}, {3 * Cl, 0, 3 * C, 0, HEADS, r * Cl, 0},
        {C, Cl, C, C, COLS, r * Cl, 0},   {C, 0, C, 0, WHOLE, 0, 0},
        {C, 0, C, 0, WHOLE, 0, 0},        {C, 0, C, 0, WHOLE, 0, 0},
        {F, C, GF, C, ROWS, r * F, F},    {F, 0, GF, 0, ROWS, r * F, F},
        {C, F, C, GF, COLS, r * F, 0},    {C, 0, C, 0, WHOLE, 0, 0}};
    for (int i = 0; i < AA_TENSORS_PER_LAYER; i++) {
      snprintf(n, sizeof n, "h%d.%s", l, names[i]);
      add_tensor(tb, n, l, t[i].d0, t[i].d1, t[i].g0, t[i].g1, t[i].split, t[i].lo, t[i].rows);
    }
  }
  add_tensor(tb, "lnf.w", -1, C, 0, C, 0, WHOLE, 0, 0);
  add_tensor(tb, "lnf.b", -1, C, 0, C, 0, WHOLE, 0, 0);
}

void aa_gpt_tensor_table_pp(const aa_arch_t *a, int tp, int r, const aa_pp_place_t *pp, aa_tensor_desc_t *out) {
  aa_gpt_tensor_table_ep(a, tp, r, 1, 0, pp, out);
}

void aa_gpt_tensor_table_ep(const aa_arch_t *a, int tp, int r, int ep, int er, const aa_pp_place_t *pp,
                            aa_tensor_desc_t *out) {
  aa_tp_dims_t d;
  aa_sizes_tp(a, tp, &d);
  int vlo, vvalid;
  aa_sizes_vocab_rows(a, tp, r, &vlo, &vvalid);
  table_t tb = {.out = out, .ep = ep > 1 ? ep : 1, .er = ep > 1 ? er : 0, .etp = aa_sizes_etp(a, tp), .r = r};
  if (d.llama) llama_table(&tb, a, &d, r, vlo, vvalid);
  else gpt2_table(&tb, a, &d, r, vlo, vvalid);
  for (int i = 0; i < tb.n; i++)
    out[i].unit = out[i].layer >= 0 ? AA_GPT_UNIT_BLOCK(out[i].layer) : i < n_pre(a) ? 0 : aa_sizes_units(a) - 1;
  /* A pipeline rank's buffer: only its units, back to back. */
  size_t local = 0;
  for (int i = 0; i < tb.n; i++) {
    aa_tensor_desc_t *t = &out[i];
    t->copy = t->unit == 0 && aa_pp_unit0_is_copy(pp, a);
    if (!aa_pp_holds_unit(pp, a, t->unit)) {
      t->numel = 0;
      t->shape[0] = t->shape[1] = 0;
      t->runs = 0;
    }
    t->offset = local;
    local += t->numel;
  }
}

/* A block's tensors by role (gpt2's order); llama has no biases but
 * q/k/v's (QKVB: q.b, with k.b and v.b after it, under qkv_bias), its
 * QKVW is q.w (k.w and v.w follow it), FCW gate.w (up.w follows) and
 * FCPROJW down.w. */
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB };
/* Where each role lies in a llama block without q/k/v biases (which, when
 * present, are 4..6 and move the later tensors 3 on). */
static const int llama_role[AA_TENSORS_PER_LAYER] = {0, -1, 1, -1, 4, -1, 5, -1, 6, -1, 8, -1};
/* An MoE block's own tensors, after its ln2.w (llama_table's order); it
 * has no FCW and FCPROJW. */
enum { ROUTERW = AA_TENSORS_PER_LAYER, EXPW13, EXPW2, SHW13, SHW2, SHGATE };
/* Index of block l's first tensor, and of its tensor of role k (-1: the
 * block has none). */
static int l0(const aa_arch_t *a, int l) {
  return n_pre(a) + l * per_layer(a) + moe_before(a, l) * moe_extra(a);
}
static int lt(const aa_arch_t *a, int l, int k) {
  if (!aa_arch_is_llama(a)) return l0(a, l) + k;
  const int moe = aa_arch_is_moe_layer(a, l), qb = qkv_biases(a);
  if (k >= ROUTERW) return moe && k - ROUTERW < 3 + moe_extra(a) ? l0(a, l) + 6 + qb + (k - ROUTERW) : -1;
  if (moe && (k == FCW || k == FCPROJW)) return -1;
  if (k == QKVB) return qb ? l0(a, l) + 4 : -1;
  return llama_role[k] < 0 ? -1 : l0(a, l) + llama_role[k] + (llama_role[k] >= 4 ? qb : 0);
}
/* Role k of block l within the block's unit-relative buffer w (weights or
 * gradients); NULL where the family has no such tensor (a bias). */
static float *role_at(const aa_gpt_t *m, float *w, int l, int k) {
  int i = lt(&m->arch, l, k);
  return i < 0 || !w ? NULL : w + (m->tensors[i].offset - m->tensors[l0(&m->arch, l)].offset);
}

static int block_full(const aa_gpt_opts_t *o, int l) { return aa_sizes_block_full(o->ckpt, o->ckpt_layers, l); }

/* The shape sizes.h lays a micro-batch of B x T out for under these options. */
static aa_act_shape_t act_shape(const aa_gpt_opts_t *o, int B, int T) {
  int tp = o->tensor ? aa_comm_world(o->tensor) : 1;
  return (aa_act_shape_t){.B = B,
                          .T = T,
                          .tp = tp,
                          .sp = tp > 1 && o->sp,
                          .cp = o->context ? aa_comm_world(o->context) : 1,
                          .ep = o->expert ? aa_comm_world(o->expert) : 1,
                          .zero = o->zero,
                          .amp = o->amp,
                          .ckpt = o->ckpt,
                          .ckpt_layers = o->ckpt_layers,
                          .pipe = o->pipe && o->pipe->pp > 1 ? o->pipe : NULL};
}

static size_t field_numel(const aa_gpt_t *m, int f) {
  aa_act_shape_t sh = act_shape(&m->opts, m->B, m->T);
  return aa_sizes_field_numel(&m->arch, &sh, f);
}

/* base + off, or NULL for a buffer the layout does not have. */
static void *at(void *base, size_t off) { return off == AA_SIZES_NONE ? NULL : (char *)base + off; }

/* Points the activation views into the store and the workspace, laid out
 * as strategies/sizes.h says (the layout the allocation was sized by, so
 * the accounting, the cost model and the carving cannot disagree). blocks
 * holds the per-block offsets of that layout. */
static void carve(aa_acts_t *a, const aa_act_layout_t *l, const aa_act_block_t *blocks, int n_layer) {
  void *st = a->store, *ws = a->ws;
  a->encoded = at(st, l->encoded);
  for (int b = 0; b < n_layer; b++) {
    for (int f = 0; f < NF; f++) a->blocks[b].f[f] = at(st, blocks[b].field[f]);
    a->blocks[b].stats = at(st, blocks[b].stats);
    a->blocks[b].moe = at(st, blocks[b].moe);
  }
  a->lnf = at(st, l->lnf);
  a->lnf_stats = at(st, l->lnf_stats);
  a->logits = at(st, l->logits);
  a->losses = at(st, l->losses);
  for (int f = 0; f < NF; f++) a->wsf[f] = at(ws, l->ws_field[f]);
  a->ws_res[0] = at(ws, l->ws_res[0]);
  a->ws_res[1] = at(ws, l->ws_res[1]);
  a->ws_stats = at(ws, l->ws_stats);
  a->wblock = at(ws, l->wblock);
  a->wpre = at(ws, l->wpre);
  a->wpost = at(ws, l->wpost);
  a->dres = a->dres_ws = at(ws, l->dres);
  a->dln = at(ws, l->dln);
  a->dqkv = at(ws, l->dqkv);
  a->datty = at(ws, l->datty);
  a->dfch = at(ws, l->dfch);
  a->dfch_gelu = at(ws, l->dfch_gelu);
  a->xent = at(ws, l->xent);
  a->scalars = at(ws, l->scalars);
  a->full = at(ws, l->full);
  a->partial = at(ws, l->partial);
  a->lngrad = at(ws, l->lngrad);
  a->ring = at(ws, l->ring);
  a->ring_out = at(ws, l->ring_out);
  a->ring_lse = at(ws, l->ring_lse);
  a->ring_delta = at(ws, l->ring_delta);
  a->moe_dxp = at(ws, l->moe_dxp);
  a->moe_dyp = at(ws, l->moe_dyp);
  a->moe_dweight = at(ws, l->moe_dweight);
  a->moe_dlogits = at(ws, l->moe_dlogits);
  a->moe_dxl = at(ws, l->moe_dxl);
  a->moe_dyl = at(ws, l->moe_dyl);
  a->moe_dx = at(ws, l->moe_dx);
  a->ws_moe = at(ws, l->ws_moe);
  a->lora_u = at(ws, l->lora); /* lora_du and lora_tmp follow it (aa_gpt_create) */
  memcpy(a->off, blocks, (size_t)n_layer * sizeof *blocks);
  a->slot_bytes = l->slot_bytes;
  a->stash_off = l->stash;
  a->act_buf0 = at(st, l->act_buf);
  a->grad_buf0 = at(st, l->grad_buf);
  a->send = at(ws, l->send);
}

/* Accounts `bytes` of kind in mem and takes them from the backend: the
 * accountant counts, the backend provides. The limit is checked before
 * allocating (the accountant's message), the bytes counted after; a
 * backend failure names the kind. */
static int backend_alloc(const aa_ops_t *ops, aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes, void **out) {
  if ((unsigned)kind >= AA_MEM_NKINDS) return aa_error(AA_EINVAL, "invalid memory kind %d", (int)kind);
  if (bytes == 0) {
    *out = NULL;
    return 0;
  }
  int rc = aa_mem_check(mem, kind, bytes);
  if (rc) return rc;
  void *p = NULL;
  if ((rc = ops->alloc(&p, bytes))) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", aa_last_error());
    return aa_error(rc, "%s for %s", msg, aa_mem_kind_name(kind));
  }
  aa_mem_charge(mem, kind, bytes); /* within the limit: checked above */
  *out = p;
  return 0;
}

static void backend_free(const aa_ops_t *ops, aa_mem_t *mem, aa_mem_kind_t kind, size_t bytes, void *p) {
  if (!p) return;
  ops->free(p);
  aa_mem_uncharge(mem, kind, bytes);
}

int aa_flatbuf_alloc(aa_flatbuf_t *b, const aa_ops_t *ops, aa_mem_t *mem, aa_mem_kind_t kind, aa_dtype_t dtype,
                     size_t n) {
  void *p;
  int rc = backend_alloc(ops, mem, kind, n * aa_dtype_size(dtype), &p);
  if (rc) return rc;
  b->dtype = dtype;
  b->kind = kind;
  b->numel = n;
  b->data = p;
  b->ops = ops;
  return 0;
}

int aa_flatbuf_alloc_as(aa_flatbuf_t *b, const aa_ops_t *ops, aa_mem_t *mem, const aa_buf_size_t *s) {
  return s->numel ? aa_flatbuf_alloc(b, ops, mem, s->kind, s->dtype, s->numel) : 0;
}

int aa_all_reduce_host(aa_comm_t *c, const aa_ops_t *ops, float *staging, float *x, size_t n, aa_comm_op_t op) {
  if (n > 16) return aa_error(AA_EINVAL, "aa_all_reduce_host: %zu values, at most 16", n);
  /* Over a group of one the result is x itself: nothing to move. */
  if (aa_comm_world(c) == 1) return 0;
  int rc = ops->upload(staging, x, n * sizeof(float));
  if (!rc) rc = aa_comm_all_reduce(c, staging, staging, n, AA_F32, op);
  if (!rc) rc = ops->download(x, staging, n * sizeof(float));
  return rc;
}

void aa_flatbuf_free(aa_flatbuf_t *b, aa_mem_t *mem) {
  if (b->data) backend_free(b->ops, mem, b->kind, b->numel * aa_dtype_size(b->dtype), b->data);
  b->data = NULL;
  b->numel = 0;
}

static const aa_gpt_opts_t default_opts = {.amp = AA_F32, .ckpt = AA_CKPT_NONE};

/* Whether the engine computes arch's MoE blocks under these options:
 * through the backend's MoE table (kernels/moe_ops.h), on one process,
 * data, expert, tensor, pipeline or context parallel (context: on the cpu
 * backend, whose routing map is host memory), and not with an op the
 * backend's table lacks. 0 for a dense model. */
static int moe_supported(const aa_arch_t *a, const aa_ops_t *ops, const aa_gpt_opts_t *o) {
  const int ep = o->expert ? aa_comm_world(o->expert) : 1;
  if (ep > 1 && (!a->moe.experts || a->moe.experts % ep))
    return aa_error(AA_EINVAL, "expert parallel degree %d: the model has %d experts, which it must divide",
                    ep, a->moe.experts);
  const int tp = o->tensor ? aa_comm_world(o->tensor) : 1;
  if (o->etp > 1 && (!a->moe.experts || o->etp != tp || a->moe.d_ff_expert % tp))
    return aa_error(AA_EINVAL,
                    "expert tensor parallel degree %d: needs mixture-of-experts layers, the tensor degree "
                    "(%d) and to divide d_ff_expert (%d)",
                    o->etp, tp, a->moe.d_ff_expert);
  if (!a->moe.experts) return 0;
  if (!ops->moe)
    return aa_error(AA_EUNSUPPORTED,
                    "model.moe: the %s backend does not compute mixture-of-experts layers (the cpu "
                    "backend does)",
                    ops->name);
  if (o->context && aa_comm_world(o->context) > 1 && ops != aa_ops_cpu())
    return aa_error(AA_EUNSUPPORTED,
                    "model.moe: mixture-of-experts layers with context parallelism on the %s backend: the "
                    "context group's load-balancing sums read the routing map in host memory, which the cpu "
                    "backend's is; train them without context parallelism there",
                    ops->name);
  if (a->moe.shared_expert_gate && !ops->moe->shared_gate_forward)
    return aa_error(AA_EUNSUPPORTED,
                    "model.moe: the %s backend does not compute Qwen-MoE's gated shared experts "
                    "(moe.shared_expert_gate) yet; the cpu backend does",
                    ops->name);
  return 0;
}

/* Whether the engine trains arch's LoRA adapters under these options:
 * this slice (the backends' kernels skip a NULL weight gradient), in
 * fp32, bf16 or fp16. On the cpu backend data, tensor, pipeline and
 * context parallel (a context rank computes its chunks' gradient of every
 * adapter, which the trainer averages over the data x context replicas as
 * it does a full model's), with ZeRO over the adapters (engine/lora.h) at
 * any layout; on the cuda backend in one process (engine/train.c refuses
 * more ranks), without ZeRO (not yet run on a GPU: scripts/gpu-check.sh
 * lora_train). 0 without LoRA. */
static int lora_supported(const aa_arch_t *a, const aa_ops_t *ops, const aa_gpt_opts_t *o) {
  if (!a->lora.r) return 0;
  const int tp = o->tensor && aa_comm_world(o->tensor) > 1, pp = o->pipe && o->pipe->pp > 1;
  const int cp = o->context && aa_comm_world(o->context) > 1;
  const char *what = ops == aa_ops_cpu() ? NULL
                     : o->zero > 0       ? "ZeRO over the adapters on the cuda backend"
                     : tp || pp || cp    ? "tensor, pipeline or context parallelism on the cuda backend"
                                         : NULL;
  if (what)
    return aa_error(AA_EUNSUPPORTED,
                    "lora: LoRA adapters train on the cpu backend at every layout, with ZeRO over the "
                    "adapters, and on the cuda backend in one process without ZeRO, so far; %s is not "
                    "supported yet (docs/training-knobs.md \"LoRA\")",
                    what);
  return 0;
}

/* arch with opts' experts split (spec.h moe.etp): arch itself, or *copy. */
static const aa_arch_t *arch_etp(aa_arch_t *copy, const aa_arch_t *arch, const aa_gpt_opts_t *o) {
  aa_strategy_t s = {.etp = o->etp > 1 && o->tensor && aa_comm_world(o->tensor) > 1 ? o->etp : 0};
  return aa_sizes_set_etp(copy, arch, &s);
}

void aa_gpt_act_bytes(const aa_arch_t *arch, int B, int T, const aa_gpt_opts_t *opts, size_t *acts,
                      size_t *workspace) {
  if (!opts) opts = &default_opts;
  aa_arch_t copy;
  arch = arch_etp(&copy, arch, opts);
  aa_act_layout_t l;
  aa_act_shape_t sh = act_shape(opts, B, T);
  aa_sizes_acts(arch, &sh, &l, NULL);
  *acts = l.acts;
  *workspace = l.workspace;
}

/* The MoE blocks' routing maps (host memory; sizes.h counts their bytes,
 * l->host, as activations) and the layout of a block's kept buffers. */
static int moe_alloc(aa_gpt_t *m, const aa_act_layout_t *l) {
  const aa_arch_t *a = &m->arch;
  if (!a->moe.experts) return 0;
  int rc = aa_mem_check(m->opts.mem, AA_MEM_ACTS, l->host);
  if (rc) return rc;
  /* A pipeline stage routes each micro-batch in flight into its slot's map. */
  m->route_sets = m->pp > 1 ? m->pipe.slots : 1;
  const size_t n = (size_t)a->n_layer * (size_t)m->route_sets;
  if (!(m->routes = calloc(n, sizeof *m->routes)))
    return aa_error(AA_ENOMEM, "out of memory for the routing maps");
  if (!(m->route_offsets = calloc(n * (size_t)(a->moe.experts + 1), sizeof *m->route_offsets)))
    return aa_error(AA_ENOMEM, "out of memory for the routing maps");
  if (m->ep > 1 && !(m->dispatch = calloc(n, sizeof *m->dispatch)))
    return aa_error(AA_ENOMEM, "out of memory for the dispatchers");
  aa_sizes_moe_acts(a, (size_t)m->B * m->T, m->ep, &m->acts->moe_off);
  for (size_t i = 0; i < n && !rc; i++) {
    const int b = (int)(i % (size_t)a->n_layer);
    if (!aa_arch_is_moe_layer(a, b) || !aa_pp_holds_unit(&m->pipe, a, AA_GPT_UNIT_BLOCK(b))) continue;
    rc = m->ops->moe->route_alloc(&m->routes[i], m->B * m->T, a->moe.experts, a->moe.top_k);
    m->routes[i].raw = a->moe.topk_raw; /* norm_topk_prob false */
    if (!rc && m->dispatch)
      /* Local rows past the buffers' room go to the dispatcher's overflow,
       * 4C + 3Fe floats a row (moe_local). */
      rc = aa_moe_dispatch_init(&m->dispatch[i], m->opts.expert, a->moe.experts,
                                m->ep * m->B * m->T * a->moe.top_k, (int)m->acts->moe_off.rows,
                                4 * (size_t)m->d.C + 3 * (size_t)m->d.Fe, m->opts.mem);
    /* The block's row buffers are the backend's memory (CUDA: device
     * memory, moved by the expert group's NCCL all-to-all). */
    if (!rc && m->dispatch) rc = aa_moe_dispatch_backend(&m->dispatch[i], m->ops);
  }
  if (rc) return rc;
  aa_mem_charge(m->opts.mem, AA_MEM_ACTS, l->host);
  m->acts->host_bytes = l->host;
  return 0;
}

int aa_gpt_create(aa_gpt_t **out, const aa_arch_t *arch, const aa_ops_t *ops, int B, int T,
                  const aa_gpt_opts_t *opts) {
  int rc = aa_arch_validate(arch);
  if (!rc) rc = aa_arch_require_engine(arch, "model");
  if (rc) return rc;
  if (!opts) opts = &default_opts;
  if ((rc = moe_supported(arch, ops, opts))) return rc;
  if ((rc = lora_supported(arch, ops, opts))) return rc;
  if (B < 1 || T < 1 || T > arch->seq_len)
    return aa_error(AA_EINVAL, "batch %d x sequence %d does not fit the model (seq_len %d)", B, T, arch->seq_len);
  if (opts->amp != AA_F32 && opts->amp != AA_BF16 && opts->amp != AA_F16)
    return aa_error(AA_EINVAL, "unknown amp dtype %d", (int)opts->amp);
  int tp = opts->tensor ? aa_comm_world(opts->tensor) : 1;
  if (arch->n_head % tp || arch->d_ff % tp || aa_arch_kv_heads(arch) % tp)
    return aa_error(AA_EINVAL, "tensor parallel degree %d must divide n_head %d, d_ff %d and n_kv_head %d", tp,
                    arch->n_head, arch->d_ff, aa_arch_kv_heads(arch));
  if (aa_arch_is_llama(arch) && !ops->rmsnorm_forward)
    return aa_error(AA_EINVAL, "the %s backend has no llama kernels yet", ops->name);
  if (opts->sp && tp > 1 && ((long long)B * T) % tp)
    return aa_error(AA_EINVAL, "sequence parallelism splits %d x %d tokens between %d tensor ranks: %d must divide %lld",
                    B, T, tp, tp, (long long)B * T);
  if (opts->ckpt_layers < 0 || opts->ckpt_layers > arch->n_layer)
    return aa_error(AA_EINVAL, "checkpoint_layers %d must be in [0, n_layer = %d]", opts->ckpt_layers,
                    arch->n_layer);
  int cp = opts->context ? aa_comm_world(opts->context) : 1;
  if (cp > 1 && (T % 2 || (long long)T * cp != arch->seq_len))
    return aa_error(
        AA_EINVAL,
        "context parallelism over %d ranks holds seq_len / %d = two chunks of every sequence: the "
        "model's %d tokens a sequence must be seq_len %d / %d, and even",
        cp, cp, T, arch->seq_len, cp);
  if (cp > 1 && (!ops->attention_block_forward || !ops->rows_copy || !ops->rows_accumulate))
    return aa_error(AA_EUNSUPPORTED, "the %s backend has no ring attention yet (context parallelism)",
                    ops->name);
  aa_gpt_t *m = calloc(1, sizeof *m);
  if (!m) return aa_error(AA_ENOMEM, "out of memory");
  aa_arch_t split;
  m->arch = *arch_etp(&split, arch, opts);
  arch = &m->arch;
  m->ops = ops;
  m->opts = *opts;
  m->B = B;
  m->T = T;
  m->tp = opts->tensor ? aa_comm_world(opts->tensor) : 1;
  m->tp_rank = opts->tensor ? aa_comm_rank(opts->tensor) : 0;
  m->sp = m->tp > 1 && opts->sp;
  m->ep = opts->expert ? aa_comm_world(opts->expert) : 1;
  m->ep_rank = opts->expert ? aa_comm_rank(opts->expert) : 0;
  m->cp = cp;
  m->cp_rank = opts->context ? aa_comm_rank(opts->context) : 0;
  m->pipe = (aa_pp_place_t){.pp = 1, .vpp = 1, .lo = {0}, .hi = {arch->n_layer}, .first = 1, .last = 1,
                            .slots = 1};
  if (opts->pipe && opts->pipe->pp > 1) m->pipe = *opts->pipe;
  m->pp = m->pipe.pp;
  m->opts.pipe = &m->pipe;
  aa_sizes_tp(arch, m->tp, &m->d);
  aa_sizes_vocab_rows(arch, m->tp, m->tp_rank, &m->vocab_lo, &m->vocab_valid);
  aa_mem_t *mem = opts->mem;
  m->n_tensors = aa_gpt_n_tensors(arch);
  m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
  m->acts = calloc(1, sizeof *m->acts);
  if (!m->tensors || !m->acts) goto nomem;
  aa_acts_t *a = m->acts;
  a->blocks = calloc(arch->n_layer, sizeof *a->blocks);
  a->off = calloc(arch->n_layer, sizeof *a->off);
  a->host_losses = malloc(sizeof(float) * B * T);
  if (!a->blocks || !a->off || !a->host_losses) goto nomem;
  /* The token copies are not accounted (they never were): a few bytes per
   * token, next to the activations' kilobytes. A first pipeline stage
   * keeps each input buffer's tokens for the embedding's backward. */
  int copies = m->pp > 1 && m->pipe.first && m->pipe.act_bufs > 1 ? m->pipe.act_bufs : 1;
  if ((rc = ops->alloc((void **)&a->inputs_all, sizeof(int32_t) * B * T * copies)) ||
      (rc = ops->alloc((void **)&a->targets, sizeof(int32_t) * B * T)))
    goto fail;
  a->inputs = a->inputs_all;
  aa_gpt_tensor_table_ep(arch, m->tp, m->tp_rank, m->ep, m->ep_rank, m->pp > 1 ? &m->pipe : NULL, m->tensors);
  const aa_tensor_desc_t *last = &m->tensors[m->n_tensors - 1];
  m->n_params = last->offset + last->numel;
  if (opts->zero < 0 || opts->zero > 3) {
    rc = aa_error(AA_EINVAL, "ZeRO stage %d must be 0..3", opts->zero);
    goto fail;
  }
  /* Under ZeRO the trainer keeps shards outside the model, which then
   * reaches them through its hooks: from stage 1 under amp the fp32 master
   * weights (the model keeps the full 16-bit copy), from 2 the gradients,
   * from 3 the parameters (and under amp no 16-bit copy either). What is
   * allocated is sizes.h's, which the cost model predicts from. */
  aa_model_sizes_t sz;
  aa_sizes_model_ep(arch, m->tp, m->ep, m->pp > 1 ? &m->pipe : NULL, opts->amp, opts->zero, &sz);
  if (arch->lora.r) {
    /* The frozen base in the storage dtype, no gradient: under amp the
     * 16-bit copy alone (no fp32 master: the blocks and the outer weights
     * are widened from it as at ZeRO 1); the adapters and their gradient
     * fp32 (sizes.h aa_sizes_lora). */
    aa_lora_sizes_t ls;
    aa_sizes_lora(arch, m->tp, m->pp > 1 ? &m->pipe : NULL, opts->amp, opts->zero, 1, &ls);
    if (opts->amp == AA_F32) {
      sz.params = ls.base;
      sz.params16.numel = 0;
    } else {
      sz.params16 = ls.base;
      sz.params.numel = 0;
    }
    sz.grads.numel = 0;
    m->lora_scale = arch->lora.alpha / (float)arch->lora.r;
    if ((rc = aa_flatbuf_alloc_as(&m->lora, ops, mem, &ls.params)) ||
        (rc = aa_flatbuf_alloc_as(&m->lora_grads, ops, mem, &ls.grads)))
      goto fail;
  }
  if ((rc = aa_flatbuf_alloc_as(&m->params, ops, mem, &sz.params)) ||
      (rc = aa_flatbuf_alloc_as(&m->grads, ops, mem, &sz.grads)) ||
      (rc = aa_flatbuf_alloc_as(&m->params16, ops, mem, &sz.params16)))
    goto fail;
  m->params16_stale = 1;
  aa_act_layout_t l;
  aa_act_block_t *blocks = calloc(arch->n_layer, sizeof *blocks);
  if (!blocks) goto nomem;
  aa_act_shape_t sh = act_shape(opts, B, T);
  aa_sizes_acts(arch, &sh, &l, blocks);
  if (!(rc = backend_alloc(ops, mem, AA_MEM_ACTS, l.acts, &a->store))) {
    a->store_bytes = l.acts;
    if (!(rc = backend_alloc(ops, mem, AA_MEM_WORKSPACE, l.workspace, &a->ws))) a->ws_bytes = l.workspace;
  }
  if (!rc) carve(a, &l, blocks, arch->n_layer);
  if (!rc && a->lora_u) {
    a->lora_du = a->lora_u + (size_t)B * T * arch->lora.r;
    a->lora_tmp = a->lora_du + (size_t)B * T * arch->lora.r;
  }
  free(blocks);
  if (rc || (rc = moe_alloc(m, &l))) goto fail;
  m->targets = a->targets;
  *out = m;
  return 0;
nomem:
  rc = aa_error(AA_ENOMEM, "out of memory building the model");
fail:
  aa_gpt_free(m);
  return rc;
}

void aa_gpt_free(aa_gpt_t *m) {
  if (!m) return;
  aa_mem_t *mem = m->opts.mem;
  aa_mem_uncharge(mem, AA_MEM_WORKSPACE, m->scratch_charged);
  if (m->acts) {
    backend_free(m->ops, mem, AA_MEM_ACTS, m->acts->store_bytes, m->acts->store);
    backend_free(m->ops, mem, AA_MEM_WORKSPACE, m->acts->ws_bytes, m->acts->ws);
    if (m->acts->inputs_all) m->ops->free(m->acts->inputs_all);
    if (m->acts->targets) m->ops->free(m->acts->targets);
    free(m->acts->blocks);
    free(m->acts->off);
    free(m->acts->host_losses);
    aa_mem_uncharge(mem, AA_MEM_ACTS, m->acts->host_bytes);
    free(m->acts);
  }
  const int n_maps = m->arch.n_layer * m->route_sets;
  if (m->routes)
    for (int i = 0; i < n_maps; i++)
      m->ops->moe->route_free(&m->routes[i]);
  free(m->routes);
  free(m->route_offsets);
  if (m->dispatch)
    for (int i = 0; i < n_maps; i++)
      aa_moe_dispatch_free(&m->dispatch[i]);
  free(m->dispatch);
  aa_flatbuf_free(&m->params, mem);
  aa_flatbuf_free(&m->grads, mem);
  aa_flatbuf_free(&m->lora, mem);
  aa_flatbuf_free(&m->lora_grads, mem);
  aa_flatbuf_free(&m->params16, mem);
  free(m->tensors);
  free(m);
}

void aa_gpt_params_changed(aa_gpt_t *m) { m->params16_stale = 1; }

/* Counts the backend's own scratch (ops.h scratch_bytes) as workspace, as
 * far as it grew since the last call: after a pass, when the ops that grow
 * it have run. Past the memory limit that is an out-of-memory of the pass. */
static int charge_scratch(aa_gpt_t *m) {
  size_t now = m->ops->scratch_bytes();
  if (now <= m->scratch_charged) return 0;
  int rc = aa_mem_charge(m->opts.mem, AA_MEM_WORKSPACE, now - m->scratch_charged);
  if (rc) return aa_error_wrap(rc, "the %s backend's scratch", m->ops->name);
  m->scratch_charged = now;
  return 0;
}

int aa_gpt_n_units(const aa_gpt_t *m) { return aa_sizes_units(&m->arch); }

void aa_gpt_unit(const aa_gpt_t *m, int u, size_t *offset, size_t *numel) {
  int L = m->arch.n_layer;
  const aa_arch_t *ar = &m->arch;
  size_t a = u == 0 ? 0 : u <= L ? m->tensors[l0(ar, u - 1)].offset : m->tensors[m->n_tensors - 2].offset;
  size_t b = u == 0 ? m->tensors[l0(ar, 0)].offset : u < L ? m->tensors[l0(ar, u)].offset
             : u == L ? m->tensors[m->n_tensors - 2].offset : m->n_params;
  *offset = a;
  *numel = b - a;
}

static int put_params(size_t offset, const float *src, size_t n, void *data) {
  aa_gpt_t *m = data;
  return m->ops->upload((float *)m->params.data + offset, src, n * sizeof(float));
}

int aa_gpt_init_weights(aa_gpt_t *m, uint64_t seed) {
  int rc = aa_gpt_init_weights_to(m, seed, put_params, m);
  aa_gpt_params_changed(m);
  return rc;
}

int aa_gpt_init_weights_to(const aa_gpt_t *m, uint64_t seed, aa_gpt_put_fn put, void *data) {
  aa_rng_t rng;
  aa_rng_seed(&rng, seed);
  float resid_std = 0.02f / sqrtf(2.0f * (float)m->arch.n_layer);
  size_t most = 0;
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].gnumel > most) most = m->tensors[i].gnumel;
  /* One whole tensor at a time through a host buffer: the same draws in the
   * same order whatever the backend and the tensor rank, which keeps its
   * slice. */
  float *p = malloc(most * sizeof(float));
  if (!p) return aa_error(AA_ENOMEM, "out of memory initialising the weights");
  int rc = 0;
  for (int i = 0; i < m->n_tensors && !rc; i++) {
    const aa_tensor_desc_t *t = &m->tensors[i];
    const char *kind = strchr(t->name, '.') ? strchr(t->name, '.') + 1 : t->name;
    if (t->ndim == 2) {
      /* The residual projections: the experts' w2 like the MLP's down.w. */
      float std = (!strcmp(kind, "proj.w") || !strcmp(kind, "fcproj.w") || !strcmp(kind, "down.w") ||
                   !strcmp(kind, "experts.w2") || !strcmp(kind, "shared.w2"))
                      ? resid_std
                      : 0.02f;
      for (size_t j = 0; j < t->gnumel; j++) p[j] = std * aa_rng_normal(&rng);
    } else {
      /* LayerNorm and RMSNorm gains start at 1; biases (including LayerNorm's) at 0. */
      float v = (!strcmp(kind, "ln1.w") || !strcmp(kind, "ln2.w") || !strcmp(t->name, "lnf.w")) ? 1.0f : 0.0f;
      for (size_t j = 0; j < t->gnumel; j++) p[j] = v;
    }
    for (int k = 0; k < t->runs && !rc; k++)
      rc = put(t->offset + (size_t)k * t->run_lstride, p + (t->run_global - t->goffset) + (size_t)k * t->run_gstride,
               t->run_n, data);
  }
  free(p);
  return rc;
}

/* Rounds x to the amp dtype in place (and stores the 16-bit bits in dst
 * when non-NULL): the value a 16-bit tensor holds. No-op in fp32. */
static void rnd(const aa_gpt_t *m, void *dst, float *x, size_t n) {
  if (m->opts.amp != AA_F32) m->ops->round_store(dst, x, m->opts.amp, n);
}

/* fp32 parameters of unit u: the flat buffer's, or where the hooks put
 * them. */
static int unit_params(aa_gpt_t *m, int u, float **out) {
  if (m->hooks && m->hooks->params) return m->hooks->params(m, u, out, m->hooks->data);
  size_t off, n;
  aa_gpt_unit(m, u, &off, &n);
  *out = (float *)m->params.data + off;
  return 0;
}

/* Where the backward accumulates unit u's gradient (unit-relative). */
static int unit_grads(aa_gpt_t *m, int u, float **out) {
  if (m->arch.lora.r) { /* the base is frozen: no gradient (the adapters': lora_grads) */
    *out = NULL;
    return 0;
  }
  if (m->hooks && m->hooks->grads) return m->hooks->grads(m, u, out, m->hooks->data);
  size_t off, n;
  aa_gpt_unit(m, u, &off, &n);
  *out = (float *)m->grads.data + off;
  return 0;
}

static int grads_done(aa_gpt_t *m, int u) {
  return m->hooks && m->hooks->grads_done ? m->hooks->grads_done(m, u, m->hooks->data) : 0;
}

/* fp32 weights of block l (tensor k at WK(k)) into *w. Under amp they are
 * widened from the 16-bit copy into the workspace, unless the hooks
 * provide them. */
static int block_weights(aa_gpt_t *m, int l, float **w) {
  const aa_tensor_desc_t *t0 = &m->tensors[l0(&m->arch, l)], *t1 = &m->tensors[l0(&m->arch, l + 1) - 1];
  if (m->opts.amp == AA_F32 || (m->hooks && m->hooks->params)) return unit_params(m, AA_GPT_UNIT_BLOCK(l), w);
  m->ops->cast_to_f32(m->acts->wblock, (const uint16_t *)m->params16.data + t0->offset, m->opts.amp,
                      t1->offset + t1->numel - t0->offset);
  *w = m->acts->wblock;
  return 0;
}
#define WK(k) role_at(m, (float *)w, l, k)

/* fp32 views of wte (V,C), wpe (T,C), lnf weight/bias and the head (gpt2:
 * wte; llama: head.w, with no wpe and no lnf bias: NULL). Under amp they
 * are widened into the workspace when the 16-bit copy is refreshed, and
 * stay there for every forward and backward until the next refresh (the
 * micro-batches of a step and validation batches reuse them). */
typedef struct {
  float *wte, *wpe, *lnfw, *lnfb, *head;
} outer_weights_t;

static outer_weights_t outer_views(const aa_gpt_t *m, float *pre, float *post) {
  const int C = m->arch.d_model;
  if (m->d.llama) return (outer_weights_t){pre, NULL, post, NULL, post + C};
  return (outer_weights_t){pre, pre + m->tensors[1].offset, post, post + C, pre};
}

static int outer_weights(aa_gpt_t *m, int widen, outer_weights_t *ow) {
  int lnf = m->n_tensors - 2, rc;
  size_t pre = m->tensors[l0(&m->arch, 0)].offset, post = m->tensors[lnf].offset;
  float *a = m->acts->wpre, *b = m->acts->wpost;
  if (m->opts.amp == AA_F32 || (m->hooks && m->hooks->params)) {
    if ((rc = unit_params(m, 0, &a)) || (rc = unit_params(m, m->arch.n_layer + 1, &b)))
      return rc;
    *ow = outer_views(m, a, b);
    return 0;
  }
  if (widen) {
    const uint16_t *h = m->params16.data;
    /* A pipeline stage may hold neither (no kernel for nothing). */
    if (pre) m->ops->cast_to_f32(a, h, m->opts.amp, pre);
    if (m->n_params > post) m->ops->cast_to_f32(b, h + post, m->opts.amp, m->n_params - post);
  }
  *ow = outer_views(m, a, b);
  return 0;
}

/* Where block l computes: kept fp32 fields in place in the store, all else
 * (and everything under amp) in the workspace. */
static void block_view(const aa_gpt_t *m, int l, block_view_t *v) {
  const aa_acts_t *a = m->acts;
  const block_store_t *s = &a->blocks[l];
  int amp = m->opts.amp != AA_F32;
  for (int f = 0; f < NF; f++) {
    if (!amp && s->f[f]) v->f[f] = s->f[f];
    else if (f == F_RES3) v->f[f] = a->ws_res[l & 1];
    else v->f[f] = a->wsf[f];
  }
  v->stats = s->stats ? s->stats : a->ws_stats;
}

/* --- the tensor group's collectives (model.h) ----------------------------------------- */

/* Tokens of the residual stream this rank holds: B T, or its share under
 * sequence parallelism (which then starts at token tp_rank * Ns). */
static int stream_tokens(const aa_gpt_t *m) { return m->sp ? m->B * m->T / m->tp : m->B * m->T; }

/* The group reads what the backend wrote: the backend's work is finished
 * first (comm.h). */
static int tp_all_reduce(aa_gpt_t *m, float *x, size_t n) {
  int rc = m->ops->sync();
  return rc ? rc : aa_comm_all_reduce(m->opts.tensor, x, x, n, AA_F32, AA_COMM_SUM);
}

/* Sequence parallelism: the whole (N,C) from every rank's (Ns,C) tokens,
 * and the rank's (Ns,C) tokens of the sum over ranks of a whole (N,C). */
static int sp_gather(aa_gpt_t *m, float *whole, const float *mine) {
  int rc = m->ops->sync();
  return rc ? rc
            : aa_comm_all_gather(m->opts.tensor, mine, whole, (size_t)stream_tokens(m) * m->d.C, AA_F32);
}
static int sp_scatter(aa_gpt_t *m, float *mine, const float *whole) {
  int rc = m->ops->sync();
  return rc ? rc
            : aa_comm_reduce_scatter(m->opts.tensor, whole, mine, (size_t)stream_tokens(m) * m->d.C, AA_F32,
                                     AA_COMM_SUM);
}

/* The input of a column-parallel layer (or the head) from the rank's
 * tokens x: x itself, or under sequence parallelism every rank's gathered
 * into acts->full. */
static int column_input(aa_gpt_t *m, const float *x, const float **out) {
  *out = x;
  if (!m->sp) return 0;
  *out = m->acts->full;
  return sp_gather(m, m->acts->full, x);
}

/* Where a row-parallel layer (or the embedding) writes its (N,C) output
 * before the group sums it into out (the rank's tokens): out itself, or
 * under sequence parallelism acts->partial. A column-parallel layer's
 * input gradient goes the same way. */
static float *row_output(aa_gpt_t *m, float *out) { return m->sp ? m->acts->partial : out; }

/* The sum over the tensor ranks of what row_output(m, out) holds, into
 * out: an all-reduce, or under sequence parallelism a reduce-scatter of
 * the rank's tokens. Nothing at tp 1. */
static int row_reduce(aa_gpt_t *m, float *out) {
  if (m->tp == 1) return 0;
  return m->sp ? sp_scatter(m, out, m->acts->partial) : tp_all_reduce(m, out, (size_t)m->B * m->T * m->d.C);
}

int aa_gpt_pipeline_sum(aa_gpt_t *m, float *x, int n) {
  if (m->pp == 1 || !m->opts.pipeline) return 0;
  int rc = aa_all_reduce_host(m->opts.pipeline, m->ops, m->acts->scalars, x, (size_t)n, AA_COMM_SUM);
  return rc ? aa_error_wrap(rc, "summing over the pipeline group") : 0;
}

int aa_gpt_tensor_sum(aa_gpt_t *m, float *x, int n) {
  if (m->tp == 1) return 0;
  int rc = aa_all_reduce_host(m->opts.tensor, m->ops, m->acts->scalars, x, (size_t)n, AA_COMM_SUM);
  return rc ? aa_error_wrap(rc, "summing over the tensor group") : 0;
}

/* --- forward and backward ---------------------------------------------------------------- */

/* The block's normalisation: LayerNorm (gpt2; mean and rstd kept) or
 * RMSNorm (llama; rstd kept, no bias), and their backward (weight and
 * bias gradients into g, g + C). */
static void norm_forward(const aa_gpt_t *m, float *out, float *mean, float *rstd, const float *x, const float *w,
                         const float *b, int N) {
  if (m->d.llama) m->ops->rmsnorm_forward(out, rstd, x, w, N, m->d.C, m->arch.norm_eps);
  else m->ops->layernorm_forward(out, mean, rstd, x, w, b, N, m->d.C);
}
static void norm_backward(const aa_gpt_t *m, float *dx, float *g, const float *dout, const float *x, const float *w,
                          const float *mean, const float *rstd, int N) {
  if (m->d.llama) m->ops->rmsnorm_backward(dx, g, dout, x, w, rstd, N, m->d.C);
  else
    m->ops->layernorm_backward(dx, g, g ? g + m->d.C : NULL, dout, x, w, mean, rstd, N, m->d.C);
}
/* The MLP's activation: GELU of fc's output (gpt2) or SwiGLU of [gate |
 * up] (llama), (N, FH) -> (N, F). */
static void act_forward(const aa_gpt_t *m, float *out, const float *in, size_t N) {
  if (m->d.llama) m->ops->swiglu_forward(out, in, (int)N, m->d.F);
  else m->ops->gelu_forward(out, in, N * (size_t)m->d.F);
}
/* gpt2's fc bias and GELU fused into one pass after the GEMM (ops.h
 * bias_gelu_forward, gelu_backward_bias), where the backend has them and
 * in fp32: under amp fc's output is rounded between the bias and GELU, and
 * GELU's gradient before the bias sums. */
static int fused_gelu(const aa_gpt_t *m) {
  return !m->d.llama && m->opts.amp == AA_F32 && m->ops->bias_gelu_forward && m->ops->gelu_backward_bias;
}
/* dinp(N,C) = dout @ weight (overwritten) with matmul_backward's weight
 * and bias gradients: ops.h matmul_backward_set, or a zeroed dinp
 * accumulated into. */
static void matmul_backward_set(const aa_gpt_t *m, float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight, int N, int C,
                                int OC) {
  if (m->ops->matmul_backward_set) {
    m->ops->matmul_backward_set(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  } else {
    m->ops->memset0(dinp, (size_t)N * C * sizeof(float));
    m->ops->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  }
}

/* --- context parallelism (model.h) -------------------------------------------------------- */

void aa_gpt_cp_positions(int seq_len, int c, int r, int pos0[2]) {
  int Tc = seq_len / (2 * c);
  pos0[0] = r * Tc;
  pos0[1] = (2 * c - 1 - r) * Tc;
}

/* llama's rotation of q and k in qkv (the model's B T rows; back = the
 * gradient's rotation back), every token at its place in the sequence:
 * rows 0..T-1 at positions 0..T-1, or under context parallelism each of
 * the rank's chunks at its own. */
static void rope(aa_gpt_t *m, float *qkv, int back) {
  const aa_ops_t *op = m->ops;
  void (*f)(float *, int, int, int, int, int, int, float) = back ? op->rope_backward : op->rope_forward;
  if (m->cp == 1) {
    f(qkv, m->B, m->T, m->d.NH, m->d.NKV, m->d.HS, 0, m->arch.rope_theta);
    return;
  }
  int pos0[2], Tc = m->T / 2;
  aa_gpt_cp_positions(m->arch.seq_len, m->cp, m->cp_rank, pos0);
  for (int k = 0; k < 2; k++)
    f(qkv + (size_t)k * m->B * Tc * m->d.QKV, m->B, Tc, m->d.NH, m->d.NKV, m->d.HS, pos0[k],
      m->arch.rope_theta);
}

/* One ring step: the block in `send` to the next rank of the context
 * group while the previous rank's arrives in `recv` (n floats each). The
 * group reads what the backend wrote, so the backend finishes first. */
static int ring_pass(aa_gpt_t *m, const float *send, float *recv, size_t n) {
  int rc = m->ops->sync();
  if (!rc) {
    int c = m->cp, r = m->cp_rank;
    rc = aa_comm_sendrecv(m->opts.context, send, (r + 1) % c, recv, (r + c - 1) % c, n, AA_F32);
  }
  return rc ? aa_error_wrap(rc, "ring attention over the context group") : 0;
}

/* A chunk's rows of a rank's q|k|v (qkv: the rank's B T rows, chunk-major),
 * the geometry the block ops read them with, and that of the keys and
 * values alone as the ring carries them: each row's k|v columns, packed
 * (KW = 2 NKV HS floats a row). */
typedef struct {
  int B, Tc, NH, NKV, HS, W; /* W: a row's width, the rank's QKV */
  size_t bs;                 /* a sequence's rows within a chunk: Tc W floats */
  size_t chunk;              /* a chunk's rows: B Tc W floats */
  int ko, vo;                /* where k and v start in a row */
  int KW;                    /* a packed row: k then v, 2 NKV HS floats */
  size_t kchunk;             /* a chunk's packed rows: B Tc KW floats */
} ring_geom_t;

static ring_geom_t ring_geom(const aa_gpt_t *m) {
  ring_geom_t g = {.B = m->B, .Tc = m->T / 2, .NH = m->d.NH, .NKV = m->d.NKV, .HS = m->d.HS, .W = m->d.QKV};
  g.bs = (size_t)g.Tc * g.W;
  g.chunk = (size_t)g.B * g.bs;
  g.ko = g.NH * g.HS;
  g.vo = (g.NH + g.NKV) * g.HS;
  g.KW = 2 * g.NKV * g.HS;
  g.kchunk = (size_t)g.B * g.Tc * g.KW;
  return g;
}

/* Where a block of one chunk's keys and values lies (or its gradient:
 * laid out the same): in the rank's own q|k|v rows, or packed in a ring
 * buffer. */
typedef struct {
  float *k, *v;
  int ld;    /* floats from a row to the next */
  size_t bs; /* floats from a sequence to the next */
} kv_view_t;

static kv_view_t kv_own(const ring_geom_t *g, const float *rows) {
  float *r = (float *)rows;
  return (kv_view_t){r + g->ko, r + g->vo, g->W, g->bs};
}

static kv_view_t kv_packed(const ring_geom_t *g, const float *rows) {
  float *r = (float *)rows;
  return (kv_view_t){r, r + (size_t)g->NKV * g->HS, g->KW, (size_t)g->Tc * g->KW};
}

/* The k|v columns of the rank's two chunks (its 2 B Tc q|k|v rows) packed
 * into dst, the block it sends first. */
static void kv_pack(aa_gpt_t *m, const ring_geom_t *g, float *dst, const float *qkv) {
  m->ops->rows_copy(dst, (size_t)g->KW, qkv + g->ko, (size_t)g->W, (size_t)2 * g->B * g->Tc, (size_t)g->KW);
}

/* The attention of the queries of chunk rows q against the keys and
 * values kv (causal on the diagonal), merged into the running (out, lse)
 * when merge is set, else written there. */
static void ring_block(aa_gpt_t *m, const ring_geom_t *g, const float *q, kv_view_t kv, int causal, int merge,
                       float *out, float *lse) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  float *o = merge ? a->ring_out : out, *l = merge ? a->ring_lse : lse;
  op->attention_block_forward(o, l, q, kv.k, kv.v, g->B, g->Tc, g->Tc, g->NH, g->NKV, g->HS, g->W, g->bs,
                              kv.ld, kv.bs, causal);
  if (merge) op->attention_block_merge(out, lse, o, l, g->B, g->Tc, g->NH, g->HS);
}

/* Context parallelism's ring attention forward: out (the rank's B T rows
 * of NH HS) and lse (per chunk (B,NH,Tc), chunk-major) of the rank's
 * queries against every key before them in the sequence. The rank holds
 * chunks r and 2c-1-r; step s brings the keys and values of rank r - s's
 * chunks, of which the ones before a query chunk count (every key seen),
 * so each step costs every rank two blocks. */
static int ring_forward(aa_gpt_t *m, const float *qkv, float *out, float *lse) {
  const ring_geom_t g = ring_geom(m);
  const int c = m->cp, r = m->cp_rank;
  const size_t rows = (size_t)g.B * g.Tc;
  float *oc[2] = {out, out + rows * g.NH * g.HS}, *lc[2] = {lse, lse + rows * g.NH};
  const float *q0 = qkv, *q1 = qkv + g.chunk;
  ring_block(m, &g, q0, kv_own(&g, q0), 1, 0, oc[0], lc[0]);
  ring_block(m, &g, q1, kv_own(&g, q1), 1, 0, oc[1], lc[1]);
  ring_block(m, &g, q1, kv_own(&g, q0), 0, 1, oc[1], lc[1]);
  /* Two buffers of 4 packed chunks each (two of keys and values, two of
   * their gradient in the backward); the rank's own start in the first. */
  float *cur = m->acts->ring;
  kv_pack(m, &g, cur, qkv);
  for (int s = 1; s < c; s++) {
    float *next = m->acts->ring + (size_t)(s & 1) * 4 * g.kchunk;
    int rc = ring_pass(m, cur, next, 2 * g.kchunk);
    if (rc) return rc;
    cur = next;
    /* cur: rank src's chunks src (< c) and 2c-1-src. */
    int src = (r - s + c) % c;
    if (src < r) {
      ring_block(m, &g, q0, kv_packed(&g, cur), 0, 1, oc[0], lc[0]);
      ring_block(m, &g, q1, kv_packed(&g, cur), 0, 1, oc[1], lc[1]);
    } else {
      ring_block(m, &g, q1, kv_packed(&g, cur), 0, 1, oc[1], lc[1]);
      ring_block(m, &g, q1, kv_packed(&g, cur + g.kchunk), 0, 1, oc[1], lc[1]);
    }
  }
  return 0;
}

/* The backward's share of query chunk q (its dout, lse, delta, and dq)
 * against keys and values kv, whose gradient goes to dkv (laid out as
 * kv). */
static void ring_block_back(aa_gpt_t *m, const ring_geom_t *g, float *dq, kv_view_t dkv, const float *dout,
                            const float *q, kv_view_t kv, const float *lse, const float *delta, int causal) {
  m->ops->attention_block_backward(dq, dkv.k, dkv.v, dout, q, kv.k, kv.v, lse, delta, g->B, g->Tc, g->Tc,
                                   g->NH, g->NKV, g->HS, g->W, g->bs, kv.ld, kv.bs, causal);
}

/* Context parallelism's ring attention backward: dqkv (the rank's rows)
 * += the gradient of ring_forward, given dout (B T rows of NH HS) and the
 * forward's out and lse. The blocks of keys and values go around the ring
 * again, each with their gradient, which every rank adds to on the way
 * and which ends at the block's owner. */
static int ring_backward(aa_gpt_t *m, float *dqkv, const float *dout, const float *qkv, const float *out,
                         const float *lse) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const ring_geom_t g = ring_geom(m);
  const int c = m->cp, r = m->cp_rank, ldo = g.NH * g.HS;
  const size_t rows = (size_t)g.B * g.Tc;
  const float *dc[2] = {dout, dout + rows * ldo}, *lc[2] = {lse, lse + rows * g.NH};
  float *del[2] = {a->ring_delta, a->ring_delta + rows * g.NH};
  for (int k = 0; k < 2; k++)
    op->attention_block_delta(del[k], dc[k], out + (size_t)k * rows * ldo, g.B, g.Tc, g.NH, g.HS);
  const float *q0 = qkv, *q1 = qkv + g.chunk;
  float *d0 = dqkv, *d1 = dqkv + g.chunk;
  ring_block_back(m, &g, d0, kv_own(&g, d0), dc[0], q0, kv_own(&g, q0), lc[0], del[0], 1);
  ring_block_back(m, &g, d1, kv_own(&g, d1), dc[1], q1, kv_own(&g, q1), lc[1], del[1], 1);
  ring_block_back(m, &g, d1, kv_own(&g, d0), dc[1], q1, kv_own(&g, q0), lc[1], del[1], 0);
  if (c == 1) return 0;
  float *cur = a->ring, *acc = NULL;
  kv_pack(m, &g, cur, qkv);
  int rc = 0;
  for (int s = 1; s < c && !rc; s++) {
    /* A buffer: the block's packed keys and values, then their gradient so far. */
    float *next = a->ring + (size_t)(s & 1) * 4 * g.kchunk, *next_acc = next + 2 * g.kchunk;
    rc = ring_pass(m, cur, next, 2 * g.kchunk);
    if (!rc && s == 1)
      op->memset0(next_acc, 2 * g.kchunk * sizeof(float));
    else if (!rc)
      rc = ring_pass(m, acc, next_acc, 2 * g.kchunk);
    cur = next;
    acc = next_acc;
    int src = (r - s + c) % c;
    if (!rc && src < r) {
      ring_block_back(m, &g, d0, kv_packed(&g, acc), dc[0], q0, kv_packed(&g, cur), lc[0], del[0], 0);
      ring_block_back(m, &g, d1, kv_packed(&g, acc), dc[1], q1, kv_packed(&g, cur), lc[1], del[1], 0);
    } else if (!rc) {
      ring_block_back(m, &g, d1, kv_packed(&g, acc), dc[1], q1, kv_packed(&g, cur), lc[1], del[1], 0);
      ring_block_back(m, &g, d1, kv_packed(&g, acc + g.kchunk), dc[1], q1, kv_packed(&g, cur + g.kchunk),
                      lc[1], del[1], 0);
    }
  }
  if (rc) return rc;
  /* The gradient of the block held last belongs to the next rank; the
   * previous rank's last one is this rank's own: its k|v columns. */
  float *mine = a->ring + (size_t)(c & 1) * 4 * g.kchunk + 2 * g.kchunk;
  if ((rc = ring_pass(m, acc, mine, 2 * g.kchunk))) return rc;
  op->rows_accumulate(dqkv + g.ko, (size_t)g.W, mine, (size_t)g.KW, 2 * rows, (size_t)g.KW);
  return 0;
}

/* --- mixture-of-experts blocks (kernels/moe_ops.h, the backend's ops->moe) -------------- */

/* Views of MoE block l's buffers (sizes.h aa_moe_acts_t): the ones it
 * keeps, or the workspace's where a fully checkpointed block computes. */
typedef struct {
  float *logits, *probs, *xp, *h, *act, *yp, *hs, *as;
  float *xl, *yl; /* ep > 1: the rows dispatched to the rank's experts and their outputs */
} moe_view_t;

static moe_view_t moe_view(const aa_gpt_t *m, int l) {
  const aa_moe_acts_t *o = &m->acts->moe_off;
  char *b = m->acts->blocks[l].moe ? m->acts->blocks[l].moe : m->acts->ws_moe;
  return (moe_view_t){(float *)(b + o->logits),
                      (float *)(b + o->probs),
                      (float *)(b + o->xp),
                      (float *)(b + o->h),
                      (float *)(b + o->act),
                      (float *)(b + o->yp),
                      (float *)(b + o->hs),
                      (float *)(b + o->as),
                      o->xl == AA_SIZES_NONE ? NULL : (float *)(b + o->xl),
                      o->yl == AA_SIZES_NONE ? NULL : (float *)(b + o->yl)};
}

/* An MoE block's local rows under expert parallelism after its plan: the
 * view's and the workspace's, or where the expert group sent more rows
 * than they hold, the dispatcher's overflow (moe_dispatch.h). The stage a
 * move's rows arrive in is the gradients' buffers (free in the forward). */
typedef struct {
  float *xl, *yl, *h, *act, *dxl, *dyl;
} moe_local_t;

static moe_local_t moe_local(const aa_gpt_t *m, const moe_view_t *v, const aa_moe_dispatch_t *d) {
  float *o = aa_moe_dispatch_overflow(d);
  if (!o) return (moe_local_t){v->xl, v->yl, v->h, v->act, m->acts->moe_dxl, m->acts->moe_dyl};
  const size_t RC = (size_t)d->rows * (size_t)m->d.C, RF = (size_t)d->rows * (size_t)m->d.Fe;
  return (moe_local_t){o, o + RC, o + 2 * RC, o + 2 * RC + 2 * RF, o + 2 * RC + 3 * RF, o + 3 * RC + 3 * RF};
}

/* MoE block l's MLP in place of the SwiGLU: out (N,C) = the routed
 * experts' weighted outputs plus the shared experts' for x (N,C), the
 * second RMSNorm's output, with weights w, computed in fp32 (under amp
 * from the 16-bit input and weights; the caller rounds out). Its routing
 * goes to m->routes[l]; the pass's forward (count set, not a recompute,
 * which reproduces the same routing) adds its aux and z losses into
 * m->moe_loss and its expert counts into m->moe_stats (both reset by the
 * pass). */
/* Where block l's routing map (and dispatcher) of the micro-batch under
 * way is: the stage's slot's under pipeline parallelism. */
static int moe_map(const aa_gpt_t *m, int l) { return m->moe_slot * m->arch.n_layer + l; }

/* Under context parallelism the load-balancing loss and the routing
 * statistics are the whole micro-batch's, every context rank's chunks of
 * its sequences together, as one process computes them from routing r of
 * the rank's N tokens and their router probs (N,E). Summed over the
 * context group: each expert's count c_e, as its low and high 16 bits
 * (floats: exact while cp < 256, AA_EUNSUPPORTED past it), and its sum of
 * probs, each rank's in double then one float rounding (1e-7 of the aux
 * loss). Then r->counts holds the group's c_e, which the router's
 * backward reads (moe_backward), *aux is the group's loss and *st the
 * group's fewest and most rows an expert computes (its count, at most the
 * capacity moe_context_keep set), its dropped slots left the rank's own.
 * The z-loss needs nothing: a mean over tokens, it is the replicas' mean
 * of the ranks' own. A collective over the context group: every forward
 * makes it, a recompute included. */
static int moe_context_reduce(const aa_gpt_t *m, aa_moe_route_t *r, const float *probs, aa_moe_stats_t *st,
                              float *aux) {
  const int N = r->N, E = r->E;
  if (m->cp >= 256)
    return aa_error(AA_EUNSUPPORTED, "mixture-of-experts layers over %d context ranks: at most 255", m->cp);
  double P[AA_MOE_MAX_EXPERTS] = {0};
  float v[3 * AA_MOE_MAX_EXPERTS] = {0};
  for (int n = 0; n < N; n++)
    for (int e = 0; e < E; e++)
      P[e] += probs[(size_t)n * E + e];
  for (int e = 0; e < E; e++) {
    v[e] = (float)((uint32_t)r->counts[e] & 0xffff);
    v[E + e] = (float)((uint32_t)r->counts[e] >> 16);
    v[2 * E + e] = (float)P[e];
  }
  int rc = aa_comm_all_reduce(m->opts.context, v, v, 3 * (size_t)E, AA_F32, AA_COMM_SUM);
  if (rc) return aa_error_wrap(rc, "the load-balancing sums over the context group");
  const double Ng = (double)N * m->cp;
  double bal = 0;
  *st = (aa_moe_stats_t){.min_tokens = -1, .dropped = st->dropped};
  for (int e = 0; e < E; e++) {
    const int32_t c = (int32_t)((uint32_t)v[e] + ((uint32_t)v[E + e] << 16));
    const int32_t rows = m->arch.moe.capacity_factor > 0 && c > r->capacity ? r->capacity : c;
    r->counts[e] = c;
    bal += c / Ng * (v[2 * E + e] / Ng);
    if (st->min_tokens < 0 || rows < st->min_tokens) st->min_tokens = rows;
    if (rows > st->max_tokens) st->max_tokens = rows;
  }
  *aux = (float)((double)m->arch.moe.aux_loss_coef * E * bal);
  return 0;
}

/* Its routing map's offsets in host memory (route_offsets). */
static int32_t *moe_offsets(const aa_gpt_t *m, int l) {
  return m->route_offsets + (size_t)moe_map(m, l) * (size_t)(m->arch.moe.experts + 1);
}

/* Under context parallelism with a capacity factor, keeps in r the slots
 * one process keeps of the micro-batch: there an expert keeps its first
 * capacity = ceil(c B T k / E) slots in token order, sequence after
 * sequence (aa_cpu_moe_route). A rank's N = B T / cp tokens are 2B runs of
 * Tc = T / 2cp, chunk-major: its first chunk of each of the B sequences,
 * then its second (the places aa_gpt_cp_positions gives, chunk j = rank
 * and 2cp-1-rank of 2cp). Each rank's slots per (run, expert) go to every
 * context rank (a gather: int32 moved as bytes, no arithmetic); a run's
 * slots ahead of it are those of the earlier sequences and of its own
 * sequence's earlier chunks (aa_cpu_moe_route_keep). r's experts are
 * chosen; *st gets the rank's drops. A collective over the context group:
 * every forward makes it, a recompute included. */
static int moe_context_keep(const aa_gpt_t *m, aa_moe_route_t *r, aa_moe_stats_t *st) {
  const int B = m->B, E = r->E, k = r->k, c = m->cp, runs = 2 * B;
  const size_t per = (size_t)r->N / runs * k, n = (size_t)runs * E;
  const long long slots = (long long)r->N * k * c;
  if (slots > AA_MOE_MAX_SLOTS)
    return aa_error(AA_EUNSUPPORTED,
                    "mixture-of-experts capacity over %d context ranks: %lld slots, at most %d", c, slots,
                    AA_MOE_MAX_SLOTS);
  int32_t *all = calloc((size_t)(c + 2) * n, sizeof(int32_t)); // (c,runs,E), mine (runs,E), before (runs,E)
  if (!all) return aa_error(AA_ENOMEM, "out of memory for the capacity's counts (%zu)", (size_t)(c + 2) * n);
  int32_t *mine = all + (size_t)c * n, *before = mine + n;
  for (size_t s = 0; s < (size_t)r->N * k; s++)
    mine[s / per * E + (size_t)r->expert[s]]++;
  int rc = aa_comm_all_gather(m->opts.context, mine, all, n, AA_F32);
  if (rc) {
    free(all);
    return aa_error_wrap(rc, "the capacity's counts over the context group");
  }
  long long ahead[AA_MOE_MAX_EXPERTS] = {0};
  for (int b = 0; b < B; b++)
    for (int j = 0; j < 2 * c; j++) {
      const int q = j < c ? j : 2 * c - 1 - j, run = (j < c ? 0 : B) + b; /* chunk j's rank, its run there */
      const int32_t *x = all + ((size_t)q * runs + run) * E;              // (E)
      for (int e = 0; e < E; e++) {
        if (q == m->cp_rank) before[(size_t)run * E + e] = (int32_t)ahead[e];
        ahead[e] += x[e];
      }
    }
  rc = aa_cpu_moe_route_keep(r, st, aa_cpu_moe_capacity(m->arch.moe.capacity_factor, slots, E), runs, before);
  free(all);
  return rc;
}

static int moe_forward_ops(aa_gpt_t *m, int l, float *out, const float *x, const float *w, int count) {
  const aa_moe_ops_t *mop = m->ops->moe;
  const aa_moe_t *mo = &m->arch.moe;
  const int N = m->B * m->T, C = m->d.C, E = mo->experts, Fe = m->d.Fe;
  const moe_view_t v = moe_view(m, l);
  aa_moe_route_t *r = &m->routes[moe_map(m, l)];
  int32_t *off = moe_offsets(m, l);
  aa_moe_stats_t st;
  int rc = mop->router_forward(v.logits, v.probs, x, WK(ROUTERW), N, C, E);
  /* Under context parallelism a capacity is kept over the group's tokens
   * (moe_context_keep, cpu backend only: moe_supported), then the host
   * offsets copied again. */
  const int keep_cp = m->cp > 1 && mo->capacity_factor > 0;
  if (!rc) rc = mop->route(r, off, &st, v.logits, v.probs, keep_cp ? 0.0f : mo->capacity_factor);
  if (!rc && keep_cp) {
    if ((rc = moe_context_keep(m, r, &st))) return aa_error_wrap(rc, "block %d", l);
    memcpy(off, r->offsets, (size_t)(E + 1) * sizeof *off);
  }
  if (rc) return rc;
  float aux_cp = 0;
  if (m->cp > 1 && (rc = moe_context_reduce(m, r, v.probs, &st, &aux_cp)))
    return aa_error_wrap(rc, "block %d", l);
  if ((rc = mop->permute(v.xp, x, r, C))) return rc;
  if (m->ep > 1) {
    /* The rows to the ranks holding their experts, the rank's experts over
     * what it received, the outputs back (moe_dispatch.h). */
    aa_moe_dispatch_t *d = &m->dispatch[moe_map(m, l)];
    if ((rc = aa_moe_dispatch_plan(d, off))) return aa_error_wrap(rc, "block %d", l);
    const moe_local_t o = moe_local(m, &v, d);
    if ((rc = aa_moe_dispatch(d, o.xl, v.xp, C, o.dxl))) return aa_error_wrap(rc, "block %d", l);
    if ((rc = mop->experts_forward(o.yl, o.h, o.act, o.xl, WK(EXPW13), WK(EXPW2), d->offsets, d->El, C, Fe)))
      return rc;
    if ((rc = aa_moe_combine(d, v.yp, o.yl, C, o.dxl))) return aa_error_wrap(rc, "block %d", l);
  } else if ((rc = mop->experts_forward(v.yp, v.h, v.act, v.xp, WK(EXPW13), WK(EXPW2), off, E, C, Fe))) {
    return rc;
  }
  rc = mop->unpermute(out, v.yp, r, C);
  if (!rc && mo->shared_expert_gate)
    rc = mop->shared_gate_forward(out, v.hs, v.as, x, WK(SHW13), WK(SHW2), WK(SHGATE), mo->shared_experts, N,
                                  C, Fe);
  else if (!rc)
    rc = mop->shared_forward(out, v.hs, v.as, x, WK(SHW13), WK(SHW2), mo->shared_experts, N, C, Fe);
  if (rc || !count) return rc;
  float aux, z;
  if ((rc = mop->losses(&aux, &z, v.logits, v.probs, r, mo->aux_loss_coef, mo->z_loss_coef))) return rc;
  if (m->cp > 1) aux = aux_cp;
  m->moe_loss += aux + z;
  aa_moe_stats_t *t = &m->moe_stats;
  if (t->min_tokens < 0 || st.min_tokens < t->min_tokens) t->min_tokens = st.min_tokens;
  if (st.max_tokens > t->max_tokens) t->max_tokens = st.max_tokens;
  t->dropped += st.dropped;
  return 0;
}

/* The block's GEMMs run in fp32 whatever amp is: its internals (h, act,
 * the gradients of the logits) are not rounded to 16 bits, so the amp
 * promise of set_gemm_inputs (ops.h) does not hold for them. */
static int moe_forward(aa_gpt_t *m, int l, float *out, const float *x, const float *w, int count) {
  m->ops->set_gemm_inputs(AA_F32);
  int rc = moe_forward_ops(m, l, out, x, w, count);
  m->ops->set_gemm_inputs(m->opts.amp);
  return rc;
}

/* Its backward: dx (N,C) = the gradient of x from dout (N,C), the
 * gradient of the block's output (with split experts under sequence
 * parallelism only the rank's rows, tp_rank Ns on); the weights' gradients (g, the block's
 * unit-relative gradient) accumulate, the router's with the aux and z
 * losses' at m->moe_dloss. Under context parallelism the aux loss is the
 * group's (moe_context_reduce): the router's backward, which scales it by
 * its N = the rank's tokens, gets the group's counts and aux_coef / cp,
 * so that a rank's share is cp times its part of the group's gradient,
 * which the replicas' mean then divides by cp again. */
static int moe_backward_ops(aa_gpt_t *m, int l, float *dx, float *g, const float *dout, const float *x,
                            const float *w) {
  const aa_ops_t *op = m->ops;
  const aa_moe_ops_t *mop = op->moe;
  aa_acts_t *a = m->acts;
  const aa_moe_t *mo = &m->arch.moe;
  const int N = m->B * m->T, C = m->d.C, E = mo->experts, Fe = m->d.Fe, k = mo->top_k;
  const int split = aa_sizes_etp(&m->arch, m->tp) > 1, gate = split && mo->shared_expert_gate;
  const moe_view_t v = moe_view(m, l);
  const aa_moe_route_t *r = &m->routes[moe_map(m, l)];
  const size_t rows = (size_t)r->rows;
  int rc;
#define G(k) role_at(m, g, l, k)
  op->memset0(a->moe_dyp, rows * C * sizeof(float));
  /* Split experts: the gate's gradient of this pass after the routing
   * weights', to be summed over the tensor group with them. */
  float *dgate = gate ? a->moe_dweight + (size_t)N * k : G(SHGATE);
  op->memset0(a->moe_dweight, ((size_t)N * k + (gate ? (size_t)C : 0)) * sizeof(float));
  if ((rc = mop->unpermute_backward(a->moe_dyp, a->moe_dweight, dout, v.yp, r, C))) return rc;
  op->memset0(a->moe_dxp, rows * C * sizeof(float));
  if (m->ep > 1) {
    /* The forward's moves in reverse: the rows' output gradients to the
     * experts' ranks (dispatch), their input gradients back (combine). */
    aa_moe_dispatch_t *d = &m->dispatch[moe_map(m, l)];
    const moe_local_t o = moe_local(m, &v, d);
    rc = aa_moe_dispatch(d, o.dyl, a->moe_dyp, C, o.dxl);
    if (rc) return aa_error_wrap(rc, "block %d backward", l);
    op->memset0(o.dxl, (size_t)d->rows * C * sizeof(float));
    if ((rc = mop->experts_backward(o.dxl, G(EXPW13), G(EXPW2), o.dyl, o.xl, o.h, o.act, WK(EXPW13),
                                    WK(EXPW2), d->offsets, d->El, C, Fe)))
      return rc;
    if ((rc = aa_moe_combine(d, a->moe_dxp, o.dxl, C, o.dyl)))
      return aa_error_wrap(rc, "block %d backward", l);
  } else if ((rc = mop->experts_backward(a->moe_dxp, G(EXPW13), G(EXPW2), a->moe_dyp, v.xp, v.h, v.act,
                                         WK(EXPW13), WK(EXPW2), moe_offsets(m, l), E, C, Fe))) {
    return rc;
  }
  op->memset0(dx, (size_t)N * C * sizeof(float));
  if ((rc = mop->permute_backward(dx, a->moe_dxp, r, C))) return rc;
  if (mo->shared_expert_gate)
    rc = mop->shared_gate_backward(dx, G(SHW13), G(SHW2), dgate, dout, x, v.hs, v.as, WK(SHW13), WK(SHW2),
                                   WK(SHGATE), mo->shared_experts, N, C, Fe);
  else
    rc = mop->shared_backward(dx, G(SHW13), G(SHW2), dout, x, v.hs, v.as, WK(SHW13), WK(SHW2),
                              mo->shared_experts, N, C, Fe);
  if (rc) return rc;
  if (split) {
    /* Each tensor rank's experts gave part of the input gradient and of
     * the routing weights' and gate's: their sums, before the router adds
     * its part (the same on every rank). Under sequence parallelism the
     * caller keeps only the rank's rows of dx: a reduce-scatter into them,
     * in place (the other rows stay partial and are not read). */
    rc = m->sp ? sp_scatter(m, dx + (size_t)m->tp_rank * stream_tokens(m) * C, dx)
               : tp_all_reduce(m, dx, (size_t)N * C);
    if (!rc) rc = tp_all_reduce(m, a->moe_dweight, (size_t)N * k + (gate ? (size_t)C : 0));
    if (rc) return aa_error_wrap(rc, "block %d backward: the split experts' sums", l);
    if (gate) op->accumulate(G(SHGATE), dgate, (size_t)C);
  }
  return mop->router_backward(dx, G(ROUTERW), a->moe_dlogits, a->moe_dweight, x, WK(ROUTERW), v.logits,
                              v.probs, r, C, mo->aux_loss_coef / (float)m->cp, mo->z_loss_coef, m->moe_dloss);
#undef G
}

/* In fp32, as moe_forward. */
static int moe_backward(aa_gpt_t *m, int l, float *dx, float *g, const float *dout, const float *x,
                        const float *w) {
  m->ops->set_gemm_inputs(AA_F32);
  int rc = moe_backward_ops(m, l, dx, g, dout, x, w);
  m->ops->set_gemm_inputs(m->opts.amp);
  return rc;
}

/* Block l's forward from x (the rank's Ns tokens of the residual stream)
 * with weights w into the view v. Under amp every output is rounded before
 * use; with keep set the kept fields also go to the block's 16-bit store
 * (in fp32 the view already is the store). A recompute passes keep = 0 and
 * reproduces the same values (and runs the same collectives). The
 * row-parallel layers' bias enters once, through rank 0's partial sum. */
/* --- LoRA (model.h aa_gpt_lora_offset) -------------------------------------------------- */

size_t aa_gpt_lora_offset(const aa_arch_t *a, int l, int t) {
  size_t off = (size_t)l * (size_t)aa_lora_block_numel(a, 1);
  for (int k = 0; k < t; k++) {
    if (!(a->lora.targets >> k & 1)) continue;
    int in, out, row;
    aa_lora_shape(a, k, 1, &in, &out, &row);
    off += (size_t)a->lora.r * ((size_t)in + (size_t)out);
  }
  return off;
}

/* Block l's index among the blocks the rank holds (its pipeline place's
 * chunks in order, as sizes.h counts them): the rank's adapters are its
 * blocks' (-1 for a block it does not hold). */
static int lora_block(const aa_gpt_t *m, int l) {
  if (m->pp <= 1) return l;
  for (int c = 0, k = 0; c < m->pipe.vpp; k += m->pipe.hi[c] - m->pipe.lo[c], c++)
    if (l >= m->pipe.lo[c] && l < m->pipe.hi[c]) return k + l - m->pipe.lo[c];
  return -1;
}

/* Where target t of block l lies in the rank's m->lora: its held blocks,
 * each its targets' A then B in the tensor slice's shapes (aa_lora_shape
 * at m->tp). At tp 1 and pp 1 it is aa_gpt_lora_offset's layout. */
static size_t lora_local_offset(const aa_gpt_t *m, int l, int t) {
  const aa_arch_t *a = &m->arch;
  size_t off = (size_t)lora_block(m, l) * (size_t)aa_lora_block_numel(a, m->tp);
  for (int k = 0; k < t; k++) {
    if (!(a->lora.targets >> k & 1)) continue;
    int in, out, row;
    aa_lora_shape(a, k, m->tp, &in, &out, &row);
    off += (size_t)a->lora.r * ((size_t)in + (size_t)out);
  }
  return off;
}

/* One (block, target) of the rank: its whole shapes (in, out), the
 * rank's (il, ol), row-parallel or not, and its A and B offsets in the
 * whole layout (ga, gb) and in the rank's (la, lb). */
typedef struct {
  int in, out, il, ol, row;
  size_t ga, gb, la, lb;
} lora_piece_t;

static void lora_piece(const aa_gpt_t *m, int l, int t, lora_piece_t *p) {
  const aa_arch_t *a = &m->arch;
  const size_t r = (size_t)a->lora.r;
  aa_lora_shape(a, t, 1, &p->in, &p->out, &p->row);
  aa_lora_shape(a, t, m->tp, &p->il, &p->ol, &p->row);
  p->ga = aa_gpt_lora_offset(a, l, t);
  p->gb = p->ga + r * (size_t)p->in;
  p->la = lora_local_offset(m, l, t);
  p->lb = p->la + r * (size_t)p->il;
}

/* Copies the rank's slice between whole (host, the whole model's layout:
 * aa_gpt_lora_offset's) and local (host, the rank's layout). Megatron's
 * cut: a column-parallel target (q, k, v, qkv, gate, up, fc) holds A whole
 * and B's rows of the rank's output slice (qkv: its q, k and v heads, three
 * runs, as the base's HEADS split); a row-parallel one (o/proj, down,
 * fcproj) A's columns of the rank's input slice and B whole. to_whole 0
 * fills local from whole; 1 writes local into whole, the halves every
 * tensor rank holds (replicated) from tensor rank 0 only. */
static void lora_slice(const aa_gpt_t *m, float *whole, float *local, int to_whole) {
  const aa_arch_t *a = &m->arch;
  const size_t r = (size_t)a->lora.r, k = (size_t)m->tp_rank;
  const int rep = !to_whole || m->tp_rank == 0;
#define LORA_COPY(g, lo, n)                                                                                  \
  do {                                                                                                       \
    if (to_whole)                                                                                            \
      memcpy(whole + (g), local + (lo), (n) * sizeof(float));                                                \
    else                                                                                                     \
      memcpy(local + (lo), whole + (g), (n) * sizeof(float));                                                \
  } while (0)
  for (int l = 0; l < a->n_layer; l++) {
    if (lora_block(m, l) < 0) continue;
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      if (!(a->lora.targets >> t & 1)) continue;
      lora_piece_t p;
      lora_piece(m, l, t, &p);
      if (!p.row) {
        if (rep) LORA_COPY(p.ga, p.la, r * p.in);
        /* B (out, r): the rank's rows, in one run or (qkv) three. */
        const int runs = t == AA_LORA_QKV ? 3 : 1;
        const size_t ol = (size_t)p.ol / runs, og = (size_t)p.out / runs;
        for (int j = 0; j < runs; j++)
          LORA_COPY(p.gb + (j * og + k * ol) * r, p.lb + j * ol * r, ol * r);
      } else {
        /* A (r, in): the rank's columns of every row. */
        for (size_t i = 0; i < r; i++)
          LORA_COPY(p.ga + i * p.in + k * p.il, p.la + i * p.il, (size_t)p.il);
        if (rep) LORA_COPY(p.gb, p.lb, (size_t)p.out * r);
      }
    }
  }
#undef LORA_COPY
}

size_t aa_gpt_lora_whole_numel(const aa_arch_t *a) {
  return (size_t)a->n_layer * (size_t)aa_lora_block_numel(a, 1);
}

int aa_gpt_lora_put(aa_gpt_t *m, float *dst, const float *whole) {
  if (!m->arch.lora.r || !m->lora.data) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  if (m->tp == 1 && m->pp <= 1) {
    int rc = m->ops->upload(dst, whole, m->lora.numel * sizeof(float));
    return rc ? rc : m->ops->sync();
  }
  float *h = malloc(m->lora.numel * sizeof *h);
  if (!h) return aa_error(AA_ENOMEM, "out of memory slicing the adapters");
  lora_slice(m, (float *)whole, h, 0);
  int rc = m->ops->upload(dst, h, m->lora.numel * sizeof *h);
  free(h);
  return rc ? rc : m->ops->sync();
}

int aa_gpt_lora_get_host(aa_gpt_t *m, const float *local, float *whole) {
  if (!m->arch.lora.r || !m->lora.data) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  const size_t n = aa_gpt_lora_whole_numel(&m->arch);
  if (m->tp == 1 && m->pp <= 1) {
    memcpy(whole, local, n * sizeof *whole);
    return 0;
  }
  /* Each element is written by one rank and zero elsewhere, so the sums
   * over the tensor and the pipeline group are copies (exact). */
  memset(whole, 0, n * sizeof *whole);
  lora_slice(m, whole, (float *)local, 1); /* to_whole: local is only read */
  int rc = 0;
  if (m->tp > 1) rc = aa_comm_all_reduce(m->opts.tensor, whole, whole, n, AA_F32, AA_COMM_SUM);
  if (!rc && m->pp > 1) rc = aa_comm_all_reduce(m->opts.pipeline, whole, whole, n, AA_F32, AA_COMM_SUM);
  return rc ? aa_error_wrap(rc, "gathering the adapters over the tensor and pipeline groups") : 0;
}

int aa_gpt_lora_get(aa_gpt_t *m, const float *src, float *whole) {
  if (!m->arch.lora.r || !m->lora.data) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  const size_t n = aa_gpt_lora_whole_numel(&m->arch);
  if (m->tp == 1 && m->pp <= 1) return m->ops->download(whole, src, n * sizeof(float));
  float *h = malloc(m->lora.numel * sizeof *h);
  if (!h) return aa_error(AA_ENOMEM, "out of memory gathering the adapters");
  int rc = m->ops->download(h, src, m->lora.numel * sizeof *h);
  if (!rc) rc = aa_gpt_lora_get_host(m, h, whole);
  free(h);
  return rc;
}

int aa_gpt_lora_init(aa_gpt_t *m, uint64_t seed) {
  const aa_arch_t *a = &m->arch;
  if (!a->lora.r || !m->lora.data) return aa_error(AA_EINVAL, "lora: the model has no adapters");
  /* The whole model's adapters from the seed on every rank, then the
   * rank's slice: the same values at every layout. */
  float *h = calloc(aa_gpt_lora_whole_numel(a), sizeof *h);
  if (!h) return aa_error(AA_ENOMEM, "out of memory initialising the adapters");
  aa_rng_t rng;
  aa_rng_seed(&rng, seed);
  for (int l = 0; l < a->n_layer; l++)
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      if (!(a->lora.targets >> t & 1)) continue;
      int in, out, row;
      aa_lora_shape(a, t, 1, &in, &out, &row);
      /* torch.nn.init.kaiming_uniform_(A, a=sqrt(5)): gain sqrt(2 / 6),
       * bound gain sqrt(3 / fan_in) = 1 / sqrt(in); B stays zero. */
      const float bound = 1.0f / sqrtf((float)in);
      float *A = h + aa_gpt_lora_offset(a, l, t);
      for (size_t j = 0; j < (size_t)a->lora.r * (size_t)in; j++)
        A[j] = bound * (2.0f * aa_rng_uniform(&rng) - 1.0f);
    }
  int rc = aa_gpt_lora_put(m, m->lora.data, h);
  free(h);
  return rc;
}

/* The halves of the rank's adapters every tensor rank holds whole
 * (replicated 1: a column target's A, a row target's B) or its own slice
 * of (0: the other), in layout order: their offsets and lengths into
 * off[] and len[] (NULL: only counted). Returns how many. */
static int lora_halves(const aa_gpt_t *m, int replicated, size_t *off, size_t *len) {
  const aa_arch_t *a = &m->arch;
  const size_t r = (size_t)a->lora.r;
  int n = 0;
  for (int l = 0; l < a->n_layer; l++) {
    if (lora_block(m, l) < 0) continue;
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      if (!(a->lora.targets >> t & 1)) continue;
      lora_piece_t p;
      lora_piece(m, l, t, &p);
      if (off) {
        const int b = p.row == replicated; /* the B half */
        off[n] = b ? p.lb : p.la;
        len[n] = r * (size_t)(b ? p.ol : p.il);
      }
      n++;
    }
  }
  return n;
}

/* The halves' offsets and lengths (lora_halves) in one allocation: *off
 * n entries, then their lengths; NULL when out of memory. */
static size_t *lora_halves_alloc(const aa_gpt_t *m, int replicated, int *n) {
  *n = lora_halves(m, replicated, NULL, NULL);
  size_t *off = malloc(2 * (size_t)(*n ? *n : 1) * sizeof *off);
  if (off) lora_halves(m, replicated, off, off + *n);
  return off;
}

int aa_gpt_lora_reduce_grads(aa_gpt_t *m) {
  if (!m->arch.lora.r || m->tp == 1) return 0;
  int n;
  size_t *off = lora_halves_alloc(m, 1, &n), total = 0;
  if (!off) return aa_error(AA_ENOMEM, "out of memory");
  const size_t *len = off + n;
  for (int i = 0; i < n; i++)
    total += len[i];
  float *h = malloc((total ? total : 1) * sizeof *h), *g = m->lora_grads.data;
  int rc = h ? m->ops->sync() : aa_error(AA_ENOMEM, "out of memory");
  /* Packed into one buffer: one collective a step, whatever the number of
   * blocks and targets. */
  for (size_t i = 0, at = 0; !rc && i < (size_t)n; at += len[i], i++)
    rc = m->ops->download(h + at, g + off[i], len[i] * sizeof *h);
  if (!rc) rc = aa_comm_all_reduce(m->opts.tensor, h, h, total, AA_F32, AA_COMM_SUM);
  for (size_t i = 0, at = 0; !rc && i < (size_t)n; at += len[i], i++)
    rc = m->ops->upload(g + off[i], h + at, len[i] * sizeof *h);
  free(h);
  free(off);
  if (!rc) rc = m->ops->sync();
  return rc ? aa_error_wrap(rc, "summing the adapters' replicated gradients over the tensor group") : 0;
}

int aa_gpt_lora_grad_squares(aa_gpt_t *m, double *out) {
  const aa_ops_t *op = m->ops;
  const float *g = m->lora_grads.data;
  if (m->tp == 1 && m->pp <= 1) {
    *out = op->sum_squares(g, m->lora_grads.numel);
    return 0;
  }
  /* The split halves' squares summed over the tensor group, the
   * replicated halves' once (the same on every tensor rank after
   * aa_gpt_lora_reduce_grads), then over the pipeline group, whose stages
   * hold different blocks. Float sums, as optim.c's norm over a tensor
   * group; at tp 1 every half is the rank's own. */
  double sq[2] = {0, 0};
  for (int rep = 0; rep < 2; rep++) {
    int n;
    size_t *off = lora_halves_alloc(m, rep, &n);
    if (!off) return aa_error(AA_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
      sq[rep] += op->sum_squares(g + off[i], off[n + i]);
    free(off);
  }
  const double whole = m->tp > 1 ? sq[1] : 0;
  float x = (float)(sq[0] + (m->tp > 1 ? 0 : sq[1]));
  int rc = aa_gpt_tensor_sum(m, &x, 1);
  if (!rc) x = (float)((double)x + whole);
  if (!rc) rc = aa_gpt_pipeline_sum(m, &x, 1);
  if (rc) return aa_error_wrap(rc, "the adapters' gradient norm");
  *out = x;
  return 0;
}

int aa_gpt_lora_shard_squares(aa_gpt_t *m, const float *g, size_t at, size_t len, double *out) {
  *out = 0;
  if (!len) return 0;
  const aa_ops_t *op = m->ops;
  if (m->tp == 1 || m->tp_rank == 0) {
    *out = op->sum_squares(g, len);
    return 0;
  }
  /* Another tensor rank: the split halves' elements in [at, at + len)
   * only (the replicated ones, the same bits on every tensor rank, are
   * tensor rank 0's to count). The halves of both kinds tile the layout. */
  int n;
  size_t *off = lora_halves_alloc(m, 0, &n);
  if (!off) return aa_error(AA_ENOMEM, "out of memory");
  double sq = 0;
  for (int i = 0; i < n; i++) {
    const size_t lo = off[i] > at ? off[i] : at, e = off[i] + off[n + i], hi = e < at + len ? e : at + len;
    if (lo < hi) sq += op->sum_squares(g + (lo - at), hi - lo);
  }
  free(off);
  *out = sq;
  return 0;
}

/* The columns [c0, c0 + out) of a layer's output y (N rows of ldy) that
 * LoRA target t computes, in block l: y += s B (A x) for x (N, in). Under
 * tensor parallelism it is the rank's slice (lora_slice): a column target
 * computes its output columns from the whole A; a row target its partial
 * sum s B (A_i x_i) from its input columns, which the layer's own
 * all-reduce (or reduce-scatter) adds up with the base's, since B (sum_i
 * A_i x_i) = sum_i B (A_i x_i): no collective of its own. */
static void lora_forward(aa_gpt_t *m, int l, int t, float *y, int ldy, int c0, const float *x) {
  const aa_arch_t *a = &m->arch;
  if (!(a->lora.targets >> t & 1)) return;
  const aa_ops_t *op = m->ops;
  const int N = m->B * m->T, r = a->lora.r;
  int in, out, row;
  aa_lora_shape(a, t, m->tp, &in, &out, &row);
  const float *A = (const float *)m->lora.data + lora_local_offset(m, l, t), *Bm = A + (size_t)r * in;
  float *u = m->acts->lora_u, *tmp = m->acts->lora_tmp;
  op->matmul_forward(u, x, A, NULL, N, in, r);
  op->matmul_forward(tmp, u, Bm, NULL, N, r, out);
  op->scale(tmp, m->lora_scale, (size_t)N * out);
  op->rows_accumulate(y + c0, (size_t)ldy, tmp, (size_t)out, (size_t)N, (size_t)out);
}

/* Its backward from the output gradient's columns [c0, c0 + out) of dy
 * (ldy): A x recomputed, then with g = s dy, dB += g^T (A x), d(A x) =
 * g B, dA += d(A x)^T x and dx += d(A x) A.
 *
 * Under tensor parallelism every rank computes this from its slice, and
 * the halves every rank holds whole get a term per rank, which
 * aa_gpt_lora_reduce_grads sums over the tensor group once a step (the
 * gradient is linear in each term, so the sum of the accumulated terms is
 * the sum of the micro-batches' sums). A column target: d(A x) = sum_i
 * g_i B_i over the ranks' output slices, so dA = sum_i d(A x)_i^T x (x is
 * the same on every rank); dx takes d(A x)_i A, a partial sum that the
 * layer's input-gradient all-reduce completes. A row target: A x = sum_i
 * A_i x_i, so dB = sum_i g^T (A_i x_i) (g is the same on every rank);
 * d(A x) = g B is whole, so dA_i and dx_i are the rank's own. Summing the
 * r (in + out) gradient elements of the replicated halves once a step
 * moves less than summing the (N, r) activations A x or d(A x) at every
 * layer of every micro-batch would. */
static void lora_backward(aa_gpt_t *m, int l, int t, float *dx, const float *dy, int ldy, int c0,
                          const float *x) {
  const aa_arch_t *a = &m->arch;
  if (!(a->lora.targets >> t & 1)) return;
  const aa_ops_t *op = m->ops;
  const int N = m->B * m->T, r = a->lora.r;
  int in, out, row;
  aa_lora_shape(a, t, m->tp, &in, &out, &row);
  const size_t off = lora_local_offset(m, l, t);
  const float *A = (const float *)m->lora.data + off, *Bm = A + (size_t)r * in;
  float *gA = (float *)m->lora_grads.data + off, *gB = gA + (size_t)r * in;
  float *u = m->acts->lora_u, *du = m->acts->lora_du, *g = m->acts->lora_tmp;
  op->matmul_forward(u, x, A, NULL, N, in, r);
  op->rows_copy(g, (size_t)out, dy + c0, (size_t)ldy, (size_t)N, (size_t)out);
  op->scale(g, m->lora_scale, (size_t)N * out);
  op->memset0(du, (size_t)N * r * sizeof(float));
  op->matmul_backward(du, gB, NULL, g, u, Bm, N, r, out);
  op->matmul_backward(dx, gA, NULL, du, x, A, N, in, r);
}

static int block_forward(aa_gpt_t *m, int l, const float *x, const float *w, block_view_t *v, int keep) {
  const aa_ops_t *op = m->ops;
  const block_store_t *s = &m->acts->blocks[l];
  const int B = m->B, T = m->T, C = m->d.C, Cl = m->d.Cl, F = m->d.F, NH = m->d.NH, N = B * T;
  const int Ns = stream_tokens(m), bias = m->tp_rank == 0;
  const size_t NsC = (size_t)Ns * C, NCl = (size_t)N * Cl, NF_ = (size_t)N * F;
  float **f = v->f, *st = v->stats;
  const float *in;
  int rc;
#define OUT(k, n) rnd(m, keep ? s->f[k] : NULL, f[k], (n))
  norm_forward(m, f[F_LN1], st + S_LN1M * Ns, st + S_LN1R * Ns, x, WK(LN1W), WK(LN1B), Ns);
  OUT(F_LN1, NsC);
  if ((rc = column_input(m, f[F_LN1], &in))) return rc;
  op->matmul_forward(f[F_QKV], in, WK(QKVW), WK(QKVB), N, C, m->d.QKV);
  lora_forward(m, l, AA_LORA_Q, f[F_QKV], m->d.QKV, 0, in);
  lora_forward(m, l, AA_LORA_K, f[F_QKV], m->d.QKV, Cl, in);
  lora_forward(m, l, AA_LORA_V, f[F_QKV], m->d.QKV, Cl + m->d.KVl, in);
  lora_forward(m, l, AA_LORA_QKV, f[F_QKV], m->d.QKV, 0, in);
  if (m->d.llama) {
    /* q and k rotated by position (the whole sequence is here: column
     * inputs are gathered under sequence parallelism). */
    rnd(m, NULL, f[F_QKV], (size_t)N * m->d.QKV);
    rope(m, f[F_QKV], 0);
    OUT(F_QKV, (size_t)N * m->d.QKV);
    if (m->cp > 1) {
      if ((rc = ring_forward(m, f[F_QKV], f[F_ATTY], LSE(st, Ns)))) return rc;
    } else {
      op->attention_gqa_forward(f[F_ATTY], LSE(st, Ns), f[F_QKV], B, T, NH, m->d.NKV, m->d.HS);
    }
  } else {
    OUT(F_QKV, 3 * NCl);
    if (m->cp > 1) {
      if ((rc = ring_forward(m, f[F_QKV], f[F_ATTY], LSE(st, Ns)))) return rc;
    } else {
      op->attention_forward(f[F_ATTY], LSE(st, Ns), f[F_QKV], B, T, Cl, NH);
    }
  }
  OUT(F_ATTY, NCl);
  /* The projection output goes straight into res2, then x is added. */
  op->matmul_forward(row_output(m, f[F_RES2]), f[F_ATTY], WK(PROJW), bias ? WK(PROJB) : NULL, N, Cl, C);
  lora_forward(m, l, AA_LORA_O, row_output(m, f[F_RES2]), C, 0, f[F_ATTY]);
  lora_forward(m, l, AA_LORA_PROJ, row_output(m, f[F_RES2]), C, 0, f[F_ATTY]);
  if ((rc = row_reduce(m, f[F_RES2]))) return rc;
  rnd(m, NULL, f[F_RES2], NsC);
  op->residual_forward(f[F_RES2], f[F_RES2], x, NsC);
  OUT(F_RES2, NsC);
  norm_forward(m, f[F_LN2], st + S_LN2M * Ns, st + S_LN2R * Ns, f[F_RES2], WK(LN2W), WK(LN2B), Ns);
  OUT(F_LN2, NsC);
  if (aa_arch_is_moe_layer(&m->arch, l)) {
    /* Under tensor parallelism (expert_tensor_parallel_size 1) every
     * tensor rank routes the same tokens through the same whole experts
     * and gets the same output: nothing to reduce. Under sequence
     * parallelism the tokens are gathered first and the rank keeps its own
     * rows of the output. */
    if (!m->sp) {
      if ((rc = moe_forward(m, l, f[F_RES3], f[F_LN2], w, keep))) return rc;
    } else {
      if ((rc = column_input(m, f[F_LN2], &in)) || (rc = moe_forward(m, l, m->acts->partial, in, w, keep)))
        return rc;
      if (aa_sizes_etp(&m->arch, m->tp) == 1)
        op->rows_copy(f[F_RES3], C, m->acts->partial + (size_t)m->tp_rank * NsC, C, Ns, C);
    }
    /* Split experts (model.h): each rank's output is a partial sum. */
    if (aa_sizes_etp(&m->arch, m->tp) > 1 && (rc = row_reduce(m, f[F_RES3]))) return rc;
  } else {
    if ((rc = column_input(m, f[F_LN2], &in))) return rc;
    const int fuse = fused_gelu(m);
    op->matmul_forward(f[F_FCH], in, WK(FCW), fuse ? NULL : WK(FCB), N, C, m->d.FH);
    lora_forward(m, l, AA_LORA_GATE, f[F_FCH], m->d.FH, 0, in);
    lora_forward(m, l, AA_LORA_UP, f[F_FCH], m->d.FH, F, in);
    lora_forward(m, l, AA_LORA_FC, f[F_FCH], m->d.FH, 0, in);
    if (fuse) op->bias_gelu_forward(f[F_FCH], f[F_FCHG], WK(FCB), N, F);
    OUT(F_FCH, (size_t)N * m->d.FH);
    if (!fuse) act_forward(m, f[F_FCHG], f[F_FCH], (size_t)N);
    OUT(F_FCHG, NF_);
    op->matmul_forward(row_output(m, f[F_RES3]), f[F_FCHG], WK(FCPROJW), bias ? WK(FCPROJB) : NULL, N, F, C);
    lora_forward(m, l, AA_LORA_DOWN, row_output(m, f[F_RES3]), C, 0, f[F_FCHG]);
    lora_forward(m, l, AA_LORA_FCPROJ, row_output(m, f[F_RES3]), C, 0, f[F_FCHG]);
    if ((rc = row_reduce(m, f[F_RES3]))) return rc;
  }
  rnd(m, NULL, f[F_RES3], NsC);
  op->residual_forward(f[F_RES3], f[F_RES3], f[F_RES2], NsC);
  OUT(F_RES3, NsC);
#undef OUT
  return 0;
}

/* Whether block l is the first of one of the rank's chunks (its input is
 * acts->encoded: the embedding, or what the previous stage sent). */
static int chunk_start(const aa_gpt_t *m, int l) {
  for (int c = 0; c < m->pipe.vpp; c++)
    if (m->pipe.lo[c] == l) return 1;
  return 0;
}

/* fp32 input of block l (l = n_layer: the final LayerNorm's input): the
 * previous block's output or the chunk's input, widened under amp. */
static const float *block_input(aa_gpt_t *m, int l) {
  aa_acts_t *a = m->acts;
  void *src = chunk_start(m, l) ? a->encoded : a->blocks[l - 1].f[F_RES3];
  if (m->opts.amp == AA_F32) return src;
  float *dst = a->ws_res[(l + 1) & 1];
  m->ops->cast_to_f32(dst, src, m->opts.amp, (size_t)stream_tokens(m) * m->d.C);
  return dst;
}

/* Brings back everything block l's backward reads: kept fields (widened
 * under amp), then what the checkpoint mode dropped, recomputed. */
static int block_restore(aa_gpt_t *m, int l, const float *x, const float *w, block_view_t *v) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const block_store_t *s = &a->blocks[l];
  block_view(m, l, v);
  if (block_full(&m->opts, l)) return block_forward(m, l, x, w, v, 0);
  if (m->opts.amp != AA_F32)
    for (int f = 0; f < NF; f++)
      if (f != F_RES3 && s->f[f]) op->cast_to_f32(v->f[f], s->f[f], m->opts.amp, field_numel(m, f));
  if (!s->f[F_FCHG] && !aa_arch_is_moe_layer(&m->arch, l)) {
    size_t n = field_numel(m, F_FCHG);
    act_forward(m, v->f[F_FCHG], v->f[F_FCH], (size_t)m->B * m->T);
    rnd(m, NULL, v->f[F_FCHG], n);
  }
  return 0;
}

/* The mean loss's per-token losses from the logits (the rank's vocabulary
 * slice under tensor parallelism), the logits turned into probabilities. */
static int loss_forward(aa_gpt_t *m) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const int N = m->B * m->T, Vl = m->d.Vl;
  if (m->tp == 1) {
    op->crossentropy_forward(a->losses, a->logits, a->logits, a->targets, N, Vl);
    return 0;
  }
  float *mine = a->xent, *all = a->xent + (size_t)3 * N;
  op->xent_vocab_partial(mine, a->logits, a->targets, m->vocab_lo, m->vocab_valid, N, Vl);
  int rc = op->sync();
  if (!rc) rc = aa_comm_all_gather(m->opts.tensor, mine, all, (size_t)3 * N, AA_F32);
  if (rc) return aa_error_wrap(rc, "the cross-entropy over the tensor group");
  op->xent_vocab_forward(a->losses, a->logits, a->logits, all, m->tp, m->vocab_valid, N, Vl);
  return 0;
}

/* The gradient of a column-parallel layer's (or the head's) input: each
 * rank's partial, from its slice of the layer, is in row_output(m,
 * acts->dln); the group's sum lands in acts->dln (the rank's tokens),
 * rounded under amp. */
static int column_input_grad(aa_gpt_t *m) {
  int rc = row_reduce(m, m->acts->dln);
  if (!rc) rnd(m, NULL, m->acts->dln, (size_t)stream_tokens(m) * m->d.C);
  return rc;
}

/* Where a LayerNorm's weight and bias gradients go: the unit's gradient
 * (g), or under sequence parallelism (each rank saw only its tokens)
 * acts->lngrad + at, zeroed, to be summed over the group by
 * sum_ln_grads. */
static float *ln_grads(aa_gpt_t *m, float *g, int at) {
  if (!m->sp || !g) return g; /* a frozen base (LoRA) has none */
  float *d = m->acts->lngrad + at;
  m->ops->memset0(d, 2 * (size_t)m->d.C * sizeof(float));
  return d;
}

/* Sequence parallelism: the n LayerNorm gradients in acts->lngrad summed
 * over the group and added to g[k] (2C elements each). */
static int sum_ln_grads(aa_gpt_t *m, float *g[], int n) {
  if (!m->sp || !g[0]) return 0; /* a frozen base (LoRA): nothing to sum */
  size_t C2 = 2 * (size_t)m->d.C;
  int rc = tp_all_reduce(m, m->acts->lngrad, (size_t)n * C2);
  if (rc) return aa_error_wrap(rc, "summing the LayerNorm gradients");
  /* RMSNorm has a weight only: its bias half stays 0 and is not added. */
  const size_t own = m->d.llama ? (size_t)m->d.C : C2;
  for (int k = 0; k < n; k++) m->ops->accumulate(g[k], m->acts->lngrad + k * C2, own);
  return 0;
}

/* Checks the token ids of a micro-batch (targets may be NULL). */
static int check_tokens(const aa_gpt_t *m, const int32_t *inputs, const int32_t *targets) {
  const int V = m->arch.vocab_size, N = m->B * m->T;
  for (int i = 0; i < N; i++) {
    if ((inputs && (inputs[i] < 0 || inputs[i] >= V)) || (targets && (targets[i] < 0 || targets[i] >= V)))
      return aa_error(AA_EINVAL, "token id out of range [0, %d) at position %d", V, i);
  }
  return 0;
}

/* The start of a pass: the 16-bit copy refreshed when stale (under amp)
 * and the outer weights (wte|wpe, lnf) where the pass reads them. */
static int pass_begin(aa_gpt_t *m, outer_weights_t *ow) {
  const aa_ops_t *op = m->ops;
  /* Under amp every GEMM operand is a rounded 16-bit value (rnd), which
   * lets the backend multiply in 16 bits (ops.h). */
  op->set_gemm_inputs(m->opts.amp);
  /* Under ZeRO >= 1 with amp the trainer writes the 16-bit copy itself
   * (there are no full fp32 weights here to round). */
  int amp = m->opts.amp != AA_F32, refreshed = amp && m->params16_stale;
  if (refreshed && m->params.data) op->cast_from_f32(m->params16.data, m->opts.amp, m->params.data, m->n_params);
  m->params16_stale = 0;
  m->moe_loss = 0;
  m->moe_stats = (aa_moe_stats_t){.min_tokens = -1};
  return outer_weights(m, refreshed, ow);
}

/* The embedding of the tokens in acts->inputs into x (fp32; the group's
 * sum of every rank's vocabulary slice, the positions through rank 0),
 * stored rounded into acts->encoded. */
static int embed_forward(aa_gpt_t *m, const outer_weights_t *ow, float *x) {
  aa_acts_t *a = m->acts;
  const float *wpe = m->tp_rank == 0 ? ow->wpe : NULL;
  if (m->cp == 1) {
    m->ops->encoder_forward_vocab(row_output(m, x), a->inputs, ow->wte, wpe, m->vocab_lo, m->vocab_valid,
                                  m->B, m->T, m->d.C);
  } else { /* each chunk at its place in the sequence (model.h) */
    int pos0[2], Tc = m->T / 2;
    aa_gpt_cp_positions(m->arch.seq_len, m->cp, m->cp_rank, pos0);
    for (int k = 0; k < 2; k++) {
      size_t rows = (size_t)k * m->B * Tc;
      m->ops->encoder_forward_vocab(row_output(m, x) + rows * m->d.C, a->inputs + rows, ow->wte,
                                    wpe ? wpe + (size_t)pos0[k] * m->d.C : NULL, m->vocab_lo, m->vocab_valid,
                                    m->B, Tc, m->d.C);
    }
  }
  int rc = row_reduce(m, x);
  if (!rc) rnd(m, a->encoded, x, (size_t)stream_tokens(m) * m->d.C);
  return rc;
}

/* Blocks [lo, hi) forward from x; *out = the last one's output (fp32). */
static int blocks_forward(aa_gpt_t *m, int lo, int hi, float *x, float **out) {
  int rc;
  for (int l = lo; l < hi; l++) {
    block_view_t v;
    float *w;
    if ((rc = block_weights(m, l, &w))) return rc;
    block_view(m, l, &v);
    if ((rc = block_forward(m, l, x, w, &v, 1))) return rc;
    x = v.f[F_RES3];
  }
  *out = x;
  return 0;
}

/* The final LayerNorm and the head from x (the last block's output), and
 * with targets (uploaded to acts->targets) the per-token losses and their
 * mean into m->loss. */
static int head_forward(aa_gpt_t *m, const outer_weights_t *ow, const float *x, int targets) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const int N = m->B * m->T, Ns = stream_tokens(m), C = m->d.C;
  int rc;
  norm_forward(m, a->lnf, a->lnf_stats, a->lnf_stats + Ns, x, ow->lnfw, ow->lnfb, Ns);
  rnd(m, NULL, a->lnf, (size_t)Ns * C);
  const float *in;
  if ((rc = column_input(m, a->lnf, &in))) return rc;
  op->matmul_forward(a->logits, in, ow->head, NULL, N, C, m->d.Vl);
  a->have_targets = 0;
  if (!targets) return (rc = op->sync()) ? rc : charge_scratch(m);
  if ((rc = loss_forward(m)) || (rc = op->download(a->host_losses, a->losses, sizeof(float) * N)) ||
      (rc = op->sync()) || (rc = charge_scratch(m)))
    return rc;
  a->have_targets = 1;
  double sum = 0;
  for (int i = 0; i < N; i++) sum += a->host_losses[i];
  /* The MoE blocks' aux and z losses are part of the training loss. */
  m->loss = (float)(sum / N + m->moe_loss);
  return 0;
}

int aa_gpt_forward(aa_gpt_t *m, const int32_t *inputs, const int32_t *targets, float *loss) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const int N = m->B * m->T;
  int rc;
  if (m->pp > 1) return aa_error(AA_EINVAL, "a pipeline stage runs aa_gpt_stage_forward, not the whole model");
  if ((rc = check_tokens(m, inputs, targets))) return rc;
  if ((rc = op->upload(a->inputs, inputs, sizeof(int32_t) * N)) ||
      (targets && (rc = op->upload(a->targets, targets, sizeof(int32_t) * N))))
    return rc;
  outer_weights_t ow;
  if ((rc = pass_begin(m, &ow))) return rc;
  float *x = m->opts.amp != AA_F32 ? a->ws_res[1] : (float *)a->encoded;
  if ((rc = embed_forward(m, &ow, x)) || (rc = blocks_forward(m, 0, m->arch.n_layer, x, &x)) ||
      (rc = head_forward(m, &ow, x, targets != NULL)))
    return rc;
  if (targets && loss) *loss = m->loss;
  return 0;
}

/* The head's and the final LayerNorm's backward from the probabilities of
 * the last forward: their gradients, and the gradient of the last block's
 * output into acts->dres. */
static int head_backward(aa_gpt_t *m, const outer_weights_t *ow, float *g_wte, float grad_scale) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const int N = m->B * m->T, Ns = stream_tokens(m), C = m->d.C, Vl = m->d.Vl, L = m->arch.n_layer;
  const size_t NC = (size_t)N * C, NsC = (size_t)Ns * C;
  float *g_lnf;
  const float *in;
  int rc;
  if ((rc = unit_grads(m, L + 1, &g_lnf))) return rc;
  /* Mean loss over N tokens: every row's gradient carries 1/N. The
   * probabilities are turned into logit gradients in place. Under amp each
   * activation gradient is rounded like the activations (rnd). */
  op->xent_vocab_backward(a->logits, a->logits, a->targets, m->vocab_lo, m->vocab_valid, grad_scale / (float)N, N,
                          Vl);
  rnd(m, NULL, a->logits, (size_t)N * Vl);
  a->have_targets = 0; /* the probabilities are gone now */
  if ((rc = column_input(m, a->lnf, &in))) return rc;
  op->memset0(row_output(m, a->dln), NC * sizeof(float));
  /* gpt2's head is wte (unit 0's gradient); llama's is head.w, after lnf.w. */
  float *g_head = m->d.llama ? (g_lnf ? g_lnf + C : NULL) : g_wte;
  op->matmul_backward(row_output(m, a->dln), g_head, NULL, a->logits, in, ow->head, N, C, Vl);
  if ((rc = column_input_grad(m))) return rc;
  op->memset0(a->dres, NsC * sizeof(float));
  float *glnf = ln_grads(m, g_lnf, 0);
  norm_backward(m, a->dres, glnf, a->dln, block_input(m, L), ow->lnfw, a->lnf_stats, a->lnf_stats + Ns, Ns);
  rnd(m, NULL, a->dres, NsC);
  if ((rc = sum_ln_grads(m, (float *[]){g_lnf}, 1))) return rc;
  return grads_done(m, L + 1);
}

/* Blocks hi-1 down to lo backward, from d(block hi-1's output) in
 * acts->dres to d(block lo's input) there. */
static int blocks_backward(aa_gpt_t *m, int lo, int hi) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const int B = m->B, T = m->T, C = m->d.C, Cl = m->d.Cl, F = m->d.F, NH = m->d.NH;
  const int N = B * T, Ns = stream_tokens(m);
  const size_t NsC = (size_t)Ns * C, NCl = (size_t)N * Cl, NF_ = (size_t)N * F;
  const float *in, *dout;
  int rc;
  for (int l = hi - 1; l >= lo; l--) {
    block_view_t v;
    float *w, *gb;
    /* The weights before the gradient: ZeRO 3 gathers them through the
     * blocks' gradient slot, idle until the gradient is asked for. */
    if ((rc = block_weights(m, l, &w)) || (rc = unit_grads(m, AA_GPT_UNIT_BLOCK(l), &gb))) return rc;
    const float *x = block_input(m, l);
    if ((rc = block_restore(m, l, x, w, &v))) return rc;
    float **f = v.f, *st = v.stats;
#define G(k) role_at(m, gb, l, k)
    /* dres holds d(block output); the residual passes it through unchanged
     * to res2, and each branch's input gradient is accumulated onto it. A
     * row-parallel layer reads the whole output gradient. */
    if (aa_arch_is_moe_layer(&m->arch, l)) {
      /* The same on every tensor rank (block_forward); under sequence
       * parallelism from the gathered tokens and output gradient, the
       * rank's rows of the whole input gradient kept. */
      if (!m->sp) {
        if ((rc = moe_backward(m, l, a->dln, gb, a->dres, f[F_LN2], w))) return rc;
      } else {
        if ((rc = sp_gather(m, a->partial, a->dres)) || (rc = column_input(m, f[F_LN2], &in)) ||
            (rc = moe_backward(m, l, a->moe_dx, gb, a->partial, in, w)))
          return rc;
        op->rows_copy(a->dln, C, a->moe_dx + (size_t)m->tp_rank * NsC, C, Ns, C);
      }
      rnd(m, NULL, a->dln, NsC);
    } else {
      if ((rc = column_input(m, a->dres, &dout))) return rc;
      matmul_backward_set(m, a->dfch_gelu, G(FCPROJW), G(FCPROJB), dout, f[F_FCHG], WK(FCPROJW), N, F, C);
      lora_backward(m, l, AA_LORA_DOWN, a->dfch_gelu, dout, C, 0, f[F_FCHG]);
      lora_backward(m, l, AA_LORA_FCPROJ, a->dfch_gelu, dout, C, 0, f[F_FCHG]);
      rnd(m, NULL, a->dfch_gelu, NF_);
      const size_t NFH = (size_t)N * m->d.FH;
      /* fused: GELU's gradient and fc's bias gradient in one pass. */
      const int fuse = fused_gelu(m);
      if (fuse) {
        op->gelu_backward_bias(a->dfch, G(FCB), f[F_FCH], a->dfch_gelu, N, F);
      } else if (m->d.llama && op->swiglu_backward_set) {
        op->swiglu_backward_set(a->dfch, f[F_FCH], a->dfch_gelu, N, F);
      } else {
        op->memset0(a->dfch, NFH * sizeof(float));
        if (m->d.llama)
          op->swiglu_backward(a->dfch, f[F_FCH], a->dfch_gelu, N, F);
        else
          op->gelu_backward(a->dfch, f[F_FCH], a->dfch_gelu, NF_);
      }
      rnd(m, NULL, a->dfch, NFH);
      if ((rc = column_input(m, f[F_LN2], &in))) return rc;
      matmul_backward_set(m, row_output(m, a->dln), G(FCW), fuse ? NULL : G(FCB), a->dfch, in, WK(FCW), N, C,
                          m->d.FH);
      lora_backward(m, l, AA_LORA_GATE, row_output(m, a->dln), a->dfch, m->d.FH, 0, in);
      lora_backward(m, l, AA_LORA_UP, row_output(m, a->dln), a->dfch, m->d.FH, F, in);
      lora_backward(m, l, AA_LORA_FC, row_output(m, a->dln), a->dfch, m->d.FH, 0, in);
      if ((rc = column_input_grad(m))) return rc;
    }
    float *gln2 = ln_grads(m, G(LN2W), 0);
    norm_backward(m, a->dres, gln2, a->dln, f[F_RES2], WK(LN2W), st + S_LN2M * Ns, st + S_LN2R * Ns, Ns);
    rnd(m, NULL, a->dres, NsC);
    if ((rc = column_input(m, a->dres, &dout))) return rc;
    /* datty and dqkv share their storage with dfch and dfch_gelu
     * (sizes.h): the MLP's gradients are dead from here on. */
    matmul_backward_set(m, a->datty, G(PROJW), G(PROJB), dout, f[F_ATTY], WK(PROJW), N, Cl, C);
    lora_backward(m, l, AA_LORA_O, a->datty, dout, C, 0, f[F_ATTY]);
    lora_backward(m, l, AA_LORA_PROJ, a->datty, dout, C, 0, f[F_ATTY]);
    rnd(m, NULL, a->datty, NCl);
    const size_t NQ = (size_t)N * m->d.QKV;
    op->memset0(a->dqkv, NQ * sizeof(float));
    if (m->cp > 1) {
      if ((rc = ring_backward(m, a->dqkv, a->datty, f[F_QKV], f[F_ATTY], LSE(st, Ns)))) return rc;
    } else if (m->d.llama) {
      op->attention_gqa_backward(a->dqkv, a->datty, f[F_QKV], LSE(st, Ns), B, T, NH, m->d.NKV, m->d.HS);
    } else {
      op->attention_backward(a->dqkv, a->datty, f[F_QKV], LSE(st, Ns), B, T, Cl, NH);
    }
    if (m->d.llama) {
      rnd(m, NULL, a->dqkv, NQ);
      /* Back through the rotation: the gradient of the unrotated q and k. */
      rope(m, a->dqkv, 1);
    }
    rnd(m, NULL, a->dqkv, NQ);
    if ((rc = column_input(m, f[F_LN1], &in))) return rc;
    matmul_backward_set(m, row_output(m, a->dln), G(QKVW), G(QKVB), a->dqkv, in, WK(QKVW), N, C, m->d.QKV);
    lora_backward(m, l, AA_LORA_Q, row_output(m, a->dln), a->dqkv, m->d.QKV, 0, in);
    lora_backward(m, l, AA_LORA_K, row_output(m, a->dln), a->dqkv, m->d.QKV, Cl, in);
    lora_backward(m, l, AA_LORA_V, row_output(m, a->dln), a->dqkv, m->d.QKV, Cl + m->d.KVl, in);
    lora_backward(m, l, AA_LORA_QKV, row_output(m, a->dln), a->dqkv, m->d.QKV, 0, in);
    if ((rc = column_input_grad(m))) return rc;
    float *gln1 = ln_grads(m, G(LN1W), 2 * C);
    norm_backward(m, a->dres, gln1, a->dln, x, WK(LN1W), st + S_LN1M * Ns, st + S_LN1R * Ns, Ns);
    rnd(m, NULL, a->dres, NsC);
    if ((rc = sum_ln_grads(m, (float *[]){G(LN2W), G(LN1W)}, 2))) return rc;
#undef G
    if ((rc = grads_done(m, AA_GPT_UNIT_BLOCK(l)))) return rc;
  }
  return 0;
}

/* The embedding's gradient (into unit 0's, g_wte) from the whole residual
 * gradient in acts->dres: the rank's vocabulary rows, and the positions
 * (the same on every rank). */
static int embed_backward(aa_gpt_t *m, float *g_wte) {
  aa_acts_t *a = m->acts;
  if (m->arch.lora.r) return grads_done(m, 0); /* the frozen embedding: no gradient to compute */
  const float *dout;
  int rc;
  if ((rc = column_input(m, a->dres, &dout))) return rc;
  float *g_wpe = m->d.llama ? NULL : g_wte + m->tensors[1].offset; /* llama: no position table */
  if (m->cp == 1) {
    m->ops->encoder_backward_vocab(g_wte, g_wpe, dout, a->inputs, m->vocab_lo, m->vocab_valid, m->B, m->T,
                                   m->d.C);
  } else {
    int pos0[2], Tc = m->T / 2;
    aa_gpt_cp_positions(m->arch.seq_len, m->cp, m->cp_rank, pos0);
    for (int k = 0; k < 2; k++) {
      size_t rows = (size_t)k * m->B * Tc;
      m->ops->encoder_backward_vocab(g_wte, g_wpe ? g_wpe + (size_t)pos0[k] * m->d.C : NULL,
                                     dout + rows * m->d.C, a->inputs + rows, m->vocab_lo, m->vocab_valid,
                                     m->B, Tc, m->d.C);
    }
  }
  if ((rc = m->ops->sync()) || (rc = charge_scratch(m))) return rc;
  return grads_done(m, 0);
}

int aa_gpt_backward(aa_gpt_t *m, float grad_scale) {
  aa_acts_t *a = m->acts;
  if (m->pp > 1) return aa_error(AA_EINVAL, "a pipeline stage runs aa_gpt_stage_backward, not the whole model");
  if (!a->have_targets) return aa_error(AA_EINVAL, "backward needs a forward pass with targets");
  m->ops->set_gemm_inputs(m->opts.amp);
  m->moe_dloss = grad_scale;
  outer_weights_t ow;
  /* Asked for once: gpt2's tied head starts unit 0's gradient, the
   * embedding ends it. Llama's head is head.w, in lnf's unit, whose
   * gradient is reduced before the blocks: unit 0's is asked for after
   * them, so that ZeRO's scratch for the two can be one (sizes.h gslot).
   * The outer weights come first: ZeRO 3 gathers through a gradient slot. */
  float *g_wte = NULL;
  int rc;
  if ((rc = outer_weights(m, 0, &ow)) || (!m->d.llama && (rc = unit_grads(m, 0, &g_wte))) ||
      (rc = head_backward(m, &ow, g_wte, grad_scale)) || (rc = blocks_backward(m, 0, m->arch.n_layer)) ||
      (m->d.llama && (rc = unit_grads(m, 0, &g_wte))))
    return rc;
  return embed_backward(m, g_wte);
}

/* --- pipeline stages (model.h) ----------------------------------------------------------- */

static size_t slice64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

size_t aa_gpt_stream_numel(const aa_gpt_t *m) { return (size_t)stream_tokens(m) * m->d.C; }

void *aa_gpt_stage_input(aa_gpt_t *m, int in) {
  return (char *)m->acts->act_buf0 + (size_t)in * slice64(aa_gpt_stream_numel(m) * aa_dtype_size(m->opts.amp));
}

void *aa_gpt_send_buf(aa_gpt_t *m) { return m->acts->send; }

float *aa_gpt_grad_buf(aa_gpt_t *m, int gin) {
  return (float *)((char *)m->acts->grad_buf0 + (size_t)gin * slice64(aa_gpt_stream_numel(m) * sizeof(float)));
}

const float *aa_gpt_stage_dinput(const aa_gpt_t *m) { return m->acts->dres; }

/* Points the views at micro-batch (slot, in) of chunk c: the chunk's
 * blocks at the slot's kept buffers (the last block's output at the send
 * buffer), the chunk's input at input buffer in (and, on the first stage,
 * its tokens), the stash at the slot's, dres at the workspace's. */
static void stage_select(aa_gpt_t *m, int c, int slot, int in) {
  aa_acts_t *a = m->acts;
  char *base = (char *)a->store + (size_t)slot * a->slot_bytes;
  for (int l = m->pipe.lo[c]; l < m->pipe.hi[c]; l++) {
    for (int f = 0; f < NF; f++) a->blocks[l].f[f] = at(base, a->off[l].field[f]);
    a->blocks[l].stats = at(base, a->off[l].stats);
    a->blocks[l].moe = at(base, a->off[l].moe);
  }
  a->blocks[m->pipe.hi[c] - 1].f[F_RES3] = a->send;
  a->encoded = aa_gpt_stage_input(m, in);
  a->inputs = a->inputs_all + (m->pipe.first && c == 0 ? (size_t)in * m->B * m->T : 0);
  a->stash = m->pipe.last && c == m->pipe.vpp - 1 ? at(base, a->stash_off) : NULL;
  a->dres = a->dres_ws;
  m->moe_slot = slot;
}

static int stage_check(const aa_gpt_t *m, int c, int slot, int in) {
  if (m->pp == 1) return aa_error(AA_EINVAL, "a stage pass needs a pipeline-parallel model");
  if (c < 0 || c >= m->pipe.vpp || slot < 0 || slot >= m->pipe.slots || in < 0 || in >= m->pipe.act_bufs)
    return aa_error(AA_EINVAL, "stage pass: chunk %d slot %d input %d outside the rank's buffers", c, slot, in);
  return 0;
}

int aa_gpt_stage_forward(aa_gpt_t *m, int c, int slot, int in, const int32_t *inputs, const int32_t *targets,
                         int train, float grad_scale, float *loss) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const int N = m->B * m->T, first = c == 0 && m->pipe.first, last = c == m->pipe.vpp - 1 && m->pipe.last;
  int rc = stage_check(m, c, slot, in);
  if (rc || (rc = check_tokens(m, first ? inputs : NULL, last ? targets : NULL))) return rc;
  if (last && train && !targets) return aa_error(AA_EINVAL, "the last stage trains on targets");
  stage_select(m, c, slot, in);
  if ((first && (rc = op->upload(a->inputs, inputs, sizeof(int32_t) * N))) ||
      (last && targets && (rc = op->upload(a->targets, targets, sizeof(int32_t) * N))))
    return rc;
  outer_weights_t ow;
  if ((rc = pass_begin(m, &ow))) return rc;
  /* Every stage's MoE blocks add their aux and z losses to the training
   * loss: their backward scales them as the last stage's head does. */
  if (train) m->moe_dloss = grad_scale;
  const int lo = m->pipe.lo[c];
  float *x;
  if (first) {
    x = m->opts.amp != AA_F32 ? a->ws_res[(lo + 1) & 1] : (float *)a->encoded;
    rc = embed_forward(m, &ow, x);
  } else {
    x = (float *)block_input(m, lo);
  }
  if (rc || (rc = blocks_forward(m, lo, m->pipe.hi[c], x, &x))) return rc;
  if (!last) return (rc = op->sync()) ? rc : charge_scratch(m);
  if ((rc = head_forward(m, &ow, x, targets != NULL))) return rc;
  if (targets && loss) *loss = m->loss;
  if (!train) return 0;
  /* The head's backward now, into the slot's stash (the gradient of the
   * last block's output), which the chunk's backward starts from. */
  m->moe_dloss = grad_scale;
  float *g_wte = NULL; /* llama's last stage holds no wte: its head is head.w */
  a->dres = a->stash;
  if (!m->d.llama) rc = unit_grads(m, 0, &g_wte);
  if (!rc) rc = head_backward(m, &ow, g_wte, grad_scale);
  a->dres = a->dres_ws;
  if (!rc) rc = op->sync();
  return rc ? rc : charge_scratch(m);
}

int aa_gpt_stage_backward(aa_gpt_t *m, int c, int slot, int in, int gin) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  const int first = c == 0 && m->pipe.first, last = c == m->pipe.vpp - 1 && m->pipe.last;
  int rc = stage_check(m, c, slot, in);
  if (rc) return rc;
  if (!last && (gin < 0 || gin >= m->pipe.grad_bufs))
    return aa_error(AA_EINVAL, "stage backward: gradient buffer %d outside 0..%d", gin, m->pipe.grad_bufs - 1);
  stage_select(m, c, slot, in);
  op->set_gemm_inputs(m->opts.amp);
  /* The residual gradient runs in place in the buffer it arrived in. */
  a->dres = last ? a->stash : aa_gpt_grad_buf(m, gin);
  if ((rc = blocks_backward(m, m->pipe.lo[c], m->pipe.hi[c]))) return rc;
  if (first) {
    float *g_wte;
    if ((rc = unit_grads(m, 0, &g_wte)) || (rc = embed_backward(m, g_wte))) return rc;
  }
  if ((rc = op->sync())) return rc;
  return charge_scratch(m);
}

void aa_gpt_zero_grad(aa_gpt_t *m) {
  if (m->grads.data) m->ops->memset0(m->grads.data, m->grads.numel * aa_dtype_size(m->grads.dtype));
  aa_gpt_lora_zero_grad(m);
}

void aa_gpt_lora_zero_grad(aa_gpt_t *m) {
  if (m->lora_grads.data) m->ops->memset0(m->lora_grads.data, m->lora_grads.numel * sizeof(float));
}

const float *aa_gpt_logits(const aa_gpt_t *m) { return m->acts->logits; }

const aa_tensor_desc_t *aa_gpt_tensor(const aa_gpt_t *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
  return NULL;
}
