/* Ring attention's block ops (ops.h: attention_block_*), for context
 * parallelism: the flash-attention forward and backward of
 * cpu_attention.c, on one block of keys that need not be the queries' own
 * (every key seen, or the causal diagonal), with explicit strides so that
 * a block received from another rank is read where it lies.
 *
 * Each (batch, head) is an independent problem, processed in blocks of
 * RING_ROW_BLOCK query rows against the block's keys (the causal diagonal
 * only up to the last row of the row block), one head per OpenMP thread
 * with single-threaded sgemm; the backward gives a thread a (batch,
 * key/value head) and the query heads that read it, so every output
 * element is written by one thread in a fixed order: results do not
 * depend on the thread count. */
#include "cpu_internal.h"

#include <cblas.h>
#include <math.h>

#define RING_ROW_BLOCK 32

/* The per-head GEMMs run concurrently from OpenMP threads and must stay
 * single-threaded (see cpu_attention.c). */
static int blas_single(void) {
  if (openblas_get_parallel() != OPENBLAS_THREAD) return 0;
  int n = openblas_get_num_threads();
  openblas_set_num_threads(1);
  return n;
}

static void blas_restore(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

/* One head's operands in a block problem. */
typedef struct {
  const float *q, *k, *v; /* the head's first column of row 0 */
  int ldq, ldkv, hs, tk, causal;
} ring_head_t;

/* The keys row i of the queries sees: all tk, or 0..i on the diagonal. */
static int keys_of(const ring_head_t *hd, int i) { return hd->causal ? i + 1 : hd->tk; }

/* Scaled scores of query rows r0..r1-1 against the first n keys into p (m x n). */
static void block_scores(float *p, const ring_head_t *hd, int r0, int r1, int n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, n, hd->hs, 1.0f / sqrtf((float)hd->hs),
              hd->q + (size_t)r0 * hd->ldq, hd->ldq, hd->k, hd->ldkv, 0.0f, p, n);
}

void aa__cpu_attention_block_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                     int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                     int ldkv, size_t bskv, int causal) {
  const int ldo = NH * HS, group = NH / NKV;
  int blas_threads = blas_single();
#pragma omp parallel
  {
    float *p = aa__cpu_scratch((size_t)RING_ROW_BLOCK * Tk, "ring attention");
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int h = 0; h < NH; h++) {
        int g = h / group;
        ring_head_t hd = {q + b * bsq + (size_t)h * HS,
                          k + b * bskv + (size_t)g * HS,
                          v + b * bskv + (size_t)g * HS,
                          ldq,
                          ldkv,
                          HS,
                          Tk,
                          causal};
        float *o = out + (size_t)b * Tq * ldo + (size_t)h * HS, *l = lse + ((size_t)b * NH + h) * Tq;
        for (int r0 = 0; r0 < Tq; r0 += RING_ROW_BLOCK) {
          int r1 = aa__cpu_min(r0 + RING_ROW_BLOCK, Tq), m = r1 - r0, n = causal ? r1 : Tk;
          block_scores(p, &hd, r0, r1, n);
          for (int i = 0; i < m; i++) {
            float *row = p + (size_t)i * n;
            int seen = keys_of(&hd, r0 + i);
            float maxv = row[0], sum = 0.0f;
#pragma omp simd reduction(max : maxv)
            for (int j = 1; j < seen; j++)
              maxv = row[j] > maxv ? row[j] : maxv;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < seen; j++) {
              row[j] = aa__cpu_expf(row[j] - maxv);
              sum += row[j];
            }
            float inv = 1.0f / sum;
            for (int j = 0; j < seen; j++)
              row[j] *= inv;
            for (int j = seen; j < n; j++)
              row[j] = 0.0f;
            l[r0 + i] = maxv + logf(sum);
          }
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, HS, n, 1.0f, p, n, hd.v, ldkv, 0.0f,
                      o + (size_t)r0 * ldo, ldo);
        }
      }
    free(p);
  }
  blas_restore(blas_threads);
}

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

/* One query head's share of a block's backward, row block by row block:
 *   P = exp(s - lse), dP = dout v^T, dS = P (dP - delta) / sqrt(hs),
 *   dq += dS k, dk += dS^T q, dv += P^T dout. */
static void ring_head_backward(float *dq, float *dk, float *dv, const float *dout, int ldo,
                               const ring_head_t *hd, const float *lse, const float *delta, float *scratch,
                               int Tq) {
  const int hs = hd->hs;
  const float scale = 1.0f / sqrtf((float)hs);
  float *p = scratch, *ds = scratch + (size_t)RING_ROW_BLOCK * hd->tk;
  for (int r0 = 0; r0 < Tq; r0 += RING_ROW_BLOCK) {
    int r1 = aa__cpu_min(r0 + RING_ROW_BLOCK, Tq), m = r1 - r0, n = hd->causal ? r1 : hd->tk;
    const float *dO = dout + (size_t)r0 * ldo;
    block_scores(p, hd, r0, r1, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, hs, 1.0f, dO, ldo, hd->v, hd->ldkv, 0.0f, ds,
                n);
    for (int i = 0; i < m; i++) {
      float *pr = p + (size_t)i * n, *d = ds + (size_t)i * n, l = lse[r0 + i], dl = delta[r0 + i];
      int seen = keys_of(hd, r0 + i);
#pragma omp simd
      for (int j = 0; j < seen; j++) {
        pr[j] = aa__cpu_expf(pr[j] - l);
        d[j] = pr[j] * (d[j] - dl) * scale;
      }
      for (int j = seen; j < n; j++)
        pr[j] = d[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, n, 1.0f, ds, n, hd->k, hd->ldkv, 1.0f,
                dq + (size_t)r0 * hd->ldq, hd->ldq);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, m, 1.0f, ds, n, hd->q + (size_t)r0 * hd->ldq,
                hd->ldq, 1.0f, dk, hd->ldkv);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, m, 1.0f, p, n, dO, ldo, 1.0f, dv, hd->ldkv);
  }
}

void aa__cpu_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                      const float *k, const float *v, const float *lse, const float *delta,
                                      int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                      int ldkv, size_t bskv, int causal) {
  const int ldo = NH * HS, group = NH / NKV;
  int blas_threads = blas_single();
#pragma omp parallel
  {
    float *scratch = aa__cpu_scratch((size_t)2 * RING_ROW_BLOCK * Tk, "ring attention");
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
      for (int g = 0; g < NKV; g++)
        for (int h = g * group; h < (g + 1) * group; h++) {
          ring_head_t hd = {q + b * bsq + (size_t)h * HS,
                            k + b * bskv + (size_t)g * HS,
                            v + b * bskv + (size_t)g * HS,
                            ldq,
                            ldkv,
                            HS,
                            Tk,
                            causal};
          size_t row = ((size_t)b * NH + h) * Tq;
          ring_head_backward(dq + b * bsq + (size_t)h * HS, dk + b * bskv + (size_t)g * HS,
                             dv + b * bskv + (size_t)g * HS, dout + (size_t)b * Tq * ldo + (size_t)h * HS,
                             ldo, &hd, lse + row, delta + row, scratch, Tq);
        }
    free(scratch);
  }
  blas_restore(blas_threads);
}
