// From random bits to values: the transforms every backend shares.
//
// Only operations that give identical bits on the CPU and the GPU: +, -, *, explicit fma, IEEE sqrt,
// integer ops and bit casts. No library log/erf/sin (their results differ between libm and CUDA), no
// division, no fast-math intrinsics. Callers compile with contraction off (-ffp-contract=off,
// --fmad=false), so an a*b+c written here stays two roundings on both sides.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <layerinit/core/hd.hpp>

namespace layerinit::transforms {

LAYERINIT_HD float fmaf_(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

LAYERINIT_HD float sqrtf_(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

LAYERINIT_HD std::uint32_t as_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

LAYERINIT_HD float as_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// x limited to [lo, hi] (lo <= hi, x not NaN), written as min/max selects that vectorize.
LAYERINIT_HD float clamp(float x, float lo, float hi) {
  x = hi < x ? hi : x;
  return x < lo ? lo : x;
}

// Symmetric uniform on the open interval (-1, 1): the odd multiples of 2^-24, each with
// probability 2^-24. Uses the top 24 bits; every value is exact in float.
LAYERINIT_HD float unit_open(std::uint32_t bits) {
  const auto m = static_cast<std::int32_t>(bits) >> 8;  // [-2^23, 2^23 - 1], arithmetic shift
  return fmaf_(static_cast<float>(m), 0x1p-23f, 0x1p-24f);
}

// Uniform on [0, 1): the multiples of 2^-24. Uses the top 24 bits.
LAYERINIT_HD float unit_01(std::uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }

// Natural log for positive normal floats, max error below 1 ulp. Polynomial for log1p on
// [-1/3, 1/3] after splitting off the exponent with integer ops (after N. Juffa's logf).
LAYERINIT_HD float log_pos(float a) {
  const std::int32_t ia = static_cast<std::int32_t>(as_bits(a));
  const std::int32_t e = (ia - static_cast<std::int32_t>(0x3f2aaaabu)) & static_cast<std::int32_t>(0xff800000u);
  float m = as_float(static_cast<std::uint32_t>(ia - e));  // m in [2/3, 4/3)
  const float i = static_cast<float>(e) * 0x1p-23f;
  m = m - 1.0f;
  const float s = m * m;
  float r = -0x1.0ae000p-3f;
  float t = 0x1.208000p-3f;
  r = fmaf_(r, s, -0x1.f198b2p-4f);
  t = fmaf_(t, s, 0x1.1e5740p-3f);
  r = fmaf_(r, s, -0x1.55b36cp-3f);
  t = fmaf_(t, s, 0x1.99d8b2p-3f);
  r = fmaf_(r, s, -0x1.fffe02p-3f);
  r = fmaf_(t, m, r);
  r = fmaf_(r, m, 0x1.5554fap-2f);
  r = fmaf_(r, m, -0x1.000000p-1f);
  r = fmaf_(r, s, m);
  return fmaf_(i, 0x1.62e430p-1f, r);  // + e * log(2)
}

// Inverse error function on (-1, 1) (M. Giles, "Approximating the erfinv function", GPU Computing
// Gems Jade, 2011: the single-precision version), with our own log. Relative error about 4e-7.
LAYERINIT_HD float erfinv_central(float w) {  // w = -log(1 - x^2) < 5
  w = w - 2.5f;
  float p = 2.81022636e-08f;
  p = fmaf_(p, w, 3.43273939e-07f);
  p = fmaf_(p, w, -3.5233877e-06f);
  p = fmaf_(p, w, -4.39150654e-06f);
  p = fmaf_(p, w, 0.00021858087f);
  p = fmaf_(p, w, -0.00125372503f);
  p = fmaf_(p, w, -0.00417768164f);
  p = fmaf_(p, w, 0.246640727f);
  return fmaf_(p, w, 1.50140941f);
}

LAYERINIT_HD float erfinv_tail(float w) {  // w >= 5
  w = sqrtf_(w) - 3.0f;
  float p = -0.000200214257f;
  p = fmaf_(p, w, 0.000100950558f);
  p = fmaf_(p, w, 0.00134934322f);
  p = fmaf_(p, w, -0.00367342844f);
  p = fmaf_(p, w, 0.00573950773f);
  p = fmaf_(p, w, -0.0076224613f);
  p = fmaf_(p, w, 0.00943887047f);
  p = fmaf_(p, w, 1.00167406f);
  return fmaf_(p, w, 2.83297682f);
}

LAYERINIT_HD float erfinv(float x) {
  // 1 - x^2, floored so x = +-1 (possible for trunc_normal after rounding) gives a finite value
  // instead of log(0); callers clamp the result. unit_open() inputs never reach the floor.
  float d = (1.0f - x) * (1.0f + x);
  d = d < 0x1p-46f ? 0x1p-46f : d;
  const float w = -log_pos(d);
#if defined(__CUDA_ARCH__)
  const float p = w < 5.0f ? erfinv_central(w) : erfinv_tail(w);  // the tail is rare: a branch
#else
  // Both sides, then a select: the same value as the branch, and host loops vectorize.
  const float central = erfinv_central(w);
  const float tail = erfinv_tail(w);
  const float p = w < 5.0f ? central : tail;
#endif
  return p * x;
}

}  // namespace layerinit::transforms
