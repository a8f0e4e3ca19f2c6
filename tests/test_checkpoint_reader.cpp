// The checkpoint reader (checkpoint/reader.hpp): what layerinit's writers and emits write reads back
// bit for bit (safetensors one file, a directory, shards with an index, rank files; HDF5 one file and
// a parallel emit's master from any working directory); element ranges at every offset equal the
// whole tensor's slice; metadata; files of other writers (0-d, empty, f64/i32, big-endian, groups);
// and every refusal with its message; a checkpoint of many shards holds a few descriptors at a time.
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/parallel.hpp>
#include <layerinit/checkpoint/reader.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/plan/plan.hpp>
#include "hdf5_reader.hpp"
#include "safetensors_reader.hpp"
#include "test_util.hpp"
#include "thread_collective.hpp"

namespace fs = std::filesystem;
using namespace layerinit;
using layerinit::testing::parse_safetensors;
using layerinit::testing::slurp;
using layerinit::testing::TempDir;
using layerinit::testing::write_file;

namespace {

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g() & 0xff);
  return s;
}

std::string read_all(CheckpointReader& r, std::size_t k) {
  std::string out(r.tensors()[k].bytes(), '\0');
  r.read(k, 0, numel(r.tensors()[k].shape), out.data());
  return out;
}

std::map<std::string, std::string> read_by_name(CheckpointReader& r) {
  std::map<std::string, std::string> m;
  for (std::size_t k = 0; k < r.tensors().size(); ++k) m[r.tensors()[k].name] = read_all(r, k);
  return m;
}

// Writes `d` with random bytes through the format's writer; returns name -> bytes.
std::map<std::string, std::string> write_checkpoint(CheckpointFormat f, const fs::path& target, const std::vector<DatasetSpec>& d,
                                                    const CheckpointMetadata& meta, const WriterOptions& opts, bool single_file = false) {
  auto w = single_file ? open_safetensors_file_writer(target, d, meta, opts) : open_checkpoint_writer(f, target, d, meta, opts);
  std::map<std::string, std::string> bytes;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const std::string b = random_bytes(numel(d[i].shape) * dtype_size(d[i].dtype), static_cast<std::uint32_t>(i + 1));
    // In slabs where the caller promised them, else whole.
    const std::uint64_t n = numel(d[i].shape), slab = d[i].slab_elements ? d[i].slab_elements : std::max<std::uint64_t>(n, 1);
    for (std::uint64_t at = 0; at < n; at += slab) w->write(i, at, b.data() + at * dtype_size(d[i].dtype), std::min(slab, n - at));
    bytes[d[i].name] = b;
  }
  w->commit();
  return bytes;
}

const std::vector<DatasetSpec> kDatasets = {
    {"z.layers.weight", {3, 5, 7}, DType::bf16, 35},
    {"b.bias", {4}, DType::f16, 0},
    {"m.proj", {2, 3}, DType::f32, 0},
    {"e.empty", {0, 4}, DType::bf16, 0},
    {"a.four", {2, 3, 4, 5}, DType::f32, 20},
};

CheckpointMetadata test_meta() {
  CheckpointMetadata m;
  m.dtype = "bf16";
  m.seed = "7";
  m.extra["note"] = "reader test";
  return m;
}

// The message of the checkpoint_invalid that opening `p` throws.
std::string refusal(const fs::path& p) {
  try {
    open_checkpoint_reader(p);
  } catch (const checkpoint_invalid& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not checkpoint_invalid: ") + e.what();
  }
  return "not refused";
}

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int b = 0; b < 8; ++b) s[b] = static_cast<char>((v >> (8 * b)) & 0xff);
  return s;
}

// The bytes of a .safetensors file of `header` (not padded) and `data`.
std::string st(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }
void write_st(const fs::path& p, const std::string& header, const std::string& data) { write_file(p, st(header, data)); }

struct HdfFile {
  explicit HdfFile(const fs::path& p) : id(H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
  ~HdfFile() { H5Fclose(id); }
  // A dataset of `type`, `dims` (nullptr: a scalar), holding `data`.
  void dataset(const char* name, hid_t type, int rank, const hsize_t* dims, const void* data) {
    hid_t space = dims ? H5Screate_simple(rank, dims, nullptr) : H5Screate(H5S_SCALAR);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t d = H5Dcreate2(id, name, type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(d, 0) << name;
    ASSERT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
    H5Dclose(d);
    H5Pclose(lcpl);
    H5Sclose(space);
  }
  hid_t id;
};

}  // namespace

TEST(CheckpointReader, WritersReadBackBitForBit) {
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5}) {
    SCOPED_TRACE(std::string(format_name(f)));
    TempDir dir;
    const fs::path target = dir / (f == CheckpointFormat::hdf5 ? "ckpt.h5" : "ckpt");
    WriterOptions opts;
    opts.max_chunk_bytes = 64;  // HDF5: chunks of a few rows, reads across them
    const auto written = write_checkpoint(f, target, kDatasets, test_meta(), opts);
    const auto r = open_checkpoint_reader(target);
    ASSERT_EQ(r->tensors().size(), kDatasets.size());
    // safetensors: file order; HDF5: by name (the order HDF5 keeps).
    std::vector<std::string> order;
    for (const auto& d : kDatasets) order.push_back(d.name);
    if (f == CheckpointFormat::hdf5) std::sort(order.begin(), order.end());
    EXPECT_EQ(r->format(), f == CheckpointFormat::hdf5 ? "hdf5" : "safetensors");
    for (std::size_t k = 0; k < order.size(); ++k) {
      const StoredTensor& t = r->tensors()[k];
      const DatasetSpec& d = *std::find_if(kDatasets.begin(), kDatasets.end(), [&](const DatasetSpec& s) { return s.name == order[k]; });
      SCOPED_TRACE(t.name);
      EXPECT_EQ(t.name, order[k]);
      EXPECT_EQ(t.shape, d.shape);
      EXPECT_EQ(t.dtype, d.dtype);
      const char* st_name = d.dtype == DType::bf16 ? "BF16" : d.dtype == DType::f16 ? "F16" : "F32";
      EXPECT_EQ(t.dtype_text, f == CheckpointFormat::hdf5 ? std::string(dtype_name(d.dtype)) : std::string(st_name));
      EXPECT_EQ(t.file, f == CheckpointFormat::hdf5 ? "" : "model.safetensors");
      EXPECT_TRUE(t.global_shape.empty());
      EXPECT_TRUE(t.offset.empty());
      EXPECT_EQ(t.bytes(), written.at(t.name).size());
      EXPECT_TRUE(read_all(*r, k) == written.at(t.name));
    }
    // The metadata as written: layerinit's keys (and safetensors' "format").
    std::map<std::string, std::string> expected;
    if (f == CheckpointFormat::hdf5) {
      expected = layerinit::testing::read_hdf5_root_attributes(target);
    } else {
      const auto file = parse_safetensors(target / "model.safetensors");
      for (const auto& [k, v] : file.metadata.items()) expected[k] = v.get<std::string>();
      EXPECT_EQ(r->metadata().at("format"), "pt");
    }
    EXPECT_EQ(r->metadata(), expected);
    EXPECT_EQ(r->metadata().at("seed"), "7");
    EXPECT_EQ(r->metadata().at("note"), "reader test");
    EXPECT_EQ(r->metadata().count("layerinit.rank_files"), 0u);
  }
}

// Every range [first, first + n) of 3-D and 4-D tensors, across rows, planes and HDF5 chunks,
// equals the whole tensor's bytes there.
TEST(CheckpointReader, EveryRangeIsTheWholeTensorsSlice) {
  const std::vector<DatasetSpec> d = {{"t3", {3, 4, 5}, DType::bf16, 20}, {"t4", {2, 3, 2, 3}, DType::f32, 0}};
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5}) {
    SCOPED_TRACE(std::string(format_name(f)));
    TempDir dir;
    const fs::path target = dir / (f == CheckpointFormat::hdf5 ? "ckpt.h5" : "ckpt");
    WriterOptions opts;
    opts.max_chunk_bytes = 24;  // HDF5: chunks of fewer elements than a row
    write_checkpoint(f, target, d, {}, opts);
    const auto r = open_checkpoint_reader(target);
    for (std::size_t k = 0; k < 2; ++k) {
      const std::string whole = read_all(*r, k);
      const std::uint64_t count = numel(r->tensors()[k].shape), es = whole.size() / count;
      std::uint64_t failures = 0;
      for (std::uint64_t first = 0; first <= count; ++first)
        for (std::uint64_t n = 0; first + n <= count; ++n) {
          std::string part(n * es, '\x55');
          r->read(k, first, n, part.data());
          if (part != whole.substr(first * es, n * es) && ++failures < 5) ADD_FAILURE() << r->tensors()[k].name << " [" << first << ", +" << n << ")";
        }
      EXPECT_EQ(failures, 0u);
    }
    // Out of range, and a tensor of unknown element size: misuse.
    char buf[8];
    EXPECT_THROW(r->read(0, 60, 1, buf), layerinit::logic_error);
    EXPECT_THROW(r->read(0, 59, 2, buf), layerinit::logic_error);
    EXPECT_THROW(r->read(2, 0, 1, buf), layerinit::logic_error);
  }
}

TEST(CheckpointReader, ShardsWithAnIndexReadInShardOrder) {
  TempDir dir;
  WriterOptions opts;
  opts.max_shard_size = 200;  // kDatasets' 210, 8, 24, 0 and 480 bytes: three shards
  opts.config_json = "{\"model_type\": \"none\"}";
  const auto written = write_checkpoint(CheckpointFormat::safetensors, dir / "ckpt", kDatasets, test_meta(), opts);
  ASSERT_TRUE(fs::exists(dir / "ckpt" / "model.safetensors.index.json"));
  ASSERT_TRUE(fs::exists(dir / "ckpt" / "config.json"));
  const auto r = open_checkpoint_reader(dir / "ckpt");
  EXPECT_EQ(r->format(), "safetensors");
  std::vector<std::pair<std::string, std::string>> seen;
  for (const auto& t : r->tensors()) seen.emplace_back(t.name, t.file);
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, std::string>>{{"z.layers.weight", "model-00001-of-00003.safetensors"},
                                                                     {"b.bias", "model-00002-of-00003.safetensors"},
                                                                     {"m.proj", "model-00002-of-00003.safetensors"},
                                                                     {"e.empty", "model-00002-of-00003.safetensors"},
                                                                     {"a.four", "model-00003-of-00003.safetensors"}}));
  EXPECT_EQ(read_by_name(*r), written);
  EXPECT_EQ(r->metadata().at("seed"), "7");
  EXPECT_EQ(r->metadata().at("format"), "pt");
}

TEST(CheckpointReader, ASingleSafetensorsFile) {
  TempDir dir;
  const auto written = write_checkpoint(CheckpointFormat::safetensors, dir / "one.safetensors", kDatasets, test_meta(), {}, true);
  const auto r = open_checkpoint_reader(dir / "one.safetensors");
  EXPECT_EQ(r->format(), "safetensors");
  for (const auto& t : r->tensors()) EXPECT_EQ(t.file, "");
  EXPECT_EQ(read_by_name(*r), written);
  // Under another name it is still recognised by its header.
  fs::rename(dir / "one.safetensors", dir / "renamed.bin");
  EXPECT_EQ(read_by_name(*open_checkpoint_reader(dir / "renamed.bin")), written);
}

// Tensors of other writers: 0-d (safetensors allows shape []), empty, a dtype layerinit does not make.
TEST(CheckpointReader, ScalarsEmptyTensorsAndOtherDtypes) {
  TempDir dir;
  const float pi = 3.25f;
  const double e = 2.5;
  std::string data(reinterpret_cast<const char*>(&pi), 4);
  data += std::string(reinterpret_cast<const char*>(&e), 8);
  write_st(dir / "x.safetensors",
           R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"none":{"dtype":"BF16","shape":[0,3],"data_offsets":[4,4]},)"
           R"("d":{"dtype":"F64","shape":[1],"data_offsets":[4,12]},"q":{"dtype":"F4","shape":[0],"data_offsets":[12,12]}})",
           data);
  const auto r = open_checkpoint_reader(dir / "x.safetensors");
  ASSERT_EQ(r->tensors().size(), 4u);
  // By data_offsets; equal offsets in header order.
  EXPECT_EQ(r->tensors()[0].name, "s");
  EXPECT_EQ(r->tensors()[1].name, "none");
  EXPECT_EQ(r->tensors()[2].name, "d");
  EXPECT_EQ(r->tensors()[3].name, "q");
  EXPECT_EQ(r->tensors()[0].shape, Shape{});
  EXPECT_EQ(r->tensors()[0].bytes(), 4u);
  EXPECT_EQ(read_all(*r, 0), data.substr(0, 4));
  EXPECT_EQ(r->tensors()[1].bytes(), 0u);
  EXPECT_EQ(read_all(*r, 1), "");
  EXPECT_EQ(r->tensors()[2].dtype, std::nullopt);
  EXPECT_EQ(r->tensors()[2].dtype_text, "F64");
  EXPECT_EQ(read_all(*r, 2), data.substr(4));
  EXPECT_EQ(r->tensors()[3].bytes(), 0u);  // unknown element size
  char buf[4];
  EXPECT_THROW(r->read(3, 0, 0, buf), layerinit::logic_error);
  EXPECT_TRUE(r->metadata().empty());
}

TEST(CheckpointReader, HDF5FilesOfOtherWriters) {
  TempDir dir;
  const fs::path p = dir / "other.h5";
  const float scalar = 1.5f;
  const double f64[3] = {1, 2, 3};
  const std::int32_t i32[2][2] = {{1, -2}, {3, -4}};
  const float be[2] = {0.5f, -8.0f};
  {
    HdfFile f(p);
    f.dataset("scalar", H5T_NATIVE_FLOAT, 0, nullptr, &scalar);
    const hsize_t d3 = 3, d22[2] = {2, 2}, d2 = 2, d0[2] = {0, 5};
    f.dataset("g/inner/f64", H5T_IEEE_F64LE, 1, &d3, f64);
    f.dataset("i32", H5T_STD_I32LE, 2, d22, i32);
    // Stored big-endian: read as little-endian values.
    hid_t t = H5Tcopy(H5T_IEEE_F32BE);
    hid_t space = H5Screate_simple(1, &d2, nullptr);
    hid_t d = H5Dcreate2(f.id, "be", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, be);
    H5Dclose(d);
    H5Sclose(space);
    H5Tclose(t);
    f.dataset("empty", H5T_IEEE_F32LE, 2, d0, nullptr);
  }
  const auto r = open_checkpoint_reader(p);
  std::map<std::string, const StoredTensor*> by;
  std::vector<std::string> names;
  for (const auto& t : r->tensors()) {
    by[t.name] = &t;
    names.push_back(t.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"be", "empty", "g/inner/f64", "i32", "scalar"}));
  EXPECT_EQ(by["scalar"]->shape, Shape{});
  EXPECT_EQ(by["scalar"]->dtype, DType::f32);
  EXPECT_EQ(by["g/inner/f64"]->dtype_text, "f64");
  EXPECT_EQ(by["g/inner/f64"]->dtype, std::nullopt);
  EXPECT_EQ(by["i32"]->dtype_text, "i32");
  EXPECT_EQ(by["i32"]->bytes(), 16u);
  EXPECT_EQ(by["empty"]->shape, (Shape{0, 5}));
  EXPECT_EQ(by["be"]->dtype, DType::f32);
  std::map<std::string, std::string> got = read_by_name(*r);
  EXPECT_EQ(got["scalar"], std::string(reinterpret_cast<const char*>(&scalar), 4));
  EXPECT_EQ(got["g/inner/f64"], std::string(reinterpret_cast<const char*>(f64), 24));
  EXPECT_EQ(got["i32"], std::string(reinterpret_cast<const char*>(i32), 16));
  EXPECT_EQ(got["be"], std::string(reinterpret_cast<const char*>(be), 8));
  EXPECT_EQ(got["empty"], "");
  std::int32_t two[2];
  r->read(3, 1, 2, two);  // across the row
  EXPECT_EQ(two[0], -2);
  EXPECT_EQ(two[1], 3);
  EXPECT_TRUE(r->metadata().empty());
}

// What emit writes for a preset reads as the independent readers read it.
TEST(CheckpointReader, EmitOfAPresetReadsAsTheIndependentReaders) {
  auto be = make_host_backend(1);
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5})
    for (Layout layout : {Layout::per_layer, Layout::stacked}) {
      SCOPED_TRACE(std::string(format_name(f)) + " " + std::string(layout_name(layout)));
      BuildOptions opts;
      opts.layout = layout;
      opts.dtype = DType::bf16;
      const Builder b(make_preset("llama-tiny"), make_recipe("hf"), opts, *be, be->memory());
      TempDir dir;
      EmitOptions eo;
      eo.format = f;
      const fs::path target = dir / (f == CheckpointFormat::hdf5 ? "m.h5" : "m");
      const EmitResult res = emit_checkpoint(b, *be, target, eo);
      const auto r = open_checkpoint_reader(target);
      std::map<std::string, std::string> expected;
      if (f == CheckpointFormat::hdf5) {
        for (const auto& [name, d] : layerinit::testing::read_hdf5_datasets(target)) expected[name] = d.bytes;
      } else {
        for (const auto& [name, t] : parse_safetensors(target / "model.safetensors").tensors) expected[name] = t.bytes;
      }
      EXPECT_EQ(r->tensors().size(), res.tensors.size());
      EXPECT_TRUE(read_by_name(*r) == expected);
      EXPECT_EQ(r->metadata().at("layout"), std::string(layout_name(layout)));
    }
}

// A parallel emit's HDF5 master reads through its rank files from any working directory, as the
// one-process file; without its rank directory it is refused.
TEST(CheckpointReader, AParallelHDF5MasterReadsFromAnyDirectory) {
  TempDir dir;
  fs::create_directory(dir / "sub");
  const fs::path master = dir / "sub" / "par.h5", one = dir / "sub" / "one.h5";
  const ModelSpec spec = make_preset("llama-tiny");
  BuildOptions opts;
  opts.layout = Layout::stacked;
  opts.dtype = DType::f16;
  EmitOptions eo;
  eo.format = CheckpointFormat::hdf5;
  {
    auto be = make_host_backend(1);
    emit_checkpoint(Builder(spec, make_recipe("hf"), opts, *be, be->memory()), *be, one, eo);
  }
  const std::uint64_t ranks = 3;
  layerinit::testing::ThreadGroup group(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (std::uint64_t rank = 0; rank < ranks; ++rank)
    threads.emplace_back([&, rank] {
      auto be = make_host_backend(1);
      const Builder b(spec, make_recipe("hf"), opts, *be, be->memory());
      layerinit::testing::ThreadCollective c(group, rank);
      try {
        emit_parallel(b, *be, master, eo, c);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ASSERT_EQ(e, "");
  const auto expected = read_by_name(*open_checkpoint_reader(one));
  ASSERT_FALSE(expected.empty());

  const fs::path cwd = fs::current_path();
  struct Back {
    fs::path to;
    ~Back() { fs::current_path(to); }
  } back{cwd};
  for (const fs::path& from : {dir.path(), fs::path("/")}) {
    SCOPED_TRACE(from.string());
    fs::current_path(from);
    const fs::path p = from == dir.path() ? fs::path("sub/par.h5") : master;  // relative, and absolute from elsewhere
    const auto r = open_checkpoint_reader(p);
    EXPECT_EQ(r->format(), "hdf5");
    EXPECT_TRUE(read_by_name(*r) == expected);
    EXPECT_EQ(r->metadata().count("layerinit.rank_files"), 1u);
  }
  fs::current_path(cwd);

  const std::string ranks_dir = open_checkpoint_reader(master)->metadata().at("layerinit.rank_files");
  // One rank file gone: refused, naming it.
  const fs::path rank1 = dir / "sub" / ranks_dir / "rank-00001-of-00003.h5";
  ASSERT_TRUE(fs::exists(rank1));
  fs::rename(rank1, dir / "rank1.h5");
  // The first dataset (by name) that reads from it.
  std::string reader_of_rank1;
  const auto one_reader = open_checkpoint_reader(one);
  for (const auto& t : one_reader->tensors()) {
    hid_t f = H5Fopen(master.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, t.name.c_str(), H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(d);
    std::size_t count = 0;
    H5Pget_virtual_count(dcpl, &count);
    for (std::size_t i = 0; i < count; ++i) {
      char name[256] = {};
      H5Pget_virtual_filename(dcpl, i, name, sizeof name);
      if (std::string(name).ends_with("rank-00001-of-00003.h5") && reader_of_rank1.empty()) reader_of_rank1 = t.name;
    }
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Fclose(f);
  }
  ASSERT_NE(reader_of_rank1, "");
  EXPECT_EQ(refusal(master), "checkpoint: " + master.string() + ": dataset '" + reader_of_rank1 + "' reads from '" + ranks_dir +
                                 "/rank-00001-of-00003.h5', which is missing: it would read as zeros");
  // The whole rank directory gone.
  fs::remove_all(dir / "sub" / ranks_dir);
  EXPECT_EQ(refusal(master), "checkpoint: " + master.string() + ": its rank directory '" + ranks_dir +
                                 "' (layerinit.rank_files) is missing: its datasets would read as zeros");
}

TEST(CheckpointReader, RankFilesGiveEachPieceItsPlace) {
  auto be = make_host_backend(1);
  const ModelSpec spec = make_preset("llama-tiny");
  const ParallelPlan plan(spec, {.tp = 2, .pp = 2});
  const Builder b(spec, make_recipe("hf"), BuildOptions{}, *be, be->memory());
  TempDir dir;
  const fs::path ranks = dir / "ranks";
  EmitOptions eo;
  eo.format = CheckpointFormat::safetensors;
  std::vector<TensorReport> reports;
  std::map<std::string, std::string> file_bytes;  // "file/name" -> bytes
  for (std::uint64_t r = 0; r < plan.ranks(); ++r) {
    const EmitResult res = emit_rank(RankPlan(b, plan, r), *be, ranks, eo);
    for (const auto& t : res.tensors) reports.push_back(t);
    const std::string f = rank_file_name(r, plan.ranks());
    for (const auto& [name, t] : parse_safetensors(ranks / f).tensors) file_bytes[f + "/" + name] = t.bytes;
  }
  const auto r = open_checkpoint_reader(ranks);
  EXPECT_EQ(r->format(), "rank files");
  ASSERT_EQ(r->tensors().size(), reports.size());
  std::map<std::string, std::uint64_t> per_file;
  for (std::size_t k = 0; k < reports.size(); ++k) {
    const StoredTensor& t = r->tensors()[k];
    ++per_file[t.file];
    EXPECT_EQ(t.shape, reports[k].shape);
    EXPECT_EQ(t.global_shape, reports[k].global_shape) << t.name;
    EXPECT_EQ(t.offset, reports[k].offset) << t.name;
    EXPECT_TRUE(read_all(*r, k) == file_bytes.at(t.file + "/" + t.name)) << t.name;
  }
  EXPECT_EQ(per_file.size(), 4u);
  EXPECT_EQ(per_file.begin()->first, "rank-00000-of-00004.safetensors");
  // The first file's __metadata__ without the rank's own keys.
  std::map<std::string, std::string> meta;
  const auto file0 = parse_safetensors(ranks / "rank-00000-of-00004.safetensors");
  for (const auto& [k, v] : file0.metadata.items()) meta[k] = v.get<std::string>();
  EXPECT_EQ(meta.erase("layerinit.shards"), 1u);
  EXPECT_EQ(meta.erase("layerinit.mesh"), 1u);
  EXPECT_EQ(r->metadata(), meta);

  // A missing rank is no error here (verify reports what no file covers).
  fs::remove(ranks / "rank-00002-of-00004.safetensors");
  std::uint64_t left = 0;
  const auto without_2 = open_checkpoint_reader(ranks);
  for (const auto& t : without_2->tensors()) left += t.file != "rank-00002-of-00004.safetensors";
  EXPECT_EQ(left, reports.size() - per_file["rank-00002-of-00004.safetensors"]);

  // Another mesh's file beside them.
  fs::copy_file(ranks / "rank-00001-of-00004.safetensors", ranks / "rank-00001-of-00002.safetensors");
  EXPECT_EQ(refusal(ranks), "checkpoint: " + ranks.string() +
                                ": holds rank files of different meshes: rank-00000-of-00004.safetensors (4 ranks) and "
                                "rank-00001-of-00002.safetensors (2 ranks)");
  fs::remove(ranks / "rank-00001-of-00002.safetensors");
  // As many ranks on another mesh.
  {
    TempDir other;
    const ParallelPlan pp4(spec, {.pp = 4});
    emit_rank(RankPlan(b, pp4, 2), *be, other / "r", eo);
    fs::copy_file(other / "r" / "rank-00002-of-00004.safetensors", ranks / "rank-00002-of-00004.safetensors");
  }
  EXPECT_EQ(refusal(ranks), "checkpoint: " + (ranks / "rank-00002-of-00004.safetensors").string() +
                                ": is a rank file of another mesh than rank-00000-of-00004.safetensors (layerinit.mesh "
                                "{\"ep\":1,\"fsdp\":1,\"pp\":4,\"tp\":1}, not {\"ep\":1,\"fsdp\":1,\"pp\":2,\"tp\":2})");
  fs::remove(ranks / "rank-00002-of-00004.safetensors");
  // Another checkpoint's rank file of the same mesh.
  {
    TempDir other;
    BuildOptions seeded;
    seeded.seed = 9;
    const Builder b9(spec, make_recipe("hf"), seeded, *be, be->memory());
    emit_rank(RankPlan(b9, plan, 2), *be, other / "r", eo);
    fs::copy_file(other / "r" / "rank-00002-of-00004.safetensors", ranks / "rank-00002-of-00004.safetensors");
  }
  EXPECT_EQ(refusal(ranks), "checkpoint: " + (ranks / "rank-00002-of-00004.safetensors").string() +
                                ": __metadata__ 'seed' differs from rank-00000-of-00004.safetensors's: another checkpoint's rank file");
  fs::remove(ranks / "rank-00002-of-00004.safetensors");
  // Two files of one rank; a rank past the count.
  fs::copy_file(ranks / "rank-00001-of-00004.safetensors", ranks / "rank-000001-of-00004.safetensors");
  EXPECT_EQ(refusal(ranks), "checkpoint: " + ranks.string() +
                                ": holds two files of rank 1: rank-000001-of-00004.safetensors and rank-00001-of-00004.safetensors");
  fs::rename(ranks / "rank-000001-of-00004.safetensors", ranks / "rank-00007-of-00004.safetensors");
  EXPECT_EQ(refusal(ranks), "checkpoint: " + (ranks / "rank-00007-of-00004.safetensors").string() + ": names rank 7 of 4");
  fs::remove(ranks / "rank-00007-of-00004.safetensors");
  ASSERT_EQ(open_checkpoint_reader(ranks)->tensors().size(), left);
  // A model beside rank files.
  fs::copy_file(ranks / "rank-00001-of-00004.safetensors", ranks / "model.safetensors");
  EXPECT_EQ(refusal(ranks), "checkpoint: " + ranks.string() +
                                ": holds both a model (model.safetensors) and rank files (rank-00000-of-00004.safetensors): "
                                "one checkpoint to a directory");
}

TEST(CheckpointReader, BrokenSafetensorsFilesAreRefusedNamingTheRule) {
  TempDir dir;
  const fs::path p = dir / "x.safetensors";
  const std::string ok = R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})";
  write_st(p, ok, std::string(16, '\1'));
  ASSERT_EQ(open_checkpoint_reader(p)->tensors().size(), 2u);
  const std::string at = "checkpoint: " + p.string() + ": ";
  struct Case {
    std::string file, message;
  };
  const std::vector<Case> cases = {
      {std::string("\5\0\0\0\0", 5), "holds 5 bytes, fewer than the 8 of the safetensors header length (a truncated file?)"},
      {le64(1ull << 40) + "{}", "safetensors header length 1099511627776 exceeds the format's 100000000 bytes"},
      {le64(1000) + "{}", "safetensors header of 1000 bytes runs past the end of the file (10 bytes; a truncated file?)"},
      {le64(ok.size()) + ok + std::string(12, '\1'),
       "tensor 'b': data_offsets [8, 16] run past the data's 12 bytes (a truncated file?)"},
      {st("[1,2]", ""), "safetensors header is not a JSON object"},
      {st("{\"a", ""), "safetensors header: malformed JSON at line 1, column 4: syntax error while parsing object key - "
                        "invalid string: missing closing quote; last read: '\"a'; expected string literal"},
      // A tensor listed twice (the last entry was kept, silently) and nesting no header has (a
      // __metadata__ value nested 100,000 deep overflowed the stack).
      {st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          std::string(8, '\0')),
       "safetensors header: a: duplicate key"},
      {st(R"({"__metadata__":{"x":)" + std::string(100000, '[') + std::string(100000, ']') + "}}", ""),
       "safetensors header: malformed JSON at line 1, column 23: nesting deeper than 3 levels"},
      {st(R"({"__metadata__":{"x":1}})", std::string(8, '\0')), "__metadata__ 'x' is not a string"},
      {st(R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')),
       "tensor 'a': its entry needs dtype (a string), shape (unsigned integers) and data_offsets (two unsigned integers)"},
      {st(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "tensor 'a': its entry needs dtype (a string), shape (unsigned integers) and data_offsets (two unsigned integers)"},
      {st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, '\0')),
       "tensor 'a': data_offsets [8, 0] end before they begin"},
      {st(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "tensor 'a': data_offsets [0, 8] hold 8 bytes, but shape [3] of F32 takes 12"},
      {st(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "tensor 'a': data_offsets [0, 8] hold 8 bytes, but shape [4294967296, 4294967296] of F32 takes more than 2^64"},
      {st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
       "tensor 'b' (data_offsets [4, 8]) overlaps tensor 'a' ([0, 8])"},
      {st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
       "bytes [0, 4) of the data belong to no tensor (before tensor 'a')"},
      {st(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(8, '\0')),
       "bytes [4, 8) of the data, after the last tensor, belong to no tensor"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    write_file(p, c.file);
    EXPECT_EQ(refusal(p), at + c.message);
  }
  // A directory of the same: the file named.
  fs::create_directory(dir / "d");
  write_st(dir / "d" / "model.safetensors", ok, std::string(15, '\1'));
  EXPECT_EQ(refusal(dir / "d"), "checkpoint: " + (dir / "d" / "model.safetensors").string() +
                                    ": tensor 'b': data_offsets [8, 16] run past the data's 15 bytes (a truncated file?)");
}

TEST(CheckpointReader, AnIndexMustNameShardsThatHoldItsTensors) {
  TempDir dir;
  WriterOptions opts;
  opts.max_shard_size = 200;
  const fs::path ckpt = dir / "ckpt";
  write_checkpoint(CheckpointFormat::safetensors, ckpt, kDatasets, {}, opts);
  const fs::path index = ckpt / "model.safetensors.index.json";
  const std::string original = slurp(index);
  auto edit = [&](const std::function<void(nlohmann::ordered_json&)>& f) {
    auto j = nlohmann::ordered_json::parse(original);
    f(j);
    write_file(index, j.dump());
  };
  const std::string at = "checkpoint: " + index.string() + ": ";
  edit([](auto& j) { j["weight_map"]["b.bias"] = "model-00009-of-00009.safetensors"; });
  EXPECT_EQ(refusal(ckpt), at + "names shard 'model-00009-of-00009.safetensors', which does not exist");
  edit([](auto& j) { j["weight_map"]["b.bias"] = "../x.safetensors"; });
  EXPECT_EQ(refusal(ckpt), at + "names shard '../x.safetensors', which is not a file in its directory");
  edit([](auto& j) { j["weight_map"]["ghost"] = "model-00001-of-00003.safetensors"; });
  EXPECT_EQ(refusal(ckpt), at + "puts tensor 'ghost' in 'model-00001-of-00003.safetensors', which does not hold it");
  edit([](auto& j) { j["weight_map"].erase("m.proj"); });
  EXPECT_EQ(refusal(ckpt), "checkpoint: " + (ckpt / "model-00002-of-00003.safetensors").string() +
                               ": holds tensor 'm.proj', which the index does not name");
  edit([](auto& j) { j["weight_map"]["m.proj"] = "model-00001-of-00003.safetensors"; });
  EXPECT_EQ(refusal(ckpt), "checkpoint: " + (ckpt / "model-00002-of-00003.safetensors").string() +
                               ": holds tensor 'm.proj', which the index puts in 'model-00001-of-00003.safetensors'");
  edit([](auto& j) { j.erase("weight_map"); });
  EXPECT_EQ(refusal(ckpt), at + "has no weight_map (a JSON object of tensor names to shard files)");
  write_file(index, "not json");
  EXPECT_EQ(refusal(ckpt), at + "index: malformed JSON at line 1, column 2: syntax error while parsing value - invalid "
                                "literal; last read: 'no'");
  // Read as config.json is: a regular file of at most 16 MiB (a link to /dev/zero, or a 2 GiB sparse
  // file, was read whole).
  fs::remove(index);
  fs::create_symlink("/dev/zero", index);
  EXPECT_EQ(refusal(ckpt), at + "is not a regular file");
  fs::remove(index);
  write_file(index, "");
  fs::resize_file(index, 2ull << 30);
  EXPECT_EQ(refusal(ckpt), at + "is larger than 16 MiB (2147483648 bytes)");
  // A tensor in two shards: the index puts it in one, the other holds it against the index.
  write_file(index, original);
  ASSERT_EQ(open_checkpoint_reader(ckpt)->tensors().size(), kDatasets.size());
  write_st(ckpt / "model-00004-of-00004.safetensors",
           R"({"z.layers.weight":{"dtype":"BF16","shape":[3,5,7],"data_offsets":[0,210]},)"
           R"("extra":{"dtype":"U8","shape":[1],"data_offsets":[210,211]}})",
           std::string(211, '\0'));
  edit([](auto& j) { j["weight_map"]["extra"] = "model-00004-of-00004.safetensors"; });
  EXPECT_EQ(refusal(ckpt), "checkpoint: " + (ckpt / "model-00004-of-00004.safetensors").string() +
                               ": holds tensor 'z.layers.weight', which the index puts in 'model-00001-of-00003.safetensors'");
}

// Safetensors files made of a valid one with bytes flipped, runs deleted, tokens spliced and the
// length rewritten (a fixed seed): each is read whole or refused as broken (checkpoint_invalid, one
// line naming the file); nothing else, no crash (under ASan in scripts/test). HDF5 files are not
// fuzzed here: Debian's libhdf5 1.10.8 itself crashes on some (in H5HG_read, H5C_dest).
TEST(CheckpointReader, FuzzedSafetensorsFilesAreReadOrRefused) {
  TempDir dir;
  write_checkpoint(CheckpointFormat::safetensors, dir / "seed", kDatasets, test_meta(), {});
  const std::string valid = slurp(dir / "seed" / "model.safetensors");
  const std::vector<std::string> tokens = {"-1", "0", "1e999", "18446744073709551616", "4294967296", "null", "{}", "[]",
                                           "[[[[", "}}}}", "\"\\u0000\"", ",", ":", "\"", "\"__metadata__\":{\"a\":[]}",
                                           "\"dtype\":\"F64\"", "\"data_offsets\":[0,0]"};
  std::mt19937_64 rng(20261128);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n ? n : 1)); };
  const fs::path p = dir / "x.safetensors";
  std::size_t read = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::uint64_t len = 0;
    for (int b = 7; b >= 0; --b) len = (len << 8) | static_cast<unsigned char>(valid[b]);
    std::string header = valid.substr(8, len), data = valid.substr(8 + len);
    const int kind = static_cast<int>(pick(5));
    for (int e = 0, edits = 1 + static_cast<int>(pick(4)); e < edits && !header.empty(); ++e) {
      const std::size_t at = pick(header.size());
      switch (kind) {
        case 0: header[at] = static_cast<char>(rng()); break;
        case 1: header.erase(at, 1 + pick(8)); break;
        case 2: header.insert(at, tokens[pick(tokens.size())]); break;
        case 3: data.resize(pick(data.size() + 1)); break;
        default: len = pick(header.size() + 16); break;  // a length that is not the header's
      }
    }
    if (kind != 4) len = header.size();
    write_file(p, le64(len) + header + data);
    try {
      const auto r = open_checkpoint_reader(p);
      for (std::size_t k = 0; k < r->tensors().size(); ++k) {
        if (r->tensors()[k].bytes() == 0) continue;  // no elements, or a dtype of no known size: not read (verify's rule)
        std::vector<unsigned char> out(r->tensors()[k].bytes());
        r->read(k, 0, numel(r->tensors()[k].shape), out.data());
      }
      ++read;
    } catch (const checkpoint_invalid& e) {
      ++refused;
      const std::string w = e.what();
      ASSERT_EQ(w.rfind("checkpoint: " + p.string() + ": ", 0), 0u) << w;
      ASSERT_EQ(w.find('\n'), std::string::npos) << w;
    } catch (const std::exception& e) {
      FAIL() << "not checkpoint_invalid: " << e.what() << "\nheader: " << header;
    }
  }
  EXPECT_EQ(read + refused, 3000u);
  EXPECT_GT(read, 0u);     // data cut to its own length, or bytes flipped inside a name
  EXPECT_GT(refused, 0u);
}

// HDF5 files of layerinit's writer with 16 random bytes flipped in their first 8 KiB (superblock,
// root group, attributes, heaps): each is read whole or refused as broken (exit 2's class), one line
// naming the file; never a crash (Debian's HDF5 1.10.8 crashed on 9 of these 60 inside H5Aread and
// H5Fclose; h5py's HDF5 raises an error on them), never an environment failure (24 were: exit 1). Each file is opened in a child process, so that a crash is counted
// rather than ending the test.
TEST(CheckpointReader, FuzzedHDF5FilesAreReadOrRefused) {
  TempDir dir;
  const fs::path seed = dir / "seed.h5";
  write_checkpoint(CheckpointFormat::hdf5, seed, kDatasets, test_meta(), {});
  const std::string valid = slurp(seed);
  std::mt19937_64 rng(20261129);
  int read = 0, refused = 0;
  std::vector<std::string> other;
  for (int iter = 0; iter < 60; ++iter) {
    std::string bytes = valid;
    for (int e = 0; e < 16; ++e) bytes[rng() % std::min<std::size_t>(bytes.size(), 8192)] = static_cast<char>(rng());
    const fs::path p = dir / ("x" + std::to_string(iter) + ".h5");
    write_file(p, bytes);
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      std::string said = "read";
      int code = 0;
      try {
        const auto r = open_checkpoint_reader(p);
        for (std::size_t k = 0; k < r->tensors().size(); ++k) {
          // A shape the flips made huge is read no further than verify would (it compares the shape first).
          if (r->tensors()[k].bytes() == 0 || r->tensors()[k].bytes() > (1u << 20)) continue;
          std::vector<unsigned char> out(r->tensors()[k].bytes());
          r->read(k, 0, numel(r->tensors()[k].shape), out.data());
        }
      } catch (const checkpoint_invalid& e) {
        said = e.what();
        code = 2;
      } catch (const std::exception& e) {
        said = std::string("not checkpoint_invalid: ") + e.what();
        code = 3;
      }
      (void)!::write(fds[1], said.data(), said.size());
      ::_exit(code);
    }
    ::close(fds[1]);
    std::string said;
    char buf[4096];
    for (ssize_t got; (got = ::read(fds[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(got));
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      ++read;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && said.rfind("checkpoint: " + p.string() + ": ", 0) == 0 &&
               said.find('\n') == std::string::npos) {
      ++refused;
    } else {
      other.push_back("file " + std::to_string(iter) + ": " +
                      (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status)) : said));
    }
  }
  EXPECT_TRUE(other.empty()) << ::testing::PrintToString(other);
  EXPECT_EQ(read + refused + static_cast<int>(other.size()), 60);
  EXPECT_GT(refused, 0);
}

// libhdf5 1.10.8 loops forever reading a string attribute from a global heap whose objects were
// shifted by one byte (found by fuzz_checkpoint): the probe's CPU limit ends it, and the file is
// refused naming the limit.
TEST(CheckpointReader, AnHDF5FileLibhdf5LoopsOnIsRefusedAfterTheProbesCpuTime) {
  TempDir dir;
  const fs::path p = dir / "x.h5";
  CheckpointMetadata meta = test_meta();
  meta.extra["long"] = std::string(600, 'x');
  write_checkpoint(CheckpointFormat::hdf5, p, kDatasets, meta, {});
  std::string bytes = slurp(p);
  const std::size_t at = bytes.find(std::string(600, 'x'));
  ASSERT_NE(at, std::string::npos);
  bytes.insert(at + 300, 1, 'y');
  write_file(p, bytes);
  ASSERT_EQ(::setenv("LAYERINIT_HDF5_PROBE_SECONDS", "1", 1), 0);
  const std::string m = refusal(p);
  ::unsetenv("LAYERINIT_HDF5_PROBE_SECONDS");
  EXPECT_EQ(m, "checkpoint: " + p.string() +
                   ": not a readable HDF5 file (HDF5 spent 1 s of CPU reading its metadata and first elements, in a probe "
                   "process: a loop in the file's structure? LAYERINIT_HDF5_PROBE_SECONDS gives it more)");
}

// A FIFO where a checkpoint's directory has a file: opened without waiting for a writer, and refused
// (verify DIR hung).
TEST(CheckpointReader, AFifoInACheckpointsDirectoryIsRefusedWithoutWaiting) {
  TempDir dir;
  const fs::path single = dir / "single", sharded = dir / "sharded";
  WriterOptions opts;
  opts.max_shard_size = 200;
  write_checkpoint(CheckpointFormat::safetensors, single, kDatasets, {}, {});
  write_checkpoint(CheckpointFormat::safetensors, sharded, kDatasets, {}, opts);
  for (const fs::path& f : {single / "model.safetensors", sharded / "model.safetensors.index.json",
                            sharded / "model-00002-of-00003.safetensors"}) {
    SCOPED_TRACE(f.string());
    const fs::path saved = f.string() + ".saved";
    fs::rename(f, saved);
    ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
    EXPECT_EQ(refusal(f.parent_path()), "checkpoint: " + f.string() + ": is not a regular file");
    fs::remove(f);
    fs::rename(saved, f);
    EXPECT_EQ(open_checkpoint_reader(f.parent_path())->tensors().size(), kDatasets.size());
  }
}

// The header is read in time linear in its entries (ordered_json's were quadratic: 40,000 took 9.7 s,
// 160,000 over 100 s); 200,000 tensors of one byte each.
TEST(CheckpointReader, AHeaderOfManyEntriesIsRead) {
  TempDir dir;
  constexpr std::uint64_t n = 200000;
  std::string h = "{";
  for (std::uint64_t i = 0; i < n; ++i)
    h += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
         std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  write_st(dir / "m.safetensors", h + "}", std::string(n, '\0'));
  EXPECT_EQ(open_checkpoint_reader(dir / "m.safetensors")->tensors().size(), n);
}

TEST(CheckpointReader, WhatIsNoCheckpointIsRefused) {
  TempDir dir;
  write_file(dir / "notes.txt", "hello, these are notes\n");
  EXPECT_EQ(refusal(dir / "notes.txt"), "checkpoint: " + (dir / "notes.txt").string() + ": is neither an HDF5 file nor a safetensors file");
  fs::create_directory(dir / "empty");
  EXPECT_EQ(refusal(dir / "empty"), "checkpoint: " + (dir / "empty").string() +
                                        ": holds no model.safetensors, model.safetensors.index.json or rank-RRRRR-of-NNNNN.safetensors files");
  // Shards without their index are not a checkpoint either.
  write_file(dir / "empty" / "model-00001-of-00002.safetensors", le64(2) + "{}");
  EXPECT_EQ(refusal(dir / "empty"), "checkpoint: " + (dir / "empty").string() +
                                        ": holds no model.safetensors, model.safetensors.index.json or rank-RRRRR-of-NNNNN.safetensors files");
  EXPECT_EQ(refusal(dir / "missing"), "checkpoint: cannot open " + (dir / "missing").string() + ": No such file or directory");
  EXPECT_EQ(refusal(dir / "notes.txt" / "x"), "checkpoint: cannot open " + (dir / "notes.txt" / "x").string() + ": Not a directory");
  EXPECT_THROW(open_checkpoint_reader(""), std::invalid_argument);
  // A name with a control character is shown escaped.
  write_file(dir / "a\nb.safetensors", "");
  EXPECT_EQ(refusal(dir / "a\nb.safetensors"), "checkpoint: " + dir.path().string() +
                                                   "/a\\x0ab.safetensors: holds 0 bytes, fewer than the 8 of the safetensors header length (a truncated file?)");
}

TEST(CheckpointReader, AnHDF5DtypeAttributeMustMatchTheType) {
  TempDir dir;
  const fs::path p = dir / "x.h5";
  {
    HdfFile f(p);
    const float v[2] = {1, 2};
    const hsize_t n = 2;
    f.dataset("w", H5T_IEEE_F32LE, 1, &n, v);
    hid_t d = H5Dopen2(f.id, "w", H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(d, "dtype", t, s, H5P_DEFAULT, H5P_DEFAULT);
    const char* said = "bf16";
    H5Awrite(a, t, &said);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    H5Dclose(d);
  }
  EXPECT_EQ(refusal(p), "checkpoint: " + p.string() + ": dataset 'w': its dtype attribute says bf16, but its HDF5 type is fp32");
}

// A metadata attribute layerinit writes as a string, of another type: a seed of 1.5 was passed over
// (verify then checked seed 0 and passed). Another tool's attribute of any type is left alone.
TEST(CheckpointReader, AnHDF5MetadataAttributeThatIsNotAStringIsRefused) {
  TempDir dir;
  const fs::path p = dir / "x.h5";
  auto with_root_attribute = [&](const char* name) {
    HdfFile f(p);
    const float v[2] = {1, 2};
    const hsize_t n = 2;
    f.dataset("w", H5T_IEEE_F32LE, 1, &n, v);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f.id, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    const double seed = 1.5;
    H5Awrite(a, H5T_NATIVE_DOUBLE, &seed);
    H5Aclose(a);
    H5Sclose(s);
  };
  with_root_attribute("seed");
  EXPECT_EQ(refusal(p), "checkpoint: " + p.string() + ": attribute 'seed' is not a string (layerinit writes its metadata as one string each)");
  fs::remove(p);
  with_root_attribute("temperature");
  const auto r = open_checkpoint_reader(p);
  EXPECT_EQ(r->tensors().size(), 1u);
  EXPECT_EQ(r->metadata().count("temperature"), 0u);
}

// A virtual dataset that reads from itself (or from another virtual dataset of its file): refused
// (HDF5 recursed until the stack overflowed). One reading a plain dataset of its file is read.
TEST(CheckpointReader, AVirtualDatasetReadingAVirtualOneOfItsFileIsRefused) {
  TempDir dir;
  const fs::path p = dir / "v.h5";
  for (const char* source : {"/self", "/plain", "/gone"}) {
    SCOPED_TRACE(source);
    {
      HdfFile f(p);
      const float v[2] = {1, 2};
      const hsize_t n = 2;
      f.dataset("plain", H5T_IEEE_F32LE, 1, &n, v);
      hid_t space = H5Screate_simple(1, &n, nullptr);
      hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      ASSERT_GE(H5Pset_virtual(dcpl, space, ".", source, space), 0);
      hid_t d = H5Dcreate2(f.id, "self", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      ASSERT_GE(d, 0);
      H5Dclose(d);
      H5Pclose(dcpl);
      H5Sclose(space);
    }
    const std::string at = "checkpoint: " + p.string() + ": dataset 'self' reads from dataset '" + source + "' of this file, ";
    if (std::string(source) == "/self") {
      EXPECT_EQ(refusal(p), at + "itself virtual (a chain that may lead back to itself)");
    } else if (std::string(source) == "/gone") {
      EXPECT_EQ(refusal(p), at + "which is missing");
    } else {
      const auto r = open_checkpoint_reader(p);
      ASSERT_EQ(r->tensors().size(), 2u);
      float got[2] = {0, 0};
      r->read(1, 0, 2, got);  // "self", after "plain"
      EXPECT_EQ(got[0], 1.0f);
      EXPECT_EQ(got[1], 2.0f);
    }
    fs::remove(p);
  }
}

// A checkpoint of more shards than the process may open files: a few stay open at a time. Run in a
// child with RLIMIT_NOFILE 32 (and 60 shards), reading every tensor twice in shard order and once
// backwards.
TEST(CheckpointReader, ManyShardsTakeAFewDescriptors) {
  TempDir dir;
  std::vector<DatasetSpec> d;
  for (int i = 0; i < 60; ++i) d.push_back({"t" + std::to_string(1000 + i), {3}, DType::f32, 0});
  WriterOptions opts;
  opts.max_shard_size = 12;  // one tensor per shard
  const auto written = write_checkpoint(CheckpointFormat::safetensors, dir / "ckpt", d, {}, opts);
  const auto out = layerinit::testing::in_child_with_message([&](std::string& msg) {
    const rlimit lim{32, 32};
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return 3;
    try {
      const auto r = open_checkpoint_reader(dir / "ckpt");
      if (r->tensors().size() != 60 || r->tensors().back().file != "model-00060-of-00060.safetensors") return 4;
      for (int pass = 0; pass < 2; ++pass)
        if (read_by_name(*r) != written) return 5;
      for (std::size_t k = r->tensors().size(); k-- > 0;)
        if (read_all(*r, k) != written.at(r->tensors()[k].name)) return 6;
    } catch (const std::exception& e) {
      msg = e.what();
      return 2;
    }
    return 0;
  });
  EXPECT_TRUE(WIFEXITED(out.status));
  EXPECT_EQ(WEXITSTATUS(out.status), 0) << out.message;
}

// A cut HDF5 file is a broken checkpoint, not an environment failure.
TEST(CheckpointReader, ACutHDF5FileIsRefused) {
  TempDir dir;
  const fs::path p = dir / "x.h5";
  write_checkpoint(CheckpointFormat::hdf5, p, kDatasets, test_meta(), {});
  const std::uint64_t size = fs::file_size(p);
  fs::resize_file(p, size / 2);
  // HDF5's own words after "eof = N" vary with its version.
  const std::string m = refusal(p);
  EXPECT_TRUE(m.starts_with("checkpoint: " + p.string() + ": a cut HDF5 file (truncated file: eof = " + std::to_string(size / 2)))
      << m;
  // HDF5's signature then bytes of no format: the file's fault too (was an environment failure, exit 1).
  std::mt19937_64 rng(7);
  std::string junk = "\x89HDF\r\n\x1a\n";
  for (int i = 0; i < 4096; ++i) junk += static_cast<char>(rng());
  write_file(p, junk);
  const std::string j = refusal(p);
  EXPECT_TRUE(j.starts_with("checkpoint: " + p.string() + ": not a readable HDF5 file (")) << j;
}

// A file cut after it was opened: the read says so, naming the file.
TEST(CheckpointReader, AFileCutAfterOpeningFailsTheRead) {
  TempDir dir;
  write_checkpoint(CheckpointFormat::safetensors, dir / "c", kDatasets, {}, {});
  const fs::path f = dir / "c" / "model.safetensors";
  const auto r = open_checkpoint_reader(dir / "c");
  fs::resize_file(f, fs::file_size(f) - 1);
  std::string buf(r->tensors().back().bytes(), '\0');
  try {
    r->read(r->tensors().size() - 1, 0, numel(r->tensors().back().shape), buf.data());
    ADD_FAILURE() << "no error";
  } catch (const checkpoint_invalid& e) {
    EXPECT_EQ(std::string(e.what()), "checkpoint: " + f.string() + ": ends inside tensor 'a.four' (cut since it was opened?)");
  }
}
