// The shared transforms from random bits to values (kernels/transforms.hpp), against double-precision
// references: log_pos over a dense sweep of positive normal floats, erfinv over every input unit_open()
// can produce, and the exact value sets of unit_open and unit_01.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include <layerinit/kernels/transforms.hpp>

using namespace layerinit;

namespace {

// Runs f(begin, end) on [0, n) split across `threads` threads; returns the per-thread results.
template <class R, class F>
std::vector<R> parallel(std::uint64_t n, int threads, F f) {
  std::vector<R> out(threads);
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k)
    pool.emplace_back([&, k] { out[k] = f(n * k / threads, n * (k + 1) / threads); });
  for (auto& t : pool) t.join();
  return out;
}

struct Worst {
  double err = 0;
  float at = 0;
  void update(double e, float x) {
    if (e > err) err = e, at = x;
  }
  void merge(const Worst& o) { update(o.err, o.at); }
};

// Error of a float result in units in the last place of the exact result (the float spacing at |ref|).
double ulp_error(float got, double ref) {
  if (ref == 0) return got == 0 ? 0 : INFINITY;
  const double ulp = std::ldexp(1.0, std::ilogb(ref) - 23);
  return std::abs(got - ref) / ulp;
}

// erfinv in double: Newton's method on erf (erfc for x > 0.5, where 1 - x is exact), until the step
// is below double precision (two or three steps from a start within 1e-6 relative).
double ref_erfinv(double x, double y0) {
  if (x == 0) return 0;
  const double ax = std::abs(x);
  double y = std::abs(y0);
  for (int i = 0; i < 50; ++i) {
    const double f = ax <= 0.5 ? std::erf(y) - ax : (1.0 - ax) - std::erfc(y);
    const double step = f / (2.0 / std::sqrt(M_PI) * std::exp(-y * y));
    y -= step;
    if (std::abs(step) <= 1e-16 * y) break;
  }
  return std::copysign(y, x);
}

float unit_open_of(std::uint32_t m24) { return transforms::unit_open(m24 << 8); }

}  // namespace

TEST(Transforms, UnitOpenIsExactSymmetricAndInsideOpenInterval) {
  // Every top-24-bit pattern: value = (2m + 1) 2^-24 with m the signed top 24 bits.
  for (std::uint32_t t = 0; t < (1u << 24); ++t) {
    const std::uint32_t bits = t << 8;
    const float v = transforms::unit_open(bits);
    const std::int32_t m = static_cast<std::int32_t>(bits) >> 8;
    ASSERT_EQ(static_cast<double>(v), std::ldexp(2.0 * m + 1, -24)) << std::hex << bits;
    ASSERT_TRUE(v > -1.0f && v < 1.0f);
    ASSERT_EQ(transforms::unit_open(~bits), -v) << std::hex << bits;  // symmetric: ~bits maps to -v
  }
  // The low 8 bits are ignored.
  for (std::uint32_t bits : {0x00000000u, 0x12345600u, 0x7fffff00u, 0x80000000u, 0xffffff00u})
    for (std::uint32_t low : {1u, 0x80u, 0xffu}) EXPECT_EQ(transforms::unit_open(bits | low), transforms::unit_open(bits));
  EXPECT_EQ(transforms::unit_open(0x7fffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(transforms::unit_open(0x80000000u), -1.0f + 0x1p-24f);
  EXPECT_EQ(transforms::unit_open(0x00000000u), 0x1p-24f);
  EXPECT_EQ(transforms::unit_open(0xffffffffu), -0x1p-24f);
}

TEST(Transforms, Unit01IsExactInHalfOpenInterval) {
  for (std::uint32_t t = 0; t < (1u << 24); ++t) {
    const float v = transforms::unit_01(t << 8 | (t & 0xff));
    ASSERT_EQ(static_cast<double>(v), std::ldexp(static_cast<double>(t), -24));
    ASSERT_TRUE(v >= 0.0f && v < 1.0f);
  }
  EXPECT_EQ(transforms::unit_01(0u), 0.0f);
  EXPECT_EQ(transforms::unit_01(0xffffffffu), 1.0f - 0x1p-24f);
}

TEST(Transforms, LogPosBelowOneUlp) {
  // Every float of [0.5, 2) (where log is near 0 and relative accuracy is hardest), and every 97th
  // positive normal float from FLT_MIN to FLT_MAX, against double log.
  const std::uint64_t dense_lo = 0x3f000000u, dense_n = 0x40000000u - 0x3f000000u;
  const std::uint64_t sweep_lo = 0x00800000u, sweep_n = (0x7f800000u - 0x00800000u) / 97;
  auto work = [&](std::uint64_t b, std::uint64_t e) {
    Worst w;
    for (std::uint64_t i = b; i < e; ++i) {
      const float x = i < dense_n ? std::bit_cast<float>(static_cast<std::uint32_t>(dense_lo + i))
                                  : std::bit_cast<float>(static_cast<std::uint32_t>(sweep_lo + (i - dense_n) * 97));
      w.update(ulp_error(transforms::log_pos(x), std::log(static_cast<double>(x))), x);
    }
    return w;
  };
  Worst w;
  for (const Worst& p : parallel<Worst>(dense_n + sweep_n, 2, work)) w.merge(p);
  std::printf("log_pos: max error %.4f ulp at x = %a (%llu floats)\n", w.err, w.at,
              static_cast<unsigned long long>(dense_n + sweep_n));
  EXPECT_LT(w.err, 1.0) << "at x = " << std::hexfloat << w.at;
  // Exact where the answer is exact.
  EXPECT_EQ(transforms::log_pos(1.0f), 0.0f);
}

TEST(Transforms, ErfinvRelativeErrorOverEveryUnitOpenInput) {
  // erfinv is odd bit for bit over every unit_open value (so the negative half needs no second sweep).
  for (std::uint32_t m = 0; m < (1u << 23); ++m) {
    const float x = unit_open_of(m);  // m < 2^23: x = (2m + 1) 2^-24 > 0
    ASSERT_EQ(transforms::erfinv(-x), -transforms::erfinv(x)) << std::hexfloat << x;
  }
  // Relative error over the 2^23 positive inputs (all of them: |x| > 0.99 included), two threads.
  auto work = [](std::uint64_t b, std::uint64_t e) {
    Worst w;
    for (std::uint64_t m = b; m < e; ++m) {
      const float x = unit_open_of(static_cast<std::uint32_t>(m));
      const float got = transforms::erfinv(x);
      const double ref = ref_erfinv(x, got);
      w.update(std::abs(got - ref) / std::abs(ref), x);
    }
    return w;
  };
  Worst w;
  for (const Worst& p : parallel<Worst>(1u << 23, 2, work)) w.merge(p);
  std::printf("erfinv: max relative error %.3g at x = %a (2^24 inputs)\n", w.err, w.at);
  EXPECT_LT(w.err, 5e-7) << "at x = " << std::hexfloat << w.at;
}

TEST(Transforms, ErfinvIsMonotoneOverUnitOpenInputs) {
  float prev = transforms::erfinv(unit_open_of(0));
  int bad = 0;
  for (std::uint32_t m = 1; m < (1u << 23); ++m) {
    const float y = transforms::erfinv(unit_open_of(m));
    if (y < prev && ++bad <= 5)
      ADD_FAILURE() << "erfinv decreases at x = " << std::hexfloat << unit_open_of(m) << ": " << prev << " -> " << y;
    prev = y;
  }
  EXPECT_EQ(bad, 0);
}

TEST(Transforms, ErfinvExtremesAndReferenceSanity) {
  // The reference against known values of erfinv.
  // The reference against known values of erfinv (mpmath).
  EXPECT_NEAR(ref_erfinv(0.5, 0.4), 0.47693627620447, 1e-14);
  EXPECT_NEAR(ref_erfinv(0.999, 2.0), 2.32675376551352, 1e-13);
  EXPECT_NEAR(ref_erfinv(-0.999, -2.0), -2.32675376551352, 1e-13);
  // The largest input: sqrt(2) erfinv(1 - 2^-24) is the normal quantile of 1 - 2^-25, 5.419983:
  // no normal fill goes past 5.42 std (the source uniform has 24 bits).
  const float top = transforms::erfinv(1.0f - 0x1p-24f);
  EXPECT_NEAR(top * std::sqrt(2.0), 5.419983174916869, 5.42 * 5e-7);
  EXPECT_TRUE(std::isfinite(transforms::erfinv(0x1.fffffep-1f)));
  EXPECT_EQ(transforms::erfinv(0.0f), 0.0f);
}
