/* The CUDA op table: wires the launchers of this folder into an aa_ops_t.
 * The launchers return an AA_E* code that is already recorded as the
 * backend's sticky error (cuda_backend.h), so the void slots drop it. */
#include "../moe_ops.h"
#include "cuda_common.cuh"

#include <math.h>

extern "C" {
#include "common/mem.h"
}

/* The GPU has no host thread pool to size. */
static void cuda_set_threads(int n) { (void)n; }

static void encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C) {
  (void)aa__cuda_encoder_forward(out, inp, wte, wpe, B, T, C);
}
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C) {
  (void)aa__cuda_encoder_backward(dwte, dwpe, dout, inp, B, T, C);
}
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C) {
  (void)aa__cuda_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd, int N, int C) {
  (void)aa__cuda_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
static void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                           int OC) {
  (void)aa__cuda_matmul_forward(out, inp, weight, bias, N, C, OC);
}
static void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int N, int C, int OC) {
  (void)aa__cuda_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
static void attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  (void)aa__cuda_attention_forward(out, lse, qkv, B, T, C, NH);
}
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B, int T,
                               int C, int NH) {
  (void)aa__cuda_attention_backward(dqkv, dout, qkv, lse, B, T, C, NH);
}
static void gelu_forward(float *out, const float *inp, size_t n) { (void)aa__cuda_gelu_forward(out, inp, n); }
static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  (void)aa__cuda_gelu_backward(dinp, inp, dout, n);
}
static void residual_forward(float *out, const float *a, const float *b, size_t n) {
  (void)aa__cuda_residual_forward(out, a, b, n);
}
static void accumulate(float *y, const float *x, size_t n) { (void)aa__cuda_accumulate(y, x, n); }
static void crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N,
                                 int V) {
  (void)aa__cuda_crossentropy_forward(losses, probs, logits, targets, N, V);
}
static void crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,
                                  int V) {
  (void)aa__cuda_crossentropy_backward(dlogits, probs, targets, dloss, N, V);
}
static void encoder_forward_vocab(float *out, const int32_t *inp, const float *wte, const float *wpe, int lo,
                                  int valid, int B, int T, int C) {
  (void)aa__cuda_encoder_forward_vocab(out, inp, wte, wpe, lo, valid, B, T, C);
}
static void encoder_backward_vocab(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int lo,
                                   int valid, int B, int T, int C) {
  (void)aa__cuda_encoder_backward_vocab(dwte, dwpe, dout, inp, lo, valid, B, T, C);
}
static void xent_vocab_partial(float *part, const float *logits, const int32_t *targets, int lo, int valid,
                               int N, int V) {
  (void)aa__cuda_xent_vocab_partial(part, logits, targets, lo, valid, N, V);
}
static void xent_vocab_forward(float *losses, float *probs, const float *logits, const float *parts, int R,
                               int valid, int N, int V) {
  (void)aa__cuda_xent_vocab_forward(losses, probs, logits, parts, R, valid, N, V);
}
static void xent_vocab_backward(float *dlogits, const float *probs, const int32_t *targets, int lo, int valid,
                                float dloss, int N, int V) {
  (void)aa__cuda_xent_vocab_backward(dlogits, probs, targets, lo, valid, dloss, N, V);
}
static void adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int t) {
  (void)aa__cuda_adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}
/* NaN on failure, so that a gradient-norm clip cannot silently pass. */
static double sum_squares(const float *x, size_t n) {
  double out = NAN;
  return aa__cuda_sum_squares(&out, x, n) ? NAN : out;
}
static void scale(float *x, float s, size_t n) { (void)aa__cuda_scale(x, s, n); }
static void cast_from_f32(void *dst, aa_dtype_t dtype, const float *src, size_t n) {
  (void)aa__cuda_cast_from_f32(dst, dtype, src, n);
}
static void cast_to_f32(float *dst, const void *src, aa_dtype_t dtype, size_t n) {
  (void)aa__cuda_cast_to_f32(dst, src, dtype, n);
}
static void round_store(void *dst, float *x, aa_dtype_t dtype, size_t n) {
  (void)aa__cuda_round_store(dst, x, dtype, n);
}

/* Memory entries (kernels/ops.h). cudaMalloc is called directly rather than
 * through AA_CUDA_TRY so that running out of memory is returned, not made
 * the sticky error: the engine reports it and the backend stays usable. */
static int mem_alloc(void **out, size_t bytes) {
  if (bytes == 0) {
    *out = NULL;
    return 0;
  }
  aa__cuda_ctx_t *c = aa__cuda_ctx();
  if (!c) return aa_cuda_last_error();
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    char b[32], f[32];
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    if (err == cudaErrorMemoryAllocation)
      return aa_error(AA_EOOM, "out of memory on cuda:%d: cannot allocate %s (%s free)", c->device,
                      aa_mem_fmt(b, bytes), aa_mem_fmt(f, free_b));
    return aa_error(AA_EINTERNAL, "cuda:%d: cudaMalloc of %s failed: %s (%s)", c->device, aa_mem_fmt(b, bytes),
                    cudaGetErrorString(err), cudaGetErrorName(err));
  }
  /* cudaMalloc does not zero; the memset is ordered before every later op
   * and copy on the stream. */
  int rc = aa_cuda_memset0(p, bytes);
  if (rc) {
    cudaFree(p);
    return rc;
  }
  *out = p;
  return 0;
}
static void mem_free(void *p) { aa_cuda_free(p); }
static void mem_zero(void *p, size_t bytes) {
  if (bytes) (void)aa_cuda_memset0(p, bytes);
}
static int mem_upload(void *dst, const void *src, size_t bytes) {
  return bytes ? aa_cuda_upload(dst, src, bytes) : 0;
}
static int mem_download(void *dst, const void *src, size_t bytes) {
  return bytes ? aa_cuda_download(dst, src, bytes) : 0;
}
static void rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                            float eps) {
  (void)aa__cuda_rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}
static void rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C) {
  (void)aa__cuda_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}
static void swiglu_forward(float *out, const float *inp, int N, int F) {
  (void)aa__cuda_swiglu_forward(out, inp, N, F);
}
static void swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
  (void)aa__cuda_swiglu_backward(dinp, inp, dout, N, F);
}
static void rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  (void)aa__cuda_rope_forward(qkv, B, T, NH, NKV, HS, pos0, theta);
}
static void rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  (void)aa__cuda_rope_backward(dqkv, B, T, NH, NKV, HS, pos0, theta);
}
static void attention_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                  int HS) {
  (void)aa__cuda_attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, HS);
}
static void attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                   int T, int NH, int NKV, int HS) {
  (void)aa__cuda_attention_gqa_backward(dqkv, dout, qkv, lse, B, T, NH, NKV, HS);
}
static void attention_decode(float *out, float *kcache, float *vcache, const float *qkv, int B, int Tmax,
                             int pos, int NH, int NKV, int HS) {
  (void)aa__cuda_attention_decode(out, kcache, vcache, qkv, B, Tmax, pos, NH, NKV, HS);
}
static void attention_block_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                                    int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                    int ldkv, size_t bskv, int causal) {
  (void)aa__cuda_attention_block_forward(out, lse, q, k, v, B, Tq, Tk, NH, NKV, HS, ldq, bsq, ldkv, bskv,
                                         causal);
}
static void attention_block_merge(float *out, float *lse, const float *ob, const float *lseb, int B, int Tq,
                                  int NH, int HS) {
  (void)aa__cuda_attention_block_merge(out, lse, ob, lseb, B, Tq, NH, HS);
}
static void attention_block_delta(float *delta, const float *dout, const float *out, int B, int Tq, int NH,
                                  int HS) {
  (void)aa__cuda_attention_block_delta(delta, dout, out, B, Tq, NH, HS);
}
static void attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                     const float *k, const float *v, const float *lse, const float *delta,
                                     int B, int Tq, int Tk, int NH, int NKV, int HS, int ldq, size_t bsq,
                                     int ldkv, size_t bskv, int causal) {
  (void)aa__cuda_attention_block_backward(dq, dk, dv, dout, q, k, v, lse, delta, B, Tq, Tk, NH, NKV, HS, ldq,
                                          bsq, ldkv, bskv, causal);
}
static void rows_copy(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols) {
  (void)aa__cuda_rows_copy(dst, ldd, src, lds, rows, cols);
}
static void rows_accumulate(float *dst, size_t ldd, const float *src, size_t lds, size_t rows, size_t cols) {
  (void)aa__cuda_rows_accumulate(dst, ldd, src, lds, rows, cols);
}

static int mem_sync(void) {
  int rc = aa_cuda_sync();
  if (rc) return aa_error(rc, "cuda backend: %s", aa_cuda_last_error_message());
  return 0;
}

/* The context's scratch and workspaces plus the GQA ops' expanded copy,
 * which cuda_llama.cu keeps apart because the MHA kernels it calls use the
 * context's scratch themselves. */
static size_t scratch_bytes(void) { return aa__cuda_scratch_bytes() + aa__cuda_llama_scratch_bytes(); }

/* Positional, in the order of aa_ops_t's fields (nvcc's C++17 has no
 * designated initializers): a field added to ops.h goes in here at the same
 * place. */
static const aa_ops_t cuda_ops = {
    "cuda",
    cuda_set_threads,
    aa__cuda_set_gemm_inputs,
    encoder_forward,
    encoder_backward,
    layernorm_forward,
    layernorm_backward,
    matmul_forward,
    matmul_backward,
    attention_forward,
    attention_backward,
    gelu_forward,
    gelu_backward,
    residual_forward,
    accumulate,
    crossentropy_forward,
    crossentropy_backward,
    encoder_forward_vocab,
    encoder_backward_vocab,
    xent_vocab_partial,
    xent_vocab_forward,
    xent_vocab_backward,
    adamw_update,
    sum_squares,
    scale,
    cast_from_f32,
    cast_to_f32,
    round_store,
    mem_alloc,
    mem_free,
    mem_zero,
    mem_upload,
    mem_download,
    mem_sync,
    scratch_bytes,
    rmsnorm_forward,
    rmsnorm_backward,
    swiglu_forward,
    swiglu_backward,
    rope_forward,
    rope_backward,
    attention_gqa_forward,
    attention_gqa_backward,
    attention_decode,
    attention_block_forward,
    attention_block_merge,
    attention_block_delta,
    attention_block_backward,
    rows_copy,
    rows_accumulate,
    &aa__cuda_moe_ops,
    /* The fused forms (matmul_backward_set, bias_gelu_forward,
     * gelu_backward_bias, swiglu_backward_set, adamw_update_scaled): none
     * here, the engine calls the plain ops. */
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

extern "C" const aa_ops_t *aa_ops_cuda(void) { return &cuda_ops; }
