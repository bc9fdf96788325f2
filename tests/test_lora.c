/* LoRA fine-tuning in the engine (issue 36; model.h aa_gpt_lora_offset,
 * lora.h): against tests/reference/lora_tiny.fixture (make_lora_fixture.py:
 * PEFT's LoRA math in float64 on llama_tiny's base, B non-zero so that A's
 * gradient is checked too) the logits, the loss, the adapters' gradients,
 * five AdamW steps over the adapters (clipped), and the base bit-identical
 * after them; the allocations equal the cost model's to the byte; on gpt2,
 * B = 0 gives the base's logits exactly and the gradient matches a central
 * difference; bf16 holds the base in 16 bits only.
 *
 * Tolerances are test_reference.c's, for the same reason: the reference is
 * float64 on float32-representable inputs, so they bound the engine's
 * float32 rounding only (logits atol 1e-6 + rtol 1e-4; gradients 2e-5 of
 * the tensor's largest plus rtol 1e-4; step losses 1e-5; the adapters after
 * the steps n_steps lr times the sensitivity of AdamW's normalised update
 * to the gradient's error). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_lora_fixture.h"
#include "aa_test.h"
#include "common/mem.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "strategies/cost.h"
#include "strategies/sizes.h"

typedef struct {
  aa_arch_t arch;
  int B, T, n_steps;
  float lr, beta1, beta2, eps, wd, clip;
  int32_t *inputs, *targets;
  float *base, *adapters, *logits, loss, *grads, *step_losses, *after;
  size_t n_base, n_ad;
  void *blob;
} fixture_t;

static fixture_t fx;

static int load(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n);
  if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(b);
    return -1;
  }
  fclose(f);
  if (n < 8 + AA_LORA_FIXTURE_HEADER + 28 || memcmp(b, "AAFIXR01", 8)) return free(b), -1;
  const char *p = aa_lora_fixture_header(b + 8, &fx.arch, &fx.B, &fx.T);
  int32_t steps;
  float opt[6];
  memcpy(opt, p, 24), p += 24;
  memcpy(&steps, p, 4), p += 4;
  const aa_arch_t *a = &fx.arch;
  fx.n_steps = steps;
  fx.lr = opt[0], fx.beta1 = opt[1], fx.beta2 = opt[2], fx.eps = opt[3], fx.wd = opt[4], fx.clip = opt[5];
  const size_t N = (size_t)fx.B * fx.T;
  fx.n_base = aa_arch_param_count(a);
  fx.n_ad = (size_t)a->n_layer * aa_lora_block_numel(a, 1);
  size_t want = (size_t)(p - b) + 8 * N + 4 * (fx.n_base + 3 * fx.n_ad + N * a->vocab_size + 1 + steps);
  if ((size_t)n != want) return free(b), -2;
  fx.inputs = (int32_t *)p, fx.targets = fx.inputs + N;
  float *q = (float *)(fx.targets + N);
  fx.base = q, q += fx.n_base;
  fx.adapters = q, q += fx.n_ad;
  fx.logits = q, q += N * a->vocab_size;
  fx.loss = *q++;
  fx.grads = q, q += fx.n_ad;
  fx.step_losses = q, q += steps;
  fx.after = q;
  fx.blob = b;
  return 0;
}

static aa_gpt_t *model(aa_mem_t *mem) {
  aa_gpt_t *m = NULL;
  aa_gpt_opts_t o = {.amp = AA_F32, .mem = mem};
  int rc = aa_gpt_create(&m, &fx.arch, aa_ops_cpu(), fx.B, fx.T, &o);
  CHECK_MSG(rc == 0, "aa_gpt_create: %s", aa_last_error());
  if (rc) return NULL;
  CHECK(m->n_params == fx.n_base && m->lora.numel == fx.n_ad && m->grads.data == NULL);
  memcpy(m->params.data, fx.base, fx.n_base * sizeof(float));
  memcpy(m->lora.data, fx.adapters, fx.n_ad * sizeof(float));
  aa_gpt_params_changed(m);
  return m;
}

/* Each target's A and B, named, for the reports: [off, off + n). */
static int ad_tensor(int i, size_t *off, size_t *n, char name[32]) {
  const aa_arch_t *a = &fx.arch;
  int k = 0;
  for (int l = 0; l < a->n_layer; l++)
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      if (!(a->lora.targets >> t & 1)) continue;
      int in, out, row;
      aa_lora_shape(a, t, 1, &in, &out, &row);
      for (int ab = 0; ab < 2; ab++, k++)
        if (k == i) {
          *off = aa_gpt_lora_offset(a, l, t) + (ab ? (size_t)a->lora.r * in : 0);
          *n = (size_t)a->lora.r * (size_t)(ab ? out : in);
          snprintf(name, 32, "h%d.%s.%c", l, aa_lora_target_name(t), ab ? 'B' : 'A');
          return 1;
        }
    }
  return 0;
}

static double absmax(const float *x, size_t n) {
  double m = 0;
  for (size_t j = 0; j < n; j++)
    m = fmax(m, fabs(x[j]));
  return m;
}

AA_TEST(logits_loss_and_adapter_gradients_match_peft_in_float64) {
  aa_gpt_t *m = model(NULL);
  if (!m) return;
  const size_t NV = (size_t)fx.B * fx.T * fx.arch.vocab_size;
  CHECK(aa_gpt_forward(m, fx.inputs, NULL, NULL) == 0);
  const float *lg = aa_gpt_logits(m);
  double worst = 0;
  for (size_t i = 0; i < NV; i++)
    worst = fmax(worst, fabs(lg[i] - fx.logits[i]) / (1e-6 + 1e-4 * fabs(fx.logits[i])));
  fprintf(stderr, "  logits: worst error/tolerance %.3f\n", worst);
  CHECK(worst <= 1.0);
  float loss = 0;
  aa_gpt_zero_grad(m);
  CHECK(aa_gpt_forward(m, fx.inputs, fx.targets, &loss) == 0);
  CHECK_MSG(fabs(loss - fx.loss) <= 1e-6 + 1e-5 * fabs(fx.loss), "loss %.8f vs %.8f", loss, fx.loss);
  CHECK(aa_gpt_backward(m, 1.0f) == 0);
  const float *g = m->lora_grads.data;
  size_t off, n;
  char name[32];
  double all = 0;
  for (int i = 0; ad_tensor(i, &off, &n, name); i++) {
    const double atol = 2e-5 * absmax(fx.grads + off, n);
    double w = 0;
    for (size_t j = 0; j < n; j++)
      w = fmax(w, fabs(g[off + j] - fx.grads[off + j]) / (atol + 1e-4 * fabs(fx.grads[off + j])));
    CHECK_MSG(w <= 1.0, "%s: gradient error/tolerance %.3f", name, w);
    CHECK_MSG(absmax(fx.grads + off, n) > 1e-4, "%s: the reference gradient vanishes", name);
    all = fmax(all, w);
  }
  fprintf(stderr, "  adapter gradients: worst error/tolerance %.3f\n", all);
  aa_gpt_free(m);
}

AA_TEST(adamw_trains_the_adapters_only_and_the_base_stays_bit_identical) {
  aa_gpt_t *m = model(NULL);
  if (!m) return;
  aa_lora_opt_t o;
  CHECK(aa_lora_opt_init(&o, m, NULL) == 0);
  aa_train_cfg_t cfg = {.lr = fx.lr,
                        .beta1 = fx.beta1,
                        .beta2 = fx.beta2,
                        .eps = fx.eps,
                        .weight_decay = fx.wd,
                        .grad_clip = fx.clip};
  for (int k = 0; k < fx.n_steps; k++) {
    float loss = 0, norm = 0;
    aa_gpt_zero_grad(m);
    CHECK(aa_gpt_forward(m, fx.inputs, fx.targets, &loss) == 0);
    CHECK(aa_gpt_backward(m, 1.0f) == 0);
    CHECK(aa_lora_step(&o, m, &cfg, fx.lr, 1.0, 0, &norm) == 0);
    fprintf(stderr, "  step %d loss %.7f (reference %.7f) grad norm %.5f\n", k, loss, fx.step_losses[k],
            norm);
    CHECK(fabs(loss - fx.step_losses[k]) <= 1e-5 + 1e-5 * fabs(fx.step_losses[k]));
    if (k == 0) CHECK_MSG(norm > fx.clip, "the first step must clip (%g <= %g)", norm, fx.clip);
  }
  CHECK(o.t == fx.n_steps);
  CHECK(!memcmp(m->params.data, fx.base, fx.n_base * sizeof(float))); /* frozen: bit for bit */
  const float *p = m->lora.data;
  size_t off, n;
  char name[32];
  for (int i = 0; ad_tensor(i, &off, &n, name); i++) {
    const double gatol = 2e-5 * absmax(fx.grads + off, n);
    double w = 0;
    for (size_t j = 0; j < n; j++) {
      const double g0 = fabs(fx.grads[off + j]), gtol = gatol + 1e-4 * g0;
      const double atol = fx.n_steps * fx.lr * fmin(2.0, 8.0 * gtol / (g0 + fx.eps)) + 1e-6;
      w = fmax(w, fabs(p[off + j] - fx.after[off + j]) / (atol + 1e-5 * fabs(fx.after[off + j])));
    }
    CHECK_MSG(w <= 1.0, "%s after %d steps: error/tolerance %.3f", name, fx.n_steps, w);
  }
  /* They moved: a step that did nothing would pass the base check too. */
  double moved = 0;
  for (size_t j = 0; j < fx.n_ad; j++)
    moved = fmax(moved, fabs(p[j] - fx.adapters[j]));
  CHECK_MSG(moved > fx.lr, "the adapters moved %g at most", moved);
  aa_lora_opt_free(&o);
  aa_gpt_free(m);
}

/* What the engine allocates is the cost model's (sizes.h aa_sizes_lora and
 * the act layout's lora workspace), kind by kind, to the byte. */
AA_TEST(the_allocations_are_the_cost_models_to_the_byte) {
  aa_mem_t mem;
  aa_mem_init(&mem, 0);
  aa_gpt_t *m = model(&mem);
  if (!m) return;
  aa_lora_opt_t o;
  CHECK(aa_lora_opt_init(&o, m, &mem) == 0);
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.micro_batch = fx.B;
  aa_arch_t a = fx.arch;
  a.seq_len = fx.T;
  aa_cost_mem_t c;
  aa_cost_memory(&a, &s, 1, &c);
  for (int k = 0; k < AA_MEM_NKINDS; k++)
    CHECK_MSG(c.bytes[k] == mem.peak[k], "%s: predicted %zu, allocated %zu", aa_mem_kind_name(k), c.bytes[k],
              mem.peak[k]);
  CHECK(mem.peak[AA_MEM_GRADS] == 4 * fx.n_ad && mem.peak[AA_MEM_OPTIM] == 8 * fx.n_ad);
  aa_lora_opt_free(&o);
  aa_gpt_free(m);
}

/* gpt2 (qkv, proj, fc, fcproj): with PEFT's B = 0 the logits are the
 * base's bit for bit and A has no gradient; with B drawn, the gradient
 * along a random direction of the adapters matches a central difference
 * of the loss (float32: step 1e-2, tolerance 1e-2 relative). */
AA_TEST(gpt2_adapters_start_as_the_base_and_their_gradient_is_the_losss_slope) {
  aa_arch_t a = {
      .family = "gpt2", .n_layer = 2, .n_head = 2, .d_model = 16, .d_ff = 32, .seq_len = 8, .vocab_size = 37};
  aa_arch_t l = a;
  l.lora = (aa_lora_t){.r = 3,
                       .alpha = 6,
                       .targets = (1 << AA_LORA_QKV) | (1 << AA_LORA_PROJ) | (1 << AA_LORA_FC) |
                                  (1 << AA_LORA_FCPROJ)};
  aa_gpt_t *b = NULL, *m = NULL;
  CHECK(aa_gpt_create(&b, &a, aa_ops_cpu(), 2, 8, NULL) == 0 &&
        aa_gpt_create(&m, &l, aa_ops_cpu(), 2, 8, NULL) == 0);
  if (!b || !m) goto out;
  CHECK(aa_gpt_init_weights(b, 7) == 0 && aa_gpt_init_weights(m, 7) == 0 && aa_gpt_lora_init(m, 9) == 0);
  int32_t in[16], tg[16];
  for (int i = 0; i < 16; i++)
    in[i] = (i * 7 + 3) % 37, tg[i] = (i * 5 + 1) % 37;
  CHECK(aa_gpt_forward(b, in, NULL, NULL) == 0 && aa_gpt_forward(m, in, NULL, NULL) == 0);
  CHECK(!memcmp(aa_gpt_logits(b), aa_gpt_logits(m), 16 * 37 * sizeof(float)));
  float *ad = m->lora.data, *g = m->lora_grads.data;
  const size_t n = m->lora.numel;
  double a_grad = 0, b_grad = 0;
  aa_gpt_zero_grad(m);
  CHECK(aa_gpt_forward(m, in, tg, NULL) == 0 && aa_gpt_backward(m, 1.0f) == 0);
  for (int t = 0; t < AA_LORA_NTARGETS; t++) {
    if (!(l.lora.targets >> t & 1)) continue;
    int i_, o_, row;
    aa_lora_shape(&l, t, 1, &i_, &o_, &row);
    const size_t off = aa_gpt_lora_offset(&l, 1, t), na = 3 * (size_t)i_;
    a_grad = fmax(a_grad, absmax(g + off, na));
    b_grad = fmax(b_grad, absmax(g + off + na, 3 * (size_t)o_));
  }
  CHECK(a_grad == 0 && b_grad > 0); /* B = 0: d/dA vanishes, d/dB does not */
  aa_rng_t rng;
  aa_rng_seed(&rng, 11);
  for (size_t j = 0; j < n; j++)
    ad[j] = 0.3f * aa_rng_normal(&rng);
  float *d = malloc(n * sizeof *d), *keep = malloc(n * sizeof *keep);
  if (!d || !keep) goto out2;
  for (size_t j = 0; j < n; j++)
    d[j] = aa_rng_normal(&rng), keep[j] = ad[j];
  aa_gpt_zero_grad(m);
  CHECK(aa_gpt_forward(m, in, tg, NULL) == 0 && aa_gpt_backward(m, 1.0f) == 0);
  double slope = 0, dn = 0;
  for (size_t j = 0; j < n; j++)
    slope += (double)g[j] * d[j], dn += (double)d[j] * d[j];
  const float h = 1e-2f / (float)sqrt(dn);
  float lp = 0, lm = 0;
  for (size_t j = 0; j < n; j++)
    ad[j] = keep[j] + h * d[j];
  CHECK(aa_gpt_forward(m, in, tg, &lp) == 0);
  for (size_t j = 0; j < n; j++)
    ad[j] = keep[j] - h * d[j];
  CHECK(aa_gpt_forward(m, in, tg, &lm) == 0);
  const double fd = ((double)lp - lm) / (2.0 * h);
  fprintf(stderr, "  gpt2: slope %.6f, central difference %.6f\n", slope, fd);
  CHECK_MSG(fabs(fd - slope) <= 1e-2 * fabs(slope) + 1e-4, "slope %.6f vs %.6f", slope, fd);
out2:
  free(d);
  free(keep);
out:
  aa_gpt_free(b);
  aa_gpt_free(m);
}

/* bf16: the base held in 16 bits only (no fp32 copy of it anywhere), the
 * adapters fp32. The allocations are the cost model's to the byte; the
 * step losses are the fp32 reference's within 2e-3 relative (bf16 keeps 8
 * bits: every activation and base weight rounded to 2^-9 relative, through
 * two blocks; measured 2.5e-4), and the 16-bit base is bit-identical after
 * the five steps. */
AA_TEST(bf16_holds_the_base_in_16_bits_and_trains_the_adapters) {
  aa_mem_t mem;
  aa_mem_init(&mem, 0);
  aa_gpt_t *m = NULL;
  aa_gpt_opts_t opts = {.amp = AA_BF16, .mem = &mem};
  CHECK_MSG(aa_gpt_create(&m, &fx.arch, aa_ops_cpu(), fx.B, fx.T, &opts) == 0, "%s", aa_last_error());
  if (!m) return;
  CHECK(m->params.data == NULL && m->params16.numel == fx.n_base && m->grads.data == NULL);
  m->ops->cast_from_f32(m->params16.data, AA_BF16, fx.base, fx.n_base);
  memcpy(m->lora.data, fx.adapters, fx.n_ad * sizeof(float));
  aa_gpt_params_changed(m);
  uint16_t *base16 = malloc(fx.n_base * sizeof *base16);
  if (!base16) goto out;
  memcpy(base16, m->params16.data, fx.n_base * sizeof *base16);
  aa_lora_opt_t o;
  CHECK(aa_lora_opt_init(&o, m, &mem) == 0);
  aa_strategy_t s;
  aa_strategy_default(&s);
  s.micro_batch = fx.B;
  s.amp = AA_BF16;
  aa_arch_t a = fx.arch;
  a.seq_len = fx.T;
  aa_cost_mem_t c;
  aa_cost_memory(&a, &s, 1, &c);
  for (int k = 0; k < AA_MEM_NKINDS; k++)
    CHECK_MSG(c.bytes[k] == mem.peak[k], "bf16 %s: predicted %zu, allocated %zu", aa_mem_kind_name(k),
              c.bytes[k], mem.peak[k]);
  CHECK(mem.peak[AA_MEM_PARAMS] == 2 * fx.n_base + 4 * fx.n_ad);
  aa_train_cfg_t cfg = {.lr = fx.lr,
                        .beta1 = fx.beta1,
                        .beta2 = fx.beta2,
                        .eps = fx.eps,
                        .weight_decay = fx.wd,
                        .grad_clip = fx.clip};
  double worst = 0;
  for (int k = 0; k < fx.n_steps; k++) {
    float loss = 0;
    aa_gpt_zero_grad(m);
    CHECK(aa_gpt_forward(m, fx.inputs, fx.targets, &loss) == 0);
    CHECK(aa_gpt_backward(m, 1.0f) == 0);
    CHECK(aa_lora_step(&o, m, &cfg, fx.lr, 1.0, 0, NULL) == 0);
    worst = fmax(worst, fabs(loss - fx.step_losses[k]) / fabs(fx.step_losses[k]));
  }
  fprintf(stderr, "  bf16: step losses within %.2g relative of the fp32 reference's\n", worst);
  CHECK(worst <= 2e-3);
  CHECK(!memcmp(base16, m->params16.data, fx.n_base * sizeof *base16));
  aa_lora_opt_free(&o);
out:
  free(base16);
  aa_gpt_free(m);
}

/* Activation checkpointing recomputes a block's adapters with it: under
 * selective and full checkpointing the adapters' gradients are the
 * uncheckpointed run's bit for bit (deterministic kernels). */
AA_TEST(checkpointing_recomputes_the_adapters_bit_for_bit) {
  aa_gpt_t *m[3] = {NULL, NULL, NULL};
  const aa_ckpt_mode_t modes[3] = {AA_CKPT_NONE, AA_CKPT_SELECTIVE, AA_CKPT_FULL};
  for (int k = 0; k < 3; k++) {
    aa_gpt_opts_t o = {.amp = AA_F32, .ckpt = modes[k]};
    CHECK(aa_gpt_create(&m[k], &fx.arch, aa_ops_cpu(), fx.B, fx.T, &o) == 0);
    if (!m[k]) goto out;
    memcpy(m[k]->params.data, fx.base, fx.n_base * sizeof(float));
    memcpy(m[k]->lora.data, fx.adapters, fx.n_ad * sizeof(float));
    aa_gpt_params_changed(m[k]);
    aa_gpt_zero_grad(m[k]);
    CHECK(aa_gpt_forward(m[k], fx.inputs, fx.targets, NULL) == 0 && aa_gpt_backward(m[k], 1.0f) == 0);
  }
  for (int k = 1; k < 3; k++)
    CHECK_MSG(!memcmp(m[0]->lora_grads.data, m[k]->lora_grads.data, fx.n_ad * sizeof(float)),
              "checkpointing %s changes the adapters' gradients", aa_ckpt_mode_name(modes[k]));
out:
  for (int k = 0; k < 3; k++)
    aa_gpt_free(m[k]);
}

/* (ZeRO and fp16 over the adapters: test_lora_zero.c.) */
AA_TEST(a_model_without_adapters_is_refused) {
  aa_gpt_t *m = NULL;
  aa_lora_opt_t opt;
  aa_arch_t base = fx.arch;
  memset(&base.lora, 0, sizeof base.lora);
  CHECK(aa_gpt_create(&m, &base, aa_ops_cpu(), 1, 8, NULL) == 0);
  CHECK(aa_lora_opt_init(&opt, m, NULL) == AA_EINVAL);
  CHECK(aa_gpt_lora_init(m, 1) == AA_EINVAL);
  aa_gpt_free(m);
}

int main(void) {
  const char *src = getenv("AA_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/reference/lora_tiny.fixture", src && *src ? src : ".");
  int rc = load(path);
  if (rc) {
    fprintf(stderr, "%s: cannot load (%d): run tests/reference/make_lora_fixture.py\n", path, rc);
    return 1;
  }
  RUN(logits_loss_and_adapter_gradients_match_peft_in_float64);
  RUN(adamw_trains_the_adapters_only_and_the_base_stays_bit_identical);
  RUN(the_allocations_are_the_cost_models_to_the_byte);
  RUN(gpt2_adapters_start_as_the_base_and_their_gradient_is_the_losss_slope);
  RUN(bf16_holds_the_base_in_16_bits_and_trains_the_adapters);
  RUN(checkpointing_recomputes_the_adapters_bit_for_bit);
  RUN(a_model_without_adapters_is_refused);
  free(fx.blob);
  return aa_test_summary();
}
