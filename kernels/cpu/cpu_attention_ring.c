/* Ring attention's elementwise block ops (ops.h: attention_block_merge and
 * attention_block_delta), for context parallelism. The block forward and
 * backward are cpu_attention.c's kernel, which runs plain causal attention
 * as the diagonal block problem. Each (batch, head, row) is written by one
 * thread: results do not depend on the thread count. */
#include "cpu_internal.h"

#include <math.h>

void aa__cpu_attention_block_merge(float *out, float *lse, const float *ob, const float *lseb, int B, int Tq,
                                   int NH, int HS) {
  const int ldo = NH * HS;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < Tq; i++) {
        size_t li = ((size_t)b * NH + h) * Tq + i;
        float a = lse[li], c = lseb[li], m = a > c ? a : c;
        float l = m + logf(aa__cpu_expf(a - m) + aa__cpu_expf(c - m));
        float wa = aa__cpu_expf(a - l), wc = aa__cpu_expf(c - l);
        float *o = out + ((size_t)b * Tq + i) * ldo + (size_t)h * HS;
        const float *x = ob + ((size_t)b * Tq + i) * ldo + (size_t)h * HS;
#pragma omp simd
        for (int d = 0; d < HS; d++)
          o[d] = wa * o[d] + wc * x[d];
        lse[li] = l;
      }
}

void aa__cpu_attention_block_delta(float *delta, const float *dout, const float *out, int B, int Tq, int NH,
                                   int HS) {
  const int ldo = NH * HS;
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < Tq; i++) {
        const float *o = out + ((size_t)b * Tq + i) * ldo + (size_t)h * HS;
        const float *d = dout + ((size_t)b * Tq + i) * ldo + (size_t)h * HS;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int x = 0; x < HS; x++)
          s += o[x] * d[x];
        delta[((size_t)b * NH + h) * Tq + i] = s;
      }
}
