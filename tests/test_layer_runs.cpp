// Plans and planned checkpoint sizes of many identical layers, computed without a list per layer:
// Builder::uniform_layers says when layer 0 stands for all, make_memory_plan keeps runs of equal
// layers, planned_checkpoint_bytes counts datasets and their names in O(1) per layer tensor. Each
// fast path equals the per-layer computation (forced by an override that may tell layers apart but
// matches nothing), across layer counts where the index gains a digit; 4e9 layers plan in O(1).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/config.hpp>

using namespace layerinit;

namespace {

ModelSpec deep_spec(std::uint64_t layers) {
  return spec_from_json(R"({"name": "deep", "family": "custom", "hyper": {"hidden_size": 16},
    "pre": [{"name": "embed.weight", "shape": [32, 16], "role": "embedding"}],
    "layer": {"prefix": "blocks.", "count": )" + std::to_string(layers) + R"(, "tensors": [
      {"name": "norm.weight", "shape": [16], "role": "norm_weight"},
      {"name": "up.weight", "shape": [24, 16], "role": "linear_weight", "fan_in": 16, "fan_out": 24, "transposable": true}]},
    "post": [{"name": "head.weight", "shape": [5, 16], "role": "head_weight", "fan_in": 16, "fan_out": 5}]})");
}

BuildOptions options(Layout l, std::vector<DTypeOverride> overrides = {}) {
  BuildOptions o;
  o.layout = l;
  o.dtype_overrides = std::move(overrides);
  return o;
}

// Tells layers apart by its '?', so the per-layer paths run, but matches no tensor.
const DTypeOverride kMatchesNothing{"blocks.?*.nothing", DType::f32};

}  // namespace

TEST(LayerRuns, UniformLayersUnlessAnOverrideMayTellIndicesApart) {
  auto be = make_dry_backend();
  const ModelSpec spec = deep_spec(3);
  struct Case {
    std::string pattern;
    bool uniform;
  };
  for (const Case& c : {Case{"*norm*", true}, Case{"blocks.*.up.weight", true}, Case{"*", true},
                        Case{"blocks.1.*", false}, Case{"blocks.?.*", false}, Case{"blocks.[02].*", false},
                        Case{"blocks.\\*", false}, Case{"*1*", false}}) {
    SCOPED_TRACE(c.pattern);
    const Builder b(spec, make_recipe("hf"), options(Layout::per_layer, {{c.pattern, DType::f32}}), *be, be->memory());
    EXPECT_EQ(b.uniform_layers(), c.uniform);
  }
  const Builder none(spec, make_recipe("hf"), options(Layout::per_layer), *be, be->memory());
  EXPECT_TRUE(none.uniform_layers());
}

TEST(LayerRuns, UniformPlanEqualsThePerLayerPlan) {
  auto be = make_dry_backend();
  for (std::uint64_t layers : {1u, 2u, 9u, 10u, 11u, 100u, 1234u}) {
    SCOPED_TRACE(std::to_string(layers) + " layers");
    const ModelSpec spec = deep_spec(layers);
    const Builder fast(spec, make_recipe("hf"), options(Layout::per_layer, {{"*norm*", DType::f32}}), *be, be->memory());
    const Builder slow(spec, make_recipe("hf"), options(Layout::per_layer, {{"*norm*", DType::f32}, kMatchesNothing}), *be,
                       be->memory());
    ASSERT_TRUE(fast.uniform_layers());
    ASSERT_FALSE(slow.uniform_layers());
    const MemoryPlan a = make_memory_plan(fast), b = make_memory_plan(slow);
    const std::uint64_t layer = 16 * 4 + 24 * 16 * 2;  // fp32 norm, bf16 up
    ASSERT_EQ(a.layer_runs.size(), 1u);
    ASSERT_EQ(b.layer_runs.size(), 1u) << "equal layers merge into one run";
    EXPECT_EQ(a.layer_runs[0].first, 0u);
    EXPECT_EQ(a.layer_runs[0].count, layers);
    EXPECT_EQ(a.layer_runs[0].bytes, layer);
    EXPECT_EQ(b.layer_runs[0].count, layers);
    EXPECT_EQ(b.layer_runs[0].bytes, layer);
    EXPECT_EQ(a.weight_bytes, 32 * 16 * 2 + layers * layer + 5 * 16 * 2);
    EXPECT_EQ(a.weight_bytes, b.weight_bytes);
    EXPECT_EQ(a.largest_layer_bytes, b.largest_layer_bytes);
    EXPECT_EQ(a.largest_tensor, b.largest_tensor);
    EXPECT_EQ(a.largest_tensor_bytes, b.largest_tensor_bytes);
    EXPECT_EQ(a.peak_restack, b.peak_restack);
    EXPECT_EQ(a.peak_streamed, b.peak_streamed);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(a.peak_naive[k], b.peak_naive[k]) << "naive " << k;
  }
}

TEST(LayerRuns, LayersThatDifferMakeRuns) {
  // blocks.10 .. blocks.19 in fp32: three runs, each layer's bytes from its run.
  auto be = make_dry_backend();
  const ModelSpec spec = deep_spec(25);
  const Builder b(spec, make_recipe("hf"), options(Layout::per_layer, {{"blocks.1?.*", DType::f32}}), *be, be->memory());
  const MemoryPlan p = make_memory_plan(b);
  const std::uint64_t half = 16 * 2 + 24 * 16 * 2, full = 2 * half;
  ASSERT_EQ(p.layer_runs.size(), 3u);
  EXPECT_EQ(p.layer_runs[0].first, 0u);
  EXPECT_EQ(p.layer_runs[0].count, 10u);
  EXPECT_EQ(p.layer_runs[0].bytes, half);
  EXPECT_EQ(p.layer_runs[1].first, 10u);
  EXPECT_EQ(p.layer_runs[1].count, 10u);
  EXPECT_EQ(p.layer_runs[1].bytes, full);
  EXPECT_EQ(p.layer_runs[2].first, 20u);
  EXPECT_EQ(p.layer_runs[2].count, 5u);
  EXPECT_EQ(p.layer_runs[2].bytes, half);
  for (std::uint64_t i = 0; i < 25; ++i) EXPECT_EQ(p.layer_bytes(i), i >= 10 && i < 20 ? full : half) << i;
  EXPECT_THROW(p.layer_bytes(25), std::out_of_range);
  EXPECT_EQ(p.weight_bytes, 32 * 16 * 2 + 15 * half + 10 * full + 5 * 16 * 2);
  EXPECT_EQ(p.largest_layer_bytes, full);
}

TEST(LayerRuns, PlannedCheckpointBytesEqualPlannedBytesOfTheDatasetList) {
  auto be = make_dry_backend();
  CheckpointMetadata meta;
  meta.model_spec = "{}";
  for (std::uint64_t layers : {1u, 9u, 10u, 11u, 99u, 100u, 101u, 1234u}) {
    for (Layout l : {Layout::per_layer, Layout::stacked}) {
      for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
        for (bool uniform : {true, false}) {
          SCOPED_TRACE(std::to_string(layers) + " layers, " + std::string(layout_name(l)) + ", " +
                       std::string(format_name(f)) + (uniform ? "" : ", per-layer path"));
          std::vector<DTypeOverride> o = {{"*norm*", DType::f32}};
          if (!uniform) o.push_back(kMatchesNothing);
          const Builder b(deep_spec(layers), make_recipe("hf"), options(l, o), *be, be->memory());
          for (std::uint64_t shard : {0ull, 1000ull}) {
            WriterOptions w;
            w.max_shard_size = shard;
            w.max_chunk_bytes = 512;  // several chunks per up.weight in HDF5
            EXPECT_EQ(planned_checkpoint_bytes(b, f, meta, w), planned_bytes(f, checkpoint_datasets(b), meta, w));
          }
        }
      }
    }
  }
  // llama-tiny, as emit runs it.
  const Builder llama(make_preset("llama-tiny"), make_recipe("hf"), options(Layout::per_layer), *be, be->memory());
  for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors})
    EXPECT_EQ(planned_checkpoint_bytes(llama, f, meta, {}), planned_bytes(f, checkpoint_datasets(llama), meta, {}));
}

TEST(LayerRuns, FourBillionLayersPlanInConstantTime) {
  auto be = make_dry_backend();
  const std::uint64_t L = 4000000000ull;
  const Builder b(deep_spec(L), make_recipe("hf"), options(Layout::per_layer), *be, be->memory());
  const auto t0 = std::chrono::steady_clock::now();
  const MemoryPlan p = make_memory_plan(b);
  const std::uint64_t disk = planned_checkpoint_bytes(b, CheckpointFormat::safetensors, {}, {});
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t layer = 16 * 2 + 24 * 16 * 2;
  ASSERT_EQ(p.layer_runs.size(), 1u);
  EXPECT_EQ(p.layer_runs[0].count, L);
  EXPECT_EQ(p.weight_bytes, 32 * 16 * 2 + L * layer + 5 * 16 * 2);
  EXPECT_EQ(p.layer_bytes(L - 1), layer);
  // safetensors: data, 64 + 24 * rank per tensor and every name twice. Names of layer i:
  // "blocks." + i + ".norm.weight" / ".up.weight"; the indices 0 .. 4e9-1 have 38,888,888,890 digits.
  const std::uint64_t digits = 10 + 90 * 2 + 900 * 3 + 9000 * 4 + 90000 * 5 + 900000 * 6 + 9000000 * 7 + 90000000 * 8 +
                               900000000ull * 9 + 3000000000ull * 10;
  ASSERT_EQ(digits, 38888888890ull);
  const std::uint64_t names = 2 * (L * (7 + 1 + 11) + digits) + 2 * (L * (7 + 1 + 9) + digits) + 2 * 12 + 2 * 11;
  const std::uint64_t entries = L * (64 + 24 * 1) + L * (64 + 24 * 2) + 2 * (64 + 24 * 2);
  const std::uint64_t data = p.weight_bytes;
  std::uint64_t meta = 0;
  for (const char* k : {"format_version", "library_version", "dtype", "seed", "recipe", "layout", "orientation", "model_spec"})
    meta += std::string(k).size() + 64;
  meta += 1 + std::string(LAYERINIT_VERSION).size();  // format_version "1"; the other values are empty
  EXPECT_EQ(disk, data + names + entries + meta + 4096 + 4096);
  EXPECT_LT(secs, 0.5);
}
