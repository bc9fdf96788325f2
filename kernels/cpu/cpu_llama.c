/* The llama family's ops (contracts in kernels/ops.h): RMSNorm, SwiGLU,
 * rotary position embeddings, grouped-query attention and the one-query
 * decode step with a key/value cache.
 *
 * The GQA attention itself lives in cpu_attention.c (multi-head attention
 * is its NKV = NH case). */
#include "cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
 * One pass over the rows by chunks (cpu_internal.h AA__CPU_SUM_ROWS): a
 * row's dx, and its dweight terms added to its chunk's partial, which are
 * then added in chunk order (as layernorm_backward), so the result does not
 * depend on the thread count. */
void aa__cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, int N, int C) {
  const int nch = aa__cpu_sum_chunks(N);
  float *part =
      dweight ? aa__cpu_scratch((size_t)nch * C, "rmsnorm gradient") : NULL; // (nch, C); NULL: frozen (LoRA)
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nch; ch++) {
    float *pw = part ? part + (size_t)ch * C : NULL; // (C)
    if (pw) memset(pw, 0, (size_t)C * sizeof(float));
    for (int n = ch * AA__CPU_SUM_ROWS; n < aa__cpu_min(N, (ch + 1) * AA__CPU_SUM_ROWS); n++) {
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
      if (!pw) continue;
#pragma omp simd
      for (int c = 0; c < C; c++)
        pw[c] += d[c] * x[c] * s;
    }
  }
  if (part) aa__cpu_add_partials(dweight, part, nch, C);
  free(part);
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
 * dup += dout * silu(gate); set: = instead of += (the same values as into
 * zeros, without the fill and its re-read). */
static void swiglu_backward(int set, float *dinp, const float *inp, const float *dout, int N, int F) {
#pragma omp parallel for schedule(static) if ((size_t)N * F >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    const float *g = inp + (size_t)n * 2 * F, *u = g + F; // (F), (F)
    const float *d = dout + (size_t)n * F;                // (F)
    float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;   // (F), (F)
    if (set) {
#pragma omp simd
      for (int i = 0; i < F; i++) {
        float sig = 1.0f / (1.0f + aa__cpu_expf(-g[i]));
        dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        du[i] = d[i] * g[i] * sig;
      }
    } else {
#pragma omp simd
      for (int i = 0; i < F; i++) {
        float sig = 1.0f / (1.0f + aa__cpu_expf(-g[i]));
        dg[i] += d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        du[i] += d[i] * g[i] * sig;
      }
    }
  }
}

void aa__cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
  swiglu_backward(0, dinp, inp, dout, N, F);
}

void aa__cpu_swiglu_backward_set(float *dinp, const float *inp, const float *dout, int N, int F) {
  swiglu_backward(1, dinp, inp, dout, N, F);
}

/* --------------------------------------------------------------------- RoPE */

/* Rotates the q and k heads of qkv(B,T,(NH + 2 NKV) HS) by the angles
 * (pos0 + t) theta^(-2i/HS), or by their negatives when sign = -1 (the
 * transpose). cos and sin depend on (t, i) only: they are tabulated once per
 * call, from angles computed in double. */
static void rope_apply(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta, int sign) {
  int half = HS / 2, nheads = NH + NKV;
  size_t W = (size_t)(NH + 2 * NKV) * HS;
  float *tab = aa__cpu_scratch((size_t)2 * T * half, "rope"); // cos (T,HS/2) then sin (T,HS/2)
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
    float *s = aa__cpu_scratch((size_t)pos + 1, "decode");
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
