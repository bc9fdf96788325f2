/* Whole-model check of the float32 engine against a float64 PyTorch
 * reference, one fixture per model family (format in
 * tests/reference/README.md):
 *   gpt2   tests/reference/gpt_tiny.fixture, by make_fixture.py;
 *   llama  tests/reference/llama_tiny.fixture, by make_llama_fixture.py
 *          (RMSNorm, SwiGLU, rotate_half RoPE, grouped-query attention with
 *          4 query and 2 key/value heads, untied head), plus the import of
 *          the same weights under Hugging Face Llama's names
 *          (llama_tiny.safetensors);
 *   moe    tests/reference/llama_moe_tiny.fixture, by
 *          make_moe_llama_fixture.py: llama's with Mixtral's sparse MoE
 *          block (4 experts, top-2, one shared expert) in both layers, the
 *          loss with their aux and z losses;
 *   moe2   llama_moe2_tiny.fixture: the MoE block in layer 0 only (every
 *          2), no shared expert, a dense SwiGLU in layer 1;
 *   qwen   qwen_moe_tiny.fixture (make_moe_llama_fixture.py): Qwen2-MoE,
 *          moe2's shape with q/k/v biases in both layers (qkv_bias), two
 *          shared experts under Qwen-MoE's sigmoid gate (shared_expert_gate)
 *          and the chosen probabilities not renormalised (norm_topk_prob
 *          false).
 * The fixtures share the payload and the tolerances; only the header
 * (llama adds n_kv_head, rope_theta and norm_eps, moe the "moe" object's
 * fields), the tensor table and the import differ. The MoE fixtures' draws
 * keep every token's top-3 router logits at least 1e-3 apart in every
 * forward they make, so the engine's float32 routing is the reference's and
 * the tolerances bound the same rounding as llama's. Measured worst
 * error/tolerance on them: loss 0.12, logits 0.085, gradients 0.031
 * (h1.router.w), parameters after the five steps 0.003; leaving out the z
 * loss moves the loss to 4,800 times its tolerance.
 *
 * Every comparison uses |got - want| <= atol + rtol*|want| and reports, per
 * tensor, the largest absolute and relative error and the largest ratio
 * error/tolerance (the "headroom" left). Tolerances are stated where they are
 * used, with the reasoning; the reference is exact math on the float32
 * parameters, so every tolerance bounds float32 rounding in the engine only.
 *
 *   test_reference [llama|moe|moe2|qwen]  the CPU backend, on gpt2's fixture
 *                                (llama's with "llama", ctest
 *                                test_llama_reference; the MoE ones with
 *                                "moe", "moe2", ctest test_moe_reference)
 *   test_reference [llama|moe|moe2|qwen] cuda
 *                                the CUDA backend (device 0, fp32 GEMMs
 *                                without TF32), with the same tolerances:
 *                                the whole-model fixture check on the GPU
 *                                (ctest test_*_reference_cuda).
 *                                Skipped with the reason where there is no
 *                                CUDA build or GPU.
 * The model's buffers are reached through its op table (upload/download),
 * so one test body serves both. */
#include "aa_test.h"

#include "engine/import.h"
#include "engine/model.h"
#include "engine/optim.h"
#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define FIXTURE_MAGIC_GPT2 "AAFIXT01"
#define FIXTURE_MAGIC_LLAMA "AAFIXL01"
#define FIXTURE_MAGIC_MOE "AAFIXE01"
#define FIXTURE_MAGIC_QWEN "AAFIXQ01"
#define FIXTURE_MAX_BYTES (16 << 20)
#define FIXTURE_MAX_DIM 4096
#define FIXTURE_MAX_STEPS 100

typedef struct {
  aa_arch_t arch;
  int B, T, n_steps;
  float lr, beta1, beta2, eps, weight_decay, grad_clip;
  size_t n_params;
  int32_t *inputs, *targets; /* (B,T) */
  float *params, *logits, loss, *grads, *step_losses, *params_after;
  void *blob; /* owns everything above */
} fixture_t;

static fixture_t fx;          /* loaded by main before any test runs */
static int llama;             /* the fixture's family: llama, else gpt2 (main) */
static int moe;               /* llama with MoE layers: 1 every layer (moe), 2 every other (moe2, qwen) */
static int qwen;              /* moe2's header with Qwen2-MoE's two options after it */
static const aa_ops_t *ops;   /* the backend under test, chosen by main */
static char skip_reason[400]; /* non-empty: every test is skipped with it */

#define NEED_BACKEND()                                                                                      \
  do {                                                                                                      \
    if (skip_reason[0]) SKIP("%s", skip_reason);                                                            \
  } while (0)

/* n floats of backend memory src, copied to the host (caller frees). */
static float *to_host(const float *src, size_t n) {
  float *h = malloc(n * sizeof *h);
  if (!h) abort();
  CHECK_MSG(ops->download(h, src, n * sizeof *h) == 0, "download: %s", aa_last_error());
  return h;
}

/* Reads n bytes at *pos of buf (size len) into out; 0 if they are not all
 * there. */
static int take(void *out, const unsigned char *buf, size_t len, size_t *pos, size_t n) {
  if (n > len - *pos) return 0;
  memcpy(out, buf + *pos, n);
  *pos += n;
  return 1;
}

/* Loads the fixture at path into *f (which then owns its memory). Every
 * size is checked against the header before anything is allocated from it,
 * and the file must be exactly as long as the header implies. The host is
 * assumed little-endian like the file (x86-64, aarch64). */
static int fixture_load(fixture_t *f, const char *path) {
  int rc = AA_EFORMAT;
  unsigned char *buf = NULL;
  FILE *fp = fopen(path, "rb");
  if (!fp) return aa_error(AA_ENOENT, "%s: cannot open (set AA_SOURCE_DIR to the source tree)", path);
  long size = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
  if (size < 0 || size > FIXTURE_MAX_BYTES || fseek(fp, 0, SEEK_SET) != 0) {
    fclose(fp);
    return aa_error(AA_EFORMAT, "%s: unreadable or larger than %d bytes", path, FIXTURE_MAX_BYTES);
  }
  size_t len = (size_t)size;
  buf = malloc(len ? len : 1);
  if (!buf) {
    fclose(fp);
    return aa_error(AA_ENOMEM, "out of memory");
  }
  int short_read = fread(buf, 1, len, fp) != len;
  fclose(fp);
  if (short_read) {
    rc = aa_error(AA_EIO, "%s: short read", path);
    goto fail;
  }

  size_t pos = 0;
  char magic[8];
  int32_t dims[8], n_kv_head = 0, n_steps, moe_i[5] = {0}, qwen_i[3] = {0, 0, 1};
  float rope[2], hyper[6], moe_f[3] = {0};
  const char *want_magic = qwen    ? FIXTURE_MAGIC_QWEN
                           : moe   ? FIXTURE_MAGIC_MOE
                           : llama ? FIXTURE_MAGIC_LLAMA
                                   : FIXTURE_MAGIC_GPT2;
  if (!take(magic, buf, len, &pos, 8) || memcmp(magic, want_magic, 8) != 0) {
    aa_error(AA_EFORMAT, "%s: bad magic (want %s)", path, want_magic);
    goto fail;
  }
  if (!take(dims, buf, len, &pos, sizeof dims) ||
      (llama &&
       (!take(&n_kv_head, buf, len, &pos, sizeof n_kv_head) || !take(rope, buf, len, &pos, sizeof rope))) ||
      (moe && (!take(moe_i, buf, len, &pos, sizeof moe_i) || !take(moe_f, buf, len, &pos, sizeof moe_f))) ||
      (qwen && !take(qwen_i, buf, len, &pos, sizeof qwen_i)) || !take(hyper, buf, len, &pos, sizeof hyper) ||
      !take(&n_steps, buf, len, &pos, sizeof n_steps)) {
    aa_error(AA_EFORMAT, "%s: truncated header", path);
    goto fail;
  }
  for (int i = 0; i < 8; i++) {
    if (dims[i] < 1 || dims[i] > FIXTURE_MAX_DIM) {
      aa_error(AA_EFORMAT, "%s: header field %d = %d out of range 1..%d", path, i, dims[i], FIXTURE_MAX_DIM);
      goto fail;
    }
  }
  if (n_steps < 1 || n_steps > FIXTURE_MAX_STEPS) {
    aa_error(AA_EFORMAT, "%s: n_steps %d out of range", path, n_steps);
    goto fail;
  }
  memset(f, 0, sizeof *f);
  snprintf(f->arch.family, sizeof f->arch.family, "%s", llama ? "llama" : "gpt2");
  f->arch.n_layer = dims[0];
  f->arch.n_head = dims[1];
  f->arch.d_model = dims[2];
  f->arch.d_ff = dims[3];
  f->arch.seq_len = dims[4];
  f->arch.vocab_size = dims[5];
  f->B = dims[6];
  f->T = dims[7];
  if (llama) {
    f->arch.n_kv_head = n_kv_head;
    f->arch.rope_theta = rope[0];
    f->arch.norm_eps = rope[1];
  }
  if (moe) {
    aa_moe_t *mo = &f->arch.moe;
    *mo = (aa_moe_t){.experts = moe_i[0],
                     .top_k = moe_i[1],
                     .d_ff_expert = moe_i[2],
                     .shared_experts = moe_i[3],
                     .every = moe_i[4],
                     .aux_loss_coef = moe_f[0],
                     .z_loss_coef = moe_f[1],
                     .capacity_factor = moe_f[2],
                     .shared_expert_gate = qwen_i[1],
                     .topk_raw = !qwen_i[2]};
    f->arch.qkv_bias = qwen_i[0];
  }
  f->n_steps = n_steps;
  f->lr = hyper[0];
  f->beta1 = hyper[1];
  f->beta2 = hyper[2];
  f->eps = hyper[3];
  f->weight_decay = hyper[4];
  f->grad_clip = hyper[5];
  if ((llama && (n_kv_head < 1 || n_kv_head > FIXTURE_MAX_DIM)) || aa_arch_validate(&f->arch) != 0 ||
      f->T > f->arch.seq_len) {
    aa_error(AA_EFORMAT, "%s: invalid architecture in header", path);
    goto fail;
  }
  f->n_params = aa_arch_param_count(&f->arch);
  size_t N = (size_t)f->B * f->T, V = f->arch.vocab_size;
  size_t want = 2 * N * sizeof(int32_t) + (3 * f->n_params + N * V + 1 + (size_t)n_steps) * sizeof(float);
  if (len - pos != want) {
    aa_error(AA_EFORMAT, "%s: %zu payload bytes, header implies %zu", path, len - pos, want);
    goto fail;
  }
  /* Move the payload to the front of buf so the arrays are aligned. */
  memmove(buf, buf + pos, want);
  f->inputs = (int32_t *)buf;
  f->targets = f->inputs + N;
  for (size_t i = 0; i < 2 * N; i++) {
    if (f->inputs[i] < 0 || (size_t)f->inputs[i] >= V) {
      aa_error(AA_EFORMAT, "%s: token %d out of range", path, f->inputs[i]);
      goto fail;
    }
  }
  f->params = (float *)(f->targets + N);
  f->logits = f->params + f->n_params;
  f->loss = f->logits[N * V];
  f->grads = f->logits + N * V + 1;
  f->step_losses = f->grads + f->n_params;
  f->params_after = f->step_losses + n_steps;
  f->blob = buf;
  return 0;
fail:
  free(buf);
  return rc;
}

/* Largest errors of one comparison, and how close the worst came to failing. */
typedef struct {
  double max_abs, max_rel, worst; /* worst = max |got-want| / tol */
  size_t n_bad, worst_i;
} cmp_t;

/* Adds element i, allowed |got - want| <= atol + rtol*|want|. The relative
 * error is recorded only where |want| > atol: below that it measures how
 * close want is to zero, not the engine. */
static void cmp_add(cmp_t *c, size_t i, double got, double want, double atol, double rtol) {
  double err = fabs(got - want), tol = atol + rtol * fabs(want);
  double ratio = err / tol;
  if (err > c->max_abs) c->max_abs = err;
  if (fabs(want) > atol && err / fabs(want) > c->max_rel) c->max_rel = err / fabs(want);
  if (!(err <= tol)) c->n_bad++; /* also counts NaN */
  if (!(ratio <= c->worst)) {
    c->worst = ratio;
    c->worst_i = i;
  }
}

static void cmp_report(const char *what, const char *name, const cmp_t *c) {
  fprintf(stderr, "  %-8s %-12s max abs %.3e  max rel %.3e  err/tol %.3f%s\n", what, name, c->max_abs,
          c->max_rel, c->worst, c->n_bad ? "  <-- FAIL" : "");
}

/* A model holding the fixture's parameters. */
static aa_gpt_t *model_from_fixture(void) {
  aa_gpt_t *m = NULL;
  int rc = aa_gpt_create(&m, &fx.arch, ops, fx.B, fx.T, NULL);
  CHECK_MSG(rc == 0, "aa_gpt_create: %s", aa_last_error());
  if (rc) return NULL;
  CHECK(m->n_params == fx.n_params);
  if (m->n_params != fx.n_params) {
    aa_gpt_free(m);
    return NULL;
  }
  CHECK(ops->upload(m->params.data, fx.params, fx.n_params * sizeof(float)) == 0);
  aa_gpt_params_changed(m);
  return m;
}

/* Logits tolerance (reasoning at logits_match_pytorch). */
#define LOGITS_ATOL 1e-6
#define LOGITS_RTOL 1e-4

/* m's logits of a forward on the fixture's inputs without targets are the
 * fixture's, within the logits tolerance (reported under name). */
static void logits_match(aa_gpt_t *m, const char *name) {
  int rc = aa_gpt_forward(m, fx.inputs, NULL, NULL);
  CHECK_MSG(rc == 0, "forward: %s", aa_last_error());
  size_t n = (size_t)fx.B * fx.T * fx.arch.vocab_size;
  float *logits = to_host(aa_gpt_logits(m), n);
  cmp_t c = {0};
  for (size_t i = 0; i < n; i++)
    cmp_add(&c, i, logits[i], fx.logits[i], LOGITS_ATOL, LOGITS_RTOL);
  cmp_report("logits", name, &c);
  CHECK_MSG(c.n_bad == 0, "%zu of %zu logits differ; worst at %zu: %.9g vs %.9g", c.n_bad, n, c.worst_i,
            logits[c.worst_i], fx.logits[c.worst_i]);
  free(logits);
}

/* Gradient tolerance: atol is this fraction of the tensor's largest
 * reference gradient, plus GRAD_RTOL relative (reasoning at
 * grads_match_pytorch). */
#define GRAD_ATOL_OF_TENSOR_MAX 2e-5
#define GRAD_RTOL 1e-4

static double tensor_absmax(const float *x, size_t n) {
  double mx = 0;
  for (size_t j = 0; j < n; j++)
    if (fabs(x[j]) > mx) mx = fabs(x[j]);
  return mx;
}

/* gpt2's tensor table: wte, wpe, 12 tensors a block, lnf; names, order and
 * offsets. */
static void gpt2_layout(const aa_gpt_t *m) {
  static const char *kinds[AA_TENSORS_PER_LAYER] = {"ln1.w",  "ln1.b",  "qkv.w",    "qkv.b",
                                                    "proj.w", "proj.b", "ln2.w",    "ln2.b",
                                                    "fc.w",   "fc.b",   "fcproj.w", "fcproj.b"};
  CHECK(m->n_tensors == 2 + AA_TENSORS_PER_LAYER * fx.arch.n_layer + 2);
  size_t off = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    char want[32];
    int l = (i - 2) / AA_TENSORS_PER_LAYER;
    if (i == 0)
      snprintf(want, sizeof want, "wte");
    else if (i == 1)
      snprintf(want, sizeof want, "wpe");
    else if (i == m->n_tensors - 2)
      snprintf(want, sizeof want, "lnf.w");
    else if (i == m->n_tensors - 1)
      snprintf(want, sizeof want, "lnf.b");
    else
      snprintf(want, sizeof want, "h%d.%s", l, kinds[(i - 2) % AA_TENSORS_PER_LAYER]);
    CHECK_MSG(strcmp(m->tensors[i].name, want) == 0, "tensor %d is %s, want %s", i, m->tensors[i].name, want);
    CHECK_MSG(m->tensors[i].offset == off, "%s at offset %zu, want %zu", want, m->tensors[i].offset, off);
    off += m->tensors[i].numel;
  }
  CHECK(off == fx.n_params);
}

/* llama's tensor table: wte, 9 tensors a block, lnf, the untied head;
 * names, order, offsets, shapes and which decay. */
static void llama_layout(const aa_gpt_t *m) {
  static const char *kinds[] = {"ln1.w", "q.w", "k.w", "v.w", "proj.w", "ln2.w", "gate.w", "up.w", "down.w"};
  const int per = (int)(sizeof kinds / sizeof kinds[0]);
  const int C = fx.arch.d_model, F = fx.arch.d_ff, V = fx.arch.vocab_size;
  const int hs = C / fx.arch.n_head, KV = fx.arch.n_kv_head * hs;
  const int rows[] = {C, C, KV, KV, C, C, F, F, C}, cols[] = {0, C, C, C, C, 0, C, C, F};
  CHECK(m->n_tensors == 1 + per * fx.arch.n_layer + 2);
  size_t off = 0;
  for (int i = 0; i < m->n_tensors; i++) {
    char want[32];
    int k = (i - 1) % per, r = V, c = C;
    if (i == 0) {
      snprintf(want, sizeof want, "wte");
    } else if (i == m->n_tensors - 2) {
      snprintf(want, sizeof want, "lnf.w");
      c = 0;
      r = C;
    } else if (i == m->n_tensors - 1) {
      snprintf(want, sizeof want, "head.w");
    } else {
      snprintf(want, sizeof want, "h%d.%s", (i - 1) / per, kinds[k]);
      r = rows[k];
      c = cols[k];
    }
    const aa_tensor_desc_t *t = &m->tensors[i];
    CHECK_MSG(strcmp(t->name, want) == 0, "tensor %d is %s, want %s", i, t->name, want);
    CHECK_MSG(t->offset == off, "%s at offset %zu, want %zu", want, t->offset, off);
    CHECK_MSG(t->ndim == (c ? 2 : 1) && t->shape[0] == r && (!c || t->shape[1] == c),
              "%s has shape [%d, %d], want [%d, %d]", want, t->shape[0], t->ndim > 1 ? t->shape[1] : 0, r, c);
    CHECK_MSG(t->decay == (c != 0), "%s: decay %d", want, t->decay);
    off += t->numel;
  }
  CHECK(off == fx.n_params);
}

/* The MoE llama's tensor table: llama's, with an MoE layer's router.w,
 * experts.w13, experts.w2 (and shared.w13, shared.w2) in place of gate.w,
 * up.w, down.w; names, order, offsets, shapes, decay and units. */
static void moe_layout(const aa_gpt_t *m) {
  const aa_arch_t *a = &fx.arch;
  const int C = a->d_model, F = a->d_ff, E = a->moe.experts, Fe = a->moe.d_ff_expert,
            S = a->moe.shared_experts;
  const int KV = a->n_kv_head * (C / a->n_head), QB = a->qkv_bias ? 3 : 0, NA = 6 + QB;
  typedef struct {
    const char *kind;
    int r, c;
  } want_t;
  const want_t attn[] = {{"ln1.w", C, 0}, {"q.w", C, C},  {"k.w", KV, C},   {"v.w", KV, C}, {"q.b", C, 0},
                         {"k.b", KV, 0},  {"v.b", KV, 0}, {"proj.w", C, C}, {"ln2.w", C, 0}};
  const want_t dense[] = {{"gate.w", F, C}, {"up.w", F, C}, {"down.w", C, F}};
  const want_t experts[] = {{"router.w", E, C},        {"experts.w13", E * 2 * Fe, C},
                            {"experts.w2", E * C, Fe}, {"shared.w13", S * 2 * Fe, C},
                            {"shared.w2", S * C, Fe},  {"shared.gate", 1, C}};
  int i = 1;
  size_t off = m->tensors[0].numel;
  CHECK(strcmp(m->tensors[0].name, "wte") == 0);
  for (int l = 0; l < a->n_layer; l++) {
    const int is_moe = aa_arch_is_moe_layer(a, l);
    const int n_mlp = is_moe ? (S ? 5 + (a->moe.shared_expert_gate ? 1 : 0) : 3) : 3;
    size_t unit_off, unit_n, sum = 0;
    aa_gpt_unit(m, AA_GPT_UNIT_BLOCK(l), &unit_off, &unit_n);
    CHECK_MSG(unit_off == off, "block %d's unit at %zu, want %zu", l, unit_off, off);
    for (int k = 0; k < NA + n_mlp && i < m->n_tensors; k++, i++) {
      /* Without biases the attention half skips q.b, k.b and v.b. */
      const want_t *w = k < NA   ? &attn[k + (!QB && k >= 4 ? 3 : 0)]
                        : is_moe ? &experts[k - NA]
                                 : &dense[k - NA];
      const aa_tensor_desc_t *t = &m->tensors[i];
      char want[32];
      snprintf(want, sizeof want, "h%d.%s", l, w->kind);
      CHECK_MSG(strcmp(t->name, want) == 0, "tensor %d is %s, want %s", i, t->name, want);
      CHECK_MSG(t->offset == off, "%s at offset %zu, want %zu", want, t->offset, off);
      CHECK_MSG(t->ndim == (w->c ? 2 : 1) && t->shape[0] == w->r && (!w->c || t->shape[1] == w->c),
                "%s has shape [%d, %d], want [%d, %d]", want, t->shape[0], t->ndim > 1 ? t->shape[1] : 0,
                w->r, w->c);
      CHECK_MSG(t->decay == (w->c != 0) && t->unit == AA_GPT_UNIT_BLOCK(l), "%s: decay %d unit %d", want,
                t->decay, t->unit);
      off += t->numel;
      sum += t->numel;
    }
    CHECK_MSG(sum == unit_n && unit_n == aa_sizes_unit_numel(a, 1, AA_GPT_UNIT_BLOCK(l)),
              "block %d: %zu elements, unit %zu, sizes.h %zu", l, sum, unit_n,
              aa_sizes_unit_numel(a, 1, AA_GPT_UNIT_BLOCK(l)));
  }
  CHECK(i == m->n_tensors - 2 && m->n_tensors == aa_gpt_n_tensors(a));
  CHECK(strcmp(m->tensors[i].name, "lnf.w") == 0 && strcmp(m->tensors[i + 1].name, "head.w") == 0);
  CHECK(off + m->tensors[i].numel + m->tensors[i + 1].numel == fx.n_params);
}

/* The fixture's tensor layout is the one the engine builds: same names in
 * the same order, contiguous, summing to the fixture's parameter count. The
 * other checks index the fixture by m->tensors, so they rely on this. */
AA_TEST(tensor_table_matches_fixture_layout) {
  aa_gpt_t *m = model_from_fixture();
  if (!m) return;
  if (moe)
    moe_layout(m);
  else if (llama)
    llama_layout(m);
  else
    gpt2_layout(m);
  aa_gpt_free(m);
}

/* Hugging Face Llama's names for the fixture's initial weights
 * (llama_tiny.safetensors) import to exactly the fixture's parameters, and
 * the imported model's logits are the fixture's (the tolerance of
 * logits_match_pytorch): q_proj and k_proj need no permutation for the
 * engine's rotate_half RoPE. */
AA_TEST(imported_safetensors_give_the_fixture_logits) {
  NEED_BACKEND();
  aa_gpt_t *m = NULL;
  int rc = aa_gpt_create(&m, &fx.arch, ops, fx.B, fx.T, NULL);
  CHECK_MSG(rc == 0, "aa_gpt_create: %s", aa_last_error());
  if (rc) return;
  const char *dir = getenv("AA_SOURCE_DIR");
  char path[AA_PATH_MAX];
  snprintf(path, sizeof path, "%s/tests/reference/llama_tiny.safetensors", dir && *dir ? dir : ".");
  rc = aa_import_weights(m, path, NULL);
  CHECK_MSG(rc == 0, "import: %s", aa_last_error());
  float *p = to_host(m->params.data, m->n_params);
  CHECK(m->n_params == fx.n_params && !memcmp(p, fx.params, fx.n_params * sizeof(float)));
  free(p);
  logits_match(m, "imported");
  aa_gpt_free(m);
}

/* The mean cross-entropy. It is a mean of B*T per-token losses of about
 * log(V) ~ 3.1 (gpt2; llama 3.4), each a log-sum-exp of V float32 logits: a
 * few float32 ulps (2.4e-7 at 3.1) of rounding, plus the logits' own error
 * (<= 1e-6, see below) which moves the loss by at most that much. atol 2e-6
 * is about 8 ulps; float32 PyTorch on llama's weights is off by 1.1e-7. For
 * scale: in gpt2, computing GELU with erf instead of tanh moves this loss
 * by 4e-6 and LayerNorm eps 1e-6 instead of 1e-5 by 4e-5; in llama
 * (make_llama_fixture.py's model with one change), norm_eps 1e-6 instead
 * of 1e-5 by 2e-4, rope_theta 500000 by 9e-5, GELU for SiLU by 3e-3, RoPE's
 * interleaved pairing by 4e-2 and the wrong key/value head for a query head
 * (h % NKV, not h / (NH/NKV)) by 0.13. */
AA_TEST(loss_matches_pytorch) {
  NEED_BACKEND();
  aa_gpt_t *m = model_from_fixture();
  if (!m) return;
  float loss = 0;
  int rc = aa_gpt_forward(m, fx.inputs, fx.targets, &loss);
  CHECK_MSG(rc == 0, "forward: %s", aa_last_error());
  cmp_t c = {0};
  cmp_add(&c, 0, loss, fx.loss, 2e-6, 0);
  cmp_report("loss", "", &c);
  CHECK_MSG(c.n_bad == 0, "loss %.9g, reference %.9g", loss, fx.loss);
  CHECK(m->loss == loss);
  aa_gpt_free(m);
}

/* Logits (B,T,V) of a forward without targets.
 *
 * gpt2: each logit is a dot product of the final LayerNorm output (entries
 * O(1)) with a wte row (entries O(0.02)) over C terms; its float32 error is
 * dominated by the relative error the residual stream carries out of 2
 * blocks of K<=3C-term matmuls, LayerNorms and attention, ~ sqrt(K)*2^-24
 * per op, a few 1e-7 in all, times |logit| <= 0.3. So atol 1e-6 and rtol
 * 1e-4 leave 20x or more of headroom, while GELU with erf instead of tanh
 * moves the logits by 5e-5 (20x the tolerance) and LayerNorm eps 1e-6
 * instead of 1e-5 by 2e-3.
 *
 * llama: the final RMSNorm output (entries O(1)) with a head row (entries
 * O(0.15)) over C terms, |logit| <= 2, after blocks of K<=F-term matmuls,
 * RMSNorms, RoPE and attention. float32 PyTorch on the same weights is off
 * by at most 3.3e-7 (at a logit near zero, where atol 1e-6 holds: 3x
 * headroom; the large logits have rtol 1e-4, 2e-4 at |logit| 2). The
 * changes listed at loss_matches_pytorch move the logits by 9e-3
 * (rope_theta) to 1.6 (GQA mapping), 45x the tolerance or more. */
AA_TEST(logits_match_pytorch) {
  NEED_BACKEND();
  aa_gpt_t *m = model_from_fixture();
  if (!m) return;
  logits_match(m, "");
  aa_gpt_free(m);
}

/* Every parameter gradient, tensor by tensor. A gradient element is a sum
 * over B*T positions of products pushed back through softmax, the norms
 * (LayerNorm, RMSNorm) and the MLP's nonlinearity (GELU, SwiGLU) backward,
 * whose formulas subtract nearly equal terms (LayerNorm dx = rstd*(g -
 * mean(g) - xhat*mean(g*xhat)), RMSNorm dx = rstd*(g*w -
 * xhat*mean(g*w*xhat)), dscore = p*(dp - sum p*dp)). So its rounding error
 * scales with the size of the terms, not with the element: an element that
 * cancels to ~0 keeps an absolute error of ~1e-7 of its tensor's largest
 * gradient (float32 PyTorch shows up to 8e-7 on gpt2's weights, 6.9e-7 on
 * llama's, in h0.ln1.w). Hence atol = 2e-5 * max|grad| of the tensor (25x
 * headroom, 29x for llama) plus rtol 1e-4 for the large elements. gpt2's
 * key bias (qkv.b rows C..2C-1) has an exactly zero gradient (softmax
 * ignores a constant added to all scores) and only tests atol; llama has
 * no biases. */
AA_TEST(grads_match_pytorch) {
  NEED_BACKEND();
  aa_gpt_t *m = model_from_fixture();
  if (!m) return;
  aa_gpt_zero_grad(m);
  int rc = aa_gpt_forward(m, fx.inputs, fx.targets, NULL);
  CHECK_MSG(rc == 0, "forward: %s", aa_last_error());
  rc = aa_gpt_backward(m, 1.0f);
  CHECK_MSG(rc == 0, "backward: %s", aa_last_error());
  float *g = to_host(m->grads.data, m->n_params);
  for (int t = 0; t < m->n_tensors; t++) {
    const aa_tensor_desc_t *d = &m->tensors[t];
    const float *want = fx.grads + d->offset, *got = g + d->offset;
    double atol = GRAD_ATOL_OF_TENSOR_MAX * tensor_absmax(want, d->numel);
    cmp_t c = {0};
    for (size_t j = 0; j < d->numel; j++)
      cmp_add(&c, j, got[j], want[j], atol, GRAD_RTOL);
    cmp_report("grad", d->name, &c);
    CHECK_MSG(c.n_bad == 0, "%s: %zu of %zu elements differ; worst [%zu]: %.9g vs %.9g", d->name, c.n_bad,
              d->numel, c.worst_i, got[c.worst_i], want[c.worst_i]);
  }
  free(g);
  aa_gpt_free(m);
}

/* Five AdamW steps on the same batch (constant lr, clipping at grad_clip):
 * the loss before each step, the global gradient norm of the first step, and
 * the parameters after the last.
 *
 * Step losses: atol 1e-5 + rtol 1e-5 (~4e-5 at a loss of 3). The
 * parameters that move the loss carry float32 errors of ~1e-6 at most (the
 * key bias, which drifts most, cannot change the loss at all), far below
 * that; a missing clip, decay on every tensor or no decay move these losses
 * by ~1e-3, and Adam eps 1e-6 instead of 1e-8 by 4e-5. Both fixtures have
 * the same optimizer settings; every step of llama's clips (gradient norms
 * 4.5, 6.3, 2.9, 2.6, 1.8).
 *
 * Parameters after: AdamW's update lr*m^/(sqrt(v^)+eps) is invariant to the
 * gradient's scale, so it is not a smooth function of the gradient where the
 * gradient is small: a gradient error delta moves an update by about
 * lr*delta/(sqrt(v^)+eps), and over these steps sqrt(v^) >= ~0.4|g0| (g0 the
 * first-step gradient), so by <= ~lr*8*delta/(|g0|+eps) per step, and never
 * by more than 2*lr (each side moves at most ~lr). With delta the gradient
 * tolerance above, the allowance is
 *   n_steps * lr * min(2, 8*gtol/(|g0|+eps))  +  1e-6 + 1e-5*|p|,
 * the last two for float32 rounding of p itself. The median element gets
 * 1.3e-4 (gpt2; ~1e-4 llama; float32 errors are ~1e-7..1e-6); it grows
 * towards 2*n_steps*lr only where the gradient is near the float32 noise
 * floor (elements that cancel), like gpt2's key bias, whose float32
 * "gradient" of ~1e-9 AdamW turns into moves of ~1e-3 that the exact
 * reference does not make. The count of such elements is
 * printed. A missing clip, decay on every tensor, or Adam eps 1e-6 each
 * exceed this allowance by 2-100x. */
AA_TEST(adamw_steps_match_pytorch) {
  NEED_BACKEND();
  aa_gpt_t *m = model_from_fixture();
  if (!m) return;
  aa_adamw_t opt;
  int rc = aa_adamw_init(&opt, m->n_params, NULL);
  CHECK_MSG(rc == 0, "aa_adamw_init: %s", aa_last_error());
  if (rc) {
    aa_gpt_free(m);
    return;
  }
  aa_train_cfg_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.lr = fx.lr;
  cfg.min_lr = fx.lr;
  cfg.schedule = AA_SCHED_CONSTANT;
  cfg.beta1 = fx.beta1;
  cfg.beta2 = fx.beta2;
  cfg.eps = fx.eps;
  cfg.weight_decay = fx.weight_decay;
  cfg.grad_clip = fx.grad_clip;

  double ref_norm = 0; /* on the host: fx.grads is host memory */
  for (size_t j = 0; j < fx.n_params; j++)
    ref_norm += (double)fx.grads[j] * fx.grads[j];
  ref_norm = sqrt(ref_norm);
  cmp_t cl = {0};
  for (int k = 0; k < fx.n_steps; k++) {
    float loss = 0, norm = 0;
    aa_gpt_zero_grad(m);
    rc = aa_gpt_forward(m, fx.inputs, fx.targets, &loss);
    CHECK_MSG(rc == 0, "step %d forward: %s", k, aa_last_error());
    rc = aa_gpt_backward(m, 1.0f);
    CHECK_MSG(rc == 0, "step %d backward: %s", k, aa_last_error());
    rc = aa_adamw_step(&opt, m, &cfg, fx.lr, 1.0, 0, &norm);
    CHECK_MSG(rc == 0, "step %d aa_adamw_step: %s", k, aa_last_error());
    cmp_add(&cl, (size_t)k, loss, fx.step_losses[k], 1e-5, 1e-5);
    fprintf(stderr, "  step %d  loss %.7f (reference %.7f)  grad norm %.5f\n", k, loss, fx.step_losses[k],
            norm);
    if (k == 0) {
      /* The first step must clip, or the clip path goes untested. */
      CHECK_NEAR(norm, ref_norm, 1e-5 * ref_norm);
      CHECK_MSG(norm > fx.grad_clip, "grad norm %g does not exceed grad_clip %g", norm, fx.grad_clip);
    }
  }
  cmp_report("loss", "steps", &cl);
  CHECK_MSG(cl.n_bad == 0, "step %zu loss differs", cl.worst_i);
  CHECK(opt.t == fx.n_steps);

  float *p = to_host(m->params.data, m->n_params);
  size_t n_loose = 0;
  for (int t = 0; t < m->n_tensors; t++) {
    const aa_tensor_desc_t *d = &m->tensors[t];
    const float *want = fx.params_after + d->offset, *got = p + d->offset, *g0 = fx.grads + d->offset;
    double gatol = GRAD_ATOL_OF_TENSOR_MAX * tensor_absmax(g0, d->numel);
    cmp_t c = {0};
    for (size_t j = 0; j < d->numel; j++) {
      double gtol = gatol + GRAD_RTOL * fabs(g0[j]);
      double sens = fmin(2.0, 8.0 * gtol / (fabs(g0[j]) + fx.eps));
      double atol = fx.n_steps * fx.lr * sens + 1e-6;
      if (atol > 1e-3) n_loose++;
      cmp_add(&c, j, got[j], want[j], atol, 1e-5);
    }
    cmp_report("param", d->name, &c);
    CHECK_MSG(c.n_bad == 0, "%s: %zu of %zu elements differ; worst [%zu]: %.9g vs %.9g", d->name, c.n_bad,
              d->numel, c.worst_i, got[c.worst_i], want[c.worst_i]);
  }
  fprintf(stderr, "  %zu of %zu parameters have small first-step gradients and a tolerance > 1e-3\n", n_loose,
          fx.n_params);
  free(p);
  aa_adamw_free(&opt);
  aa_gpt_free(m);
}

int main(int argc, char **argv) {
  ops = aa_ops_cpu();
  int a = 1;
  if (a < argc && !strcmp(argv[a], "llama")) {
    llama = 1;
    a++;
  } else if (a < argc && (!strcmp(argv[a], "moe") || !strcmp(argv[a], "moe2"))) {
    llama = 1;
    moe = argv[a][3] == '2' ? 2 : 1;
    a++;
  } else if (a < argc && !strcmp(argv[a], "qwen")) {
    llama = qwen = 1;
    moe = 2;
    a++;
  }
  if (a < argc && !strcmp(argv[a], "cuda")) {
#ifdef AA_HAVE_CUDA
    int n = 0;
    if (aa_cuda_device_count(&n) || n < 1 || aa_cuda_init(0))
      snprintf(skip_reason, sizeof skip_reason, "no GPU: %s", aa_last_error());
    else
      ops = aa_ops_cuda();
#else
    snprintf(skip_reason, sizeof skip_reason, "no GPU: built without CUDA (AUTOACCEL_CUDA=off or no nvcc)");
#endif
    a++;
  }
  if (a < argc) {
    fprintf(stderr, "usage: test_reference [llama|moe|moe2|qwen] [cuda]\n");
    return 2;
  }
  const char *dir = getenv("AA_SOURCE_DIR");
  char path[AA_PATH_MAX];
  snprintf(path, sizeof path, "%s/tests/reference/%s_tiny.fixture", dir && *dir ? dir : ".",
           qwen       ? "qwen_moe"
           : moe == 2 ? "llama_moe2"
           : moe      ? "llama_moe"
           : llama    ? "llama"
                      : "gpt");
  int rc = fixture_load(&fx, path);
  if (rc) {
    fprintf(stderr, "cannot load the reference fixture: %s\n", aa_last_error());
    return 1;
  }
  RUN(tensor_table_matches_fixture_layout);
  if (llama && !moe) RUN(imported_safetensors_give_the_fixture_logits);
  RUN(loss_matches_pytorch);
  RUN(logits_match_pytorch);
  RUN(grads_match_pytorch);
  RUN(adamw_steps_match_pytorch);
  free(fx.blob);
#ifdef AA_HAVE_CUDA
  if (ops != aa_ops_cpu()) aa_cuda_shutdown();
#endif
  return aa_test_summary();
}
