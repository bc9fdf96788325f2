/* Optimizer kernels: AdamW and the sum of squares behind the global gradient
 * norm. */
#include "cpu_internal.h"

#include <math.h>
#include <stddef.h>

/* The sum of squares is split into this many fixed slices whatever the
 * thread count; the slice sums are added in index order, so the result is
 * bit-identical across runs and across thread counts. */
#define SUMSQ_SLICES 256

/* AdamW on a flat slice, step t >= 1, following torch.optim.AdamW
 * (foreach=False): decoupled decay p *= 1 - lr*wd, moment updates, then
 * p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps). The bias
 * corrections are computed in double, as torch does in Python. */
void aa__cpu_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int t) {
  float decay = (float)(1.0 - (double)lr * weight_decay);
  float step_size = (float)(lr / (1.0 - pow(beta1, t)));
  float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
#pragma omp parallel for schedule(static) if (n >= AA__CPU_PAR_MIN)
  for (size_t i = 0; i < n; i++) {
    float g = grads[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = params[i] * decay;
    params[i] = p - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

/* Sum of x^2 in double over SUMSQ_SLICES fixed slices (see above). */
double aa__cpu_sum_squares(const float *x, size_t n) {
  double part[SUMSQ_SLICES];
#pragma omp parallel for schedule(static) if (n >= AA__CPU_PAR_MIN)
  for (int s = 0; s < SUMSQ_SLICES; s++) {
    size_t i0 = n * s / SUMSQ_SLICES, i1 = n * (s + 1) / SUMSQ_SLICES;
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = i0; i < i1; i++)
      acc += (double)x[i] * x[i];
    part[s] = acc;
  }
  double total = 0.0;
  for (int s = 0; s < SUMSQ_SLICES; s++)
    total += part[s];
  return total;
}
