/* Private to kernels/cuda: the backend context (device, stream, cuBLAS
 * handles, scratch), the check macros and the per-op launchers that
 * cuda_ops.cu wires into the aa_ops_t table.
 *
 * Check macros (after nccl-tests): AA_CUDA_TRY / AA_CUBLAS_TRY evaluate a
 * call and, on failure, record the sticky error with file and line and
 * `return` the negative AA_E* code from the enclosing int function.
 * AA_CUDA_LAUNCHED() checks the launch that just happened. Every launcher
 * below returns 0 or that code; the table's void ops discard it because it
 * is already recorded. */
#ifndef AA_CUDA_COMMON_CUH
#define AA_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_backend.h"

typedef struct aa__cuda_ctx {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  void *workspace; /* cuBLAS / cuBLASLt workspace, fixed size */
  size_t workspace_size;
  void *scratch; /* grown on demand; valid until the next aa__cuda_scratch */
  size_t scratch_size;
  double *sumsq; /* device partials of sum_squares + the result */
  double *sumsq_host; /* pinned host slot for the result */
  int tf32;
  aa_dtype_t gemm_inputs; /* set_gemm_inputs (ops.h): AA_F32 = fp32 GEMMs */
  int sm_count;
} aa__cuda_ctx_t;

/* The op table's scratch_bytes: the scratch, the cuBLAS workspace and the
 * sum_squares slots of the context; 0 before it exists. */
size_t aa__cuda_scratch_bytes(void);

/* The op table's set_gemm_inputs; like TF32 it outlives aa_cuda_shutdown. */
void aa__cuda_set_gemm_inputs(aa_dtype_t dtype);

/* The context, created on the current device on first use. NULL when that
 * failed (the sticky error says why). */
aa__cuda_ctx_t *aa__cuda_ctx(void);

/* A device buffer of at least `bytes` owned by the context, in *out. It is
 * shared by every op, so one op's scratch is dead when the next op starts;
 * growing it frees the old one after the stream drains. Returns 0 or a
 * negative code. */
int aa__cuda_scratch(aa__cuda_ctx_t *ctx, size_t bytes, void **out);

/* Record a failure (first one wins) and return its AA_E* code. */
int aa__cuda_fail(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int aa__cuda_fail_cuda(cudaError_t err, const char *what, const char *file, int line);
int aa__cuda_fail_cublas(cublasStatus_t st, const char *what, const char *file, int line);

#define AA_CUDA_TRY(call)                                                                                   \
  do {                                                                                                      \
    cudaError_t e_ = (call);                                                                                \
    if (e_ != cudaSuccess) return aa__cuda_fail_cuda(e_, #call, __FILE__, __LINE__);                        \
  } while (0)

#define AA_CUBLAS_TRY(call)                                                                                 \
  do {                                                                                                      \
    cublasStatus_t s_ = (call);                                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) return aa__cuda_fail_cublas(s_, #call, __FILE__, __LINE__);            \
  } while (0)

#define AA_CUDA_LAUNCHED() AA_CUDA_TRY(cudaGetLastError())

/* Fetch the context or return its failure. */
#define AA_CUDA_CTX(var)                                                                                    \
  aa__cuda_ctx_t *var = aa__cuda_ctx();                                                                     \
  if (!var) return aa_cuda_last_error()

static inline unsigned aa__cuda_blocks(size_t n, unsigned threads) {
  return (unsigned)((n + threads - 1) / threads);
}

/* Grid-stride loop bound: enough blocks to fill the GPU, capped so that
 * huge n does not exceed the grid limit. */
static inline unsigned aa__cuda_grid(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  if (b > 65535u * 8u) b = 65535u * 8u;
  return b ? (unsigned)b : 1u;
}

/* out(M) += sum over rows of in(R,M) (row stride ld), in a fixed order:
 * rows are cut in chunks of a fixed size, each chunk is summed in row order
 * by one thread per column, and the chunk sums are added in chunk order.
 * Deterministic; uses context scratch. */
int aa__cuda_colsum_accumulate(aa__cuda_ctx_t *ctx, float *out, const float *in, int R, int M);

/* Launchers, one per op (contracts in kernels/ops.h). */
int aa__cuda_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T,
                             int C);
int aa__cuda_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T,
                              int C);
int aa__cuda_encoder_forward_vocab(float *out, const int32_t *inp, const float *wte, const float *wpe, int lo,
                                   int valid, int B, int T, int C);
int aa__cuda_encoder_backward_vocab(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int lo,
                                    int valid, int B, int T, int C);
int aa__cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                               const float *bias, int N, int C);
int aa__cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, const float *mean, const float *rstd, int N, int C);
int aa__cuda_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                            int OC);
int aa__cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, int N, int C, int OC);
int aa__cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
int aa__cuda_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                int T, int C, int NH);
/* The two implementations behind them (cuda_attention_gemm.cu). */
int aa__cuda_attention_forward_gemm(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
int aa__cuda_attention_backward_gemm(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                     int T, int C, int NH);
int aa__cuda_gelu_forward(float *out, const float *inp, size_t n);
int aa__cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
int aa__cuda_residual_forward(float *out, const float *a, const float *b, size_t n);
int aa__cuda_accumulate(float *y, const float *x, size_t n);
int aa__cuda_rows_copy(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols);
int aa__cuda_rows_accumulate(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols);
int aa__cuda_scale(float *x, float s, size_t n);
int aa__cuda_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets,
                                  int N, int V);
int aa__cuda_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss,
                                   int N, int V);
int aa__cuda_xent_vocab_partial(float *part, const float *logits, const int32_t *targets, int lo, int valid,
                                int N, int V);
int aa__cuda_xent_vocab_forward(float *losses, float *probs, const float *logits, const float *parts, int R,
                                int valid, int N, int V);
int aa__cuda_xent_vocab_backward(float *dlogits, const float *probs, const int32_t *targets, int lo,
                                 int valid, float dloss, int N, int V);
int aa__cuda_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int t);
int aa__cuda_sum_squares(double *out, const float *x, size_t n);
int aa__cuda_cast_from_f32(void *dst, aa_dtype_t dtype, const float *src, size_t n);
int aa__cuda_cast_to_f32(float *dst, const void *src, aa_dtype_t dtype, size_t n);
int aa__cuda_round_store(void *dst, float *x, aa_dtype_t dtype, size_t n);
/* Ring attention's block ops (cuda_attention_ring.cu). */
int aa__cuda_attention_block_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                     int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                     int ldkv, size_t bskv, int causal);
int aa__cuda_attention_block_merge(float *out, float *lse, const float *ob, const float *lseb, int B, int Tq,
                                   int NH, int HS);
int aa__cuda_attention_block_delta(float *delta, const float *dout, const float *out, int B, int Tq, int NH,
                                   int HS);
int aa__cuda_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                      const float *k, const float *v, const float *lse, const float *delta,
                                      int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                      int ldkv, size_t bskv, int causal);

#endif
