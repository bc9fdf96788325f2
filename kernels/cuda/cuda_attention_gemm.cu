/* Causal multi-head self-attention on cuBLAS strided-batched GEMMs, under
 * the logsumexp contract of kernels/ops.h (after llm.c's
 * attention_forward/backward). q, k, v are permuted to (B,NH,T,hs) so that
 * every head is one batch of cuBLAS; the T x T products include the masked
 * triangle (2x the causal minimum) and run on tensor cores under TF32.
 * Scores and probabilities live in scratch only, one call at a time: the
 * forward keeps each row's logsumexp, the backward recomputes the scores
 * with one more GEMM and P = exp(s - lse).
 *
 * This is the path verified on an H100 before the contract change (then
 * keeping att); cuda_attention.cu picks it or the flash kernels.
 *
 * Scratch (context, per call, not in the engine's memory accounting):
 * forward 4*B*T*C + B*NH*T*T floats; backward 7*B*T*C + 2*B*NH*T*T. Softmax
 * rows are warp reductions of fixed shape, cuBLAS is reproducible, and
 * nothing uses atomics: deterministic. */
#include "cuda_common.cuh"

#include <math.h>

#define ATT_THREADS 256
#define SM_WARPS 8 /* softmax rows per block */

/* Element i of a (B,NH,T,hs) tensor: its offset in a row-major (B,T,ld)
 * tensor whose row holds the heads side by side from column 0. */
__device__ __forceinline__ size_t head_elem_to_row(size_t i, int T, int NH, int hs, size_t ld) {
  int d = (int)(i % hs);
  size_t r = i / hs;
  int t = (int)(r % T);
  r /= T;
  int h = (int)(r % NH);
  size_t b = r / NH;
  return (b * T + t) * ld + (size_t)h * hs + d;
}

// q,k,v(B,NH,T,hs) from qkv(B,T,3C)
__global__ void attention_permute_kernel(float *q, float *k, float *v, const float *qkv, int B, int T, int C,
                                         int NH) {
  int hs = C / NH;
  size_t n = (size_t)B * T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float *src = qkv + head_elem_to_row(i, T, NH, hs, 3 * (size_t)C);
    q[i] = src[0];
    k[i] = src[C];
    v[i] = src[2 * C];
  }
}

// to_heads = 0: dst(B,T,C) = src(B,NH,T,hs) with heads concatenated;
// to_heads = 1: dst(B,NH,T,hs) = src(B,T,C) split into heads
__global__ void attention_relayout_kernel(float *dst, const float *src, int B, int T, int C, int NH, int to_heads) {
  int hs = C / NH;
  size_t n = (size_t)B * T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t o = head_elem_to_row(i, T, NH, hs, C);
    if (to_heads)
      dst[i] = src[o];
    else
      dst[o] = src[i];
  }
}

// dqkv(B,T,3C) += dq,dk,dv(B,NH,T,hs)
__global__ void attention_unpermute_add_kernel(float *dqkv, const float *dq, const float *dk, const float *dv,
                                               int B, int T, int C, int NH) {
  int hs = C / NH;
  size_t n = (size_t)B * T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float *dst = dqkv + head_elem_to_row(i, T, NH, hs, 3 * (size_t)C);
    dst[0] += dq[i];
    dst[C] += dk[i];
    dst[2 * C] += dv[i];
  }
}

// att(B*NH*T rows, T): causal softmax of each row in place; row t keeps
// columns 0..t, the rest become 0; lse(rows) = each row's logsumexp
__global__ void attention_softmax_kernel(float *att, float *lse, int T, size_t rows) {
  int lane = threadIdx.x % 32;
  size_t row = (size_t)blockIdx.x * SM_WARPS + threadIdx.x / 32;
  if (row >= rows) return;
  int t = (int)(row % T);
  float *x = att + row * T;
  float maxv = -INFINITY;
  for (int j = lane; j <= t; j += 32)
    maxv = fmaxf(maxv, x[j]);
  for (int o = 16; o > 0; o >>= 1)
    maxv = fmaxf(maxv, __shfl_xor_sync(0xffffffffu, maxv, o));
  float sum = 0.0f;
  for (int j = lane; j <= t; j += 32) {
    float e = expf(x[j] - maxv);
    x[j] = e;
    sum += e;
  }
  for (int o = 16; o > 0; o >>= 1)
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  float inv = 1.0f / sum;
  for (int j = lane; j < T; j += 32)
    x[j] = j <= t ? x[j] * inv : 0.0f;
  if (lane == 0) lse[row] = maxv + logf(sum);
}

// att(rows, T) = exp(att - lse(row)) for columns <= t, else 0: the
// probabilities again, from recomputed scores
__global__ void attention_probs_kernel(float *att, const float *lse, int T, size_t rows) {
  size_t n = rows * (size_t)T;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / T;
    int j = (int)(i % T), t = (int)(row % T);
    att[i] = j <= t ? expf(att[i] - lse[row]) : 0.0f;
  }
}

// datt(rows, T) = att * (datt - rowsum(att * datt)) * scale in place, causal
__global__ void attention_softmax_backward_kernel(float *datt, const float *att, int T, size_t rows, float scale) {
  int lane = threadIdx.x % 32;
  size_t row = (size_t)blockIdx.x * SM_WARPS + threadIdx.x / 32;
  if (row >= rows) return;
  int t = (int)(row % T);
  float *d = datt + row * T;
  const float *p = att + row * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32)
    dot += p[j] * d[j];
  for (int o = 16; o > 0; o >>= 1)
    dot += __shfl_xor_sync(0xffffffffu, dot, o);
  for (int j = lane; j < T; j += 32)
    d[j] = j <= t ? p[j] * (d[j] - dot) * scale : 0.0f;
}

int aa__cuda_attention_forward_gemm(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
  AA_CUDA_CTX(ctx);
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  int hs = C / NH;
  size_t btc = (size_t)B * T * C, rows0 = (size_t)B * NH * T;
  float *buf;
  int rc = aa__cuda_scratch(ctx, (4 * btc + rows0 * T) * sizeof(float), (void **)&buf);
  if (rc) return rc;
  float *q = buf, *k = buf + btc, *v = buf + 2 * btc, *y = buf + 3 * btc, *att = buf + 4 * btc;
  unsigned grid = aa__cuda_grid(btc, ATT_THREADS);
  attention_permute_kernel<<<grid, ATT_THREADS, 0, ctx->stream>>>(q, k, v, qkv, B, T, C, NH);
  AA_CUDA_LAUNCHED();
  const float scale = 1.0f / sqrtf((float)hs), one = 1.0f, zero = 0.0f;
  long long sqk = (long long)T * hs, satt = (long long)T * T;
  int batch = B * NH;
  // att(t,s) = scale * q_t . k_s: column-major (T_s, T_t) = k^T q
  AA_CUBLAS_TRY(cublasSgemmStridedBatched(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, hs, sqk, q, hs,
                                          sqk, &zero, att, T, satt, batch));
  size_t rows = (size_t)batch * T;
  attention_softmax_kernel<<<aa__cuda_blocks(rows, SM_WARPS), SM_WARPS * 32, 0, ctx->stream>>>(att, lse, T, rows);
  AA_CUDA_LAUNCHED();
  // y(t,:) = sum_s att(t,s) v(s,:): column-major (hs, T) = v (hs,T_s) @ att (T_s,T_t)
  AA_CUBLAS_TRY(cublasSgemmStridedBatched(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v, hs, sqk, att, T,
                                          satt, &zero, y, hs, sqk, batch));
  attention_relayout_kernel<<<grid, ATT_THREADS, 0, ctx->stream>>>(out, y, B, T, C, NH, 0);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_attention_backward_gemm(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                     int T, int C, int NH) {
  AA_CUDA_CTX(ctx);
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  int hs = C / NH;
  size_t btc = (size_t)B * T * C;
  int batch = B * NH;
  size_t rows = (size_t)batch * T;
  float *buf;
  int rc = aa__cuda_scratch(ctx, (7 * btc + 2 * rows * T) * sizeof(float), (void **)&buf);
  if (rc) return rc;
  float *q = buf, *k = buf + btc, *v = buf + 2 * btc, *dy = buf + 3 * btc;
  float *dq = buf + 4 * btc, *dk = buf + 5 * btc, *dv = buf + 6 * btc, *datt = buf + 7 * btc;
  float *att = datt + rows * T;
  unsigned grid = aa__cuda_grid(btc, ATT_THREADS);
  attention_permute_kernel<<<grid, ATT_THREADS, 0, ctx->stream>>>(q, k, v, qkv, B, T, C, NH);
  AA_CUDA_LAUNCHED();
  attention_relayout_kernel<<<grid, ATT_THREADS, 0, ctx->stream>>>(dy, dout, B, T, C, NH, 1);
  AA_CUDA_LAUNCHED();
  const float scale = 1.0f / sqrtf((float)hs), one = 1.0f, zero = 0.0f;
  long long sqk = (long long)T * hs, satt = (long long)T * T;
  // att(t,s) = scale * q_t . k_s again, then the probabilities from lse
  AA_CUBLAS_TRY(cublasSgemmStridedBatched(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, hs, sqk, q, hs,
                                          sqk, &zero, att, T, satt, batch));
  attention_probs_kernel<<<aa__cuda_grid(rows * T, ATT_THREADS), ATT_THREADS, 0, ctx->stream>>>(att, lse, T, rows);
  AA_CUDA_LAUNCHED();
  // datt(t,s) = dy_t . v_s
  AA_CUBLAS_TRY(cublasSgemmStridedBatched(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &one, v, hs, sqk, dy, hs,
                                          sqk, &zero, datt, T, satt, batch));
  // dv(s,:) = sum_t att(t,s) dy(t,:)
  AA_CUBLAS_TRY(cublasSgemmStridedBatched(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one, dy, hs, sqk, att, T,
                                          satt, &zero, dv, hs, sqk, batch));
  attention_softmax_backward_kernel<<<aa__cuda_blocks(rows, SM_WARPS), SM_WARPS * 32, 0, ctx->stream>>>(
      datt, att, T, rows, scale);
  AA_CUDA_LAUNCHED();
  // dq(t,:) = sum_s dpre(t,s) k(s,:)
  AA_CUBLAS_TRY(cublasSgemmStridedBatched(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, k, hs, sqk, datt, T,
                                          satt, &zero, dq, hs, sqk, batch));
  // dk(s,:) = sum_t dpre(t,s) q(t,:)
  AA_CUBLAS_TRY(cublasSgemmStridedBatched(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one, q, hs, sqk, datt, T,
                                          satt, &zero, dk, hs, sqk, batch));
  attention_unpermute_add_kernel<<<grid, ATT_THREADS, 0, ctx->stream>>>(dqkv, dq, dk, dv, B, T, C, NH);
  AA_CUDA_LAUNCHED();
  return 0;
}
