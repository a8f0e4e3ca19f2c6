// HDF5 writer: round trips through the HDF5 C API (into H5T_NATIVE_FLOAT) and through h5py, chunk
// layout, attributes, atomicity (abort, kill, full filesystem), overwrite and path errors.
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <layerinit/checkpoint/writer.hpp>
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace layerinit;

using layerinit::testing::slurp;
using layerinit::testing::ChildOutcome;
using layerinit::testing::in_child;
using layerinit::testing::in_child_with_message;
using layerinit::testing::TempDir;

namespace {

std::vector<std::uint16_t> all_patterns() {
  std::vector<std::uint16_t> v(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

CheckpointMetadata test_meta() {
  CheckpointMetadata m;
  m.dtype = "bf16";
  m.seed = "1234";
  m.recipe = "hf";
  m.layout = "per-layer";
  m.orientation = "out-in";
  m.model_spec = R"({"name":"tiny"})";
  m.extra["note"] = "unit test";
  return m;
}

std::vector<float> read_native_float(const fs::path& file, const std::string& name) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0);
  hid_t s = H5Dget_space(d);
  std::vector<float> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

std::string read_string_attr(hid_t obj, const char* name) {
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return "<missing>";
  hid_t t = H5Aget_type(a);
  char* p = nullptr;
  H5Aread(a, t, &p);
  std::string s = p ? p : "";
  H5free_memory(p);
  H5Tclose(t);
  H5Aclose(a);
  return s;
}

std::vector<hsize_t> chunk_dims(const fs::path& file, const std::string& name) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  hid_t p = H5Dget_create_plist(d);
  std::vector<hsize_t> c(8);
  int r = H5Pget_chunk(p, 8, c.data());
  c.resize(r < 0 ? 0 : r);
  H5Pclose(p);
  H5Dclose(d);
  H5Fclose(f);
  return c;
}

std::uint32_t fbits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

std::string python() { return std::string(LAYERINIT_SOURCE_DIR) + "/.venv/bin/python"; }

// Runs tests/readers/read_checkpoint.py; empty json when the venv is missing.
nlohmann::json python_read(const std::string& kind, const fs::path& p) {
  std::string cmd = python() + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/read_checkpoint.py " + kind + " '" +
                    p.string() + "'";
  FILE* f = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = ::pclose(f);
  EXPECT_EQ(rc, 0) << cmd;
  return nlohmann::json::parse(out);
}

void write_all(CheckpointWriter& w, std::size_t i, const void* data, std::uint64_t n, std::uint64_t slab) {
  const auto* c = static_cast<const unsigned char*>(data);
  const std::size_t es = dtype_size(w.datasets()[i].dtype);
  for (std::uint64_t at = 0; at < n; at += slab) w.write(i, at, c + at * es, std::min(slab, n - at));
}

struct Fixture {
  std::vector<std::uint16_t> pat = all_patterns();
  std::vector<float> f32 = {0.f, -1.5f, 3.25f, 1e-30f, -7.f, 65504.f, 1.f / 3.f, 2.f, 4.f, 8.f, 9.f, 10.f};
  std::vector<DatasetSpec> specs() const {
    return {{"model.layers.0.self_attn.q_proj.weight", {256, 256}, DType::bf16},
            {"model.layers.0.mlp.up_proj.weight", {256, 256}, DType::f16},
            {"model.norm.weight", {3, 4}, DType::f32}};
  }
  void write(CheckpointWriter& w, std::uint64_t slab = 8192) const {
    write_all(w, 0, pat.data(), pat.size(), slab);
    write_all(w, 1, pat.data(), pat.size(), slab);
    write_all(w, 2, f32.data(), f32.size(), slab);
  }
};

}  // namespace

TEST(CheckpointHdf5, AllBf16AndHalfPatternsReadBackExactlyAsNativeFloat) {
  TempDir dir;
  const fs::path out = dir.path() / "model.h5";
  Fixture fx;
  auto w = open_hdf5_writer(out, fx.specs(), test_meta(), {});
  EXPECT_FALSE(fs::exists(out));
  fx.write(*w);
  EXPECT_FALSE(fs::exists(out)) << "target appears only at commit";
  w->commit();
  ASSERT_TRUE(fs::exists(out));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.h5"});

  auto bf = read_native_float(out, "model.layers.0.self_attn.q_proj.weight");
  auto hf = read_native_float(out, "model.layers.0.mlp.up_proj.weight");
  auto f = read_native_float(out, "model.norm.weight");
  ASSERT_EQ(bf.size(), 65536u);
  int bad_bf = 0, bad_hf = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    // Exact for every non-NaN pattern; HDF5's conversion makes every NaN the canonical 0x7fffffff.
    const bool nan = std::isnan(bf16_bits_to_float(static_cast<std::uint16_t>(i)));
    const bool ok_bf = nan ? std::isnan(bf[i]) : fbits(bf[i]) == i << 16;
    if (!ok_bf && bad_bf++ < 5) ADD_FAILURE() << "bf16 " << std::hex << i << " -> " << fbits(bf[i]);
    const float want = f16_bits_to_float(static_cast<std::uint16_t>(i));
    const bool ok = std::isnan(want) ? std::isnan(hf[i]) : fbits(hf[i]) == fbits(want);
    if (!ok && bad_hf++ < 5) ADD_FAILURE() << "fp16 " << std::hex << i << " -> " << fbits(hf[i]);
  }
  EXPECT_EQ(bad_bf, 0);
  EXPECT_EQ(bad_hf, 0);
  EXPECT_EQ(f, fx.f32);

  hid_t file = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_EQ(read_string_attr(file, "format_version"), "1");
  EXPECT_FALSE(read_string_attr(file, "library_version").empty());
  EXPECT_EQ(read_string_attr(file, "dtype"), "bf16");
  EXPECT_EQ(read_string_attr(file, "seed"), "1234");
  EXPECT_EQ(read_string_attr(file, "recipe"), "hf");
  EXPECT_EQ(read_string_attr(file, "layout"), "per-layer");
  EXPECT_EQ(read_string_attr(file, "orientation"), "out-in");
  EXPECT_EQ(read_string_attr(file, "model_spec"), R"({"name":"tiny"})");
  EXPECT_EQ(read_string_attr(file, "note"), "unit test");
  hid_t d = H5Dopen2(file, "model.layers.0.mlp.up_proj.weight", H5P_DEFAULT);
  EXPECT_EQ(read_string_attr(d, "dtype"), "fp16");
  hid_t p = H5Dget_create_plist(d);
  EXPECT_EQ(H5Pget_nfilters(p), 0) << "no compression by default";
  H5Pclose(p);
  H5Dclose(d);
  H5Fclose(file);
  // Whole small tensors are one chunk each: the chunk is the write slab.
  EXPECT_EQ(chunk_dims(out, "model.layers.0.self_attn.q_proj.weight"), (std::vector<hsize_t>{256, 256}));
}

TEST(CheckpointHdf5, StackedLayoutChunksAreLayerSlices) {
  TempDir dir;
  const fs::path out = dir.path() / "stacked.h5";
  const std::uint64_t L = 3;
  std::vector<DatasetSpec> specs = {{"layers.self_attn.q_proj.weight", {L, 8, 16}, DType::bf16, 128},
                                    {"layers.input_layernorm.weight", {L, 16}, DType::bf16, 16}};
  CheckpointMetadata m = test_meta();
  m.layout = "stacked";
  auto w = open_hdf5_writer(out, specs, m, {});
  std::vector<std::uint16_t> a(L * 128), b(L * 16);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = float_to_bf16_bits(static_cast<float>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float_to_bf16_bits(-static_cast<float>(i));
  for (std::uint64_t l = 0; l < L; ++l) {  // the builder's order: one layer at a time
    w->write(0, l * 128, a.data() + l * 128, 128);
    w->write(1, l * 16, b.data() + l * 16, 16);
  }
  w->commit();
  EXPECT_EQ(chunk_dims(out, specs[0].name), (std::vector<hsize_t>{1, 8, 16}));
  EXPECT_EQ(chunk_dims(out, specs[1].name), (std::vector<hsize_t>{1, 16}));
  auto ra = read_native_float(out, specs[0].name);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(ra[i], bf16_bits_to_float(a[i]));
  auto rb = read_native_float(out, specs[1].name);
  for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(rb[i], bf16_bits_to_float(b[i]));
}

TEST(CheckpointHdf5, UnalignedSlabsAndPaddedEdgeChunks) {
  TempDir dir;
  const fs::path out = dir.path() / "odd.h5";
  // 13 rows of 6 fp32 (24 bytes each): with 100-byte chunks, 4 rows per chunk, 13 = 4+4+4+1 (13 is
  // prime: the last chunk is a padded edge chunk). Writes of 7 elements end inside chunks.
  std::vector<DatasetSpec> specs = {{"x", {13, 6}, DType::f32}, {"y", {5}, DType::f32}};
  WriterOptions o;
  o.max_chunk_bytes = 100;
  auto w = open_hdf5_writer(out, specs, test_meta(), o);
  std::vector<float> x(78), y = {1, 2, 3, 4, 5};
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  for (std::uint64_t at = 0, k = 0; at < 78; at += 7, ++k) {  // interleaved with y, which stages too
    w->write(0, at, x.data() + at, std::min<std::uint64_t>(7, 78 - at));
    if (k < 5) w->write(1, k, y.data() + k, 1);
  }
  w->commit();
  EXPECT_EQ(chunk_dims(out, "x"), (std::vector<hsize_t>{4, 6}));
  EXPECT_EQ(read_native_float(out, "x"), x);
  EXPECT_EQ(read_native_float(out, "y"), y);
}

TEST(CheckpointHdf5, LargeTensorsAreCutIntoRowBlocksThatDivideTheRows) {
  TempDir dir;
  const fs::path out = dir.path() / "big.h5";
  WriterOptions o;
  o.max_chunk_bytes = 1 << 20;  // a [1536, 512] bf16 tensor is 1.5 MiB: two chunks of 768 rows
  std::vector<DatasetSpec> specs = {{"w", {1536, 512}, DType::bf16}};
  auto w = open_hdf5_writer(out, specs, test_meta(), o);
  std::vector<std::uint16_t> v(1536 * 512);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(i * 2654435761u >> 16);
  w->write(0, 0, v.data(), v.size());
  w->commit();
  EXPECT_EQ(chunk_dims(out, "w"), (std::vector<hsize_t>{768, 512}));
  auto r = read_native_float(out, "w");
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isnan(r[i])) ASSERT_EQ(fbits(r[i]), std::uint32_t{v[i]} << 16) << i;
}

TEST(CheckpointHdf5, H5pyReadsTheSameValues) {
  if (!fs::exists(python()))
    GTEST_SKIP() << "no " << python() << " (run scripts/python-env to create it)";
  TempDir dir;
  const fs::path out = dir.path() / "model.h5";
  Fixture fx;
  auto w = open_hdf5_writer(out, fx.specs(), test_meta(), {});
  fx.write(*w, 1000);
  w->commit();
  auto j = python_read("hdf5", out);
  EXPECT_EQ(j["metadata"]["seed"], "1234");
  EXPECT_EQ(j["metadata"]["model_spec"], R"({"name":"tiny"})");
  const auto& bf = j["tensors"]["model.layers.0.self_attn.q_proj.weight"];
  EXPECT_EQ(bf["dtype"], "bf16");
  EXPECT_EQ(bf["numpy_dtype"], "float32");
  EXPECT_TRUE(bf["compression"].is_null());
  ASSERT_EQ(bf["bits"].size(), 65536u);
  int bad = 0;
  for (std::uint32_t i = 0; i < 65536; ++i)
    if (!std::isnan(bf16_bits_to_float(static_cast<std::uint16_t>(i))) && bf["bits"][i].get<std::uint32_t>() != i << 16 &&
        bad++ < 5)
      ADD_FAILURE() << "h5py bf16 " << std::hex << i;
  const auto& hf = j["tensors"]["model.layers.0.mlp.up_proj.weight"];
  EXPECT_EQ(hf["dtype"], "fp16");
  EXPECT_EQ(hf["numpy_dtype"], "float16");
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const float want = f16_bits_to_float(static_cast<std::uint16_t>(i));
    if (std::isnan(want)) continue;
    if (hf["bits"][i].get<std::uint32_t>() != fbits(want) && bad++ < 5) ADD_FAILURE() << "h5py fp16 " << std::hex << i;
  }
  EXPECT_EQ(bad, 0);
}

TEST(CheckpointHdf5, DestroyingAnUncommittedWriterLeavesNothing) {
  TempDir dir;
  Fixture fx;
  {
    auto w = open_hdf5_writer(dir.path() / "a.h5", fx.specs(), test_meta(), {});
    write_all(*w, 0, fx.pat.data(), 1000, 1000);
    EXPECT_EQ(dir.entries().size(), 1u) << "the temporary exists while writing";
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(CheckpointHdf5, IncompleteCommitThrowsAndLeavesNothing) {
  TempDir dir;
  Fixture fx;
  auto w = open_hdf5_writer(dir.path() / "a.h5", fx.specs(), test_meta(), {});
  write_all(*w, 0, fx.pat.data(), fx.pat.size(), 4096);
  try {
    w->commit();
    FAIL() << "commit of an incomplete checkpoint succeeded";
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.up_proj.weight incomplete"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
  EXPECT_THROW(w->write(1, 0, fx.pat.data(), 1), checkpoint_error);
}

TEST(CheckpointHdf5, MisuseIsRejected) {
  TempDir dir;
  Fixture fx;
  auto w = open_hdf5_writer(dir.path() / "a.h5", fx.specs(), test_meta(), {});
  // A write the program got wrong is misuse; datasets a caller declares are input.
  EXPECT_THROW(w->write(0, 5, fx.pat.data(), 1), layerinit::logic_error);      // out of order
  EXPECT_THROW(w->write(7, 0, fx.pat.data(), 1), layerinit::logic_error);      // no such dataset
  EXPECT_THROW(w->write(0, 0, fx.pat.data(), 65537), layerinit::logic_error);  // past the end
  EXPECT_THROW(w->write("nope", 0, fx.pat.data(), 1), layerinit::logic_error);
  EXPECT_THROW(open_hdf5_writer(dir.path() / "b.h5", {{"a", {2}, DType::bf16}, {"a", {2}, DType::bf16}}, {}, {}),
               std::invalid_argument);
  EXPECT_THROW(open_hdf5_writer(dir.path() / "b.h5", {{"a", {2, 3}, DType::bf16, 4}}, {}, {}), std::invalid_argument);
}

TEST(CheckpointHdf5, OverwriteRefusedWithoutTheFlag) {
  TempDir dir;
  const fs::path out = dir.path() / "model.h5";
  Fixture fx;
  {
    auto w = open_hdf5_writer(out, {{"old", {4}, DType::f32}}, test_meta(), {});
    const float old[4] = {1, 2, 3, 4};
    w->write(0, 0, old, 4);
    w->commit();
  }
  const std::string before = slurp(out);
  try {
    open_hdf5_writer(out, fx.specs(), test_meta(), {});
    FAIL() << "overwrote without --force";
  } catch (const checkpoint_refused& e) {
    EXPECT_NE(std::string(e.what()).find(out.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("refusing to overwrite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(out), before);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.h5"});
  WriterOptions o;
  o.overwrite = true;
  auto w = open_hdf5_writer(out, fx.specs(), test_meta(), o);
  fx.write(*w);
  w->commit();
  EXPECT_EQ(read_native_float(out, "model.norm.weight"), fx.f32);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.h5"});
}

TEST(CheckpointHdf5, OverwriteReplacesOnlyAFileLayerinitWrote) {
  // The mark is the root attributes every layerinit file has; a file without them stays.
  TempDir dir;
  Fixture fx;
  WriterOptions o;
  o.overwrite = true;
  const fs::path text = dir.path() / "text.h5", bare = dir.path() / "bare.h5";
  { std::ofstream(text) << "old"; }
  {
    hid_t f = H5Fcreate(bare.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);  // HDF5, not layerinit's
    ASSERT_GE(f, 0);
    H5Fclose(f);
  }
  const std::string bare_bytes = slurp(bare);
  for (const auto& [target, why] : {std::pair{text, std::string("it is not an HDF5 file")},
                                    std::pair{bare, std::string("it is an HDF5 file without the root attribute "
                                                                "format_version that layerinit writes")}}) {
    SCOPED_TRACE(target.string());
    try {
      open_hdf5_writer(target, fx.specs(), test_meta(), o);
      ADD_FAILURE() << "replaced";
    } catch (const checkpoint_refused& e) {
      EXPECT_EQ(std::string(e.what()), "checkpoint: refusing to replace " + target.string() +
                                           " (--force replaces only what layerinit wrote): " + why);
    }
  }
  EXPECT_EQ(slurp(text), "old");
  EXPECT_EQ(slurp(bare), bare_bytes);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"bare.h5", "text.h5"}));
}

TEST(CheckpointHdf5, UnwritablePathFailsBeforeAnyWork) {
  TempDir dir;
  Fixture fx;
  try {
    open_hdf5_writer(dir.path() / "missing" / "model.h5", fx.specs(), test_meta(), {});
    FAIL();
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path() / "missing").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
  }
  { std::ofstream(dir.path() / "file") << "x"; }
  EXPECT_THROW(open_hdf5_writer(dir.path() / "file" / "model.h5", fx.specs(), test_meta(), {}), checkpoint_error);
  fs::create_directory(dir.path() / "d");
  WriterOptions o;
  o.overwrite = true;
  EXPECT_THROW(open_hdf5_writer(dir.path() / "d", fx.specs(), test_meta(), o), checkpoint_error);
}

TEST(CheckpointHdf5, FreeSpaceIsCheckedAgainstThePlan) {
  TempDir dir;
  EXPECT_NO_THROW(check_free_space(dir.path(), 1024));
  try {
    check_free_space(dir.path() / "x.h5", std::uint64_t{1} << 62);
    FAIL();
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("not enough space for " + (dir.path() / "x.h5").string()), std::string::npos)
        << e.what();
  }
  Fixture fx;
  const auto plan = planned_bytes(CheckpointFormat::hdf5, fx.specs(), test_meta(), {});
  EXPECT_GE(plan, 2 * 65536 * 2 + 48u);
  EXPECT_LT(plan, 4u << 20);
}

TEST(CheckpointHdf5, KilledMidWayLeavesTheOldFileIntact) {
  TempDir dir;
  const fs::path out = dir.path() / "model.h5";
  Fixture fx;
  // First: no old file; the child dies after some slabs.
  int st = in_child([&] {
    auto w = open_hdf5_writer(out, fx.specs(), test_meta(), {});
    write_all(*w, 0, fx.pat.data(), 30000, 10000);
    ::kill(::getpid(), SIGKILL);
    return 0;
  });
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  EXPECT_FALSE(fs::exists(out));
  // Then: an old checkpoint is there; a forced rewrite is killed; the old one still reads back.
  {
    auto w = open_hdf5_writer(out, fx.specs(), test_meta(), {});
    fx.write(*w);
    w->commit();
  }
  const auto before = fs::file_size(out);
  st = in_child([&] {
    WriterOptions o;
    o.overwrite = true;
    auto w = open_hdf5_writer(out, fx.specs(), test_meta(), o);
    write_all(*w, 0, fx.pat.data(), fx.pat.size(), 10000);
    write_all(*w, 1, fx.pat.data(), 20000, 10000);
    ::_exit(3);  // no destructors: like a crash
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 3);
  EXPECT_EQ(fs::file_size(out), before);
  EXPECT_EQ(read_native_float(out, "model.norm.weight"), fx.f32);
  // Temporaries of killed writers stay (nobody survived to remove them) and are dot-files.
  for (const auto& e : dir.entries())
    if (e != "model.h5") EXPECT_EQ(e.rfind(".model.h5.tmp-", 0), 0u) << e;
}

// A killed writer's temporary (250-430 MB of a real model) is removed by the next writer of the same
// target, with or without overwrite, as a safetensors writer's staging is; a file of that name that is
// not layerinit's staging (no locked marker around it) is left alone.
TEST(CheckpointHdf5, ALaterWriterRemovesWhatAKilledOneLeft) {
  TempDir dir;
  const fs::path out = dir.path() / "model.h5";
  Fixture fx;
  layerinit::testing::write_file(dir.path() / ".model.h5.tmp-Foreig", "someone's own");
  auto killed = [&](bool overwrite) {
    const int st = in_child([&] {
      WriterOptions o;
      o.overwrite = overwrite;
      auto w = open_hdf5_writer(out, fx.specs(), test_meta(), o);
      write_all(*w, 0, fx.pat.data(), 30000, 10000);
      ::kill(::getpid(), SIGKILL);
      return 0;
    });
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  };
  auto temporaries = [&] {
    std::vector<std::string> v;
    for (const auto& e : dir.entries())
      if (e.rfind(".model.h5.tmp-", 0) == 0 && e != ".model.h5.tmp-Foreig") v.push_back(e);
    return v;
  };
  for (bool overwrite : {false, true}) {
    SCOPED_TRACE(overwrite ? "over an old file, with overwrite" : "no target yet");
    killed(overwrite);
    const std::vector<std::string> stale = temporaries();
    ASSERT_EQ(stale.size(), 1u);
    WriterOptions o;
    o.overwrite = overwrite;
    auto w = open_hdf5_writer(out, fx.specs(), test_meta(), o);
    const std::vector<std::string> now = temporaries();  // its own only
    ASSERT_EQ(now.size(), 1u);
    EXPECT_NE(now[0], stale[0]);
    fx.write(*w);
    w->commit();
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{".model.h5.tmp-Foreig", "model.h5"}));
    EXPECT_EQ(read_native_float(out, "model.norm.weight"), fx.f32);
  }
}

TEST(CheckpointHdf5, FullFilesystemFailsClearlyAndLeavesNothing) {
  TempDir dir;
  const fs::path out = dir.path() / "model.h5";
  const ChildOutcome child = in_child_with_message([&](std::string& message) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {100000, 100000};  // files may not grow past 100 kB: the data is 260 kB
    ::setrlimit(RLIMIT_FSIZE, &rl);
    Fixture fx;
    try {
      auto w = open_hdf5_writer(out, fx.specs(), test_meta(), {});
      fx.write(*w);
      w->commit();
    } catch (const checkpoint_error& e) {
      message = e.what();
      return 0;
    }
    return 1;
  });
  const int st = child.status;
  ASSERT_TRUE(WIFEXITED(st)) << "child killed by signal " << WTERMSIG(st);
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the write did not fail";
  const std::string& msg = child.message;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_NE(msg.find(out.string()), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
  EXPECT_TRUE(dir.entries().empty());
}
