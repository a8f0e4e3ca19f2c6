// The shared transforms from random bits to values (kernels/transforms.hpp): the exact value set of
// unit_01 (fp32 uniform), and the explicit fma, bit casts and clamp every transform is built from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include <layerinit/kernels/transforms.hpp>

using namespace layerinit;

TEST(Transforms, Unit01IsExactInHalfOpenInterval) {
  for (std::uint32_t t = 0; t < (1u << 24); ++t) {
    const float v = transforms::unit_01(t << 8 | (t & 0xff));
    ASSERT_EQ(static_cast<double>(v), std::ldexp(static_cast<double>(t), -24));
    ASSERT_TRUE(v >= 0.0f && v < 1.0f);
  }
  EXPECT_EQ(transforms::unit_01(0u), 0.0f);
  EXPECT_EQ(transforms::unit_01(0xffffffffu), 1.0f - 0x1p-24f);
}

// fmaf_ rounds once: (1 + 2^-23)(1 - 2^-23) - 1 is -2^-46 exactly, which two roundings lose.
TEST(Transforms, FmaRoundsOnce) {
  const float a = 1.0f + 0x1p-23f, b = 1.0f - 0x1p-23f;
  EXPECT_EQ(transforms::fmaf_(a, b, -1.0f), -0x1p-46f);
  volatile float product = a * b;  // rounded to 1
  EXPECT_EQ(product - 1.0f, 0.0f);
}

TEST(Transforms, BitCastsRoundTrip) {
  EXPECT_EQ(transforms::as_bits(1.0f), 0x3f800000u);
  EXPECT_EQ(transforms::as_bits(-0.0f), 0x80000000u);
  EXPECT_EQ(transforms::as_float(0x7f800000u), std::numeric_limits<float>::infinity());
  for (std::uint32_t u : {0u, 1u, 0x3f800000u, 0xbf7fffffu, 0x7f7fffffu}) EXPECT_EQ(transforms::as_bits(transforms::as_float(u)), u);
}

TEST(Transforms, ClampKeepsInsideAndLimitsOutside) {
  EXPECT_EQ(transforms::clamp(0.5f, 0.0f, 1.0f), 0.5f);
  EXPECT_EQ(transforms::clamp(-2.0f, -1.0f, 1.0f), -1.0f);
  EXPECT_EQ(transforms::clamp(2.0f, -1.0f, 1.0f), 1.0f);
  EXPECT_EQ(transforms::clamp(1.0f, 1.0f, 1.0f), 1.0f);
}
