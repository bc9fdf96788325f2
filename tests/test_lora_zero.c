/* ZeRO and fp16 over LoRA adapters (issue 36; engine/lora.h): data
 * parallel ranks at ZeRO 1, 2 and 3 train the adapters as one process does
 * over the same global batch, every rank's allocations are the cost
 * model's (strategies/sizes.h aa_sizes_lora) kind by kind to the byte, and
 * fp16 with loss scaling follows fp32, an overflowing step changing
 * nothing.
 *
 * The model is a small llama with adapters on q, v and down, its base and
 * adapters drawn from fixed seeds (B made non-zero so that A trains from
 * the first step). Tolerances are stated where they are checked. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "aa_gang.h"
#include "aa_test.h"
#include "comm/comm.h"
#include "common/mem.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "strategies/cost.h"

enum { B = 1, T = 8, MICRO = 6, STEPS = 10 }; /* 6 micro-batches a step: dp1 x 6, dp2 x 3, dp3 x 2 */

static aa_arch_t arch(void) {
  aa_arch_t a = {.n_layer = 2,
                 .n_head = 2,
                 .n_kv_head = 2,
                 .d_model = 32,
                 .d_ff = 64,
                 .seq_len = T,
                 .vocab_size = 64,
                 .rope_theta = 10000.0f,
                 .norm_eps = 1e-5f};
  snprintf(a.family, sizeof a.family, "llama");
  /* r 4: 2 blocks x 4 (32 + 32 + 32 + 32 + 64 + 32) = 1,792 adapters, so
   * a group of 3 leaves a tail (1,792 mod 3 = 1) for every rank to hold. */
  a.lora = (aa_lora_t){.r = 4, .alpha = 8, .targets = 1u << AA_LORA_Q | 1u << AA_LORA_V | 1u << AA_LORA_DOWN};
  return a;
}

static const aa_train_cfg_t cfg = {
    .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .grad_clip = 1.0f};

/* Micro-batch k (0 .. MICRO - 1) of step s: fixed pseudo-random tokens. */
static void batch(int s, int k, int32_t *in, int32_t *tg) {
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(1 + s * MICRO + k);
  for (int i = 0; i <= B * T; i++) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    const int32_t tok = (int32_t)((x * 0x2545f4914f6cdd1dull) >> 58); /* 0 .. 63 */
    if (i < B * T) in[i] = tok;
    if (i > 0) tg[i - 1] = tok;
  }
}

/* A model at ZeRO `zero` and precision amp with the fixed base and
 * adapters (fp32 base rounded into the 16-bit copy under amp). */
static aa_gpt_t *model(int zero, aa_dtype_t amp, aa_mem_t *mem) {
  const aa_arch_t a = arch();
  aa_arch_t base = a;
  memset(&base.lora, 0, sizeof base.lora);
  aa_gpt_t *f = NULL, *m = NULL;
  aa_gpt_opts_t fo = {.amp = AA_F32}, o = {.amp = amp, .zero = zero, .mem = mem};
  int rc = aa_gpt_create(&f, &base, aa_ops_cpu(), B, T, &fo);
  if (!rc) rc = aa_gpt_init_weights(f, 7);
  if (!rc) rc = aa_gpt_create(&m, &a, aa_ops_cpu(), B, T, &o);
  if (!rc && amp == AA_F32) memcpy(m->params.data, f->params.data, f->n_params * sizeof(float));
  if (!rc && amp != AA_F32) m->ops->cast_from_f32(m->params16.data, amp, f->params.data, f->n_params);
  if (!rc) rc = aa_gpt_lora_init(m, 11);
  aa_gpt_free(f);
  CHECK_MSG(rc == 0, "model: %s", aa_last_error());
  if (rc) {
    aa_gpt_free(m);
    return NULL;
  }
  /* PEFT's B is zero; a drawn B makes A's gradient non-zero at once. */
  float *p = m->lora.data;
  for (int l = 0; l < a.n_layer; l++)
    for (int t = 0; t < AA_LORA_NTARGETS; t++) {
      if (!(a.lora.targets >> t & 1)) continue;
      int in, out, row;
      aa_lora_shape(&a, t, 1, &in, &out, &row);
      float *Bm = p + aa_gpt_lora_offset(&a, l, t) + (size_t)a.lora.r * in;
      for (int i = 0; i < out * a.lora.r; i++)
        Bm[i] = 0.02f * (float)((i * 37 + l * 11 + t) % 19 - 9) / 9.0f;
    }
  aa_gpt_params_changed(m);
  return m;
}

/* STEPS steps of rank `rank` of `world` (its MICRO / world micro-batches
 * of each step) as the trainer runs them (engine/train.c train_step), at
 * loss scale `scale` with fp16's overflow skip; the step losses (this
 * rank's mean) into losses when not NULL. */
static int train(aa_gpt_t *m, aa_lora_opt_t *o, int rank, int world, double scale, float *losses) {
  const int accum = MICRO / world;
  int32_t in[B * T], tg[B * T];
  for (int s = 0; s < STEPS; s++) {
    float sum = 0, l = 0;
    aa_lora_zero_grad(o, m);
    for (int k = 0; k < accum; k++) {
      batch(s, rank * accum + k, in, tg);
      int rc = aa_gpt_forward(m, in, tg, &l);
      if (!rc) rc = aa_gpt_backward(m, (float)(scale / accum));
      if (!rc) rc = aa_lora_reduce(o, m, k == accum - 1);
      if (rc) return rc;
      sum += l;
    }
    int rc = aa_lora_step(o, m, &cfg, cfg.lr, scale, 1, NULL);
    if (rc) return rc < 0 ? rc : AA_EINTERNAL; /* no step here overflows */
    if (losses) losses[s] = sum / accum;
  }
  return 0;
}

/* The layouts the ranks run, and where they leave their adapters. */
typedef struct {
  int world, zero;
  aa_dtype_t amp;
  float *out; /* shared with the parent: world x the adapters */
  size_t n;
} layout_t;

static int rank_main(const char *rdv, int rank, const void *data) {
  const layout_t *L = data;
  aa_comm_t *comm = NULL;
  aa_mem_t mem;
  aa_mem_init(&mem, 0);
  aa_gpt_t *m = NULL;
  aa_lora_opt_t o = {0};
  aa_ops_cpu()->set_threads(1); /* ranks share the cores */
  int rc = aa_comm_init(&comm, rdv, rank, L->world, NULL), bad = 0;
  if (!rc && !(m = model(L->zero, L->amp, &mem))) rc = AA_EINTERNAL;
  if (!rc) rc = aa_lora_opt_init_zero(&o, m, comm, L->zero, &mem);
  if (!rc) rc = aa_lora_opt_take(&o, m);
  if (!rc) {
    /* Every kind the cost model's for this layout, to the byte. */
    aa_arch_t a = arch();
    aa_strategy_t s;
    aa_strategy_default(&s);
    s.degree[AA_AXIS_DATA] = L->world;
    s.zero = L->zero;
    s.amp = L->amp;
    s.micro_batch = B;
    aa_cost_mem_t c;
    aa_cost_memory(&a, &s, 1, &c);
    for (int k = 0; k < AA_MEM_NKINDS; k++)
      if (c.bytes[k] != mem.peak[k]) {
        fprintf(stderr, "dp%d z%d rank %d: %s predicted %zu, allocated %zu\n", L->world, L->zero, rank,
                aa_mem_kind_name(k), c.bytes[k], mem.peak[k]);
        bad = 1;
      }
  }
  if (!rc) rc = train(m, &o, rank, L->world, 1.0, NULL);
  if (!rc) memcpy(L->out + (size_t)rank * L->n, m->lora.data, L->n * sizeof(float));
  if (rc) fprintf(stderr, "dp%d z%d rank %d: %s\n", L->world, L->zero, rank, aa_last_error());
  aa_lora_opt_free(&o);
  aa_gpt_free(m);
  aa_comm_destroy(comm);
  return rc || bad;
}

/* Each layout's adapters after STEPS steps against one process's over the
 * same six micro-batches a step: every rank holds the same adapters, bit
 * for bit, and they are within 1e-4 of the largest adapter of one
 * process's (cli_test_lora_cli's dp bound: float32 sums in another order,
 * which AdamW's normalised update magnifies for the smallest gradients;
 * measured below, printed). dp3 leaves a tail of 1 adapter that every rank
 * holds; bf16 at stage 3 keeps the base whole in 16 bits, widened block by
 * block (against one bf16 process). */
AA_TEST(dp_ranks_at_zero_1_2_3_train_as_one_process_and_allocate_what_sizes_says) {
  /* The ranks fork before this process computes anything (a fork after
   * OpenMP's threads started may hang in the child). */
  const size_t n = 1792;
  const int runs[][3] = {{2, 1, AA_F32}, {2, 2, AA_F32}, {2, 3, AA_F32}, {3, 3, AA_F32}, {2, 3, AA_BF16}};
  enum { NRUNS = sizeof runs / sizeof runs[0] };
  layout_t L[NRUNS];
  int ran[NRUNS];
  for (int r = 0; r < NRUNS; r++) {
    L[r] = (layout_t){.world = runs[r][0], .zero = runs[r][1], .amp = (aa_dtype_t)runs[r][2], .n = n};
    L[r].out = mmap(NULL, (size_t)L[r].world * n * sizeof(float), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (L[r].out == MAP_FAILED) abort();
    char what[32];
    snprintf(what, sizeof what, "dp%d z%d %s", L[r].world, L[r].zero, aa_dtype_name(L[r].amp));
    ran[r] = aa_gang_run("test_lora_zero", L[r].world, rank_main, &L[r], what);
  }
  aa_gpt_t *m[2] = {model(0, AA_F32, NULL), model(0, AA_BF16, NULL)};
  aa_lora_opt_t o[2];
  memset(o, 0, sizeof o);
  for (int k = 0; k < 2; k++) {
    CHECK(m[k] && aa_lora_opt_init(&o[k], m[k], NULL) == 0);
    CHECK_MSG(m[k] && train(m[k], &o[k], 0, 1, 1.0, NULL) == 0, "one process: %s", aa_last_error());
    CHECK(m[k] && m[k]->lora.numel == n && n % 3 == 1);
  }
  for (int r = 0; r < NRUNS; r++) {
    const aa_gpt_t *one = m[L[r].amp != AA_F32];
    const float *want = one ? one->lora.data : NULL;
    double big = 0;
    for (size_t i = 0; want && i < n; i++)
      big = fmax(big, fabs(want[i]));
    char what[32];
    snprintf(what, sizeof what, "dp%d z%d %s", L[r].world, L[r].zero, aa_dtype_name(L[r].amp));
    if (want && ran[r]) {
      double worst = 0;
      for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(L[r].out[i] - want[i]));
      int same = 1;
      for (int k = 1; k < L[r].world; k++)
        same &= !memcmp(L[r].out, L[r].out + (size_t)k * n, n * sizeof(float));
      fprintf(stderr, "  %s: adapters within %.3g of one process's (largest %.3g)\n", what, worst, big);
      CHECK_MSG(same, "%s: the ranks' adapters differ", what);
      CHECK_MSG(worst <= 1e-4 * big, "%s: adapters %.3g from one process's", what, worst);
    }
    munmap(L[r].out, (size_t)L[r].world * n * sizeof(float));
  }
  for (int k = 0; k < 2; k++) {
    aa_lora_opt_free(&o[k]);
    aa_gpt_free(m[k]);
  }
}

/* fp16: the base rounded to fp16 and the activations kept in 16 bits, the
 * adapters and their math fp32, the loss scaled by 1024 and the gradient
 * unscaled before AdamW. Its step losses follow fp32's within 1e-4
 * relative: a fifth of one fp16 rounding (2^-11 = 4.9e-4), as the
 * roundings of the base and of the kept activations average out over the
 * sums (measured 5e-6, printed; a loss scale that failed to be undone
 * would be off by a factor, a skipped step by far more). */
AA_TEST(fp16_with_loss_scaling_follows_fp32) {
  float l32[STEPS], l16[STEPS];
  aa_gpt_t *m = model(0, AA_F32, NULL), *h = model(0, AA_F16, NULL);
  aa_lora_opt_t o, oh;
  if (!m || !h) goto out;
  CHECK(h->params.data == NULL && h->params16.dtype == AA_F16);
  CHECK(aa_lora_opt_init(&o, m, NULL) == 0 && aa_lora_opt_init(&oh, h, NULL) == 0);
  CHECK(train(m, &o, 0, 1, 1.0, l32) == 0);
  CHECK_MSG(train(h, &oh, 0, 1, 1024.0, l16) == 0, "fp16: %s", aa_last_error());
  double worst = 0;
  for (int s = 0; s < STEPS; s++)
    worst = fmax(worst, fabs(l16[s] - l32[s]) / fabs(l32[s]));
  fprintf(stderr, "  fp16: step losses within %.2g relative of fp32's\n", worst);
  CHECK(worst <= 1e-4 && worst > 0);
  aa_lora_opt_free(&o);
  aa_lora_opt_free(&oh);
out:
  aa_gpt_free(m);
  aa_gpt_free(h);
}

/* A loss scale that overflows the gradient (fp32's largest, 3.4e38, times
 * the loss's slope is infinite) skips the step as aa_zero_step does in full
 * training: aa_lora_step returns 1, reports the non-finite norm, and the
 * adapters, the moments and the step count are unchanged bit for bit; the
 * next step at a sane scale updates them. Without the skip it is an error. */
AA_TEST(an_overflowing_fp16_step_is_skipped_and_changes_nothing) {
  aa_gpt_t *m = model(0, AA_F16, NULL);
  if (!m) return;
  aa_lora_opt_t o;
  CHECK(aa_lora_opt_init(&o, m, NULL) == 0);
  const size_t n = m->lora.numel;
  float *before = malloc(3 * n * sizeof *before), norm = 0;
  if (!before) abort();
  int32_t in[B * T], tg[B * T];
  batch(0, 0, in, tg);
  CHECK(train(m, &o, 0, 1, 1024.0, NULL) == 0); /* moments non-zero */
  memcpy(before, m->lora.data, n * sizeof(float));
  memcpy(before + n, o.m.data, n * sizeof(float));
  memcpy(before + 2 * n, o.v.data, n * sizeof(float));
  aa_lora_zero_grad(&o, m);
  CHECK(aa_gpt_forward(m, in, tg, NULL) == 0 && aa_gpt_backward(m, 3.4e38f) == 0);
  CHECK(aa_lora_reduce(&o, m, 1) == 0);
  CHECK(aa_lora_step(&o, m, &cfg, cfg.lr, 3.4e38, 0, &norm) == AA_EINVAL);
  CHECK(aa_lora_step(&o, m, &cfg, cfg.lr, 3.4e38, 1, &norm) == 1 && !isfinite(norm));
  CHECK(o.t == STEPS && !memcmp(before, m->lora.data, n * sizeof(float)) &&
        !memcmp(before + n, o.m.data, n * sizeof(float)) &&
        !memcmp(before + 2 * n, o.v.data, n * sizeof(float)));
  aa_lora_zero_grad(&o, m);
  CHECK(aa_gpt_forward(m, in, tg, NULL) == 0 && aa_gpt_backward(m, 1024.0f) == 0);
  CHECK(aa_lora_step(&o, m, &cfg, cfg.lr, 1024.0, 1, &norm) == 0 && isfinite(norm) && o.t == STEPS + 1);
  CHECK(memcmp(before, m->lora.data, n * sizeof(float)));
  free(before);
  aa_lora_opt_free(&o);
  aa_gpt_free(m);
}

/* The optimizer's contract: a stage above 0 needs the data group, and the
 * model must be built for the stage it runs. */
AA_TEST(a_stage_without_its_group_or_model_is_refused) {
  aa_gpt_t *m = model(1, AA_F32, NULL);
  if (!m) return;
  aa_lora_opt_t o;
  CHECK(aa_lora_opt_init_zero(&o, m, NULL, 1, NULL) == AA_EINVAL && strstr(aa_last_error(), "data group"));
  CHECK(aa_lora_opt_init(&o, m, NULL) == AA_EINVAL && strstr(aa_last_error(), "built for ZeRO stage 1"));
  aa_gpt_free(m);
}

int main(void) {
  RUN(dp_ranks_at_zero_1_2_3_train_as_one_process_and_allocate_what_sizes_says);
  RUN(fp16_with_loss_scaling_follows_fp32);
  RUN(an_overflowing_fp16_step_is_skipped_and_changes_nothing);
  RUN(a_stage_without_its_group_or_model_is_refused);
  return aa_test_summary();
}
