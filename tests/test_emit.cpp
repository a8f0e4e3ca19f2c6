// emit_checkpoint (checkpoint/emit.hpp): a model streamed part by part into HDF5 and safetensors.
// The reported hashes equal an in-memory build's (per tensor, and per layer slice when stacked); the
// bytes read back from the file (HDF5 C API, raw, no conversion; safetensors through a minimal
// parser written here) equal the build's; checkpoint_datasets names and shapes; cancellation and an
// existing target leave the directory as it was; the tracked peak is the plan's streamed peak.
#include <hdf5.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/stacking/stack.hpp>
#include "simulated_node.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace layerinit;

using layerinit::testing::slurp;
using layerinit::testing::TempDir;

namespace {

struct FileTensor {
  Shape shape;
  std::string dtype;  // HDF5: the "dtype" attribute; safetensors: "BF16", "F16", "F32"
  std::string bytes;
};

// Every dataset of an HDF5 file as raw bytes: read with the file's own type, so nothing converts.
std::map<std::string, FileTensor> read_hdf5_raw(const fs::path& file) {
  std::map<std::string, FileTensor> out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  if (f < 0) return out;
  H5G_info_t info;
  H5Gget_info(f, &info);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[512];
    H5Lget_name_by_idx(f, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t type = H5Dget_type(d);
    hid_t space = H5Dget_space(d);
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    FileTensor t;
    for (auto x : dims) t.shape.push_back(x);
    t.bytes.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)) * H5Tget_size(type));
    EXPECT_GE(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.bytes.data()), 0) << name;
    hid_t a = H5Aopen(d, "dtype", H5P_DEFAULT);
    if (a >= 0) {
      hid_t at = H5Aget_type(a);
      char* p = nullptr;
      H5Aread(a, at, &p);
      t.dtype = p ? p : "";
      H5free_memory(p);
      H5Tclose(at);
      H5Aclose(a);
    }
    out[name] = std::move(t);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(d);
  }
  H5Fclose(f);
  return out;
}

// A minimal safetensors reader: u64 little-endian header length, JSON header, data.
std::map<std::string, FileTensor> read_safetensors_raw(const fs::path& file) {
  std::map<std::string, FileTensor> out;
  const std::string all = slurp(file);
  EXPECT_GE(all.size(), 8u);
  if (all.size() < 8) return out;
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(all[static_cast<std::size_t>(i)]);
  EXPECT_LE(8 + n, all.size());
  const auto header = nlohmann::json::parse(all.substr(8, n));
  const std::size_t base = 8 + n;
  std::uint64_t covered = 0;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    FileTensor t;
    for (const auto& d : v["shape"]) t.shape.push_back(d.get<std::uint64_t>());
    t.dtype = v["dtype"].get<std::string>();
    const std::uint64_t begin = v["data_offsets"][0], end = v["data_offsets"][1];
    EXPECT_LE(begin, end);
    EXPECT_LE(base + end, all.size());
    t.bytes = all.substr(base + begin, end - begin);
    covered += end - begin;
    out[name] = std::move(t);
  }
  EXPECT_EQ(base + covered, all.size()) << "data not covered exactly by the tensors";
  return out;
}

std::string st_dtype(DType d) { return d == DType::bf16 ? "BF16" : d == DType::f16 ? "F16" : "F32"; }

struct Case {
  const char* preset;
  CheckpointFormat format;
  Layout layout;
};

std::string case_name(const Case& c) {
  return std::string(c.preset) + "/" + std::string(format_name(c.format)) + "/" + std::string(layout_name(c.layout));
}

BuildOptions opts(Layout layout, DType dtype = DType::bf16) {
  BuildOptions o;
  o.layout = layout;
  o.dtype = dtype;
  o.seed = 1234;
  return o;
}

fs::path data_file(const fs::path& target, CheckpointFormat f) {
  return f == CheckpointFormat::hdf5 ? target : target / "model.safetensors";
}

// Emits, builds the same model in memory, and compares hashes and the file's bytes with it.
void check_emit_equals_build(const ModelSpec& spec, const BuildOptions& o, CheckpointFormat format) {
  auto be = make_host_backend(2);
  const Recipe recipe = make_recipe("hf");
  TempDir dir;
  const fs::path target = dir.path() / (format == CheckpointFormat::hdf5 ? "m.h5" : "m");

  tracking_resource tracker(be->memory());
  const Builder eb(spec, recipe, o, *be, tracker);
  EmitOptions eo;
  eo.format = format;
  std::uint64_t calls = 0, last_layers = 0;
  eo.progress = [&](const EmitProgress& p) {
    ++calls;
    EXPECT_GE(p.layers_done, last_layers);
    last_layers = p.layers_done;
    EXPECT_EQ(p.layers_total, spec.num_layers);
    EXPECT_LE(p.bytes_done, p.bytes_total);
  };
  const EmitResult r = emit_checkpoint(eb, *be, target, eo);
  const MemoryPlan plan = make_memory_plan(eb);
  EXPECT_EQ(tracker.stats().peak_bytes, plan.peak_streamed) << "emit's tracked peak is the largest part";
  EXPECT_EQ(tracker.stats().current_bytes, 0u);
  EXPECT_EQ(last_layers, spec.num_layers);
  EXPECT_EQ(calls, spec.num_layers + eb.plan_pre().size() + eb.plan_post().size()) << "one call per part";
  EXPECT_EQ(r.weight_bytes, plan.weight_bytes);
  EXPECT_EQ(r.file_bytes, format == CheckpointFormat::hdf5
                              ? fs::file_size(target)
                              : fs::file_size(target / "model.safetensors") +
                                    (fs::exists(target / "config.json") ? fs::file_size(target / "config.json") : 0));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{target.filename().string()}) << "no temporary left";

  // The same model in memory.
  tracking_resource bt(be->memory());
  const Builder bb(spec, recipe, o, *be, bt);
  const Model m = bb.build();
  std::vector<TensorView> views;
  m.for_each([&](const TensorView& v) { views.push_back(v); });
  const auto slices = m.layout == Layout::stacked ? unstack(m, spec) : std::vector<std::vector<TensorView>>{};

  const auto datasets = checkpoint_datasets(bb);
  ASSERT_EQ(datasets.size(), views.size());
  ASSERT_EQ(r.tensors.size(), views.size());
  const auto file = format == CheckpointFormat::hdf5 ? read_hdf5_raw(target) : read_safetensors_raw(target / "model.safetensors");
  EXPECT_EQ(file.size(), views.size());
  std::size_t stacked_j = 0;
  for (std::size_t k = 0; k < views.size(); ++k) {
    const TensorView& v = views[k];
    const TensorReport& t = r.tensors[k];
    SCOPED_TRACE(v.name);
    // checkpoint_datasets: file order, names and memory shapes of the built tensors.
    EXPECT_EQ(datasets[k].name, v.name);
    EXPECT_EQ(datasets[k].shape, v.shape);
    EXPECT_EQ(datasets[k].dtype, v.dtype);
    // The report.
    EXPECT_EQ(t.name, v.name);
    EXPECT_EQ(t.shape, v.shape);
    EXPECT_EQ(t.dtype, v.dtype);
    EXPECT_EQ(t.bytes, v.bytes());
    EXPECT_EQ(t.hash, hash_tensor(*be, v));
    const bool is_stacked = m.layout == Layout::stacked && k >= m.pre.size() && k < m.pre.size() + m.stacked.size();
    if (is_stacked) {
      // One hash per slice: per layer, then per expert for a fused [L, E, ...] buffer.
      const StackedLayout sl = stacked_layout(spec, m.experts);
      const std::uint64_t E = sl.buffers[stacked_j].experts;
      EXPECT_EQ(datasets[k].slab_elements, numel(v.shape) / (spec.num_layers * E));
      ASSERT_EQ(t.layer_hashes.size(), spec.num_layers * E);
      std::size_t h = 0;
      for (std::uint64_t i = 0; i < spec.num_layers; ++i)
        for (std::size_t j = 0; j < spec.layer.tensors.size(); ++j)
          if (sl.buffer[j] == stacked_j) EXPECT_EQ(t.layer_hashes[h++], hash_tensor(*be, slices[i][j])) << "layer " << i << " " << j;
      ++stacked_j;
    } else {
      EXPECT_TRUE(t.layer_hashes.empty());
    }
    // The file.
    auto it = file.find(v.name);
    ASSERT_NE(it, file.end());
    EXPECT_EQ(it->second.shape, v.shape);
    EXPECT_EQ(it->second.dtype, format == CheckpointFormat::hdf5 ? std::string(dtype_name(v.dtype)) : st_dtype(v.dtype));
    ASSERT_EQ(it->second.bytes.size(), v.bytes());
    EXPECT_EQ(std::memcmp(it->second.bytes.data(), v.data, v.bytes()), 0) << "file bytes differ from the build";
  }
}

}  // namespace

class EmitEqualsBuild : public ::testing::TestWithParam<Case> {};

TEST_P(EmitEqualsBuild, HashesAndBytes) {
  const Case c = GetParam();
  check_emit_equals_build(make_preset(c.preset), opts(c.layout), c.format);
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (const char* p : {"llama-tiny", "gpt2-tiny", "mixtral-tiny"})
    for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors})
      for (Layout l : {Layout::per_layer, Layout::stacked}) v.push_back({p, f, l});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Presets, EmitEqualsBuild, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string s = case_name(i.param);
                           for (auto& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// GLM-4.5 with n_shared_experts 0: transformers' Glm4MoeMoE still makes mlp.shared_experts, of
// zero elements ([0, 64], [0, 64], [64, 0]); both formats hold them, per layer and stacked ([2, 0, 64]).
TEST(Emit, ZeroElementTensors) {
  auto config = nlohmann::json::parse(slurp(fs::path(LAYERINIT_SOURCE_DIR) / "tests/hf_configs/tiny/glm4_moe.json"));
  config["n_shared_experts"] = 0;
  const ModelSpec spec = spec_from_hf_config(config.dump());
  for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors})
    for (Layout l : {Layout::per_layer, Layout::stacked}) {
      SCOPED_TRACE(case_name({"glm4_moe", f, l}));
      check_emit_equals_build(spec, opts(l), f);
    }
}

TEST(Emit, OtherDTypesOrientationAndOverrides) {
  // fp16 with fp32 norms, [in, out] storage: the file holds the build's bytes in both layouts.
  for (Layout l : {Layout::per_layer, Layout::stacked})
    for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
      SCOPED_TRACE(std::string(layout_name(l)) + " " + std::string(format_name(f)));
      BuildOptions o = opts(l, DType::f16);
      o.orientation = Orientation::in_out;
      o.dtype_overrides = {{"*norm*", DType::f32}};
      check_emit_equals_build(make_preset("llama-tiny"), o, f);
    }
}

// Device-resident parts go through the host staging buffer (read_on_host) in pieces of whole
// elements: with a simulated device and a staging buffer of 1001 bytes (a multiple of no element
// size), every tensor in the file and every reported hash equal the host backend's emit of the same
// model. (Tensors, not whole files: HDF5 object headers carry modification times.)
TEST(Emit, DeviceStagingGivesTheHostBytesAndHashes) {
  const ModelSpec spec = make_preset("llama-tiny");
  for (Layout l : {Layout::per_layer, Layout::stacked})
    for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
      SCOPED_TRACE(std::string(layout_name(l)) + " " + std::string(format_name(f)));
      BuildOptions o = opts(l);
      o.dtype_overrides = {{"*norm*", DType::f32}};
      TempDir dir;
      auto emit_with = [&](backend& be, const std::string& name, std::uint64_t staging_bytes) {
        const fs::path target = dir.path() / (f == CheckpointFormat::hdf5 ? name + ".h5" : name);
        tracking_resource tracker(be.memory());
        EmitOptions eo;
        eo.format = f;
        eo.staging_bytes = staging_bytes;
        const EmitResult r = emit_checkpoint(Builder(spec, make_recipe("hf"), o, be, tracker), be, target, eo);
        const auto file = f == CheckpointFormat::hdf5 ? read_hdf5_raw(target) : read_safetensors_raw(data_file(target, f));
        return std::make_pair(r, file);
      };
      auto host = make_host_backend(2);
      const layerinit::testing::SimulatedNode node(1);
      const auto dev = make_backend("cuda");
      const auto [want, want_file] = emit_with(*host, "host", 64ull << 20);
      const auto [got, got_file] = emit_with(*dev, "device", 1001);
      const std::vector<std::uint64_t> copies = node.copies();
      EXPECT_FALSE(copies.empty());
      for (std::uint64_t n : copies) EXPECT_LE(n, 1001u);
      ASSERT_EQ(got.tensors.size(), want.tensors.size());
      ASSERT_EQ(got_file.size(), want_file.size());
      for (std::size_t k = 0; k < want.tensors.size(); ++k) {
        SCOPED_TRACE(want.tensors[k].name);
        const FileTensor& w = want_file.at(want.tensors[k].name);
        const FileTensor& g = got_file.at(want.tensors[k].name);
        EXPECT_EQ(g.shape, w.shape);
        EXPECT_EQ(g.dtype, w.dtype);
        EXPECT_TRUE(g.bytes == w.bytes) << "tensor bytes in the file differ";
        EXPECT_EQ(got.tensors[k].hash, want.tensors[k].hash);
        EXPECT_EQ(got.tensors[k].hash, content_hash(g.bytes.data(), g.bytes.size()));
        EXPECT_EQ(got.tensors[k].layer_hashes, want.tensors[k].layer_hashes);
        const bool is_stacked = l == Layout::stacked && k > 0 && k + 2 < want.tensors.size();  // not embed, norm, lm_head
        EXPECT_EQ(want.tensors[k].layer_hashes.size(), is_stacked ? spec.num_layers : 0u);
      }
    }
}

TEST(Emit, CheckpointDatasetsNamesAndShapes) {
  auto be = make_dry_backend();
  const ModelSpec spec = make_preset("llama-tiny");
  {
    const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *be, be->memory());
    const auto d = checkpoint_datasets(b);
    ASSERT_EQ(d.size(), 1 + 4 * 9 + 2u);
    EXPECT_EQ(d[0].name, "model.embed_tokens.weight");
    EXPECT_EQ(d[0].shape, (Shape{512, 64}));
    EXPECT_EQ(d[1].name, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(d[2].name, "model.layers.0.self_attn.k_proj.weight");
    EXPECT_EQ(d[2].shape, (Shape{32, 64}));
    EXPECT_EQ(d[1 + 9 * 3 + 6].name, "model.layers.3.mlp.down_proj.weight");
    EXPECT_EQ(d[1 + 9 * 3 + 6].shape, (Shape{64, 176}));
    EXPECT_EQ(d[37].name, "model.norm.weight");
    EXPECT_EQ(d[38].name, "lm_head.weight");
    for (const auto& x : d) EXPECT_EQ(x.dtype, DType::bf16);
  }
  {
    BuildOptions o = opts(Layout::stacked);
    o.orientation = Orientation::in_out;
    const Builder b(spec, make_recipe("hf"), o, *be, be->memory());
    const auto d = checkpoint_datasets(b);
    ASSERT_EQ(d.size(), 1 + 9 + 2u);
    EXPECT_EQ(d[1].name, "model.layers.self_attn.q_proj.weight");
    EXPECT_EQ(d[1].shape, (Shape{4, 64, 64}));
    EXPECT_EQ(d[1].slab_elements, 64u * 64u);
    EXPECT_EQ(d[2].name, "model.layers.self_attn.k_proj.weight");
    EXPECT_EQ(d[2].shape, (Shape{4, 64, 32}));  // [in, out]
    EXPECT_EQ(d[7].name, "model.layers.mlp.down_proj.weight");
    EXPECT_EQ(d[7].shape, (Shape{4, 176, 64}));
    EXPECT_EQ(d[8].name, "model.layers.input_layernorm.weight");
    EXPECT_EQ(d[8].shape, (Shape{4, 64}));
    EXPECT_EQ(d[8].slab_elements, 64u);
    EXPECT_EQ(d[11].name, "lm_head.weight");
    EXPECT_EQ(d[11].shape, (Shape{64, 512}));
  }
}

TEST(Emit, CancellationLeavesNoTargetAndNoTemporary) {
  auto be = make_host_backend(2);
  const ModelSpec spec = make_preset("gpt2-tiny");
  for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
    for (bool old : {false, true}) {
      SCOPED_TRACE(std::string(format_name(f)) + (old ? " over an old checkpoint" : ""));
      TempDir dir;
      const fs::path target = dir.path() / (f == CheckpointFormat::hdf5 ? "m.h5" : "m");
      tracking_resource tracker(be->memory());
      const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *be, tracker);
      std::string before;
      if (old) {
        EmitOptions first;
        first.format = f;
        emit_checkpoint(Builder(spec, make_recipe("hf"), opts(Layout::stacked), *be, tracker), *be, target, first);
        before = slurp(data_file(target, f));
      }
      std::atomic<bool> cancel{false};
      EmitOptions eo;
      eo.format = f;
      eo.writer.overwrite = true;
      eo.cancel = &cancel;
      std::uint64_t parts = 0;
      eo.progress = [&](const EmitProgress& p) {
        ++parts;
        if (p.layers_done == 1) cancel.store(true);
      };
      try {
        emit_checkpoint(b, *be, target, eo);
        ADD_FAILURE() << "not cancelled";
      } catch (const checkpoint_error& e) {
        ADD_FAILURE() << "cancellation is not an I/O failure: " << e.what();
      } catch (const error& e) {
        EXPECT_EQ(std::string(e.what()), "interrupted");
      }
      EXPECT_EQ(parts, 2u + 1u) << "stops at the next part (wte, wpe, layer 0)";
      EXPECT_EQ(tracker.stats().current_bytes, 0u);
      if (old) {
        EXPECT_EQ(dir.entries(), std::vector<std::string>{target.filename().string()});
        EXPECT_EQ(slurp(data_file(target, f)), before) << "the old checkpoint changed";
      } else {
        EXPECT_TRUE(dir.entries().empty()) << "left: " << (dir.entries().empty() ? "" : dir.entries()[0]);
      }
    }
  }
}

// opts.before_publish runs once the checkpoint is complete, before it is published: it gets the result
// as returned (file_bytes those of the file or directory about to appear) while the target still holds
// the old checkpoint, and when it throws nothing is published and no temporary is left.
TEST(Emit, BeforePublishRunsBeforeTheRenameAndItsFailurePublishesNothing) {
  auto be = make_host_backend(2);
  const ModelSpec spec = make_preset("gpt2-tiny");
  for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
    SCOPED_TRACE(format_name(f));
    TempDir dir;
    const fs::path target = dir.path() / (f == CheckpointFormat::hdf5 ? "m.h5" : "m");
    tracking_resource tracker(be->memory());
    EmitOptions first;
    first.format = f;
    emit_checkpoint(Builder(spec, make_recipe("hf"), opts(Layout::stacked), *be, tracker), *be, target, first);
    const std::string before = slurp(data_file(target, f));
    const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *be, tracker);
    EmitOptions eo;
    eo.format = f;
    eo.writer.overwrite = true;
    int calls = 0;
    EmitResult seen;
    eo.before_publish = [&](const EmitResult& r) {
      ++calls;
      seen = r;
      EXPECT_EQ(slurp(data_file(target, f)), before) << "published before the caller's step";
      throw std::runtime_error("cannot write to standard output: No space left on device");
    };
    try {
      emit_checkpoint(b, *be, target, eo);
      ADD_FAILURE() << "published although before_publish failed";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "cannot write to standard output: No space left on device");
    }
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(slurp(data_file(target, f)), before);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{target.filename().string()});
    eo.before_publish = [&](const EmitResult& r) { seen = r; };
    const EmitResult r = emit_checkpoint(b, *be, target, eo);
    EXPECT_EQ(seen.file_bytes, r.file_bytes);
    EXPECT_EQ(r.file_bytes, fs::file_size(data_file(target, f)));  // the one file: no config.json asked for
    EXPECT_EQ(seen.tensors.size(), r.tensors.size());
    EXPECT_NE(slurp(data_file(target, f)), before);
  }
}

TEST(Emit, ExistingTargetWithoutOverwriteIsARefusalAndUntouched) {
  auto be = make_host_backend(2);
  const ModelSpec spec = make_preset("llama-tiny");
  for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
    SCOPED_TRACE(std::string(format_name(f)));
    TempDir dir;
    const fs::path target = dir.path() / (f == CheckpointFormat::hdf5 ? "m.h5" : "m");
    tracking_resource tracker(be->memory());
    EmitOptions eo;
    eo.format = f;
    emit_checkpoint(Builder(spec, make_recipe("hf"), opts(Layout::per_layer), *be, tracker), *be, target, eo);
    const std::string before = slurp(data_file(target, f));
    const auto t0 = fs::last_write_time(data_file(target, f));
    // A different model (another seed), without overwrite.
    BuildOptions other = opts(Layout::stacked);
    other.seed = 99;
    bool progressed = false;
    eo.progress = [&](const EmitProgress&) { progressed = true; };
    try {
      emit_checkpoint(Builder(spec, make_recipe("hf"), other, *be, tracker), *be, target, eo);
      ADD_FAILURE() << "overwrote without overwrite";
    } catch (const checkpoint_refused& e) {  // the writer's own type, not std::invalid_argument
      EXPECT_NE(std::string(e.what()).find("refusing to overwrite existing " + target.string()), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(progressed) << "work started before the target was checked";
    EXPECT_EQ(slurp(data_file(target, f)), before);
    EXPECT_EQ(fs::last_write_time(data_file(target, f)), t0);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{target.filename().string()});
    // With overwrite the new model replaces it.
    eo.writer.overwrite = true;
    emit_checkpoint(Builder(spec, make_recipe("hf"), other, *be, tracker), *be, target, eo);
    EXPECT_NE(slurp(data_file(target, f)), before);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{target.filename().string()});
  }
}

TEST(Emit, AnEnvironmentFailureAtOpenKeepsItsType) {
  if (layerinit::testing::kAddressSanitizer)
    GTEST_SKIP() << "with every descriptor taken, the sanitizers cannot open the pipe they read memory through and report a false invalid vptr";
  // Every shard file is opened up front: with no descriptor left, opening fails with EMFILE, an
  // environment failure: checkpoint_error, neither a refusal nor std::invalid_argument.
  TempDir dir;
  const fs::path target = dir.path() / "m";
  const layerinit::testing::ChildOutcome child = layerinit::testing::in_child_with_message([&](std::string& message) {
    auto be = make_host_backend(1);
    const Builder b(make_preset("llama-tiny"), make_recipe("hf"), opts(Layout::per_layer), *be, be->memory());
    EmitOptions eo;
    eo.format = CheckpointFormat::safetensors;
    eo.writer.max_shard_size = 1;  // a shard per tensor
    const int lowest_free = ::dup(0);
    ::close(lowest_free);
    const struct rlimit rl = {static_cast<rlim_t>(lowest_free) + 1, static_cast<rlim_t>(lowest_free) + 1};
    ::setrlimit(RLIMIT_NOFILE, &rl);
    try {
      emit_checkpoint(b, *be, target, eo);
    } catch (const checkpoint_refused& e) {
      message = std::string("refusal: ") + e.what();
      return 2;
    } catch (const checkpoint_error& e) {
      message = e.what();
      return 0;
    } catch (const std::exception& e) {
      message = std::string("other type: ") + e.what();
      return 3;
    }
    return 1;
  });
  ASSERT_TRUE(WIFEXITED(child.status));
  EXPECT_EQ(WEXITSTATUS(child.status), 0) << child.message;
  // Which shard fails depends on the descriptors the test runner holds; the 39 tensors are 39 shards.
  const std::string& m = child.message;
  EXPECT_EQ(m.rfind("checkpoint: cannot create " + (target / "model-").string(), 0), 0u) << m;
  const std::string tail = "-of-00039.safetensors: Too many open files";
  EXPECT_TRUE(m.size() > tail.size() && m.compare(m.size() - tail.size(), tail.size(), tail) == 0) << m;
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Emit, RefusesTheDryBackendAndUnorderedLayers) {
  auto dry = make_dry_backend();
  TempDir dir;
  const ModelSpec spec = make_preset("llama-tiny");
  EXPECT_THROW(emit_checkpoint(Builder(spec, make_recipe("hf"), opts(Layout::per_layer), *dry, dry->memory()), *dry,
                               dir.path() / "m.h5", {}),
               layerinit::logic_error);  // the dry backend: misuse
  auto be = make_host_backend(2);
  BuildOptions o = opts(Layout::per_layer);
  o.layer_order = {3, 2, 1, 0};
  EXPECT_THROW(emit_checkpoint(Builder(spec, make_recipe("hf"), o, *be, be->memory()), *be, dir.path() / "m.h5", {}),
               std::invalid_argument);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Emit, PeakIsTheLargestPartForEveryPresetShape) {
  // A model whose largest part is a layer (mlp-deep) and ones whose largest part is an embedding.
  auto be = make_host_backend(2);
  for (const char* name : {"mlp-deep", "gpt2-tiny", "mixtral-tiny"}) {
    SCOPED_TRACE(name);
    TempDir dir;
    const ModelSpec spec = make_preset(name);
    tracking_resource tracker(be->memory());
    const Builder b(spec, make_recipe("hf"), opts(Layout::stacked), *be, tracker);
    EmitOptions eo;
    eo.format = CheckpointFormat::safetensors;
    emit_checkpoint(b, *be, dir.path() / "m", eo);
    const MemoryPlan p = make_memory_plan(b);
    EXPECT_EQ(tracker.stats().peak_bytes, p.peak_streamed);
    EXPECT_EQ(p.peak_streamed, std::max(p.largest_layer_bytes, p.largest_tensor_bytes));
  }
}

// An emit plans the model once: what the CLI's emit asks of one builder (its memory plan, the
// checkpoint's size, its dataset list, the stream) plans each tensor exactly once, in both layouts
// and formats; a second emit of the same builder plans only the layers a stream meets beyond those kept.
TEST(Emit, PlansEachTensorOnce) {
  auto be = make_host_backend(2);
  for (Layout l : {Layout::per_layer, Layout::stacked})
    for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
      SCOPED_TRACE(std::string(layout_name(l)) + " " + std::string(format_name(f)));
      TempDir dir;
      const ModelSpec spec = make_preset("llama-tiny");
      const std::uint64_t tensors = spec.pre.size() + spec.num_layers * spec.layer.tensors.size() + spec.post.size();
      const Builder b(spec, make_recipe("hf"), opts(l), *be, be->memory());
      EXPECT_EQ(b.tensors_planned(), 0u);
      (void)make_memory_plan(b);
      EXPECT_EQ(b.tensors_planned(), spec.pre.size() + spec.layer.tensors.size() + spec.post.size());
      EmitOptions eo;
      eo.format = f;
      (void)planned_checkpoint_bytes(b, f, {}, {});
      (void)checkpoint_datasets(b);
      emit_checkpoint(b, *be, dir.path() / "m", eo);
      EXPECT_EQ(b.tensors_planned(), tensors);
      // Layer 0 and the ends are kept; layers 1.. are planned as the stream meets them, one at a time.
      emit_checkpoint(b, *be, dir.path() / "n", eo);
      EXPECT_EQ(b.tensors_planned(), tensors + (spec.num_layers - 1) * spec.layer.tensors.size());
    }
}
