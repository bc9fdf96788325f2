/* Causal multi-head and grouped-query self-attention on top of
 * single-threaded sgemm. Multi-head attention (attention_forward/backward)
 * is grouped-query attention with as many key/value heads as query heads,
 * and runs the same code (bit for bit what it ran before GQA existed).
 *
 * Each (batch, head) is an independent problem on a (T,hs) slice of qkv whose
 * rows are (NH + 2 NKV) hs apart, which sgemm reads in place through its leading
 * dimension. The T queries are processed in blocks of GQA_ROW_BLOCK rows:
 * block [r0,r1) only needs keys 0..r1-1, so the GEMMs skip the masked
 * triangle except the diagonal block. OpenMP runs one head per thread, each
 * calling single-threaded sgemm (see gqa_blas_single). Measured on 2 cores with
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

#define GQA_ROW_BLOCK 32

/* ------------------------------------------------------ grouped-query attention */

/* The per-head GEMMs run concurrently from OpenMP threads and must stay
 * single-threaded; only OpenBLAS's pthread build needs its global count set
 * to 1 (for the duration, then restored: the engine drives the op table
 * from one thread, so nobody else calls BLAS meanwhile). */
static int gqa_blas_single(void) {
  if (openblas_get_parallel() != OPENBLAS_THREAD) return 0;
  int n = openblas_get_num_threads();
  openblas_set_num_threads(1);
  return n;
}

static void gqa_blas_restore(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

/* One head's operands: q, k, v at the head's first column with row stride
 * ld (W = (NH + 2 NKV) HS), and out (or dout) with row stride ldo (NH HS). */
typedef struct {
  const float *q, *k, *v;
  int ld, ldo, hs;
} gqa_head_t;

/* Softmax of score rows r0..r0+m-1 (stride ld, already scaled) under the
 * causal mask, columns after t zeroed; lse[i] receives row i's logsumexp. */
static void gqa_softmax_rows(float *s, float *lse, int r0, int m, int ld) {
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
    lse[i] = maxv + logf(sum);
  }
}

/* Scaled scores of query rows r0..r1-1 against keys 0..r1-1 into p (m x r1). */
static void gqa_block_scores(float *p, const gqa_head_t *hd, int r0, int r1) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hd->hs, 1.0f / sqrtf((float)hd->hs),
              hd->q + (size_t)r0 * hd->ld, hd->ld, hd->k, hd->ld, 0.0f, p, r1);
}

/* P(t,u) = exp(s(t,u) - lse(t)) for u <= t, else 0, rows r0..r1-1. */
static void gqa_block_probs(float *p, const float *lse, const gqa_head_t *hd, int r0, int r1) {
  gqa_block_scores(p, hd, r0, r1);
  for (int i = 0; i < r1 - r0; i++) {
    int t = r0 + i;
    float *row = p + (size_t)i * r1, l = lse[t];
#pragma omp simd
    for (int j = 0; j <= t; j++)
      row[j] = aa__cpu_expf(row[j] - l);
    for (int j = t + 1; j < r1; j++)
      row[j] = 0.0f;
  }
}

/* out(B,T,NH HS), lse(B,NH,T) from qkv(B,T,(NH + 2 NKV) HS). One query head
 * per thread; the probabilities of a row block live in per-thread scratch. */
void aa__cpu_attention_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                   int HS) {
  int W = (NH + 2 * NKV) * HS, ldo = NH * HS, group = NH / NKV;
  int blas_threads = gqa_blas_single();
#pragma omp parallel
  {
    float *p = aa__cpu_scratch((size_t)GQA_ROW_BLOCK * T, "attention");
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const float *base = qkv + (size_t)b * T * W;
        int g = h / group;
        gqa_head_t hd = {base + (size_t)h * HS,
                         base + (size_t)(NH + g) * HS,
                         base + (size_t)(NH + NKV + g) * HS,
                         W,
                         ldo,
                         HS};
        float *o = out + (size_t)b * T * ldo + (size_t)h * HS; // (T,HS), rows ldo apart
        float *l = lse + ((size_t)b * NH + h) * T;             // (T)
        for (int r0 = 0; r0 < T; r0 += GQA_ROW_BLOCK) {
          int r1 = aa__cpu_min(r0 + GQA_ROW_BLOCK, T), m = r1 - r0;
          gqa_block_scores(p, &hd, r0, r1);
          gqa_softmax_rows(p, l + r0, r0, m, r1);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, r1, 1.0f, p, r1, hd.v, W, 0.0f,
                      o + (size_t)r0 * ldo, ldo);
        }
      }
    }
    free(p);
  }
  gqa_blas_restore(blas_threads);
}

/* Backward of one query head, block by block (the softmax backward):
 *   dP = dO v^T, dS = P * (dP - rowsum(P * dP)) / sqrt(hs),
 *   dq += dS k, dk += dS^T q, dv += P^T dO.
 * dq, dk, dv point at the head's columns of dqkv (row stride hd->ld). */
static void gqa_head_backward(float *dq, float *dk, float *dv, const float *dout, const gqa_head_t *hd,
                              const float *lse, float *scratch, int T) {
  int ld = hd->ld, ldo = hd->ldo, hs = hd->hs;
  float scale = 1.0f / sqrtf((float)hs);
  float *p = scratch, *ds = scratch + (size_t)GQA_ROW_BLOCK * T;
  for (int r0 = 0; r0 < T; r0 += GQA_ROW_BLOCK) {
    int r1 = aa__cpu_min(r0 + GQA_ROW_BLOCK, T), m = r1 - r0;
    const float *dO = dout + (size_t)r0 * ldo; // (m, hs), row stride ldo
    gqa_block_probs(p, lse, hd, r0, r1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, 1.0f, dO, ldo, hd->v, ld, 0.0f, ds, r1);
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, 1.0f, ds, r1, hd->k, ld, 1.0f,
                dq + (size_t)r0 * ld, ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, m, 1.0f, ds, r1, hd->q + (size_t)r0 * ld, ld,
                1.0f, dk, ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, m, 1.0f, p, r1, dO, ldo, 1.0f, dv, ld);
  }
}

/* dqkv(B,T,(NH + 2 NKV) HS) += gradient of attention_gqa_forward. One thread
 * per (b, key/value head): it owns the head's dk and dv columns and the dq
 * columns of its query heads, which it processes in increasing order. */
void aa__cpu_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                    int T, int NH, int NKV, int HS) {
  int W = (NH + 2 * NKV) * HS, ldo = NH * HS, group = NH / NKV;
  int blas_threads = gqa_blas_single();
#pragma omp parallel
  {
    float *scratch = aa__cpu_scratch((size_t)2 * GQA_ROW_BLOCK * T, "attention");
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int g = 0; g < NKV; g++) {
        size_t off = (size_t)b * T * W;
        float *dk = dqkv + off + (size_t)(NH + g) * HS, *dv = dqkv + off + (size_t)(NH + NKV + g) * HS;
        for (int h = g * group; h < (g + 1) * group; h++) {
          gqa_head_t hd = {qkv + off + (size_t)h * HS,
                           qkv + off + (size_t)(NH + g) * HS,
                           qkv + off + (size_t)(NH + NKV + g) * HS,
                           W,
                           ldo,
                           HS};
          gqa_head_backward(dqkv + off + (size_t)h * HS, dk, dv, dout + (size_t)b * T * ldo + (size_t)h * HS,
                            &hd, lse + ((size_t)b * NH + h) * T, scratch, T);
        }
      }
    }
    free(scratch);
  }
  gqa_blas_restore(blas_threads);
}

/* ------------------------------------------------------ multi-head attention */

void aa__cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  aa__cpu_attention_gqa_forward(out, lse, qkv, B, T, NH, NH, C / NH);
}

void aa__cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                int T, int C, int NH) {
  aa__cpu_attention_gqa_backward(dqkv, dout, qkv, lse, B, T, NH, NH, C / NH);
}
