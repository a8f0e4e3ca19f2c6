// The standard normal quantile Phi^-1 from random bits, by table: bitwise the same on the host and
// the GPU (only integer ops, selects, bit casts and explicit fma; no libm, no division; callers
// compile with -ffp-contract=off / --fmad=false). The tables are passed as pointers so the device
// can copy them into shared memory and pass that copy.
//
// normal_node16(H, k), for 16 random bits k: Phi^-1((k + 0.5) / 65536) correctly rounded to fp32,
// from a table of the upper half (32768 floats, 128 KB); node16(65535 - k) == -node16(k).
// |z| <= 4.33 (H[32767]).
//
// normal_quantile64(C, p), for a 64-bit fixed-point probability p in [1, 2^64 - 1]: about
// Phi^-1(p / 2^64) in fp32, exactly antisymmetric (q(2^64 - p) == -q(p) bitwise, q(2^63) == +0).
// - Fold: q = min(p, 2^64 - p) in [1, 2^63] gives |z|; the sign is p < 2^63.
// - Two regions, each cut by octave (the position of the leading one bit) of a 64-bit x, then by
//   the next 4 bits: the tail, x = q < 2^62 (u = q / 2^64 < 1/4, |z| > 0.674); the center,
//   x = d = 2^63 - q <= 2^62 (|z| grows about linearly with d there, so octaves of d keep the
//   relative error even down to z = 1.4e-19 at d = 1). 62 octaves x 16 segments each.
// - In a segment, |z| = c0 + t (c1 + t (c2 + t c3)), three fmas, t in [0, 1) made exactly from the
//   23 bits below the segment bits (a mantissa or'ed into 1.0f, minus 1). 23 bits suffice: the
//   bits dropped below them move x by less than 2^-27 of x, and |z| by less than 1.17 * 2^-27 of
//   itself (the elasticity x |dz/dx| / |z| is below 1.17 in both regions, largest where they meet
//   at |z| = 0.674): under 0.15 ulp. Inputs from 32-bit draws (p = bits * 2^32 + 2^31) drop at most
//   4 bits, and only where x >= 2^59.
// - One 16-byte row per evaluation (one LDS.128 on the GPU); the table is 2017 rows, 32,272 bytes:
//     row 0            p = 2^63 (x = 0): zeros, so z = +0 with no special case; rows 1..31 unused
//     rows 32..1023    center, 32 + 16 e + s for octave e of d (0..61), segment s
//     row 1024         q = 2^62 exactly (d = 2^62): |Phi^-1(1/4)|
//     rows 1025..2016  tail, 1025 + 16 e + s for octave e of q (0..61), segment s
//   In both regions row = base - 16 clz64(x) + (the top 5 bits of x << clz64(x)): one multiply-add.
// - Coefficients (kernels/tables/gen_quantile_tables.py, mpmath at 160 bits): c0 is |z| at the
//   segment's start correctly rounded; c1..c3 fit the relative error by least squares under the
//   constraint that the cubic hits |z| at the segment's end, rounded to fp32 one at a time and the
//   rest refitted. The end constraint keeps every segment boundary monotone (the generator checks
//   each in exact fp32 emulation).
//
// normal_quantile_centered(C, c) == normal_quantile64(C, c + 2^63), the form fp32 trunc_normal runs:
// its fold takes c's high word alone, and on the GPU one I2F.F64.U64.RZ (x's double, exponent and
// truncated mantissa) replaces clz64 and the shift; it reads one padding row past the table.
//
// normal_quantile32(C, bits) == normal_quantile64(C, bits * 2^32 + 2^31) for every 32-bit draw,
// with 32-bit integer ops only: the hot path of an fp32 normal fill. |z| <= 6.338 there.
//
// Measured (long-double reference of tests/test_quantile.cpp; 2 x 10^7 positions each of 32-bit
// draws, uniform 64-bit p and log-uniform x): max 1.05 ulp, mean 0.26 ulp (ulp: the fp32 spacing
// at the exact |z|). The bound is 0.5 (c0's rounding, which the cubic cannot undo near t = 0) +
// 0.5 (the last fma) + 0.15 (dropped bits) + 0.01 (fit) = 1.16. Monotone non-decreasing in p,
// checked exhaustively: the function depends on p only through (row, t), and all 9.7 x 10^9 of
// them in p order step back 0 times; all 2^32 draws give normal_quantile32 == normal_quantile64.
// On sm_90 (nvcc 13.0, --fmad=false) normal_quantile32 is 21 instructions from the draw to the
// signed float (one FLO, one LDS.128, three FFMA, one FADD, the rest integer); normal_node16 is 6
// plus the table address.
#pragma once

#include <bit>
#include <cstdint>

#include <layerinit/core/hd.hpp>
#include <layerinit/kernels/transforms.hpp>

namespace layerinit::quantile {

struct alignas(16) CubicRow {
  float c0, c1, c2, c3;
};

inline constexpr int kSegmentBits = 4;
inline constexpr int kOctaves = 62;
inline constexpr int kCenterRow0 = 32;
inline constexpr int kCenterPointRow = kCenterRow0 + (kOctaves << kSegmentBits);  // 1024
inline constexpr int kTailRow0 = kCenterPointRow + 1;                              // 1025
inline constexpr int kCubicRows = kTailRow0 + (kOctaves << kSegmentBits);          // 2017
inline constexpr int kNode16Entries = 32768;

extern const float normal_node16_table[kNode16Entries];
extern const CubicRow normal_cubic_table[kCubicRows];

LAYERINIT_HD int clz32(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __clz(static_cast<int>(x));
#else
  return std::countl_zero(x);
#endif
}

LAYERINIT_HD int clz64(std::uint64_t x) {  // 64 for x = 0, as on the device
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#else
  return std::countl_zero(x);
#endif
}

// Phi^-1((k + 0.5) / 65536) for the low 16 bits of k (the bits above are ignored).
LAYERINIT_HD float normal_node16(const float* H, std::uint32_t k) {
  // Upper half (bit 15 set): H[k - 32768]; lower half: -H[32767 - k], and 32767 - k is k's 15 index
  // bits flipped. One mask from bit 15 serves both: on the GPU a shift pair and two LOP3s.
  const std::uint32_t upper = static_cast<std::uint32_t>(static_cast<std::int32_t>(k << 16) >> 31);  // all ones: z > 0
  const std::uint32_t index = (k ^ ~upper) & 0x7fffu;
  return transforms::as_float(transforms::as_bits(H[index]) ^ (~upper & 0x80000000u));
}

LAYERINIT_HD float cubic(const CubicRow& c, float t) {
  return transforms::fmaf_(transforms::fmaf_(transforms::fmaf_(c.c3, t, c.c2), t, c.c1), t, c.c0);
}

// t = the 23 bits below the segment bits, over 2^23: exact, by or'ing them into the mantissa of 1.0f.
LAYERINIT_HD float local_t(std::uint32_t bits23) { return transforms::as_float(0x3f800000u | bits23) - 1.0f; }

// Phi^-1(p / 2^64) for p in [1, 2^64 - 1]. p = 0 is outside the domain: it reads a valid row and
// returns a finite value that means nothing.
LAYERINIT_HD float normal_quantile64(const CubicRow* C, std::uint64_t p) {
  const bool upper = p >= (std::uint64_t{1} << 63);  // z >= 0
  const std::uint64_t q = upper ? std::uint64_t{0} - p : p;
  const bool center = q >= (std::uint64_t{1} << 62);
  const std::uint64_t x = center ? (std::uint64_t{1} << 63) - q : q;  // 0 only for p = 2^63
  const int lz = clz64(x);                                             // 1..64
  const std::uint64_t xn = x << (lz & 63);                             // leading one at bit 63 (x = 0: 0)
  // Octave e = 63 - lz, segment s: row0 + 16 e + s = base - 16 lz + (16 + s), base = row0 + 16 * 62.
  const int row = (center ? kCenterPointRow : kCubicRows) - 16 * lz + static_cast<int>(xn >> 59);
  const float t = local_t(static_cast<std::uint32_t>(xn >> 36) & 0x7fffffu);
  const float m = cubic(C[row], t);
  return transforms::as_float(transforms::as_bits(m) ^ (upper ? 0u : 0x80000000u));
}

// The tail's row for x = 2^62, which the centered fold below reaches from c = 2^62 (normal_quantile64
// reads it as the center's row 1024 at t = 0): a copy of row 1024 appended to the table.
inline constexpr int kCubicRowsPadded = kCubicRows + 1;  // 2018

// (dh >> 16) of an x in [1, 2^63) converted to double toward zero is 16 (1086 - clz64(x)) + the 4
// segment bits: the row is base - 16 clz64(x) + 16 + segment = base - 17360 + (dh >> 16).
inline constexpr int kDoubleRowBias = 16 * 1086 - 16;

// The row and t of x in [0, 2^63) (base: kCenterPointRow or kCubicRows), from its double (toward zero)
// hi and lo words, as the GPU computes them: one I2F.F64.U64.RZ normalizes x (its exponent is the
// octave, its mantissa x's bits below the leading one, truncated). x = 0 (double 0) gives row 0.
LAYERINIT_HD int row_of_double(int base, std::uint32_t dh) {
  const int row = base - kDoubleRowBias + static_cast<int>(dh >> 16);
  return row > 0 ? row : 0;
}
LAYERINIT_HD std::uint32_t t_bits_of_double(std::uint32_t dh, std::uint32_t dl) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(dl, dh, 7) & 0x7fffffu;  // mantissa bits 47..25: the 23 below the segment bits
#else
  return ((dh << 7) | (dl >> 25)) & 0x7fffffu;
#endif
}

// normal_quantile64(C, c + 2^63) for c + 2^63 in [1, 2^64 - 1] (c: the probability minus 1/2, times
// 2^64, two's complement), on a table of kCubicRowsPadded rows. The fold is branch-free and mostly
// 32-bit: the tail (c >= 2^62 or c < -2^62) and the sign come from c's high word alone, and x = center ? |c| :
// 2^63 - |c| is one conditional negation (c or -c, with bit 63 cleared). c = 2^62 lands in the tail
// at x = 2^62, whose row kCubicRows repeats row 1024, so the value is normal_quantile64's.
LAYERINIT_HD float normal_quantile_centered(const CubicRow* C, std::uint64_t c) {
  const auto hi = static_cast<std::uint32_t>(c >> 32);
  const std::uint32_t u = hi + 0x40000000u;  // bit 31: the tail
  // n all ones: x = -c (c >= 0 in the tail, c < 0 in the center), as ~(c - 1); else x = c. Bit 63
  // cleared: the tail's x is 2^63 - |c|.
  const auto n = static_cast<std::uint32_t>(static_cast<std::int32_t>(hi ^ u) >> 31);
  const std::uint64_t nn = (static_cast<std::uint64_t>(n) << 32) | n;
  const std::uint64_t x = ((c + nn) ^ nn) & 0x7fffffffffffffffu;
  const int base = static_cast<std::int32_t>(u) < 0 ? kCubicRows : kCenterPointRow;
#if defined(__CUDA_ARCH__)
  const double d = __ull2double_rz(x);
  const auto dh = static_cast<std::uint32_t>(__double2hiint(d)), dl = static_cast<std::uint32_t>(__double2loint(d));
  const int row = row_of_double(base, dh);
  const float t = local_t(t_bits_of_double(dh, dl));
#else
  const int lz = clz64(x);
  const std::uint64_t xn = x << (lz & 63);
  const int row = base - 16 * lz + static_cast<int>(xn >> 59);
  const float t = local_t(static_cast<std::uint32_t>(xn >> 36) & 0x7fffffu);
#endif
  const float m = cubic(C[row], t);
  return transforms::as_float(transforms::as_bits(m) ^ (hi & 0x80000000u));  // c < 0: z < 0
}

// normal_quantile64(C, bits * 2^32 + 2^31), in 32-bit integer ops. Such a p folds to
// q = (2h + 1) 2^31 with h = bits or ~bits below 2^31, so x / 2^31 (q or d) fits 32 bits and is odd:
// clz64(x) = clz32(x / 2^31) + 1, and x's bits below 2^31 are zero.
LAYERINIT_HD float normal_quantile32(const CubicRow* C, std::uint32_t bits) {
  const std::uint32_t upper = static_cast<std::uint32_t>(static_cast<std::int32_t>(bits) >> 31);  // all ones: z > 0
  const std::uint32_t h2 = (bits ^ upper) << 1;                                                   // 2h
  const std::uint32_t center = static_cast<std::uint32_t>(static_cast<std::int32_t>(h2) >> 31);   // q > 2^62
  const std::uint32_t x = (h2 ^ center) | 1u;  // tail: 2h + 1 = q / 2^31; center: ~2h = 2^32 - (2h + 1) = d / 2^31
  const int lz = clz32(x);                     // 0..31
  const std::uint32_t xn = x << lz;
  const int row = (center ? kCenterPointRow - 16 : kCubicRows - 16) - 16 * lz + static_cast<int>(xn >> 27);
  const float t = local_t((xn >> 4) & 0x7fffffu);
  const float m = cubic(C[row], t);
  return transforms::as_float(transforms::as_bits(m) ^ (~upper & 0x80000000u));
}

}  // namespace layerinit::quantile
