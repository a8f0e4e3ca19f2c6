// dtypes: names, sizes, and float <-> fp16/bf16 conversions against an independent bit-level reference
// written here (decode with ldexp; encode with round-to-nearest-even in integer arithmetic).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <layerinit/dtypes/convert.hpp>
#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/dtypes/round.hpp>

using namespace layerinit;

namespace {

// A binary16-like format: 1 sign bit, E exponent bits, M mantissa bits, bias 2^(E-1) - 1.
struct Format {
  int e_bits, m_bits;
  int bias() const { return (1 << (e_bits - 1)) - 1; }
  std::uint32_t exp_mask() const { return ((1u << e_bits) - 1) << m_bits; }
  std::uint32_t man_mask() const { return (1u << m_bits) - 1; }
  std::uint32_t sign_bit() const { return 1u << (e_bits + m_bits); }
  std::uint32_t quiet_bit() const { return 1u << (m_bits - 1); }
};
constexpr Format kHalf{5, 10};
constexpr Format kBf16{8, 7};

// Reference decode: sign, exponent, mantissa, then ldexp (exact in double, then exact in float).
double ref_decode(std::uint32_t bits, Format f) {
  const bool neg = bits & f.sign_bit();
  const std::uint32_t e = (bits & f.exp_mask()) >> f.m_bits;
  const std::uint32_t m = bits & f.man_mask();
  double v;
  if (e == (1u << f.e_bits) - 1) v = m ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else if (e == 0) v = std::ldexp(static_cast<double>(m), 1 - f.bias() - f.m_bits);
  else v = std::ldexp(static_cast<double>(m | (1u << f.m_bits)), static_cast<int>(e) - f.bias() - f.m_bits);
  return neg ? -v : v;
}

// Reference encode: round to nearest, ties to even, in integers on the float's bits. NaN -> quiet NaN
// with the same sign.
std::uint32_t ref_encode(float x, Format f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (u >> 31) ? f.sign_bit() : 0;
  const std::uint32_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
  if (e == 0xff) {
    if (m == 0) return sign | f.exp_mask();
    return sign | f.exp_mask() | f.quiet_bit() | ((m >> (23 - f.m_bits)) & f.man_mask());
  }
  // |x| = M * 2^(ex - 23) with M the 24-bit integer significand.
  const int ex = e == 0 ? -126 : static_cast<int>(e) - 127;
  const std::uint64_t M = e == 0 ? m : (m | 0x800000u);
  const int emin = 1 - f.bias();
  const int ex_c = std::max(ex, emin);
  const int q = ex_c - f.m_bits;           // exponent of the target's unit in the last place
  const int shift = q - (ex - 23);         // >= 23 - m_bits
  std::uint64_t r;
  if (shift >= 40) {
    r = 0;  // M < 2^24 <= half of 2^shift
  } else {
    r = M >> shift;
    const std::uint64_t rem = M & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
  }
  // Normal: ((ex - emin + 1) << m_bits) + (r - 2^m_bits); subnormal: r. A carry moves into the exponent.
  std::uint64_t mag = (static_cast<std::uint64_t>(ex_c - emin) << f.m_bits) + r;
  if (mag >= f.exp_mask()) mag = f.exp_mask();  // overflow to infinity
  return sign | static_cast<std::uint32_t>(mag);
}

std::uint32_t to_bits(DType t, float x) { return t == DType::f16 ? float_to_f16_bits(x) : float_to_bf16_bits(x); }
float from_bits(DType t, std::uint16_t b) { return t == DType::f16 ? f16_bits_to_float(b) : bf16_bits_to_float(b); }
Format format_of(DType t) { return t == DType::f16 ? kHalf : kBf16; }

bool is_nan_bits(std::uint32_t b, Format f) { return (b & f.exp_mask()) == f.exp_mask() && (b & f.man_mask()); }

// Compares the library's float -> 16-bit with the reference; reports the first few mismatches.
struct EncodeChecker {
  DType t;
  int mismatches = 0;
  std::uint64_t checked = 0;
  void operator()(float x) {
    ++checked;
    const Format f = format_of(t);
    const std::uint32_t got = to_bits(t, x), want = ref_encode(x, f);
    bool ok;
    if (std::isnan(x)) ok = is_nan_bits(got, f) && (got & f.quiet_bit()) && (got & f.sign_bit()) == (want & f.sign_bit());
    else ok = got == want;
    if (!ok && ++mismatches <= 8)
      ADD_FAILURE() << dtype_name(t) << ": float " << std::hexfloat << x << " (0x" << std::hex
                    << std::bit_cast<std::uint32_t>(x) << ") -> 0x" << got << ", reference 0x" << want;
  }
};

std::vector<float> all_finite_values(DType t) {  // sorted, -0 left out
  std::vector<float> v;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    if (b == 0x8000) continue;
    const float x = from_bits(t, static_cast<std::uint16_t>(b));
    if (std::isfinite(x)) v.push_back(x);
  }
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST(DTypes, NamesSizesAndParsing) {
  EXPECT_EQ(dtype_name(DType::f32), "fp32");
  EXPECT_EQ(dtype_name(DType::f16), "fp16");
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_names(), "fp32, fp16, bf16");
  for (const char* s : {"fp32", "float32", "f32"}) EXPECT_EQ(parse_dtype(s), DType::f32) << s;
  for (const char* s : {"fp16", "float16", "f16", "half"}) EXPECT_EQ(parse_dtype(s), DType::f16) << s;
  for (const char* s : {"bf16", "bfloat16"}) EXPECT_EQ(parse_dtype(s), DType::bf16) << s;
  for (DType t : all_dtypes) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  // The tag values appear in files.
  EXPECT_EQ(static_cast<int>(DType::f32), 0);
  EXPECT_EQ(static_cast<int>(DType::f16), 1);
  EXPECT_EQ(static_cast<int>(DType::bf16), 2);
}

// torch's names, as config.json's dtype/torch_dtype: exactly these three, both ways.
TEST(DTypes, TorchNames) {
  EXPECT_EQ(torch_dtype_name(DType::f32), "float32");
  EXPECT_EQ(torch_dtype_name(DType::f16), "float16");
  EXPECT_EQ(torch_dtype_name(DType::bf16), "bfloat16");
  for (DType t : all_dtypes) EXPECT_EQ(dtype_from_torch_name(torch_dtype_name(t)), t);
  for (const char* s : {"bf16", "fp32", "half", "float64", "int8", "", "Float32"})
    EXPECT_EQ(dtype_from_torch_name(s), std::nullopt) << s;
}

TEST(DTypes, UnknownNameThrowsWithValidNames) {
  for (const char* s : {"fp8", "", "FP16", "float64", "bf16 "}) {
    try {
      parse_dtype(s);
      ADD_FAILURE() << "parse_dtype('" << s << "') did not throw";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("dtype '" + std::string(s) + "' is unknown"), std::string::npos) << m;
      EXPECT_NE(m.find("fp32, fp16, bf16"), std::string::npos) << m;
    }
  }
}

TEST(DTypes, ReferenceEncoderKnownAnswers) {
  // Hand-checked values, so the reference itself is pinned.
  EXPECT_EQ(ref_encode(1.0f, kHalf), 0x3c00u);
  EXPECT_EQ(ref_encode(-2.0f, kHalf), 0xc000u);
  EXPECT_EQ(ref_encode(65504.0f, kHalf), 0x7bffu);
  EXPECT_EQ(ref_encode(65519.0f, kHalf), 0x7bffu);
  EXPECT_EQ(ref_encode(65520.0f, kHalf), 0x7c00u);  // tie at the overflow threshold goes to "even" inf
  EXPECT_EQ(ref_encode(0x1p-24f, kHalf), 0x0001u);
  EXPECT_EQ(ref_encode(0x1p-25f, kHalf), 0x0000u);   // tie to even: 0
  EXPECT_EQ(ref_encode(0x1.8p-24f, kHalf), 0x0002u); // 1.5 units: tie to even, 2
  EXPECT_EQ(ref_encode(0x1.ffcp-15f, kHalf), 0x0400u);  // 1023.5 units: ties up into the first normal
  EXPECT_EQ(ref_encode(1.0f + 0x1p-11f, kHalf), 0x3c00u);
  EXPECT_EQ(ref_encode(1.0f + 0x3p-11f, kHalf), 0x3c02u);
  EXPECT_EQ(ref_encode(1.0f, kBf16), 0x3f80u);
  EXPECT_EQ(ref_encode(1.0f + 0x1p-8f, kBf16), 0x3f80u);
  EXPECT_EQ(ref_encode(1.0f + 0x3p-8f, kBf16), 0x3f82u);
  EXPECT_EQ(ref_encode(std::numeric_limits<float>::max(), kBf16), 0x7f80u);
  EXPECT_EQ(ref_encode(std::numeric_limits<float>::denorm_min(), kBf16), 0x0000u);
  EXPECT_EQ(ref_encode(0x1p-133f, kBf16), 0x0001u);
  EXPECT_EQ(ref_encode(-0.0f, kBf16), 0x8000u);
  EXPECT_EQ(ref_decode(0x0001, kHalf), 0x1p-24);
  EXPECT_EQ(ref_decode(0x7bff, kHalf), 65504.0);
  EXPECT_EQ(ref_decode(0x0001, kBf16), 0x1p-133);
  EXPECT_EQ(ref_decode(0x7f7f, kBf16), 0x1.fep127);
}

TEST(DTypes, EverySixteenBitPatternDecodesExactly) {
  for (DType t : {DType::f16, DType::bf16}) {
    const Format f = format_of(t);
    int bad = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const float got = from_bits(t, static_cast<std::uint16_t>(b));
      const double want = ref_decode(b, f);
      bool ok;
      if (std::isnan(want)) {
        // NaN stays NaN with its sign and payload (the quiet bit may be set on the way).
        const std::uint32_t g = std::bit_cast<std::uint32_t>(got);
        const std::uint32_t payload = (b & f.man_mask() & ~f.quiet_bit()) << (23 - f.m_bits);
        ok = std::isnan(got) && std::signbit(got) == static_cast<bool>(b & f.sign_bit()) &&
             (g & 0x3fffff) == payload;
      } else {
        ok = std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(static_cast<float>(want));
      }
      if (!ok && ++bad <= 8)
        ADD_FAILURE() << dtype_name(t) << " 0x" << std::hex << b << " -> " << std::hexfloat << got << ", reference "
                      << want;
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

TEST(DTypes, EncodeEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::f16, DType::bf16}) {
    EncodeChecker check{t};
    const Format f = format_of(t);
    for (float x : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                    -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::quiet_NaN(),
                    -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
                    std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xff800001u),
                    std::bit_cast<float>(0x7fbfffffu), 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, -1e10f})
      check(x);
    // Every finite value of the dtype, its float neighbours, the exact midpoints (ties) to the next
    // value and their float neighbours: ties, subnormals, the carry into the next binade, overflow.
    std::vector<float> v = all_finite_values(t);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float x = v[i];
      check(x);
      check(-x);
      check(std::nextafter(x, inf));
      check(std::nextafter(x, -inf));
      // The midpoint to the next value up (for the largest finite value: the overflow threshold).
      const double next = i + 1 < v.size() ? v[i + 1] : 2.0 * x - v[i - 1];
      const float mid = static_cast<float>((x + next) / 2);
      ASSERT_EQ(static_cast<double>(mid), (x + next) / 2) << "midpoint not exact in float";
      for (float y : {mid, std::nextafter(mid, inf), std::nextafter(mid, -inf)}) {
        check(y);
        check(-y);
      }
    }
    EXPECT_EQ(check.mismatches, 0) << dtype_name(t) << " (" << check.checked << " floats)";
    // Spelled out, independent of the reference.
    EXPECT_EQ(to_bits(t, -0.0f), f.sign_bit());
    EXPECT_EQ(to_bits(t, 0.0f), 0u);
    EXPECT_EQ(to_bits(t, inf), f.exp_mask());
    const std::uint32_t qnan = to_bits(t, std::numeric_limits<float>::signaling_NaN());
    EXPECT_TRUE(is_nan_bits(qnan, f) && (qnan & f.quiet_bit())) << std::hex << qnan;
  }
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7bffu);
  EXPECT_EQ(float_to_f16_bits(0x1p-25f), 0x0000u);
  EXPECT_EQ(float_to_f16_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
  EXPECT_EQ(float_to_f16_bits(0x1.8p-24f), 0x0002u);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80u);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x3p-8f), 0x3f82u);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000u);
}

TEST(DTypes, EncodeAgreesWithReferenceOnRandomFloats) {
  // 10^7 uniformly random bit patterns (every exponent, NaNs and infinities included) and 10^7 floats
  // with exponents where fp16 changes (its subnormals to past its overflow), per dtype.
  std::mt19937_64 rng(20240611);
  for (DType t : {DType::f16, DType::bf16}) {
    EncodeChecker check{t};
    for (int i = 0; i < 10'000'000; ++i) check(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
    for (int i = 0; i < 10'000'000; ++i) {
      const std::uint64_t r = rng();
      const std::uint32_t e = 127 - 27 + static_cast<std::uint32_t>((r >> 32) % 45);  // 2^-27 .. 2^17
      check(std::bit_cast<float>(static_cast<std::uint32_t>((r & 0x807fffffu) | (e << 23))));
    }
    EXPECT_EQ(check.mismatches, 0) << dtype_name(t) << " (" << check.checked << " floats)";
  }
}

// The bulk routine (F16C where the CPU has it) rounds like the scalar conversions: every non-NaN
// float bit for bit (random patterns of every exponent, odd lengths so the vector tails run); NaN
// stays NaN.
TEST(DTypes, RoundFloatsMatchesTheScalarConversions) {
  std::mt19937_64 rng(20261122);
  std::vector<float> in(1'000'003);
  for (float& x : in) x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  for (DType t : {DType::f16, DType::bf16}) {
    std::vector<std::uint16_t> out(in.size());
    round_floats(t, in.data(), out.data(), in.size());
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::uint16_t want = t == DType::f16 ? float_to_f16_bits(in[i]) : float_to_bf16_bits(in[i]);
      const float got = t == DType::f16 ? f16_bits_to_float(out[i]) : bf16_bits_to_float(out[i]);
      if (std::isnan(in[i]) ? !std::isnan(got) : out[i] != want) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0u) << dtype_name(t);
  }
  std::vector<float> f32(in.size());
  round_floats(DType::f32, in.data(), f32.data(), in.size());
  EXPECT_EQ(std::memcmp(f32.data(), in.data(), in.size() * sizeof(float)), 0);
}

TEST(DTypes, ToStorageMatchesHostConversion) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = nd(rng);
    EXPECT_EQ(to_storage<DType::f16>(x), float_to_f16_bits(x));
    EXPECT_EQ(to_storage<DType::bf16>(x), float_to_bf16_bits(x));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(to_storage<DType::f32>(x)), std::bit_cast<std::uint32_t>(x));
  }
}

TEST(DTypes, RoundToDtype) {
  for (DType t : {DType::f16, DType::bf16}) {
    // Every finite value is a fixed point; everything else goes to the reference's choice.
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const float x = from_bits(t, static_cast<std::uint16_t>(b));
      if (std::isfinite(x))
        ASSERT_EQ(std::bit_cast<std::uint32_t>(round_to_dtype(x, t)), std::bit_cast<std::uint32_t>(x)) << std::hex << b;
    }
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> ud(-70000.0f, 70000.0f);
    for (int i = 0; i < 200000; ++i) {
      const float x = i % 2 ? ud(rng) : ud(rng) * 1e-6f;
      const float want = static_cast<float>(ref_decode(ref_encode(x, format_of(t)), format_of(t)));
      ASSERT_EQ(std::bit_cast<std::uint32_t>(round_to_dtype(x, t)), std::bit_cast<std::uint32_t>(want)) << x;
    }
  }
  EXPECT_EQ(round_to_dtype(0.1f, DType::f32), 0.1f);
  EXPECT_EQ(round_to_dtype(0.1f, DType::bf16), 0x1.9ap-4f);
  EXPECT_EQ(round_to_dtype(0.1f, DType::f16), 0x1.998p-4f);
  EXPECT_TRUE(std::isinf(round_to_dtype(70000.0f, DType::f16)));
}

namespace {
// Reference floor/ceil: binary search in the sorted list of every finite value of t.
float ref_floor(const std::vector<float>& v, float x) { return *(std::upper_bound(v.begin(), v.end(), x) - 1); }
float ref_ceil(const std::vector<float>& v, float x) { return *std::lower_bound(v.begin(), v.end(), x); }

void check_floor_ceil(DType t, const std::vector<float>& v, float x, int& bad) {
  const float f = dtype_floor(x, t), c = dtype_ceil(x, t);
  const float rf = ref_floor(v, x), rc = ref_ceil(v, x);
  if ((f != rf || c != rc) && ++bad <= 8)
    ADD_FAILURE() << dtype_name(t) << " x=" << std::hexfloat << x << ": floor " << f << " (want " << rf << "), ceil "
                  << c << " (want " << rc << ")";
}
}  // namespace

TEST(DTypes, FloorAndCeil) {
  for (DType t : {DType::f16, DType::bf16}) {
    const std::vector<float> v = all_finite_values(t);
    int bad = 0;
    // Around every value of the dtype except the two extremes (floor/ceil outside the range are
    // undefined): the value, its float neighbours, the midpoints, a random point inside each gap.
    std::mt19937 rng(3);
    for (std::size_t i = 1; i + 1 < v.size(); ++i) {
      const float x = v[i];
      for (float y : {x, std::nextafter(x, INFINITY), std::nextafter(x, -INFINITY),
                      static_cast<float>((static_cast<double>(x) + v[i + 1]) / 2),
                      x + (v[i + 1] - x) * std::uniform_real_distribution<float>(0.0f, 1.0f)(rng)})
        check_floor_ceil(t, v, std::min(y, v[i + 1]), bad);
    }
    // Exhaustive on ranges of floats, both signs: every float from 0 up (bf16: its smallest
    // subnormals; fp16: from 2^-25, below which every float floors to 0, past its first subnormals),
    // then every 61st float up to past the smallest normal of t, and every 31st float of [1, 2).
    const std::uint32_t start = t == DType::f16 ? 0x33000000u : 0u;
    const std::uint32_t normal = t == DType::f16 ? 0x38800000u : 0x00800000u;
    auto both = [&](std::uint32_t b) {
      check_floor_ceil(t, v, std::bit_cast<float>(b), bad);
      check_floor_ceil(t, v, -std::bit_cast<float>(b), bad);
    };
    for (std::uint32_t b = start; b < start + 0x200000u; ++b) both(b);
    for (std::uint32_t b = start; b < normal + 0x100000u; b += 61) both(b);
    for (std::uint32_t b = 0x3f800000u; b < 0x40000000u; b += 31) both(b);
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
  // Spelled out.
  EXPECT_EQ(dtype_floor(0.0f, DType::f16), 0.0f);
  EXPECT_EQ(dtype_floor(0x1p-26f, DType::f16), 0.0f);
  EXPECT_EQ(dtype_floor(-0x1p-26f, DType::f16), -0x1p-24f);
  EXPECT_EQ(dtype_ceil(0x1p-26f, DType::f16), 0x1p-24f);
  EXPECT_EQ(dtype_ceil(-0x1p-26f, DType::f16), 0.0f);
  EXPECT_EQ(dtype_floor(0.02f, DType::bf16), 0x1.46p-6f);
  EXPECT_EQ(dtype_ceil(0.02f, DType::bf16), 0x1.48p-6f);
  EXPECT_EQ(dtype_floor(1e10f, DType::f16), 65504.0f);  // above the range: the largest value
  EXPECT_EQ(dtype_floor(0.1f, DType::f32), 0.1f);
  EXPECT_EQ(dtype_ceil(0.1f, DType::f32), 0.1f);
}
