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
 * is a fixed-order column sum.
 *
 * 16-bit GEMMs: after set_gemm_inputs(AA_BF16 or AA_F16) (ops.h) every
 * operand is promised to hold values of that type, as the engine's amp path
 * guarantees (it rounds every activation, activation gradient and weight it
 * feeds a GEMM). The operands are then narrowed into scratch, exactly, and
 * multiplied on the tensor cores with fp32 accumulation and an fp32 result
 * (forward on cuBLASLt, backward on cublasGemmEx): the same products as the
 * fp32 path, summed in another order. In the backward, dout is narrowed once
 * for both GEMMs. */
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

/* One column-major GEMM D(m,n) = op(A) op(B) + beta D (+ bias(m) per
 * column when bias is set, which needs beta = 0), with A and B of type ab
 * and D fp32. */
typedef struct {
  cublasOperation_t ta, tb;
  int m, n, k;
  const void *A;
  int lda;
  const void *B;
  int ldb;
  float beta;
  float *D;
  int ldd;
  const float *bias;
  cudaDataType_t ab;
} gemm_t;

static cublasComputeType_t compute_type(const aa__cuda_ctx_t *ctx, cudaDataType_t ab) {
  return ab == CUDA_R_32F && ctx->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

/* g through cuBLASLt (bias as an epilogue). Sets *done = 0 without error
 * when no algorithm fits. */
static int gemm_lt(aa__cuda_ctx_t *ctx, int *done, const gemm_t *g) {
  int rc = 0;
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t heur;
  int nres = 0;
  cublasLtEpilogue_t epi = g->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  uint32_t al_a = ptr_alignment(g->A), al_b = ptr_alignment(g->B), al_d = ptr_alignment(g->D);
  size_t ws = ctx->workspace_size;
  const float one = 1.0f;
  *done = 0;
  LT_TRY(cublasLtMatmulDescCreate(&desc, compute_type(ctx, g->ab), CUDA_R_32F));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g->ta, sizeof g->ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g->tb, sizeof g->tb));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (g->bias)
    LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias));
  /* Layouts describe the stored matrices, before op(). */
  LT_TRY(cublasLtMatrixLayoutCreate(&la, g->ab, g->ta == CUBLAS_OP_N ? g->m : g->k,
                                    g->ta == CUBLAS_OP_N ? g->k : g->m, g->lda));
  LT_TRY(cublasLtMatrixLayoutCreate(&lb, g->ab, g->tb == CUBLAS_OP_N ? g->k : g->n,
                                    g->tb == CUBLAS_OP_N ? g->n : g->k, g->ldb));
  LT_TRY(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, g->m, g->n, g->ldd));
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
  LT_TRY(cublasLtMatmul(ctx->lt, desc, &one, g->A, la, g->B, lb, &g->beta, g->D, ld, g->D, ld, &heur.algo,
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

/* g on cuBLASLt when lt is set and Lt has an algorithm, else on cuBLAS: a
 * bias is then broadcast into D first and the product added with beta = 1.
 * The backward stays on cuBLAS, whose default (no atomics) is
 * reproducible, as the H100 runs verified. */
static int gemm(aa__cuda_ctx_t *ctx, gemm_t g, int lt) {
  if (g.m <= 0 || g.n <= 0) return 0;
  int done = 0, rc;
  /* The bias epilogue's pointer has no alignment preference to declare, and
   * 16-bit kernels are reported to need a 16-byte-aligned bias (marian-nmt
   * on the A100); the engine's biases sit at 4-byte offsets in the flat
   * parameter buffer. Such a GEMM takes the broadcast path below, which the
   * H100 runs verified, instead of risking a launch failure. */
  if (g.bias && g.ab != CUDA_R_32F && ((uintptr_t)g.bias & 15)) lt = 0;
  if (lt && g.k > 0 && ((rc = gemm_lt(ctx, &done, &g)) || done)) return rc;
  if (g.bias) {
    size_t n = (size_t)g.m * g.n;
    /* D is (m,n) column-major with ldd = m here (every caller's case). */
    bias_broadcast_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(g.D, g.bias, g.m, n);
    AA_CUDA_LAUNCHED();
    g.beta = 1.0f;
  } else if (g.k <= 0 && g.beta == 0.0f) {
    AA_CUDA_TRY(cudaMemsetAsync(g.D, 0, (size_t)g.m * g.n * sizeof(float), ctx->stream));
  }
  if (g.k <= 0) return 0;
  const float one = 1.0f;
  if (g.ab == CUDA_R_32F)
    AA_CUBLAS_TRY(cublasSgemm(ctx->blas, g.ta, g.tb, g.m, g.n, g.k, &one, (const float *)g.A, g.lda,
                              (const float *)g.B, g.ldb, &g.beta, g.D, g.ldd));
  else
    AA_CUBLAS_TRY(cublasGemmEx(ctx->blas, g.ta, g.tb, g.m, g.n, g.k, &one, g.A, g.ab, g.lda, g.B, g.ab, g.ldb,
                               &g.beta, g.D, CUDA_R_32F, g.ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

/* With 16-bit GEMM inputs promised: narrows the n_ops fp32 operands src[i]
 * (len[i] elements) into one scratch buffer, each at a 256-byte boundary,
 * and points dst[i] at them; otherwise dst = src. Returns the cuBLAS type
 * of the operands in *ab. */
static int narrow(aa__cuda_ctx_t *ctx, int n_ops, const float *const *src, const size_t *len, const void **dst,
                  cudaDataType_t *ab) {
  if (ctx->gemm_inputs == AA_F32) {
    for (int i = 0; i < n_ops; i++)
      dst[i] = src[i];
    *ab = CUDA_R_32F;
    return 0;
  }
  size_t off[3], total = 0;
  for (int i = 0; i < n_ops; i++) {
    off[i] = total;
    total += (len[i] * sizeof(uint16_t) + 255) & ~(size_t)255;
  }
  char *buf;
  int rc = aa__cuda_scratch(ctx, total ? total : 256, (void **)&buf);
  if (rc) return rc;
  for (int i = 0; i < n_ops; i++) {
    if ((rc = aa__cuda_cast_from_f32(buf + off[i], ctx->gemm_inputs, src[i], len[i]))) return rc;
    dst[i] = buf + off[i];
  }
  *ab = ctx->gemm_inputs == AA_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  return 0;
}

int aa__cuda_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                            int OC) {
  AA_CUDA_CTX(ctx);
  if (N <= 0 || OC <= 0) return 0;
  const float *src[2] = {weight, inp};
  size_t len[2] = {(size_t)OC * (C > 0 ? C : 0), (size_t)N * (C > 0 ? C : 0)};
  const void *op[2];
  cudaDataType_t ab;
  int rc = narrow(ctx, 2, src, len, op, &ab);
  if (rc) return rc;
  // A = weight as column-major (C,OC), used transposed; B = inp as (C,N); D = out as (OC,N)
  return gemm(ctx, (gemm_t){CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, op[0], C, op[1], C, 0.0f, out, OC, bias, ab}, 1);
}

int aa__cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC) {
  AA_CUDA_CTX(ctx);
  if (N <= 0 || C <= 0 || OC <= 0) return 0;
  const float *src[3] = {weight, dout, inp};
  size_t len[3] = {(size_t)OC * C, (size_t)N * OC, (size_t)N * C};
  const void *op[3];
  cudaDataType_t ab;
  // A frozen weight (LoRA's base: dweight NULL) needs no inp narrowed.
  int rc = narrow(ctx, dweight ? 3 : 2, src, len, op, &ab);
  if (rc) return rc;
  // dinp(N,C) += dout(N,OC) @ weight(OC,C): column-major (C,N) += weight(C,OC) @ dout(OC,N)
  if ((rc = gemm(ctx, (gemm_t){CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, op[0], C, op[1], OC, 1.0f, dinp, C, NULL, ab},
                 0)))
    return rc;
  // dweight(OC,C) += dout^T @ inp: column-major (C,OC) += inp(C,N) @ dout(OC,N)^T
  if (dweight &&
      (rc = gemm(
           ctx, (gemm_t){CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, op[2], C, op[1], OC, 1.0f, dweight, C, NULL, ab},
           0)))
    return rc;
  if (dbias) return aa__cuda_colsum_accumulate(ctx, dbias, dout, N, OC);
  return 0;
}
