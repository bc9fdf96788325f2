/* Scalar conversions between fp32 and the two 16-bit formats, bfloat16 and
 * IEEE 754 binary16 (fp16). 16-bit values are carried as their uint16_t bit
 * patterns.
 *
 * Narrowing rounds to nearest, ties to even, exactly as the formats define:
 *  - NaN becomes a quiet NaN with the same sign and the top payload bits;
 *  - bf16 has fp32's exponent range, so only values that round past
 *    FLT_MAX's neighbourhood become +-inf;
 *  - fp16 overflows to +-inf from 65520 up (the midpoint between 65504 and
 *    the first power of two it cannot hold), keeps subnormals with the same
 *    round-to-nearest-even at the subnormal spacing 2^-24, and keeps -0.
 * Widening is exact; an fp16 signalling NaN comes back quiet.
 *
 * The functions are integer arithmetic and selects (no branches, no libm),
 * so loops that call them vectorise. The one floating-point operation, in
 * fp16 subnormal widening, is exact on normal numbers, so no result depends
 * on the FP rounding mode or FTZ/DAZ. */
#ifndef AA_HALF_H
#define AA_HALF_H

#include <stdint.h>
#include <string.h>

/* The same functions serve the CUDA kernels (kernels/cuda/cuda_convert.cu),
 * so the GPU rounds bit for bit as the CPU does. */
#ifdef __CUDACC__
#define AA_HALF_FN static inline __host__ __device__
#else
#define AA_HALF_FN static inline
#endif

AA_HALF_FN uint32_t aa__f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

AA_HALF_FN float aa__f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* bf16 is the top half of an fp32: add 0x7fff plus the lowest kept bit,
 * so exact halves round towards an even result, and truncate. A carry out
 * of the mantissa bumps the exponent, which is the right answer, up to
 * +-inf. */
AA_HALF_FN uint16_t aa_f32_to_bf16(float f) {
  uint32_t u = aa__f32_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t qnan = (u >> 16) | 0x0040u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? qnan : rounded);
}

AA_HALF_FN float aa_bf16_to_f32(uint16_t h) { return aa__f32_from_bits((uint32_t)h << 16); }

/* fp32 -> fp16 on the magnitude a, sign put back at the end:
 *  - a >= 2^-14 (fp16 normal range): rebias the exponent (127 -> 15) and
 *    round the 13 dropped mantissa bits like aa_f32_to_bf16; a carry into
 *    exponent 31 yields exactly 0x7c00 (inf) for 65520 <= a < 65536;
 *  - a < 2^-14: the result counts units of 2^-24. The 24-bit significand
 *    shifted right by 126 - e is that count; the shifted-out bits decide the
 *    rounding (ties to even). A count of 0x400 is the smallest normal, whose
 *    bit pattern is indeed 0x0400. The shift is capped at 31 (C forbids
 *    more; everything that small rounds to 0 anyway) and floored at 14 so
 *    that it is defined for the inputs whose result is not used;
 *  - a >= 2^16 (and inf): inf; NaN: quiet NaN with the top payload bits. */
AA_HALF_FN uint16_t aa_f32_to_f16(float f) {
  uint32_t u = aa__f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;

  uint32_t normal = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;

  uint32_t e = a >> 23;
  uint32_t sig = (a & 0x007fffffu) | 0x00800000u;
  uint32_t ec = e < 95u ? 95u : e; /* clamped so that the shift stays in 14..31 for every input */
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

/* fp16 -> fp32: normal numbers rebias the exponent (15 -> 127); subnormals
 * are their 10-bit count times 2^-24, which fp32 holds exactly (the int to
 * float conversion and the power-of-two product are both exact); exponent
 * 31 maps to fp32's inf/NaN with the quiet bit set for NaN. */
AA_HALF_FN float aa_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t em = (uint32_t)h & 0x7fffu;
  uint32_t normal = (em << 13) + 0x38000000u;
  uint32_t sub = aa__f32_bits((float)(int32_t)em * 0x1p-24f);
  uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
  uint32_t r = em < 0x0400u ? sub : normal;
  r = em >= 0x7c00u ? special : r;
  return aa__f32_from_bits(r | sign);
}

#endif
