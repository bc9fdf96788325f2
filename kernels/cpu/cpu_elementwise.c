/* Elementwise kernels: GELU, residual add, accumulate, scale. Every element
 * is independent, so any static split is deterministic. */
#include "cpu_internal.h"

#include <stddef.h>
#include <string.h>

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh
 * approximation GPT-2 uses (torch approximate='tanh'). tanh is the
 * vectorisable one from cpu_internal.h: glibc's tanhf made GELU cost a
 * sizeable fraction of a block's GEMMs. */
static inline float gelu(float x) {
  float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
  return 0.5f * x * (1.0f + aa__cpu_tanhf(u));
}

/* gelu'(x), the exact derivative of the tanh form:
 *   0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
static inline float gelu_grad(float x) {
  float th = aa__cpu_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
  float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

void aa__cpu_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++)
    out[i] = gelu(inp[i]);
}

/* dinp += gelu'(inp) * dout. */
void aa__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++)
    dinp[i] += gelu_grad(inp[i]) * dout[i];
}

/* fc's epilogue, one pass instead of three (a bias copy before the GEMM,
 * the GEMM re-reading it, then GELU): pre(N,OC) += bias (may be NULL),
 * out = gelu(pre). Rows are independent. */
void aa__cpu_bias_gelu_forward(float *pre, float *out, const float *bias, int N, int OC) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= AA__CPU_PAR_MIN)
  for (int n = 0; n < N; n++) {
    float *p = pre + (size_t)n * OC, *o = out + (size_t)n * OC; // (OC)
    if (bias) {
#pragma omp simd
      for (int j = 0; j < OC; j++) {
        float x = p[j] + bias[j];
        p[j] = x;
        o[j] = gelu(x);
      }
    } else {
#pragma omp simd
      for (int j = 0; j < OC; j++)
        o[j] = gelu(p[j]);
    }
  }
}

/* GELU's backward and fc's bias gradient in one pass: dpre(N,OC) =
 * gelu'(pre) * dout (overwritten), dbias(OC) += its column sums (skipped
 * when NULL) by row chunks (cpu_internal.h AA__CPU_SUM_ROWS): the same
 * values as gelu_backward into zeros followed by matmul_backward's bias
 * sums, independent of the thread count. */
void aa__cpu_gelu_backward_bias(float *dpre, float *dbias, const float *pre, const float *dout, int N,
                                int OC) {
  const int nch = aa__cpu_sum_chunks(N);
  float *part = dbias ? aa__cpu_scratch((size_t)nch * OC, "bias gradient") : NULL; // (nch, OC)
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= AA__CPU_PAR_MIN)
  for (int c = 0; c < nch; c++) {
    float *s = part ? part + (size_t)c * OC : NULL; // (OC)
    if (s) memset(s, 0, (size_t)OC * sizeof(float));
    for (int n = c * AA__CPU_SUM_ROWS; n < aa__cpu_min(N, (c + 1) * AA__CPU_SUM_ROWS); n++) {
      const float *p = pre + (size_t)n * OC, *d = dout + (size_t)n * OC; // (OC)
      float *g = dpre + (size_t)n * OC;                                  // (OC)
      if (s) {
#pragma omp simd
        for (int o = 0; o < OC; o++) {
          float v = gelu_grad(p[o]) * d[o];
          g[o] = v;
          s[o] += v;
        }
      } else {
#pragma omp simd
        for (int o = 0; o < OC; o++)
          g[o] = gelu_grad(p[o]) * d[o];
      }
    }
  }
  if (part) aa__cpu_add_partials(dbias, part, nch, OC);
  free(part);
}

/* out = a + b; out may alias a or b (each element is read before it is
 * written, at the same index). */
void aa__cpu_residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static) if (n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++)
    out[i] = a[i] + b[i];
}

/* y += x. */
void aa__cpu_accumulate(float *y, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++)
    y[i] += x[i];
}

/* The column blocks of ops.h rows_copy and rows_accumulate. */
void aa__cpu_rows_copy(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= AA__CPU_PAR_MIN)
  for (size_t r = 0; r < rows; r++)
    memcpy(dst + r * ldd, src + r * lds, cols * sizeof(float));
}

void aa__cpu_rows_accumulate(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= AA__CPU_PAR_MIN)
  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < cols; j++)
      dst[r * ldd + j] += src[r * lds + j];
}

/* x *= s. */
void aa__cpu_scale(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++)
    x[i] *= s;
}
