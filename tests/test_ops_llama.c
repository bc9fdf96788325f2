/* The CPU backend's llama-family ops (kernels/cpu/cpu_llama.c) against their
 * contracts in kernels/ops.h: forwards against naive double-precision
 * references written here, every backward against central finite
 * differences, RoPE's backward as the transpose of its forward, the
 * accumulate (+=) convention, the decode step against the full attention,
 * and run-to-run determinism. Every test runs with 1 and with 2 threads. */
#include "aa_ops_test.h"
#include "aa_test.h"
#include "common/aa.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const aa_ops_t *ops;
static int cur_threads = 1;
static aa_rng_t rng;

#define falloc(n) aa_test_falloc(n)
#define frand(n, lo, hi) aa_test_frand(&rng, (n), (lo), (hi))
#define fcopy(x, n) aa_test_fcopy((x), (n))
#define dalloc(n) aa_test_dalloc(n)
#define dot(a, b, n) aa_test_dot((a), (b), (n))
#define max_abs_diff(a, ref, n) aa_test_max_abs_diff((a), (ref), (n))

/* ------------------------------------------------------------------ helpers */

/* g - pre, elementwise, into a new buffer: what a backward added to a
 * gradient that held pre. */
static float *added(const float *g, const float *pre, size_t n) {
  float *d = falloc(n);
  for (size_t i = 0; i < n; i++)
    d[i] = g[i] - pre[i];
  return d;
}

/* ----------------------------------------------------- finite differences
 *
 * As tests/test_ops.c: L = sum(forward output * R) for a fixed random R, in
 * double from the float32 outputs; the analytic gradient (backward with
 * dout = R) against (L(x+h) - L(x-h)) / (x+h - x-h), the denominator from
 * the stored floats. |analytic - numeric| <= FD_ATOL + FD_RTOL * max(|a|,
 * |n|). Round-off dominates: each output the perturbation touches carries
 * ~6e-8 relative float32 error, a perturbed RMSNorm input touches its whole
 * row (C = 24 outputs of size <= ~3) and an attention key up to ~40 outputs
 * of size ~1, so L(x+h) - L(x-h) is off by up to ~1e-6, 5e-5 after the
 * division by 2h = 2e-2; the truncation term h^2/6 |L'''| is smaller for
 * these smooth ops at these input scales. The observed maxima are 4.4e-5
 * (printed per tensor); FD_ATOL = 2e-4 and FD_RTOL = 1e-3 leave ~5x over
 * them (the largest err/tol is 0.17), while a wrong factor, sign, index
 * or missed term gives errors the size of the gradient, ~1e-1. */
#define FD_H 1e-2f
#define FD_ATOL 2e-4
#define FD_RTOL 1e-3

typedef aa_test_loss_fn loss_fn;
#define fd_check(what, x, grad, n, f, ctx)                                                                   \
  aa_test_fd_check((what), (x), (grad), (n), (f), (ctx), FD_H, FD_ATOL, FD_RTOL)

/* ------------------------------------------------------------------ RMSNorm */

typedef struct {
  float *out, *rstd, *inp, *w, *r;
  int N, C;
  float eps;
} rms_ctx;

static double rms_loss(void *p) {
  rms_ctx *c = p;
  ops->rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, c->eps);
  return dot(c->out, c->r, (size_t)c->N * c->C);
}

static rms_ctx rms_make(int N, int C) {
  size_t n = (size_t)N * C;
  rms_ctx c = {falloc(n), falloc(N), frand(n, -1, 1), frand(C, 0.5f, 1.5f), frand(n, -1, 1), N, C, 1e-5f};
  return c;
}

static void rms_free(rms_ctx *c) { free(c->out), free(c->rstd), free(c->inp), free(c->w), free(c->r); }

/* Tolerances: rstd 1e-6 relative (a double sum of squares, one float
 * rounding); out 1e-6 absolute (|out| <= ~3, two float products). */
AA_TEST(rmsnorm_forward_matches_double_reference) {
  rms_ctx c = rms_make(7, 37);
  rms_loss(&c);
  double worst_out = 0.0, worst_rstd = 0.0;
  for (int n = 0; n < c.N; n++) {
    const float *x = c.inp + (size_t)n * c.C;
    double ss = 0.0;
    for (int i = 0; i < c.C; i++)
      ss += (double)x[i] * x[i];
    double r = 1.0 / sqrt(ss / c.C + c.eps);
    worst_rstd = fmax(worst_rstd, fabs(c.rstd[n] - r) / r);
    for (int i = 0; i < c.C; i++)
      worst_out = fmax(worst_out, fabs(c.out[(size_t)n * c.C + i] - x[i] * r * c.w[i]));
  }
  CHECK_NEAR(worst_rstd, 0.0, 1e-6);
  CHECK_NEAR(worst_out, 0.0, 1e-6);
  rms_free(&c);
}

AA_TEST(rmsnorm_backward_matches_finite_differences) {
  rms_ctx c = rms_make(5, 24);
  size_t n = (size_t)c.N * c.C;
  rms_loss(&c);
  float *pre_dx = frand(n, -1, 1), *pre_dw = frand(c.C, -1, 1);
  float *dx = fcopy(pre_dx, n), *dw = fcopy(pre_dw, c.C);
  ops->rmsnorm_backward(dx, dw, c.r, c.inp, c.w, c.rstd, c.N, c.C);
  float *gx = added(dx, pre_dx, n), *gw = added(dw, pre_dw, c.C);
  fd_check("rmsnorm dinp", c.inp, gx, n, rms_loss, &c);
  fd_check("rmsnorm dweight", c.w, gw, c.C, rms_loss, &c);
  free(pre_dx), free(pre_dw), free(dx), free(dw), free(gx), free(gw);
  rms_free(&c);
}

/* ------------------------------------------------------------------- SwiGLU */

typedef struct {
  float *out, *inp, *r;
  int N, F;
} swi_ctx;

static double swi_loss(void *p) {
  swi_ctx *c = p;
  ops->swiglu_forward(c->out, c->inp, c->N, c->F);
  return dot(c->out, c->r, (size_t)c->N * c->F);
}

static swi_ctx swi_make(int N, int F) {
  swi_ctx c = {falloc((size_t)N * F), frand((size_t)2 * N * F, -4, 4), frand((size_t)N * F, -1, 1), N, F};
  return c;
}

static void swi_free(swi_ctx *c) { free(c->out), free(c->inp), free(c->r); }

/* Tolerance 1e-6 relative to 1 + |ref|: the backend's exp is within 1.4 ulp
 * (cpu_internal.h), plus a division and two products in float. */
AA_TEST(swiglu_forward_matches_silu_formula) {
  swi_ctx c = swi_make(9, 13);
  swi_loss(&c);
  double worst = 0.0;
  for (int n = 0; n < c.N; n++)
    for (int i = 0; i < c.F; i++) {
      double g = c.inp[(size_t)n * 2 * c.F + i], u = c.inp[(size_t)n * 2 * c.F + c.F + i];
      double ref = g / (1.0 + exp(-g)) * u;
      worst = fmax(worst, fabs(c.out[(size_t)n * c.F + i] - ref) / (1.0 + fabs(ref)));
    }
  CHECK_NEAR(worst, 0.0, 1e-6);
  swi_free(&c);
}

AA_TEST(swiglu_backward_matches_finite_differences) {
  swi_ctx c = swi_make(6, 11);
  size_t n = (size_t)2 * c.N * c.F;
  float *pre = frand(n, -1, 1), *d = fcopy(pre, n);
  ops->swiglu_backward(d, c.inp, c.r, c.N, c.F);
  float *g = added(d, pre, n);
  fd_check("swiglu dinp", c.inp, g, n, swi_loss, &c);
  free(pre), free(d), free(g);
  swi_free(&c);
}

/* swiglu_backward_set overwrites dinp (garbage before) with what
 * swiglu_backward accumulates into zeros, bit for bit; 40 x 150 runs split
 * over the team in the two-thread pass. */
AA_TEST(swiglu_backward_set_overwrites_dinp) {
  swi_ctx c = swi_make(40, 150);
  size_t n = (size_t)2 * c.N * c.F;
  float *d = frand(n, 50, 60), *z = falloc(n);
  ops->swiglu_backward_set(d, c.inp, c.r, c.N, c.F);
  ops->swiglu_backward(z, c.inp, c.r, c.N, c.F);
  CHECK(memcmp(d, z, n * sizeof(float)) == 0);
  free(d), free(z);
  swi_free(&c);
}

/* --------------------------------------------------------------------- RoPE */

/* The contract's formula in double, on one head vector x(HS) at position p. */
static void rope_reference(double *out, const float *x, int HS, int p, double theta) {
  int half = HS / 2;
  for (int i = 0; i < half; i++) {
    double a = p * pow(theta, -2.0 * i / HS);
    out[i] = x[i] * cos(a) - x[i + half] * sin(a);
    out[i + half] = x[i + half] * cos(a) + x[i] * sin(a);
  }
}

/* Positions up to pos0 + T = 1011 make angles of ~1000 rad, where an angle
 * computed in float would be off by ~3e-5 rad. Tolerance 1e-6 absolute:
 * |x| <= 1, cos and sin rounded to float and two products and a sum in
 * float, a few ulps of 1. v must come out untouched, bit for bit. */
AA_TEST(rope_forward_matches_rotation_formula) {
  int B = 2, T = 11, NH = 3, NKV = 1, HS = 10, pos0 = 1000, W = (NH + 2 * NKV) * HS;
  float theta = 10000.0f;
  size_t n = (size_t)B * T * W;
  float *x = frand(n, -1, 1), *y = fcopy(x, n);
  ops->rope_forward(y, B, T, NH, NKV, HS, pos0, theta);
  double ref[16], worst = 0.0;
  size_t v_changed = 0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      size_t row = ((size_t)b * T + t) * W;
      for (int h = 0; h < NH + NKV; h++) {
        rope_reference(ref, x + row + (size_t)h * HS, HS, pos0 + t, theta);
        for (int i = 0; i < HS; i++)
          worst = fmax(worst, fabs(y[row + (size_t)h * HS + i] - ref[i]));
      }
      for (int i = (NH + NKV) * HS; i < W; i++)
        v_changed += memcmp(&x[row + i], &y[row + i], sizeof(float)) != 0;
    }
  fprintf(stderr, "  rope forward max |err| %.2e\n", worst);
  CHECK_NEAR(worst, 0.0, 1e-6);
  CHECK(v_changed == 0);
  free(x), free(y);
}

/* rope_backward is the transpose: <rope(x), y> = <x, rope_backward(y)> up
 * to float rounding of ~100 products of size ~1 (1e-5 relative is ~100x
 * that), and rope_backward(rope(x)) gives back x within a few ulps. */
AA_TEST(rope_backward_is_the_transpose) {
  int B = 2, T = 7, NH = 4, NKV = 2, HS = 6, pos0 = 3, W = (NH + 2 * NKV) * HS;
  float theta = 500000.0f;
  size_t n = (size_t)B * T * W;
  float *x = frand(n, -1, 1), *y = frand(n, -1, 1), *rx = fcopy(x, n), *ry = fcopy(y, n);
  ops->rope_forward(rx, B, T, NH, NKV, HS, pos0, theta);
  ops->rope_backward(ry, B, T, NH, NKV, HS, pos0, theta);
  double lhs = dot(rx, y, n), rhs = dot(x, ry, n);
  CHECK_MSG(fabs(lhs - rhs) <= 1e-5 * fmax(fabs(lhs), 1.0), "<rope(x),y> %.9g vs <x,rope^T(y)> %.9g", lhs,
            rhs);
  ops->rope_backward(rx, B, T, NH, NKV, HS, pos0, theta);
  double worst = 0.0;
  for (size_t i = 0; i < n; i++)
    worst = fmax(worst, fabs(rx[i] - x[i]));
  CHECK_NEAR(worst, 0.0, 1e-6);
  free(x), free(y), free(rx), free(ry);
}

/* ------------------------------------------------------ grouped-query attention */

typedef struct {
  float *out, *lse, *qkv, *r;
  int B, T, NH, NKV, HS;
} gqa_ctx;

static size_t gqa_width(const gqa_ctx *c) { return (size_t)(c->NH + 2 * c->NKV) * c->HS; }

static double gqa_loss(void *p) {
  gqa_ctx *c = p;
  ops->attention_gqa_forward(c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->NKV, c->HS);
  return dot(c->out, c->r, (size_t)c->B * c->T * c->NH * c->HS);
}

static gqa_ctx gqa_make(int B, int T, int NH, int NKV, int HS) {
  size_t W = (size_t)(NH + 2 * NKV) * HS, no = (size_t)B * T * NH * HS;
  gqa_ctx c = {falloc(no),
               falloc((size_t)B * NH * T),
               frand((size_t)B * T * W, -1.5f, 1.5f),
               frand(no, -1, 1),
               B,
               T,
               NH,
               NKV,
               HS};
  return c;
}

static void gqa_free(gqa_ctx *c) { free(c->out), free(c->lse), free(c->qkv), free(c->r); }

/* The O(T^2) softmax attention in double with the explicit key/value head
 * of each query head, h / (NH / NKV): out(B,T,NH HS), lse(B,NH,T). */
static void gqa_reference(double *out, double *lse, const gqa_ctx *c) {
  int B = c->B, T = c->T, NH = c->NH, NKV = c->NKV, HS = c->HS;
  size_t W = gqa_width(c);
  double *s = dalloc((size_t)T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      int g = h / (NH / NKV);
      for (int t = 0; t < T; t++) {
        const float *q = c->qkv + ((size_t)b * T + t) * W + (size_t)h * HS;
        double maxv = -INFINITY, sum = 0.0;
        for (int u = 0; u <= t; u++) {
          const float *k = c->qkv + ((size_t)b * T + u) * W + (size_t)(NH + g) * HS;
          s[u] = 0.0;
          for (int i = 0; i < HS; i++)
            s[u] += (double)q[i] * k[i];
          s[u] /= sqrt((double)HS);
          maxv = fmax(maxv, s[u]);
        }
        for (int u = 0; u <= t; u++)
          sum += s[u] = exp(s[u] - maxv);
        lse[((size_t)b * NH + h) * T + t] = maxv + log(sum);
        for (int i = 0; i < HS; i++) {
          double o = 0.0;
          for (int u = 0; u <= t; u++)
            o += s[u] / sum * c->qkv[((size_t)b * T + u) * W + (size_t)(NH + NKV + g) * HS + i];
          out[((size_t)b * T + t) * NH * HS + (size_t)h * HS + i] = o;
        }
      }
    }
  free(s);
}

/* NKV in {1, 2, NH}, odd head sizes, T = 67 across the backend's 32-row
 * blocks. Tolerances as attention_forward's in test_ops.c: out and lse 1e-5
 * absolute (|v| <= 1.5, fp32 dot products and sums of at most 67 terms). */
AA_TEST(attention_gqa_forward_matches_double_reference) {
  int shapes[][5] = {{2, 5, 4, 1, 3}, {2, 67, 4, 2, 5}, {1, 40, 3, 3, 7}, {1, 33, 6, 2, 4}};
  for (int s = 0; s < 4; s++) {
    gqa_ctx c = gqa_make(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4]);
    size_t no = (size_t)c.B * c.T * c.NH * c.HS, nl = (size_t)c.B * c.NH * c.T;
    for (size_t i = 0; i < nl; i++)
      c.lse[i] = 7.0f; /* stale contents must be overwritten */
    gqa_loss(&c);
    double *out = dalloc(no), *lse = dalloc(nl);
    gqa_reference(out, lse, &c);
    CHECK_NEAR(max_abs_diff(c.out, out, no), 0.0, 1e-5);
    CHECK_NEAR(max_abs_diff(c.lse, lse, nl), 0.0, 1e-5);
    free(out), free(lse);
    gqa_free(&c);
  }
}

/* With NKV = NH the layout is attention_forward's qkv(B,T,3C), C = NH HS.
 * The GQA code issues the same GEMMs in the same order, so forward and
 * backward are bit-identical (the contract asks ~1e-6; this pins more). */
AA_TEST(attention_gqa_with_nkv_nh_is_attention) {
  int B = 2, T = 45, NH = 3, HS = 8, C = NH * HS;
  gqa_ctx c = gqa_make(B, T, NH, NH, HS);
  size_t no = (size_t)B * T * C, nl = (size_t)B * NH * T, nq = 3 * no;
  gqa_loss(&c);
  float *out = falloc(no), *lse = falloc(nl), *d1 = frand(nq, -1, 1), *d2 = fcopy(d1, nq);
  ops->attention_forward(out, lse, c.qkv, B, T, C, NH);
  ops->attention_backward(d1, c.r, c.qkv, lse, B, T, C, NH);
  ops->attention_gqa_backward(d2, c.r, c.qkv, c.lse, B, T, NH, NH, HS);
  CHECK(memcmp(out, c.out, no * sizeof(float)) == 0);
  CHECK(memcmp(lse, c.lse, nl * sizeof(float)) == 0);
  CHECK(memcmp(d1, d2, nq * sizeof(float)) == 0);
  free(out), free(lse), free(d1), free(d2);
  gqa_free(&c);
}

/* The gradient is pre-filled with random values, so the check also proves
 * it is accumulated, and a key/value head shared by several query heads
 * gets the sum of their contributions. */
AA_TEST(attention_gqa_backward_matches_finite_differences) {
  int shapes[][5] = {{2, 5, 4, 1, 3}, {1, 33, 4, 2, 3}, {1, 9, 2, 2, 3}};
  const char *names[] = {"gqa dqkv (NKV=1)", "gqa dqkv (NKV=2, T=33)", "gqa dqkv (NKV=NH)"};
  for (int s = 0; s < 3; s++) {
    gqa_ctx c = gqa_make(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4]);
    size_t nq = (size_t)c.B * c.T * gqa_width(&c);
    gqa_loss(&c);
    float *pre = frand(nq, -1, 1), *d = fcopy(pre, nq);
    ops->attention_gqa_backward(d, c.r, c.qkv, c.lse, c.B, c.T, c.NH, c.NKV, c.HS);
    float *g = added(d, pre, nq);
    fd_check(names[s], c.qkv, g, nq, gqa_loss, &c);
    free(pre), free(d), free(g);
    gqa_free(&c);
  }
}

/* ------------------------------------------------------------------- decode */

/* Decoding position by position reproduces row pos of the full forward over
 * the same sequence, and leaves the k and v rows in the caches. The caches
 * start as NaN: a read past pos would poison the output. Tolerance 2e-6
 * absolute: the same fp32 math summed in another order (loops against
 * GEMMs), |v| <= 1.5 and at most 13 terms. */
AA_TEST(attention_decode_matches_full_attention) {
  int B = 2, T = 13, Tmax = 16, NH = 4, NKV = 2, HS = 5;
  gqa_ctx c = gqa_make(B, T, NH, NKV, HS);
  size_t W = gqa_width(&c), KV = (size_t)NKV * HS, nc = (size_t)B * Tmax * KV, no = (size_t)NH * HS;
  gqa_loss(&c);
  float *kc = falloc(nc), *vc = falloc(nc), *step = falloc((size_t)B * W), *out = falloc((size_t)B * no);
  for (size_t i = 0; i < nc; i++)
    kc[i] = vc[i] = NAN;
  double worst = 0.0;
  size_t cache_bad = 0;
  for (int pos = 0; pos < T; pos++) {
    for (int b = 0; b < B; b++)
      memcpy(step + b * W, c.qkv + ((size_t)b * T + pos) * W, W * sizeof(float));
    ops->attention_decode(out, kc, vc, step, B, Tmax, pos, NH, NKV, HS);
    for (int b = 0; b < B; b++) {
      for (size_t i = 0; i < no; i++) {
        double d = fabs(out[b * no + i] - c.out[((size_t)b * T + pos) * no + i]);
        worst = d == d ? fmax(worst, d) : INFINITY;
      }
      const float *row = c.qkv + ((size_t)b * T + pos) * W + (size_t)NH * HS;
      cache_bad += memcmp(kc + ((size_t)b * Tmax + pos) * KV, row, KV * sizeof(float)) != 0;
      cache_bad += memcmp(vc + ((size_t)b * Tmax + pos) * KV, row + KV, KV * sizeof(float)) != 0;
    }
  }
  fprintf(stderr, "  decode vs forward max |err| %.2e\n", worst);
  CHECK_NEAR(worst, 0.0, 2e-6);
  CHECK(cache_bad == 0);
  /* The last step again, with the other thread count: bit-identical (one
   * thread per (b, head), sums in position order). */
  float *again = falloc((size_t)B * no);
  ops->set_threads(cur_threads == 1 ? 2 : 1);
  ops->attention_decode(again, kc, vc, step, B, Tmax, T - 1, NH, NKV, HS);
  ops->set_threads(cur_threads);
  CHECK(memcmp(again, out, (size_t)B * no * sizeof(float)) == 0);
  free(again), free(kc), free(vc), free(step), free(out);
  gqa_free(&c);
}

/* -------------------------------------------------------------- determinism */

/* Every llama op twice on the same inputs: bit-identical results. None of
 * them splits a sum between threads as the thread count says (attention
 * gives each head to one thread, RMSNorm each row, and sums its weight
 * gradient by fixed chunks of rows), so they also match across thread
 * counts. */
static void llama_run(const gqa_ctx *c, float *res, size_t nres, const float *x, float *w) {
  int N = c->B * c->T, C = 40, F = 20;
  size_t W = gqa_width(c), nq = (size_t)N * W, no = (size_t)N * c->NH * c->HS;
  memset(res, 0, nres * sizeof(float));
  float *p = res;
  float *qkv = p;
  memcpy(qkv, c->qkv, nq * sizeof(float));
  p += nq;
  ops->rope_forward(qkv, c->B, c->T, c->NH, c->NKV, c->HS, 2, 10000.0f);
  float *out = p, *lse = p + no;
  p += no + (size_t)c->B * c->NH * c->T;
  ops->attention_gqa_forward(out, lse, qkv, c->B, c->T, c->NH, c->NKV, c->HS);
  float *dqkv = p;
  p += nq;
  ops->attention_gqa_backward(dqkv, c->r, qkv, lse, c->B, c->T, c->NH, c->NKV, c->HS);
  ops->rope_backward(dqkv, c->B, c->T, c->NH, c->NKV, c->HS, 2, 10000.0f);
  float *y = p, *rstd = p + (size_t)N * C, *dx = rstd + N, *dw = dx + (size_t)N * C;
  p = dw + C;
  ops->rmsnorm_forward(y, rstd, x, w, N, C, 1e-6f);
  ops->rmsnorm_backward(dx, dw, y, x, w, rstd, N, C);
  float *s = p, *ds = p + (size_t)N * F;
  ops->swiglu_forward(s, x, N, F);
  ops->swiglu_backward(ds, x, s, N, F);
}

AA_TEST(llama_ops_are_deterministic) {
  gqa_ctx c = gqa_make(2, 70, 4, 2, 8);
  int N = c.B * c.T, C = 40;
  size_t nq = (size_t)N * gqa_width(&c), no = (size_t)N * c.NH * c.HS;
  size_t nres = 2 * nq + no + (size_t)c.B * c.NH * c.T + 2 * (size_t)N * C + N + C + 2 * (size_t)N * C;
  float *x = frand((size_t)N * C, -2, 2), *w = frand(C, 0.5f, 1.5f), *r1 = falloc(nres), *r2 = falloc(nres);
  llama_run(&c, r1, nres, x, w);
  llama_run(&c, r2, nres, x, w);
  CHECK(memcmp(r1, r2, nres * sizeof(float)) == 0);
  ops->set_threads(cur_threads == 1 ? 2 : 1);
  llama_run(&c, r2, nres, x, w);
  ops->set_threads(cur_threads);
  CHECK(memcmp(r1, r2, nres * sizeof(float)) == 0);
  free(x), free(w), free(r1), free(r2);
  gqa_free(&c);
}

static void run_all(int threads) {
  cur_threads = threads;
  ops->set_threads(threads);
  aa_rng_seed(&rng, 4321);
  fprintf(stderr, "threads = %d\n", threads);
  RUN(rmsnorm_forward_matches_double_reference);
  RUN(rmsnorm_backward_matches_finite_differences);
  RUN(swiglu_forward_matches_silu_formula);
  RUN(swiglu_backward_matches_finite_differences);
  RUN(swiglu_backward_set_overwrites_dinp);
  RUN(rope_forward_matches_rotation_formula);
  RUN(rope_backward_is_the_transpose);
  RUN(attention_gqa_forward_matches_double_reference);
  RUN(attention_gqa_with_nkv_nh_is_attention);
  RUN(attention_gqa_backward_matches_finite_differences);
  RUN(attention_decode_matches_full_attention);
  RUN(llama_ops_are_deterministic);
}

int main(void) {
  ops = aa_ops_cpu();
  CHECK(strcmp(ops->name, "cpu") == 0);
  run_all(1);
  run_all(2);
  return aa_test_summary();
}
