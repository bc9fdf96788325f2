/* Optimizer kernels: AdamW and the sum of squares behind the global gradient
 * norm. */
#include "cuda_common.cuh"

#include <math.h>

/* As on the CPU: fixed slices whatever the GPU, so the result does not
 * depend on the SM count; one block per slice. */
#define SUMSQ_SLICES 256
#define SUMSQ_THREADS 256

// params, m, v (n) updated from grads (n); bias corrections precomputed on the host
__global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n, float beta1,
                             float beta2, float eps, float decay, float step_size, float bc2_sqrt) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float g = grads[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = params[i] * decay;
    params[i] = p - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

/* AdamW as torch.optim.AdamW (foreach=False); the scalars are computed in
 * double on the host exactly as the CPU backend does. */
int aa__cuda_adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int t) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  float decay = (float)(1.0 - (double)lr * weight_decay);
  float step_size = (float)(lr / (1.0 - pow(beta1, t)));
  float bc2_sqrt = (float)sqrt(1.0 - pow(beta2, t));
  adamw_kernel<<<aa__cuda_grid(n, 256), 256, 0, c->stream>>>(params, grads, m, v, n, beta1, beta2, eps, decay,
                                                              step_size, bc2_sqrt);
  AA_CUDA_LAUNCHED();
  return 0;
}

// part(SUMSQ_SLICES): sum of x^2 over each fixed slice of x(n), in double
__global__ void sumsq_partial_kernel(double *part, const float *x, size_t n) {
  __shared__ double sh[SUMSQ_THREADS];
  size_t s = blockIdx.x;
  size_t i0 = n / SUMSQ_SLICES * s + (s < n % SUMSQ_SLICES ? s : n % SUMSQ_SLICES);
  size_t i1 = i0 + n / SUMSQ_SLICES + (s < n % SUMSQ_SLICES ? 1 : 0);
  double acc = 0.0;
  for (size_t i = i0 + threadIdx.x; i < i1; i += SUMSQ_THREADS)
    acc += (double)x[i] * x[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int o = SUMSQ_THREADS / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) part[s] = sh[0];
}

// part[SUMSQ_SLICES] = sum of the slice sums in slice order
__global__ void sumsq_final_kernel(double *part) {
  double total = 0.0;
  for (int s = 0; s < SUMSQ_SLICES; s++)
    total += part[s];
  part[SUMSQ_SLICES] = total;
}

int aa__cuda_sum_squares(double *out, const float *x, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) {
    *out = 0.0;
    return 0;
  }
  sumsq_partial_kernel<<<SUMSQ_SLICES, SUMSQ_THREADS, 0, c->stream>>>(c->sumsq, x, n);
  AA_CUDA_LAUNCHED();
  sumsq_final_kernel<<<1, 1, 0, c->stream>>>(c->sumsq);
  AA_CUDA_LAUNCHED();
  AA_CUDA_TRY(cudaMemcpyAsync(c->sumsq_host, c->sumsq + SUMSQ_SLICES, sizeof(double), cudaMemcpyDeviceToHost,
                              c->stream));
  AA_CUDA_TRY(cudaStreamSynchronize(c->stream));
  *out = *c->sumsq_host;
  return 0;
}
