// The normal quantile tables and functions (kernels/quantile.hpp) against a long-double reference
// (glibc's erfl/erfcl and Newton steps, about 1e-18 relative): every node16 entry correctly rounded,
// exact antisymmetry, normal_quantile64 within 1.1 ulp at every segment boundary and on random positions
// in every octave, monotone across every boundary and along dense runs, and normal_quantile32 equal to
// normal_quantile64 on every octave and segment boundary and on 10^8 random draws.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include <layerinit/kernels/quantile.hpp>

#include "test_util.hpp"

using namespace layerinit;
using namespace layerinit::quantile;
using layerinit::testing::SplitMix64;

namespace {

constexpr std::uint64_t kHalf = std::uint64_t{1} << 63;
constexpr std::uint64_t kQuarter = std::uint64_t{1} << 62;
constexpr bool kAsan = layerinit::testing::kAddressSanitizer;

// normal_quantile64's error bound: c0's rounding (0.5 ulp, which the cubic cannot undo near t = 0),
// the last fma's rounding (0.5), the bits dropped below t (< 0.15) and the fit (< 0.01) give 1.16 in
// the worst case; 6 * 10^7 random positions measured 1.05 at most, the mean 0.26.
constexpr double kMaxUlp = 1.1;

// |Phi^-1(q / 2^64)| for q in [1, 2^63], in long double (64-bit mantissa: every q is exact).
// Tail (q < 2^62): solve erfc(z / sqrt 2) / 2 = q / 2^64 (no cancellation however small q is);
// center: solve erf(z / sqrt 2) / 2 = (2^63 - q) / 2^64 (relative accuracy down to z = 1e-19).
long double ref_abs_z(std::uint64_t q) {
  const long double sqrt2 = std::sqrt(2.0L), inv_sqrt_2pi = 1.0L / std::sqrt(2.0L * 3.14159265358979323846264338327950288L);
  auto phi = [&](long double z) { return inv_sqrt_2pi * std::exp(-z * z / 2); };
  if (q == kHalf) return 0;
  long double z;
  if (q < kQuarter) {
    const long double u = std::ldexp(static_cast<long double>(q), -64);
    // Abramowitz and Stegun 26.2.23 (absolute error < 4.5e-4) as the start.
    const long double s = std::sqrt(-2 * std::log(u));
    z = s - (2.515517L + 0.802853L * s + 0.010328L * s * s) / (1 + 1.432788L * s + 0.189269L * s * s + 0.001308L * s * s * s);
    for (int i = 0; i < 100; ++i) {
      const long double step = (std::erfc(z / sqrt2) / 2 - u) / phi(z);
      z += step;
      if (std::abs(step) <= 1e-19L * z) break;
    }
  } else {
    const long double d = std::ldexp(static_cast<long double>(kHalf - q), -64);
    // erf is concave on z > 0, so the linear term starts below the root and Newton climbs to it.
    z = std::sqrt(2 * 3.14159265358979323846264338327950288L) * d;
    for (int i = 0; i < 100; ++i) {
      const long double step = (std::erf(z / sqrt2) / 2 - d) / phi(z);
      z -= step;
      if (std::abs(step) <= 1e-19L * z) break;
    }
  }
  return z;
}

// Phi^-1(p / 2^64), p in [1, 2^64 - 1].
long double ref_z(std::uint64_t p) { return p >= kHalf ? ref_abs_z(0 - p) : -ref_abs_z(p); }

// Error in units of the float spacing at the exact value.
double ulp_error(float got, long double ref) {
  if (ref == 0) return got == 0 ? 0 : INFINITY;
  const long double ulp = std::ldexp(1.0L, std::ilogb(ref) - 23);
  return static_cast<double>(std::abs(static_cast<long double>(got) - ref) / ulp);
}

float q64(std::uint64_t p) { return normal_quantile64(normal_cubic_table, p); }
float q32(std::uint32_t bits) { return normal_quantile32(normal_cubic_table, bits); }
std::uint64_t p_of_draw(std::uint32_t bits) { return (std::uint64_t{bits} << 32) | (1u << 31); }

// Runs f(begin, end) on [0, n) in two threads; returns the results.
template <class R, class F>
std::vector<R> parallel(std::uint64_t n, F f) {
  constexpr int threads = 2;
  std::vector<R> out(threads);
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) pool.emplace_back([&, k] { out[k] = f(n * k / threads, n * (k + 1) / threads); });
  for (auto& t : pool) t.join();
  return out;
}

struct ErrorStats {
  double max = 0, sum = 0;
  std::uint64_t n = 0, worst_p = 0;
  void add(std::uint64_t p) {
    const double e = ulp_error(q64(p), ref_z(p));
    sum += e;
    ++n;
    if (!(e <= max)) max = e, worst_p = p;  // NaN counts as worst
  }
  void merge(const ErrorStats& o) {
    if (!(o.max <= max)) max = o.max, worst_p = o.worst_p;
    sum += o.sum;
    n += o.n;
  }
};

// Every (region, octave e, segment s) an integer x reaches, with its first and last x.
struct Segment {
  bool center;
  int e, s;
  std::uint64_t first, last;  // x range
};
std::vector<Segment> segments() {
  std::vector<Segment> v;
  for (bool center : {false, true})
    for (int e = 0; e < kOctaves; ++e)
      for (int s = 0; s < 16; ++s) {
        if (e < kSegmentBits && s % (1 << (kSegmentBits - e)) != 0) continue;  // no integer x lands there
        const std::uint64_t first = (std::uint64_t{1} << e) + (e >= 4 ? std::uint64_t(s) << (e - 4) : std::uint64_t(s) >> (4 - e));
        const std::uint64_t width = e >= 4 ? std::uint64_t{1} << (e - 4) : 1;
        v.push_back({center, e, s, first, first + width - 1});
      }
  return v;
}
// The p below 2^63 whose folded x (in that region) is x.
std::uint64_t p_of_x(bool center, std::uint64_t x) { return center ? kHalf - x : x; }

}  // namespace

TEST(Quantile, ReferenceAgainstKnownValues) {
  // mpmath at 30 digits: Phi^-1(2^-64), Phi^-1(1/4), Phi^-1(1/2 - 2^-64), Phi^-1(2^-33).
  EXPECT_NEAR(static_cast<double>(ref_abs_z(1)), 9.0801551248736126, 1e-14);
  EXPECT_NEAR(static_cast<double>(ref_abs_z(kQuarter)), 0.67448975019608174, 1e-16);
  EXPECT_NEAR(static_cast<double>(ref_abs_z(kQuarter - 1)), 0.67448975019608174, 1e-16);
  EXPECT_NEAR(static_cast<double>(ref_abs_z(kHalf - 1) / 1.3588459104842612e-19L), 1.0, 1e-15);
  EXPECT_NEAR(static_cast<double>(ref_abs_z(std::uint64_t{1} << 31)), 6.3379577545537893, 1e-14);
}

TEST(Quantile, Node16TableIsCorrectlyRounded) {
  // H[m] = Phi^-1((32768 + m + 0.5) / 65536): as a folded position, q = (65535 - 2m) 2^47.
  int not_nearest = 0, near_midpoint = 0;
  for (std::uint32_t m = 0; m < kNode16Entries; ++m) {
    const float h = normal_node16_table[m];
    const long double ref = ref_abs_z(std::uint64_t(65535 - 2 * m) << 47);
    const long double below = std::nextafter(h, 0.0f), above = std::nextafter(h, INFINITY);
    const long double lo_mid = (below + h) / 2, hi_mid = (above + h) / 2;
    const bool nearest = ref >= lo_mid && ref <= hi_mid;
    // Within 1e-16 relative of a midpoint the reference cannot tell which side is nearer.
    const bool ambiguous = std::abs(ref - lo_mid) <= 1e-16L * ref || std::abs(ref - hi_mid) <= 1e-16L * ref;
    if (!nearest && !ambiguous && ++not_nearest <= 5)
      ADD_FAILURE() << "H[" << m << "] = " << std::hexfloat << h << ", exact " << static_cast<double>(ref);
    near_midpoint += ambiguous;
    if (m > 0) ASSERT_LT(normal_node16_table[m - 1], h) << m;  // strictly increasing
  }
  EXPECT_EQ(not_nearest, 0);
  EXPECT_LE(near_midpoint, 2);
  EXPECT_NEAR(normal_node16_table[0], 1.9124056051512084e-5, 1e-12);  // Phi^-1(0.5 + 2^-17)
  EXPECT_NEAR(normal_node16_table[kNode16Entries - 1], 4.3249190408260463, 5e-7);  // Phi^-1(1 - 2^-17)
}

TEST(Quantile, Node16IsTheTableWithASign) {
  for (std::uint32_t k = 0; k < 65536; ++k) {
    const float z = normal_node16(normal_node16_table, k);
    const float want = k >= 32768 ? normal_node16_table[k - 32768] : -normal_node16_table[32767 - k];
    ASSERT_EQ(std::bit_cast<std::uint32_t>(z), std::bit_cast<std::uint32_t>(want)) << k;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(normal_node16(normal_node16_table, 65535 - k)),
              std::bit_cast<std::uint32_t>(-z))
        << k;
    if (k > 0) ASSERT_LT(normal_node16(normal_node16_table, k - 1), z) << k;
    // Only the low 16 bits count.
    ASSERT_EQ(std::bit_cast<std::uint32_t>(normal_node16(normal_node16_table, k | (k * 0x9e370000u))),
              std::bit_cast<std::uint32_t>(z))
        << k;
  }
  EXPECT_EQ(normal_node16(normal_node16_table, 0), -normal_node16_table[32767]);
  EXPECT_EQ(normal_node16(normal_node16_table, 32768), normal_node16_table[0]);
}

TEST(Quantile, KnownValues) {
  EXPECT_EQ(std::bit_cast<std::uint32_t>(q64(kHalf)), 0u);  // +0
  const float lowest = q64(1), highest = q64(~std::uint64_t{0});
  EXPECT_TRUE(std::isfinite(lowest));
  EXPECT_NEAR(lowest, -9.0801551, 1e-6);
  EXPECT_EQ(highest, -lowest);
  EXPECT_GT(highest, 0.0f);
  EXPECT_LE(ulp_error(q64(kQuarter), -0.67448975019608174L), 0.5);
  EXPECT_LE(ulp_error(q64(3 * kQuarter), 0.67448975019608174L), 0.5);
  // The plain normal's extremes: a 32-bit draw reaches |z| = 6.338 (Phi^-1(2^-33)).
  EXPECT_LE(ulp_error(q32(0), -6.3379577545537893L), 1.0);
  EXPECT_LE(ulp_error(q32(0xffffffffu), 6.3379577545537893L), 1.0);
  // Next to the center: z = +-sqrt(2 pi) 2^-64 (1 + O(2^-128)).
  EXPECT_LE(ulp_error(q64(kHalf + 1), 1.3588459104842612e-19L), 0.5);
  EXPECT_LE(ulp_error(q64(kHalf - 1), -1.3588459104842612e-19L), 0.5);
}

TEST(Quantile, ExactlyAntisymmetric) {
  SplitMix64 rng{1};
  auto check = [](std::uint64_t p) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(q64(0 - p)), std::bit_cast<std::uint32_t>(-q64(p))) << std::hex << p;
  };
  for (int i = 0; i < 1000000; ++i) {
    const std::uint64_t p = rng() >> (rng() & 63);
    if (p != 0) check(p);
  }
  for (const Segment& g : segments()) {
    check(p_of_x(g.center, g.first));
    check(p_of_x(g.center, g.last));
  }
  for (std::uint32_t bits = 0; bits < (1u << 20); ++bits) {
    const std::uint32_t b = bits * 4099u;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(q32(~b)), std::bit_cast<std::uint32_t>(-q32(b))) << b;
  }
}

TEST(Quantile, AccurateAtEverySegmentBoundary) {
  ErrorStats st;
  for (const Segment& g : segments())
    for (std::uint64_t x : {g.first, g.first + 1, g.last - 1, g.last})
      if (x >= g.first && x <= g.last && x != 0) st.add(p_of_x(g.center, x));
  st.add(kQuarter);
  std::printf("segment boundaries: max %.3f ulp, mean %.3f ulp over %llu positions (worst p = %#llx)\n", st.max,
              st.sum / static_cast<double>(st.n), static_cast<unsigned long long>(st.n),
              static_cast<unsigned long long>(st.worst_p));
  EXPECT_LE(st.max, kMaxUlp) << std::hex << st.worst_p;
}

TEST(Quantile, AccurateOnRandomPositions) {
  // Half the sample uniform in p (where draws land), half log-uniform in x over both regions (every
  // octave equally, the far tail and the near-zero center included).
  const std::uint64_t n = kAsan ? 100000 : 2000000;
  auto work = [](std::uint64_t b, std::uint64_t e) {
    SplitMix64 rng{b + 7};
    ErrorStats st;
    for (std::uint64_t i = b; i < e; ++i) {
      std::uint64_t p = rng();
      if (i & 1) {
        const int octave = static_cast<int>(rng() % kOctaves);
        const std::uint64_t x = (std::uint64_t{1} << octave) | (rng() & ((std::uint64_t{1} << octave) - 1));
        p = p_of_x(rng() & 1, x);
        if (rng() & 1) p = 0 - p;
      }
      if (p != 0) st.add(p);
    }
    return st;
  };
  ErrorStats st;
  for (const ErrorStats& s : parallel<ErrorStats>(n, work)) st.merge(s);
  std::printf("random positions: max %.3f ulp, mean %.3f ulp over %llu (worst p = %#llx)\n", st.max,
              st.sum / static_cast<double>(st.n), static_cast<unsigned long long>(st.n),
              static_cast<unsigned long long>(st.worst_p));
  EXPECT_LE(st.max, kMaxUlp) << std::hex << st.worst_p;
  EXPECT_LE(st.sum / static_cast<double>(st.n), 0.27);
}

TEST(Quantile, MonotoneAcrossBoundariesAndAlongRuns) {
  // Across every boundary, and along the first and last 2048 steps of one t quantum in every segment
  // (where the cubic meets its neighbours), in increasing p over (0, 2^63]; the upper half mirrors it.
  int back = 0;
  float worst_step = 0;
  auto expect_le = [&](std::uint64_t pa, std::uint64_t pb) {
    const float a = q64(pa), b = q64(pb);
    if (a > b) {
      worst_step = std::max(worst_step, a - b);
      if (++back <= 5) ADD_FAILURE() << "q(" << std::hex << pa << ") = " << std::hexfloat << a << " > q(" << pb << ") = " << b;
    }
  };
  for (const Segment& g : segments()) {
    const std::uint64_t quantum = std::max<std::uint64_t>(1, (std::uint64_t{1} << g.e) >> 27);
    const std::uint64_t run = 2048 * quantum;
    for (std::uint64_t x0 : {g.first, g.last + 1 - g.first > run ? g.last + 1 - run : g.first}) {
      // Up to one step past the segment's last x: into the next segment's first.
      for (std::uint64_t x = x0; x <= g.last && x < x0 + run; x += quantum) {
        const std::uint64_t pa = p_of_x(g.center, x), pb = p_of_x(g.center, x + quantum);
        if (g.center)
          expect_le(pb, pa);  // p = 2^63 - x falls as x grows
        else
          expect_le(pa, pb);
      }
    }
  }
  // The seams: the tail's end, q = 2^62, the center's start; the center's end at p = 2^63.
  expect_le(kQuarter - 1, kQuarter);
  expect_le(kQuarter, kQuarter + 1);
  expect_le(kHalf - 1, kHalf);
  expect_le(kHalf, kHalf + 1);
  // Dense random pairs at every scale of distance.
  SplitMix64 rng{3};
  for (int i = 0; i < (kAsan ? 200000 : 2000000); ++i) {
    const std::uint64_t a = rng() | 1, step = (rng() >> (rng() & 63)) | 1;
    const std::uint64_t b = a + step;
    if (b > a) expect_le(a, b);
  }
  EXPECT_EQ(back, 0) << "worst step back " << worst_step;
}

TEST(Quantile, Quantile32EqualsQuantile64) {
  auto same = [](std::uint32_t bits) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(q32(bits)), std::bit_cast<std::uint32_t>(q64(p_of_draw(bits))))
        << std::hex << bits;
  };
  // Every octave and segment boundary of x / 2^31 (odd: 2h + 1 in the tail, ~2h in the center),
  // each side, both signs.
  int checked = 0;
  for (int k = 0; k < 32; ++k)
    for (std::uint32_t s = 0; s < 16; ++s)
      for (int j = -4; j <= 4; ++j) {
        const std::uint64_t x = (std::uint64_t{1} << k) + (k >= 4 ? std::uint64_t{s} << (k - 4) : 0) + j;
        if (x >= (std::uint64_t{1} << 31) || x % 2 == 0) continue;
        const auto x32 = static_cast<std::uint32_t>(x);
        const std::uint32_t h_tail = (x32 - 1) >> 1, h_center = ~x32 >> 1;
        for (std::uint32_t h : {h_tail, h_center}) {
          same(h);
          same(~h);
          checked += 2;
        }
      }
  EXPECT_GT(checked, 3000);
  const std::uint64_t n = kAsan ? 10000000 : 100000000;
  auto work = [](std::uint64_t b, std::uint64_t e) {
    SplitMix64 rng{b + 11};
    std::uint64_t bad = 0;
    for (std::uint64_t i = b; i < e; i += 2) {
      const std::uint64_t r = rng();
      for (const auto bits : {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(r >> 32)})
        bad += std::bit_cast<std::uint32_t>(q32(bits)) != std::bit_cast<std::uint32_t>(q64(p_of_draw(bits)));
    }
    return bad;
  };
  std::uint64_t bad = 0;
  for (std::uint64_t b : parallel<std::uint64_t>(n, work)) bad += b;
  EXPECT_EQ(bad, 0u) << "of " << n << " random draws";
}
