/* Single-device strategy knobs in the engine: activation checkpointing,
 * mixed precision, micro-batching with gradient accumulation, fp16 loss
 * scaling, memory accounting and the memory limit. Model-level tests run
 * one forward/backward on random weights; trainer-level tests run real
 * training on the synthetic corpus in a temporary directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"
#include "common/mem.h"
#include "common/spec.h"
#include "engine/data.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/train.h"
#include "strategies/strategy.h"

static char tmpdir[256];
static char train_bin[512], val_bin[512];

/* 3 blocks so that "first k" has a first, a middle and a last block. */
static const aa_arch_t arch = {
    .family = "gpt2", .n_layer = 3, .n_head = 4, .d_model = 32, .d_ff = 64, .seq_len = 16, .vocab_size = 64};
enum { TB = 3, TT = 16 };

static int32_t inputs[TB * TT], targets[TB * TT];

static void make_tokens(void) {
  aa_rng_t r;
  aa_rng_seed(&r, 99);
  for (int i = 0; i < TB * TT; i++) {
    inputs[i] = (int32_t)(aa_rng_u64(&r) % arch.vocab_size);
    targets[i] = (int32_t)(aa_rng_u64(&r) % arch.vocab_size);
  }
}

/* One forward + backward under opts; returns the model (caller frees)
 * with the loss in *loss and the gradients in m->grads. */
static aa_gpt_t *fwd_bwd(const aa_gpt_opts_t *opts, float *loss) {
  aa_gpt_t *m = NULL;
  int rc = aa_gpt_create(&m, &arch, aa_ops_cpu(), TB, TT, opts);
  CHECK_MSG(rc == 0, "create: %s", aa_last_error());
  if (rc) return NULL;
  aa_gpt_init_weights(m, 5);
  aa_gpt_zero_grad(m);
  rc = aa_gpt_forward(m, inputs, targets, loss);
  if (!rc) rc = aa_gpt_backward(m, 1.0f);
  CHECK_MSG(rc == 0, "fwd/bwd: %s", aa_last_error());
  return m;
}

static const struct {
  const char *name;
  aa_ckpt_mode_t ckpt;
  int layers;
} modes[] = {{"none", AA_CKPT_NONE, 0},       {"selective", AA_CKPT_SELECTIVE, 0}, {"full", AA_CKPT_FULL, 0},
             {"full first 1", AA_CKPT_FULL, 1}, {"full first 2", AA_CKPT_FULL, 2}};

/* The rule: recomputation must reproduce the forward exactly, so
 * the gradients are bit-identical, not merely close. Checked under every
 * amp type (under bf16/fp16 recomputation also re-rounds identically). */
AA_TEST(checkpoint_modes_give_bit_identical_gradients) {
  const aa_dtype_t amps[] = {AA_F32, AA_BF16, AA_F16};
  for (int a = 0; a < 3; a++) {
    float ref_loss;
    aa_gpt_opts_t o = {.amp = amps[a]};
    aa_gpt_t *ref = fwd_bwd(&o, &ref_loss);
    if (!ref) return;
    for (size_t k = 1; k < sizeof modes / sizeof modes[0]; k++) {
      o.ckpt = modes[k].ckpt;
      o.ckpt_layers = modes[k].layers;
      float loss;
      aa_gpt_t *m = fwd_bwd(&o, &loss);
      if (!m) break;
      CHECK_MSG(loss == ref_loss, "%s/%s: loss %.9g vs %.9g", aa_dtype_name(amps[a]), modes[k].name, loss,
                ref_loss);
      CHECK_MSG(!memcmp(m->grads.data, ref->grads.data, m->n_params * sizeof(float)),
                "%s/%s: gradients differ from no checkpointing", aa_dtype_name(amps[a]), modes[k].name);
      aa_gpt_free(m);
    }
    aa_gpt_free(ref);
  }
}

/* Activation memory must fall with each mode, and what the model accounts
 * must be what aa_gpt_act_bytes predicts (the planner's figure). */
AA_TEST(checkpoint_modes_reduce_accounted_activation_memory) {
  size_t prev = (size_t)-1;
  const int order[] = {0, 1, 3, 4, 2}; /* none > selective > first 1 > first 2 > full, for this shape */
  for (int i = 0; i < 5; i++) {
    aa_mem_t mem;
    aa_mem_init(&mem, 0);
    aa_gpt_opts_t o = {.ckpt = modes[order[i]].ckpt, .ckpt_layers = modes[order[i]].layers, .mem = &mem};
    float loss;
    aa_gpt_t *m = fwd_bwd(&o, &loss);
    if (!m) return;
    size_t acts, ws;
    aa_gpt_act_bytes(&arch, TB, TT, &o, &acts, &ws);
    CHECK_MSG(mem.peak[AA_MEM_ACTS] == acts && mem.peak[AA_MEM_WORKSPACE] == ws,
              "%s: accounted %zu/%zu, predicted %zu/%zu", modes[order[i]].name, mem.peak[AA_MEM_ACTS],
              mem.peak[AA_MEM_WORKSPACE], acts, ws);
    CHECK_MSG(acts < prev, "%s keeps %zu bytes, not less than the previous mode's %zu", modes[order[i]].name, acts,
              prev);
    fprintf(stderr, "  %-13s acts %7zu B, workspace %7zu B\n", modes[order[i]].name, acts, ws);
    prev = acts;
    aa_gpt_free(m);
    CHECK(mem.total == 0);
  }
}

/* Under amp the parameters and the kept block activations are 16-bit:
 * the accounted bytes must show it. Block activations are most of the
 * kept bytes here; the fp32 parts (logits, LayerNorm statistics, final
 * LayerNorm) keep the ratio above one half. */
AA_TEST(amp_stores_parameters_and_activations_in_16_bits) {
  aa_mem_t m32, m16;
  aa_mem_init(&m32, 0);
  aa_mem_init(&m16, 0);
  aa_gpt_opts_t o32 = {.amp = AA_F32, .mem = &m32}, o16 = {.amp = AA_BF16, .mem = &m16};
  aa_gpt_t *a = NULL, *b = NULL;
  CHECK(aa_gpt_create(&a, &arch, aa_ops_cpu(), TB, TT, &o32) == 0);
  CHECK(aa_gpt_create(&b, &arch, aa_ops_cpu(), TB, TT, &o16) == 0);
  if (!a || !b) return;
  CHECK(m16.peak[AA_MEM_PARAMS] * 2 == m32.peak[AA_MEM_PARAMS]);
  /* The fp32 master copy counts as optimizer state under amp. */
  CHECK(m16.peak[AA_MEM_OPTIM] == m32.peak[AA_MEM_PARAMS]);
  CHECK(m16.peak[AA_MEM_GRADS] == m32.peak[AA_MEM_GRADS]);
  double r = (double)m16.peak[AA_MEM_ACTS] / (double)m32.peak[AA_MEM_ACTS];
  fprintf(stderr, "  kept activations bf16/fp32 = %.3f\n", r);
  CHECK(r > 0.5 && r < 0.65);
  aa_gpt_free(a);
  aa_gpt_free(b);
}

/* bf16/fp16 change the numbers (rounding really happens: the gradients
 * differ from fp32) but only a little: the loss of one forward moves by
 * less than 1% (bf16 keeps 8 significant bits, ~0.4% per rounding, which
 * averages out over the mean; fp16 keeps 11). */
AA_TEST(amp_rounds_but_stays_close_to_fp32) {
  float l32, lbf, lfp;
  aa_gpt_opts_t o = {.amp = AA_F32};
  aa_gpt_t *a = fwd_bwd(&o, &l32);
  o.amp = AA_BF16;
  aa_gpt_t *b = fwd_bwd(&o, &lbf);
  o.amp = AA_F16;
  aa_gpt_t *c = fwd_bwd(&o, &lfp);
  fprintf(stderr, "  loss fp32 %.7f bf16 %.7f fp16 %.7f\n", l32, lbf, lfp);
  size_t nb = a->n_params * sizeof(float);
  CHECK(memcmp(a->grads.data, b->grads.data, nb) && memcmp(a->grads.data, c->grads.data, nb));
  CHECK(fabsf(lbf - l32) < 0.01f * l32 && fabsf(lfp - l32) < 0.01f * l32);
  aa_gpt_free(a);
  aa_gpt_free(b);
  aa_gpt_free(c);
}

/* An accumulated step equals the single big step: the per-token gradient
 * contributions are the same numbers, only summed in a different order.
 * fp32 reordering error is about n_terms * 2^-24 relative to the sum's
 * magnitude; with 48 tokens per tensor and ~10 more additions per element
 * that is < 1e-5 of the largest gradient, which is the stated tolerance. */
AA_TEST(accumulated_micro_batches_equal_one_big_batch) {
  aa_gpt_t *big = NULL, *mb = NULL;
  CHECK(aa_gpt_create(&big, &arch, aa_ops_cpu(), TB, TT, NULL) == 0);
  CHECK(aa_gpt_create(&mb, &arch, aa_ops_cpu(), 1, TT, NULL) == 0);
  if (!big || !mb) return;
  aa_gpt_init_weights(big, 5);
  aa_gpt_init_weights(mb, 5);
  float lbig, lsum = 0;
  aa_gpt_zero_grad(big);
  CHECK(aa_gpt_forward(big, inputs, targets, &lbig) == 0 && aa_gpt_backward(big, 1.0f) == 0);
  aa_gpt_zero_grad(mb);
  for (int b = 0; b < TB; b++) {
    float l;
    CHECK(aa_gpt_forward(mb, inputs + b * TT, targets + b * TT, &l) == 0 && aa_gpt_backward(mb, 1.0f / TB) == 0);
    lsum += l / TB;
  }
  const float *g1 = big->grads.data, *g2 = mb->grads.data;
  double maxg = 0, maxd = 0;
  for (size_t i = 0; i < big->n_params; i++) {
    maxg = fmax(maxg, fabs(g1[i]));
    maxd = fmax(maxd, fabs(g1[i] - g2[i]));
  }
  fprintf(stderr, "  max |g| %.3g, max |diff| %.3g (%.2g relative); loss %.9g vs %.9g\n", maxg, maxd, maxd / maxg,
          lbig, lsum);
  CHECK(maxd <= 1e-5 * maxg);
  CHECK(fabsf(lbig - lsum) <= 1e-6f * lbig);
  aa_gpt_free(big);
  aa_gpt_free(mb);
}

/* A spec over the temporary corpus: 2 layers, batch 8 of 32 tokens. */
static void small_spec(aa_model_spec_t *s, int steps) {
  char json[2048];
  snprintf(json, sizeof json,
           "{\"name\": \"k\", \"model\": {\"n_layer\": 2, \"n_head\": 2, \"d_model\": 32, \"d_ff\": 128, "
           "\"seq_len\": 32, \"vocab_size\": 256}, \"train\": {\"global_batch\": 8, \"steps\": %d, \"lr\": 0.003, "
           "\"warmup_steps\": %d, \"eval_every\": 0, \"eval_batches\": 2, \"seed\": 3}, "
           "\"data\": {\"train\": \"%s\", \"val\": \"%s\"}}",
           steps, steps < 2 ? steps : 2, train_bin, val_bin);
  int rc = aa_spec_parse(s, json, NULL, "test");
  CHECK_MSG(rc == 0, "spec: %s", aa_last_error());
}

static int run(const aa_model_spec_t *s, const aa_strategy_t *st, size_t limit, const char *tag, const char *losses,
               const char *resume, int ckpt_every, aa_train_result_t *r) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, tag);
  FILE *log = fopen("/dev/null", "w");
  aa_train_opts_t o = {.threads = 2, .checkpoint_every = ckpt_every, .log_every = 100, .out_dir = dir,
                       .log = log, .strategy = st, .memory_limit = limit, .losses_path = losses, .resume = resume};
  int rc = aa_train(s, &o, r);
  fclose(log);
  return rc;
}

static aa_strategy_t strat(aa_dtype_t amp, aa_ckpt_mode_t ckpt, int mb) {
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.amp = amp;
  st.ckpt = ckpt;
  st.micro_batch = mb;
  return st;
}

/* Training with 4 micro-batches of 2 follows the same loss curve as one
 * batch of 8. Differences start at fp32 rounding (above) and grow through
 * AdamW (which divides by sqrt(v) and so amplifies tiny gradients); over 8
 * steps they stay below 1e-4 relative, far below the loss change per step. */
AA_TEST(training_with_micro_batches_matches_one_batch) {
  aa_model_spec_t s;
  small_spec(&s, 8);
  aa_strategy_t one = strat(AA_F32, AA_CKPT_NONE, 8), four = strat(AA_F32, AA_CKPT_NONE, 2);
  aa_train_result_t a, b;
  char la[600], lb[600];
  snprintf(la, sizeof la, "%s/mb8.losses", tmpdir);
  snprintf(lb, sizeof lb, "%s/mb2.losses", tmpdir);
  CHECK_MSG(run(&s, &one, 0, "mb8", la, NULL, -1, &a) == 0, "%s", aa_last_error());
  CHECK_MSG(run(&s, &four, 0, "mb2", lb, NULL, -1, &b) == 0, "%s", aa_last_error());
  FILE *fa = fopen(la, "r"), *fb = fopen(lb, "r");
  CHECK(fa && fb);
  if (!fa || !fb) return;
  int n = 0, sa, sb;
  float xa, xb;
  while (fscanf(fa, "%d %f", &sa, &xa) == 2 && fscanf(fb, "%d %f", &sb, &xb) == 2) {
    CHECK_MSG(sa == sb && fabsf(xa - xb) <= 1e-4f * xa, "step %d: %.9g vs %.9g", sa, xa, xb);
    n++;
  }
  CHECK(n == 8);
  fclose(fa);
  fclose(fb);
  /* The smaller micro-batch keeps a quarter of the activations. */
  CHECK(b.mem.peak[AA_MEM_ACTS] < a.mem.peak[AA_MEM_ACTS] / 3);
  CHECK(!strcmp(b.key, "dp1.tp1.pp1.z0.fp32.ckpt-none.mb2"));
}

/* bf16 and fp16 training learn like fp32: after 30 steps the losses agree
 * to within 0.05 nats (they start at ~5.5 and fall by ~2.5). */
AA_TEST(amp_training_follows_fp32) {
  aa_model_spec_t s;
  small_spec(&s, 30);
  aa_train_result_t r[3];
  const aa_dtype_t amps[] = {AA_F32, AA_BF16, AA_F16};
  for (int i = 0; i < 3; i++) {
    aa_strategy_t st = strat(amps[i], AA_CKPT_NONE, 0);
    CHECK_MSG(run(&s, &st, 0, aa_dtype_name(amps[i]), NULL, NULL, -1, &r[i]) == 0, "%s", aa_last_error());
    fprintf(stderr, "  %s: final loss %.4f, skipped %lld, loss scale %g\n", aa_dtype_name(amps[i]), r[i].final_loss,
            (long long)r[i].skipped_steps, r[i].loss_scale);
  }
  CHECK(fabsf(r[1].final_loss - r[0].final_loss) < 0.05f);
  CHECK(fabsf(r[2].final_loss - r[0].final_loss) < 0.05f);
  CHECK(r[0].final_loss < 4.0f);
}

/* fp16 with a first scale of 2^28 overflows: those steps are skipped and
 * counted, the scale halves after every `hysteresis` overflows, and
 * training then proceeds and learns. */
AA_TEST(fp16_overflow_skips_steps_and_lowers_the_scale) {
  aa_model_spec_t s;
  small_spec(&s, 40);
  aa_strategy_t st = strat(AA_F16, AA_CKPT_NONE, 0);
  st.loss_scale.initial_scale_power = 28;
  st.loss_scale.window = 1000;
  aa_train_result_t r;
  CHECK_MSG(run(&s, &st, 0, "overflow", NULL, NULL, -1, &r) == 0, "%s", aa_last_error());
  fprintf(stderr, "  skipped %lld of 40 steps; final scale %g; loss %.4f\n", (long long)r.skipped_steps,
          r.loss_scale, r.final_loss);
  CHECK(r.skipped_steps >= 2 && r.skipped_steps < 40);
  CHECK(r.loss_scale < ldexp(1, 28));
  CHECK(r.final_loss < 4.0f);
}

/* Resume under fp16 with micro-batches is bit-identical: the loss scaler
 * state (scale, hysteresis, window position) travels in the checkpoint. */
AA_TEST(fp16_resume_with_micro_batches_is_bit_identical) {
  aa_model_spec_t s;
  small_spec(&s, 12);
  aa_strategy_t st = strat(AA_F16, AA_CKPT_SELECTIVE, 4);
  st.loss_scale.initial_scale_power = 24;
  st.loss_scale.window = 3; /* the scale changes several times within 12 steps */
  char la[600], lb[600], ck[700];
  snprintf(la, sizeof la, "%s/r1.losses", tmpdir);
  snprintf(lb, sizeof lb, "%s/r2.losses", tmpdir);
  aa_train_result_t a, b;
  CHECK_MSG(run(&s, &st, 0, "r1", la, NULL, 6, &a) == 0, "%s", aa_last_error());
  snprintf(ck, sizeof ck, "%s/r1/step_000006.ckpt", tmpdir);
  CHECK_MSG(run(&s, &st, 0, "r2", lb, ck, -1, &b) == 0, "%s", aa_last_error());
  CHECK(a.loss_scale == b.loss_scale && a.skipped_steps == b.skipped_steps);
  FILE *fa = fopen(la, "r"), *fb = fopen(lb, "r");
  CHECK(fa && fb);
  if (!fa || !fb) return;
  char l1[128], l2[128];
  int n = 0;
  while (fgets(l1, sizeof l1, fa))
    if (atoi(l1) > 6) {
      CHECK(fgets(l2, sizeof l2, fb) != NULL);
      CHECK_MSG(!strcmp(l1, l2), "uninterrupted %s resumed %s", l1, l2);
      n++;
    }
  CHECK(n == 6);
  fclose(fa);
  fclose(fb);
}

/* Non-finite gradients: skipped and counted when allowed, an error when
 * not; parameters are untouched either way. */
AA_TEST(nonfinite_gradients_skip_or_fail_without_touching_parameters) {
  aa_gpt_t *m = NULL;
  CHECK(aa_gpt_create(&m, &arch, aa_ops_cpu(), 1, TT, NULL) == 0);
  if (!m) return;
  aa_adamw_t opt;
  CHECK(aa_adamw_init(&opt, m->n_params, NULL) == 0);
  aa_gpt_init_weights(m, 1);
  float *before = malloc(m->n_params * sizeof(float));
  memcpy(before, m->params.data, m->n_params * sizeof(float));
  ((float *)m->grads.data)[17] = NAN;
  aa_train_cfg_t cfg = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_clip = 1.0f};
  float norm;
  CHECK(aa_adamw_step(&opt, m, &cfg, 1e-3f, 1.0, 1, &norm) == 1);
  CHECK(aa_adamw_step(&opt, m, &cfg, 1e-3f, 1.0, 0, &norm) == AA_EINVAL);
  CHECK(strstr(aa_last_error(), "not finite") != NULL);
  CHECK(!memcmp(before, m->params.data, m->n_params * sizeof(float)) && opt.t == 0);
  free(before);
  aa_adamw_free(&opt);
  aa_gpt_free(m);
}

/* The memory limit is exact: a run fits in its own measured peak and
 * fails with a clean out-of-memory error one byte below it. */
AA_TEST(memory_limit_fails_cleanly_one_byte_below_the_peak) {
  aa_model_spec_t s;
  small_spec(&s, 1);
  aa_strategy_t st = strat(AA_BF16, AA_CKPT_FULL, 2);
  aa_train_result_t r;
  CHECK_MSG(run(&s, &st, 0, "m0", NULL, NULL, -1, &r) == 0, "%s", aa_last_error());
  size_t peak = r.mem.peak_total;
  CHECK(peak > 0);
  CHECK_MSG(run(&s, &st, peak, "m1", NULL, NULL, -1, &r) == 0, "%s", aa_last_error());
  int rc = run(&s, &st, peak - 1, "m2", NULL, NULL, -1, &r);
  CHECK(rc == AA_EOOM);
  CHECK_MSG(strstr(aa_last_error(), "out of memory") && strstr(aa_last_error(), "memory limit"), "%s",
            aa_last_error());
  rc = run(&s, &st, 4096, "m3", NULL, NULL, -1, &r);
  CHECK(rc == AA_EOOM);
}

/* A strategy the model cannot run is refused before anything is built,
 * with the rule named. */
AA_TEST(invalid_strategy_is_refused_with_the_rule) {
  aa_model_spec_t s;
  small_spec(&s, 1);
  aa_strategy_t st = strat(AA_F32, AA_CKPT_NONE, 3);
  aa_train_result_t r;
  CHECK(run(&s, &st, 0, "bad", NULL, NULL, -1, &r) == AA_EINVAL);
  CHECK_MSG(strstr(aa_last_error(), "micro_batch 3") != NULL, "%s", aa_last_error());
}

/* The fused fc epilogue (ops.h bias_gelu_forward, gelu_backward_bias,
 * matmul_backward_set) against the plain ops it replaces (a CPU table with
 * those entries NULL), on every checkpoint mode: the same loss and
 * gradients up to the order fc's bias is added in (onto sgemm's sum
 * instead of under it, ~1 ulp per element), so within 1e-5 of the largest
 * gradient (~100 fp32 ulps), not bit for bit; the bias gradients come from
 * the same sums. The CPU table has the fused entries (checked), so the two
 * models take different paths. */
AA_TEST(fused_fc_ops_give_the_plain_ops_gradients) {
  aa_ops_t plain = *aa_ops_cpu();
  plain.matmul_backward_set = NULL, plain.bias_gelu_forward = NULL, plain.gelu_backward_bias = NULL;
  CHECK(aa_ops_cpu()->bias_gelu_forward && aa_ops_cpu()->gelu_backward_bias &&
        aa_ops_cpu()->matmul_backward_set);
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
    aa_gpt_opts_t o = {.amp = AA_F32, .ckpt = modes[k].ckpt, .ckpt_layers = modes[k].layers};
    aa_gpt_t *m[2] = {NULL, NULL};
    float loss[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
      int rc = aa_gpt_create(&m[i], &arch, i ? &plain : aa_ops_cpu(), TB, TT, &o);
      CHECK_MSG(rc == 0, "create: %s", aa_last_error());
      if (rc) break;
      aa_gpt_init_weights(m[i], 5);
      aa_gpt_zero_grad(m[i]);
      rc = aa_gpt_forward(m[i], inputs, targets, &loss[i]);
      if (!rc) rc = aa_gpt_backward(m[i], 1.0f);
      CHECK_MSG(rc == 0, "fwd/bwd: %s", aa_last_error());
    }
    if (m[0] && m[1]) {
      const float *g0 = m[0]->grads.data, *g1 = m[1]->grads.data;
      double gmax = 0.0, diff = 0.0;
      for (size_t i = 0; i < m[0]->n_params; i++) {
        gmax = fmax(gmax, fabs(g1[i]));
        diff = fmax(diff, fabs((double)g0[i] - g1[i]));
      }
      CHECK_MSG(fabs(loss[0] - loss[1]) <= 1e-6 * fabs(loss[1]), "%s: loss %.9g vs %.9g", modes[k].name,
                loss[0], loss[1]);
      CHECK_MSG(gmax > 0.0 && diff <= 1e-5 * gmax, "%s: gradients differ by %.3g (largest %.3g)",
                modes[k].name, diff, gmax);
      if (k == 0)
        fprintf(stderr, "  fused vs plain: loss %.3g apart, gradients %.3g of the largest\n",
                fabs(loss[0] - loss[1]), diff / gmax);
    }
    aa_gpt_free(m[0]), aa_gpt_free(m[1]);
  }
}

/* The gradient's clipping and unscaling folded into AdamW (ops.h
 * adamw_update_scaled) against a CPU table without it (a scale pass, then
 * adamw_update): two steps of aa_adamw_step with the clip active and a
 * loss scale of 4, on the same gradient; the parameters and moments are
 * bit-identical (the same products, only not stored in the gradient). */
AA_TEST(clip_folded_into_adamw_gives_the_plain_update) {
  aa_ops_t plain = *aa_ops_cpu();
  plain.adamw_update_scaled = NULL;
  CHECK(aa_ops_cpu()->adamw_update_scaled != NULL);
  aa_gpt_t *m[2] = {NULL, NULL};
  aa_adamw_t opt[2];
  memset(opt, 0, sizeof opt);
  aa_train_cfg_t cfg = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 0.5f};
  float norm[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    float loss;
    int rc = aa_gpt_create(&m[i], &arch, i ? &plain : aa_ops_cpu(), TB, TT, NULL);
    if (!rc) rc = aa_adamw_init_on(&opt[i], m[i]->ops, m[i]->n_params, NULL);
    CHECK_MSG(rc == 0, "create: %s", aa_last_error());
    if (rc) goto cleanup;
    aa_gpt_init_weights(m[i], 5);
    for (int step = 0; step < 2 && !rc; step++) {
      aa_gpt_zero_grad(m[i]);
      rc = aa_gpt_forward(m[i], inputs, targets, &loss);
      if (!rc) rc = aa_gpt_backward(m[i], 4.0f);
      if (!rc) rc = aa_adamw_step(&opt[i], m[i], &cfg, 1e-3f, 4.0, 0, &norm[i]);
    }
    CHECK_MSG(rc == 0, "steps: %s", aa_last_error());
    if (rc) goto cleanup;
  }
  CHECK_MSG(norm[0] > cfg.grad_clip && norm[0] == norm[1], "norms %g %g (clip %g)", norm[0], norm[1],
            cfg.grad_clip);
  size_t bytes = m[0]->n_params * sizeof(float);
  CHECK(!memcmp(m[0]->params.data, m[1]->params.data, bytes));
  CHECK(!memcmp(opt[0].m.data, opt[1].m.data, bytes) && !memcmp(opt[0].v.data, opt[1].v.data, bytes));
cleanup:
  for (int i = 0; i < 2; i++) {
    if (m[i]) aa_adamw_free(&opt[i]);
    aa_gpt_free(m[i]);
  }
}

/* A backend's own scratch (ops.h scratch_bytes; CUDA's attention and GEMM
 * scratch) is workspace: counted once as it grows, given back with the
 * model, and held to the memory limit. The CPU backend reports none, so a
 * CPU table with a scratch_bytes of the test's choosing stands in. */
static size_t fake_scratch;
static size_t fake_scratch_bytes(void) { return fake_scratch; }

AA_TEST(backend_scratch_is_accounted_as_workspace) {
  aa_ops_t ops = *aa_ops_cpu();
  ops.scratch_bytes = fake_scratch_bytes;
  aa_mem_t mem;
  aa_mem_init(&mem, 0);
  aa_gpt_opts_t o = {.amp = AA_F32, .mem = &mem};
  aa_gpt_t *m = NULL;
  fake_scratch = 0;
  CHECK(aa_gpt_create(&m, &arch, &ops, TB, TT, &o) == 0);
  if (!m) return;
  aa_gpt_init_weights(m, 5);
  float loss;
  CHECK(aa_gpt_forward(m, inputs, targets, &loss) == 0 && aa_gpt_backward(m, 1.0f) == 0);
  size_t ws = mem.cur[AA_MEM_WORKSPACE], total = mem.total, peak = mem.peak_total;
  fake_scratch = 3 << 20; /* grown by the next pass */
  CHECK(aa_gpt_forward(m, inputs, targets, &loss) == 0);
  CHECK(mem.cur[AA_MEM_WORKSPACE] == ws + (3 << 20) && mem.total == total + (3 << 20));
  CHECK(mem.peak_total == peak + (3 << 20));
  CHECK(aa_gpt_backward(m, 1.0f) == 0); /* not grown: not counted again */
  CHECK(mem.cur[AA_MEM_WORKSPACE] == ws + (3 << 20));
  fake_scratch = 5 << 20; /* grows again: only the growth is added */
  CHECK(aa_gpt_forward(m, inputs, targets, &loss) == 0);
  CHECK(mem.cur[AA_MEM_WORKSPACE] == ws + (5 << 20));
  aa_gpt_free(m);
  CHECK_MSG(mem.total == 0, "%zu bytes still accounted", mem.total);

  /* Past the limit: the pass fails as out of memory, naming the scratch. */
  aa_mem_init(&mem, 0);
  fake_scratch = 0;
  m = NULL;
  CHECK(aa_gpt_create(&m, &arch, &ops, TB, TT, &o) == 0);
  if (!m) return;
  aa_gpt_init_weights(m, 5);
  mem.limit = mem.total + (1 << 20);
  fake_scratch = (1 << 20) + 1;
  int rc = aa_gpt_forward(m, inputs, targets, &loss);
  CHECK(rc == AA_EOOM);
  CHECK_MSG(strstr(aa_last_error(), "cpu backend's scratch: out of memory: 1.0 MiB of workspace") != NULL, "%s",
            aa_last_error());
  fake_scratch = 1 << 20; /* exactly at the limit fits */
  CHECK(aa_gpt_forward(m, inputs, targets, &loss) == 0);
  CHECK(mem.total == mem.limit);
  aa_gpt_free(m);
  CHECK(mem.total == 0);
  fake_scratch = 0;
}

int main(void) {
  make_tokens();
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_knobs_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", tmpdir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", tmpdir);
  if (aa_data_synth(train_bin, val_bin, 200000, 0.1, 42)) {
    fprintf(stderr, "synth: %s\n", aa_last_error());
    return 1;
  }
  RUN(checkpoint_modes_give_bit_identical_gradients);
  RUN(checkpoint_modes_reduce_accounted_activation_memory);
  RUN(amp_stores_parameters_and_activations_in_16_bits);
  RUN(amp_rounds_but_stays_close_to_fp32);
  RUN(accumulated_micro_batches_equal_one_big_batch);
  RUN(training_with_micro_batches_matches_one_batch);
  RUN(amp_training_follows_fp32);
  RUN(fp16_overflow_skips_steps_and_lowers_the_scale);
  RUN(fp16_resume_with_micro_batches_is_bit_identical);
  RUN(nonfinite_gradients_skip_or_fail_without_touching_parameters);
  RUN(memory_limit_fails_cleanly_one_byte_below_the_peak);
  RUN(backend_scratch_is_accounted_as_workspace);
  RUN(fused_fc_ops_give_the_plain_ops_gradients);
  RUN(clip_folded_into_adamw_gives_the_plain_update);
  RUN(invalid_strategy_is_refused_with_the_rule);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
  return aa_test_summary();
}
