// The report's content hash: XXH3-64 of the raw bytes (backends/content_hash.hpp), with known values
// from xxhash itself, and streaming equal to one-shot however the bytes are split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <layerinit/backends/content_hash.hpp>

using namespace layerinit;

namespace {

std::vector<unsigned char> pattern(std::size_t n, std::uint32_t seed = 1) {
  std::vector<unsigned char> v(n);
  std::uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(x >> 24);
  }
  return v;
}

}  // namespace

// XXH3_64bits with seed 0. "" is the value xxhash's own sanity test (xxhsum) checks; the others were
// computed with Python's xxhash 4.1.0 (xxHash 0.8.4): xxhash.xxh3_64(b).hexdigest(). 2560 bytes
// (0, 1, ..., 255 ten times) goes through XXH3's long-input path (> 240 bytes, several stripes).
TEST(ContentHash, KnownXxh3Values) {
  EXPECT_EQ(content_hash(nullptr, 0), 0x2d06800538d394c2ull);
  EXPECT_EQ(content_hash("a", 1), 0xe6c632b61e964e1full);
  EXPECT_EQ(content_hash("abc", 3), 0x78af5f94892f3950ull);
  EXPECT_EQ(content_hash("xxhash", 6), 0xaa4c2b42ae6b13deull);
  std::vector<unsigned char> ramp(2560);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(content_hash(ramp.data(), ramp.size()), 0xce94c58d4049e3e5ull);
  EXPECT_EQ(ContentHash().digest(), 0x2d06800538d394c2ull);
}

TEST(ContentHash, StreamingEqualsOneShotForEverySplit) {
  const auto data = pattern(100003);
  const std::uint64_t whole = content_hash(data.data(), data.size());
  for (std::size_t piece : {1u, 3u, 64u, 240u, 241u, 1000u, 1024u, 4096u, 65536u, 100003u}) {
    ContentHash h;
    for (std::size_t off = 0; off < data.size(); off += piece) h.update(data.data() + off, std::min(piece, data.size() - off));
    EXPECT_EQ(h.digest(), whole) << "pieces of " << piece;
  }
  // digest() does not end the stream; empty updates change nothing; a moved state carries on.
  ContentHash h;
  h.update(data.data(), 500);
  EXPECT_EQ(h.digest(), content_hash(data.data(), 500));
  h.update(data.data() + 500, 0);
  ContentHash moved = std::move(h);
  moved.update(data.data() + 500, data.size() - 500);
  EXPECT_EQ(moved.digest(), whole);
}
