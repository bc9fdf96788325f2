/* The CPU op table (kernels/cpu) against its contract in kernels/ops.h:
 * forward kernels against naive double-precision references, every backward
 * against central finite differences, the accumulate (+=) convention,
 * in-place forms, and run-to-run determinism. Every test runs with 1 and
 * with 2 threads. */
#include "aa_ops_test.h"
#include "aa_test.h"
#include "common/aa.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const aa_ops_t *ops;
static int cur_threads = 1;
static aa_rng_t rng;

/* This file's draws come from rng (tests/aa_ops_test.h). */
#define falloc(n) aa_test_falloc(n)
#define frand(n, lo, hi) aa_test_frand(&rng, (n), (lo), (hi))
#define irand(n, bound) aa_test_irand(&rng, (n), (bound))
#define fcopy(x, n) aa_test_fcopy((x), (n))
#define dalloc(n) aa_test_dalloc(n)
#define dot(a, b, n) aa_test_dot((a), (b), (n))
#define max_abs_diff(a, ref, n) aa_test_max_abs_diff((a), (ref), (n))

/* ----------------------------------------------------- finite differences
 *
 * Each check defines a scalar L = sum(forward_output * R) for a fixed random
 * R (for cross-entropy, the mean loss), evaluated in double from the float32
 * outputs, and compares the analytic gradient (backward with dout = R) with
 * the central difference (L(x+h) - L(x-h)) / (x+h - x-h) for every input
 * element, the denominator taken from the float values actually stored.
 *
 * Tolerance |analytic - numeric| <= FD_ATOL + FD_RTOL * max(|a|, |n|):
 *  - round-off: the kernels are deterministic, so outputs the perturbation
 *    does not touch cancel exactly in L(x+h) - L(x-h); each touched output
 *    carries float32 error ~6e-8 relative, and with up to ~70 touched
 *    outputs of size ~1 (a key feeds every later query) that is ~5e-7 in
 *    the difference, ~3e-5 after dividing by 2h = 2e-2. The observed maxima
 *    are 2.8e-5 at h = 1e-2 and ~10x more at h = 1e-3: round-off dominates;
 *  - truncation: h^2/6 * |L'''| ~ 1.7e-5 * |L'''|, smaller still for the
 *    smooth ops here (softmax, layernorm, gelu) at these input scales.
 * FD_ATOL = 1e-4 and FD_RTOL = 1e-3 leave a 5x margin over the observed
 * maxima (printed per tensor), while a real bug (a wrong factor, sign,
 * index or a missed term) gives errors the size of the gradient, ~1e-1. */
#define FD_H 1e-2f
#define FD_ATOL 1e-4
#define FD_RTOL 1e-3

typedef aa_test_loss_fn loss_fn;
#define fd_check(what, x, grad, n, f, ctx)                                                                   \
  aa_test_fd_check((what), (x), (grad), (n), (f), (ctx), FD_H, FD_ATOL, FD_RTOL)

/* Checks that g2 (backward called twice on zeroed gradients) is 2 * g1. */
static void check_doubles(const char *what, const float *g1, const float *g2, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(g2[i] - 2.0 * g1[i]) > 1e-6 * (1.0 + fabs(g1[i]))) bad++;
  }
  CHECK_MSG(bad == 0, "%s: %zu of %zu elements are not doubled by a second backward", what, bad, n);
}

/* ----------------------------------------------------------------- encoder */

typedef struct {
  float *out, *wte, *wpe, *r;
  int32_t *inp;
  int B, T, C;
} encoder_ctx;

static double encoder_loss(void *p) {
  encoder_ctx *c = p;
  ops->encoder_forward(c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
  return dot(c->out, c->r, (size_t)c->B * c->T * c->C);
}

AA_TEST(encoder_forward_adds_token_and_position_rows) {
  int B = 2, T = 5, C = 12, V = 7;
  float *wte = frand((size_t)V * C, -1, 1), *wpe = frand((size_t)T * C, -1, 1),
        *out = falloc((size_t)B * T * C);
  int32_t *inp = irand((size_t)B * T, V);
  ops->encoder_forward(out, inp, wte, wpe, B, T, C);
  int bad = 0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        bad += out[(b * T + t) * C + c] != wte[inp[b * T + t] * C + c] + wpe[t * C + c];
  CHECK(bad == 0);
  free(wte), free(wpe), free(out), free(inp);
}

AA_TEST(encoder_backward_matches_finite_differences) {
  int B = 2, T = 5, C = 12, V = 7;
  size_t n = (size_t)B * T * C;
  encoder_ctx c = {falloc(n),
                   frand((size_t)V * C, -1, 1),
                   frand((size_t)T * C, -1, 1),
                   frand(n, -1, 1),
                   irand((size_t)B * T, V),
                   B,
                   T,
                   C};
  c.inp[1] = c.inp[0]; /* a repeated token: its rows of dwte collide */
  c.inp[T + 3] = c.inp[0];
  float *dwte = falloc((size_t)V * C), *dwpe = falloc((size_t)T * C);
  ops->encoder_backward(dwte, dwpe, c.r, c.inp, B, T, C);
  fd_check("encoder dwte", c.wte, dwte, (size_t)V * C, encoder_loss, &c);
  fd_check("encoder dwpe", c.wpe, dwpe, (size_t)T * C, encoder_loss, &c);
  float *dwte2 = falloc((size_t)V * C), *dwpe2 = falloc((size_t)T * C);
  ops->encoder_backward(dwte2, dwpe2, c.r, c.inp, B, T, C);
  ops->encoder_backward(dwte2, dwpe2, c.r, c.inp, B, T, C);
  check_doubles("encoder dwte", dwte, dwte2, (size_t)V * C);
  check_doubles("encoder dwpe", dwpe, dwpe2, (size_t)T * C);
  free(c.out), free(c.wte), free(c.wpe), free(c.r), free(c.inp), free(dwte), free(dwpe), free(dwte2),
      free(dwpe2);
}

/* --------------------------------------------------------------- layernorm */

typedef struct {
  float *out, *mean, *rstd, *inp, *w, *b, *r;
  int N, C;
} ln_ctx;

static double ln_loss(void *p) {
  ln_ctx *c = p;
  ops->layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
  return dot(c->out, c->r, (size_t)c->N * c->C);
}

static ln_ctx ln_make(int N, int C) {
  ln_ctx c = {falloc((size_t)N * C),
              falloc(N),
              falloc(N),
              frand((size_t)N * C, -2, 2),
              frand(C, 0.5f, 1.5f),
              frand(C, -0.5f, 0.5f),
              frand((size_t)N * C, -1, 1),
              N,
              C};
  return c;
}

static void ln_free(ln_ctx *c) {
  free(c->out), free(c->mean), free(c->rstd), free(c->inp), free(c->w), free(c->b), free(c->r);
}

AA_TEST(layernorm_forward_matches_double_reference) {
  ln_ctx c = ln_make(10, 12);
  c.inp[0] += 100.0f; /* a large offset in one row must not hurt the variance */
  ln_loss(&c);
  double *ref = dalloc((size_t)c.N * c.C), err_stats = 0.0;
  for (int n = 0; n < c.N; n++) {
    const float *x = c.inp + n * c.C;
    double m = 0.0, v = 0.0;
    for (int i = 0; i < c.C; i++)
      m += x[i];
    m /= c.C;
    for (int i = 0; i < c.C; i++)
      v += (x[i] - m) * (x[i] - m);
    double s = 1.0 / sqrt(v / c.C + 1e-5);
    for (int i = 0; i < c.C; i++)
      ref[n * c.C + i] = (x[i] - m) * s * c.w[i] + c.b[i];
    err_stats = fmax(err_stats, fabs(c.mean[n] - m) + fabs(c.rstd[n] - s) / s);
  }
  CHECK_NEAR(err_stats, 0.0, 1e-5);
  CHECK_NEAR(max_abs_diff(c.out, ref, (size_t)c.N * c.C), 0.0, 1e-5);
  free(ref);
  ln_free(&c);
}

AA_TEST(layernorm_backward_matches_finite_differences) {
  ln_ctx c = ln_make(10, 12);
  size_t n = (size_t)c.N * c.C;
  ln_loss(&c);
  float *dinp = falloc(n), *dw = falloc(c.C), *db = falloc(c.C);
  ops->layernorm_backward(dinp, dw, db, c.r, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
  fd_check("layernorm dinp", c.inp, dinp, n, ln_loss, &c);
  fd_check("layernorm dweight", c.w, dw, c.C, ln_loss, &c);
  fd_check("layernorm dbias", c.b, db, c.C, ln_loss, &c);
  ln_loss(&c);
  float *dinp2 = falloc(n), *dw2 = falloc(c.C), *db2 = falloc(c.C);
  for (int k = 0; k < 2; k++)
    ops->layernorm_backward(dinp2, dw2, db2, c.r, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
  check_doubles("layernorm dinp", dinp, dinp2, n);
  check_doubles("layernorm dweight", dw, dw2, c.C);
  check_doubles("layernorm dbias", db, db2, c.C);
  free(dinp), free(dw), free(db), free(dinp2), free(dw2), free(db2);
  ln_free(&c);
}

/* ------------------------------------------------------------------ matmul */

typedef struct {
  float *out, *inp, *w, *bias, *r;
  int N, C, OC;
} mm_ctx;

static double mm_loss(void *p) {
  mm_ctx *c = p;
  ops->matmul_forward(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
  return dot(c->out, c->r, (size_t)c->N * c->OC);
}

static void matmul_forward_case(int with_bias) {
  int N = 10, C = 12, OC = 9;
  mm_ctx c = {frand((size_t)N * OC, 50, 60),
              frand((size_t)N * C, -1, 1),
              frand((size_t)OC * C, -1, 1),
              with_bias ? frand(OC, -1, 1) : NULL,
              NULL,
              N,
              C,
              OC};
  ops->matmul_forward(c.out, c.inp, c.w, c.bias, N, C, OC); /* old contents of out must not leak in */
  double *ref = dalloc((size_t)N * OC);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = c.bias ? c.bias[o] : 0.0;
      for (int i = 0; i < C; i++)
        s += (double)c.inp[n * C + i] * c.w[o * C + i];
      ref[n * OC + o] = s;
    }
  CHECK_NEAR(max_abs_diff(c.out, ref, (size_t)N * OC), 0.0, 1e-5);
  free(ref), free(c.out), free(c.inp), free(c.w), free(c.bias);
}

AA_TEST(matmul_forward_matches_double_reference) {
  matmul_forward_case(1);
  matmul_forward_case(0);
}

static void matmul_backward_case(int with_bias) {
  int N = 10, C = 12, OC = 9;
  mm_ctx c = {falloc((size_t)N * OC),
              frand((size_t)N * C, -1, 1),
              frand((size_t)OC * C, -1, 1),
              with_bias ? frand(OC, -1, 1) : NULL,
              frand((size_t)N * OC, -1, 1),
              N,
              C,
              OC};
  float *dinp = falloc((size_t)N * C), *dw = falloc((size_t)OC * C), *db = with_bias ? falloc(OC) : NULL;
  ops->matmul_backward(dinp, dw, db, c.r, c.inp, c.w, N, C, OC);
  fd_check(with_bias ? "matmul dinp" : "matmul dinp (no bias)", c.inp, dinp, (size_t)N * C, mm_loss, &c);
  fd_check(with_bias ? "matmul dweight" : "matmul dweight (no bias)", c.w, dw, (size_t)OC * C, mm_loss, &c);
  if (with_bias) fd_check("matmul dbias", c.bias, db, OC, mm_loss, &c);
  float *dinp2 = falloc((size_t)N * C), *dw2 = falloc((size_t)OC * C), *db2 = with_bias ? falloc(OC) : NULL;
  for (int k = 0; k < 2; k++)
    ops->matmul_backward(dinp2, dw2, db2, c.r, c.inp, c.w, N, C, OC);
  check_doubles("matmul dinp", dinp, dinp2, (size_t)N * C);
  check_doubles("matmul dweight", dw, dw2, (size_t)OC * C);
  if (with_bias) check_doubles("matmul dbias", db, db2, OC);
  free(c.out), free(c.inp), free(c.w), free(c.bias), free(c.r);
  free(dinp), free(dw), free(db), free(dinp2), free(dw2), free(db2);
}

AA_TEST(matmul_backward_matches_finite_differences) {
  matmul_backward_case(1);
  matmul_backward_case(0);
}

/* --------------------------------------------------------------- attention */

typedef struct {
  float *out, *lse, *qkv, *r;
  int B, T, C, NH;
} att_ctx;

static double att_loss(void *p) {
  att_ctx *c = p;
  ops->attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH);
  return dot(c->out, c->r, (size_t)c->B * c->T * c->C);
}

static att_ctx att_make(int B, int T, int C, int NH) {
  size_t n = (size_t)B * T * C;
  att_ctx c = {falloc(n), falloc((size_t)B * NH * T), frand(3 * n, -1.5f, 1.5f), frand(n, -1, 1), B, T, C,
               NH};
  return c;
}

static void att_free(att_ctx *c) { free(c->out), free(c->lse), free(c->qkv), free(c->r); }

/* Naive causal attention in double: out(B,T,C), the probabilities
 * att(B,NH,T,T) and each row's logsumexp lse(B,NH,T). */
static void att_reference(double *out, double *att, double *lse, const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        double *row = att + (((size_t)b * NH + h) * T + t) * T, maxv = -INFINITY, sum = 0.0;
        for (int j = 0; j < T; j++) {
          row[j] = 0.0;
          if (j > t) continue;
          const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
          for (int i = 0; i < hs; i++)
            row[j] += (double)q[i] * k[i];
          row[j] /= sqrt((double)hs);
          maxv = fmax(maxv, row[j]);
        }
        for (int j = 0; j <= t; j++)
          sum += row[j] = exp(row[j] - maxv);
        lse[((size_t)b * NH + h) * T + t] = maxv + log(sum);
        for (int j = 0; j <= t; j++)
          row[j] /= sum;
        for (int i = 0; i < hs; i++) {
          double o = 0.0;
          for (int j = 0; j <= t; j++)
            o += row[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + i];
          out[((size_t)b * T + t) * C + h * hs + i] = o;
        }
      }
}

/* T = 67 spans more than one of the backend's 32-row query blocks.
 * Tolerances: out 1e-5 absolute (|v| <= 1.5, sums of at most 67 products of
 * fp32 probabilities and values); lse 1e-5 absolute: the scores are fp32
 * dot products (|s| <= 12 here, ~1e-6 rounding) and the logsumexp adds one
 * log of a sum of fp32 exps (relative error a few 1e-7). */
AA_TEST(attention_forward_matches_double_reference) {
  int shapes[][4] = {{2, 5, 12, 3}, {2, 67, 16, 4}};
  for (int s = 0; s < 2; s++) {
    int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
    att_ctx c = att_make(B, T, C, NH);
    size_t na = (size_t)B * NH * T * T, nl = (size_t)B * NH * T;
    for (size_t i = 0; i < nl; i++)
      c.lse[i] = 7.0f; /* stale contents must be overwritten */
    att_loss(&c);
    double *out = dalloc((size_t)B * T * C), *att = dalloc(na), *lse = dalloc(nl);
    att_reference(out, att, lse, c.qkv, B, T, C, NH);
    CHECK_NEAR(max_abs_diff(c.out, out, (size_t)B * T * C), 0.0, 1e-5);
    CHECK_NEAR(max_abs_diff(c.lse, lse, nl), 0.0, 1e-5);
    free(out), free(att), free(lse);
    att_free(&c);
  }
}

/* Changing the key and value of position p must leave the outputs of every
 * position before p bit-identical, and change those from p on. */
AA_TEST(attention_is_causal) {
  int B = 2, T = 67, C = 16, NH = 4, p = 40;
  att_ctx c = att_make(B, T, C, NH);
  size_t n = (size_t)B * T * C;
  att_loss(&c);
  float *before = fcopy(c.out, n);
  for (int b = 0; b < B; b++)
    for (int i = C; i < 3 * C; i++)
      c.qkv[((size_t)b * T + p) * 3 * C + i] += 0.5f;
  att_loss(&c);
  size_t past_changed = 0, future_changed = 0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < C; i++) {
        int changed = c.out[((size_t)b * T + t) * C + i] != before[((size_t)b * T + t) * C + i];
        if (t < p)
          past_changed += changed;
        else
          future_changed += changed;
      }
  CHECK(past_changed == 0);
  CHECK(future_changed > 0);
  free(before);
  att_free(&c);
}

AA_TEST(attention_backward_matches_finite_differences) {
  int shapes[][4] = {{2, 5, 12, 3}, {1, 67, 8, 2}};
  for (int s = 0; s < 2; s++) {
    att_ctx c = att_make(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
    size_t nq = (size_t)3 * c.B * c.T * c.C;
    att_loss(&c);
    float *dqkv = falloc(nq), *dqkv2 = falloc(nq);
    ops->attention_backward(dqkv, c.r, c.qkv, c.lse, c.B, c.T, c.C, c.NH);
    for (int k = 0; k < 2; k++)
      ops->attention_backward(dqkv2, c.r, c.qkv, c.lse, c.B, c.T, c.C, c.NH);
    fd_check(s ? "attention dqkv (T=67)" : "attention dqkv", c.qkv, dqkv, nq, att_loss, &c);
    check_doubles("attention dqkv", dqkv, dqkv2, nq);
    free(dqkv), free(dqkv2);
    att_free(&c);
  }
}

/* Runs forward + backward on a shape with several heads and row blocks. */
static void att_run(att_ctx *c, float *dqkv) {
  memset(dqkv, 0, (size_t)3 * c->B * c->T * c->C * sizeof(float));
  att_loss(c);
  ops->attention_backward(dqkv, c->r, c->qkv, c->lse, c->B, c->T, c->C, c->NH);
}

AA_TEST(attention_is_deterministic) {
  att_ctx c = att_make(2, 130, 64, 4);
  size_t n = (size_t)c.B * c.T * c.C, nl = (size_t)c.B * c.NH * c.T;
  float *d1 = falloc(3 * n), *d2 = falloc(3 * n);
  att_run(&c, d1);
  float *out1 = fcopy(c.out, n), *lse1 = fcopy(c.lse, nl);
  att_run(&c, d2);
  CHECK(memcmp(out1, c.out, n * sizeof(float)) == 0);
  CHECK(memcmp(lse1, c.lse, nl * sizeof(float)) == 0);
  CHECK(memcmp(d1, d2, 3 * n * sizeof(float)) == 0);
  /* The backend gives each head to one thread, so even the thread count
   * does not change the result. */
  ops->set_threads(cur_threads == 1 ? 2 : 1);
  att_run(&c, d2);
  ops->set_threads(cur_threads);
  CHECK(memcmp(out1, c.out, n * sizeof(float)) == 0);
  CHECK(memcmp(d1, d2, 3 * n * sizeof(float)) == 0);
  free(d1), free(d2), free(out1), free(lse1);
  att_free(&c);
}

/* -------------------------------------------------------------------- gelu */

typedef struct {
  float *out, *inp, *r;
  size_t n;
} gelu_ctx;

static double gelu_loss(void *p) {
  gelu_ctx *c = p;
  ops->gelu_forward(c->out, c->inp, c->n);
  return dot(c->out, c->r, c->n);
}

AA_TEST(gelu_forward_matches_tanh_formula) {
  size_t n = 37;
  float *x = frand(n, -5, 5), *y = falloc(n);
  double *ref = dalloc(n);
  ops->gelu_forward(y, x, n);
  for (size_t i = 0; i < n; i++)
    ref[i] = 0.5 * x[i] * (1.0 + tanh(sqrt(2.0 / acos(-1.0)) * (x[i] + 0.044715 * pow(x[i], 3))));
  CHECK_NEAR(max_abs_diff(y, ref, n), 0.0, 2e-6);
  free(x), free(y), free(ref);
}

/* The same formula on a dense sweep of [-10, 10] (the vectorised tanh's error
 * shows where the 37 random points may miss it): the largest absolute error
 * against double, printed, within the bound above. */
AA_TEST(gelu_forward_error_over_a_dense_sweep) {
  size_t n = 200001;
  float *x = falloc(n), *y = falloc(n);
  double *ref = dalloc(n);
  for (size_t i = 0; i < n; i++) {
    x[i] = -10.0f + 20.0f * (float)i / (float)(n - 1);
    ref[i] = 0.5 * x[i] * (1.0 + tanh(sqrt(2.0 / acos(-1.0)) * (x[i] + 0.044715 * pow(x[i], 3))));
  }
  ops->gelu_forward(y, x, n);
  double err = max_abs_diff(y, ref, n);
  fprintf(stderr, "  gelu_forward max abs err %.2e on [-10, 10]\n", err);
  CHECK_NEAR(err, 0.0, 2e-6);
  free(x), free(y), free(ref);
}

AA_TEST(gelu_backward_matches_finite_differences) {
  gelu_ctx c = {falloc(37), frand(37, -4, 4), frand(37, -1, 1), 37};
  float *dinp = falloc(c.n), *dinp2 = falloc(c.n);
  ops->gelu_backward(dinp, c.inp, c.r, c.n);
  for (int k = 0; k < 2; k++)
    ops->gelu_backward(dinp2, c.inp, c.r, c.n);
  fd_check("gelu dinp", c.inp, dinp, c.n, gelu_loss, &c);
  check_doubles("gelu dinp", dinp, dinp2, c.n);
  free(c.out), free(c.inp), free(c.r), free(dinp), free(dinp2);
}

/* ------------------------------------------------- fused fc epilogue (ops.h) */

static double gelu_ref(double x) {
  return 0.5 * x * (1.0 + tanh(sqrt(2.0 / acos(-1.0)) * (x + 0.044715 * x * x * x)));
}

/* bias_gelu_forward: pre gets its bias (exactly: one float add), out the
 * GELU of it within gelu_forward's bound against double; without a bias
 * pre is left as it was. 70 x 150 is above the kernels' parallel
 * threshold, so the two-thread run splits it. */
AA_TEST(bias_gelu_forward_adds_the_bias_then_gelu) {
  const int N = 70, OC = 150;
  const size_t n = (size_t)N * OC;
  float *pre = frand(n, -5, 5), *bias = frand(OC, -1, 1), *out = frand(n, 50, 60);
  float *pre0 = fcopy(pre, n);
  double *ref = dalloc(n);
  ops->bias_gelu_forward(pre, out, bias, N, OC);
  int exact = 1;
  for (int r = 0; r < N; r++)
    for (int o = 0; o < OC; o++) {
      size_t i = (size_t)r * OC + o;
      exact &= pre[i] == pre0[i] + bias[o];
      ref[i] = gelu_ref(pre[i]);
    }
  CHECK(exact);
  CHECK_NEAR(max_abs_diff(out, ref, n), 0.0, 2e-6);
  memcpy(pre, pre0, n * sizeof(float));
  ops->bias_gelu_forward(pre, out, NULL, N, OC);
  CHECK(memcmp(pre, pre0, n * sizeof(float)) == 0);
  for (size_t i = 0; i < n; i++)
    ref[i] = gelu_ref(pre0[i]);
  CHECK_NEAR(max_abs_diff(out, ref, n), 0.0, 2e-6);
  free(pre), free(bias), free(out), free(pre0), free(ref);
}

/* gelu_backward_bias against its unfused form (gelu_backward into zeros,
 * then matmul_backward's bias sums of that gradient): the same values, and
 * dpre is overwritten (it starts as garbage) while dbias accumulates (it
 * starts non-zero). The sums are also checked against double. */
AA_TEST(gelu_backward_bias_matches_the_unfused_ops) {
  const int N = 70, OC = 150, C = 3;
  const size_t n = (size_t)N * OC;
  float *pre = frand(n, -4, 4), *dout = frand(n, -1, 1), *dpre = frand(n, 50, 60), *db = frand(OC, -1, 1);
  float *db0 = fcopy(db, OC), *dpre2 = falloc(n), *db2 = fcopy(db, OC);
  float *inp = frand((size_t)N * C, -1, 1), *w = frand((size_t)OC * C, -1, 1), *dinp = falloc((size_t)N * C);
  ops->gelu_backward_bias(dpre, db, pre, dout, N, OC);
  ops->gelu_backward(dpre2, pre, dout, n);
  ops->matmul_backward(dinp, NULL, db2, dpre2, inp, w, N, C, OC);
  CHECK(memcmp(dpre, dpre2, n * sizeof(float)) == 0);
  CHECK(memcmp(db, db2, OC * sizeof(float)) == 0);
  double *ref = dalloc(OC);
  for (int o = 0; o < OC; o++) {
    double s = db0[o];
    for (int r = 0; r < N; r++)
      s += dpre2[(size_t)r * OC + o];
    ref[o] = s;
  }
  CHECK_NEAR(max_abs_diff(db, ref, OC), 0.0, 1e-5);
  float *dpre3 = frand(n, 50, 60);
  ops->gelu_backward_bias(dpre3, NULL, pre, dout, N, OC);
  CHECK(memcmp(dpre3, dpre2, n * sizeof(float)) == 0);
  free(pre), free(dout), free(dpre), free(db), free(db0), free(dpre2), free(db2), free(inp), free(w),
      free(dinp);
  free(ref), free(dpre3);
}

/* The column sums (bias gradients, LayerNorm's weight and bias gradients)
 * go by fixed chunks of rows (cpu_internal.h AA__CPU_SUM_ROWS): over
 * several chunks and a short last one, they match double sums of the same
 * terms within 1e-5 (values below 4, N = 203 terms: a float running sum of
 * them is off by ~1e-6), and are bit-identical at the other thread count. */
AA_TEST(column_sums_over_row_chunks_match_double_and_any_thread_count) {
  const int N = 3 * AA__CPU_SUM_ROWS + 11, C = 40, OC = 3;
  ln_ctx c = ln_make(N, C);
  const size_t n = (size_t)N * C;
  ln_loss(&c);
  float *out[2][4]; /* per thread count: LayerNorm dinp, dweight|dbias; matmul dbias; gelu dbias */
  float *inp = frand((size_t)N * OC, -1, 1), *w = frand((size_t)C * OC, -1, 1),
        *dinp = falloc((size_t)N * OC);
  float *db0 = frand(C, -1, 1), *gpre = falloc(n);
  for (int k = 0; k < 2; k++) {
    ops->set_threads(k ? (cur_threads == 1 ? 2 : 1) : cur_threads);
    out[k][0] = falloc(n), out[k][1] = falloc(2 * (size_t)C);
    out[k][2] = fcopy(db0, C), out[k][3] = fcopy(db0, C);
    ops->layernorm_backward(out[k][0], out[k][1], out[k][1] + C, c.r, c.inp, c.w, c.mean, c.rstd, N, C);
    ops->matmul_backward(dinp, NULL, out[k][2], c.r, inp, w, N, OC, C);
    ops->gelu_backward_bias(gpre, out[k][3], c.inp, c.r, N, C);
  }
  ops->set_threads(cur_threads);
  double *ref = dalloc(4 * (size_t)C);
  for (int j = 0; j < C; j++) {
    double sw = 0.0, sb = 0.0, sm = db0[j], sg = db0[j];
    for (int r = 0; r < N; r++) {
      size_t i = (size_t)r * C + j;
      sw += (double)c.r[i] * ((c.inp[i] - c.mean[r]) * c.rstd[r]);
      sb += c.r[i];
      sm += c.r[i];
      sg += gpre[i];
    }
    ref[j] = sw, ref[C + j] = sb, ref[2 * C + j] = sm, ref[3 * C + j] = sg;
  }
  CHECK_NEAR(max_abs_diff(out[0][1], ref, 2 * (size_t)C), 0.0, 1e-5);
  CHECK_NEAR(max_abs_diff(out[0][2], ref + 2 * C, C), 0.0, 1e-5);
  CHECK_NEAR(max_abs_diff(out[0][3], ref + 3 * C, C), 0.0, 1e-5);
  const size_t len[4] = {n, 2 * (size_t)C, C, C};
  for (int q = 0; q < 4; q++) {
    CHECK_MSG(memcmp(out[0][q], out[1][q], len[q] * sizeof(float)) == 0,
              "output %d differs between 1 and 2 threads", q);
    free(out[0][q]), free(out[1][q]);
  }
  free(inp), free(w), free(dinp), free(db0), free(gpre), free(ref);
  ln_free(&c);
}

/* matmul_backward_set overwrites dinp (garbage before) with what
 * matmul_backward accumulates into zeros, bit for bit, and accumulates the
 * weight and bias gradients as it does. */
AA_TEST(matmul_backward_set_overwrites_dinp) {
  const int N = 40, C = 33, OC = 21;
  float *dout = frand((size_t)N * OC, -1, 1), *inp = frand((size_t)N * C, -1, 1),
        *w = frand((size_t)OC * C, -1, 1);
  float *dinp = frand((size_t)N * C, 50, 60), *dw = frand((size_t)OC * C, -1, 1), *db = frand(OC, -1, 1);
  float *dinp2 = falloc((size_t)N * C), *dw2 = fcopy(dw, (size_t)OC * C), *db2 = fcopy(db, OC);
  ops->matmul_backward_set(dinp, dw, db, dout, inp, w, N, C, OC);
  ops->matmul_backward(dinp2, dw2, db2, dout, inp, w, N, C, OC);
  CHECK(memcmp(dinp, dinp2, (size_t)N * C * sizeof(float)) == 0);
  CHECK(memcmp(dw, dw2, (size_t)OC * C * sizeof(float)) == 0);
  CHECK(memcmp(db, db2, OC * sizeof(float)) == 0);
  free(dout), free(inp), free(w), free(dinp), free(dw), free(db), free(dinp2), free(dw2), free(db2);
}

/* memset0 above its parallel threshold (split in 64 KiB pieces, the last
 * one short) zeroes exactly its bytes. */
AA_TEST(memset0_zeroes_exactly_its_bytes) {
  const size_t bytes = (AA__CPU_COPY_PAR_MIN + 4096) * sizeof(float) + 7;
  unsigned char *p = malloc(bytes + 2);
  memset(p, 0xab, bytes + 2);
  ops->memset0(p + 1, bytes);
  size_t nonzero = 0;
  for (size_t i = 1; i <= bytes; i++)
    nonzero += p[i] != 0;
  CHECK(nonzero == 0 && p[0] == 0xab && p[bytes + 1] == 0xab);
  free(p);
}

/* ------------------------------------------------------ residual, accumulate */

typedef struct {
  float *out, *a, *b, *r;
  size_t n;
} res_ctx;

static double res_loss(void *p) {
  res_ctx *c = p;
  ops->residual_forward(c->out, c->a, c->b, c->n);
  return dot(c->out, c->r, c->n);
}

/* The engine's residual backward is accumulate(da, dout), accumulate(db,
 * dout); the finite differences confirm that is the gradient of
 * residual_forward. */
AA_TEST(residual_and_accumulate_match_finite_differences) {
  size_t n = 23;
  res_ctx c = {falloc(n), frand(n, -1, 1), frand(n, -1, 1), frand(n, -1, 1), n};
  float *da = falloc(n), *db = frand(n, -1, 1), *db0 = fcopy(db, n);
  ops->accumulate(da, c.r, n);
  fd_check("residual da", c.a, da, n, res_loss, &c);
  ops->accumulate(db, c.r, n);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += db[i] != db0[i] + c.r[i];
  CHECK(bad == 0);
  free(c.out), free(c.a), free(c.b), free(c.r), free(da), free(db), free(db0);
}

AA_TEST(residual_forward_allows_aliasing) {
  size_t n = 20000; /* above the parallel threshold */
  float *a = frand(n, -1, 1), *b = frand(n, -1, 1), *sum = falloc(n), *a2 = fcopy(a, n), *b2 = fcopy(b, n);
  ops->residual_forward(sum, a, b, n);
  ops->residual_forward(a2, a2, b, n);
  ops->residual_forward(b2, a, b2, n);
  CHECK(memcmp(sum, a2, n * sizeof(float)) == 0);
  CHECK(memcmp(sum, b2, n * sizeof(float)) == 0);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += sum[i] != a[i] + b[i];
  CHECK(bad == 0);
  free(a), free(b), free(sum), free(a2), free(b2);
}

/* ------------------------------------------------------------ crossentropy */

typedef struct {
  float *losses, *probs, *logits;
  int32_t *targets;
  int N, V;
} ce_ctx;

/* Mean loss, matching crossentropy_backward with dloss = 1/N. */
static double ce_loss(void *p) {
  ce_ctx *c = p;
  ops->crossentropy_forward(c->losses, c->probs, c->logits, c->targets, c->N, c->V);
  double s = 0.0;
  for (int n = 0; n < c->N; n++)
    s += c->losses[n];
  return s / c->N;
}

AA_TEST(crossentropy_forward_matches_double_reference) {
  int N = 10, V = 7;
  ce_ctx c = {falloc(N), falloc((size_t)N * V), frand((size_t)N * V, -3, 3), irand(N, V), N, V};
  for (int i = 0; i < V; i++)
    c.logits[V + i] += 1000.0f;              /* huge logits: max-subtraction keeps it finite */
  c.logits[2 * V + c.targets[2]] = -1000.0f; /* the target's probability underflows */
  ce_loss(&c);
  double *lref = dalloc(N), *pref = dalloc((size_t)N * V);
  for (int n = 0; n < N; n++) {
    const float *x = c.logits + n * V;
    double m = x[0], s = 0.0;
    for (int i = 1; i < V; i++)
      m = fmax(m, x[i]);
    for (int i = 0; i < V; i++)
      s += exp(x[i] - m);
    for (int i = 0; i < V; i++)
      pref[n * V + i] = exp(x[i] - m) / s;
    lref[n] = log(s) - (x[c.targets[n]] - m);
  }
  CHECK_NEAR(max_abs_diff(c.probs, pref, (size_t)N * V), 0.0, 1e-6);
  for (int n = 0; n < N; n++)
    CHECK_NEAR(c.losses[n], lref[n], 1e-5 * (1.0 + lref[n]));
  CHECK(isfinite(c.losses[2]) && c.losses[2] > 900.0f);
  /* In place (probs == logits) gives the same numbers. */
  float *inplace = fcopy(c.logits, (size_t)N * V), *losses2 = falloc(N);
  ops->crossentropy_forward(losses2, inplace, inplace, c.targets, N, V);
  CHECK(memcmp(inplace, c.probs, (size_t)N * V * sizeof(float)) == 0);
  CHECK(memcmp(losses2, c.losses, (size_t)N * sizeof(float)) == 0);
  free(lref), free(pref), free(inplace), free(losses2);
  free(c.losses), free(c.probs), free(c.logits), free(c.targets);
}

AA_TEST(crossentropy_backward_matches_finite_differences) {
  int N = 10, V = 7;
  size_t nv = (size_t)N * V;
  ce_ctx c = {falloc(N), falloc(nv), frand(nv, -3, 3), irand(N, V), N, V};
  ce_loss(&c);
  float dloss = 1.0f / N;
  float *dlogits = falloc(nv), *dlogits2 = falloc(nv);
  ops->crossentropy_backward(dlogits, c.probs, c.targets, dloss, N, V);
  for (int k = 0; k < 2; k++)
    ops->crossentropy_backward(dlogits2, c.probs, c.targets, dloss, N, V);
  check_doubles("crossentropy dlogits", dlogits, dlogits2, nv);
  /* Aliased with probs, the gradient overwrites instead of accumulating. */
  float *inplace = fcopy(c.probs, nv);
  ops->crossentropy_backward(inplace, inplace, c.targets, dloss, N, V);
  CHECK(memcmp(inplace, dlogits, nv * sizeof(float)) == 0);
  fd_check("crossentropy dlogits", c.logits, dlogits, nv, ce_loss, &c);
  free(c.losses), free(c.probs), free(c.logits), free(c.targets), free(dlogits), free(dlogits2),
      free(inplace);
}

/* ------------------------------------------------------------ math helpers */

/* The backend's vectorisable exp and tanh (softmax, cross-entropy, GELU)
 * against libm in double on a dense sweep of their useful range. */
AA_TEST(cpu_expf_and_tanhf_are_accurate) {
  double exp_rel = 0.0, tanh_abs = 0.0;
  for (int i = 0; i <= 1000000; i++) {
    float x = -87.0f + 175.0f * (float)i / 1000000.0f;
    double ref = exp((double)x);
    exp_rel = fmax(exp_rel, fabs(aa__cpu_expf(x) - ref) / ref);
    float u = -10.0f + 20.0f * (float)i / 1000000.0f;
    tanh_abs = fmax(tanh_abs, fabs(aa__cpu_tanhf(u) - tanh((double)u)));
  }
  fprintf(stderr, "  max rel err expf %.2e, max abs err tanhf %.2e\n", exp_rel, tanh_abs);
  CHECK(exp_rel < 1.5e-7);
  CHECK(tanh_abs < 3e-7);
  CHECK(aa__cpu_expf(0.0f) == 1.0f);
  CHECK(aa__cpu_expf(-1000.0f) >= 0.0f && aa__cpu_expf(-1000.0f) < 2e-38f);
  CHECK(isnan(aa__cpu_expf(NAN)));
  CHECK(aa__cpu_tanhf(50.0f) == 1.0f && aa__cpu_tanhf(-50.0f) == -1.0f);
}

/* ---------------------------------------------------------------- optimizer */

/* One AdamW step against the torch.optim.AdamW formula in double, at a
 * step t > 1 so that the bias corrections matter, with and without decay. */
AA_TEST(adamw_step_matches_torch_formula) {
  size_t n = 29;
  float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
  int t = 3;
  for (int with_wd = 0; with_wd < 2; with_wd++) {
    float wd = with_wd ? 0.1f : 0.0f;
    float *p = frand(n, -1, 1), *g = frand(n, -1, 1), *m = frand(n, -0.1f, 0.1f), *v = frand(n, 0, 0.01f);
    double *pr = dalloc(n), *mr = dalloc(n), *vr = dalloc(n);
    for (size_t i = 0; i < n; i++) {
      mr[i] = (double)b1 * m[i] + (1.0 - b1) * g[i];
      vr[i] = (double)b2 * v[i] + (1.0 - b2) * (double)g[i] * g[i];
      double mhat = mr[i] / (1.0 - pow(b1, t)), vhat = vr[i] / (1.0 - pow(b2, t));
      pr[i] = p[i] * (1.0 - (double)lr * wd) - lr * mhat / (sqrt(vhat) + eps);
    }
    ops->adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, t);
    CHECK_NEAR(max_abs_diff(m, mr, n), 0.0, 1e-7);
    CHECK_NEAR(max_abs_diff(v, vr, n), 0.0, 1e-8);
    CHECK_NEAR(max_abs_diff(p, pr, n), 0.0, 1e-6);
    free(p), free(g), free(m), free(v), free(pr), free(mr), free(vr);
  }
}

/* adamw_update_scaled (the clip/unscale multiply folded into AdamW) against
 * what it replaces, scale then adamw_update: bit for bit, on a slice below
 * and one above the size where the loop is split over threads, with a
 * clip-like factor and with 1 (the no-clip case); its gradient untouched.
 * And against the double formula on the scaled gradient, as above. */
AA_TEST(adamw_update_scaled_is_scale_then_adamw) {
  const size_t sizes[] = {29, 100003};
  const float factors[] = {0.3172f, 1.0f};
  float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  int t = 3;
  CHECK(ops->adamw_update_scaled != NULL);
  if (!ops->adamw_update_scaled) return;
  for (int k = 0; k < 2; k++)
    for (int f = 0; f < 2; f++) {
      size_t n = sizes[k];
      float s = factors[f];
      float *p = frand(n, -1, 1), *g = frand(n, -3, 3), *m = frand(n, -0.1f, 0.1f), *v = frand(n, 0, 0.01f);
      float *p2 = fcopy(p, n), *g2 = fcopy(g, n), *m2 = fcopy(m, n), *v2 = fcopy(v, n), *g0 = fcopy(g, n);
      double *pr = dalloc(n);
      for (size_t i = 0; i < n; i++) {
        double gs = (double)(g[i] * s);
        double mr = (double)b1 * m[i] + (1.0 - b1) * gs, vr = (double)b2 * v[i] + (1.0 - b2) * gs * gs;
        double mhat = mr / (1.0 - pow(b1, t)), vhat = vr / (1.0 - pow(b2, t));
        pr[i] = p[i] * (1.0 - (double)lr * wd) - lr * mhat / (sqrt(vhat) + eps);
      }
      ops->adamw_update_scaled(p, g, m, v, n, lr, b1, b2, eps, wd, t, s);
      ops->scale(g2, s, n);
      ops->adamw_update(p2, g2, m2, v2, n, lr, b1, b2, eps, wd, t);
      CHECK_MSG(!memcmp(p, p2, n * sizeof(float)) && !memcmp(m, m2, n * sizeof(float)) &&
                    !memcmp(v, v2, n * sizeof(float)),
                "n %zu factor %g: not the bits of scale + adamw_update", n, s);
      CHECK(!memcmp(g, g0, n * sizeof(float)));
      CHECK_NEAR(max_abs_diff(p, pr, n), 0.0, 1e-6);
      free(p), free(g), free(m), free(v), free(p2), free(g2), free(m2), free(v2), free(g0), free(pr);
    }
}

AA_TEST(sum_squares_and_scale_are_exact_enough) {
  size_t n = 100003;
  float *x = frand(n, -2, 2);
  double ref = 0.0;
  for (size_t i = 0; i < n; i++)
    ref += (double)x[i] * x[i];
  double s = ops->sum_squares(x, n);
  CHECK_NEAR(s, ref, 1e-9 * ref);
  CHECK(ops->sum_squares(x, 3) == (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2]);
  CHECK(ops->sum_squares(x, 0) == 0.0);
  float *y = fcopy(x, n);
  ops->scale(y, 0.25f, n);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += y[i] != x[i] * 0.25f;
  CHECK(bad == 0);
  free(x), free(y);
}

AA_TEST(sum_squares_is_deterministic) {
  size_t n = 1000003;
  float *x = frand(n, -3, 3);
  double a = ops->sum_squares(x, n), b = ops->sum_squares(x, n);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  /* A fixed partition, independent of the thread count. */
  ops->set_threads(cur_threads == 1 ? 2 : 1);
  double c = ops->sum_squares(x, n);
  ops->set_threads(cur_threads);
  CHECK(memcmp(&a, &c, sizeof a) == 0);
  free(x);
}

static void run_all(int threads) {
  cur_threads = threads;
  ops->set_threads(threads);
  aa_rng_seed(&rng, 1234);
  fprintf(stderr, "threads = %d\n", threads);
  RUN(encoder_forward_adds_token_and_position_rows);
  RUN(encoder_backward_matches_finite_differences);
  RUN(layernorm_forward_matches_double_reference);
  RUN(layernorm_backward_matches_finite_differences);
  RUN(matmul_forward_matches_double_reference);
  RUN(matmul_backward_matches_finite_differences);
  RUN(attention_forward_matches_double_reference);
  RUN(attention_is_causal);
  RUN(attention_backward_matches_finite_differences);
  RUN(attention_is_deterministic);
  RUN(gelu_forward_matches_tanh_formula);
  RUN(gelu_forward_error_over_a_dense_sweep);
  RUN(gelu_backward_matches_finite_differences);
  RUN(bias_gelu_forward_adds_the_bias_then_gelu);
  RUN(gelu_backward_bias_matches_the_unfused_ops);
  RUN(column_sums_over_row_chunks_match_double_and_any_thread_count);
  RUN(matmul_backward_set_overwrites_dinp);
  RUN(memset0_zeroes_exactly_its_bytes);
  RUN(residual_and_accumulate_match_finite_differences);
  RUN(residual_forward_allows_aliasing);
  RUN(crossentropy_forward_matches_double_reference);
  RUN(crossentropy_backward_matches_finite_differences);
  RUN(cpu_expf_and_tanhf_are_accurate);
  RUN(adamw_step_matches_torch_formula);
  RUN(adamw_update_scaled_is_scale_then_adamw);
  RUN(sum_squares_and_scale_are_exact_enough);
  RUN(sum_squares_is_deterministic);
}

int main(void) {
  ops = aa_ops_cpu();
  CHECK(strcmp(ops->name, "cpu") == 0);
  run_all(1);
  run_all(2);
  return aa_test_summary();
}
