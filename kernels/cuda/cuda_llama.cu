/* The llama family's ops on the GPU (contracts in kernels/ops.h): RMSNorm,
 * SwiGLU, rotary embeddings, grouped-query attention and the KV-cache
 * decode step. Straightforward kernels, written to be checked against the
 * CPU backend (tests/test_cuda_ops.c) before they are made fast:
 *  - RMSNorm: one block per row, the sum of squares in double through a
 *    fixed shuffle tree; the weight gradient as fixed row-chunk partial sums
 *    added in chunk order (as LayerNorm's), so no atomics anywhere.
 *  - SwiGLU and RoPE: elementwise; RoPE's angles in double as the contract
 *    says.
 *  - GQA attention: the key/value heads are repeated for their query heads
 *    into a (B,T,3 NH HS) copy that the MHA kernels (cuda_attention.cu) run
 *    on; the backward sums the copy's dk/dv over each group in head order.
 *    With NKV = NH the layouts coincide and the MHA kernels run in place.
 *    The copy lives in a buffer of this file, not the context's scratch,
 *    which the MHA kernels use themselves; it grows on demand and the op
 *    table's scratch_bytes counts it.
 *  - Decode: one block per (b, query head), one warp per strided subset of
 *    positions with an online softmax, the warps merged in a fixed order. */
#include "cuda_common.cuh"

#define RMS_THREADS 256
#define RMS_CHUNK 128 /* rows per partial in the weight-gradient pass */
#define RMS_COLS 128  /* columns per block in that pass */
#define DEC_WARPS 4
#define DEC_MAX_HS 256

__device__ __forceinline__ float llama_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ double llama_warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Sum over the block (blockDim.x = RMS_THREADS), returned to every thread:
 * warp trees, then warp 0 adds the warp sums in order. sh holds
 * RMS_THREADS / 32 values. */
template <typename F> __device__ F llama_block_sum(F v, F *sh) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads(); /* sh may still be read from a previous call */
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  F s = 0;
  for (int w = 0; w < RMS_THREADS / 32; w++)
    s += sh[w];
  return s;
}

/* ------------------------------------------------------------------ RMSNorm */

// out(N,C), rstd(N) from inp(N,C), weight(C)
__global__ void rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *weight, int C,
                                       float eps) {
  __shared__ double sh[RMS_THREADS / 32];
  size_t n = blockIdx.x;
  const float *x = inp + n * C;
  double ss = 0.0;
  for (int c = threadIdx.x; c < C; c += RMS_THREADS)
    ss += (double)x[c] * x[c];
  ss = llama_block_sum(ss, sh);
  float s = (float)(1.0 / sqrt(ss / C + (double)eps));
  float *o = out + n * C;
  for (int c = threadIdx.x; c < C; c += RMS_THREADS)
    o[c] = x[c] * s * weight[c];
  if (threadIdx.x == 0) rstd[n] = s;
}

// dinp(N,C) += rstd dout weight - inp rstd^3 mean_c(dout weight inp)
__global__ void rmsnorm_backward_dx_kernel(float *dinp, const float *dout, const float *inp,
                                           const float *weight, const float *rstd, int C) {
  __shared__ float sh[RMS_THREADS / 32];
  size_t n = blockIdx.x;
  const float *x = inp + n * C, *d = dout + n * C;
  float gx = 0.0f;
  for (int c = threadIdx.x; c < C; c += RMS_THREADS)
    gx += d[c] * weight[c] * x[c];
  gx = llama_block_sum(gx, sh);
  float s = rstd[n], k = s * s * s * gx / C;
  float *dx = dinp + n * C;
  for (int c = threadIdx.x; c < C; c += RMS_THREADS)
    dx[c] += s * d[c] * weight[c] - x[c] * k;
}

// part(nchunks, C): per row-chunk sums of dout * inp * rstd
__global__ void rmsnorm_backward_partial_kernel(float *part, const float *dout, const float *inp,
                                                const float *rstd, int N, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  int r0 = blockIdx.y * RMS_CHUNK, r1 = min(r0 + RMS_CHUNK, N);
  float dw = 0.0f;
  for (int n = r0; n < r1; n++)
    dw += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
  part[(size_t)blockIdx.y * C + c] = dw;
}

// dweight(C) += chunk sums in chunk order
__global__ void rmsnorm_backward_final_kernel(float *dweight, const float *part, int nchunks, int C) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f;
  for (int k = 0; k < nchunks; k++)
    dw += part[(size_t)k * C + c];
  dweight[c] += dw;
}

int aa__cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                             float eps) {
  AA_CUDA_CTX(ctx);
  if (N <= 0 || C <= 0) return 0;
  rmsnorm_forward_kernel<<<(unsigned)N, RMS_THREADS, 0, ctx->stream>>>(out, rstd, inp, weight, C, eps);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                              const float *weight, const float *rstd, int N, int C) {
  AA_CUDA_CTX(ctx);
  if (N <= 0 || C <= 0) return 0;
  rmsnorm_backward_dx_kernel<<<(unsigned)N, RMS_THREADS, 0, ctx->stream>>>(dinp, dout, inp, weight, rstd, C);
  AA_CUDA_LAUNCHED();
  if (!dweight) return 0; /* a frozen weight (LoRA's base): no gradient */
  int nchunks = (N + RMS_CHUNK - 1) / RMS_CHUNK, rc;
  float *part;
  if ((rc = aa__cuda_scratch(ctx, (size_t)nchunks * C * sizeof(float), (void **)&part))) return rc;
  dim3 grid(aa__cuda_blocks(C, RMS_COLS), (unsigned)nchunks);
  rmsnorm_backward_partial_kernel<<<grid, RMS_COLS, 0, ctx->stream>>>(part, dout, inp, rstd, N, C);
  AA_CUDA_LAUNCHED();
  rmsnorm_backward_final_kernel<<<aa__cuda_blocks(C, RMS_COLS), RMS_COLS, 0, ctx->stream>>>(dweight, part,
                                                                                            nchunks, C);
  AA_CUDA_LAUNCHED();
  return 0;
}

/* ------------------------------------------------------------------- SwiGLU */

// out(N,F) = silu(gate) * up, inp(N,2F) = [gate | up]
__global__ void swiglu_forward_kernel(float *out, const float *inp, size_t n, int F) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / F, col = i % F;
    float g = inp[row * 2 * F + col], u = inp[row * 2 * F + F + col];
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

// dinp(N,2F) += [dout up sig (1 + gate (1 - sig)) | dout silu(gate)]
__global__ void swiglu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n, int F) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / F, col = i % F, gi = row * 2 * F + col;
    float g = inp[gi], u = inp[gi + F], d = dout[i];
    float sig = 1.0f / (1.0f + expf(-g));
    dinp[gi] += d * u * sig * (1.0f + g * (1.0f - sig));
    dinp[gi + F] += d * g * sig;
  }
}

int aa__cuda_swiglu_forward(float *out, const float *inp, int N, int F) {
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)N * F;
  if (n == 0) return 0;
  swiglu_forward_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(out, inp, n, F);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)N * F;
  if (n == 0) return 0;
  swiglu_backward_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(dinp, inp, dout, n, F);
  AA_CUDA_LAUNCHED();
  return 0;
}

/* --------------------------------------------------------------------- RoPE */

// qkv(B,T,(NH + 2 NKV) HS): the NH + NKV q and k heads of each position rotated by sign * angle
__global__ void rope_kernel(float *qkv, int T, int nheads, int W, int HS, int pos0, float theta, float sign,
                            size_t n) {
  int half = HS / 2;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
    int i = (int)(e % half);
    size_t rest = e / half;
    int h = (int)(rest % nheads);
    size_t bt = rest / nheads;
    int t = (int)(bt % T);
    double a = (double)(pos0 + t) * pow((double)theta, -2.0 * i / HS), sd, cd;
    sincos(a, &sd, &cd);
    float c = (float)cd, s = sign * (float)sd;
    float *x = qkv + bt * W + (size_t)h * HS;
    float x0 = x[i], y0 = x[i + half];
    x[i] = x0 * c - y0 * s;
    x[i + half] = y0 * c + x0 * s;
  }
}

static int rope_apply(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta, float sign) {
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)B * T * (NH + NKV) * (HS / 2);
  if (n == 0) return 0;
  rope_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(qkv, T, NH + NKV, (NH + 2 * NKV) * HS, HS, pos0,
                                                              theta, sign, n);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_rope_forward(float *qkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  return rope_apply(qkv, B, T, NH, NKV, HS, pos0, theta, 1.0f);
}

int aa__cuda_rope_backward(float *dqkv, int B, int T, int NH, int NKV, int HS, int pos0, float theta) {
  return rope_apply(dqkv, B, T, NH, NKV, HS, pos0, theta, -1.0f);
}

/* ------------------------------------------------------ grouped-query attention */

/* The expanded copies of the GQA ops: grown on demand, freed when growing
 * (cudaFree waits for the device, so no enqueued op still reads it). */
static float *g_gqa;
static size_t g_gqa_bytes;

size_t aa__cuda_llama_scratch_bytes(void) { return g_gqa_bytes; }

void aa__cuda_llama_release(void) {
  cudaFree(g_gqa);
  g_gqa = NULL;
  g_gqa_bytes = 0;
}

static int gqa_scratch(size_t bytes, float **out) {
  if (bytes > g_gqa_bytes) {
    AA_CUDA_TRY(cudaFree(g_gqa));
    g_gqa = NULL;
    g_gqa_bytes = 0;
    AA_CUDA_TRY(cudaMalloc((void **)&g_gqa, bytes));
    g_gqa_bytes = bytes;
  }
  *out = g_gqa;
  return 0;
}

// x(B*T, 3 NH HS) = [q | k, v of kv head h / group for each query head h] from qkv(B*T, (NH + 2 NKV) HS)
__global__ void gqa_expand_kernel(float *x, const float *qkv, int NH, int NKV, int HS, size_t n) {
  size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
  int group = NH / NKV;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
    size_t bt = e / (3 * C), col = e % (3 * C), part = col / C;
    int h = (int)(col % C / HS), i = (int)(col % HS);
    size_t src = part == 0 ? col : (NH + (part - 1) * NKV + h / group) * (size_t)HS + i;
    x[e] = qkv[bt * W + src];
  }
}

// dqkv(B*T, (NH + 2 NKV) HS) += dx(B*T, 3 NH HS) with each kv head's columns summed over its group in head
// order
__global__ void gqa_reduce_kernel(float *dqkv, const float *dx, int NH, int NKV, int HS, size_t n) {
  size_t C = (size_t)NH * HS, W = (size_t)(NH + 2 * NKV) * HS;
  int group = NH / NKV;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
    size_t bt = e / W, col = e % W;
    const float *d = dx + bt * 3 * C;
    if (col < C) {
      dqkv[e] += d[col];
      continue;
    }
    size_t kcol = col - C, part = 1 + kcol / ((size_t)NKV * HS);
    int g = (int)(kcol % ((size_t)NKV * HS) / HS), i = (int)(kcol % HS);
    float s = 0.0f;
    for (int h = g * group; h < (g + 1) * group; h++)
      s += d[part * C + (size_t)h * HS + i];
    dqkv[e] += s;
  }
}

int aa__cuda_attention_gqa_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV,
                                   int HS) {
  if (NKV == NH) return aa__cuda_attention_forward(out, lse, qkv, B, T, NH * HS, NH);
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)B * T * 3 * NH * HS;
  if (n == 0) return 0;
  float *x = nullptr; /* set by gqa_scratch; gcc -O3 cannot see it */
  int rc;
  if ((rc = gqa_scratch(n * sizeof(float), &x))) return rc;
  gqa_expand_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(x, qkv, NH, NKV, HS, n);
  AA_CUDA_LAUNCHED();
  return aa__cuda_attention_forward(out, lse, x, B, T, NH * HS, NH);
}

int aa__cuda_attention_gqa_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, int B,
                                    int T, int NH, int NKV, int HS) {
  if (NKV == NH) return aa__cuda_attention_backward(dqkv, dout, qkv, lse, B, T, NH * HS, NH);
  AA_CUDA_CTX(ctx);
  size_t n = (size_t)B * T * 3 * NH * HS, nq = (size_t)B * T * (NH + 2 * NKV) * HS;
  if (n == 0) return 0;
  float *x = nullptr; /* set by gqa_scratch; gcc -O3 cannot see it */
  int rc;
  if ((rc = gqa_scratch(2 * n * sizeof(float), &x))) return rc;
  float *dx = x + n;
  gqa_expand_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(x, qkv, NH, NKV, HS, n);
  AA_CUDA_LAUNCHED();
  AA_CUDA_TRY(cudaMemsetAsync(dx, 0, n * sizeof(float), ctx->stream));
  if ((rc = aa__cuda_attention_backward(dx, dout, x, lse, B, T, NH * HS, NH))) return rc;
  gqa_reduce_kernel<<<aa__cuda_grid(nq, 256), 256, 0, ctx->stream>>>(dqkv, dx, NH, NKV, HS, nq);
  AA_CUDA_LAUNCHED();
  return 0;
}

/* ------------------------------------------------------------------- decode */

// kcache, vcache(B,Tmax,NKV HS) row pos = the k, v of qkv(B,(NH + 2 NKV) HS)
__global__ void decode_store_kernel(float *kcache, float *vcache, const float *qkv, int Tmax, int pos, int NH,
                                    int NKV, int HS, size_t n) {
  size_t KV = (size_t)NKV * HS, W = (size_t)(NH + 2 * NKV) * HS;
  for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
    size_t b = e / KV, i = e % KV, dst = (b * Tmax + pos) * KV + i;
    const float *k = qkv + b * W + (size_t)NH * HS;
    kcache[dst] = k[i];
    vcache[dst] = k[KV + i];
  }
}

// out(B,NH HS): block (h, b); warp w takes positions w, w + DEC_WARPS, ... with an online softmax
__global__ void decode_attention_kernel(float *out, const float *kcache, const float *vcache,
                                        const float *qkv, int Tmax, int pos, int NH, int NKV, int HS,
                                        float scale) {
  __shared__ float sm[DEC_WARPS], sl[DEC_WARPS], sacc[DEC_WARPS][DEC_MAX_HS];
  int h = blockIdx.x, b = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  size_t KV = (size_t)NKV * HS, W = (size_t)(NH + 2 * NKV) * HS;
  int g = h / (NH / NKV);
  const float *q = qkv + b * W + (size_t)h * HS;
  const float *kc = kcache + (size_t)b * Tmax * KV + (size_t)g * HS;
  const float *vc = vcache + (size_t)b * Tmax * KV + (size_t)g * HS;
  float acc[DEC_MAX_HS / 32];
#pragma unroll
  for (int j = 0; j < DEC_MAX_HS / 32; j++)
    acc[j] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int u = warp; u <= pos; u += DEC_WARPS) {
    const float *ku = kc + (size_t)u * KV, *vu = vc + (size_t)u * KV;
    float d = 0.0f;
    for (int i = lane; i < HS; i += 32)
      d += q[i] * ku[i];
    d = llama_warp_sum(d) * scale;
    float mn = fmaxf(m, d), corr = expf(m - mn), p = expf(d - mn);
    l = l * corr + p;
#pragma unroll
    for (int j = 0; j < DEC_MAX_HS / 32; j++) {
      int i = lane + 32 * j;
      if (i < HS) acc[j] = acc[j] * corr + p * vu[i];
    }
    m = mn;
  }
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < DEC_MAX_HS / 32; j++) {
    int i = lane + 32 * j;
    if (i < HS) sacc[warp][i] = acc[j];
  }
  __syncthreads();
  /* Warp 0 always holds position 0, so M is finite; a warp with no position
   * has m = -inf and weighs exp(-inf) = 0. */
  float M = sm[0];
  for (int w = 1; w < DEC_WARPS; w++)
    M = fmaxf(M, sm[w]);
  float L = 0.0f;
  for (int w = 0; w < DEC_WARPS; w++)
    L += sl[w] * expf(sm[w] - M);
  for (int i = threadIdx.x; i < HS; i += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < DEC_WARPS; w++)
      o += sacc[w][i] * expf(sm[w] - M);
    out[(size_t)b * NH * HS + (size_t)h * HS + i] = o / L;
  }
}

int aa__cuda_attention_decode(float *out, float *kcache, float *vcache, const float *qkv, int B, int Tmax,
                              int pos, int NH, int NKV, int HS) {
  AA_CUDA_CTX(ctx);
  if (B <= 0 || NH <= 0) return 0;
  if (HS > DEC_MAX_HS)
    return aa__cuda_fail(AA_EUNSUPPORTED, __FILE__, __LINE__,
                         "attention_decode: head size %d is larger than the CUDA kernel's limit of %d", HS,
                         DEC_MAX_HS);
  size_t n = (size_t)B * NKV * HS;
  decode_store_kernel<<<aa__cuda_grid(n, 256), 256, 0, ctx->stream>>>(kcache, vcache, qkv, Tmax, pos, NH, NKV,
                                                                      HS, n);
  AA_CUDA_LAUNCHED();
  dim3 grid((unsigned)NH, (unsigned)B);
  decode_attention_kernel<<<grid, DEC_WARPS * 32, 0, ctx->stream>>>(out, kcache, vcache, qkv, Tmax, pos, NH,
                                                                    NKV, HS, 1.0f / sqrtf((float)HS));
  AA_CUDA_LAUNCHED();
  return 0;
}
