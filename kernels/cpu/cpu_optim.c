/* The sum of squares behind the global gradient norm (AdamW is in
 * cpu_adamw.c, which is compiled without floating-point contraction). */
#include "cpu_internal.h"

#include <math.h>
#include <stddef.h>

/* The sum of squares is split into this many fixed slices whatever the
 * thread count; the slice sums are added in index order, so the result is
 * bit-identical across runs and across thread counts. */
#define SUMSQ_SLICES 256

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
