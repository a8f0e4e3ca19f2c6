// What a writer holds per declared dataset: an HDF5 writer keeps open only the datasets being written
// (an open HDF5 dataset holds about 20 KiB: 10^5 tiny tensors held open took gigabytes), and both
// formats write the same bytes for many datasets as for few. Emit's cost against the tensor count is
// measured by bench/cpu/many_tensors.py (docs/benchmarks.md), not here.
#include <hdf5.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <layerinit/checkpoint/writer.hpp>
#include <nlohmann/json.hpp>

#include "safetensors_reader.hpp"
#include "test_util.hpp"

using namespace layerinit;
using layerinit::testing::TempDir;

namespace {

std::vector<DatasetSpec> tiny_datasets(std::size_t n) {
  std::vector<DatasetSpec> d;
  for (std::size_t k = 0; k < n; ++k) d.push_back({"model.layers." + std::to_string(k) + ".w", {2, 3}, DType::bf16, 0});
  return d;
}

// Datasets open in this process, in any HDF5 file.
ssize_t open_datasets() { return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_DATASET); }

}  // namespace

TEST(WriterScaling, Hdf5KeepsOnlyTheDatasetBeingWrittenOpen) {
  TempDir dir;
  const std::size_t n = 2000;
  auto w = open_hdf5_writer(dir / "m.h5", tiny_datasets(n), {}, {});
  EXPECT_EQ(open_datasets(), 0);  // created and closed
  const std::uint16_t six[6] = {1, 2, 3, 4, 5, 6};
  for (std::size_t k = 0; k < n; ++k) {
    w->write(k, 0, six, 3);  // half: the dataset is open while it is written
    EXPECT_EQ(open_datasets(), 1) << k;
    w->write(k, 3, six + 3, 3);
    EXPECT_EQ(open_datasets(), 0) << k;
  }
  // Interleaved writes keep each unfinished dataset open, and only those.
  TempDir dir2;
  auto v = open_hdf5_writer(dir2 / "m.h5", tiny_datasets(3), {}, {});
  for (std::size_t k = 0; k < 3; ++k) v->write(k, 0, six, 3);
  EXPECT_EQ(open_datasets(), 3);
  for (std::size_t k = 0; k < 3; ++k) v->write(k, 3, six + 3, 3);
  EXPECT_EQ(open_datasets(), 0);
  w->commit();
  v->commit();
  EXPECT_EQ(layerinit::testing::slurp(dir / "m.h5").empty(), false);
}

TEST(WriterScaling, SafetensorsHeaderKeepsDeclarationOrder) {
  // The header is appended entry by entry (no per-key search): the order stays the declared one.
  TempDir dir;
  std::vector<DatasetSpec> d = tiny_datasets(3000);
  std::swap(d[0], d[2999]);
  auto w = open_safetensors_writer(dir / "st", d, {}, {});
  const std::uint16_t six[6] = {};
  for (std::size_t k = 0; k < d.size(); ++k) w->write(k, 0, six, 6);
  w->commit();
  const auto file = layerinit::testing::parse_safetensors(dir / "st" / "model.safetensors");  // checks offsets
  ASSERT_EQ(file.tensors.size(), d.size());
  const std::string raw = layerinit::testing::slurp(dir / "st" / "model.safetensors");
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(raw[b]);
  const auto header = nlohmann::ordered_json::parse(raw.substr(8, n));
  std::vector<std::string> keys;
  for (const auto& [key, value] : header.items()) keys.push_back(key);
  ASSERT_EQ(keys.size(), d.size() + 1);
  EXPECT_EQ(keys[0], "__metadata__");
  for (std::size_t k = 0; k < d.size(); ++k) {
    EXPECT_EQ(keys[k + 1], d[k].name);
    EXPECT_EQ(header[d[k].name]["data_offsets"][0], 12 * k);
  }
}
