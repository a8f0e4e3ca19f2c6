// A minimal safetensors reader for tests, independent of the writer: it checks the format's rules
// (header length, padding to 8 bytes, offsets that tile the data with no trailing bytes) with gtest
// expectations and returns name -> (dtype, shape, bytes).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace layerinit::testing {

struct SafetensorsTensor {
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::string bytes;
};
struct SafetensorsFile {
  nlohmann::json metadata;
  std::map<std::string, SafetensorsTensor> tensors;
  std::vector<std::string> order;  // header order
};

inline SafetensorsFile parse_safetensors(const std::filesystem::path& p) {
  const std::string raw = slurp(p);
  SafetensorsFile out;
  EXPECT_GE(raw.size(), 8u);
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(raw[b]);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  EXPECT_LE(n, 100'000'000u);
  EXPECT_LE(8 + n, raw.size());
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const nlohmann::json h = nlohmann::json::parse(header);
  const std::uint64_t data_size = raw.size() - 8 - n;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& [name, e] : h.items()) {
    if (name == "__metadata__") {
      out.metadata = e;
      continue;
    }
    SafetensorsTensor t;
    t.dtype = e.at("dtype");
    t.shape = e.at("shape").get<std::vector<std::uint64_t>>();
    const auto off = e.at("data_offsets").get<std::vector<std::uint64_t>>();
    EXPECT_EQ(off.size(), 2u);
    std::uint64_t count = 1;
    for (auto d : t.shape) count *= d;
    const std::uint64_t es = t.dtype == "F32" ? 4 : 2;
    EXPECT_EQ(off[1] - off[0], count * es) << name;
    EXPECT_LE(off[1], data_size) << name;
    t.bytes = raw.substr(8 + n + off[0], off[1] - off[0]);
    spans.emplace_back(off[0], off[1]);
    out.tensors[name] = std::move(t);
    out.order.push_back(name);
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t at = 0;
  for (auto [b, e] : spans) {
    EXPECT_EQ(b, at) << "offsets tile the data: no gap, no overlap";
    at = e;
  }
  EXPECT_EQ(at, data_size) << "no trailing bytes";
  return out;
}

}  // namespace layerinit::testing
