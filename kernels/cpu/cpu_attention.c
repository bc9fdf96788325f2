/* Causal multi-head self-attention on top of single-threaded sgemm.
 *
 * Each (batch, head) is an independent problem on a (T,hs) slice of qkv whose
 * rows are 3C apart, which sgemm reads in place through its leading
 * dimension. The T queries are processed in blocks of ATT_ROW_BLOCK rows:
 * block [r0,r1) only needs keys 0..r1-1, so the GEMMs skip the masked
 * triangle except the diagonal block. OpenMP runs one head per thread, each
 * calling single-threaded sgemm (see att_blas_single). Measured on 2 cores with
 * B=8, T=256, C=512, NH=8 (forward / backward): 8 / 9.5 ms, against 23 / 84
 * ms for hand-vectorised loops over a transposed copy of K (V), 11 / 14 ms
 * for full T x T GEMMs, and 22 ms forward for a serial loop over heads with
 * sgemm threading inside each small GEMM. Blocks of 32 rows beat 64 and 128
 * by 5-20% (less of the triangle computed, GEMMs still efficient).
 *
 * Determinism: every output element is produced by one thread with a fixed
 * sequence of single-threaded GEMMs, so results do not depend on the thread
 * count, and nothing uses float atomics. */
#include "cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define ATT_ROW_BLOCK 32

/* The per-head GEMMs run concurrently from OpenMP threads and must each
 * stay single-threaded. OpenBLAS's OpenMP build does that by itself inside a
 * parallel region (and its openblas_set_num_threads would also shrink our
 * OpenMP team), so nothing is changed there. The pthread build has one
 * global thread count, which is set to 1 for the duration and restored:
 * returns the count to restore, 0 for none. The engine drives the op table
 * from one thread, so nobody else calls BLAS meanwhile. */
static int att_blas_single(void) {
  if (openblas_get_parallel() != OPENBLAS_THREAD) return 0;
  int n = openblas_get_num_threads();
  openblas_set_num_threads(1);
  return n;
}

static void att_blas_restore(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

/* Softmax of rows r0..r1-1 of one head's score matrix s(T,T) (already
 * scaled), over columns 0..t for row t, max-subtracted; the columns after t
 * are zeroed as the att contract requires. The simd reductions have a
 * compile-time order, so they are deterministic. */
static void att_softmax_rows(float *s, int r0, int r1, int T) {
  for (int t = r0; t < r1; t++) {
    float *row = s + (size_t)t * T; // (T)
    float maxv = row[0];
#pragma omp simd reduction(max : maxv)
    for (int j = 1; j <= t; j++)
      maxv = row[j] > maxv ? row[j] : maxv;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; j++) {
      row[j] = aa__cpu_expf(row[j] - maxv);
      sum += row[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++)
      row[j] *= inv;
    for (int j = t + 1; j < T; j++)
      row[j] = 0.0f;
  }
}

/* Query rows r0..r1-1 of one head: att rows = softmax(q k^T / sqrt(hs)) with
 * the causal mask, out rows = att @ v. q, k, v, out point at the head's first
 * column with row strides 3C (qkv) and C (out). */
static void att_block_forward(float *out, float *att, const float *q, const float *k, const float *v, int r0,
                              int r1, int T, int C, int hs) {
  int m = r1 - r0, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  float *s = att + (size_t)r0 * T; // (m, r1) of (T,T)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f,
              s, T);
  att_softmax_rows(att, r0, r1, T);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, 1.0f, s, T, v, C3, 0.0f,
              out + (size_t)r0 * C, C);
}

/* out(B,T,C), att(B,NH,T,T) from qkv(B,T,3C). One thread per head: the
 * head's keys and values stay in its cache across the row blocks, and a
 * static split of (b, h) balances because every head costs the same. */
void aa__cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH;
  size_t C3 = 3 * (size_t)C;
  int blas_threads = att_blas_single();
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs; // (T,hs), rows 3C apart
      float *o = out + (size_t)b * T * C + (size_t)h * hs;        // (T,hs), rows C apart
      float *a = att + ((size_t)b * NH + h) * T * T;              // (T,T)
      for (int r0 = 0; r0 < T; r0 += ATT_ROW_BLOCK)
        att_block_forward(o, a, q, q + C, q + 2 * C, r0, aa__cpu_min(r0 + ATT_ROW_BLOCK, T), T, C, hs);
    }
  }
  att_blas_restore(blas_threads);
}

/* Backward of one head, block by block. With P = att rows r0..r1-1 and dO
 * their output gradients:
 *   dP = dO v^T, dS = P * (dP - rowsum(P * dP)) / sqrt(hs) (softmax backward),
 *   dq += dS k, dk += dS^T q, dv += P^T dO.
 * dS lives in the scratch ds (ATT_ROW_BLOCK rows of T floats). The entries
 * of P above the diagonal are zero by contract, so the diagonal block's GEMMs
 * may read them. */
static void att_head_backward(float *dq, const float *dout, const float *q, const float *att, float *ds,
                              int T, int C, int hs) {
  int C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  const float *k = q + C, *v = q + 2 * C;
  float *dk = dq + C, *dv = dq + 2 * C;
  for (int r0 = 0; r0 < T; r0 += ATT_ROW_BLOCK) {
    int r1 = aa__cpu_min(r0 + ATT_ROW_BLOCK, T), m = r1 - r0;
    const float *p = att + (size_t)r0 * T;   // (m, r1), row stride T
    const float *dO = dout + (size_t)r0 * C; // (m, hs), row stride C
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, 1.0f, dO, C, v, C3, 0.0f, ds, r1);
    for (int i = 0; i < m; i++) {
      int t = r0 + i;
      const float *pr = p + (size_t)i * T; // (r1)
      float *d = ds + (size_t)i * r1;      // (r1)
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j <= t; j++)
        dot += pr[j] * d[j];
      for (int j = 0; j <= t; j++)
        d[j] = pr[j] * (d[j] - dot) * scale;
      for (int j = t + 1; j < r1; j++)
        d[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, 1.0f, ds, r1, k, C3, 1.0f,
                dq + (size_t)r0 * C3, C3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, m, 1.0f, ds, r1, q + (size_t)r0 * C3, C3,
                1.0f, dk, C3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, m, 1.0f, p, T, dO, C, 1.0f, dv, C3);
  }
}

/* dqkv(B,T,3C) += gradient of attention_forward. A head's dk and dv rows
 * collect contributions from every later query block, so the parallel loop
 * is over (b, h) only: each thread owns its heads' columns of dqkv. */
void aa__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                                int T, int C, int NH) {
  int hs = C / NH;
  size_t C3 = 3 * (size_t)C;
  int blas_threads = att_blas_single();
#pragma omp parallel
  {
    float *ds = malloc((size_t)ATT_ROW_BLOCK * T * sizeof(float));
    if (!ds) {
      /* The op table has no error path; wrong gradients would be worse. */
      fprintf(stderr, "autoaccel: cannot allocate attention scratch (%d x %d floats)\n", ATT_ROW_BLOCK, T);
      abort();
    }
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        size_t off = (size_t)b * T * C3 + (size_t)h * hs;
        att_head_backward(dqkv + off, dout + (size_t)b * T * C + (size_t)h * hs, qkv + off,
                          att + ((size_t)b * NH + h) * T * T, ds, T, C, hs);
      }
    }
    free(ds);
  }
  att_blas_restore(blas_threads);
}
