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
 * by 5-20% (less of the triangle computed, GEMMs still efficient). (These
 * figures are from when the forward kept att(B,NH,T,T); see below.)
 *
 * Nothing T x T is kept between the passes (the contract in ops.h): the
 * forward keeps one logsumexp per query row, and the backward recomputes a
 * row block's probabilities from q, k and it, one block at a time in
 * per-thread scratch. That costs one more score GEMM per block in the
 * backward and saves B*NH*T*T floats per layer of kept activations.
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

/* Softmax of the rows of a block of scores s (m rows of stride ld, already
 * scaled), block row i being query r0 + i: over columns 0..t for query t,
 * max-subtracted, the columns after t zeroed. With lse non-NULL, lse[i]
 * receives the row's logsumexp (max + log of the sum). The simd reductions
 * have a compile-time order, so they are deterministic. */
static void att_softmax_rows(float *s, float *lse, int r0, int m, int ld) {
  for (int i = 0; i < m; i++) {
    int t = r0 + i;
    float *row = s + (size_t)i * ld;
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
    for (int j = t + 1; j < ld; j++)
      row[j] = 0.0f;
    if (lse) lse[i] = maxv + logf(sum);
  }
}

/* The scaled scores of query rows r0..r1-1 of one head against keys
 * 0..r1-1, q k^T / sqrt(hs), into p (m x r1, stride r1). q and k point at
 * the head's first column, rows 3C apart. */
static void att_block_scores(float *p, const float *q, const float *k, int r0, int r1, int C, int hs) {
  int C3 = 3 * C;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.0f / sqrtf((float)hs),
              q + (size_t)r0 * C3, C3, k, C3, 0.0f, p, r1);
}

/* Query rows r0..r1-1 of one head: P = softmax(q k^T / sqrt(hs)) with the
 * causal mask into the scratch p (m x r1), their logsumexp into lse, and the
 * output rows P @ v. q, k, v, out point at the head's first column with row
 * strides 3C (qkv) and C (out). */
static void att_block_forward(float *out, float *lse, float *p, const float *q, const float *k, const float *v,
                              int r0, int r1, int C, int hs) {
  int m = r1 - r0, C3 = 3 * C;
  att_block_scores(p, q, k, r0, r1, C, hs);
  att_softmax_rows(p, lse + r0, r0, m, r1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, 1.0f, p, r1, v, C3, 0.0f,
              out + (size_t)r0 * C, C);
}

/* Recomputes rows r0..r1-1 of P (m x r1, stride r1) from the scores and
 * the forward's logsumexp: P(t,u) = exp(s(t,u) - lse(t)) for u <= t, else 0.
 * The forward's normalised exp and this one differ by rounding only. */
static void att_block_probs(float *p, const float *lse, const float *q, const float *k, int r0, int r1, int C,
                            int hs) {
  int m = r1 - r0;
  att_block_scores(p, q, k, r0, r1, C, hs);
  for (int i = 0; i < m; i++) {
    int t = r0 + i;
    float *row = p + (size_t)i * r1, l = lse[t];
#pragma omp simd
    for (int j = 0; j <= t; j++)
      row[j] = aa__cpu_expf(row[j] - l);
    for (int j = t + 1; j < r1; j++)
      row[j] = 0.0f;
  }
}

/* Per-thread scratch of two row blocks of T floats; the op table has no
 * error path, and wrong results would be worse than stopping. */
static float *att_scratch(int T) {
  float *p = malloc((size_t)2 * ATT_ROW_BLOCK * T * sizeof(float));
  if (!p) {
    fprintf(stderr, "autoaccel: cannot allocate attention scratch (2 x %d x %d floats)\n", ATT_ROW_BLOCK, T);
    abort();
  }
  return p;
}

/* out(B,T,C), lse(B,NH,T) from qkv(B,T,3C). One thread per head: the
 * head's keys and values stay in its cache across the row blocks, and a
 * static split of (b, h) balances because every head costs the same. The
 * probabilities of a row block live in per-thread scratch only. */
void aa__cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  int hs = C / NH;
  size_t C3 = 3 * (size_t)C;
  int blas_threads = att_blas_single();
#pragma omp parallel
  {
    float *p = att_scratch(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs; // (T,hs), rows 3C apart
        float *o = out + (size_t)b * T * C + (size_t)h * hs;        // (T,hs), rows C apart
        float *l = lse + ((size_t)b * NH + h) * T;                  // (T)
        for (int r0 = 0; r0 < T; r0 += ATT_ROW_BLOCK)
          att_block_forward(o, l, p, q, q + C, q + 2 * C, r0, aa__cpu_min(r0 + ATT_ROW_BLOCK, T), C, hs);
      }
    }
    free(p);
  }
  att_blas_restore(blas_threads);
}

/* Backward of one head, block by block. With P = the recomputed
 * probabilities of rows r0..r1-1 and dO their output gradients:
 *   dP = dO v^T, dS = P * (dP - rowsum(P * dP)) / sqrt(hs) (softmax backward),
 *   dq += dS k, dk += dS^T q, dv += P^T dO.
 * P and dS live in the scratch (ATT_ROW_BLOCK rows of T floats each); the
 * entries of P above the diagonal are zero, so the diagonal block's GEMMs
 * may read them. */
static void att_head_backward(float *dq, const float *dout, const float *q, const float *lse, float *scratch,
                              int T, int C, int hs) {
  int C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  const float *k = q + C, *v = q + 2 * C;
  float *dk = dq + C, *dv = dq + 2 * C;
  float *p = scratch, *ds = scratch + (size_t)ATT_ROW_BLOCK * T;
  for (int r0 = 0; r0 < T; r0 += ATT_ROW_BLOCK) {
    int r1 = aa__cpu_min(r0 + ATT_ROW_BLOCK, T), m = r1 - r0;
    const float *dO = dout + (size_t)r0 * C; // (m, hs), row stride C
    att_block_probs(p, lse, q, k, r0, r1, C, hs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, 1.0f, dO, C, v, C3, 0.0f, ds, r1);
    for (int i = 0; i < m; i++) {
      int t = r0 + i;
      const float *pr = p + (size_t)i * r1; // (r1)
      float *d = ds + (size_t)i * r1;       // (r1)
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
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, m, 1.0f, p, r1, dO, C, 1.0f, dv, C3);
  }
}

/* dqkv(B,T,3C) += gradient of attention_forward. A head's dk and dv rows
 * collect contributions from every later query block, so the parallel loop
 * is over (b, h) only: each thread owns its heads' columns of dqkv. */
void aa__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                int T, int C, int NH) {
  int hs = C / NH;
  size_t C3 = 3 * (size_t)C;
  int blas_threads = att_blas_single();
#pragma omp parallel
  {
    float *scratch = att_scratch(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        size_t off = (size_t)b * T * C3 + (size_t)h * hs;
        att_head_backward(dqkv + off, dout + (size_t)b * T * C + (size_t)h * hs, qkv + off,
                          lse + ((size_t)b * NH + h) * T, scratch, T, C, hs);
      }
    }
    free(scratch);
  }
  att_blas_restore(blas_threads);
}
