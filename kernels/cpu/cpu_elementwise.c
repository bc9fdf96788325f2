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
void aa__cpu_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    out[i] = 0.5f * x * (1.0f + aa__cpu_tanhf(u));
  }
}

/* dinp += gelu'(inp) * dout, the exact derivative of the tanh form:
 *   0.5 (1 + th) + 0.5 x (1 - th^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
void aa__cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float th = aa__cpu_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    dinp[i] += grad * dout[i];
  }
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
