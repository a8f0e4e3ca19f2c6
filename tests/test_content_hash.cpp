// The report's content hash: XXH3-64 of the raw bytes (backends/content_hash.hpp), with known values
// from xxhash itself, streaming equal to one-shot however the bytes are split, and the chunked
// device-to-host path (read_on_host, hash_bytes through a simulated device) equal to the host's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/content_hash.hpp>
#include <layerinit/core/errors.hpp>
#include "simulated_node.hpp"

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

// A copy goes on from the same bytes, apart from its original: each digest is its own bytes'.
TEST(ContentHash, ACopyGoesOnApart) {
  const auto data = pattern(10000);
  std::vector<unsigned char> other = data;
  other[7000] ^= 1;
  ContentHash a;
  a.update(data.data(), 5000);
  ContentHash b = a.copy();
  a.update(data.data() + 5000, 5000);
  b.update(other.data() + 5000, 5000);
  EXPECT_EQ(a.digest(), content_hash(data.data(), data.size()));
  EXPECT_EQ(b.digest(), content_hash(other.data(), other.size()));
  EXPECT_NE(a.digest(), b.digest());
}

TEST(ContentHash, ReadOnHostCopiesDeviceBytesInStagingSizedPieces) {
  const layerinit::testing::SimulatedNode node(1);
  const auto device = make_backend("cuda");
  backend& dev = *device;
  const auto data = pattern(10007, 7);
  for (std::size_t staging_bytes : {1u, 1000u, 10006u, 10007u, 20000u}) {
    SCOPED_TRACE(staging_bytes);
    std::vector<unsigned char> staging(staging_bytes), seen;
    (void)node.copies();
    read_on_host(dev, data.data(), data.size(), staging, [&](const void* host, std::uint64_t offset, std::uint64_t n) {
      EXPECT_EQ(host, staging.data());
      EXPECT_EQ(offset, seen.size());
      const auto* p = static_cast<const unsigned char*>(host);
      seen.insert(seen.end(), p, p + n);
    });
    EXPECT_EQ(seen, data);
    const std::vector<std::uint64_t> copies = node.copies();
    ASSERT_EQ(copies.size(), (data.size() + staging_bytes - 1) / staging_bytes);
    for (std::size_t i = 0; i + 1 < copies.size(); ++i) EXPECT_EQ(copies[i], staging_bytes);
  }
  std::vector<unsigned char> none;
  EXPECT_THROW(read_on_host(dev, data.data(), data.size(), none, [](const void*, std::uint64_t, std::uint64_t) {}),
               layerinit::logic_error);  // misuse

  // Host memory: one piece, the caller's own pointer, no copy.
  auto host = make_host_backend(1);
  int calls = 0;
  read_on_host(*host, data.data(), data.size(), none, [&](const void* p, std::uint64_t offset, std::uint64_t n) {
    ++calls;
    EXPECT_EQ(p, data.data());
    EXPECT_EQ(offset, 0u);
    EXPECT_EQ(n, data.size());
  });
  EXPECT_EQ(calls, 1);
}

// hash_bytes reads device memory in chunks of 64 MiB: a buffer of two chunks and a tail hashes, through
// a simulated device, to the host backend's one-shot hash of the same bytes.
TEST(ContentHash, HashBytesThroughDeviceChunksEqualsHost) {
  const layerinit::testing::SimulatedNode node(1);
  const auto device = make_backend("cuda");
  backend& dev = *device;
  auto host = make_host_backend(1);
  const auto data = pattern((128ull << 20) + 12345, 3);
  const std::uint64_t expected = content_hash(data.data(), data.size());
  EXPECT_EQ(hash_bytes(*host, data.data(), data.size()), expected);
  EXPECT_EQ(hash_bytes(dev, data.data(), data.size()), expected);
  EXPECT_EQ(node.copies(), (std::vector<std::uint64_t>{64ull << 20, 64ull << 20, 12345}));
  EXPECT_EQ(hash_bytes(dev, data.data(), 0), content_hash(nullptr, 0));
  EXPECT_TRUE(node.copies().empty());
  auto dry = make_dry_backend();
  EXPECT_THROW(hash_bytes(*dry, data.data(), 16), std::logic_error);
}
