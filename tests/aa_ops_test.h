/* Host buffers for the op tests (test_ops.c, test_ops_vocab.c,
 * test_cuda_ops.c): zeroed or random floats and token ids, aborting on
 * allocation failure (a test cannot go on without them). Each test file
 * draws from its own rng, which it passes in. */
#ifndef AA_OPS_TEST_H
#define AA_OPS_TEST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

#endif
