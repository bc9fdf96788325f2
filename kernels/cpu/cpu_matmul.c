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
 * The bias rows are copied on the calling thread: the copy is ~1% of the
 * GEMM, and an OpenMP region here made the call 45% slower with OpenBLAS's
 * pthread build, whose pool then fights our spinning workers for the cores. */
void aa__cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                            int C, int OC) {
  float beta = 0.0f;
  if (bias) {
    for (int n = 0; n < N; n++)
      memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

/* dinp(N,C) += dout(N,OC) @ weight(OC,C); dweight(OC,C) += dout^T @ inp(N,C)
 * (skipped when dweight is NULL: a frozen weight, LoRA's base);
 * dbias(OC) += column sums of dout (skipped when dbias is NULL). The column
 * sums give each thread a block of columns and walk the rows in order, so
 * they are deterministic and independent of the thread count. */
void aa__cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 1.0f, dinp, C);
  if (dweight)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (!dbias) return;
  int nblocks = (OC + AA__CPU_COL_BLOCK - 1) / AA__CPU_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int o0 = blk * AA__CPU_COL_BLOCK, o1 = aa__cpu_min(o0 + AA__CPU_COL_BLOCK, OC);
    for (int n = 0; n < N; n++) {
      const float *d = dout + (size_t)n * OC; // (OC)
      for (int o = o0; o < o1; o++)
        dbias[o] += d[o];
    }
  }
}
