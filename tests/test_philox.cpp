// Philox4x32-10 through the header the kernels use, against the Random123 known-answer vectors
// (Random123's tests/kat_vectors, "philox4x32 10" lines), and the key/counter layout.
#include <gtest/gtest.h>

#include <set>

#include <layerinit/kernels/philox.hpp>

using layerinit::rng::Block;

namespace {
void expect_block(Block b, std::uint32_t w0, std::uint32_t w1, std::uint32_t w2, std::uint32_t w3) {
  EXPECT_EQ(b.w[0], w0);
  EXPECT_EQ(b.w[1], w1);
  EXPECT_EQ(b.w[2], w2);
  EXPECT_EQ(b.w[3], w3);
}
}  // namespace

TEST(Philox, KnownAnswerZero) {
  expect_block(layerinit::rng::philox4x32_10(0, 0, 0, 0, 0, 0), 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
}

TEST(Philox, KnownAnswerOnes) {
  const std::uint32_t f = 0xffffffffu;
  expect_block(layerinit::rng::philox4x32_10(f, f, f, f, f, f), 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
}

TEST(Philox, KnownAnswerPi) {
  expect_block(layerinit::rng::philox4x32_10(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0),
               0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);
}

TEST(Philox, GroupCounterIsLow64BitsOfCounter) {
  const std::uint64_t key = 0x299f31d0a4093822ull;
  const std::uint64_t g = 0x85a308d3243f6a88ull;
  Block a = layerinit::rng::group_bits(key, g);
  Block b = layerinit::rng::philox4x32_10(0x243f6a88, 0x85a308d3, 0, 0, 0xa4093822, 0x299f31d0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.w[i], b.w[i]);
}

// The key schedule the store loops keep in registers gives group_bits' blocks bit for bit.
TEST(Philox, KeyScheduleGivesTheSameBlocks) {
  const std::uint64_t keys[] = {0, 1, 0x299f31d0a4093822ull, ~0ull, 0xffffffff00000000ull};
  const std::uint64_t groups[] = {0, 1, 0xffffffffull, 0x100000000ull, 0x85a308d3243f6a88ull, ~0ull};
  for (std::uint64_t key : keys) {
    const layerinit::rng::KeySchedule ks = layerinit::rng::key_schedule(key);
    EXPECT_EQ(ks.k0[0], static_cast<std::uint32_t>(key));
    EXPECT_EQ(ks.k1[9], static_cast<std::uint32_t>((key >> 32) + 9u * 0xBB67AE85u));
    for (std::uint64_t g : groups) {
      const Block a = layerinit::rng::group_bits(key, g), b = layerinit::rng::group_bits(ks, g);
      for (int i = 0; i < 4; ++i) EXPECT_EQ(a.w[i], b.w[i]) << std::hex << key << " " << g;
    }
  }
  // And the known answer through the schedule.
  const Block pi = layerinit::rng::group_bits(layerinit::rng::key_schedule(0x299f31d0a4093822ull), 0x85a308d3243f6a88ull);
  const Block want = layerinit::rng::philox4x32_10(0x243f6a88, 0x85a308d3, 0, 0, 0xa4093822, 0x299f31d0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pi.w[i], want.w[i]);
}

TEST(Philox, Fnv1a64KnownValues) {
  // Published FNV-1a 64 test values: "" and "a" and "foobar".
  EXPECT_EQ(layerinit::rng::tensor_key(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(layerinit::rng::tensor_key("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(layerinit::rng::tensor_key("foobar"), 0x85944171f73967e8ull);
}

TEST(Philox, KeysDifferAcrossSeedsAndNames) {
  std::set<std::uint64_t> keys;
  for (std::uint64_t seed = 0; seed < 64; ++seed)
    for (int layer = 0; layer < 64; ++layer)
      keys.insert(layerinit::rng::philox_key(
          seed, layerinit::rng::tensor_key("model.layers." + std::to_string(layer) + ".mlp.up_proj.weight")));
  EXPECT_EQ(keys.size(), 64u * 64u);
}
