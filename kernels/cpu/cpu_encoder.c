/* Token + position embedding. */
#include "cpu_internal.h"

#include <limits.h>
#include <stddef.h>

/* out(B,T,C) = wte[inp[b,t]] + wpe[t]: the vocab-parallel forward over the
 * whole vocabulary (every token id in [0, INT_MAX) is a row), which adds
 * the same two values. */
void aa__cpu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                             int C) {
  aa__cpu_encoder_forward_vocab(out, inp, wte, wpe, 0, INT_MAX, B, T, C);
}

/* dwte(V,C) += scatter of dout(B,T,C) by token; dwpe(T,C) += sum over b:
 * the vocab-parallel backward over the whole vocabulary, which adds into
 * each element in the same order. */
void aa__cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                              int C) {
  aa__cpu_encoder_backward_vocab(dwte, dwpe, dout, inp, 0, INT_MAX, B, T, C);
}

/* The vocab-parallel forward: a rank holds the wte rows [lo, lo + valid) as
 * its rows 0..valid-1; a token outside them contributes 0, and so does wpe
 * when it is NULL (the ranks past the first, so that the sum over ranks adds
 * the position row once). Each element is (row or 0) + (position or 0): with
 * lo = 0, valid = V and wpe set that is encoder_forward's te + pe, bit for
 * bit, and adding zeros keeps the sum over ranks exact. Rows are
 * independent. */
void aa__cpu_encoder_forward_vocab(float *out, const int32_t *inp, const float *wte, const float *wpe, int lo,
                                   int valid, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    float *o = out + (size_t)bt * C; // (C)
    int row = inp[bt] - lo;
    const float *te = row >= 0 && row < valid ? wte + (size_t)row * C : NULL; // (C)
    const float *pe = wpe ? wpe + (size_t)(bt % T) * C : NULL;                // (C)
    for (int c = 0; c < C; c++)
      o[c] = (te ? te[c] : 0.0f) + (pe ? pe[c] : 0.0f);
  }
}

/* dwte += scatter of dout by token over the tokens in [lo, lo + valid) (at
 * row inp - lo), the others skipped; dwpe(T,C) += sum over b when not NULL.
 * Several positions may hold the same token, so rows of dwte collide: each
 * thread owns a block of columns instead and walks every position in order,
 * which makes the sums race-free and independent of the thread count, and
 * gives a rank's rows the same additions in the same order as the unsplit
 * gradient's: bit-identical. */
void aa__cpu_encoder_backward_vocab(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int lo,
                                    int valid, int B, int T, int C) {
  int nblocks = (C + AA__CPU_COL_BLOCK - 1) / AA__CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * AA__CPU_COL_BLOCK, c1 = aa__cpu_min(c0 + AA__CPU_COL_BLOCK, C);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const float *d = dout + ((size_t)b * T + t) * C; // (C)
        int row = inp[b * T + t] - lo;
        if (row >= 0 && row < valid) {
          float *dte = dwte + (size_t)row * C; // (C)
          for (int c = c0; c < c1; c++)
            dte[c] += d[c];
        }
        if (dwpe) {
          float *dpe = dwpe + (size_t)t * C; // (C)
          for (int c = c0; c < c1; c++)
            dpe[c] += d[c];
        }
      }
    }
  }
}
