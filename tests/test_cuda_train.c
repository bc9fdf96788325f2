/* Training on the CUDA backend against the CPU backend: the same spec, seed
 * and data through aa_train with device "cpu" and "cuda:0". Without a GPU
 * (no CUDA build, no driver, no device) every test reports
 * "skipped: no GPU: <reason>" and the program exits 0.
 *
 * Tolerances. fp32: both backends compute the same math in fp32 but sum
 * GEMMs and reductions in different orders (OpenBLAS blocks vs cuBLAS
 * tiles, thread partitions vs warp trees), so each op differs by a few fp32
 * ulps (test_cuda_ops bounds GEMMs at 1e-4 relative, elementwise at 1e-5).
 * Over a handful of AdamW steps those differences move the weights by about
 * lr * 1e-6 and the loss by far less than 1e-4 relative, which is the bound
 * (TOL_F32). bf16 storage: every activation is rounded to bf16 (8-bit
 * mantissa, ulp 2^-8 = 3.9e-3 relative); an fp32 difference of 1e-6 flips
 * the rounding of a few elements by one ulp, and the mean loss over B*T
 * tokens averages those flips, so losses agree to a fraction of one ulp:
 * the bound is 2e-3 relative (TOL_BF16, half a bf16 ulp). The CUDA kernels
 * are deterministic (fixed reduction order, no atomics in the engine's
 * ops), so two CUDA runs must give bit-identical losses.
 *
 *   test_cuda_train        the dense model (ctest test_cuda_train)
 *   test_cuda_train lora   LoRA fine-tunes (ctest test_cuda_train_lora,
 *                          scripts/gpu-check.sh's lora_train): gpt2 fp32 and
 *                          bf16, llama fp32, and the frozen base's bits and
 *                          the adapters' gradient after one pass
 *   test_cuda_train moe    the same checks on a llama with MoE layers (ctest
 *                          test_cuda_train_moe, scripts/gpu-check.sh's
 *                          moe_train): Mixtral's routing with a shared
 *                          expert, and Qwen-MoE's raw top-k and gated
 *                          shared expert with a capacity factor, in fp32
 *                          at TOL_F32. The MoE
 *                          block computes in fp32 on both backends (never
 *                          16-bit GEMM inputs: engine/model.c moe_forward;
 *                          TF32 off, the default), so its GEMMs differ by the same
 *                          few ulps as the dense ones; the routing compares
 *                          logits, so a token whose k-th and (k+1)-th
 *                          logits are within those ulps could pick another
 *                          expert on one backend (its slot's output then
 *                          differs outright): with 1,024 routed tokens a
 *                          step and logit gaps of order 0.1 this is rare,
 *                          and the test prints each step's pair to tell it
 *                          from a bug. The gradients are checked against
 *                          PyTorch on CUDA by test_reference moe cuda. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aa_test.h"
#include "common/aa.h"
#include "common/spec.h"
#include "engine/checkpoint.h"
#include "engine/data.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "engine/train.h"
#include "kernels/moe_ops.h"
#include "strategies/strategy.h"

#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#define STEPS 8
#define TOL_F32 1e-4
#define TOL_BF16 2e-3

static char tmpdir[256];
static char train_bin[512], val_bin[512];
static int gpu_ok;
static char gpu_reason[512];
static const char *moe_json; /* the model's "moe" object, NULL for the dense model */
static int llama;            /* the dense model as a llama (RMSNorm, SwiGLU) */
static const char *lora_base; /* a LoRA fine-tune of this base checkpoint, NULL for full training */

#define NEED_GPU()                                                                                          \
  do {                                                                                                      \
    if (!gpu_ok) SKIP("no GPU: %s", gpu_reason);                                                            \
  } while (0)

/* A small model whose GEMMs are still large enough to tile on the GPU;
 * with moe_json a llama whose blocks are MoE blocks. */
static void small_spec(aa_model_spec_t *s) {
  char json[2048], model[512] = "", lora[768] = "";
  if (moe_json)
    snprintf(model, sizeof model, "\"family\": \"llama\", \"n_kv_head\": 2, \"moe\": %s, ", moe_json);
  else if (llama)
    snprintf(model, sizeof model, "\"family\": \"llama\", \"n_kv_head\": 2, ");
  if (lora_base)
    snprintf(lora, sizeof lora,
             "\"init_weights\": \"%s\", \"lora\": {\"r\": 4, \"alpha\": 8, \"targets\": %s}, ", lora_base,
             llama ? "[\"q\", \"k\", \"v\", \"o\", \"gate\", \"up\", \"down\"]"
                   : "[\"qkv\", \"proj\", \"fc\", \"fcproj\"]");
  snprintf(
      json, sizeof json,
      "{\"name\": \"t\", %s\"model\": {%s\"n_layer\": 2, \"n_head\": 4, \"d_model\": 64, \"d_ff\": 256, "
      "\"seq_len\": 64, \"vocab_size\": 256}, \"train\": {\"global_batch\": 4, \"steps\": %d, \"lr\": 0.003, "
      "\"warmup_steps\": 2, \"eval_every\": 0, \"eval_batches\": 2, \"checkpoint_every\": 0, \"seed\": 7}, "
      "\"data\": {\"train\": \"%s\", \"val\": \"%s\"}}",
      lora, model, STEPS, train_bin, val_bin);
  int rc = aa_spec_parse(s, json, NULL, "test");
  if (rc) fprintf(stderr, "spec: %s\n", aa_last_error());
  CHECK(rc == 0);
}

/* Trains on device into tmpdir/<tag>, reading the per-step losses back
 * into losses[STEPS]. Returns aa_train's code. */
static int run(const char *device, aa_dtype_t amp, const char *tag, int ckpt_every, const char *resume,
               float *losses, aa_train_result_t *res) {
  aa_model_spec_t s;
  small_spec(&s);
  aa_strategy_t st;
  aa_strategy_default(&st);
  st.amp = amp;
  char dir[512], lpath[600];
  snprintf(dir, sizeof dir, "%s/%s", tmpdir, tag);
  snprintf(lpath, sizeof lpath, "%s/%s.losses", tmpdir, tag);
  FILE *log = fopen("/dev/null", "w");
  aa_train_opts_t o = {.threads = 2, .checkpoint_every = ckpt_every, .log_every = 100, .out_dir = dir,
                       .losses_path = lpath, .log = log, .strategy = &st, .device = device, .resume = resume};
  int rc = aa_train(&s, &o, res);
  fclose(log);
  if (rc) {
    fprintf(stderr, "  %s on %s: %s\n", tag, device, aa_last_error());
    return rc;
  }
  FILE *f = fopen(lpath, "r");
  if (!f) return AA_EIO;
  int step;
  float l;
  while (fscanf(f, "%d %f", &step, &l) == 2)
    if (step >= 1 && step <= STEPS) losses[step - 1] = l;
  fclose(f);
  return 0;
}

/* The worst relative loss difference, printed with every step's pair. */
static double compare(const char *what, const float *cpu, const float *gpu) {
  double worst = 0;
  for (int i = 0; i < STEPS; i++) {
    double rel = fabs((double)cpu[i] - gpu[i]) / fabs((double)cpu[i]);
    if (rel > worst) worst = rel;
  }
  fprintf(stderr, "  %s: cpu %.7f -> %.7f, cuda %.7f -> %.7f, max relative difference %.3g\n", what, cpu[0],
          cpu[STEPS - 1], gpu[0], gpu[STEPS - 1], worst);
  return worst;
}

/* peak: whether the accountant's peaks must be equal (the MoE block's
 * routing maps and scratch live in backend memory on CUDA, which the
 * accountant does not see the same way: they are printed instead). */
static void matches_cpu_peak(aa_dtype_t amp, double tol, const char *name, int peak) {
  float cpu[STEPS] = {0}, gpu[STEPS] = {0}, again[STEPS] = {0};
  char a[64], b[64], c[64];
  snprintf(a, sizeof a, "%s_cpu", name);
  snprintf(b, sizeof b, "%s_cuda", name);
  snprintf(c, sizeof c, "%s_cuda2", name);
  aa_train_result_t rc_, rg;
  CHECK(run("cpu", amp, a, 0, NULL, cpu, &rc_) == 0);
  CHECK(run("cuda:0", amp, b, 0, NULL, gpu, &rg) == 0);
  CHECK(run("cuda:0", amp, c, 0, NULL, again, NULL) == 0);
  double worst = compare(name, cpu, gpu);
  CHECK_MSG(worst <= tol, "%s: losses differ by %.3g relative (tolerance %.1g)", name, worst, tol);
  CHECK_MSG(fabs(rc_.val_loss - rg.val_loss) <= tol * fabs(rc_.val_loss), "%s: val loss cpu %.7f cuda %.7f", name,
            rc_.val_loss, rg.val_loss);
  CHECK_MSG(!memcmp(gpu, again, sizeof gpu), "%s: two CUDA runs gave different losses", name);
  /* The accountant sees the same bytes whichever backend provides them. */
  if (peak)
    CHECK(rc_.mem.peak_total == rg.mem.peak_total);
  else
    fprintf(stderr, "  %s: peak memory cpu %zu bytes, cuda %zu bytes\n", name, (size_t)rc_.mem.peak_total,
            (size_t)rg.mem.peak_total);
}

static void matches_cpu(aa_dtype_t amp, double tol, const char *name) { matches_cpu_peak(amp, tol, name, 1); }

/* Mixtral's block: top-2 of 4 experts renormalised, one shared expert,
 * the aux and z losses, dropless. */
AA_TEST(moe_training_matches_cpu_and_is_deterministic) {
  NEED_GPU();
  moe_json = "{\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 64, \"shared_experts\": 1, \"aux_loss_coef\": "
             "0.01, \"z_loss_coef\": 0.001}";
  matches_cpu_peak(AA_F32, TOL_F32, "moe_fp32", 0);
}

/* Qwen-MoE's block: raw top-k (norm_topk_prob false), a shared expert
 * behind its sigmoid gate, with a capacity factor that drops slots (the
 * same ones on both backends: the counting sort keeps token order), every
 * other block an MoE block. */
AA_TEST(moe_qwen_gate_raw_topk_with_capacity_matches_cpu) {
  NEED_GPU();
  moe_json =
      "{\"experts\": 4, \"top_k\": 2, \"d_ff_expert\": 64, \"shared_experts\": 1, "
      "\"shared_expert_gate\": true, \"norm_topk_prob\": false, \"capacity_factor\": 1.0, \"every\": 2, "
      "\"aux_loss_coef\": 0.01, \"z_loss_coef\": 0.001}";
  matches_cpu_peak(AA_F32, TOL_F32, "moe_qwen", 0);
}

/* The CUDA backend's MoE table has every op, so the engine refuses no MoE
 * option on it (engine/model.c moe_supported): this one runs without a GPU
 * too. */
#ifdef AA_HAVE_CUDA
AA_TEST(moe_cuda_table_is_complete) {
  const aa_moe_ops_t *t = aa_ops_cuda()->moe;
  CHECK(t == &aa__cuda_moe_ops);
  if (!t) return;
  const void *ops[] = {(const void *)t->route_alloc,
                       (const void *)t->route_free,
                       (const void *)t->router_forward,
                       (const void *)t->route,
                       (const void *)t->permute,
                       (const void *)t->permute_backward,
                       (const void *)t->unpermute,
                       (const void *)t->unpermute_backward,
                       (const void *)t->experts_forward,
                       (const void *)t->experts_backward,
                       (const void *)t->shared_forward,
                       (const void *)t->shared_backward,
                       (const void *)t->shared_gate_forward,
                       (const void *)t->shared_gate_backward,
                       (const void *)t->losses,
                       (const void *)t->router_backward};
  _Static_assert(sizeof ops == sizeof *t, "every entry of aa_moe_ops_t is listed");
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    CHECK_MSG(ops[i] != NULL, "entry %zu is NULL", i);
}
#endif

AA_TEST(fp32_training_matches_cpu_and_is_deterministic) {
  NEED_GPU();
  matches_cpu(AA_F32, TOL_F32, "fp32");
}

AA_TEST(bf16_training_matches_cpu_and_is_deterministic) {
  NEED_GPU();
  matches_cpu(AA_BF16, TOL_BF16, "bf16");
}

/* A CUDA checkpoint (downloaded in chunks) resumes on CUDA bit-identically
 * and loads on the CPU. */
AA_TEST(cuda_checkpoint_resumes_bit_identically_and_loads_on_cpu) {
  NEED_GPU();
  float full[STEPS] = {0}, resumed[STEPS] = {0};
  CHECK(run("cuda:0", AA_F32, "ck_full", 4, NULL, full, NULL) == 0);
  char ckpt[600];
  snprintf(ckpt, sizeof ckpt, "%s/ck_full/step_000004.ckpt", tmpdir);
  CHECK(run("cuda:0", AA_F32, "ck_resumed", 0, ckpt, resumed, NULL) == 0);
  CHECK_MSG(!memcmp(full + 4, resumed + 4, sizeof(float) * (STEPS - 4)), "resumed losses differ");
  aa_model_spec_t s;
  small_spec(&s);
  aa_gpt_t *m = NULL;
  aa_adamw_t opt;
  aa_train_state_t st;
  CHECK(aa_gpt_create(&m, &s.arch, aa_ops_cpu(), 1, 8, NULL) == 0);
  CHECK(aa_adamw_init(&opt, m->n_params, NULL) == 0);
  CHECK_MSG(aa_ckpt_load(ckpt, m, &opt, &st) == 0, "%s", aa_last_error());
  CHECK(st.step == 4);
  aa_adamw_free(&opt);
  aa_gpt_free(m);
}

#ifdef AA_HAVE_CUDA
/* cudaMalloc failing is AA_EOOM with a message, not an abort, and leaves
 * the backend usable. */
AA_TEST(cuda_out_of_memory_is_an_error) {
  NEED_GPU();
  /* 38.7G parameters: 155 GB of fp32 weights, more than any one GPU. */
  aa_model_spec_t s;
  small_spec(&s);
  s.arch.n_layer = 48;
  s.arch.n_head = 64;
  s.arch.d_model = 8192;
  s.arch.d_ff = 32768;
  s.arch.seq_len = 1024;
  s.arch.vocab_size = 50304;
  CHECK(aa_cuda_init(0) == 0);
  aa_gpt_t *m = NULL;
  int rc = aa_gpt_create(&m, &s.arch, aa_ops_cuda(), 1, 1024, NULL);
  CHECK_MSG(rc == AA_EOOM && strstr(aa_last_error(), "out of memory on cuda:0"), "rc %d: %s", rc,
            aa_last_error());
  fprintf(stderr, "  %s\n", aa_last_error());
  CHECK(m == NULL);
  CHECK(aa_cuda_sync() == 0);
  aa_cuda_shutdown();
  float l[STEPS];
  CHECK(run("cuda:0", AA_F32, "after_oom", 0, NULL, l, NULL) == 0);
}
#endif

/* Asking for a GPU this process cannot use fails with a message. */
AA_TEST(unusable_device_fails_cleanly) {
  aa_model_spec_t s;
  small_spec(&s);
  FILE *log = fopen("/dev/null", "w");
  aa_train_opts_t o = {.threads = 1, .checkpoint_every = -1, .log_every = 100, .out_dir = tmpdir, .log = log,
                       .device = "cuda:999"};
  int rc = aa_train(&s, &o, NULL);
  fclose(log);
  CHECK(rc < 0 && strstr(aa_last_error(), "cuda:999"));
  fprintf(stderr, "  %s\n", aa_last_error());
  o.device = "tpu";
  log = fopen("/dev/null", "w");
  o.log = log;
  CHECK(aa_train(&s, &o, NULL) == AA_EINVAL && strstr(aa_last_error(), "unknown device"));
  fclose(log);
}

/* --- LoRA (test_cuda_train lora) ---------------------------------------------------------
 * A fine-tune trains the adapters alone over a frozen base (engine/model.c
 * lora_forward/lora_backward; the kernels skip the base's NULL weight
 * gradients). The base: 8 CPU steps of the full model, its step-4
 * checkpoint. The losses of a few fine-tuning steps on cuda:0 must match
 * the CPU's within the full model's tolerances (the same ops, the same
 * reasons), two CUDA runs bit for bit. */
static char lora_ckpt[2][600]; /* the gpt2 and the llama base */

static int lora_use_base(void) {
  char *path = lora_ckpt[llama];
  if (!path[0]) {
    float l[STEPS];
    char tag[32];
    snprintf(tag, sizeof tag, "lora_base%d", llama);
    lora_base = NULL;
    int rc = run("cpu", AA_F32, tag, 4, NULL, l, NULL);
    if (rc) return rc;
    snprintf(path, sizeof lora_ckpt[0], "%s/%s/step_000004.ckpt", tmpdir, tag);
  }
  lora_base = path;
  return 0;
}

AA_TEST(lora_fp32_fine_tune_matches_cpu_and_is_deterministic) {
  NEED_GPU();
  llama = 0;
  CHECK(lora_use_base() == 0);
  matches_cpu(AA_F32, TOL_F32, "lora_fp32");
  lora_base = NULL;
}

/* bf16: the base is held in bf16 alone (no fp32 master), rounded on load
 * (engine/lora.c cast_base, through a device buffer on CUDA). */
AA_TEST(lora_bf16_fine_tune_matches_cpu_and_is_deterministic) {
  NEED_GPU();
  llama = 0;
  CHECK(lora_use_base() == 0);
  matches_cpu(AA_BF16, TOL_BF16, "lora_bf16");
  lora_base = NULL;
}

/* The llama's targets and its RMSNorm's skipped weight gradient. */
AA_TEST(lora_llama_fine_tune_matches_cpu_and_is_deterministic) {
  NEED_GPU();
  llama = 1;
  CHECK(lora_use_base() == 0);
  matches_cpu(AA_F32, TOL_F32, "lora_llama_fp32");
  lora_base = NULL;
  llama = 0;
}

#ifdef AA_HAVE_CUDA
/* What the cuda backend does not train adapters with is refused by name
 * before anything is allocated: ZeRO over them (aa_gpt_create checks the
 * options first, so this runs without a GPU). */
AA_TEST(lora_cuda_refuses_zero_by_name) {
  lora_base = "/nonexistent/base.ckpt"; /* parsed, not read */
  aa_model_spec_t s;
  small_spec(&s);
  lora_base = NULL;
  CHECK(s.arch.lora.r == 4);
  aa_gpt_t *m = NULL;
  aa_gpt_opts_t o = {.zero = 1, .amp = AA_F32};
  CHECK(aa_gpt_create(&m, &s.arch, aa_ops_cuda(), 1, 8, &o) == AA_EUNSUPPORTED);
  CHECK(m == NULL);
  CHECK_MSG(strstr(aa_last_error(), "ZeRO over the adapters on the cuda backend") != NULL, "%s",
            aa_last_error());
}

/* One forward and backward of the fine-tune on ops (cuda already
 * initialised): the loss, the whole adapters' gradient (host, n) and
 * whether the base's parameters hold the same bits after the pass as
 * after loading. Returns 0 or the first failure. */
static int lora_pass(const aa_ops_t *ops, const aa_model_spec_t *s, const int32_t *in, const int32_t *tg,
                     int B, int T, float *loss, float *grad, int *base_same) {
  aa_gpt_t *m = NULL;
  float *before = NULL, *after = NULL;
  int rc = aa_gpt_create(&m, &s->arch, ops, B, T, NULL);
  if (!rc) rc = aa_gpt_lora_load_base(m, s->init_weights);
  if (!rc) rc = aa_gpt_lora_init(m, 9);
  const size_t n = rc ? 0 : m->params.numel;
  if (!rc && (!(before = malloc(n * sizeof *before)) || !(after = malloc(n * sizeof *after)))) rc = AA_ENOMEM;
  if (!rc) rc = ops->download(before, m->params.data, n * sizeof *before);
  if (!rc) {
    aa_gpt_lora_zero_grad(m);
    rc = aa_gpt_forward(m, in, tg, loss);
  }
  if (!rc) rc = aa_gpt_backward(m, 1.0f);
  if (!rc) rc = ops->download(after, m->params.data, n * sizeof *after);
  if (!rc) rc = aa_gpt_lora_get(m, m->lora_grads.data, grad);
  if (!rc) *base_same = n > 0 && !memcmp(before, after, n * sizeof *before);
  if (rc) fprintf(stderr, "  lora pass on %s: %s\n", ops->name, aa_last_error());
  free(before);
  free(after);
  aa_gpt_free(m);
  return rc;
}

/* The frozen base on cuda:0 keeps its bits through a backward (no weight
 * gradient is written anywhere: the model has no gradient buffer for it,
 * and the kernels must not write through the NULL they get), and the
 * adapters' gradient matches the CPU's. Tolerance: test_cuda_ops bounds a
 * GEMM at 1e-4 relative; the adapters' gradient is a handful of GEMMs and
 * norm backwards deep in this two-block model, so its elements agree to
 * 1e-3 of the largest one (10x one GEMM's bound). B starts at zero
 * (PEFT's init), so A's gradient is exactly zero on both backends and B's
 * carries the comparison; it must not be zero. */
AA_TEST(lora_cuda_base_frozen_and_adapter_gradient_matches_cpu) {
  NEED_GPU();
  llama = 0;
  CHECK(lora_use_base() == 0);
  aa_model_spec_t s;
  small_spec(&s);
  lora_base = NULL;
  const int B = 2, T = 64, N = B * T;
  int32_t in[2 * 64], tg[2 * 64];
  for (int i = 0; i < N; i++) {
    in[i] = (int32_t)((i * 37 + 11) % 256);
    tg[i] = (int32_t)((i * 53 + 5) % 256);
  }
  const size_t n = aa_gpt_lora_whole_numel(&s.arch);
  float *gc = calloc(n, sizeof *gc), *gg = calloc(n, sizeof *gg), lc = 0, lg = 0;
  int same_c = 0, same_g = 0;
  CHECK(gc && gg);
  if (!gc || !gg) goto done;
  CHECK(lora_pass(aa_ops_cpu(), &s, in, tg, B, T, &lc, gc, &same_c) == 0);
  CHECK_MSG(aa_cuda_init(0) == 0, "%s", aa_last_error());
  CHECK(lora_pass(aa_ops_cuda(), &s, in, tg, B, T, &lg, gg, &same_g) == 0);
  aa_cuda_shutdown();
  CHECK_MSG(same_c && same_g, "the base changed in a backward (cpu %d, cuda %d)", same_c, same_g);
  double top = 0, diff = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(gc[i]) > top) top = fabs(gc[i]);
    if (fabs((double)gc[i] - gg[i]) > diff) diff = fabs((double)gc[i] - gg[i]);
  }
  fprintf(stderr, "  lora pass: loss cpu %.7f cuda %.7f, adapter gradient max %.3g, max difference %.3g\n",
          lc, lg, top, diff);
  CHECK_MSG(fabs((double)lc - lg) <= TOL_F32 * fabs((double)lc), "loss cpu %.7f cuda %.7f", lc, lg);
  CHECK_MSG(top > 0, "the adapters got no gradient");
  CHECK_MSG(diff <= 1e-3 * top, "adapter gradients differ by %.3g (largest %.3g)", diff, top);
done:
  free(gc);
  free(gg);
}
#endif

int main(int argc, char **argv) {
  const int moe = argc > 1 && !strcmp(argv[1], "moe"), lora = argc > 1 && !strcmp(argv[1], "lora");
  if (argc > 2 || (argc == 2 && !moe && !lora)) {
    fprintf(stderr, "usage: test_cuda_train [moe|lora]\n");
    return 2;
  }
#ifdef AA_HAVE_CUDA
  int n = 0;
  if (aa_cuda_device_count(&n)) snprintf(gpu_reason, sizeof gpu_reason, "%s", aa_last_error());
  else if (n < 1) snprintf(gpu_reason, sizeof gpu_reason, "no CUDA device found");
  else gpu_ok = 1;
#else
  snprintf(gpu_reason, sizeof gpu_reason, "built without CUDA (AUTOACCEL_CUDA=off or no nvcc)");
#endif
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_test_cuda_train_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  snprintf(train_bin, sizeof train_bin, "%s/train.bin", tmpdir);
  snprintf(val_bin, sizeof val_bin, "%s/val.bin", tmpdir);
  if (aa_data_synth(train_bin, val_bin, 200000, 0.1, 42)) {
    fprintf(stderr, "synth: %s\n", aa_last_error());
    return 1;
  }
  if (moe) {
    RUN(moe_training_matches_cpu_and_is_deterministic);
    RUN(moe_qwen_gate_raw_topk_with_capacity_matches_cpu);
#ifdef AA_HAVE_CUDA
    RUN(moe_cuda_table_is_complete);
#endif
  } else if (lora) {
    RUN(lora_fp32_fine_tune_matches_cpu_and_is_deterministic);
    RUN(lora_bf16_fine_tune_matches_cpu_and_is_deterministic);
    RUN(lora_llama_fine_tune_matches_cpu_and_is_deterministic);
#ifdef AA_HAVE_CUDA
    RUN(lora_cuda_refuses_zero_by_name);
    RUN(lora_cuda_base_frozen_and_adapter_gradient_matches_cpu);
#endif
  } else {
    RUN(fp32_training_matches_cpu_and_is_deterministic);
    RUN(bf16_training_matches_cpu_and_is_deterministic);
    RUN(cuda_checkpoint_resumes_bit_identically_and_loads_on_cpu);
#ifdef AA_HAVE_CUDA
    RUN(cuda_out_of_memory_is_an_error);
#endif
    RUN(unusable_device_fails_cleanly);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpdir);
  return aa_test_summary();
}
