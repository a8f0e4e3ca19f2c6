// The builder's invariants: the bytes of a tensor depend only on (seed, canonical name, element
// index, dtype), never on layout, build order, orientation's memory placement or streaming.
#include <gtest/gtest.h>

#include <layerinit/backends/content_hash.hpp>
#include <layerinit/dtypes/round.hpp>

#include <algorithm>
#include <cstring>
#include <random>

#include "builder_util.hpp"
#include "simulated_node.hpp"
#include "naive.hpp"
#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/kernels/philox.hpp>

using namespace layerinit;
using layerinit::testing::hashes_by_name;

namespace {

struct Env {
  std::unique_ptr<backend> be = make_host_backend(2);
  tracking_resource tracker{be->memory(), tracking_resource::options{true, true}};
};

ModelSpec small_mlp() { return mlp_spec("mlp-small", {3, 64, 64, 64, 2}, true); }

std::vector<ModelSpec> small_models() {
  return {make_preset("llama-tiny"),   make_preset("gpt2-tiny"),    make_preset("mixtral-tiny"), make_preset("qwen2.5-tiny"),
          make_preset("gemma-2-tiny"), make_preset("deepseek-v3-tiny"), small_mlp()};
}

BuildOptions opts(Layout layout, DType dtype = DType::bf16, std::uint64_t seed = 7) {
  BuildOptions o;
  o.layout = layout;
  o.dtype = dtype;
  o.seed = seed;
  return o;
}

}  // namespace

TEST(Builder, PerLayerStackedRestackAndStreamGiveIdenticalBytes) {
  for (const ModelSpec& spec : small_models()) {
    SCOPED_TRACE(spec.name);
    Env env;
    const Recipe recipe = make_recipe("torchtitan");  // depth-scaled rules: per-layer fills differ
    const Model per_layer = Builder(spec, recipe, opts(Layout::per_layer), *env.be, env.tracker).build();
    const Model stacked = Builder(spec, recipe, opts(Layout::stacked), *env.be, env.tracker).build();
    Model restacked = stack(Builder(spec, recipe, opts(Layout::per_layer), *env.be, env.tracker).build(), spec, *env.be, env.tracker);
    const auto a = hashes_by_name(*env.be, per_layer, spec);
    EXPECT_EQ(a.size(), spec.pre.size() + spec.post.size() + spec.num_layers * spec.layer.tensors.size());
    EXPECT_EQ(a, hashes_by_name(*env.be, stacked, spec));
    EXPECT_EQ(a, hashes_by_name(*env.be, restacked, spec));

    std::map<std::string, std::uint64_t> streamed;
    Builder(spec, recipe, opts(Layout::per_layer), *env.be, env.tracker).stream([&](const Part& p) {
      for (const auto& v : p.tensors) streamed[v.name] = hash_tensor(*env.be, v);
    });
    EXPECT_EQ(a, streamed);
  }
}

// A stream's layers reuse the pages of the layer before (an emit faulted once per 4 KiB of its
// weights): every layer after the first is in the first's blocks, upstream allocates nothing for
// them, the values are the build's, and the peak stays the largest part's.
TEST(Builder, AStreamPutsEachLayerInThePagesOfTheOneBefore) {
  // [1024, 512] before the layers, three of [1024, 1024], [256, 1024] after.
  const ModelSpec spec = mlp_spec("mlp-wide", {512, 1024, 1024, 1024, 1024, 256}, false);
  Env env;
  const Recipe recipe = make_recipe("hf");
  const auto built = hashes_by_name(*env.be, Builder(spec, recipe, opts(Layout::per_layer), *env.be, env.tracker).build(), spec);
  env.tracker.reset_peak();
  const std::size_t before = env.tracker.stats().current_bytes, allocations = env.tracker.stats().total_count;
  std::map<std::string, std::uint64_t> streamed;
  std::vector<const void*> layer_blocks;
  std::size_t largest = 0;
  Builder(spec, recipe, opts(Layout::per_layer), *env.be, env.tracker).stream([&](const Part& p) {
    std::size_t bytes = 0;
    for (const auto& v : p.tensors) {
      streamed[v.name] = hash_tensor(*env.be, v);
      bytes += v.bytes();
    }
    largest = std::max(largest, bytes);
    if (p.kind == Part::Kind::layer) layer_blocks.push_back(p.tensors.front().data);
  });
  // Upstream allocated the first layer's tensors and those outside the layers, nothing more.
  EXPECT_EQ(env.tracker.stats().total_count - allocations, spec.pre.size() + spec.layer.tensors.size() + spec.post.size());
  EXPECT_EQ(streamed, built);
  ASSERT_GE(layer_blocks.size(), 3u);
  for (std::size_t i = 1; i < layer_blocks.size(); ++i) EXPECT_EQ(layer_blocks[i], layer_blocks[0]) << "layer " << i;
  EXPECT_EQ(env.tracker.stats().peak_bytes - before, largest);
  EXPECT_EQ(env.tracker.stats().current_bytes, before);  // the kept blocks went back at the end
}

// On a device the GPU never waits between parts: a build enqueues every part and synchronizes once,
// at its end; a stream synchronizes each part before its sink reads it.
TEST(Builder, ADeviceBuildSynchronizesOnceAndAStreamBeforeEachSink) {
  const layerinit::testing::SimulatedNode node(2);
  auto be = make_backend("cuda:1");
  tracking_resource tracker(be->memory());
  const ModelSpec spec = make_preset("llama-tiny");
  using W = SimulatedDeviceEvent::What;
  for (const Layout layout : {Layout::per_layer, Layout::stacked}) {
    SCOPED_TRACE(static_cast<int>(layout));
    (void)node.events();
    const Model m = Builder(spec, make_recipe("hf"), opts(layout), *be, tracker).build();
    const auto events = node.events();
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(std::count_if(events.begin(), events.end(), [](const auto& e) { return e.what == W::synchronize; }), 1);
    EXPECT_EQ(events.back().what, W::synchronize);
    EXPECT_GT(std::count_if(events.begin(), events.end(), [](const auto& e) { return e.what == W::fill; }), 2);
    EXPECT_TRUE(std::all_of(events.begin(), events.end(), [](const auto& e) { return e.device == 1; }));
  }
  int parts = 0;
  Builder(spec, make_recipe("hf"), opts(Layout::per_layer), *be, tracker).stream([&](const Part&) {
    const auto events = node.events();
    ++parts;
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events.back().what, W::synchronize);
    EXPECT_EQ(events[events.size() - 2].what, W::fill);
  });
  EXPECT_EQ(parts, static_cast<int>(spec.pre.size() + spec.num_layers + spec.post.size()));
}

TEST(Builder, ShuffledLayerOrderGivesIdenticalBytes) {
  const ModelSpec spec = make_preset("llama-tiny");
  Env env;
  const Recipe recipe = make_recipe("hf");
  const auto reference = hashes_by_name(*env.be, Builder(spec, recipe, opts(Layout::stacked), *env.be, env.tracker).build(), spec);
  std::mt19937 rng(12345);
  for (Layout layout : {Layout::per_layer, Layout::stacked}) {
    BuildOptions o = opts(layout);
    o.layer_order.resize(spec.num_layers);
    for (std::uint64_t i = 0; i < spec.num_layers; ++i) o.layer_order[i] = spec.num_layers - 1 - i;
    std::shuffle(o.layer_order.begin(), o.layer_order.end(), rng);
    std::vector<std::uint64_t> order_seen;
    const Model m = Builder(spec, recipe, o, *env.be, env.tracker).build([&](std::uint64_t i) { order_seen.push_back(i); });
    EXPECT_EQ(order_seen, o.layer_order);
    EXPECT_EQ(hashes_by_name(*env.be, m, spec), reference);
  }
}

TEST(Builder, LayerOrderMustBeAPermutation) {
  const ModelSpec spec = make_preset("llama-tiny");
  Env env;
  BuildOptions o = opts(Layout::per_layer);
  o.layer_order = {0, 0};
  EXPECT_THROW(Builder(spec, make_recipe("hf"), o, *env.be, env.tracker), std::invalid_argument);
}

TEST(Builder, InOutOrientationMovesValuesNotChangesThem) {
  const ModelSpec spec = make_preset("llama-tiny");
  Env env;
  const Recipe recipe = make_recipe("hf");
  const Model a = Builder(spec, recipe, opts(Layout::per_layer, DType::f32), *env.be, env.tracker).build();
  BuildOptions o = opts(Layout::per_layer, DType::f32);
  o.orientation = Orientation::in_out;
  const Model b = Builder(spec, recipe, o, *env.be, env.tracker).build();
  std::size_t transposed = 0;
  for (std::size_t li = 0; li < a.layers.size(); ++li)
    for (std::size_t j = 0; j < a.layers[li].tensors.size(); ++j) {
      const TensorView& x = a.layers[li].tensors[j].view;
      const TensorView& y = b.layers[li].tensors[j].view;
      const auto* px = static_cast<const float*>(x.data);
      const auto* py = static_cast<const float*>(y.data);
      if (!spec.layer.tensors[j].transposable) {
        EXPECT_EQ(x.shape, y.shape);
        EXPECT_EQ(0, std::memcmp(px, py, x.bytes())) << x.name;
        continue;
      }
      ++transposed;
      ASSERT_EQ(x.shape.size(), 2u);
      EXPECT_EQ(y.shape, (Shape{x.shape[1], x.shape[0]})) << x.name;
      const std::uint64_t rows = x.shape[0], cols = x.shape[1];
      for (std::uint64_t r = 0; r < rows; ++r)
        for (std::uint64_t c = 0; c < cols; ++c) ASSERT_EQ(px[r * cols + c], py[c * rows + r]) << x.name << " " << r << "," << c;
    }
  EXPECT_GT(transposed, 0u);
}

TEST(Builder, HalfModelNeverAllocatesFp32) {
  for (const ModelSpec& spec : small_models()) {
    SCOPED_TRACE(spec.name);
    for (Layout layout : {Layout::per_layer, Layout::stacked}) {
      Env env;
      const Model m = Builder(spec, make_recipe("hf"), opts(layout), *env.be, env.tracker).build();
      const auto history = env.tracker.history();
      const std::size_t expected = spec.pre.size() + spec.post.size() +
                                   (layout == Layout::stacked ? stacked_layout(spec, ExpertLayout::stacked).buffers.size()
                                                              : spec.num_layers * spec.layer.tensors.size());
      EXPECT_EQ(history.size(), expected);
      for (const auto& r : history) {
        ASSERT_TRUE(r.tag.dtype.has_value()) << r.tag.label;
        EXPECT_EQ(*r.tag.dtype, DType::bf16) << r.tag.label;
      }
      EXPECT_EQ(env.tracker.stats().total_bytes, m.bytes());
    }
  }
}

TEST(Builder, DtypeOverridesApplyByPattern) {
  const ModelSpec spec = make_preset("llama-tiny");
  Env env;
  BuildOptions o = opts(Layout::stacked);
  o.dtype_overrides.push_back({"*norm*", DType::f32});
  const Model m = Builder(spec, make_recipe("hf"), o, *env.be, env.tracker).build();
  std::size_t f32 = 0;
  m.for_each([&](const TensorView& v) {
    const bool norm = v.name.find("norm") != std::string::npos;
    EXPECT_EQ(v.dtype, norm ? DType::f32 : DType::bf16) << v.name;
    f32 += v.dtype == DType::f32;
  });
  EXPECT_GE(f32, 3u);  // input_layernorm, post_attention_layernorm (stacked) and model.norm
}

TEST(Builder, StackedLayoutRefusesOneParameterInTwoDtypes) {
  const ModelSpec spec = make_preset("llama-tiny");
  Env env;
  BuildOptions o = opts(Layout::stacked);
  o.dtype_overrides.push_back({"model.layers.1.*", DType::f32});
  EXPECT_THROW(Builder(spec, make_recipe("hf"), o, *env.be, env.tracker).build(), std::invalid_argument);
}

TEST(Builder, PlanDescribesWhatIsBuilt) {
  const ModelSpec spec = make_preset("gpt2-tiny");
  Env env;
  const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *env.be, env.tracker);
  const Model m = b.build();
  for (std::uint64_t i = 0; i < spec.num_layers; ++i) {
    const auto plans = b.plan_layer(i);
    ASSERT_EQ(plans.size(), m.layers[i].tensors.size());
    for (std::size_t j = 0; j < plans.size(); ++j) {
      EXPECT_EQ(plans[j].name, m.layers[i].tensors[j].view.name);
      EXPECT_EQ(plans[j].memory_shape, m.layers[i].tensors[j].view.shape);
      EXPECT_EQ(plans[j].bytes(), m.layers[i].tensors[j].view.bytes());
    }
  }
  EXPECT_THROW(b.plan_layer(spec.num_layers), std::out_of_range);
}

TEST(Builder, SeedAndNameChangeEveryTensor) {
  const ModelSpec spec = make_preset("llama-tiny");
  Env env;
  const Recipe recipe = make_recipe("hf");
  const auto a = hashes_by_name(*env.be, Builder(spec, recipe, opts(Layout::per_layer, DType::bf16, 1), *env.be, env.tracker).build(), spec);
  const auto b = hashes_by_name(*env.be, Builder(spec, recipe, opts(Layout::per_layer, DType::bf16, 2), *env.be, env.tracker).build(), spec);
  for (const auto& [name, h] : a) {
    if (name.find("norm") != std::string::npos) continue;  // constant fills do not depend on the seed
    EXPECT_NE(h, b.at(name)) << name;
  }
  // Same shape, same rule, different layer: different values.
  EXPECT_NE(a.at("model.layers.0.self_attn.q_proj.weight"), a.at("model.layers.1.self_attn.q_proj.weight"));
}

// The naive strategies create fp32 and cast, as frameworks do: their bytes are layerinit's fp32 model
// rounded to the dtype (fp16/bf16 fills of their own draw 16 bits per value instead).
TEST(Builder, NaiveStrategiesEndWithTheSameBytes) {
  const ModelSpec spec = make_preset("gpt2-tiny");
  Env env;
  const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *env.be, env.tracker);
  ASSERT_NE(b.options().dtype, DType::f32);
  std::map<std::string, std::uint64_t> reference;
  {
    BuildOptions o = opts(Layout::per_layer);
    o.dtype = DType::f32;
    const Model f32 = Builder(spec, make_recipe("hf"), o, *env.be, env.tracker).build();
    f32.for_each([&](const TensorView& v) {
      std::vector<unsigned char> cast(numel(v.shape) * dtype_size(b.options().dtype));
      round_floats(b.options().dtype, static_cast<const float*>(v.data), cast.data(), numel(v.shape));
      reference[v.name] = content_hash(cast.data(), cast.size());
    });
  }
  for (NaiveStrategy s : all_naive_strategies) {
    SCOPED_TRACE(std::string(naive_name(s)));
    EXPECT_EQ(hashes_by_name(*env.be, run_naive(s, b, *env.be, env.tracker), spec), reference);
  }
}

TEST(Builder, UnstackGivesViewsIntoTheStackedBuffer) {
  const ModelSpec spec = make_preset("llama-tiny");
  Env env;
  const Model m = Builder(spec, make_recipe("hf"), opts(Layout::stacked), *env.be, env.tracker).build();
  const auto layers = unstack(m, spec);
  ASSERT_EQ(layers.size(), spec.num_layers);
  for (std::size_t j = 0; j < m.stacked.size(); ++j) {
    const auto* base = static_cast<const unsigned char*>(m.stacked[j].view.data);
    for (std::uint64_t i = 0; i < spec.num_layers; ++i)
      EXPECT_EQ(layers[i][j].data, base + i * layers[i][j].bytes());
  }
  EXPECT_EQ(layers[1][0].name, spec.canonical_name(1, spec.layer.tensors[0]));
  EXPECT_THROW(unstack(Builder(spec, make_recipe("hf"), opts(Layout::per_layer), *env.be, env.tracker).build(), spec),
               layerinit::logic_error);  // misuse
}

TEST(Builder, LayoutAndOrientationNamesParse) {
  EXPECT_EQ(parse_layout("stacked"), Layout::stacked);
  EXPECT_EQ(parse_layout("per-layer"), Layout::per_layer);
  EXPECT_EQ(parse_orientation("in-out"), Orientation::in_out);
  try {
    parse_layout("vertical");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "layout 'vertical' is unknown (valid: per-layer, stacked)");
  }
  EXPECT_THROW(parse_orientation("sideways"), std::invalid_argument);
  EXPECT_TRUE(name_matches("*.norm.weight", "model.norm.weight"));
  EXPECT_FALSE(name_matches("*.norm.weight", "model.layers.0.input_layernorm.weight"));
}

// MoE experts in the stacked layout: one [L, E, out, in] buffer per expert weight, built in place or
// restacked from a per-layer model; slice (l, e) is byte for byte the per-layer model's tensor of
// expert e in layer l. The per-expert layout keeps one [L, out, in] buffer per expert.
TEST(Builder, StackedExpertsAreOneBufferPerExpertWeightWithUnchangedBytes) {
  for (const char* name : {"mixtral-tiny", "deepseek-v3-tiny"}) {
    SCOPED_TRACE(name);
    const ModelSpec spec = make_preset(name);
    const std::uint64_t L = spec.num_layers, E = num_experts(spec.layer);
    ASSERT_EQ(E, 4u);
    for (Orientation orient : {Orientation::out_in, Orientation::in_out}) {
      Env env;
      BuildOptions o = opts(Layout::per_layer);
      o.orientation = orient;
      const Recipe recipe = make_recipe("olmo-llama-depth");  // fills differ per layer
      const Model per_layer = Builder(spec, recipe, o, *env.be, env.tracker).build();
      std::map<std::string, const TensorView*> by_name;
      for (const auto& l : per_layer.layers)
        for (const auto& t : l.tensors) by_name[t.view.name] = &t.view;
      o.layout = Layout::stacked;
      const Model stacked = Builder(spec, recipe, o, *env.be, env.tracker).build();
      Model restacked = stack(Builder(spec, recipe, opts(Layout::per_layer, DType::bf16, 7), *env.be, env.tracker).build(), spec,
                              *env.be, env.tracker);
      if (orient == Orientation::out_in) {
        ASSERT_EQ(restacked.stacked.size(), stacked.stacked.size());
        for (std::size_t b = 0; b < stacked.stacked.size(); ++b) {
          EXPECT_EQ(restacked.stacked[b].view.name, stacked.stacked[b].view.name);
          EXPECT_EQ(restacked.stacked[b].view.shape, stacked.stacked[b].view.shape);
          EXPECT_EQ(0, std::memcmp(restacked.stacked[b].view.data, stacked.stacked[b].view.data, stacked.stacked[b].view.bytes()))
              << stacked.stacked[b].view.name;
        }
      }
      std::size_t fused = 0;
      for (const auto& buf : stacked.stacked) {
        const TensorView& v = buf.view;
        const std::string rel = v.name.substr(spec.layer_prefix.size());
        if (!rel.starts_with(spec.layer.expert_prefix)) {
          EXPECT_EQ(v.shape[0], L) << v.name;  // [L, ...]: one slice per layer
          continue;
        }
        ++fused;
        const std::string rest = rel.substr(spec.layer.expert_prefix.size());  // "w1.weight", "down_proj.weight"
        ASSERT_EQ(v.shape.size(), 4u) << v.name;
        EXPECT_EQ(v.shape[0], L);
        EXPECT_EQ(v.shape[1], E);
        const std::uint64_t slice = v.bytes() / (L * E);
        for (std::uint64_t l = 0; l < L; ++l)
          for (std::uint64_t e = 0; e < E; ++e) {
            const std::string n = spec.layer_prefix + std::to_string(spec.first_layer + l) + "." + spec.layer.expert_prefix +
                                  std::to_string(e) + "." + rest;
            const TensorView& t = *by_name.at(n);
            EXPECT_EQ(Shape(v.shape.begin() + 2, v.shape.end()), t.shape) << n;  // [out, in] or [in, out]
            ASSERT_EQ(t.bytes(), slice) << n;
            EXPECT_EQ(0, std::memcmp(static_cast<const unsigned char*>(v.data) + (l * E + e) * slice, t.data, slice)) << n;
          }
      }
      EXPECT_EQ(fused, 3u);  // gate/w1, up/w3, down/w2
      EXPECT_EQ(stacked.stacked.size(), spec.layer.tensors.size() - 3 * E + 3);
    }
  }
  // The per-expert layout: one [L, out, in] buffer per expert tensor, as before.
  const ModelSpec spec = make_preset("mixtral-tiny");
  Env env;
  BuildOptions o = opts(Layout::stacked);
  o.experts = ExpertLayout::per_expert;
  const Model m = Builder(spec, make_recipe("hf"), o, *env.be, env.tracker).build();
  EXPECT_EQ(m.stacked.size(), spec.layer.tensors.size());
  EXPECT_EQ(m.experts, ExpertLayout::per_expert);
  bool found = false;
  for (const auto& t : m.stacked)
    if (t.view.name == "model.layers.block_sparse_moe.experts.2.w3.weight") {
      found = true;
      EXPECT_EQ(t.view.shape, (Shape{2, 128, 64}));
    }
  EXPECT_TRUE(found);
  const Model fused = Builder(spec, make_recipe("hf"), opts(Layout::stacked), *env.be, env.tracker).build();
  EXPECT_EQ(hashes_by_name(*env.be, m, spec), hashes_by_name(*env.be, fused, spec));
  EXPECT_EQ(parse_expert_layout("per-expert"), ExpertLayout::per_expert);
  EXPECT_EQ(expert_layout_name(ExpertLayout::stacked), "stacked");
  try {
    parse_expert_layout("fused");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "expert layout 'fused' is unknown (valid: per-expert, stacked)");
  }
}

// Restacking experts in place keeps the peak at the final weights plus one layer.
TEST(Builder, RestackedExpertsPeakAtWeightsPlusOneLayer) {
  const ModelSpec spec = make_preset("deepseek-v3-tiny");
  Env env;
  const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *env.be, env.tracker);
  const layerinit::testing::PartSizes s = layerinit::testing::part_sizes(b);
  const Model m = stack(b.build(), spec, *env.be, env.tracker);
  EXPECT_EQ(env.tracker.stats().peak_bytes, s.total() + s.largest_layer);
  EXPECT_EQ(m.bytes(), s.total());
}
