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

// Uniform on [0, 1): the multiples of 2^-24. Uses the top 24 bits.
LAYERINIT_HD float unit_01(std::uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }

}  // namespace layerinit::transforms
