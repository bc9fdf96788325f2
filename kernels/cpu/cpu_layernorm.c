/* LayerNorm over the last dimension, eps = 1e-5 and the biased variance, as
 * torch.nn.LayerNorm. */
#include "cpu_internal.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define LN_EPS 1e-5

/* out(N,C) = (inp - mean) * rstd * weight + bias; mean(N), rstd(N) are saved
 * for backward. Row statistics are accumulated in double (two passes, so the
 * variance does not suffer from cancellation); rows are independent. */
void aa__cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                               const float *bias, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C; // (C)
    float *o = out + (size_t)n * C;       // (C)
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; c++)
      sum += x[c];
    double m = sum / C;
    double var = 0.0;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; c++)
      var += ((double)x[c] - m) * ((double)x[c] - m);
    float s = (float)(1.0 / sqrt(var / C + LN_EPS));
    float mf = (float)m;
    for (int c = 0; c < C; c++)
      o[c] = (x[c] - mf) * s * weight[c] + bias[c];
    mean[n] = mf;
    rstd[n] = s;
  }
}

/* dinp(N,C) += dx; dweight(C) += sum_n dout*xhat; dbias(C) += sum_n dout,
 * with xhat = (inp - mean) * rstd and g = dout * weight:
 *   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
 * One pass over the rows by chunks (cpu_internal.h AA__CPU_SUM_ROWS): a
 * row's dx, and its terms of the parameter gradients added to its chunk's
 * partials, which are then added in chunk order, so the result does not
 * depend on the thread count. */
void aa__cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, const float *mean, const float *rstd,
                                int N, int C) {
  /* dweight and dbias NULL: a frozen norm (LoRA's base), no partials. */
  const int nch = aa__cpu_sum_chunks(N);
  /* dweight's partials (nch, C), then dbias's (nch, C). */
  float *part = dweight ? aa__cpu_scratch((size_t)nch * 2 * C, "layernorm gradient") : NULL;
#pragma omp parallel for schedule(static)
  for (int ch = 0; ch < nch; ch++) {
    float *pw = part ? part + (size_t)ch * C : NULL, *pb = part ? part + (size_t)(nch + ch) * C : NULL; // (C)
    if (pw) {
      memset(pw, 0, (size_t)C * sizeof(float));
      memset(pb, 0, (size_t)C * sizeof(float));
    }
    for (int n = ch * AA__CPU_SUM_ROWS; n < aa__cpu_min(N, (ch + 1) * AA__CPU_SUM_ROWS); n++) {
      const float *x = inp + (size_t)n * C;  // (C)
      const float *d = dout + (size_t)n * C; // (C)
      float *dx = dinp + (size_t)n * C;      // (C)
      float m = mean[n], s = rstd[n];
      float gmean = 0.0f, gxmean = 0.0f;
#pragma omp simd reduction(+ : gmean, gxmean)
      for (int c = 0; c < C; c++) {
        float g = d[c] * weight[c];
        gmean += g;
        gxmean += g * (x[c] - m) * s;
      }
      gmean /= C;
      gxmean /= C;
      for (int c = 0; c < C; c++) {
        float xhat = (x[c] - m) * s;
        dx[c] += s * (d[c] * weight[c] - gmean - xhat * gxmean);
      }
      if (!pw) continue;
#pragma omp simd
      for (int c = 0; c < C; c++) {
        pb[c] += d[c];
        pw[c] += d[c] * (x[c] - m) * s;
      }
    }
  }
  if (part) {
    aa__cpu_add_partials(dweight, part, nch, C);
    aa__cpu_add_partials(dbias, part + (size_t)nch * C, nch, C);
  }
  free(part);
}
