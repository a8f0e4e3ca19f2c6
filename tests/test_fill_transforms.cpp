// The per-element transforms' fast forms (kernels/fill.hpp, kernels/quantile.hpp) against their
// definitions, the formulas as first written (kept here only, as the reference): the same bits for
// every 16-bit code of fp16/bf16 trunc_normal over many spans, and for fp32 trunc_normal over many
// positions, spans and prepared fills, including the region edges of the folded quantile. The GPU's
// form of the quantile's normalization (a double converted toward zero) is emulated bit by bit and
// checked against the host's clz form.
#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_element.hpp>
#include <layerinit/kernels/quantile.hpp>

#include "test_util.hpp"

using namespace layerinit;
using layerinit::testing::SplitMix64;

namespace {

constexpr std::uint64_t kHalf = std::uint64_t{1} << 63;
constexpr std::uint64_t kQuarter = std::uint64_t{1} << 62;

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }

// ---- The definitions (the first forms of kernels/fill.hpp and kernels/quantile.hpp) ----

std::uint32_t ref_position16(const FillParams& p, std::uint32_t code) {
  const std::uint32_t x = (code << 16) | 0x8000u;
  const auto span = static_cast<std::uint32_t>(p.span);
  return static_cast<std::uint32_t>(p.p_lo) + static_cast<std::uint32_t>((static_cast<std::uint64_t>(span) * x) >> 32);
}

float ref_node16_at(const float* nodes, std::uint32_t pos) {
  const bool up = pos >= node16_middle_position;
  const std::uint32_t q = up ? pos : node16_last_position - pos;
  const std::uint32_t k = (q >> 16) - 32767u;
  const float t0 = nodes[k], t1 = nodes[k + 1];
  const float z = std::fma(static_cast<float>(q & 0xffffu) * 0x1p-16f, t1 - t0, t0);
  return up ? z : -z;
}

float ref_half_trunc(const FillParams& p, std::uint32_t code, const float* nodes) {
  return std::fma(p.scale, ref_node16_at(nodes, ref_position16(p, code)), p.shift);
}

std::uint64_t ref_position64(const FillParams& p, std::uint32_t bits) {
  const std::uint64_t x = (static_cast<std::uint64_t>(bits) << 32) | 0x80000000u;
  return p.p_lo + static_cast<std::uint64_t>((static_cast<unsigned __int128>(p.span) * x) >> 64);
}

float ref_f32_trunc(const FillParams& p, std::uint32_t bits) {
  const float z = quantile::normal_quantile64(quantile::normal_cubic_table, ref_position64(p, bits));
  return transforms::clamp(std::fma(p.scale, z, p.shift), p.lo, p.hi);
}

// __ull2double_rz(x) for x < 2^63, as the GPU's I2F.F64.U64.RZ: exponent 1023 + floor(log2 x), the 52
// bits below the leading one truncated. Returns {hi word, lo word}.
std::pair<std::uint32_t, std::uint32_t> double_rz_words(std::uint64_t x) {
  if (x == 0) return {0, 0};
  const int lz = std::countl_zero(x);
  const std::uint64_t mant = ((x << lz) << 1) >> 12;
  const std::uint64_t d = (static_cast<std::uint64_t>(1086 - lz) << 52) | mant;
  return {static_cast<std::uint32_t>(d >> 32), static_cast<std::uint32_t>(d)};
}

// Prepared trunc_normal fills of every dtype over a grid of means, stds and bounds (in std units,
// from centered to tail-only), keeping those that stay trunc_normal.
std::vector<FillParams> prepared_trunc_fills(DType t) {
  const double means[] = {0.0, 0.5, -3.0};
  const double stds[] = {0.02, 1.0, 1e-3, 250.0};
  const double bounds[][2] = {{-2, 2}, {-1, 3}, {0, 1}, {2, 4}, {-6, 6}, {-4.3, 4.3}, {3.5, 4.3},
                              {-0.01, 0.01}, {-3, -2.5}, {-0.5, 6.2}, {1e-3, 2e-3}, {-6.3, -0.1}};
  std::vector<FillParams> out;
  for (double m : means)
    for (double s : stds)
      for (const auto& b : bounds) {
        FillParams p;
        try {
          p = prepare_fill(FillSpec::trunc_normal_std(m, s, b[0], b[1]), t);
        } catch (const std::invalid_argument&) {
          continue;  // too narrow for the dtype, or beyond the normal's reach
        }
        if (p.kind == FillKind::trunc_normal) out.push_back(p);
      }
  return out;
}

}  // namespace

// fp16/bf16: position16 (the half and p_lo folded into one 64-bit addend, centered on the middle)
// for every code, on the prepared fills and on random and extreme (p_lo, span) pairs.
TEST(FillTransforms, Position16EqualsItsDefinitionForEveryCode) {
  std::vector<FillParams> ps = prepared_trunc_fills(DType::bf16);
  const std::vector<FillParams> f16 = prepared_trunc_fills(DType::f16);
  ps.insert(ps.end(), f16.begin(), f16.end());
  ASSERT_GE(ps.size(), 40u);
  const std::uint64_t positions = std::uint64_t{node16_last_position} + 1;
  auto pair = [](std::uint64_t p_lo, std::uint64_t span) {
    FillParams p;
    p.kind = FillKind::trunc_normal;
    p.p_lo = p_lo;
    p.span = span;
    return p;
  };
  ps.push_back(pair(0, positions));       // every position
  ps.push_back(pair(0, 1));
  ps.push_back(pair(node16_last_position, 1));
  ps.push_back(pair(0, 0x20000));         // span < 2^17: the half folds to zero high word
  ps.push_back(pair(12345, 0x1ffff));     // odd span
  SplitMix64 rng{7};
  for (int i = 0; i < 300; ++i) {
    const std::uint64_t p_lo = rng.below(positions);
    ps.push_back(pair(p_lo, 1 + rng.below(positions - p_lo)));
  }
  for (const FillParams& p : ps)
    for (std::uint32_t code = 0; code < 65536; ++code)
      ASSERT_EQ(position16(p, code), ref_position16(p, code) - node16_middle_position)
          << "p_lo " << p.p_lo << " span " << p.span << " code " << code;
}

// node16_at_centered (|d| and d's sign bit, no mirror branch) against the definition at every node and
// 34 fractions of each, and at 10^7 random positions.
TEST(FillTransforms, Node16AtEqualsItsDefinition) {
  const float* nodes = host_fill_tables().node16;
  const std::uint32_t fractions[] = {0, 1, 2, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
  auto check = [&](std::uint32_t pos) {
    ASSERT_EQ(bits_of(node16_at_centered(nodes, pos - node16_middle_position)), bits_of(ref_node16_at(nodes, pos)))
        << "position " << pos;
    ASSERT_EQ(bits_of(node16_at(nodes, pos)), bits_of(ref_node16_at(nodes, pos))) << "position " << pos;
  };
  SplitMix64 rng{11};
  for (std::uint32_t k = 0; k < 65535; ++k) {
    for (std::uint32_t f : fractions) check((k << 16) | f);
    for (int r = 0; r < 25; ++r) check((k << 16) | static_cast<std::uint32_t>(rng.below(65536)));
  }
  check(node16_last_position);
  for (int i = 0; i < 10'000'000; ++i) check(static_cast<std::uint32_t>(rng.below(std::uint64_t{node16_last_position} + 1)));
}

// node16_of_word (the mirror once per word, the kernels' fp16/bf16 normal) against node16 for every code
// in either half of a word, beside every code with its top bit set and clear in the other half.
TEST(FillTransforms, Node16OfWordIsNode16OfEachHalf) {
  const float* nodes = host_fill_tables().node16;
  for (std::uint32_t code = 0; code < 65536; ++code) {
    for (std::uint32_t other : {0u, 1u, 0x7fffu, 0x8000u, 0xffffu, (code * 40503u) & 0xffffu}) {
      ASSERT_EQ(bits_of(node16_of_word(nodes, code | (other << 16), 0)), bits_of(node16(nodes, code))) << "lo " << code;
      ASSERT_EQ(bits_of(node16_of_word(nodes, other | (code << 16), 1)), bits_of(node16(nodes, code))) << "hi " << code;
    }
  }
}

// The whole fp16/bf16 trunc_normal transform, every code of every prepared fill.
TEST(FillTransforms, HalfTruncNormalEqualsItsDefinitionForEveryCode) {
  const float* nodes = host_fill_tables().node16;
  for (DType t : {DType::bf16, DType::f16}) {
    const std::vector<FillParams> ps = prepared_trunc_fills(t);
    ASSERT_GE(ps.size(), 20u) << dtype_name(t);
    for (const FillParams& p : ps)
      for (std::uint32_t code = 0; code < 65536; ++code)
        ASSERT_EQ(bits_of(half_value<FillKind::trunc_normal>(p, code, nodes)), bits_of(ref_half_trunc(p, code, nodes)))
            << dtype_name(t) << " p_lo " << p.p_lo << " span " << p.span << " code " << code;
  }
}

// fp32: position64_centered (two 32 x 32 -> 64-bit products, the half folded) + 2^63 is the 64 x 64-bit
// definition, on random and extreme spans (odd, below 2^32, up to 2^64 - 1) and draws.
TEST(FillTransforms, Position64EqualsItsDefinition) {
  SplitMix64 rng{13};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pairs = {
      {1, UINT64_MAX}, {1, 1}, {UINT64_MAX, 1}, {kHalf, kHalf}, {1, 0xffffffffu}, {1, 0x100000000u},
      {kHalf - 3, 7}, {kQuarter, kHalf + 1}, {1, 3}};
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t p_lo = 1 + rng.below(UINT64_MAX);  // [1, 2^64 - 1]
    const std::uint64_t room = UINT64_MAX - p_lo + 1;     // spans up to 2^64 - p_lo
    const std::uint64_t span = 1 + (i % 2 ? rng.below(room) : rng.log_uniform() % room);
    pairs.emplace_back(p_lo, span);
  }
  const std::uint32_t edges[] = {0, 1, 2, 0x7fffffff, 0x80000000, 0x80000001, 0xfffffffe, 0xffffffff};
  for (const auto& [p_lo, span] : pairs) {
    FillParams p;
    p.kind = FillKind::trunc_normal;
    p.p_lo = p_lo;
    p.span = span;
    auto check = [&](std::uint32_t bits) {
      ASSERT_EQ(position64_centered(p, bits) + kHalf, ref_position64(p, bits))
          << "p_lo " << p_lo << " span " << span << " bits " << bits;
    };
    for (std::uint32_t b : edges) check(b);
    for (int r = 0; r < 200; ++r) check(static_cast<std::uint32_t>(rng()));
  }
}

// The folded quantile of a centered position against normal_quantile64: at every power of two and
// its neighbours on both sides of the middle, at the region edges (+-2^62 and beyond), and at 2 x 10^7
// random positions of random magnitude.
TEST(FillTransforms, CenteredQuantileEqualsNormalQuantile64) {
  const quantile::CubicRow* padded = host_fill_tables().cubic;
  ASSERT_EQ(std::memcmp(&padded[quantile::kCubicRows], &quantile::normal_cubic_table[quantile::kCenterPointRow],
                        sizeof(quantile::CubicRow)),
            0);
  auto check = [&](std::uint64_t c) {
    if (c == kHalf) return;  // p = 0: outside the domain
    ASSERT_EQ(bits_of(quantile::normal_quantile_centered(padded, c)),
              bits_of(quantile::normal_quantile64(quantile::normal_cubic_table, c + kHalf)))
        << "c = p - 2^63 = " << static_cast<std::int64_t>(c);
  };
  for (int k = 0; k < 64; ++k)
    for (std::int64_t d = -2; d <= 2; ++d) {
      const std::uint64_t m = (std::uint64_t{1} << k) + static_cast<std::uint64_t>(d);
      check(m);
      check(0 - m);
      check(kQuarter + m);
      check(kQuarter - m);
      check(0 - kQuarter + m);
      check(0 - kQuarter - m);
    }
  SplitMix64 rng{17};
  for (int i = 0; i < 20'000'000; ++i) {
    const std::uint64_t m = rng.log_uniform();
    check(rng() & 1 ? m : 0 - m);
  }
}

// The GPU's normalization: row and t from the double of x converted toward zero (emulated here, and
// the emulation checked against the FPU's own conversion in round-toward-zero) equal the clz form.
TEST(FillTransforms, DoubleNormalizationEqualsClz) {
  SplitMix64 rng{19};
  std::vector<std::uint64_t> xs = {0, 1, 2, 3};
  for (int k = 1; k < 63; ++k)
    for (std::int64_t d = -1; d <= 1; ++d) xs.push_back((std::uint64_t{1} << k) + static_cast<std::uint64_t>(d));
  for (int i = 0; i < 5'000'000; ++i) xs.push_back(rng.log_uniform() >> 1);  // below 2^63
  const int old_mode = std::fegetround();
  ASSERT_EQ(std::fesetround(FE_TOWARDZERO), 0);
  for (std::size_t i = 0; i < xs.size(); i += 97) {
    volatile std::int64_t in = static_cast<std::int64_t>(xs[i]);
    const double d = static_cast<double>(in);
    const auto bits = std::bit_cast<std::uint64_t>(d);
    const auto [dh, dl] = double_rz_words(xs[i]);
    ASSERT_EQ(bits, (std::uint64_t{dh} << 32) | dl) << "x " << xs[i];
  }
  std::fesetround(old_mode);
  for (const std::uint64_t x : xs)
    for (const int base : {quantile::kCenterPointRow, quantile::kCubicRows}) {
      const int lz = std::countl_zero(x);
      const std::uint64_t xn = x << (lz & 63);
      const int row = base - 16 * lz + static_cast<int>(xn >> 59);
      const auto t23 = static_cast<std::uint32_t>(xn >> 36) & 0x7fffffu;
      const auto [dh, dl] = double_rz_words(x);
      if (x == 0 && base == quantile::kCubicRows) continue;  // the tail never has x = 0 (p = 0)
      ASSERT_EQ(quantile::row_of_double(base, dh), row) << "x " << x << " base " << base;
      ASSERT_EQ(quantile::t_bits_of_double(dh, dl), t23) << "x " << x;
    }
}

// The whole fp32 trunc_normal transform on prepared fills (the clamp of the definition never acts:
// every position lies in the span whose values lie in [a', b']): the extreme draws, the draws where
// the position crosses a region edge of the quantile, and random draws.
TEST(FillTransforms, F32TruncNormalEqualsItsDefinition) {
  const quantile::CubicRow* cubic = host_fill_tables().cubic;
  const std::vector<FillParams> ps = prepared_trunc_fills(DType::f32);
  ASSERT_GE(ps.size(), 60u);
  SplitMix64 rng{23};
  for (const FillParams& p : ps) {
    std::vector<std::uint32_t> draws = {0, 1, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff};
    // The first draw whose position reaches each edge (the position is non-decreasing in the draw).
    for (const std::uint64_t edge : {kQuarter, kHalf, kHalf + kQuarter}) {
      std::uint64_t lo = 0, hi = 0xffffffffu;
      if (ref_position64(p, 0xffffffffu) < edge || ref_position64(p, 0) >= edge) continue;
      while (lo < hi) {
        const std::uint64_t mid = (lo + hi) / 2;
        if (ref_position64(p, static_cast<std::uint32_t>(mid)) >= edge) hi = mid;
        else lo = mid + 1;
      }
      for (std::int64_t d = -2; d <= 2; ++d) draws.push_back(static_cast<std::uint32_t>(lo + d));
    }
    for (int r = 0; r < 100000; ++r) draws.push_back(static_cast<std::uint32_t>(rng()));
    for (const std::uint32_t b : draws)
      ASSERT_EQ(bits_of(f32_value<FillKind::trunc_normal>(p, b, cubic)), bits_of(ref_f32_trunc(p, b)))
          << "p_lo " << p.p_lo << " span " << p.span << " bits " << b;
  }
}
