/* Mixed-precision storage casts fp32 <-> bf16/fp16 on the GPU. The scalar
 * conversions are common/half.h's own functions compiled for the device, the
 * same integer arithmetic, so results are bit-identical to the CPU backend
 * (including NaN payloads, which the CUDA intrinsics __float2half_rn and
 * __float2bfloat16 would canonicalise). AA_F32 is the identity copy, as on
 * the CPU. */
#include "cuda_common.cuh"
#include "common/half.h"

#define CV_THREADS 256

// dst(n) = round(src) as bf16 (is_f16 = 0) or fp16 bits
__global__ void cast_from_f32_kernel(uint16_t *dst, const float *src, size_t n, int is_f16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = is_f16 ? aa_f32_to_f16(src[i]) : aa_f32_to_bf16(src[i]);
}

// dst(n) = widen(src)
__global__ void cast_to_f32_kernel(float *dst, const uint16_t *src, size_t n, int is_f16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = is_f16 ? aa_f16_to_f32(src[i]) : aa_bf16_to_f32(src[i]);
}

// x(n) = widen(round(x)); dst(n) = the rounded bits when non-NULL
__global__ void round_store_kernel(uint16_t *dst, float *x, size_t n, int is_f16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint16_t h = is_f16 ? aa_f32_to_f16(x[i]) : aa_f32_to_bf16(x[i]);
    if (dst) dst[i] = h;
    x[i] = is_f16 ? aa_f16_to_f32(h) : aa_bf16_to_f32(h);
  }
}

int aa__cuda_cast_from_f32(void *dst, aa_dtype_t dtype, const float *src, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  if (dtype == AA_F32) {
    AA_CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    return 0;
  }
  cast_from_f32_kernel<<<aa__cuda_grid(n, CV_THREADS), CV_THREADS, 0, c->stream>>>((uint16_t *)dst, src, n,
                                                                                    dtype == AA_F16);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_cast_to_f32(float *dst, const void *src, aa_dtype_t dtype, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  if (dtype == AA_F32) {
    AA_CUDA_TRY(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    return 0;
  }
  cast_to_f32_kernel<<<aa__cuda_grid(n, CV_THREADS), CV_THREADS, 0, c->stream>>>(dst, (const uint16_t *)src, n,
                                                                                  dtype == AA_F16);
  AA_CUDA_LAUNCHED();
  return 0;
}

int aa__cuda_round_store(void *dst, float *x, aa_dtype_t dtype, size_t n) {
  AA_CUDA_CTX(c);
  if (!n) return 0;
  if (dtype == AA_F32) {
    if (dst) AA_CUDA_TRY(cudaMemcpyAsync(dst, x, n * sizeof(float), cudaMemcpyDeviceToDevice, c->stream));
    return 0;
  }
  round_store_kernel<<<aa__cuda_grid(n, CV_THREADS), CV_THREADS, 0, c->stream>>>((uint16_t *)dst, x, n,
                                                                                  dtype == AA_F16);
  AA_CUDA_LAUNCHED();
  return 0;
}
