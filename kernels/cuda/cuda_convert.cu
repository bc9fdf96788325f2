/* Mixed-precision storage casts fp32 <-> bf16/fp16 on the GPU. The scalar
 * conversions are device ports of common/half.h, the same integer
 * arithmetic, so results are bit-identical to the CPU backend (including
 * NaN payloads, which the CUDA intrinsics __float2half_rn/__float2bfloat16
 * canonicalise). AA_F32 is the identity copy, as on the CPU. */
#include "cuda_common.cuh"

#define CV_THREADS 256

__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t qnan = (u >> 16) | 0x0040u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? qnan : rounded);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* See aa_f32_to_f16 in common/half.h for the derivation. */
__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  uint32_t u = __float_as_uint(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  uint32_t e = a >> 23;
  uint32_t sig = (a & 0x007fffffu) | 0x00800000u;
  uint32_t ec = e < 95u ? 95u : e;
  ec = ec > 112u ? 112u : ec;
  uint32_t shift = 126u - ec;
  uint32_t q = sig >> shift;
  uint32_t rem = sig & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  uint32_t sub = q + ((rem > half) | ((rem == half) & q));
  uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x47800000u ? 0x7c00u : r;
  r = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x03ffu)) : r;
  return (uint16_t)(r | sign);
}

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t em = (uint32_t)h & 0x7fffu;
  uint32_t normal = (em << 13) + 0x38000000u;
  uint32_t sub = __float_as_uint(__fmul_rn((float)(int32_t)em, 0x1p-24f));
  uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
  uint32_t r = em < 0x0400u ? sub : normal;
  r = em >= 0x7c00u ? special : r;
  return __uint_as_float(r | sign);
}

// dst(n) = round(src) as bf16 (is_f16 = 0) or fp16 bits
__global__ void cast_from_f32_kernel(uint16_t *dst, const float *src, size_t n, int is_f16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = is_f16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
}

// dst(n) = widen(src)
__global__ void cast_to_f32_kernel(float *dst, const uint16_t *src, size_t n, int is_f16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = is_f16 ? f16_to_f32(src[i]) : bf16_to_f32(src[i]);
}

// x(n) = widen(round(x)); dst(n) = the rounded bits when non-NULL
__global__ void round_store_kernel(uint16_t *dst, float *x, size_t n, int is_f16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint16_t h = is_f16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
    if (dst) dst[i] = h;
    x[i] = is_f16 ? f16_to_f32(h) : bf16_to_f32(h);
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
