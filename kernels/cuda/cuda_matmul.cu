/* Linear layer y = x W^T + b with weights stored (OC,C) like torch.nn.Linear,
 * on cuBLAS. Row-major (N,C) is column-major (C,N), so every product below
 * is written in cuBLAS's column-major terms with the operands swapped.
 *
 * The forward pass runs through cuBLASLt with the bias fused as an epilogue
 * (one pass over out instead of two); should cuBLASLt offer no algorithm
 * for the shapes and alignments it falls back to a bias broadcast plus
 * cublasSgemm with beta = 1. The backward GEMMs use cublasSgemm with
 * beta = 1, which is the contract's accumulation. fp32 math is pedantic
 * unless aa_cuda_set_tf32(1). cuBLAS results are bit-reproducible run to run
 * on one GPU model and toolkit (no atomics are allowed on the handle); dbias
 * is a fixed-order column sum. */
#include "cuda_common.cuh"

/* Largest power of two (up to 256) that divides the address: cuBLASLt's
 * heuristics assume 256-byte aligned operands unless told otherwise, and
 * the engine carves tensors out of one allocation at 4-byte offsets. */
static uint32_t ptr_alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 4 && (a % al) != 0)
    al >>= 1;
  return al;
}

// out(N,OC) = bias(OC) broadcast over rows
__global__ void bias_broadcast_kernel(float *out, const float *bias, int OC, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = bias[i % OC];
}

#define LT_TRY(call)                                                                                        \
  do {                                                                                                      \
    cublasStatus_t s_ = (call);                                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                      \
      rc = aa__cuda_fail_cublas(s_, #call, __FILE__, __LINE__);                                             \
      goto cleanup;                                                                                         \
    }                                                                                                       \
  } while (0)

/* out(N,OC) = inp(N,C) @ weight(OC,C)^T (+ bias) through cuBLASLt. Sets
 * *done = 0 without error when no algorithm fits. */
static int matmul_forward_lt(aa__cuda_ctx_t *ctx, int *done, float *out, const float *inp, const float *weight,
                             const float *bias, int N, int C, int OC) {
  int rc = 0;
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t heur;
  int nres = 0;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  uint32_t al_a = ptr_alignment(weight), al_b = ptr_alignment(inp), al_d = ptr_alignment(out);
  size_t ws = ctx->workspace_size;
  const float one = 1.0f, zero = 0.0f;
  *done = 0;
  LT_TRY(cublasLtMatmulDescCreate(&desc, ctx->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                  CUDA_R_32F));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (bias) LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  // A = weight as column-major (C,OC), used transposed; B = inp as (C,N); D = out as (OC,N)
  LT_TRY(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, C, OC, C));
  LT_TRY(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, C, N, C));
  LT_TRY(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, OC, N, OC));
  LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
  if (cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, la, lb, ld, ld, pref, 1, &heur, &nres) !=
          CUBLAS_STATUS_SUCCESS ||
      nres == 0)
    goto cleanup;
  LT_TRY(cublasLtMatmul(ctx->lt, desc, &one, weight, la, inp, lb, &zero, out, ld, out, ld, &heur.algo,
                        ctx->workspace, ws, ctx->stream));
  *done = 1;
cleanup:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (desc) cublasLtMatmulDescDestroy(desc);
  return rc;
}

int aa__cuda_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                            int OC) {
  AA_CUDA_CTX(ctx);
  if (N <= 0 || OC <= 0) return 0;
  int done = 0;
  if (C > 0) {
    int rc = matmul_forward_lt(ctx, &done, out, inp, weight, bias, N, C, OC);
    if (rc || done) return rc;
  }
  float beta = 0.0f;
  if (bias) {
    size_t n = (size_t)N * OC;
    bias_broadcast_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(out, bias, OC, n);
    AA_CUDA_LAUNCHED();
    beta = 1.0f;
  } else if (C <= 0) {
    AA_CUDA_TRY(cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), ctx->stream));
    return 0;
  }
  if (C <= 0) return 0;
  const float one = 1.0f;
  AA_CUBLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C, &beta, out, OC));
  return 0;
}

int aa__cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC) {
  AA_CUDA_CTX(ctx);
  if (N <= 0 || C <= 0 || OC <= 0) return 0;
  const float one = 1.0f;
  // dinp(N,C) += dout(N,OC) @ weight(OC,C): column-major (C,N) += weight(C,OC) @ dout(OC,N)
  AA_CUBLAS_TRY(cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout, OC, &one, dinp, C));
  // dweight(OC,C) += dout^T @ inp: column-major (C,OC) += inp(C,N) @ dout(OC,N)^T
  AA_CUBLAS_TRY(
      cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one, dweight, C));
  if (dbias) return aa__cuda_colsum_accumulate(ctx, dbias, dout, N, OC);
  return 0;
}
