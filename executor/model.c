/* GPT-2 model on the backend op table: parameter table, activation
 * buffers, forward and backward. Kernels do the math; this file only wires
 * shapes and buffers, so it is the same for every backend. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Activations of one block, all (B,T,*) unless noted; kept for backward. */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd; /* (B,T,C), (B,T), (B,T) */
  float *qkv;                       /* (B,T,3C) */
  float *atty;                      /* (B,T,C) attention output before projection */
  float *att;                       /* (B,NH,T,T) softmax probabilities */
  float *res2;                      /* (B,T,C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu; /* (B,T,F) */
  float *res3;           /* (B,T,C) block output */
} block_acts_t;

struct aa_acts {
  float *base; /* the one allocation everything below points into */
  float *encoded; /* (B,T,C) */
  block_acts_t *blocks;
  float *lnf, *lnf_mean, *lnf_rstd;
  float *logits; /* (B,T,V); probabilities after a forward with targets */
  float *losses; /* (B,T) */
  /* Backward scratch, reused by every block (activation gradients are
   * consumed as soon as they are produced). */
  float *dres;  /* (B,T,C) gradient of the residual stream */
  float *dln;   /* (B,T,C) */
  float *dqkv;  /* (B,T,3C) */
  float *datty; /* (B,T,C) */
  float *dfch, *dfch_gelu; /* (B,T,F) */
  int32_t *inputs, *targets; /* (B,T) copies of the last batch */
  int have_targets;
};

static void add_tensor(aa_gpt_t *m, const char *name, int layer, int d0, int d1) {
  aa_tensor_desc_t *t = &m->tensors[m->n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->offset = m->n_params;
  t->ndim = d1 ? 2 : 1;
  t->shape[0] = d0;
  t->shape[1] = d1;
  t->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
  t->layer = layer;
  t->decay = t->ndim == 2;
  m->n_params += t->numel;
}

/* Fills the tensor table in the documented layer-major order. */
static void build_tensor_table(aa_gpt_t *m) {
  const aa_arch_t *a = &m->arch;
  int C = a->d_model, F = a->d_ff;
  char n[32];
  add_tensor(m, "wte", -1, a->vocab_size, C);
  add_tensor(m, "wpe", -1, a->seq_len, C);
  for (int l = 0; l < a->n_layer; l++) {
    static const char *names[AA_TENSORS_PER_LAYER] = {"ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b",
                                                      "ln2.w", "ln2.b", "fc.w", "fc.b", "fcproj.w", "fcproj.b"};
    const int shapes[AA_TENSORS_PER_LAYER][2] = {{C, 0}, {C, 0}, {3 * C, C}, {3 * C, 0}, {C, C}, {C, 0},
                                                 {C, 0}, {C, 0}, {F, C},     {F, 0},     {C, F}, {C, 0}};
    for (int i = 0; i < AA_TENSORS_PER_LAYER; i++) {
      snprintf(n, sizeof n, "h%d.%s", l, names[i]);
      add_tensor(m, n, l, shapes[i][0], shapes[i][1]);
    }
  }
  add_tensor(m, "lnf.w", -1, C, 0);
  add_tensor(m, "lnf.b", -1, C, 0);
}

/* Pointer to tensor i of a flat fp32 buffer. */
static float *tp(const aa_gpt_t *m, const aa_flatbuf_t *buf, int i) {
  return (float *)buf->data + m->tensors[i].offset;
}
/* Index of tensor k (0..11) of layer l. */
static int lt(int l, int k) { return 2 + l * AA_TENSORS_PER_LAYER + k; }
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB };

/* Carves every activation out of one allocation. Returns bytes needed when
 * base is NULL. */
static size_t carve_acts(aa_acts_t *a, float *base, const aa_arch_t *ar, int B, int T) {
  size_t C = ar->d_model, F = ar->d_ff, NH = ar->n_head, V = ar->vocab_size, N = (size_t)B * T;
  size_t off = 0;
#define TAKE(ptr, count)                                                                                    \
  do {                                                                                                      \
    if (base) (ptr) = base + off;                                                                           \
    off += ((size_t)(count) + 15) & ~(size_t)15; /* 64-byte aligned slices */                              \
  } while (0)
  TAKE(a->encoded, N * C);
  for (int l = 0; l < ar->n_layer; l++) {
    block_acts_t *b = &a->blocks[l];
    TAKE(b->ln1, N * C);
    TAKE(b->ln1_mean, N);
    TAKE(b->ln1_rstd, N);
    TAKE(b->qkv, N * 3 * C);
    TAKE(b->atty, N * C);
    TAKE(b->att, (size_t)B * NH * T * T);
    TAKE(b->res2, N * C);
    TAKE(b->ln2, N * C);
    TAKE(b->ln2_mean, N);
    TAKE(b->ln2_rstd, N);
    TAKE(b->fch, N * F);
    TAKE(b->fch_gelu, N * F);
    TAKE(b->res3, N * C);
  }
  TAKE(a->lnf, N * C);
  TAKE(a->lnf_mean, N);
  TAKE(a->lnf_rstd, N);
  TAKE(a->logits, N * V);
  TAKE(a->losses, N);
  TAKE(a->dres, N * C);
  TAKE(a->dln, N * C);
  TAKE(a->dqkv, N * 3 * C);
  TAKE(a->datty, N * C);
  TAKE(a->dfch, N * F);
  TAKE(a->dfch_gelu, N * F);
#undef TAKE
  return off * sizeof(float);
}

int aa_flatbuf_alloc(aa_flatbuf_t *b, size_t n) {
  b->dtype = AA_F32;
  b->numel = n;
  b->data = aligned_alloc(64, ((n * sizeof(float)) + 63) & ~(size_t)63);
  if (!b->data) return aa_error(AA_ENOMEM, "cannot allocate %zu parameters", n);
  memset(b->data, 0, n * sizeof(float));
  return 0;
}

int aa_gpt_create(aa_gpt_t **out, const aa_arch_t *arch, const aa_ops_t *ops, int B, int T) {
  int rc = aa_arch_validate(arch);
  if (rc) return rc;
  if (B < 1 || T < 1 || T > arch->seq_len)
    return aa_error(AA_EINVAL, "batch %d x sequence %d does not fit the model (seq_len %d)", B, T, arch->seq_len);
  aa_gpt_t *m = calloc(1, sizeof *m);
  if (!m) return aa_error(AA_ENOMEM, "out of memory");
  m->arch = *arch;
  m->ops = ops;
  m->B = B;
  m->T = T;
  m->tensors = calloc(2 + (size_t)arch->n_layer * AA_TENSORS_PER_LAYER + 2, sizeof *m->tensors);
  m->acts = calloc(1, sizeof *m->acts);
  if (!m->tensors || !m->acts) goto nomem;
  m->acts->blocks = calloc(arch->n_layer, sizeof *m->acts->blocks);
  m->acts->inputs = malloc(sizeof(int32_t) * B * T);
  m->acts->targets = malloc(sizeof(int32_t) * B * T);
  if (!m->acts->blocks || !m->acts->inputs || !m->acts->targets) goto nomem;
  build_tensor_table(m);
  if ((rc = aa_flatbuf_alloc(&m->params, m->n_params)) || (rc = aa_flatbuf_alloc(&m->grads, m->n_params))) goto fail;
  m->act_bytes = carve_acts(m->acts, NULL, arch, B, T);
  m->acts->base = aligned_alloc(64, m->act_bytes);
  if (!m->acts->base) {
    rc = aa_error(AA_ENOMEM, "cannot allocate %zu bytes of activations", m->act_bytes);
    goto fail;
  }
  memset(m->acts->base, 0, m->act_bytes);
  carve_acts(m->acts, m->acts->base, arch, B, T);
  m->targets = m->acts->targets;
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
  if (m->acts) {
    free(m->acts->base);
    free(m->acts->blocks);
    free(m->acts->inputs);
    free(m->acts->targets);
    free(m->acts);
  }
  free(m->params.data);
  free(m->grads.data);
  free(m->tensors);
  free(m);
}

void aa_gpt_init_weights(aa_gpt_t *m, uint64_t seed) {
  aa_rng_t rng;
  aa_rng_seed(&rng, seed);
  float resid_std = 0.02f / sqrtf(2.0f * (float)m->arch.n_layer);
  for (int i = 0; i < m->n_tensors; i++) {
    const aa_tensor_desc_t *t = &m->tensors[i];
    float *p = tp(m, &m->params, i);
    const char *kind = strchr(t->name, '.') ? strchr(t->name, '.') + 1 : t->name;
    if (t->ndim == 2) {
      float std = (!strcmp(kind, "proj.w") || !strcmp(kind, "fcproj.w")) ? resid_std : 0.02f;
      for (size_t j = 0; j < t->numel; j++) p[j] = std * aa_rng_normal(&rng);
    } else {
      /* LayerNorm gains start at 1; biases (including LayerNorm's) at 0. */
      float v = (!strcmp(kind, "ln1.w") || !strcmp(kind, "ln2.w") || !strcmp(t->name, "lnf.w")) ? 1.0f : 0.0f;
      for (size_t j = 0; j < t->numel; j++) p[j] = v;
    }
  }
}

int aa_gpt_forward(aa_gpt_t *m, const int32_t *inputs, const int32_t *targets, float *loss) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  int B = m->B, T = m->T, C = m->arch.d_model, F = m->arch.d_ff, NH = m->arch.n_head, V = m->arch.vocab_size;
  int N = B * T;
  for (int i = 0; i < N; i++) {
    if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
      return aa_error(AA_EINVAL, "token id out of range [0, %d) at position %d", V, i);
  }
  memcpy(a->inputs, inputs, sizeof(int32_t) * N);
  op->encoder_forward(a->encoded, inputs, tp(m, &m->params, 0), tp(m, &m->params, 1), B, T, C);
  const float *x = a->encoded;
  for (int l = 0; l < m->arch.n_layer; l++) {
    block_acts_t *b = &a->blocks[l];
#define W(k) tp(m, &m->params, lt(l, k))
    op->layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, x, W(LN1W), W(LN1B), N, C);
    op->matmul_forward(b->qkv, b->ln1, W(QKVW), W(QKVB), N, C, 3 * C);
    op->attention_forward(b->atty, b->att, b->qkv, B, T, C, NH);
    /* The projection output goes straight into res2, then x is added. */
    op->matmul_forward(b->res2, b->atty, W(PROJW), W(PROJB), N, C, C);
    op->residual_forward(b->res2, b->res2, x, (size_t)N * C);
    op->layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->res2, W(LN2W), W(LN2B), N, C);
    op->matmul_forward(b->fch, b->ln2, W(FCW), W(FCB), N, C, F);
    op->gelu_forward(b->fch_gelu, b->fch, (size_t)N * F);
    op->matmul_forward(b->res3, b->fch_gelu, W(FCPROJW), W(FCPROJB), N, F, C);
    op->residual_forward(b->res3, b->res3, b->res2, (size_t)N * C);
#undef W
    x = b->res3;
  }
  int lnf = m->n_tensors - 2;
  op->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, tp(m, &m->params, lnf), tp(m, &m->params, lnf + 1),
                        N, C);
  op->matmul_forward(a->logits, a->lnf, tp(m, &m->params, 0), NULL, N, C, V);
  a->have_targets = targets != NULL;
  if (!targets) return 0;
  memcpy(a->targets, targets, sizeof(int32_t) * N);
  op->crossentropy_forward(a->losses, a->logits, a->logits, targets, N, V);
  double sum = 0;
  for (int i = 0; i < N; i++) sum += a->losses[i];
  m->loss = (float)(sum / N);
  if (loss) *loss = m->loss;
  return 0;
}

int aa_gpt_backward(aa_gpt_t *m, float grad_scale) {
  const aa_ops_t *op = m->ops;
  aa_acts_t *a = m->acts;
  if (!a->have_targets) return aa_error(AA_EINVAL, "backward needs a forward pass with targets");
  int B = m->B, T = m->T, C = m->arch.d_model, F = m->arch.d_ff, NH = m->arch.n_head, V = m->arch.vocab_size;
  int N = B * T, L = m->arch.n_layer;
  size_t NC = (size_t)N * C, NF = (size_t)N * F;
  float *g_wte = tp(m, &m->grads, 0);
  /* Mean loss over N tokens: every row's gradient carries 1/N. The
   * probabilities are turned into logit gradients in place. */
  op->crossentropy_backward(a->logits, a->logits, a->targets, grad_scale / (float)N, N, V);
  a->have_targets = 0; /* the probabilities are gone now */
  memset(a->dln, 0, NC * sizeof(float));
  op->matmul_backward(a->dln, g_wte, NULL, a->logits, a->lnf, tp(m, &m->params, 0), N, C, V);
  int lnf = m->n_tensors - 2;
  const float *x_last = L ? a->blocks[L - 1].res3 : a->encoded;
  memset(a->dres, 0, NC * sizeof(float));
  op->layernorm_backward(a->dres, tp(m, &m->grads, lnf), tp(m, &m->grads, lnf + 1), a->dln, x_last,
                         tp(m, &m->params, lnf), a->lnf_mean, a->lnf_rstd, N, C);
  for (int l = L - 1; l >= 0; l--) {
    block_acts_t *b = &a->blocks[l];
    const float *x_in = l ? a->blocks[l - 1].res3 : a->encoded;
#define W(k) tp(m, &m->params, lt(l, k))
#define G(k) tp(m, &m->grads, lt(l, k))
    /* dres holds d(block output); the residual passes it through unchanged
     * to res2, and each branch's input gradient is accumulated onto it. */
    memset(a->dfch_gelu, 0, NF * sizeof(float));
    op->matmul_backward(a->dfch_gelu, G(FCPROJW), G(FCPROJB), a->dres, b->fch_gelu, W(FCPROJW), N, F, C);
    memset(a->dfch, 0, NF * sizeof(float));
    op->gelu_backward(a->dfch, b->fch, a->dfch_gelu, NF);
    memset(a->dln, 0, NC * sizeof(float));
    op->matmul_backward(a->dln, G(FCW), G(FCB), a->dfch, b->ln2, W(FCW), N, C, F);
    op->layernorm_backward(a->dres, G(LN2W), G(LN2B), a->dln, b->res2, W(LN2W), b->ln2_mean, b->ln2_rstd, N, C);
    memset(a->datty, 0, NC * sizeof(float));
    op->matmul_backward(a->datty, G(PROJW), G(PROJB), a->dres, b->atty, W(PROJW), N, C, C);
    memset(a->dqkv, 0, NC * 3 * sizeof(float));
    op->attention_backward(a->dqkv, a->datty, b->qkv, b->att, B, T, C, NH);
    memset(a->dln, 0, NC * sizeof(float));
    op->matmul_backward(a->dln, G(QKVW), G(QKVB), a->dqkv, b->ln1, W(QKVW), N, C, 3 * C);
    op->layernorm_backward(a->dres, G(LN1W), G(LN1B), a->dln, x_in, W(LN1W), b->ln1_mean, b->ln1_rstd, N, C);
#undef W
#undef G
  }
  op->encoder_backward(g_wte, tp(m, &m->grads, 1), a->dres, a->inputs, B, T, C);
  return 0;
}

void aa_gpt_zero_grad(aa_gpt_t *m) { memset(m->grads.data, 0, m->grads.numel * aa_dtype_size(m->grads.dtype)); }

const float *aa_gpt_logits(const aa_gpt_t *m) { return m->acts->logits; }

const aa_tensor_desc_t *aa_gpt_tensor(const aa_gpt_t *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
  return NULL;
}
