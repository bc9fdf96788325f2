/* The CUDA op table (kernels/cuda) against the CPU reference backend: every
 * op runs on the same random inputs on both (odd sizes: B=2, T=7 and 33,
 * C=48, NH=3, V=67), the GPU results are copied back and compared, and each
 * CUDA op is run twice on identical inputs to check bit-for-bit determinism.
 *
 * Tolerances, and why:
 *  - exact: encoder forward (one add), encoder backward (the GPU walks
 *    positions in the CPU's order), residual/accumulate/scale (one IEEE op),
 *    the 16-bit casts (the same integer algorithm);
 *  - 1e-5 per element relative (with a floor of 1e-6 * max|ref| for values
 *    near 0): LayerNorm forward, softmax CE. These are a few fp32 ops per
 *    element; the GPU may fuse a multiply-add and its expf differs from the
 *    CPU's polynomial by an ulp or two;
 *  - GELU: 1e-5 relative plus an absolute term for the cancellation in
 *    1 + tanh (see the test);
 *  - AdamW over 10 steps: 1e-6 relative to max|x| (m cancels when the
 *    gradient's sign flips, so per-element relative error is meaningless);
 *  - 1e-4 relative to max|ref|: GEMM-based ops (matmul, attention) and
 *    reductions over rows (LayerNorm backward): the sums run in a different
 *    order, so each output carries ~sqrt(K) ulps of the largest terms;
 *  - 1e-12 relative: sum_squares (double accumulation in fixed slices).
 * The llama ops follow the same classes: RMSNorm and SwiGLU forward per
 * element; their backwards, RoPE (fused multiply-adds), GQA attention and
 * the decode step relative to max|ref|; the KV caches exact. Ring
 * attention's block ops: forward and backward relative to max|ref| (1e-4,
 * GEMM-like sums), merge and delta to 1e-5 of max|ref| (a few fp32 ops per
 * element, but the merge's weighted sum and delta's row sum may cancel, so
 * per-element relative error is meaningless there).
 * Measured maxima are printed for each check.
 *
 * Without a CUDA build or a GPU every test reports "skipped: no GPU: ..." and
 * the executable exits 0: the build alone proves the CUDA code compiles. */
#include "aa_ops_test.h"
#include "aa_test.h"
#include "common/aa.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef AA_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_moe.h"
#endif

#ifndef AA_HAVE_CUDA

AA_TEST(cuda_ops_match_cpu) { SKIP("no GPU: built without CUDA (AUTOACCEL_CUDA=off or no nvcc)"); }

int main(void) {
  RUN(cuda_ops_match_cpu);
  return aa_test_summary();
}

#else

#define TOL_ELEM 1e-5
#define TOL_GEMM 1e-4

static const aa_ops_t *cpu, *gpu;
static aa_rng_t rng;

/* This file's draws come from rng (tests/aa_ops_test.h). */
#define frand(n, lo, hi) aa_test_frand(&rng, (n), (lo), (hi))
#define irand(n, bound) aa_test_irand(&rng, (n), (bound))
static int gpu_ok;
static char gpu_reason[512];

#define NEED_GPU()                                                                                          \
  do {                                                                                                      \
    if (!gpu_ok) SKIP("no GPU: %s", gpu_reason);                                                            \
  } while (0)

/* ------------------------------------------------------------------ helpers */

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) abort();
  return p;
}



static float *fdup(const float *x, size_t n) {
  float *p = xmalloc(n * sizeof(float));
  memcpy(p, x, n * sizeof(float));
  return p;
}

/* Device copy of a host buffer (aborts the process on failure: a test with
 * no device memory can check nothing). */
static void *dput(const void *h, size_t bytes) {
  void *d = NULL;
  if (aa_cuda_alloc(&d, bytes) || aa_cuda_upload(d, h, bytes)) {
    fprintf(stderr, "  device copy failed: %s\n", aa_last_error());
    abort();
  }
  return d;
}

static void dget(void *h, const void *d, size_t bytes) {
  if (aa_cuda_sync() || aa_cuda_download(h, d, bytes)) {
    fprintf(stderr, "  device read failed: %s\n", aa_cuda_last_error_message());
    abort();
  }
}

static void dset(void *d, const void *h, size_t bytes) {
  if (aa_cuda_upload(d, h, bytes)) abort();
}

static float *dgetf(const float *d, size_t n) {
  float *h = xmalloc(n * sizeof(float));
  dget(h, d, n * sizeof(float));
  return h;
}

static double max_abs(const float *x, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++)
    m = fmax(m, fabs(x[i]));
  return m;
}

/* Max over elements of |got - ref| / (|ref| + 1e-6 max|ref|); NaN counts as
 * infinitely wrong. */
static double err_elem(const float *got, const float *ref, size_t n) {
  double floor = 1e-6 * max_abs(ref, n) + 1e-30, e = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + floor);
    e = d == d ? fmax(e, d) : INFINITY;
  }
  return e;
}

/* max |got - ref| / max|ref|. */
static double err_max(const float *got, const float *ref, size_t n) {
  double e = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - ref[i]);
    e = d == d ? fmax(e, d) : INFINITY;
  }
  return e / (max_abs(ref, n) + 1e-30);
}

#define CHECK_ELEM(name, got, ref, n)                                                                       \
  do {                                                                                                      \
    double e_ = err_elem(got, ref, n);                                                                      \
    fprintf(stderr, "  %-24s max rel err %.3g (tol %g)\n", name, e_, TOL_ELEM);                             \
    CHECK_MSG(e_ <= TOL_ELEM, "%s: %g", name, e_);                                                          \
  } while (0)

#define CHECK_GEMM(name, got, ref, n)                                                                       \
  do {                                                                                                      \
    double e_ = err_max(got, ref, n);                                                                       \
    fprintf(stderr, "  %-24s max err / max|ref| %.3g (tol %g)\n", name, e_, TOL_GEMM);                      \
    CHECK_MSG(e_ <= TOL_GEMM, "%s: %g", name, e_);                                                          \
  } while (0)

#define TOL_ADAM 1e-6
#define CHECK_ADAM(name, got, ref, n)                                                                       \
  do {                                                                                                      \
    double e_ = err_max(got, ref, n);                                                                       \
    fprintf(stderr, "  %-24s max err / max|ref| %.3g (tol %g)\n", name, e_, TOL_ADAM);                      \
    CHECK_MSG(e_ <= TOL_ADAM, "%s: %g", name, e_);                                                          \
  } while (0)

#define CHECK_EXACT(name, got, ref, bytes)                                                                  \
  do {                                                                                                      \
    int same_ = memcmp(got, ref, bytes) == 0;                                                               \
    fprintf(stderr, "  %-24s %s\n", name, same_ ? "bit-identical" : "DIFFERS");                             \
    CHECK_MSG(same_, "%s differs from the CPU", name);                                                      \
  } while (0)

/* Runs the statement in the variadic part (which writes the device buffer dout of `bytes`) twice from the
 * same initial contents `init` and checks the two results are identical. */
#define CHECK_DETERMINISTIC(name, dout, init, bytes, ...)                                                  \
  do {                                                                                                      \
    void *r1_ = xmalloc(bytes), *r2_ = xmalloc(bytes);                                                      \
    dset(dout, init, bytes);                                                                                \
    __VA_ARGS__;                                                                                            \
    dget(r1_, dout, bytes);                                                                                 \
    dset(dout, init, bytes);                                                                                \
    __VA_ARGS__;                                                                                            \
    dget(r2_, dout, bytes);                                                                                 \
    CHECK_MSG(memcmp(r1_, r2_, bytes) == 0, "%s: two runs differ", name);                                   \
    free(r1_);                                                                                              \
    free(r2_);                                                                                              \
  } while (0)

/* -------------------------------------------------------------------- tests */

AA_TEST(device_info_reports_the_gpu) {
  NEED_GPU();
  aa_cuda_device_info_t info;
  CHECK(aa_cuda_device_info(0, &info) == 0);
  fprintf(stderr, "  %s: %d SMs, cc %d.%d, %.1f GiB, %d MHz, est. peak bf16 %.0f TFLOP/s\n", info.name,
          info.sm_count, info.cc_major, info.cc_minor, info.total_mem / 1073741824.0, info.clock_khz / 1000,
          info.peak_bf16_flops / 1e12);
  CHECK(info.sm_count > 0 && info.total_mem > 0 && info.clock_khz > 0);
  if ((info.cc_major == 9 || info.cc_major == 8) && info.cc_minor == 0) CHECK(info.peak_bf16_flops > 1e14);
  aa_cuda_device_info_t untouched = info;
  CHECK(aa_cuda_device_info(-1, &untouched) == AA_EINVAL);
  CHECK(memcmp(&untouched, &info, sizeof info) == 0);
}

AA_TEST(errors_are_sticky_until_cleared) {
  NEED_GPU();
  void *p = NULL;
  CHECK(aa_cuda_last_error() == 0);
  CHECK(aa_cuda_alloc(&p, (size_t)1 << 60) == AA_EOOM);
  CHECK(p == NULL);
  CHECK(aa_cuda_last_error() == AA_EOOM);
  CHECK(strstr(aa_cuda_last_error_message(), "cuda_context.cu") != NULL);
  /* Later successful ops neither clear nor replace it. */
  float h = 1.0f;
  float *d = dput(&h, sizeof h);
  gpu->scale(d, 2.0f, 1);
  CHECK(aa_cuda_sync() == AA_EOOM);
  CHECK(aa_cuda_download(&h, d, sizeof h) == 0);
  CHECK(h == 2.0f);
  aa_cuda_clear_error();
  CHECK(aa_cuda_sync() == 0);
  CHECK(aa_cuda_last_error_message()[0] == '\0');
  aa_cuda_free(d);
}

AA_TEST(encoder_matches_cpu_exactly) {
  NEED_GPU();
  const int B = 2, V = 67, C = 48;
  for (int T = 7; T <= 33; T += 26) {
    size_t N = (size_t)B * T;
    /* Few distinct tokens, so rows of dwte collect several positions. */
    int32_t *inp = irand(N, 5);
    inp[3] = 66;
    float *wte = frand((size_t)V * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1);
    float *dout = frand(N * C, -1, 1), *dwte = frand((size_t)V * C, -1, 1), *dwpe = frand((size_t)T * C, -1, 1);
    float *out = xmalloc(N * C * sizeof(float));
    int32_t *d_inp = dput(inp, N * sizeof(int32_t));
    float *d_wte = dput(wte, (size_t)V * C * 4), *d_wpe = dput(wpe, (size_t)T * C * 4);
    float *d_out = dput(out, N * C * 4), *d_dout = dput(dout, N * C * 4);
    float *d_dwte = dput(dwte, (size_t)V * C * 4), *d_dwpe = dput(dwpe, (size_t)T * C * 4);

    cpu->encoder_forward(out, inp, wte, wpe, B, T, C);
    gpu->encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C);
    float *g = dgetf(d_out, N * C);
    CHECK_EXACT("encoder_forward", g, out, N * C * 4);
    free(g);

    float *dwte0 = fdup(dwte, (size_t)V * C), *dwpe0 = fdup(dwpe, (size_t)T * C);
    cpu->encoder_backward(dwte, dwpe, dout, inp, B, T, C);
    gpu->encoder_backward(d_dwte, d_dwpe, d_dout, d_inp, B, T, C);
    float *gte = dgetf(d_dwte, (size_t)V * C), *gpe = dgetf(d_dwpe, (size_t)T * C);
    CHECK_EXACT("encoder_backward dwte", gte, dwte, (size_t)V * C * 4);
    CHECK_EXACT("encoder_backward dwpe", gpe, dwpe, (size_t)T * C * 4);
    CHECK_DETERMINISTIC("encoder_backward", d_dwte, dwte0, (size_t)V * C * 4,
                        gpu->encoder_backward(d_dwte, d_dwpe, d_dout, d_inp, B, T, C));
    free(gte), free(gpe), free(dwte0), free(dwpe0);
    free(inp), free(wte), free(wpe), free(dout), free(dwte), free(dwpe), free(out);
    aa_cuda_free(d_inp), aa_cuda_free(d_wte), aa_cuda_free(d_wpe), aa_cuda_free(d_out), aa_cuda_free(d_dout);
    aa_cuda_free(d_dwte), aa_cuda_free(d_dwpe);
  }
}

AA_TEST(layernorm_matches_cpu) {
  NEED_GPU();
  const int N = 66, C = 48;
  size_t nc = (size_t)N * C;
  float *inp = frand(nc, -2, 3), *w = frand(C, 0.5f, 1.5f), *b = frand(C, -0.5f, 0.5f);
  float *out = xmalloc(nc * 4), *mean = xmalloc(N * 4), *rstd = xmalloc(N * 4);
  float *dout = frand(nc, -1, 1), *dinp = frand(nc, -1, 1), *dw = frand(C, -1, 1), *db = frand(C, -1, 1);
  float *d_inp = dput(inp, nc * 4), *d_w = dput(w, C * 4), *d_b = dput(b, C * 4);
  float *d_out = dput(out, nc * 4), *d_mean = dput(mean, N * 4), *d_rstd = dput(rstd, N * 4);
  float *d_dout = dput(dout, nc * 4), *d_dinp = dput(dinp, nc * 4), *d_dw = dput(dw, C * 4), *d_db = dput(db, C * 4);
  float *dinp0 = fdup(dinp, nc);

  cpu->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  gpu->layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
  float *g = dgetf(d_out, nc), *gm = dgetf(d_mean, N), *gr = dgetf(d_rstd, N);
  CHECK_ELEM("layernorm_forward out", g, out, nc);
  CHECK_ELEM("layernorm_forward mean", gm, mean, N);
  CHECK_ELEM("layernorm_forward rstd", gr, rstd, N);
  /* Backward reads the CPU's statistics on both sides. */
  dset(d_mean, mean, N * 4);
  dset(d_rstd, rstd, N * 4);
  cpu->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  gpu->layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
  float *gdi = dgetf(d_dinp, nc), *gdw = dgetf(d_dw, C), *gdb = dgetf(d_db, C);
  CHECK_GEMM("layernorm_backward dinp", gdi, dinp, nc);
  CHECK_GEMM("layernorm_backward dweight", gdw, dw, C);
  CHECK_GEMM("layernorm_backward dbias", gdb, db, C);
  CHECK_DETERMINISTIC("layernorm_forward", d_out, out, nc * 4,
                      gpu->layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C));
  CHECK_DETERMINISTIC("layernorm_backward", d_dinp, dinp0, nc * 4,
                      gpu->layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C));
  free(g), free(gm), free(gr), free(gdi), free(gdw), free(gdb), free(dinp0);
  free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dinp), free(dw), free(db);
  aa_cuda_free(d_inp), aa_cuda_free(d_w), aa_cuda_free(d_b), aa_cuda_free(d_out), aa_cuda_free(d_mean);
  aa_cuda_free(d_rstd), aa_cuda_free(d_dout), aa_cuda_free(d_dinp), aa_cuda_free(d_dw), aa_cuda_free(d_db);
}

/* One matmul shape, with and without bias. `shift` offsets every device
 * pointer by that many floats, as tensors carved out of one arena are. */
/* in16 = AA_BF16 / AA_F16: the inputs are rounded to that type first, as
 * the engine's amp path does, and the GPU is told so (set_gemm_inputs), so
 * it multiplies on 16-bit tensor cores; the CPU reference stays fp32. The
 * products are then exact in fp32 on both sides and only the summation
 * order differs: the same GEMM tolerance holds. */
static void matmul_case16(int N, int C, int OC, int with_bias, int shift, aa_dtype_t in16) {
  size_t nc = (size_t)N * C, no = (size_t)N * OC, oc = (size_t)OC * C;
  float *inp = frand(nc, -1, 1), *w = frand(oc, -1, 1), *bias = with_bias ? frand(OC, -1, 1) : NULL;
  float *out = xmalloc(no * 4), *dout = frand(no, -1, 1);
  float *dinp = frand(nc, -1, 1), *dw = frand(oc, -1, 1), *db = frand(OC, -1, 1);
  float *dinp0 = fdup(dinp, nc), *dw0 = fdup(dw, oc);
  if (in16 != AA_F32) {
    cpu->round_store(NULL, inp, in16, nc);
    cpu->round_store(NULL, w, in16, oc);
    cpu->round_store(NULL, dout, in16, no);
  }
  gpu->set_gemm_inputs(in16);
  size_t total = nc + oc + OC + no + no + nc + oc + OC + 8 * (size_t)shift;
  float *arena;
  if (aa_cuda_alloc((void **)&arena, total * 4)) abort();
  float *p = arena + shift;
  float *d_inp = p;
  float *d_w = (p += nc) + shift;
  float *d_b = (p = d_w + oc) + shift;
  float *d_out = (p = d_b + OC) + shift;
  float *d_dout = (p = d_out + no) + shift;
  float *d_dinp = (p = d_dout + no) + shift;
  float *d_dw = (p = d_dinp + nc) + shift;
  float *d_db = (p = d_dw + oc) + shift;
  dset(d_inp, inp, nc * 4), dset(d_w, w, oc * 4), dset(d_dout, dout, no * 4);
  dset(d_dinp, dinp, nc * 4), dset(d_dw, dw, oc * 4), dset(d_db, db, OC * 4);
  if (bias) dset(d_b, bias, OC * 4);

  char name[64];
  cpu->matmul_forward(out, inp, w, bias, N, C, OC);
  gpu->matmul_forward(d_out, d_inp, d_w, bias ? d_b : NULL, N, C, OC);
  float *g = dgetf(d_out, no);
  const char *ty = in16 == AA_BF16 ? " bf16" : in16 == AA_F16 ? " fp16" : "";
  snprintf(name, sizeof name, "matmul_fwd%s %dx%dx%d%s", ty, N, C, OC, bias ? "+b" : "");
  CHECK_GEMM(name, g, out, no);
  cpu->matmul_backward(dinp, dw, bias ? db : NULL, dout, inp, w, N, C, OC);
  gpu->matmul_backward(d_dinp, d_dw, bias ? d_db : NULL, d_dout, d_inp, d_w, N, C, OC);
  float *gdi = dgetf(d_dinp, nc), *gdw = dgetf(d_dw, oc), *gdb = dgetf(d_db, OC);
  snprintf(name, sizeof name, "matmul_bwd%s dinp %dx%d", ty, N, C);
  CHECK_GEMM(name, gdi, dinp, nc);
  snprintf(name, sizeof name, "matmul_bwd%s dweight %dx%d", ty, OC, C);
  CHECK_GEMM(name, gdw, dw, oc);
  if (bias) CHECK_GEMM("matmul_bwd dbias", gdb, db, OC);
  CHECK_DETERMINISTIC("matmul_forward", d_out, out, no * 4,
                      gpu->matmul_forward(d_out, d_inp, d_w, bias ? d_b : NULL, N, C, OC));
  CHECK_DETERMINISTIC("matmul_backward", d_dw, dw0, oc * 4, {
    dset(d_dinp, dinp0, nc * 4);
    gpu->matmul_backward(d_dinp, d_dw, bias ? d_db : NULL, d_dout, d_inp, d_w, N, C, OC);
  });
  gpu->set_gemm_inputs(AA_F32);
  free(g), free(gdi), free(gdw), free(gdb), free(dinp0), free(dw0);
  free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw), free(db);
  aa_cuda_free(arena);
}

static void matmul_case(int N, int C, int OC, int with_bias, int shift) {
  matmul_case16(N, C, OC, with_bias, shift, AA_F32);
}

AA_TEST(matmul_matches_cpu) {
  NEED_GPU();
  matmul_case(14, 48, 67, 1, 0);
  matmul_case(66, 48, 144, 1, 0);
  matmul_case(66, 48, 192, 0, 0);
  matmul_case(66, 192, 48, 1, 1); /* 4-byte aligned operands */
  matmul_case(257, 96, 203, 1, 3);
}

AA_TEST(matmul_on_16bit_inputs_matches_cpu) {
  NEED_GPU();
  for (aa_dtype_t t = AA_BF16; t <= AA_F16; t = (aa_dtype_t)(t + 1)) {
    matmul_case16(66, 48, 144, 1, 0, t);
    matmul_case16(66, 192, 48, 1, 1, t); /* 4-byte aligned fp32 operands and output */
    matmul_case16(257, 96, 203, 0, 3, t);
  }
}

/* Both implementations (cuBLAS GEMMs, flash kernels) on the shapes: T = 7
 * (one partial tile), 33 and 100 (several 16-row and 32-key tiles, the last
 * partial); hs = 16 (lanes past hs idle) and hs = 80 (three head dimensions
 * per lane, the last partial). */
AA_TEST(attention_matches_cpu) {
  NEED_GPU();
  const int B = 2, shapes[][3] = {{7, 48, 3}, {33, 48, 3}, {100, 48, 3}, {33, 160, 2}};
  for (size_t si = 0; si < 2 * sizeof shapes / sizeof *shapes; si++) {
    int flash = si % 2;
    aa_cuda_set_attention(flash ? AA_CUDA_ATT_FLASH : AA_CUDA_ATT_GEMM);
    int T = shapes[si / 2][0], C = shapes[si / 2][1], NH = shapes[si / 2][2];
    size_t btc = (size_t)B * T * C, lse_n = (size_t)B * NH * T;
    float *qkv = frand(3 * btc, -2, 2), *out = xmalloc(btc * 4), *lse = xmalloc(lse_n * 4);
    float *dout = frand(btc, -1, 1), *dqkv = frand(3 * btc, -1, 1), *dqkv0 = fdup(dqkv, 3 * btc);
    float *poison = frand(lse_n, 5, 6); /* every element of lse must be written */
    float *d_qkv = dput(qkv, 3 * btc * 4), *d_out = dput(out, btc * 4), *d_lse = dput(poison, lse_n * 4);
    free(poison);
    float *d_dout = dput(dout, btc * 4), *d_dqkv = dput(dqkv, 3 * btc * 4);
    cpu->attention_forward(out, lse, qkv, B, T, C, NH);
    gpu->attention_forward(d_out, d_lse, d_qkv, B, T, C, NH);
    float *g = dgetf(d_out, btc), *gl = dgetf(d_lse, lse_n);
    fprintf(stderr, "  %s T=%d C=%d NH=%d\n", flash ? "flash" : "gemm", T, C, NH);
    CHECK_GEMM("attention_forward out", g, out, btc);
    CHECK_GEMM("attention_forward lse", gl, lse, lse_n);
    /* Backward from the CPU's logsumexp on both sides. */
    dset(d_lse, lse, lse_n * 4);
    cpu->attention_backward(dqkv, dout, qkv, lse, B, T, C, NH);
    gpu->attention_backward(d_dqkv, d_dout, d_qkv, d_lse, B, T, C, NH);
    float *gd = dgetf(d_dqkv, 3 * btc);
    CHECK_GEMM("attention_backward dqkv", gd, dqkv, 3 * btc);
    CHECK_DETERMINISTIC("attention_forward", d_out, out, btc * 4,
                        gpu->attention_forward(d_out, d_lse, d_qkv, B, T, C, NH));
    dset(d_lse, lse, lse_n * 4);
    CHECK_DETERMINISTIC("attention_backward", d_dqkv, dqkv0, 3 * btc * 4,
                        gpu->attention_backward(d_dqkv, d_dout, d_qkv, d_lse, B, T, C, NH));
    free(g), free(gl), free(gd), free(qkv), free(out), free(lse), free(dout), free(dqkv), free(dqkv0);
    aa_cuda_free(d_qkv), aa_cuda_free(d_out), aa_cuda_free(d_lse), aa_cuda_free(d_dout), aa_cuda_free(d_dqkv);
  }
  aa_cuda_set_attention(AA_CUDA_ATT_AUTO);
}

AA_TEST(elementwise_ops_match_cpu) {
  NEED_GPU();
  const size_t n = 10007;
  float *x = frand(n, -5, 5), *y = frand(n, -3, 3), *dout = frand(n, -1, 1), *acc = frand(n, -1, 1);
  float *d_x = dput(x, n * 4), *d_y = dput(y, n * 4), *d_dout = dput(dout, n * 4), *d_acc = dput(acc, n * 4);
  float *out = xmalloc(n * 4), *d_out = dput(x, n * 4);
  float *acc0 = fdup(acc, n);

  cpu->gelu_forward(out, x, n);
  gpu->gelu_forward(d_out, d_x, n);
  float *g = dgetf(d_out, n);
  /* GELU's 1 + tanh(u) cancels in the negative tail: both backends' tanh is
   * good to ~1e-7 absolute, which becomes 0.5|x| * 1e-7 in out and, through
   * 0.5 x (1 - th^2) du, ~2|x|^3 * 1e-7 * |dout| in the gradient. The bound
   * is 1e-5 relative plus those absolute terms with a 2x margin (measured on
   * an H100: 0.44 and 0.12 of the bounds). */
  double worst_f = 0.0, worst_b = 0.0;
  for (size_t i = 0; i < n; i++) {
    double ax = fabs(x[i]);
    worst_f = fmax(worst_f, fabs(g[i] - out[i]) / (TOL_ELEM * fabs(out[i]) + 2e-7 * ax + 1e-30));
  }
  fprintf(stderr, "  %-24s max err / bound %.3g (bound 1e-5|ref| + 2e-7|x|)\n", "gelu_forward", worst_f);
  CHECK(worst_f <= 1.0);
  free(g);
  cpu->gelu_backward(acc, x, dout, n);
  gpu->gelu_backward(d_acc, d_x, d_dout, n);
  g = dgetf(d_acc, n);
  for (size_t i = 0; i < n; i++) {
    double ax = fabs(x[i]);
    double bound = TOL_ELEM * fabs(acc[i]) + 4e-7 * (1.0 + ax * ax * ax) * fabs(dout[i]) + 1e-30;
    worst_b = fmax(worst_b, fabs(g[i] - acc[i]) / bound);
  }
  fprintf(stderr, "  %-24s max err / bound %.3g (bound 1e-5|ref| + 4e-7(1+|x|^3)|dout|)\n", "gelu_backward",
          worst_b);
  CHECK(worst_b <= 1.0);
  free(g);
  CHECK_DETERMINISTIC("gelu_backward", d_acc, acc0, n * 4, gpu->gelu_backward(d_acc, d_x, d_dout, n));

  cpu->residual_forward(out, x, y, n);
  gpu->residual_forward(d_out, d_x, d_y, n);
  g = dgetf(d_out, n);
  CHECK_EXACT("residual_forward", g, out, n * 4);
  free(g);
  /* In place: out aliases a. */
  float *xc = fdup(x, n);
  cpu->residual_forward(xc, xc, y, n);
  float *d_xc = dput(x, n * 4);
  gpu->residual_forward(d_xc, d_xc, d_y, n);
  g = dgetf(d_xc, n);
  CHECK_EXACT("residual_forward in place", g, xc, n * 4);
  free(g);
  dset(d_acc, acc0, n * 4);
  memcpy(acc, acc0, n * 4);
  cpu->accumulate(acc, x, n);
  gpu->accumulate(d_acc, d_x, n);
  g = dgetf(d_acc, n);
  CHECK_EXACT("accumulate", g, acc, n * 4);
  free(g);
  cpu->scale(acc, 0.37f, n);
  gpu->scale(d_acc, 0.37f, n);
  g = dgetf(d_acc, n);
  CHECK_EXACT("scale", g, acc, n * 4);
  free(g);

  double s_cpu = cpu->sum_squares(x, n), s_gpu = gpu->sum_squares(d_x, n), s_gpu2 = gpu->sum_squares(d_x, n);
  fprintf(stderr, "  %-24s rel err %.3g (tol 1e-12)\n", "sum_squares", fabs(s_gpu - s_cpu) / s_cpu);
  CHECK(fabs(s_gpu - s_cpu) <= 1e-12 * s_cpu);
  CHECK(memcmp(&s_gpu, &s_gpu2, sizeof s_gpu) == 0);
  CHECK(gpu->sum_squares(d_x, 0) == 0.0);
  CHECK(gpu->sum_squares(d_x, 3) == cpu->sum_squares(x, 3));
  free(x), free(y), free(dout), free(acc), free(out), free(acc0), free(xc);
  aa_cuda_free(d_x), aa_cuda_free(d_y), aa_cuda_free(d_dout), aa_cuda_free(d_acc), aa_cuda_free(d_out);
  aa_cuda_free(d_xc);
}

AA_TEST(crossentropy_matches_cpu) {
  NEED_GPU();
  const int N = 66, V = 67;
  size_t nv = (size_t)N * V;
  float *logits = frand(nv, -8, 8), *probs = xmalloc(nv * 4), *losses = xmalloc(N * 4);
  int32_t *tgt = irand(N, V);
  float *dlog = frand(nv, -1, 1), *dlog0 = fdup(dlog, nv);
  float *d_logits = dput(logits, nv * 4), *d_probs = dput(logits, nv * 4), *d_losses = dput(losses, N * 4);
  int32_t *d_tgt = dput(tgt, N * 4);
  float *d_dlog = dput(dlog, nv * 4);
  const float dloss = 1.0f / N;

  cpu->crossentropy_forward(losses, probs, logits, tgt, N, V);
  gpu->crossentropy_forward(d_losses, d_probs, d_logits, d_tgt, N, V);
  float *gl = dgetf(d_losses, N), *gp = dgetf(d_probs, nv);
  CHECK_ELEM("crossentropy_fwd losses", gl, losses, N);
  CHECK_ELEM("crossentropy_fwd probs", gp, probs, nv);
  dset(d_probs, probs, nv * 4);
  cpu->crossentropy_backward(dlog, probs, tgt, dloss, N, V);
  gpu->crossentropy_backward(d_dlog, d_probs, d_tgt, dloss, N, V);
  float *gd = dgetf(d_dlog, nv);
  CHECK_ELEM("crossentropy_bwd", gd, dlog, nv);
  free(gl), free(gp), free(gd);

  /* In place, as the engine runs it: probs over logits, dlogits over probs. */
  float *inplace = fdup(logits, nv);
  cpu->crossentropy_forward(losses, inplace, inplace, tgt, N, V);
  cpu->crossentropy_backward(inplace, inplace, tgt, dloss, N, V);
  dset(d_probs, logits, nv * 4);
  gpu->crossentropy_forward(d_losses, d_probs, d_probs, d_tgt, N, V);
  gpu->crossentropy_backward(d_probs, d_probs, d_tgt, dloss, N, V);
  gl = dgetf(d_losses, N);
  gd = dgetf(d_probs, nv);
  CHECK_ELEM("crossentropy in place loss", gl, losses, N);
  CHECK_ELEM("crossentropy in place grad", gd, inplace, nv);
  CHECK_DETERMINISTIC("crossentropy_forward", d_probs, logits, nv * 4,
                      gpu->crossentropy_forward(d_losses, d_probs, d_probs, d_tgt, N, V));
  free(gl), free(gd), free(inplace);
  free(logits), free(probs), free(losses), free(tgt), free(dlog), free(dlog0);
  aa_cuda_free(d_logits), aa_cuda_free(d_probs), aa_cuda_free(d_losses), aa_cuda_free(d_tgt);
  aa_cuda_free(d_dlog);
}

/* The vocab-parallel ops for each rank of V = 67 split three ways (23, 23
 * and 21 valid rows or columns of 23, the padding NaN on input) and for a
 * rank with none (lo = V, valid = 0), on the same inputs as the CPU. The
 * embedding is exact as above; the partial's max and target logit are exact
 * and its sum of exps within TOL_ELEM (CUDA's expf against the CPU's); the
 * forward, fed the CPU's parts, and the backward (a fused multiply-add on the
 * GPU) within TOL_ELEM. */
AA_TEST(vocab_ops_match_cpu) {
  NEED_GPU();
  const int B = 2, T = 33, C = 48, V = 67, R = 3, Vl = (V + R - 1) / R, N = B * T;
  const float dloss = 1.0f / N;
  size_t nc = (size_t)N * C, nv = (size_t)N * Vl;
  int32_t *inp = irand(N, V);
  for (int r = 0; r < R; r++)
    inp[r] = r * Vl, inp[R + r] = r * Vl - 1 < 0 ? V - 1 : r * Vl - 1; /* both sides of each boundary */
  float *wte = frand((size_t)Vl * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1), *dout = frand(nc, -1, 1);
  float *logits0 = frand(nv, -8, 8), *logits = fdup(logits0, nv), *dlog0 = frand(nv, -1, 1);
  float *out = xmalloc(nc * 4), *dwte = xmalloc((size_t)Vl * C * 4), *dwpe = xmalloc((size_t)T * C * 4);
  float *parts = xmalloc((size_t)(R + 1) * N * 3 * 4), *losses = xmalloc(N * 4), *probs = xmalloc(nv * 4);
  float *dlog = xmalloc(nv * 4);
  int32_t *d_inp = dput(inp, N * 4);
  float *d_wte = dput(wte, (size_t)Vl * C * 4), *d_wpe = dput(wpe, (size_t)T * C * 4),
        *d_dout = dput(dout, nc * 4);
  float *d_out = dput(out, nc * 4), *d_dwte = dput(wte, (size_t)Vl * C * 4),
        *d_dwpe = dput(wpe, (size_t)T * C * 4);
  float *d_logits = dput(logits, nv * 4), *d_parts = dput(parts, (size_t)(R + 1) * N * 3 * 4);
  float *d_losses = dput(losses, N * 4), *d_probs = dput(logits, nv * 4), *d_dlog = dput(dlog0, nv * 4);
  float *dwte0 = frand((size_t)Vl * C, -1, 1), *dwpe0 = frand((size_t)T * C, -1, 1);
  for (int r = 0; r <= R; r++) {
    /* r == R: a rank past the vocabulary. */
    int lo = r * Vl, valid = V - lo < 0 ? 0 : V - lo > Vl ? Vl : V - lo;
    const float *pe = r == 0 ? wpe : NULL;
    for (size_t i = (size_t)valid * C; i < (size_t)Vl * C; i++)
      wte[i] = NAN;
    dset(d_wte, wte, (size_t)Vl * C * 4);
    cpu->encoder_forward_vocab(out, inp, wte, pe, lo, valid, B, T, C);
    gpu->encoder_forward_vocab(d_out, d_inp, d_wte, r == 0 ? d_wpe : NULL, lo, valid, B, T, C);
    float *g = dgetf(d_out, nc);
    CHECK_EXACT("encoder_forward_vocab", g, out, nc * 4);
    free(g);

    memcpy(dwte, dwte0, (size_t)Vl * C * 4), memcpy(dwpe, dwpe0, (size_t)T * C * 4);
    dset(d_dwte, dwte0, (size_t)Vl * C * 4), dset(d_dwpe, dwpe0, (size_t)T * C * 4);
    cpu->encoder_backward_vocab(dwte, r == 0 ? dwpe : NULL, dout, inp, lo, valid, B, T, C);
    gpu->encoder_backward_vocab(d_dwte, r == 0 ? d_dwpe : NULL, d_dout, d_inp, lo, valid, B, T, C);
    float *gte = dgetf(d_dwte, (size_t)Vl * C), *gpe = dgetf(d_dwpe, (size_t)T * C);
    CHECK_EXACT("encoder_backward_vocab dwte", gte, dwte, (size_t)Vl * C * 4);
    CHECK_EXACT("encoder_backward_vocab dwpe", gpe, dwpe, (size_t)T * C * 4);
    CHECK_DETERMINISTIC("encoder_backward_vocab", d_dwte, dwte0, (size_t)Vl * C * 4,
                        gpu->encoder_backward_vocab(d_dwte, NULL, d_dout, d_inp, lo, valid, B, T, C));
    free(gte), free(gpe);

    for (size_t i = 0; i < nv; i++)
      logits[i] = (int)(i % Vl) < valid ? logits0[i] : NAN;
    dset(d_logits, logits, nv * 4);
    float *part = parts + (size_t)r * N * 3;
    cpu->xent_vocab_partial(part, logits, inp, lo, valid, N, Vl);
    gpu->xent_vocab_partial(d_parts + (size_t)r * N * 3, d_logits, d_inp, lo, valid, N, Vl);
    float *gp = dgetf(d_parts + (size_t)r * N * 3, (size_t)N * 3);
    int exact = 0;
    for (int n = 0; n < N; n++)
      exact += gp[n * 3] == part[n * 3] && gp[n * 3 + 2] == part[n * 3 + 2];
    CHECK_MSG(exact == N, "xent_vocab_partial: %d of %d rows' max and target logit differ", N - exact, N);
    if (valid) {
      float *s_cpu = xmalloc(N * 4), *s_gpu = xmalloc(N * 4);
      for (int n = 0; n < N; n++)
        s_cpu[n] = part[n * 3 + 1], s_gpu[n] = gp[n * 3 + 1];
      CHECK_ELEM("xent_vocab_partial sums", s_gpu, s_cpu, N);
      free(s_cpu), free(s_gpu);
    } else {
      CHECK_EXACT("xent_vocab_partial empty", gp, part, (size_t)N * 3 * 4);
    }
    free(gp);
  }
  /* The forward and backward of rank 1 (valid = Vl) and of the last rank
   * with columns (valid = 21), from the CPU's parts of all four. */
  dset(d_parts, parts, (size_t)(R + 1) * N * 3 * 4);
  for (int r = 1; r < R; r++) {
    int lo = r * Vl, valid = V - lo > Vl ? Vl : V - lo;
    for (size_t i = 0; i < nv; i++)
      logits[i] = (int)(i % Vl) < valid ? logits0[i] : NAN;
    dset(d_logits, logits, nv * 4);
    cpu->xent_vocab_forward(losses, probs, logits, parts, R + 1, valid, N, Vl);
    gpu->xent_vocab_forward(d_losses, d_probs, d_logits, d_parts, R + 1, valid, N, Vl);
    float *gl = dgetf(d_losses, N), *gpr = dgetf(d_probs, nv);
    CHECK_ELEM("xent_vocab_fwd losses", gl, losses, N);
    CHECK_ELEM("xent_vocab_fwd probs", gpr, probs, nv);
    free(gl), free(gpr);
    dset(d_probs, probs, nv * 4);
    memcpy(dlog, dlog0, nv * 4);
    dset(d_dlog, dlog0, nv * 4);
    cpu->xent_vocab_backward(dlog, probs, inp, lo, valid, dloss, N, Vl);
    gpu->xent_vocab_backward(d_dlog, d_probs, d_inp, lo, valid, dloss, N, Vl);
    float *gd = dgetf(d_dlog, nv);
    CHECK_ELEM("xent_vocab_bwd", gd, dlog, nv);
    free(gd);
    /* In place, as the engine runs it. */
    float *inplace = fdup(logits, nv);
    cpu->xent_vocab_forward(losses, inplace, inplace, parts, R + 1, valid, N, Vl);
    cpu->xent_vocab_backward(inplace, inplace, inp, lo, valid, dloss, N, Vl);
    dset(d_probs, logits, nv * 4);
    gpu->xent_vocab_forward(d_losses, d_probs, d_probs, d_parts, R + 1, valid, N, Vl);
    gpu->xent_vocab_backward(d_probs, d_probs, d_inp, lo, valid, dloss, N, Vl);
    gl = dgetf(d_losses, N);
    gd = dgetf(d_probs, nv);
    CHECK_ELEM("xent_vocab in place loss", gl, losses, N);
    CHECK_ELEM("xent_vocab in place grad", gd, inplace, nv);
    CHECK_DETERMINISTIC("xent_vocab_forward", d_probs, logits, nv * 4,
                        gpu->xent_vocab_forward(d_losses, d_probs, d_probs, d_parts, R + 1, valid, N, Vl));
    free(gl), free(gd), free(inplace);
  }
  free(inp), free(wte), free(wpe), free(dout), free(logits0), free(logits), free(dlog0), free(out),
      free(dwte), free(dwpe);
  free(parts), free(losses), free(probs), free(dlog), free(dwte0), free(dwpe0);
  aa_cuda_free(d_inp), aa_cuda_free(d_wte), aa_cuda_free(d_wpe), aa_cuda_free(d_dout), aa_cuda_free(d_out);
  aa_cuda_free(d_dwte), aa_cuda_free(d_dwpe), aa_cuda_free(d_logits), aa_cuda_free(d_parts);
  aa_cuda_free(d_losses), aa_cuda_free(d_probs), aa_cuda_free(d_dlog);
}

AA_TEST(adamw_matches_cpu_over_steps) {
  NEED_GPU();
  const size_t n = 4099;
  float *p = frand(n, -1, 1), *m = xmalloc(n * 4), *v = xmalloc(n * 4);
  memset(m, 0, n * 4), memset(v, 0, n * 4);
  float *d_p = dput(p, n * 4), *d_m = dput(m, n * 4), *d_v = dput(v, n * 4);
  float *d_g = NULL;
  if (aa_cuda_alloc((void **)&d_g, n * 4)) abort();
  for (int t = 1; t <= 10; t++) {
    float *g = frand(n, -0.1f, 0.1f);
    dset(d_g, g, n * 4);
    float wd = t % 2 ? 0.1f : 0.0f;
    cpu->adamw_update(p, g, m, v, n, 3e-3f, 0.9f, 0.95f, 1e-8f, wd, t);
    gpu->adamw_update(d_p, d_g, d_m, d_v, n, 3e-3f, 0.9f, 0.95f, 1e-8f, wd, t);
    free(g);
  }
  float *gp = dgetf(d_p, n), *gm = dgetf(d_m, n), *gv = dgetf(d_v, n);
  /* m = b1 m + (1-b1) g cancels when the gradient's sign flips, and small
   * parameters carry the rounding of the larger update, so the state is
   * compared relative to its largest element: a few fp32 ulps of it. */
  CHECK_ADAM("adamw 10 steps params", gp, p, n);
  CHECK_ADAM("adamw 10 steps m", gm, m, n);
  CHECK_ADAM("adamw 10 steps v", gv, v, n);
  float *g = frand(n, -0.1f, 0.1f);
  dset(d_g, g, n * 4);
  CHECK_DETERMINISTIC("adamw_update", d_p, gp, n * 4, {
    dset(d_m, gm, n * 4);
    dset(d_v, gv, n * 4);
    gpu->adamw_update(d_p, d_g, d_m, d_v, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 11);
  });
  free(g), free(gp), free(gm), free(gv), free(p), free(m), free(v);
  aa_cuda_free(d_p), aa_cuda_free(d_m), aa_cuda_free(d_v), aa_cuda_free(d_g);
}

/* Bit patterns that exercise every rounding path: random bits, ties at both
 * 16-bit spacings, fp16 overflow and subnormals, infinities, NaN payloads. */
static float *cast_inputs(size_t n) {
  float *x = xmalloc(n * sizeof(float));
  static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                     0xff812345u, 0x7f800001u, 0x477fe000u, 0x477ff000u, 0x477fefffu,
                                     0x47800000u, 0x33800000u, 0x33000000u, 0x33000001u, 0x387fc000u,
                                     0x38800000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00000001u};
  size_t ns = sizeof special / sizeof special[0];
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    if (i < ns) {
      u = special[i];
    } else if (i % 3 == 0) {
      u = (uint32_t)aa_rng_u64(&rng);
    } else {
      /* Near the fp16 range, with low bits set to hit the halfway cases. */
      u = (uint32_t)((aa_rng_u64(&rng) % 0x10000000u) + 0x30000000u);
      if (i % 3 == 1) u = (u & ~0x1fffu) | 0x1000u;
    }
    memcpy(&x[i], &u, sizeof u);
  }
  return x;
}

AA_TEST(casts_match_cpu_bit_for_bit) {
  NEED_GPU();
  const size_t n = 100003;
  float *x = cast_inputs(n);
  float *d_x = dput(x, n * 4);
  uint16_t *h = xmalloc(n * 2), *gh = xmalloc(n * 2);
  float *w = xmalloc(n * 4), *d_w;
  uint16_t *d_h;
  if (aa_cuda_alloc((void **)&d_h, n * 2) || aa_cuda_alloc((void **)&d_w, n * 4)) abort();
  static const aa_dtype_t dts[] = {AA_BF16, AA_F16};
  for (int k = 0; k < 2; k++) {
    aa_dtype_t dt = dts[k];
    char name[64];
    cpu->cast_from_f32(h, dt, x, n);
    gpu->cast_from_f32(d_h, dt, d_x, n);
    dget(gh, d_h, n * 2);
    snprintf(name, sizeof name, "cast_from_f32 %s", aa_dtype_name(dt));
    CHECK_EXACT(name, gh, h, n * 2);
    cpu->cast_to_f32(w, h, dt, n);
    gpu->cast_to_f32(d_w, d_h, dt, n);
    float *gw = dgetf(d_w, n);
    snprintf(name, sizeof name, "cast_to_f32 %s", aa_dtype_name(dt));
    CHECK_EXACT(name, gw, w, n * 4);
    free(gw);
    /* round_store with and without the 16-bit copy. */
    float *xr = fdup(x, n);
    cpu->round_store(h, xr, dt, n);
    dset(d_w, x, n * 4);
    gpu->round_store(d_h, d_w, dt, n);
    gw = dgetf(d_w, n);
    dget(gh, d_h, n * 2);
    snprintf(name, sizeof name, "round_store %s", aa_dtype_name(dt));
    CHECK_EXACT(name, gw, xr, n * 4);
    CHECK_EXACT(name, gh, h, n * 2);
    dset(d_w, x, n * 4);
    gpu->round_store(NULL, d_w, dt, n);
    free(gw);
    gw = dgetf(d_w, n);
    CHECK_EXACT("round_store no dst", gw, xr, n * 4);
    free(gw), free(xr);
  }
  /* AA_F32 is the identity. */
  gpu->cast_from_f32(d_w, AA_F32, d_x, n);
  float *gw = dgetf(d_w, n);
  CHECK_EXACT("cast_from_f32 f32", gw, x, n * 4);
  free(gw), free(x), free(h), free(gh), free(w);
  aa_cuda_free(d_x), aa_cuda_free(d_h), aa_cuda_free(d_w);
}

/* ------------------------------------------- one transformer block, chained */

enum { P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB, P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPW, P_FCPB, NP };
enum {
  A_X, A_LN1, A_LN1M, A_LN1R, A_QKV, A_ATTY, A_LSE, A_PROJ, A_RES1, A_LN2, A_LN2M, A_LN2R, A_FCH, A_FCG, A_FCP,
  A_OUT, A_DOUT, A_DRES1, A_DFCG, A_DFCH, A_DLN2, A_DATTY, A_DQKV, A_DLN1, A_DX, NA
};

typedef struct {
  size_t off[NP * 2 + NA]; /* params, their grads, activations */
  size_t size[NP * 2 + NA];
  size_t total;
} block_layout_t;

static void block_layout(block_layout_t *L, int B, int T, int C, int NH) {
  size_t N = (size_t)B * T, c = (size_t)C;
  size_t ps[NP] = {c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c, 4 * c * c, c};
  size_t as[NA] = {N * c, N * c, N, N, 3 * N * c, N * c, (size_t)B * NH * T, N * c, N * c, N * c, N, N,
                   4 * N * c, 4 * N * c, N * c, N * c, N * c, N * c, 4 * N * c, 4 * N * c, N * c, N * c,
                   3 * N * c, N * c, N * c};
  size_t o = 0;
  for (int i = 0; i < NP * 2 + NA; i++) {
    L->size[i] = i < NP ? ps[i] : i < 2 * NP ? ps[i - NP] : as[i - 2 * NP];
    L->off[i] = o;
    o += L->size[i];
  }
  L->total = o;
}

#define PAR(i) (m + L->off[i])
#define GRAD(i) (m + L->off[NP + (i)])
#define ACT(i) (m + L->off[2 * NP + (i)])

/* Forward and backward of a GPT-2 block on the arena m (host or device, to
 * match ops), as the engine chains them; grads and activation gradients
 * must be zero on entry. */
static void block_run(const aa_ops_t *ops, float *m, const block_layout_t *L, int B, int T, int C, int NH) {
  int N = B * T;
  size_t nc = (size_t)N * C;
  ops->layernorm_forward(ACT(A_LN1), ACT(A_LN1M), ACT(A_LN1R), ACT(A_X), PAR(P_LN1W), PAR(P_LN1B), N, C);
  ops->matmul_forward(ACT(A_QKV), ACT(A_LN1), PAR(P_QKVW), PAR(P_QKVB), N, C, 3 * C);
  ops->attention_forward(ACT(A_ATTY), ACT(A_LSE), ACT(A_QKV), B, T, C, NH);
  ops->matmul_forward(ACT(A_PROJ), ACT(A_ATTY), PAR(P_PROJW), PAR(P_PROJB), N, C, C);
  ops->residual_forward(ACT(A_RES1), ACT(A_X), ACT(A_PROJ), nc);
  ops->layernorm_forward(ACT(A_LN2), ACT(A_LN2M), ACT(A_LN2R), ACT(A_RES1), PAR(P_LN2W), PAR(P_LN2B), N, C);
  ops->matmul_forward(ACT(A_FCH), ACT(A_LN2), PAR(P_FCW), PAR(P_FCB), N, C, 4 * C);
  ops->gelu_forward(ACT(A_FCG), ACT(A_FCH), 4 * nc);
  ops->matmul_forward(ACT(A_FCP), ACT(A_FCG), PAR(P_FCPW), PAR(P_FCPB), N, 4 * C, C);
  ops->residual_forward(ACT(A_OUT), ACT(A_RES1), ACT(A_FCP), nc);

  ops->accumulate(ACT(A_DRES1), ACT(A_DOUT), nc);
  ops->matmul_backward(ACT(A_DFCG), GRAD(P_FCPW), GRAD(P_FCPB), ACT(A_DOUT), ACT(A_FCG), PAR(P_FCPW), N, 4 * C, C);
  ops->gelu_backward(ACT(A_DFCH), ACT(A_FCH), ACT(A_DFCG), 4 * nc);
  ops->matmul_backward(ACT(A_DLN2), GRAD(P_FCW), GRAD(P_FCB), ACT(A_DFCH), ACT(A_LN2), PAR(P_FCW), N, C, 4 * C);
  ops->layernorm_backward(ACT(A_DRES1), GRAD(P_LN2W), GRAD(P_LN2B), ACT(A_DLN2), ACT(A_RES1), PAR(P_LN2W),
                          ACT(A_LN2M), ACT(A_LN2R), N, C);
  ops->accumulate(ACT(A_DX), ACT(A_DRES1), nc);
  ops->matmul_backward(ACT(A_DATTY), GRAD(P_PROJW), GRAD(P_PROJB), ACT(A_DRES1), ACT(A_ATTY), PAR(P_PROJW), N, C,
                       C);
  ops->attention_backward(ACT(A_DQKV), ACT(A_DATTY), ACT(A_QKV), ACT(A_LSE), B, T, C, NH);
  ops->matmul_backward(ACT(A_DLN1), GRAD(P_QKVW), GRAD(P_QKVB), ACT(A_DQKV), ACT(A_LN1), PAR(P_QKVW), N, C, 3 * C);
  ops->layernorm_backward(ACT(A_DX), GRAD(P_LN1W), GRAD(P_LN1B), ACT(A_DLN1), ACT(A_X), PAR(P_LN1W), ACT(A_LN1M),
                          ACT(A_LN1R), N, C);
}

AA_TEST(transformer_block_forward_backward_matches_cpu) {
  NEED_GPU();
  const int B = 2, T = 33, C = 48, NH = 3;
  block_layout_t layout, *L = &layout;
  block_layout(L, B, T, C, NH);
  float *m = calloc(L->total, sizeof(float));
  if (!m) abort();
  for (int i = 0; i < NP; i++) {
    float *p = PAR(i);
    int is_ln_w = i == P_LN1W || i == P_LN2W, is_ln_b = i == P_LN1B || i == P_LN2B;
    for (size_t k = 0; k < L->size[i]; k++)
      p[k] = is_ln_w ? 1.0f + 0.1f * aa_rng_normal(&rng) : (is_ln_b ? 0.1f : 0.02f) * aa_rng_normal(&rng);
  }
  for (size_t k = 0; k < L->size[2 * NP + A_X]; k++)
    ACT(A_X)[k] = aa_rng_normal(&rng);
  for (size_t k = 0; k < L->size[2 * NP + A_DOUT]; k++)
    ACT(A_DOUT)[k] = aa_rng_normal(&rng) * 0.01f;
  float *dm = dput(m, L->total * 4);
  block_run(cpu, m, L, B, T, C, NH);
  block_run(gpu, dm, L, B, T, C, NH);
  CHECK(aa_cuda_sync() == 0);
  float *g = dgetf(dm, L->total);
  static const char *pn[NP] = {"ln1.w", "ln1.b", "qkv.w", "qkv.b", "proj.w", "proj.b",
                               "ln2.w", "ln2.b", "fc.w",  "fc.b",  "fcproj.w", "fcproj.b"};
  char name[64];
  CHECK_GEMM("block out", g + L->off[2 * NP + A_OUT], ACT(A_OUT), L->size[2 * NP + A_OUT]);
  CHECK_GEMM("block lse", g + L->off[2 * NP + A_LSE], ACT(A_LSE), L->size[2 * NP + A_LSE]);
  CHECK_GEMM("block dx", g + L->off[2 * NP + A_DX], ACT(A_DX), L->size[2 * NP + A_DX]);
  for (int i = 0; i < NP; i++) {
    snprintf(name, sizeof name, "block d%s", pn[i]);
    CHECK_GEMM(name, g + L->off[NP + i], GRAD(i), L->size[NP + i]);
  }
  /* Determinism of the whole chain: rerun from the same arena. */
  float *m0 = calloc(L->total, sizeof(float));
  if (!m0) abort();
  memcpy(m0, m, L->total * 4);
  for (int i = NP; i < 2 * NP; i++)
    memset(m0 + L->off[i], 0, L->size[i] * 4);
  for (int i = A_DRES1; i < NA; i++)
    memset(m0 + L->off[2 * NP + i], 0, L->size[2 * NP + i] * 4);
  CHECK_DETERMINISTIC("transformer block", dm, m0, L->total * 4, block_run(gpu, dm, L, B, T, C, NH));
  free(g), free(m), free(m0);
  aa_cuda_free(dm);
}

/* ----------------------------------------------------------- llama family */

AA_TEST(rmsnorm_matches_cpu) {
  NEED_GPU();
  const int N = 66, C = 48;
  size_t nc = (size_t)N * C;
  float *inp = frand(nc, -2, 3), *w = frand(C, 0.5f, 1.5f), *out = xmalloc(nc * 4), *rstd = xmalloc(N * 4);
  float *dout = frand(nc, -1, 1), *dinp = frand(nc, -1, 1), *dw = frand(C, -1, 1), *dinp0 = fdup(dinp, nc);
  float *d_inp = dput(inp, nc * 4), *d_w = dput(w, C * 4), *d_out = dput(out, nc * 4),
        *d_rstd = dput(rstd, N * 4);
  float *d_dout = dput(dout, nc * 4), *d_dinp = dput(dinp, nc * 4), *d_dw = dput(dw, C * 4);
  cpu->rmsnorm_forward(out, rstd, inp, w, N, C, 1e-5f);
  gpu->rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C, 1e-5f);
  float *g = dgetf(d_out, nc), *gr = dgetf(d_rstd, N);
  CHECK_ELEM("rmsnorm_forward out", g, out, nc);
  CHECK_ELEM("rmsnorm_forward rstd", gr, rstd, N);
  dset(d_rstd, rstd, N * 4); /* backward from the CPU's statistics on both sides */
  cpu->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  gpu->rmsnorm_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
  float *gdi = dgetf(d_dinp, nc), *gdw = dgetf(d_dw, C);
  CHECK_GEMM("rmsnorm_backward dinp", gdi, dinp, nc);
  CHECK_GEMM("rmsnorm_backward dweight", gdw, dw, C);
  CHECK_DETERMINISTIC("rmsnorm_forward", d_out, out, nc * 4,
                      gpu->rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C, 1e-5f));
  CHECK_DETERMINISTIC("rmsnorm_backward", d_dinp, dinp0, nc * 4,
                      gpu->rmsnorm_backward(d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C));
  free(g), free(gr), free(gdi), free(gdw), free(inp), free(w), free(out), free(rstd), free(dout), free(dinp);
  free(dw), free(dinp0);
  aa_cuda_free(d_inp), aa_cuda_free(d_w), aa_cuda_free(d_out), aa_cuda_free(d_rstd), aa_cuda_free(d_dout);
  aa_cuda_free(d_dinp), aa_cuda_free(d_dw);
}

/* SwiGLU forward is a few fp32 ops per element (TOL_ELEM); the backward
 * adds into a random gradient, where cancellation makes per-element error
 * meaningless, so it is compared relative to max|ref|. */
AA_TEST(swiglu_matches_cpu) {
  NEED_GPU();
  const int N = 33, F = 37;
  size_t nf = (size_t)N * F;
  float *inp = frand(2 * nf, -4, 4), *out = xmalloc(nf * 4), *dout = frand(nf, -1, 1);
  float *dinp = frand(2 * nf, -1, 1), *dinp0 = fdup(dinp, 2 * nf);
  float *d_inp = dput(inp, 2 * nf * 4), *d_out = dput(out, nf * 4), *d_dout = dput(dout, nf * 4);
  float *d_dinp = dput(dinp, 2 * nf * 4);
  cpu->swiglu_forward(out, inp, N, F);
  gpu->swiglu_forward(d_out, d_inp, N, F);
  float *g = dgetf(d_out, nf);
  CHECK_ELEM("swiglu_forward", g, out, nf);
  cpu->swiglu_backward(dinp, inp, dout, N, F);
  gpu->swiglu_backward(d_dinp, d_inp, d_dout, N, F);
  float *gd = dgetf(d_dinp, 2 * nf);
  CHECK_GEMM("swiglu_backward", gd, dinp, 2 * nf);
  CHECK_DETERMINISTIC("swiglu_backward", d_dinp, dinp0, 2 * nf * 4,
                      gpu->swiglu_backward(d_dinp, d_inp, d_dout, N, F));
  free(g), free(gd), free(inp), free(out), free(dout), free(dinp), free(dinp0);
  aa_cuda_free(d_inp), aa_cuda_free(d_out), aa_cuda_free(d_dout), aa_cuda_free(d_dinp);
}

/* Both sides take cos and sin of the same double angle and round them to
 * float; the GPU may fuse the multiply-adds, so the rotated values agree to
 * an ulp or two of max|x| (checked relative to it). v stays bit-identical. */
AA_TEST(rope_matches_cpu) {
  NEED_GPU();
  const int B = 2, T = 33, NH = 6, NKV = 2, HS = 10, pos0 = 500, W = (NH + 2 * NKV) * HS;
  size_t n = (size_t)B * T * W;
  float *x = frand(n, -1, 1), *y = fdup(x, n), *d_x = dput(x, n * 4);
  cpu->rope_forward(y, B, T, NH, NKV, HS, pos0, 10000.0f);
  gpu->rope_forward(d_x, B, T, NH, NKV, HS, pos0, 10000.0f);
  float *g = dgetf(d_x, n);
  CHECK_GEMM("rope_forward", g, y, n);
  cpu->rope_backward(y, B, T, NH, NKV, HS, pos0, 10000.0f);
  gpu->rope_backward(d_x, B, T, NH, NKV, HS, pos0, 10000.0f);
  free(g);
  g = dgetf(d_x, n);
  CHECK_GEMM("rope_backward", g, y, n);
  size_t v_changed = 0;
  for (int bt = 0; bt < B * T; bt++)
    v_changed += memcmp(g + (size_t)bt * W + (NH + NKV) * HS, x + (size_t)bt * W + (NH + NKV) * HS,
                        (size_t)NKV * HS * 4) != 0;
  CHECK(v_changed == 0);
  free(g), free(x), free(y);
  aa_cuda_free(d_x);
}

/* GQA through both MHA implementations, NKV in {1, 2, NH}; the tolerance of
 * the MHA kernels (GEMM-like sums in another order). */
AA_TEST(attention_gqa_matches_cpu) {
  NEED_GPU();
  const int B = 2, shapes[][4] = {{33, 4, 1, 12}, {7, 6, 2, 8}, {40, 3, 3, 16}};
  for (size_t si = 0; si < 2 * sizeof shapes / sizeof *shapes; si++) {
    int flash = si % 2;
    aa_cuda_set_attention(flash ? AA_CUDA_ATT_FLASH : AA_CUDA_ATT_GEMM);
    int T = shapes[si / 2][0], NH = shapes[si / 2][1], NKV = shapes[si / 2][2], HS = shapes[si / 2][3];
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS, nl = (size_t)B * NH * T;
    float *qkv = frand(nq, -2, 2), *out = xmalloc(no * 4), *lse = xmalloc(nl * 4), *dout = frand(no, -1, 1);
    float *dqkv = frand(nq, -1, 1), *dqkv0 = fdup(dqkv, nq), *poison = frand(nl, 5, 6);
    float *d_qkv = dput(qkv, nq * 4), *d_out = dput(out, no * 4), *d_lse = dput(poison, nl * 4);
    float *d_dout = dput(dout, no * 4), *d_dqkv = dput(dqkv, nq * 4);
    cpu->attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, HS);
    gpu->attention_gqa_forward(d_out, d_lse, d_qkv, B, T, NH, NKV, HS);
    float *g = dgetf(d_out, no), *gl = dgetf(d_lse, nl);
    fprintf(stderr, "  %s T=%d NH=%d NKV=%d HS=%d\n", flash ? "flash" : "gemm", T, NH, NKV, HS);
    CHECK_GEMM("attention_gqa_forward out", g, out, no);
    CHECK_GEMM("attention_gqa_forward lse", gl, lse, nl);
    dset(d_lse, lse, nl * 4);
    cpu->attention_gqa_backward(dqkv, dout, qkv, lse, B, T, NH, NKV, HS);
    gpu->attention_gqa_backward(d_dqkv, d_dout, d_qkv, d_lse, B, T, NH, NKV, HS);
    float *gd = dgetf(d_dqkv, nq);
    CHECK_GEMM("attention_gqa_backward dqkv", gd, dqkv, nq);
    /* The expanded copy (qkv and its gradient) is counted as scratch. */
    if (NKV < NH) CHECK(gpu->scratch_bytes() >= 2 * (size_t)B * T * 3 * NH * HS * 4);
    CHECK_DETERMINISTIC("attention_gqa_backward", d_dqkv, dqkv0, nq * 4,
                        gpu->attention_gqa_backward(d_dqkv, d_dout, d_qkv, d_lse, B, T, NH, NKV, HS));
    free(g), free(gl), free(gd), free(qkv), free(out), free(lse), free(dout), free(dqkv), free(dqkv0),
        free(poison);
    aa_cuda_free(d_qkv), aa_cuda_free(d_out), aa_cuda_free(d_lse), aa_cuda_free(d_dout), aa_cuda_free(d_dqkv);
  }
  aa_cuda_set_attention(AA_CUDA_ATT_AUTO);
}

/* Decoding a sequence position by position: outputs within the attention
 * tolerance of the CPU's, the caches bit-identical (plain copies). */
AA_TEST(attention_decode_matches_cpu) {
  NEED_GPU();
  const int B = 2, T = 37, Tmax = 40, NH = 6, NKV = 2, HS = 12, W = (NH + 2 * NKV) * HS;
  size_t nc = (size_t)B * Tmax * NKV * HS, no = (size_t)B * NH * HS;
  float *seq = frand((size_t)B * T * W, -2, 2), *step = xmalloc((size_t)B * W * 4), *out = xmalloc(no * 4);
  float *kc = frand(nc, -1, 1), *vc = frand(nc, -1, 1);
  float *d_kc = dput(kc, nc * 4), *d_vc = dput(vc, nc * 4), *d_step = dput(step, (size_t)B * W * 4);
  float *d_out = dput(out, no * 4);
  double worst = 0.0;
  for (int pos = 0; pos < T; pos++) {
    for (int b = 0; b < B; b++)
      memcpy(step + (size_t)b * W, seq + ((size_t)b * T + pos) * W, (size_t)W * 4);
    dset(d_step, step, (size_t)B * W * 4);
    cpu->attention_decode(out, kc, vc, step, B, Tmax, pos, NH, NKV, HS);
    gpu->attention_decode(d_out, d_kc, d_vc, d_step, B, Tmax, pos, NH, NKV, HS);
    float *g = dgetf(d_out, no);
    worst = fmax(worst, err_max(g, out, no));
    free(g);
  }
  fprintf(stderr, "  %-24s max err / max|ref| %.3g (tol %g)\n", "attention_decode", worst, TOL_GEMM);
  CHECK(worst <= TOL_GEMM);
  float *gk = dgetf(d_kc, nc), *gv = dgetf(d_vc, nc);
  CHECK_EXACT("attention_decode kcache", gk, kc, nc * 4);
  CHECK_EXACT("attention_decode vcache", gv, vc, nc * 4);
  free(gk), free(gv), free(seq), free(step), free(out), free(kc), free(vc);
  aa_cuda_free(d_kc), aa_cuda_free(d_vc), aa_cuda_free(d_step), aa_cuda_free(d_out);
}

/* ---------------------------------------------- ring attention's blocks */

#define TOL_RING_ELEM 1e-5
#define CHECK_MAXREL(name, got, ref, n, tol)                                                                \
  do {                                                                                                      \
    double e_ = err_max(got, ref, n);                                                                       \
    fprintf(stderr, "  %-24s max err / max|ref| %.3g (tol %g)\n", name, e_, (double)(tol));                 \
    CHECK_MSG(e_ <= (tol), "%s: %g", name, e_);                                                             \
  } while (0)

/* CHECK_DETERMINISTIC for an op that writes two device buffers: both reset
 * from init1 and init2 before each of the two runs, both compared. */
#define CHECK_DETERMINISTIC2(name, d1, init1, bytes1, d2, init2, bytes2, ...)                               \
  do {                                                                                                      \
    void *a1_ = xmalloc(bytes1), *a2_ = xmalloc(bytes2), *b1_ = xmalloc(bytes1), *b2_ = xmalloc(bytes2);    \
    dset(d1, init1, bytes1);                                                                                \
    dset(d2, init2, bytes2);                                                                                \
    __VA_ARGS__;                                                                                            \
    dget(a1_, d1, bytes1);                                                                                  \
    dget(a2_, d2, bytes2);                                                                                  \
    dset(d1, init1, bytes1);                                                                                \
    dset(d2, init2, bytes2);                                                                                \
    __VA_ARGS__;                                                                                            \
    dget(b1_, d1, bytes1);                                                                                  \
    dget(b2_, d2, bytes2);                                                                                  \
    CHECK_MSG(memcmp(a1_, b1_, bytes1) == 0 && memcmp(a2_, b2_, bytes2) == 0, "%s: two runs differ", name); \
    free(a1_), free(a2_), free(b1_), free(b2_);                                                             \
  } while (0)

/* One block problem, B = 2, NH = 4, NKV = 2, HS = 8: the queries read in
 * place inside qkv rows of width (NH + 2 NKV) HS (the engine's layout);
 * keys and values either from a separate contiguous (B,Tk,2 NKV HS) block,
 * as one received from another rank, or (in_place, Tq == Tk) from the same
 * qkv rows, as the causal diagonal is read. The gradients are laid out as
 * their operands and start random, so the backward must add. Each op
 * runs on the same inputs on both backends (the backward and delta from the
 * CPU's out, lse and delta on both sides), then twice more on the GPU. */
static void ring_block_case(int Tq, int Tk, int causal, int in_place) {
  const int B = 2, NH = 4, NKV = 2, HS = 8, W = (NH + 2 * NKV) * HS, KW = 2 * NKV * HS, ldo = NH * HS;
  size_t nq = (size_t)B * Tq * W, nkv = (size_t)B * Tk * KW, no = (size_t)B * Tq * ldo;
  size_t nl = (size_t)B * NH * Tq;
  const int ldkv = in_place ? W : KW;
  const size_t bsq = (size_t)Tq * W, bskv = (size_t)Tk * ldkv;
  const size_t ko = in_place ? (size_t)NH * HS : 0, vo = ko + (size_t)NKV * HS; /* k, v columns in a row */
  float *qkv = frand(nq, -2, 2), *kv = frand(nkv, -2, 2), *dout = frand(no, -1, 1);
  float *dqkv = frand(nq, -1, 1), *dkv = frand(nkv, -1, 1), *dqkv0 = fdup(dqkv, nq), *dkv0 = fdup(dkv, nkv);
  float *out = xmalloc(no * 4), *lse = xmalloc(nl * 4), *delta = xmalloc(nl * 4);
  float *ob = frand(no, -2, 2), *lseb = frand(nl, -2, 8);
  float *poison_o = frand(no, 5, 6), *poison_l = frand(nl, 5, 6); /* every element must be written */
  float *d_qkv = dput(qkv, nq * 4), *d_kv = dput(kv, nkv * 4), *d_dout = dput(dout, no * 4);
  float *d_dqkv = dput(dqkv, nq * 4), *d_dkv = dput(dkv, nkv * 4);
  float *d_out = dput(poison_o, no * 4), *d_lse = dput(poison_l, nl * 4), *d_delta = dput(poison_l, nl * 4);
  float *d_ob = dput(ob, no * 4), *d_lseb = dput(lseb, nl * 4);
  const float *k = (in_place ? qkv : kv) + ko, *v = (in_place ? qkv : kv) + vo;
  const float *d_k = (in_place ? d_qkv : d_kv) + ko, *d_v = (in_place ? d_qkv : d_kv) + vo;
  float *dk = (in_place ? dqkv : dkv) + ko, *dv = (in_place ? dqkv : dkv) + vo;
  float *d_dk = (in_place ? d_dqkv : d_dkv) + ko, *d_dv = (in_place ? d_dqkv : d_dkv) + vo;
  size_t scratch0 = gpu->scratch_bytes();
  fprintf(stderr, "  %s Tq=%d Tk=%d, keys and values %s\n", causal ? "causal" : "every key", Tq, Tk,
          in_place ? "in the qkv rows" : "in a block of their own");

  cpu->attention_block_forward(out, lse, qkv, k, v, B, Tq, Tk, NH, NKV, HS, W, bsq, ldkv, bskv, causal);
  gpu->attention_block_forward(d_out, d_lse, d_qkv, d_k, d_v, B, Tq, Tk, NH, NKV, HS, W, bsq, ldkv, bskv,
                               causal);
  float *g = dgetf(d_out, no), *gl = dgetf(d_lse, nl);
  CHECK_GEMM("block_forward out", g, out, no);
  CHECK_GEMM("block_forward lse", gl, lse, nl);
  free(g), free(gl);
  CHECK_DETERMINISTIC2("attention_block_forward", d_out, poison_o, no * 4, d_lse, poison_l, nl * 4,
                       gpu->attention_block_forward(d_out, d_lse, d_qkv, d_k, d_v, B, Tq, Tk, NH, NKV, HS, W,
                                                    bsq, ldkv, bskv, causal));

  /* delta from the CPU's out on both sides. */
  dset(d_out, out, no * 4);
  cpu->attention_block_delta(delta, dout, out, B, Tq, NH, HS);
  gpu->attention_block_delta(d_delta, d_dout, d_out, B, Tq, NH, HS);
  g = dgetf(d_delta, nl);
  CHECK_MAXREL("block_delta", g, delta, nl, TOL_RING_ELEM);
  free(g);
  CHECK_DETERMINISTIC("attention_block_delta", d_delta, poison_l, nl * 4,
                      gpu->attention_block_delta(d_delta, d_dout, d_out, B, Tq, NH, HS));

  /* The backward from the CPU's lse and delta on both sides. */
  dset(d_lse, lse, nl * 4);
  dset(d_delta, delta, nl * 4);
  cpu->attention_block_backward(dqkv, dk, dv, dout, qkv, k, v, lse, delta, B, Tq, Tk, NH, NKV, HS, W, bsq,
                                ldkv, bskv, causal);
  gpu->attention_block_backward(d_dqkv, d_dk, d_dv, d_dout, d_qkv, d_k, d_v, d_lse, d_delta, B, Tq, Tk, NH,
                                NKV, HS, W, bsq, ldkv, bskv, causal);
  float *gq = dgetf(d_dqkv, nq), *gkv = dgetf(d_dkv, nkv);
  CHECK_GEMM("block_backward dqkv", gq, dqkv, nq);
  CHECK_GEMM("block_backward dkv", gkv, dkv, nkv);
  free(gq), free(gkv);
  CHECK_DETERMINISTIC2("attention_block_backward", d_dqkv, dqkv0, nq * 4, d_dkv, dkv0, nkv * 4,
                       gpu->attention_block_backward(d_dqkv, d_dk, d_dv, d_dout, d_qkv, d_k, d_v, d_lse,
                                                     d_delta, B, Tq, Tk, NH, NKV, HS, W, bsq, ldkv, bskv,
                                                     causal));

  /* The merge of the forward's result with another block's (lseb drawn
   * around the forward's lse, so both sides weigh), in place on out, lse. */
  float *out0 = fdup(out, no), *lse0 = fdup(lse, nl);
  dset(d_out, out, no * 4);
  dset(d_lse, lse, nl * 4);
  cpu->attention_block_merge(out, lse, ob, lseb, B, Tq, NH, HS);
  gpu->attention_block_merge(d_out, d_lse, d_ob, d_lseb, B, Tq, NH, HS);
  g = dgetf(d_out, no), gl = dgetf(d_lse, nl);
  CHECK_MAXREL("block_merge out", g, out, no, TOL_RING_ELEM);
  CHECK_MAXREL("block_merge lse", gl, lse, nl, TOL_RING_ELEM);
  free(g), free(gl);
  CHECK_DETERMINISTIC2("attention_block_merge", d_out, out0, no * 4, d_lse, lse0, nl * 4,
                       gpu->attention_block_merge(d_out, d_lse, d_ob, d_lseb, B, Tq, NH, HS));

  /* No scratch: the block ops hold nothing beyond their arguments. */
  CHECK(gpu->scratch_bytes() == scratch0);
  free(qkv), free(kv), free(dout), free(dqkv), free(dkv), free(dqkv0), free(dkv0), free(out), free(lse);
  free(delta), free(ob), free(lseb), free(poison_o), free(poison_l), free(out0), free(lse0);
  aa_cuda_free(d_qkv), aa_cuda_free(d_kv), aa_cuda_free(d_dout), aa_cuda_free(d_dqkv), aa_cuda_free(d_dkv);
  aa_cuda_free(d_out), aa_cuda_free(d_lse), aa_cuda_free(d_delta), aa_cuda_free(d_ob), aa_cuda_free(d_lseb);
}

/* The ring's packing of k|v columns and the return of their gradient, on
 * the GPU against the CPU: a copy is exact, and each add is one fp32 add
 * of the same two numbers on both, so equal bit for bit; elements outside
 * the block stay as they were. */
AA_TEST(rows_copy_and_accumulate_match_cpu_exactly) {
  NEED_GPU();
  const size_t rows = 1001, lds = 96, ldd = 70, cols = 64, off = 32;
  float *src = frand(rows * lds, -2, 2), *dst = frand(rows * ldd, -2, 2);
  float *d_src = dput(src, rows * lds * 4), *d_dst = dput(dst, rows * ldd * 4);
  cpu->rows_copy(dst, ldd, src + off, lds, rows, cols);
  gpu->rows_copy(d_dst, ldd, d_src + off, lds, rows, cols);
  float *g = dgetf(d_dst, rows * ldd);
  CHECK_MSG(!memcmp(g, dst, rows * ldd * 4), "rows_copy differs from the CPU's");
  free(g);
  cpu->rows_accumulate(src + off, lds, dst, ldd, rows, cols);
  gpu->rows_accumulate(d_src + off, lds, d_dst, ldd, rows, cols);
  g = dgetf(d_src, rows * lds);
  CHECK_MSG(!memcmp(g, src, rows * lds * 4), "rows_accumulate differs from the CPU's");
  CHECK(aa_cuda_last_error() == 0);
  free(g);
  aa_cuda_free(d_src);
  aa_cuda_free(d_dst);
  free(src);
  free(dst);
}

/* T = 7 (one partial 16-row tile, one partial 32-key tile) and 33 (three
 * row tiles, two key tiles, both last ones partial), causal and not; then
 * the diagonal read in place and the rectangular blocks Tq != Tk that the
 * non-causal contract allows. Last, the shapes the kernels refuse leave the
 * sticky error and launch nothing. */
AA_TEST(ring_attention_blocks_match_cpu) {
  NEED_GPU();
  for (int T = 7; T <= 33; T += 26)
    for (int causal = 0; causal <= 1; causal++)
      ring_block_case(T, T, causal, 0);
  ring_block_case(33, 33, 1, 1);
  ring_block_case(7, 33, 0, 0);
  ring_block_case(33, 7, 0, 0);

  float *d = NULL;
  if (aa_cuda_alloc((void **)&d, 4096 * 4)) abort();
  CHECK(aa_cuda_sync() == 0);
  gpu->attention_block_forward(d, d + 2048, d, d, d, 1, 2, 2, 1, 1, 264, 264, 528, 264, 528, 0);
  CHECK(aa_cuda_last_error() == AA_EUNSUPPORTED);
  aa_cuda_clear_error();
  gpu->attention_block_backward(d, d, d, d, d, d, d, d, d, 1, 2, 3, 1, 1, 8, 8, 16, 8, 24, 1);
  CHECK(aa_cuda_last_error() == AA_EINVAL);
  aa_cuda_clear_error();
  aa_cuda_free(d);
}

/* ------------------------------------------------------- mixture of experts */

/* One MoE block (kernels/cpu/cpu_moe.h, kernels/cuda/cuda_moe.h) forward and
 * backward on both backends from the same inputs. The GPU routes from the
 * CPU router's logits and probs (its own router output is compared first),
 * so that two logits the backends' GEMMs round differently cannot route a
 * token differently; the routing map and its statistics must then be
 * identical. Output and gradients are GEMM-based (relative to max|ref|),
 * the losses double sums of the same values (1e-5 relative), the routing
 * weights per element. The GPU backward runs twice: bit-identical. raw:
 * the routing weights are the chosen probabilities as they are (Qwen-MoE's
 * norm_topk_prob false), on both maps. */
static void moe_case(int N, int C, int E, int k, int F, int S, float cap, int raw) {
  size_t nx = (size_t)N * C, nr = (size_t)E * C, n13 = (size_t)E * 2 * F * C, n2 = (size_t)E * C * F;
  size_t ns13 = (size_t)S * 2 * F * C, ns2 = (size_t)S * C * F, slots = (size_t)N * k, ne = (size_t)N * E;
  fprintf(stderr, "  moe N %d C %d E %d k %d F %d S %d capacity factor %g%s\n", N, C, E, k, F, S, cap,
          raw ? ", raw top-k" : "");
  float *x = frand(nx, -1, 1), *wr = frand(nr, -1, 1), *w13 = frand(n13, -0.3f, 0.3f);
  float *w2 = frand(n2, -0.3f, 0.3f), *ws13 = frand(ns13, -0.3f, 0.3f), *ws2 = frand(ns2, -0.3f, 0.3f);
  float *dout = frand(nx, -1, 1);
  /* The CPU block. */
  float *logits = aa_test_falloc(ne), *probs = aa_test_falloc(ne), *xp = aa_test_falloc(slots * C);
  float *h = aa_test_falloc(slots * 2 * F), *a = aa_test_falloc(slots * F), *yp = aa_test_falloc(slots * C);
  float *hs = aa_test_falloc((size_t)S * N * 2 * F), *as = aa_test_falloc((size_t)S * N * F);
  float *out = aa_test_falloc(nx), *dyp = aa_test_falloc(slots * C), *dw = aa_test_falloc(slots);
  float *dxp = aa_test_falloc(slots * C), *dl = aa_test_falloc(ne), *dx = aa_test_falloc(nx);
  float *dwr = aa_test_falloc(nr), *dw13 = aa_test_falloc(n13), *dw2 = aa_test_falloc(n2);
  float *dws13 = aa_test_falloc(ns13), *dws2 = aa_test_falloc(ns2), aux, z;
  aa_moe_route_t r;
  aa_moe_stats_t st;
  if (aa_cpu_moe_route_alloc(&r, N, E, k)) abort();
  r.raw = raw;
  aa_cpu_moe_router_forward(logits, probs, x, wr, N, C, E);
  CHECK(aa_cpu_moe_route(&r, &st, logits, probs, cap) == 0);
  aa_cpu_moe_permute(xp, x, &r, C);
  aa_cpu_moe_experts_forward(yp, h, a, xp, w13, w2, r.offsets, E, C, F);
  aa_cpu_moe_unpermute(out, yp, &r, C);
  aa_cpu_moe_shared_forward(out, hs, as, x, ws13, ws2, S, N, C, F);
  aa_cpu_moe_losses(&aux, &z, logits, probs, &r, 0.01f, 0.001f);
  aa_cpu_moe_unpermute_backward(dyp, dw, dout, yp, &r, C);
  aa_cpu_moe_experts_backward(dxp, dw13, dw2, dyp, xp, h, a, w13, w2, r.offsets, E, C, F);
  aa_cpu_moe_permute_backward(dx, dxp, &r, C);
  aa_cpu_moe_shared_backward(dx, dws13, dws2, dout, x, hs, as, ws13, ws2, S, N, C, F);
  aa_cpu_moe_router_backward(dx, dwr, dl, dw, x, wr, logits, probs, &r, C, 0.01f, 0.001f, 1.0f);

  /* The GPU block: inputs, then zeroed activations and gradients. */
  float *g_x = dput(x, nx * 4), *g_wr = dput(wr, nr * 4), *g_w13 = dput(w13, n13 * 4),
        *g_w2 = dput(w2, n2 * 4);
  float *g_ws13 = dput(ws13, ns13 * 4), *g_ws2 = dput(ws2, ns2 * 4), *g_dout = dput(dout, nx * 4);
  float *zeros = aa_test_falloc(slots * 2 * F + nx + n13);
  float *g_logits = dput(zeros, ne * 4), *g_probs = dput(zeros, ne * 4), *g_xp = dput(zeros, slots * C * 4);
  float *g_h = dput(zeros, slots * 2 * F * 4), *g_a = dput(zeros, slots * F * 4),
        *g_yp = dput(zeros, slots * C * 4);
  float *g_hs = dput(zeros, (size_t)S * N * 2 * F * 4), *g_as = dput(zeros, (size_t)S * N * F * 4);
  float *g_out = dput(zeros, nx * 4), *g_dyp = dput(zeros, slots * C * 4), *g_dw = dput(zeros, slots * 4);
  float *g_dxp = dput(zeros, slots * C * 4), *g_dl = dput(zeros, ne * 4), *g_dx = dput(zeros, nx * 4);
  float *g_dwr = dput(zeros, nr * 4), *g_dw13 = dput(zeros, n13 * 4), *g_dw2 = dput(zeros, n2 * 4);
  float *g_dws13 = dput(zeros, ns13 * 4), *g_dws2 = dput(zeros, ns2 * 4), gaux = 0.0f, gz = 0.0f;
  CHECK(aa_cuda_moe_router_forward(g_logits, g_probs, g_x, g_wr, N, C, E) == 0);
  float *t = dgetf(g_logits, ne);
  CHECK_GEMM("moe router logits", t, logits, ne);
  free(t);
  t = dgetf(g_probs, ne);
  CHECK_GEMM("moe router probs", t, probs, ne);
  free(t);
  dset(g_logits, logits, ne * 4);
  dset(g_probs, probs, ne * 4);
  aa_moe_route_t gr;
  aa_moe_stats_t gst;
  int32_t *hoff = xmalloc((size_t)(E + 1) * 4);
  if (aa_cuda_moe_route_alloc(&gr, N, E, k)) abort();
  gr.raw = raw;
  CHECK(aa_cuda_moe_route(&gr, hoff, &gst, g_logits, g_probs, cap) == 0);
  int32_t *ti = xmalloc(slots * 4);
  dget(ti, gr.expert, slots * 4);
  CHECK_EXACT("moe experts chosen", ti, r.expert, slots * 4);
  dget(ti, gr.row, slots * 4);
  CHECK_EXACT("moe rows", ti, r.row, slots * 4);
  dget(ti, gr.slot, (size_t)r.rows * 4);
  CHECK_EXACT("moe slots", ti, r.slot, (size_t)r.rows * 4);
  dget(ti, gr.counts, (size_t)E * 4);
  CHECK_EXACT("moe counts", ti, r.counts, (size_t)E * 4);
  CHECK_EXACT("moe offsets", hoff, r.offsets, (size_t)(E + 1) * 4);
  CHECK(gr.rows == r.rows && gr.capacity == r.capacity);
  CHECK(gst.min_tokens == st.min_tokens && gst.max_tokens == st.max_tokens && gst.dropped == st.dropped);
  if (cap > 0.0f) CHECK(st.dropped > 0); /* the case must exercise the drop */
  t = dgetf(gr.weight, slots);
  CHECK_ELEM("moe weights", t, r.weight, slots);
  free(t);
  CHECK(aa_cuda_moe_permute(g_xp, g_x, &gr, C) == 0);
  CHECK(aa_cuda_moe_experts_forward(g_yp, g_h, g_a, g_xp, g_w13, g_w2, hoff, E, C, F) == 0);
  CHECK(aa_cuda_moe_unpermute(g_out, g_yp, &gr, C) == 0);
  CHECK(aa_cuda_moe_shared_forward(g_out, g_hs, g_as, g_x, g_ws13, g_ws2, S, N, C, F) == 0);
  CHECK(aa_cuda_moe_losses(&gaux, &gz, g_logits, g_probs, &gr, 0.01f, 0.001f) == 0);
  t = dgetf(g_out, nx);
  CHECK_GEMM("moe out", t, out, nx);
  free(t);
  fprintf(stderr, "  %-24s aux %.8g (cpu %.8g), z %.8g (cpu %.8g)\n", "moe losses", gaux, aux, gz, z);
  CHECK_NEAR(gaux, aux, 1e-5 * aux);
  CHECK_NEAR(gz, z, 1e-5 * z);
  float *g_zero[] = {g_dyp, g_dw, g_dxp, g_dx, g_dwr, g_dw13, g_dw2, g_dws13, g_dws2};
  size_t zlen[] = {slots * C, slots, slots * C, nx, nr, n13, n2, ns13, ns2};
  float *got[2][7];
  for (int run = 0; run < 2; run++) {
    for (int i = 0; i < 9; i++)
      dset(g_zero[i], zeros, zlen[i] * 4);
    CHECK(aa_cuda_moe_unpermute_backward(g_dyp, g_dw, g_dout, g_yp, &gr, C) == 0);
    CHECK(aa_cuda_moe_experts_backward(g_dxp, g_dw13, g_dw2, g_dyp, g_xp, g_h, g_a, g_w13, g_w2, hoff, E, C,
                                       F) == 0);
    CHECK(aa_cuda_moe_permute_backward(g_dx, g_dxp, &gr, C) == 0);
    CHECK(aa_cuda_moe_shared_backward(g_dx, g_dws13, g_dws2, g_dout, g_x, g_hs, g_as, g_ws13, g_ws2, S, N, C,
                                      F) == 0);
    CHECK(aa_cuda_moe_router_backward(g_dx, g_dwr, g_dl, g_dw, g_x, g_wr, g_logits, g_probs, &gr, C, 0.01f,
                                      0.001f, 1.0f) == 0);
    float *g[] = {dgetf(g_dl, ne),  dgetf(g_dx, nx),      dgetf(g_dwr, nr),  dgetf(g_dw13, n13),
                  dgetf(g_dw2, n2), dgetf(g_dws13, ns13), dgetf(g_dws2, ns2)};
    memcpy(got[run], g, sizeof g);
  }
  const float *want[] = {dl, dx, dwr, dw13, dw2, dws13, dws2};
  size_t len[] = {ne, nx, nr, n13, n2, ns13, ns2};
  static const char *names[] = {"moe dlogits", "moe dx",    "moe dwr", "moe dw13",
                                "moe dw2",     "moe dws13", "moe dws2"};
  int same = 1;
  for (int i = 0; i < 7; i++) {
    if (len[i]) CHECK_GEMM(names[i], got[0][i], want[i], len[i]);
    same &= memcmp(got[0][i], got[1][i], len[i] * 4) == 0;
    free(got[0][i]), free(got[1][i]);
  }
  CHECK_MSG(same, "moe backward: two runs differ");
  CHECK(aa_cuda_last_error() == 0);
  float *g_all[] = {g_x,   g_wr, g_w13, g_w2,  g_ws13, g_ws2, g_dout,  g_logits, g_probs,
                    g_xp,  g_h,  g_a,   g_yp,  g_hs,   g_as,  g_out,   g_dyp,    g_dw,
                    g_dxp, g_dl, g_dx,  g_dwr, g_dw13, g_dw2, g_dws13, g_dws2};
  for (size_t i = 0; i < sizeof g_all / sizeof g_all[0]; i++)
    aa_cuda_free(g_all[i]);
  float *h_all[] = {x,  wr,  w13, w2, ws13, ws2, dout, logits, probs, xp,  h,     a,    yp,   hs,
                    as, out, dyp, dw, dxp,  dl,  dx,   dwr,    dw13,  dw2, dws13, dws2, zeros};
  for (size_t i = 0; i < sizeof h_all / sizeof h_all[0]; i++)
    free(h_all[i]);
  free(hoff), free(ti);
  aa_cuda_moe_route_free(&gr);
  aa_cpu_moe_route_free(&r);
}

/* Qwen-MoE's gated shared experts, forward and backward on both backends
 * from the same inputs: GEMM-based results (the experts' and the gate's
 * dot products) relative to max|ref|; two GPU backwards bit-identical. */
static void moe_gate_case(int N, int C, int S, int F) {
  const size_t nx = (size_t)N * C, n13 = (size_t)S * 2 * F * C, n2 = (size_t)S * C * F;
  const size_t nh = (size_t)S * N * 2 * F, na = (size_t)S * N * F;
  fprintf(stderr, "  moe shared gate N %d C %d S %d F %d\n", N, C, S, F);
  float *x = frand(nx, -1, 1), *ws13 = frand(n13, -0.3f, 0.3f), *ws2 = frand(n2, -0.3f, 0.3f);
  float *wg = frand((size_t)C, -0.3f, 0.3f), *out0 = frand(nx, -1, 1), *dout = frand(nx, -1, 1);
  float *dx0 = frand(nx, -1, 1); /* both ops accumulate into out and dx */
  float *out = fdup(out0, nx), *dx = fdup(dx0, nx), *hs = aa_test_falloc(nh), *as = aa_test_falloc(na);
  float *dws13 = aa_test_falloc(n13), *dws2 = aa_test_falloc(n2), *dwg = aa_test_falloc((size_t)C);
  aa_cpu_moe_shared_gate_forward(out, hs, as, x, ws13, ws2, wg, S, N, C, F);
  aa_cpu_moe_shared_gate_backward(dx, dws13, dws2, dwg, dout, x, hs, as, ws13, ws2, wg, S, N, C, F);
  float *zeros = aa_test_falloc(nh > n13 ? nh : n13);
  float *g_x = dput(x, nx * 4), *g_ws13 = dput(ws13, n13 * 4), *g_ws2 = dput(ws2, n2 * 4),
        *g_wg = dput(wg, C * 4);
  float *g_out = dput(out0, nx * 4), *g_dout = dput(dout, nx * 4), *g_hs = dput(zeros, nh * 4);
  float *g_as = dput(zeros, na * 4), *g_dx = dput(dx0, nx * 4), *g_dws13 = dput(zeros, n13 * 4);
  float *g_dws2 = dput(zeros, n2 * 4), *g_dwg = dput(zeros, (size_t)C * 4);
  CHECK(aa_cuda_moe_shared_gate_forward(g_out, g_hs, g_as, g_x, g_ws13, g_ws2, g_wg, S, N, C, F) == 0);
  float *t = dgetf(g_out, nx);
  CHECK_GEMM("moe gate out", t, out, nx);
  free(t);
  float *got[2][4];
  for (int run = 0; run < 2; run++) {
    dset(g_dx, dx0, nx * 4);
    dset(g_dws13, zeros, n13 * 4);
    dset(g_dws2, zeros, n2 * 4);
    dset(g_dwg, zeros, (size_t)C * 4);
    CHECK(aa_cuda_moe_shared_gate_backward(g_dx, g_dws13, g_dws2, g_dwg, g_dout, g_x, g_hs, g_as, g_ws13,
                                           g_ws2, g_wg, S, N, C, F) == 0);
    float *g[] = {dgetf(g_dx, nx), dgetf(g_dws13, n13), dgetf(g_dws2, n2), dgetf(g_dwg, (size_t)C)};
    memcpy(got[run], g, sizeof g);
  }
  const float *want[] = {dx, dws13, dws2, dwg};
  const size_t len[] = {nx, n13, n2, (size_t)C};
  static const char *names[] = {"moe gate dx", "moe gate dws13", "moe gate dws2", "moe gate dwg"};
  int same = 1;
  for (int i = 0; i < 4; i++) {
    CHECK_GEMM(names[i], got[0][i], want[i], len[i]);
    same &= memcmp(got[0][i], got[1][i], len[i] * 4) == 0;
    free(got[0][i]), free(got[1][i]);
  }
  CHECK_MSG(same, "moe gate backward: two runs differ");
  CHECK(aa_cuda_last_error() == 0);
  float *g_all[] = {g_x, g_ws13, g_ws2, g_wg, g_out, g_dout, g_hs, g_as, g_dx, g_dws13, g_dws2, g_dwg};
  for (size_t i = 0; i < sizeof g_all / sizeof g_all[0]; i++)
    aa_cuda_free(g_all[i]);
  float *h_all[] = {x, ws13, ws2, wg, out0, dout, dx0, out, dx, hs, as, dws13, dws2, dwg, zeros};
  for (size_t i = 0; i < sizeof h_all / sizeof h_all[0]; i++)
    free(h_all[i]);
}

AA_TEST(moe_shared_gate_matches_cpu) {
  NEED_GPU();
  moe_gate_case(97, 40, 1, 24);
  moe_gate_case(33, 24, 2, 16);
}

/* Dropless with a shared expert, then capacity factor 0.5 with none (N = 97
 * tokens over E = 6 experts, top-2: capacity ceil(0.5 * 97 * 2 / 6) = 17,
 * so at most 102 of the 194 slots are kept, whatever the routing), then
 * both with raw top-k weights. */
AA_TEST(moe_ops_match_cpu) {
  NEED_GPU();
  moe_case(97, 40, 6, 2, 24, 1, 0.0f, 0);
  moe_case(97, 40, 6, 2, 24, 0, 0.5f, 0);
  moe_case(97, 40, 6, 2, 24, 1, 0.0f, 1);
  moe_case(97, 40, 6, 2, 24, 0, 0.5f, 1);
}

int main(void) {
  aa_rng_seed(&rng, 20240611);
  cpu = aa_ops_cpu();
  gpu = aa_ops_cuda();
  int n = 0;
  if (aa_cuda_device_count(&n)) {
    snprintf(gpu_reason, sizeof gpu_reason, "%s", aa_last_error());
  } else if (n < 1) {
    snprintf(gpu_reason, sizeof gpu_reason, "the CUDA runtime reports no device");
  } else if (aa_cuda_init(0)) {
    snprintf(gpu_reason, sizeof gpu_reason, "%s", aa_last_error());
  } else {
    gpu_ok = 1;
  }
  RUN(device_info_reports_the_gpu);
  RUN(errors_are_sticky_until_cleared);
  RUN(encoder_matches_cpu_exactly);
  RUN(layernorm_matches_cpu);
  RUN(matmul_matches_cpu);
  RUN(matmul_on_16bit_inputs_matches_cpu);
  RUN(attention_matches_cpu);
  RUN(elementwise_ops_match_cpu);
  RUN(crossentropy_matches_cpu);
  RUN(vocab_ops_match_cpu);
  RUN(adamw_matches_cpu_over_steps);
  RUN(casts_match_cpu_bit_for_bit);
  RUN(transformer_block_forward_backward_matches_cpu);
  RUN(rmsnorm_matches_cpu);
  RUN(swiglu_matches_cpu);
  RUN(rope_matches_cpu);
  RUN(attention_gqa_matches_cpu);
  RUN(attention_decode_matches_cpu);
  RUN(ring_attention_blocks_match_cpu);
  RUN(rows_copy_and_accumulate_match_cpu_exactly);
  RUN(moe_ops_match_cpu);
  RUN(moe_shared_gate_matches_cpu);
  if (gpu_ok) {
    CHECK(aa_cuda_sync() == 0);
    aa_cuda_shutdown();
  }
  return aa_test_summary();
}

#endif
