/* Fused softmax cross-entropy over the vocabulary: one block per row. Block
 * reductions are fixed trees (warp shuffles, then one warp over the warp
 * results), so results are deterministic. As on the CPU the normaliser is
 * summed in double and the loss is log(sum) - (logit[target] - max).
 *
 * The vocab-parallel ops (ops.h) are the same computation cut at the
 * gather: xent_vocab_partial is the max and sum passes over a rank's valid
 * columns, one block per row; xent_vocab_forward combines the gathered
 * parts (R of them, a handful, read by every thread of the row's block) and
 * writes the probabilities; xent_vocab_backward is crossentropy_backward
 * with the one-hot moved by lo. The arithmetic mirrors the CPU's
 * (cpu_crossentropy.c). */
#include "cuda_common.cuh"

#include <math.h>

#define CE_THREADS 512

/* Block-wide reductions over CE_THREADS threads; every thread gets the
 * result. `sh` holds one slot per warp. */
__device__ float block_max(float v, float *sh) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < CE_THREADS / 32 ? sh[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  return v;
}

__device__ double block_sum(double v, double *sh) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < CE_THREADS / 32 ? sh[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  return v;
}

// losses(N), probs(N,V) from logits(N,V), targets(N); probs may alias logits
__global__ void crossentropy_forward_kernel(float *losses, float *probs, const float *logits,
                                            const int32_t *targets, int V) {
  __shared__ float shf[CE_THREADS / 32];
  __shared__ double shd[CE_THREADS / 32];
  size_t n = blockIdx.x;
  const float *x = logits + n * V;
  float *p = probs + n * V;
  /* Read before any thread overwrites the row (the reductions below hold
   * __syncthreads). */
  float target_logit = x[targets[n]];
  float maxv = -INFINITY;
  for (int i = threadIdx.x; i < V; i += CE_THREADS)
    maxv = fmaxf(maxv, x[i]);
  maxv = block_max(maxv, shf);
  double sum = 0.0;
  for (int i = threadIdx.x; i < V; i += CE_THREADS) {
    float e = expf(x[i] - maxv);
    p[i] = e;
    sum += e;
  }
  sum = block_sum(sum, shd);
  float inv = (float)(1.0 / sum);
  for (int i = threadIdx.x; i < V; i += CE_THREADS)
    p[i] *= inv;
  if (threadIdx.x == 0) losses[n] = (float)(log(sum) - ((double)target_logit - maxv));
}

// part(N,3) = (max, sum of exp(x - max), target logit or 0) over the valid
// columns of logits(N,V); (-INFINITY, 0, 0) when valid is 0
__global__ void xent_vocab_partial_kernel(float *part, const float *logits, const int32_t *targets, int lo,
                                          int valid, int V) {
  __shared__ float shf[CE_THREADS / 32];
  __shared__ double shd[CE_THREADS / 32];
  size_t n = blockIdx.x;
  const float *x = logits + n * V;
  float maxv = -INFINITY;
  for (int i = threadIdx.x; i < valid; i += CE_THREADS)
    maxv = fmaxf(maxv, x[i]);
  maxv = block_max(maxv, shf);
  double sum = 0.0;
  for (int i = threadIdx.x; i < valid; i += CE_THREADS)
    sum += expf(x[i] - maxv);
  sum = block_sum(sum, shd);
  if (threadIdx.x == 0) {
    int t = targets[n] - lo;
    part[n * 3] = maxv;
    part[n * 3 + 1] = (float)sum;
    part[n * 3 + 2] = t >= 0 && t < valid ? x[t] : 0.0f;
  }
}

// losses(N), probs(N,V) from this rank's logits(N,V) and parts(R,N,3); every
// thread combines the parts itself (R is small), so the block needs no
// reduction; probs may alias logits (each thread reads then writes its own
// elements)
__global__ void xent_vocab_forward_kernel(float *losses, float *probs, const float *logits,
                                          const float *parts, int R, int N, int valid, int V) {
  size_t n = blockIdx.x;
  float maxv = -INFINITY;
  for (int r = 0; r < R; r++)
    maxv = fmaxf(maxv, parts[((size_t)r * N + n) * 3]);
  double sum = 0.0, target_logit = 0.0;
  for (int r = 0; r < R; r++) {
    const float *pt = parts + ((size_t)r * N + n) * 3;
    sum += pt[1] * exp((double)pt[0] - maxv);
    target_logit += pt[2];
  }
  const float *x = logits + n * V;
  float *p = probs + n * V;
  float inv = (float)(1.0 / sum);
  for (int i = threadIdx.x; i < V; i += CE_THREADS)
    p[i] = i < valid ? expf(x[i] - maxv) * inv : 0.0f;
  if (threadIdx.x == 0) losses[n] = (float)(log(sum) - (target_logit - maxv));
}

// dlogits(N,V) (+)= dloss * (probs - onehot(target - lo)), the one-hot only
// for targets in [lo, lo + valid); overwrite when aliased
__global__ void xent_vocab_backward_kernel(float *dlogits, const float *probs, const int32_t *targets, int lo,
                                           int valid, float dloss, int V, size_t n, int overwrite) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    size_t row = i / V;
    int col = (int)(i % V);
    int t = targets[row] - lo;
    float g = dloss * (probs[i] - (t >= 0 && t < valid && col == t ? 1.0f : 0.0f));
    dlogits[i] = overwrite ? g : dlogits[i] + g;
  }
}

int aa__cuda_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N,
                                  int V) {
  AA_CUDA_CTX(c);
  if (N <= 0) return 0;
  crossentropy_forward_kernel<<<N, CE_THREADS, 0, c->stream>>>(losses, probs, logits, targets, V);
  AA_CUDA_LAUNCHED();
  return 0;
}

// the vocab-parallel backward over the whole vocabulary
int aa__cuda_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,
                                   int V) {
  return aa__cuda_xent_vocab_backward(dlogits, probs, targets, 0, V, dloss, N, V);
}

int aa__cuda_xent_vocab_partial(float *part, const float *logits, const int32_t *targets, int lo, int valid,
                                int N, int V) {
  AA_CUDA_CTX(c);
  if (N <= 0) return 0;
  xent_vocab_partial_kernel<<<N, CE_THREADS, 0, c->stream>>>(part, logits, targets, lo, valid, V);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_xent_vocab_forward(float *losses, float *probs, const float *logits, const float *parts, int R,
                                int valid, int N, int V) {
  AA_CUDA_CTX(c);
  if (N <= 0) return 0;
  xent_vocab_forward_kernel<<<N, CE_THREADS, 0, c->stream>>>(losses, probs, logits, parts, R, N, valid, V);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_xent_vocab_backward(float *dlogits, const float *probs, const int32_t *targets, int lo,
                                 int valid, float dloss, int N, int V) {
  AA_CUDA_CTX(c);
  size_t n = (size_t)N * V;
  if (!n) return 0;
  xent_vocab_backward_kernel<<<aa__cuda_grid(n, 256), 256, 0, c->stream>>>(dlogits, probs, targets, lo, valid,
                                                                           dloss, V, n, dlogits == probs);
  AA_CUDA_LAUNCHED();
  return 0;
}
