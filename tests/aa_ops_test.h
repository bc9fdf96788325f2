/* What the op tests share (test_ops.c, test_ops_llama.c, test_ops_vocab.c,
 * test_cuda_ops.c): host buffers, zeroed or random floats and token ids,
 * aborting on allocation failure (a test cannot go on without them; each
 * test file draws from its own rng, which it passes in); double-precision
 * reference helpers; and the central-difference gradient check, whose
 * step and tolerance each file states and justifies for its ops. */
#ifndef AA_OPS_TEST_H
#define AA_OPS_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aa_test.h"
#include "common/aa.h"

/* n zeroed floats (at least one element allocated). */
static inline float *aa_test_falloc(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p) abort();
  return p;
}

/* A copy of x (n floats). */
static inline float *aa_test_fcopy(const float *x, size_t n) {
  float *p = aa_test_falloc(n);
  memcpy(p, x, n * sizeof(float));
  return p;
}

/* n floats uniform in [lo, hi) from r. */
static inline float *aa_test_frand(aa_rng_t *r, size_t n, float lo, float hi) {
  float *p = aa_test_falloc(n);
  for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * aa_rng_uniform(r);
  return p;
}

/* n token ids in [0, bound) from r. */
static inline int32_t *aa_test_irand(aa_rng_t *r, size_t n, int bound) {
  int32_t *p = malloc((n ? n : 1) * sizeof(int32_t));
  if (!p) abort();
  for (size_t i = 0; i < n; i++) p[i] = (int32_t)(aa_rng_u64(r) % (uint64_t)bound);
  return p;
}

/* n zeroed doubles (at least one element allocated). */
static inline double *aa_test_dalloc(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  if (!p) abort();
  return p;
}

/* sum a[i] * b[i] in double. */
static inline double aa_test_dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++)
    s += (double)a[i] * b[i];
  return s;
}

/* Largest |a - ref| over n elements (NaN counts as infinitely wrong). */
static inline double aa_test_max_abs_diff(const float *a, const double *ref, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs(a[i] - ref[i]);
    m = d == d ? fmax(m, d) : INFINITY;
  }
  return m;
}

/* A scalar loss of the inputs a gradient check perturbs. */
typedef double (*aa_test_loss_fn)(void *ctx);

/* Checks grad against central differences of f with respect to each of the
 * n elements of x (x is restored): (L(x+h) - L(x-h)) / (x+h - x-h), the
 * denominator from the floats actually stored, within
 * |analytic - numeric| <= atol + rtol * max(|a|, |n|) (NaN fails). Prints
 * the largest absolute error and err/tol. */
static inline void aa_test_fd_check(const char *what, float *x, const float *grad, size_t n,
                                    aa_test_loss_fn f, void *ctx, float h, double atol, double rtol) {
  double worst_abs = 0.0, worst_ratio = 0.0, worst_a = 0.0, worst_n = 0.0;
  size_t worst_i = 0, fails = 0;
  for (size_t i = 0; i < n; i++) {
    float x0 = x[i];
    x[i] = x0 + h;
    float xp = x[i];
    double lp = f(ctx);
    x[i] = x0 - h;
    float xm = x[i];
    double lm = f(ctx);
    x[i] = x0;
    double num = (lp - lm) / ((double)xp - (double)xm);
    double a = grad[i], err = fabs(a - num);
    double ratio = err / (atol + rtol * fmax(fabs(a), fabs(num)));
    if (!(ratio <= 1.0)) fails++;
    worst_abs = fmax(worst_abs, err);
    if (ratio > worst_ratio) {
      worst_ratio = ratio, worst_i = i, worst_a = a, worst_n = num;
    }
  }
  fprintf(stderr, "  %-26s %5zu elems, max |a-n| %.2e, max err/tol %.2f\n", what, n, worst_abs, worst_ratio);
  CHECK_MSG(fails == 0, "%s: %zu of %zu elements off, worst [%zu] analytic %.7g numeric %.7g", what, fails, n,
            worst_i, worst_a, worst_n);
}

#endif
