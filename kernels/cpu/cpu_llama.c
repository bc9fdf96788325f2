/* The llama family's ops (contracts in kernels/ops.h): RMSNorm, SwiGLU,
 * rotary position embeddings, grouped-query attention and the one-query
 * decode step with a key/value cache.
 *
 * The GQA attention is cpu_attention.c's row-block scheme with the row
 * strides and the key/value head made explicit: qkv rows are W = (NH + 2
 * NKV) HS floats, query head h reads key/value head h / (NH / NKV). The
 * forward runs one query head per thread as there; the backward runs one
 * (b, key/value head) per thread and walks its query heads in order, so a
 * key/value head's gradient is summed by one thread in a fixed order and
 * nothing depends on the thread count. With NKV = NH it issues the GEMMs of
 * cpu_attention.c with the same arguments, in the same order. */
#include "cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define GQA_ROW_BLOCK 32

/* A malloc that stops the process on failure: the op table has no error
 * path, and wrong results would be worse than stopping. */
static float *llama_scratch(size_t n, const char *what) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (!p) {
    fprintf(stderr, "autoaccel: cannot allocate %s scratch (%zu floats)\n", what, n);
    abort();
  }
  return p;
}

/* ------------------------------------------------------------------ RMSNorm */

/* out(N,C) = inp * rstd * weight, rstd(N) saved. The sum of squares is
 * accumulated in double; rows are independent. */
void aa__cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                             float eps) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C; // (C)
    float *o = out + (size_t)n * C;       // (C)
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++)
      ss += (double)x[c] * x[c];
    float s = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int c = 0; c < C; c++)
      o[c] = x[c] * s * weight[c];
    rstd[n] = s;
  }
}

/* With r = rstd and g = dout * weight, y = x r w gives
 *   dx = r g - x r^3 mean_c(g x),  dweight += sum_n dout x r.
 * dinp is a per-row pass; dweight is summed over rows by column blocks, each
 * owned by one thread (as layernorm_backward), so it does not depend on the
 * thread count. */
void aa__cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, int N, int C) {
  int nblocks = (C + AA__CPU_COL_BLOCK - 1) / AA__CPU_COL_BLOCK;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int n = 0; n < N; n++) {
      const float *x = inp + (size_t)n * C;  // (C)
      const float *d = dout + (size_t)n * C; // (C)
      float *dx = dinp + (size_t)n * C;      // (C)
      float s = rstd[n], gx = 0.0f;
#pragma omp simd reduction(+ : gx)
      for (int c = 0; c < C; c++)
        gx += d[c] * weight[c] * x[c];
      float k = s * s * s * gx / C;
      for (int c = 0; c < C; c++)
        dx[c] += s * d[c] * weight[c] - x[c] * k;
    }
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      int c0 = blk * AA__CPU_COL_BLOCK, c1 = aa__cpu_min(c0 + AA__CPU_COL_BLOCK, C);
      for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;  // (C)
        const float *d = dout + (size_t)n * C; // (C)
        float s = rstd[n];
        for (int c = c0; c < c1; c++)
          dweight[c] += d[c] * x[c] * s;
      }
    }
  }
}

/* ------------------------------------------------------------------- SwiGLU */

/* out(N,F) = silu(gate) * up from inp(N,2F) = [gate | up]. */
void aa__cpu_swiglu_forward(float *out, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static) if ((size_t)N * F >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *g = inp + (size_t)n * 2 * F, *u = g + F; // (F), (F)
    float *o = out + (size_t)n * F;                       // (F)
#pragma omp simd
    for (int i = 0; i < F; i++)
      o[i] = g[i] / (1.0f + aa__cpu_expf(-g[i])) * u[i];
  }
}

/* With sig = sigmoid(gate): dgate += dout * up * sig * (1 + gate (1 - sig)),
 * dup += dout * silu(gate). */
void aa__cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
#pragma omp parallel for schedule(static) if ((size_t)N * F >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *g = inp + (size_t)n * 2 * F, *u = g + F; // (F), (F)
    const float *d = dout + (size_t)n * F;                // (F)
    float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;   // (F), (F)
#pragma omp simd
    for (int i = 0; i < F; i++) {
      float sig = 1.0f / (1.0f + aa__cpu_expf(-g[i]));
      dg[i] += d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
      du[i] += d[i] * g[i] * sig;
    }
  }
}

/* --------------------------------------------------------------------- RoPE */

/* Rotates the q and k heads of qkv(B,T,(NH + 2 NKV) HS) by the angles
 * (pos0 + t) theta^(-2i/HS), or by their negatives when sign = -1 (the
 * transpose). cos and sin depend on (t, i) only: they are tabulated once per
 * call, from angles computed in double. */
static void rope_apply(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta, int sign) {
  int half = HS / 2, nheads = NH + NKV;
  size_t W = (size_t)(NH + 2 * NKV) * HS;
  float *tab = llama_scratch((size_t)2 * T * half, "rope"); // cos (T,HS/2) then sin (T,HS/2)
  float *cs = tab, *sn = tab + (size_t)T * half;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int t = 0; t < T; t++) {
      for (int i = 0; i < half; i++) {
        double a = (double)(pos0 + t) * pow((double)theta, -2.0 * i / HS);
        cs[(size_t)t * half + i] = (float)cos(a);
        sn[(size_t)t * half + i] = (float)(sign * sin(a));
      }
    }
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const float *c = cs + (size_t)t * half, *s = sn + (size_t)t * half; // (HS/2)
        float *row = qkv + ((size_t)b * T + t) * W;                         // q heads then k heads
        for (int h = 0; h < nheads; h++) {
          float *x = row + (size_t)h * HS, *y = x + half;
#pragma omp simd
          for (int i = 0; i < half; i++) {
            float x0 = x[i], y0 = y[i];
            x[i] = x0 * c[i] - y0 * s[i];
            y[i] = y0 * c[i] + x0 * s[i];
          }
        }
      }
    }
  }
  free(tab);
}

void aa__cpu_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  rope_apply(qkv, B, T, NH, NKV, HS, pos0, theta, 1);
}

void aa__cpu_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  rope_apply(dqkv, B, T, NH, NKV, HS, pos0, theta, -1);
}

/* ------------------------------------------------------ grouped-query attention */

/* As att_blas_single / att_blas_restore in cpu_attention.c: the per-head
 * GEMMs run concurrently from OpenMP threads and must stay single-threaded;
 * only OpenBLAS's pthread build needs its global count set to 1. */
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
    float *p = llama_scratch((size_t)GQA_ROW_BLOCK * T, "attention");
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

/* Backward of one query head, block by block (as att_head_backward):
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
    float *scratch = llama_scratch((size_t)2 * GQA_ROW_BLOCK * T, "attention");
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

/* ------------------------------------------------------------------- decode */

/* Stores the k and v of position pos into the caches (B,Tmax,NKV HS), then
 * out(B,NH HS) = softmax(q k^T / sqrt(HS)) v over positions 0..pos, one
 * (b, query head) per thread with its pos + 1 scores in per-thread scratch.
 * The dot products and sums run in position order, so the result does not
 * depend on the thread count. */
void aa__cpu_attention_decode(float *out, float *kcache, float *vcache, const float *qkv, int B, int Tmax,
                              int pos, int NH, int NKV, int HS) {
  int W = (NH + 2 * NKV) * HS, KV = NKV * HS, group = NH / NKV;
  for (int b = 0; b < B; b++) {
    const float *k = qkv + (size_t)b * W + (size_t)NH * HS;
    size_t row = ((size_t)b * Tmax + pos) * KV;
    for (int i = 0; i < KV; i++) {
      kcache[row + i] = k[i];
      vcache[row + i] = k[KV + i];
    }
  }
  float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel if ((size_t)B * NH * (pos + 1) * HS >= AA__CPU_PAR_MIN)
  {
    float *s = llama_scratch((size_t)pos + 1, "decode");
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const float *q = qkv + (size_t)b * W + (size_t)h * HS; // (HS)
        const float *kc =
            kcache + (size_t)b * Tmax * KV + (size_t)(h / group) * HS; // (pos+1,HS), rows KV apart
        const float *vc = vcache + (size_t)b * Tmax * KV + (size_t)(h / group) * HS;
        float *o = out + (size_t)b * NH * HS + (size_t)h * HS; // (HS)
        float maxv = -INFINITY;
        for (int u = 0; u <= pos; u++) {
          const float *ku = kc + (size_t)u * KV;
          float d = 0.0f;
#pragma omp simd reduction(+ : d)
          for (int i = 0; i < HS; i++)
            d += q[i] * ku[i];
          s[u] = d * scale;
          maxv = s[u] > maxv ? s[u] : maxv;
        }
        float sum = 0.0f;
        for (int u = 0; u <= pos; u++) {
          s[u] = aa__cpu_expf(s[u] - maxv);
          sum += s[u];
        }
        float inv = 1.0f / sum;
        for (int i = 0; i < HS; i++)
          o[i] = 0.0f;
        for (int u = 0; u <= pos; u++) {
          const float *vu = vc + (size_t)u * KV;
          float pu = s[u] * inv;
#pragma omp simd
          for (int i = 0; i < HS; i++)
            o[i] += pu * vu[i];
        }
      }
    }
    free(s);
  }
}
