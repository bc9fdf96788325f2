/* The reduction every host backend shares (comm_internal.h): shm and gloo
 * sum in rank order in fp32 with one rounding, so their results are the
 * same bits. */
#include <stdint.h>
#include <string.h>

#include "../common/half.h"
#include "comm_internal.h"

#define SLICE_ALIGN 32 /* elements; slices of a reduction start on a cache line */
#define REDUCE_BLOCK 1024

/* Member k's part [lo, hi) of c elements, cache-line aligned. */
void aa__comm_slice(size_t c, int n, int k, size_t *lo, size_t *hi) {
  size_t per = (c + (size_t)n - 1) / (size_t)n;
  per = (per + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN;
  size_t a = (size_t)k * per;
  *lo = a < c ? a : c;
  *hi = *lo + per < c ? *lo + per : c;
}

/* dst(len) = op over k = 0..n-1, in that order, of src[k](len), summed in
 * fp32 and rounded once to dt. dst may be one of the sources (the same
 * elements): a block is read from every source before it is written. */
void aa__comm_reduce(void *dst, const unsigned char *const *src, int n, size_t len, aa_dtype_t dt,
                     aa_comm_op_t op) {
  float acc[REDUCE_BLOCK];
  float div = (float)n;
  for (size_t b = 0; b < len; b += REDUCE_BLOCK) {
    size_t m = len - b < REDUCE_BLOCK ? len - b : REDUCE_BLOCK;
    if (dt == AA_F32) {
      const float *p = (const float *)src[0] + b;
      for (size_t i = 0; i < m; i++)
        acc[i] = p[i];
      for (int k = 1; k < n; k++) {
        p = (const float *)src[k] + b;
        for (size_t i = 0; i < m; i++)
          acc[i] += p[i];
      }
    } else if (dt == AA_BF16) {
      const uint16_t *p = (const uint16_t *)src[0] + b;
      for (size_t i = 0; i < m; i++)
        acc[i] = aa_bf16_to_f32(p[i]);
      for (int k = 1; k < n; k++) {
        p = (const uint16_t *)src[k] + b;
        for (size_t i = 0; i < m; i++)
          acc[i] += aa_bf16_to_f32(p[i]);
      }
    } else {
      const uint16_t *p = (const uint16_t *)src[0] + b;
      for (size_t i = 0; i < m; i++)
        acc[i] = aa_f16_to_f32(p[i]);
      for (int k = 1; k < n; k++) {
        p = (const uint16_t *)src[k] + b;
        for (size_t i = 0; i < m; i++)
          acc[i] += aa_f16_to_f32(p[i]);
      }
    }
    if (op == AA_COMM_AVG)
      for (size_t i = 0; i < m; i++)
        acc[i] /= div;
    if (dt == AA_F32) {
      memcpy((float *)dst + b, acc, m * sizeof(float));
    } else if (dt == AA_BF16) {
      uint16_t *q = (uint16_t *)dst + b;
      for (size_t i = 0; i < m; i++)
        q[i] = aa_f32_to_bf16(acc[i]);
    } else {
      uint16_t *q = (uint16_t *)dst + b;
      for (size_t i = 0; i < m; i++)
        q[i] = aa_f32_to_f16(acc[i]);
    }
  }
}
