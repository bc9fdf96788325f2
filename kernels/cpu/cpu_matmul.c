/* Linear layer y = x W^T + b with weights stored (OC,C) like torch.nn.Linear.
 * The products go to OpenBLAS sgemm (threaded inside OpenBLAS); only the
 * bias work is done here. */
#include "cpu_internal.h"

#include <cblas.h>
#include <stddef.h>
#include <string.h>

/* out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC); bias may be NULL. out is
 * overwritten: with a bias its rows are first set to the bias and sgemm
 * accumulates onto them (beta = 1), otherwise sgemm writes them (beta = 0).
 * The bias rows are copied by the OpenMP team when they are large (a
 * 2048 x 2048 fc output is 16 MiB, which one core copies while the other
 * waits). With OpenBLAS's pthread build an OpenMP region here once made
 * the call 45% slower, its pool fighting our spinning workers for the
 * cores; the autoaccel command's short spin (kernels/README.md, "Idle
 * workers") keeps that small, and small copies stay on the calling thread. */
void aa__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                            int C, int OC) {
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= AA__CPU_COPY_PAR_MIN)
    for (int n = 0; n < N; n++)
      memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

/* dinp(N,C) = beta dinp + dout(N,OC) @ weight(OC,C) (beta 1: accumulate, 0:
 * overwrite; OpenBLAS zeroes the block first and then accumulates as with
 * beta 1, so the two give the same bits on a zeroed dinp); dweight(OC,C) +=
 * dout^T @ inp(N,C) (skipped when dweight is NULL: a frozen weight, LoRA's
 * base); dbias(OC) += column sums of dout (skipped when dbias is NULL), by
 * row chunks (cpu_internal.h AA__CPU_SUM_ROWS): deterministic and
 * independent of the thread count, the same sums gelu_backward_bias makes. */
static void matmul_backward(float beta, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, beta, dinp, C);
  if (dweight)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (!dbias) return;
  const int nch = aa__cpu_sum_chunks(N);
  float *part = aa__cpu_scratch((size_t)nch * OC, "bias gradient"); // (nch, OC)
#pragma omp parallel for schedule(static) if ((size_t)N * OC >= AA__CPU_PAR_MIN)
  for (int c = 0; c < nch; c++) {
    float *s = part + (size_t)c * OC; // (OC)
    memset(s, 0, (size_t)OC * sizeof(float));
    for (int n = c * AA__CPU_SUM_ROWS; n < aa__cpu_min(N, (c + 1) * AA__CPU_SUM_ROWS); n++) {
      const float *d = dout + (size_t)n * OC; // (OC)
#pragma omp simd
      for (int o = 0; o < OC; o++)
        s[o] += d[o];
    }
  }
  aa__cpu_add_partials(dbias, part, nch, OC);
  free(part);
}

void aa__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC) {
  matmul_backward(1.0f, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void aa__cpu_matmul_backward_set(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int N, int C, int OC) {
  matmul_backward(0.0f, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
