/* LayerNorm over the last dimension, eps = 1e-5 and the biased variance, as
 * torch.nn.LayerNorm. One warp per row; row statistics in double with a
 * two-pass variance, like the CPU backend. Warp reductions are shuffle
 * trees of fixed shape, so results are deterministic. */
#include "cuda_common.cuh"

#define LN_EPS 1e-5
#define LN_WARPS 4 /* rows per block */
#define LN_CHUNK 128 /* rows per partial in the parameter-gradient pass */
#define LN_COLS 128 /* columns per block in that pass */

__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_sum_f(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// out(N,C), mean(N), rstd(N) from inp(N,C), weight(C), bias(C)
__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *weight, const float *bias, int N, int C) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * LN_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *x = inp + (size_t)n * C;
  double sum = 0.0;
  for (int c = lane; c < C; c += 32)
    sum += x[c];
  double m = warp_sum_d(sum) / C;
  double var = 0.0;
  for (int c = lane; c < C; c += 32) {
    double d = (double)x[c] - m;
    var += d * d;
  }
  var = warp_sum_d(var);
  float s = (float)(1.0 / sqrt(var / C + LN_EPS));
  float mf = (float)m;
  float *o = out + (size_t)n * C;
  for (int c = lane; c < C; c += 32)
    o[c] = (x[c] - mf) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[n] = mf;
    rstd[n] = s;
  }
}

// dinp(N,C) += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dout * weight
__global__ void layernorm_backward_dx_kernel(float *dinp, const float *dout, const float *inp, const float *weight,
                                             const float *mean, const float *rstd, int N, int C) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * LN_WARPS + threadIdx.x / 32;
  if (n >= N) return;
  const float *x = inp + (size_t)n * C;
  const float *d = dout + (size_t)n * C;
  float m = mean[n], s = rstd[n];
  float gmean = 0.0f, gxmean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float g = d[c] * weight[c];
    gmean += g;
    gxmean += g * (x[c] - m) * s;
  }
  gmean = warp_sum_f(gmean) / C;
  gxmean = warp_sum_f(gxmean) / C;
  float *dx = dinp + (size_t)n * C;
  for (int c = lane; c < C; c += 32) {
    float xhat = (x[c] - m) * s;
    dx[c] += s * (d[c] * weight[c] - gmean - xhat * gxmean);
  }
}

// part(2, nchunks, C): per row-chunk sums of dout and dout * xhat
__global__ void layernorm_backward_partial_kernel(float *part, const float *dout, const float *inp,
                                                  const float *mean, const float *rstd, int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int r0 = blockIdx.y * LN_CHUNK, r1 = min(r0 + LN_CHUNK, N);
  float db = 0.0f, dw = 0.0f;
  for (int n = r0; n < r1; n++) {
    float d = dout[(size_t)n * C + c];
    db += d;
    dw += d * (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
  }
  size_t nchunks = gridDim.y;
  part[(size_t)blockIdx.y * C + c] = db;
  part[(nchunks + blockIdx.y) * C + c] = dw;
}

// dbias(C), dweight(C) += chunk sums in chunk order
__global__ void layernorm_backward_final_kernel(float *dweight, float *dbias, const float *part, int nchunks,
                                                int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float db = 0.0f, dw = 0.0f;
  for (int k = 0; k < nchunks; k++) {
    db += part[(size_t)k * C + c];
    dw += part[((size_t)nchunks + k) * C + c];
  }
  dbias[c] += db;
  dweight[c] += dw;
}

int aa__cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                               const float *bias, int N, int C) {
  AA_CUDA_CTX(ctx);
  if (N <= 0) return 0;
  layernorm_forward_kernel<<<aa__cuda_blocks(N, LN_WARPS), LN_WARPS * 32, 0, ctx->stream>>>(out, mean, rstd, inp,
                                                                                             weight, bias, N, C);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                const float *weight, const float *mean, const float *rstd, int N, int C) {
  AA_CUDA_CTX(ctx);
  if (N <= 0 || C <= 0) return 0;
  layernorm_backward_dx_kernel<<<aa__cuda_blocks(N, LN_WARPS), LN_WARPS * 32, 0, ctx->stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  AA_CUDA_LAUNCHED();
  if (!dweight) return 0; /* a frozen weight and bias (LoRA's base): no gradient */
  int nchunks = (N + LN_CHUNK - 1) / LN_CHUNK;
  float *part;
  int rc = aa__cuda_scratch(ctx, 2 * (size_t)nchunks * C * sizeof(float), (void **)&part);
  if (rc) return rc;
  dim3 grid(aa__cuda_blocks(C, LN_COLS), nchunks);
  layernorm_backward_partial_kernel<<<grid, LN_COLS, 0, ctx->stream>>>(part, dout, inp, mean, rstd, N, C);
  AA_CUDA_LAUNCHED();
  layernorm_backward_final_kernel<<<aa__cuda_blocks(C, LN_COLS), LN_COLS, 0, ctx->stream>>>(dweight, dbias, part,
                                                                                            nchunks, C);
  AA_CUDA_LAUNCHED();
  return 0;
}
