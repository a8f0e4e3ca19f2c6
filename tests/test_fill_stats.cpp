// Statistics of fills, with fixed seeds and stated false-alarm rates: each check below would fail for a
// correct generator with at most the probability given next to it (over the choice of seed).
// - Kolmogorov-Smirnov against the exact CDF after rounding to the dtype (tests/stats.hpp), 2^20
//   samples per case: alpha = 0.001 per case (threshold 1.95/sqrt(n), conservative for discrete data).
// - Mean and variance against the exact moments of the rounded distribution: |z| < 4, two-sided
//   alpha = 6.3e-5 per check (normal approximation, n = 2^20).
// - Counts in tails and at truncation bounds against Poisson expectations: alpha = 1e-4 per count.
// - Correlations between streams and within a stream: |r| < 4.5/sqrt(n), alpha = 6.8e-6 per check.
// The source has 16-bit resolution in fp16/bf16 (|z| <= 4.325) and 32-bit in fp32 (|z| <= 6.338); the
// tail expectations below use those exact models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_element.hpp>
#include <layerinit/kernels/fill_host.hpp>
#include "stats.hpp"
#include "test_util.hpp"

using namespace layerinit;

namespace {

using Bytes = std::vector<unsigned char>;

Bytes fill(DType t, std::uint64_t n, std::uint64_t seed, const std::string& name, const FillSpec& spec) {
  Bytes out(n * dtype_size(t));
  const FillJob j = make_fill_job(out.data(), t, n, seed, name, spec);
  fill_host(std::span(&j, 1));  // all cores
  return out;
}

// The continuous distribution a fill samples before rounding: trunc_normal is truncated to the snapped
// bounds prepare_fill computes.
stats::Cdf reference_cdf(const FillSpec& s, DType t) {
  switch (s.kind) {
    case FillKind::normal: return stats::normal_dist(s.mean, s.std);
    case FillKind::trunc_normal: {
      const FillParams p = prepare_fill(s, t);
      return stats::trunc_normal_dist(s.mean, s.std, p.lo, p.hi);
    }
    case FillKind::uniform: return stats::uniform_dist(s.lo, s.hi);
    default: return {};
  }
}

// Moments of the rounded distribution: exact sums for 16-bit dtypes, continuous formulas for fp32
// (rounding to fp32 moves them by ~1e-14 relative).
stats::Moments reference_moments(const FillSpec& s, DType t) {
  if (t != DType::f32) return stats::rounded_moments(reference_cdf(s, t), t);
  switch (s.kind) {
    case FillKind::normal: return stats::normal_moments(s.mean, s.std);
    case FillKind::trunc_normal: {
      const FillParams p = prepare_fill(s, t);
      return stats::trunc_normal_moments(s.mean, s.std, p.lo, p.hi);
    }
    default: return stats::uniform_moments(s.lo, s.hi);
  }
}

struct Case {
  FillSpec spec;
  DType dtype;
};

const Case kCases[] = {
    {FillSpec::normal(0, 1), DType::f32},
    {FillSpec::normal(0, 0.02), DType::f16},
    {FillSpec::normal(0, 0.02), DType::bf16},
    {FillSpec::normal(1, 0.02), DType::bf16},    // coarse: bf16 spacing at 1 is 0.4 to 0.8 std
    {FillSpec::normal(0, 1e-3), DType::f16},     // reaches fp16 subnormals
    {FillSpec::trunc_normal_std(0, 0.02, -2, 2), DType::bf16},
    {FillSpec::trunc_normal_std(0, 0.01, -2, 2), DType::bf16},
    {FillSpec::trunc_normal_std(0, 0.02, -3, 3), DType::f16},
    {FillSpec::trunc_normal(0.5, 1, 0, 1), DType::f16},
    {FillSpec::trunc_normal(0, 1, -1.5, 0.5), DType::f32},
    {FillSpec::trunc_normal(2, 1, 2.5, 4), DType::bf16},  // only an upper tail
    {FillSpec::uniform(-0.05, 0.05), DType::bf16},
    {FillSpec::uniform(0, 1), DType::f32},
    {FillSpec::uniform(-1.0 / 64, 1.0 / 64), DType::f16},
};

// 10^7 values per case (2^20 under ASan, where the fills run ~10x slower).
constexpr std::uint64_t kN = layerinit::testing::kAddressSanitizer ? (1u << 20) + 3 : 10000019;

}  // namespace

TEST(FillStats, KolmogorovSmirnovMeanAndVariance) {
  const double ks_max = stats::ks_threshold(kN, 0.001);
  std::printf("n = %llu per case\n", static_cast<unsigned long long>(kN));
  std::printf("%-40s %-5s %10s %10s %8s %8s\n", "fill", "dtype", "KS D", "threshold", "mean z", "var z");
  std::uint64_t seed = 1000;
  for (const Case& c : kCases) {
    const std::string what = c.spec.describe() + " " + std::string(dtype_name(c.dtype));
    const Bytes b = fill(c.dtype, kN, seed++, "model.layers.7.mlp.down_proj.weight", c.spec);
    const stats::Histogram h = stats::histogram(b.data(), kN, c.dtype);
    ASSERT_EQ(h.non_finite, 0u) << what;
    const stats::KsResult ks = stats::ks_discrete(h, reference_cdf(c.spec, c.dtype), c.dtype);
    const stats::Moments ref = reference_moments(c.spec, c.dtype), got = stats::sample_moments(h);
    const double m4 = ref.m4 > 0 ? ref.m4 : got.m4;
    const double z_mean = (got.mean - ref.mean) / std::sqrt(ref.var / kN);
    const double z_var = (got.var - ref.var) / std::sqrt((m4 - ref.var * ref.var) / kN);
    std::printf("%-40s %-5s %10.6f %10.6f %8.3f %8.3f\n", c.spec.describe().c_str(),
                std::string(dtype_name(c.dtype)).c_str(), ks.d, ks_max, z_mean, z_var);
    EXPECT_LT(ks.d, ks_max) << what << " (largest difference at " << ks.at << ")";
    EXPECT_LT(std::abs(z_mean), 4.0) << what << ": mean " << got.mean << ", expected " << ref.mean;
    EXPECT_LT(std::abs(z_var), 4.0) << what << ": variance " << got.var << ", expected " << ref.var;
    if (c.spec.kind == FillKind::trunc_normal) {  // never leaves [a, b]
      const double a = c.spec.bounds_in_std ? c.spec.mean + c.spec.a * c.spec.std : c.spec.a;
      const double bb = c.spec.bounds_in_std ? c.spec.mean + c.spec.b * c.spec.std : c.spec.b;
      EXPECT_GE(h.values.front(), a) << what;
      EXPECT_LE(h.values.back(), bb) << what;
    }
    if (c.spec.kind == FillKind::uniform) {
      EXPECT_GE(h.values.front(), round_to_dtype(static_cast<float>(c.spec.lo), c.dtype)) << what;
      EXPECT_LE(h.values.back(), round_to_dtype(static_cast<float>(c.spec.hi), c.dtype)) << what;
    }
  }
}

// The KS test as written here has power: it rejects a fill whose std is off by 1%, and a bf16 sample
// with 0.5% of its mass moved to the bounds (the pile-up of frameworks that clamp in bf16).
TEST(FillStats, KolmogorovSmirnovDetectsSmallDefects) {
  const double ks_max = stats::ks_threshold(kN, 0.001);
  const Bytes wide = fill(DType::bf16, kN, 5, "w", FillSpec::normal(0, 0.0202));
  const stats::KsResult a =
      stats::ks_discrete(stats::histogram(wide.data(), kN, DType::bf16), stats::normal_dist(0, 0.02), DType::bf16);
  EXPECT_GT(a.d, ks_max);
  const FillSpec tn = FillSpec::trunc_normal_std(0, 0.02, -2, 2);
  Bytes piled = fill(DType::bf16, kN, 6, "w", tn);
  const FillParams p = prepare_fill(tn, DType::bf16);
  const std::uint16_t hi = float_to_bf16_bits(p.hi);
  for (std::uint64_t i = 0; i < kN; i += 200) std::memcpy(&piled[2 * i], &hi, 2);
  const stats::KsResult b = stats::ks_discrete(stats::histogram(piled.data(), kN, DType::bf16),
                                               reference_cdf(tn, DType::bf16), DType::bf16);
  EXPECT_GT(b.d, ks_max);
  std::printf("KS power: std +1%%: D = %.5f; 0.5%% piled at the bound: D = %.5f (threshold %.5f)\n", a.d, b.d, ks_max);
}

// trunc_normal in bf16 with small std: the counts at the extreme values a', b' match the truncated
// normal's mass of their rounding bins (no pile-up), and nothing lies outside [a', b'].
TEST(FillStats, TruncNormalHasNoPileUpAtTheBounds) {
  const std::uint64_t n = 1u << 22;
  std::uint64_t seed = 77;
  for (double sd : {0.01, 0.02})
    for (const FillSpec& s : {FillSpec::trunc_normal(0, sd, -2, 2), FillSpec::trunc_normal_std(0, sd, -2, 2)}) {
      const DType t = DType::bf16;
      const FillParams p = prepare_fill(s, t);
      const stats::Cdf F = reference_cdf(s, t);
      const Bytes b = fill(t, n, seed++, "model.layers.0.self_attn.q_proj.weight", s);
      const stats::Histogram h = stats::histogram(b.data(), n, t);
      ASSERT_EQ(h.non_finite, 0u);
      EXPECT_GE(h.values.front(), p.lo) << s.describe();
      EXPECT_LE(h.values.back(), p.hi) << s.describe();
      const double lam_lo = n * stats::rounded_cdf_at(F, p.lo, t);
      const double lam_hi = n * (1 - stats::rounded_cdf_below(F, p.hi, t));
      const std::uint64_t k_lo = h.count_of(p.lo), k_hi = h.count_of(p.hi);
      std::printf("%-40s bf16: at a' = %-10g %6llu (expected %8.2f), at b' = %-10g %6llu (expected %8.2f)\n",
                  s.describe().c_str(), p.lo, static_cast<unsigned long long>(k_lo), lam_lo, p.hi,
                  static_cast<unsigned long long>(k_hi), lam_hi);
      EXPECT_TRUE(stats::poisson_consistent(k_lo, lam_lo, 1e-4)) << s.describe() << ": " << k_lo << " at " << p.lo;
      EXPECT_TRUE(stats::poisson_consistent(k_hi, lam_hi, 1e-4)) << s.describe() << ": " << k_hi << " at " << p.hi;
    }
}

// Tails of normal(0, 1), 2^24 samples, against the exact model of the source: fp32 takes the
// 2^32 quantiles Phi^-1((j + 1/2) / 2^32) (|z| <= 6.338), so per tail it reaches past t with
// probability ceil(2^32 Q(t) - 1/2) / 2^32 (Q the normal upper tail); fp16 and bf16 take the 65536
// table nodes (|z| <= 4.325), so the model counts the codes whose rounded node exceeds t.
TEST(FillStats, NormalTails) {
  // 2^24 values per dtype (2^21 under ASan: still ~65 per side beyond 4 std in fp16/bf16).
  const std::uint64_t n = layerinit::testing::kAddressSanitizer ? 1u << 21 : 1u << 24;
  const FillTables tab = host_fill_tables();
  for (DType t : all_dtypes) {
    const Bytes b = fill(t, n, 2024, "model.embed_tokens.weight", FillSpec::normal(0, 1));
    const std::vector<float> v = stats::load_values(b.data(), n, t);
    const double z_max = t == DType::f32 ? 6.3379577545537885 : round_to_dtype(node16(tab.node16, 65535), t);
    float lo = 0, hi = 0;
    for (float x : v) lo = std::min(lo, x), hi = std::max(hi, x);
    EXPECT_LE(hi, z_max * (1 + 2e-7)) << dtype_name(t);
    EXPECT_GE(lo, -z_max * (1 + 2e-7)) << dtype_name(t);
    EXPECT_GE(hi, 4.0) << dtype_name(t) << ": the tails must reach 4 std";
    EXPECT_LE(lo, -4.0) << dtype_name(t);
    for (double th : {2.0, 3.0, 4.0, 4.25, 5.0, 5.5}) {
      double p = 0;
      if (t == DType::f32) {
        p = std::ceil(std::ldexp(stats::normal_sf(th), 32) - 0.5) / 0x1p32;
      } else {
        for (std::uint32_t k = 0; k < 65536; ++k) p += round_to_dtype(node16(tab.node16, k), t) > th;
        p /= 65536.0;
      }
      std::uint64_t above = 0, below = 0;
      for (float x : v) above += x > th, below += x < -th;
      const double lam = n * p;
      std::printf("%-4s normal tail beyond %.2f: %llu above, %llu below, expected %.2f each\n", std::string(dtype_name(t)).c_str(), th,
                  static_cast<unsigned long long>(above), static_cast<unsigned long long>(below), lam);
      EXPECT_TRUE(stats::poisson_consistent(above, lam, 1e-4)) << dtype_name(t) << " t = " << th << ": " << above;
      EXPECT_TRUE(stats::poisson_consistent(below, lam, 1e-4)) << dtype_name(t) << " t = " << th << ": " << below;
    }
  }
}

// Streams for different seeds and different tensor names are uncorrelated, at lags -4..4; and a
// stream is uncorrelated with itself at lags 1..8 (the words of one Philox block and the next).
TEST(FillStats, StreamsAreUncorrelated) {
  const std::uint64_t n = 1u << 20;
  const double r_max = 4.5 / std::sqrt(static_cast<double>(n));
  const std::string a = "model.layers.0.mlp.up_proj.weight", b = "model.layers.1.mlp.up_proj.weight";
  auto values = [&](std::uint64_t seed, const std::string& name, DType t, const FillSpec& s) {
    const Bytes bytes = fill(t, n, seed, name, s);
    return stats::load_values(bytes.data(), n, t);
  };
  const FillSpec u = FillSpec::uniform(0, 1), g = FillSpec::normal(0, 0.02);
  struct Pair {
    std::vector<float> x, y;
    std::string what;
  };
  const std::vector<float> base = values(1, a, DType::f32, u);
  std::vector<Pair> pairs;
  pairs.push_back({base, values(2, a, DType::f32, u), "seeds 1, 2"});
  pairs.push_back({base, values(1, b, DType::f32, u), "names layers.0, layers.1"});
  pairs.push_back({base, values(0x100000001ull, a, DType::f32, u), "seeds 1, 2^32 + 1"});
  pairs.push_back({values(0, a, DType::bf16, g), values(0, b, DType::bf16, g), "bf16 normal, names"});
  double worst = 0;
  for (const Pair& p : pairs)
    for (int lag = -4; lag <= 4; ++lag) {
      const double r = lag >= 0 ? stats::pearson(p.x, p.y, lag) : stats::pearson(p.y, p.x, -lag);
      worst = std::max(worst, std::abs(r));
      EXPECT_LT(std::abs(r), r_max) << p.what << ", lag " << lag;
    }
  for (int lag = 1; lag <= 8; ++lag) {
    const double r = stats::pearson(base, base, lag);
    worst = std::max(worst, std::abs(r));
    EXPECT_LT(std::abs(r), r_max) << "within a stream, lag " << lag;
  }
  std::printf("largest |correlation| %.5f (threshold %.5f)\n", worst, r_max);
}
