// Memory plans (init/plan.hpp): every predicted peak equals the tracker's measured peak of the build
// it predicts, on the dry backend for every preset at full size and on the host backend for the
// small presets; totals, largest parts, training estimates computed by hand, largest_batch at a
// given memory, parse_byte_size.
#include <gtest/gtest.h>

#include <stdexcept>

#include "builder_util.hpp"
#include "naive.hpp"
#include <layerinit/core/bytes.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/plan/plan.hpp>

#include "test_util.hpp"

using namespace layerinit;

namespace {

BuildOptions opts(Layout layout, DType dtype = DType::bf16, std::vector<DTypeOverride> overrides = {}) {
  BuildOptions o;
  o.layout = layout;
  o.dtype = dtype;
  o.dtype_overrides = std::move(overrides);
  o.seed = 11;
  return o;
}

struct Measured {
  std::uint64_t per_layer = 0, stacked = 0, restack = 0, streamed = 0;
  std::uint64_t naive[3] = {0, 0, 0};
  std::uint64_t model_bytes = 0;
};

// Runs every build the plan predicts, each through a fresh tracker.
Measured measure(const ModelSpec& spec, const Recipe& recipe, const BuildOptions& base, backend& be) {
  Measured m;
  BuildOptions per = base, stk = base;
  per.layout = Layout::per_layer;
  stk.layout = Layout::stacked;
  {
    tracking_resource t(be.memory());
    Model model = Builder(spec, recipe, per, be, t).build();
    m.per_layer = t.stats().peak_bytes;
    m.model_bytes = model.bytes();
    model = stack(std::move(model), spec, be, t);
    m.restack = t.stats().peak_bytes;
  }
  {
    tracking_resource t(be.memory());
    Model model = Builder(spec, recipe, stk, be, t).build();
    m.stacked = t.stats().peak_bytes;
  }
  {
    tracking_resource t(be.memory());
    Builder(spec, recipe, per, be, t).stream([](const Part&) {});
    m.streamed = t.stats().peak_bytes;
    EXPECT_EQ(t.stats().current_bytes, 0u);
  }
  const Builder b(spec, recipe, per, be, be.memory());
  for (NaiveStrategy n : all_naive_strategies) {
    tracking_resource t(be.memory());
    Model model = run_naive(n, b, be, t);
    m.naive[static_cast<int>(n)] = t.stats().peak_bytes;
  }
  return m;
}

void expect_plan_equals_measured(const ModelSpec& spec, backend& be, const BuildOptions& o) {
  const Recipe recipe = make_recipe("hf");
  const Builder b(spec, recipe, o, be, be.memory());
  const MemoryPlan p = make_memory_plan(b);
  const Measured m = measure(spec, recipe, o, be);
  EXPECT_EQ(p.peak_per_layer, m.per_layer);
  EXPECT_EQ(p.peak_stacked, m.stacked);
  EXPECT_EQ(p.peak_restack, m.restack);
  EXPECT_EQ(p.peak_streamed, m.streamed);
  for (NaiveStrategy n : all_naive_strategies)
    EXPECT_EQ(p.peak_naive[static_cast<int>(n)], m.naive[static_cast<int>(n)]) << naive_name(n);
  EXPECT_EQ(p.weight_bytes, m.model_bytes);
}

}  // namespace

// The plan's record from C++: the golden record the CLI's plan --record and the Python, torch and
// JAX faces give too (test_cli_reports.cpp, python/tests/test_plan_record.py).
TEST(PlanRecord, TinyLlamaIsTheGoldenRecord) {
  const std::filesystem::path source = LAYERINIT_SOURCE_DIR;
  const ModelSpec spec = load_hf_config((source / "tests/hf_configs/tiny/llama.json").string());
  BuildOptions o;
  o.dtype = DType::f32;
  auto be = make_dry_backend();
  const Builder b(spec, make_recipe("hf"), o, *be, be->memory());
  EXPECT_EQ(plan_record(b), layerinit::testing::slurp(source / "tests/plan_records/llama_tiny_hf_fp32.txt"));
  EXPECT_EQ(listed_tensor_count(spec), 2u + 4u * 9u + 1u);
}

// Each field as plan_record's comment says: the seed, the layout, a region, the stacked slot of a
// layer tensor (its buffer and slice), a layer index past first_layer, and the name left out.
TEST(PlanRecord, SeedLayoutRegionsStackedSlotsAndLayers) {
  ModelSpec spec = make_preset("llama-tiny");
  spec.pre[0].regions = {FillRegion{{3, 0}, {1, spec.pre[0].shape[1]}, FillSpec::constant(0)}};
  BuildOptions o = opts(Layout::stacked);
  auto be = make_dry_backend();
  const std::string rec = plan_record(Builder(spec, make_recipe("hf"), o, *be, be->memory()));
  EXPECT_EQ(rec.rfind("layerinit plan record 1\nseed 11\nlayout stacked\nmodel.embed_tokens.weight\t[512,64]\t[512,64]\tbf16\t"
                      "normal(0,0.02)\t[3,0]+[1,64]=constant(0)\tpre\n", 0), 0u) << rec;
  EXPECT_NE(rec.find("\tlayer 2 model.layers.self_attn.q_proj.weight[2]\n"), std::string::npos) << rec;
  spec.first_layer = 5;
  spec.name = "another name";
  o.layout = Layout::per_layer;
  const std::string shifted = plan_record(Builder(spec, make_recipe("hf"), o, *be, be->memory()));
  EXPECT_NE(shifted.find("model.layers.7.self_attn.q_proj.weight\t[64,64]\t[64,64]\tbf16\tnormal(0,0.02)\t-\tlayer 7\n"),
            std::string::npos) << shifted;
  EXPECT_EQ(shifted.find("another name"), std::string::npos);
}

// The stacked layout holds one dtype per buffer: an override that makes layer 1 differ is refused by the
// plan, naming the tensor and its buffer, as the build refuses it (it planned layer 0's dtype for all).
TEST(Plan, StackedWithALayerOfAnotherDtypeIsRefusedAsTheBuildRefusesIt) {
  auto be = make_dry_backend();
  const ModelSpec spec = make_preset("llama-tiny");
  const Builder b(spec, make_recipe("hf"), opts(Layout::stacked, DType::bf16, {{"model.layers.1.*", DType::f32}}), *be,
                  be->memory());
  const std::string want = "tensor 'model.layers.1.self_attn.q_proj.weight' is fp32 but its stacked buffer "
                           "'model.layers.self_attn.q_proj.weight' is bf16 (a stacked layout needs one dtype per stacked buffer)";
  try {
    (void)make_memory_plan(b);
    FAIL() << "planned";
  } catch (const bad_input& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
  try {
    (void)b.build();
    FAIL() << "built";
  } catch (const bad_input& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
  // Every layer overridden alike is one dtype per buffer again.
  const Builder all(spec, make_recipe("hf"), opts(Layout::stacked, DType::bf16, {{"model.layers.*", DType::f32}}), *be,
                    be->memory());
  const Builder bf16(spec, make_recipe("hf"), opts(Layout::stacked), *be, be->memory());
  EXPECT_EQ(make_memory_plan(all).layer_bytes(3), 2 * make_memory_plan(bf16).layer_bytes(3));
}

TEST(Plan, EveryPresetPeakEqualsMeasuredDry) {
  auto be = make_dry_backend();
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    expect_plan_equals_measured(make_preset(name), *be, opts(Layout::per_layer));
  }
}

TEST(Plan, SmallPresetPeaksEqualMeasuredOnTheHost) {
  auto be = make_host_backend(2);
  for (const char* name : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "mlp-deep"}) {
    SCOPED_TRACE(name);
    expect_plan_equals_measured(make_preset(name), *be, opts(Layout::per_layer));
  }
  // Other dtypes and mixed dtypes: fp32 weights, fp16, and fp32 norms in a bf16 model.
  SCOPED_TRACE("llama-tiny fp32 / fp16 / bf16 with fp32 norms");
  expect_plan_equals_measured(make_preset("llama-tiny"), *be, opts(Layout::per_layer, DType::f32));
  expect_plan_equals_measured(make_preset("gpt2-tiny"), *be, opts(Layout::stacked, DType::f16));
  expect_plan_equals_measured(make_preset("mixtral-tiny"), *be,
                              opts(Layout::per_layer, DType::bf16, {{"*norm*", DType::f32}}));
}

TEST(Plan, SubtotalsTotalsAndLargestParts) {
  auto be = make_dry_backend();
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelSpec spec = make_preset(name);
    const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *be, be->memory());
    const MemoryPlan p = make_memory_plan(b);
    // Independent sums over the planned tensors.
    std::uint64_t pre = 0, post = 0, largest_tensor = 0, largest_layer = 0, sum_layers = 0;
    std::string largest_name;
    auto see = [&](const PlannedTensor& t) {
      if (t.bytes() > largest_tensor) largest_tensor = t.bytes(), largest_name = t.name;
    };
    for (const auto& t : b.plan_pre()) pre += t.bytes(), see(t);
    ASSERT_EQ(p.layer_runs.size(), 1u) << "identical layers are one run";
    EXPECT_EQ(p.layer_runs[0].first, 0u);
    EXPECT_EQ(p.layer_runs[0].count, spec.num_layers);
    for (std::uint64_t i = 0; i < spec.num_layers; ++i) {
      std::uint64_t layer = 0;
      for (const auto& t : b.plan_layer(i)) layer += t.bytes(), see(t);
      EXPECT_EQ(p.layer_bytes(i), layer) << "layer " << i;
      largest_layer = std::max(largest_layer, layer);
      sum_layers += p.layer_bytes(i);
    }
    EXPECT_THROW(p.layer_bytes(spec.num_layers), std::out_of_range);
    for (const auto& t : b.plan_post()) post += t.bytes(), see(t);
    EXPECT_EQ(p.pre_bytes, pre);
    EXPECT_EQ(p.post_bytes, post);
    EXPECT_EQ(p.pre_bytes + sum_layers + p.post_bytes, p.weight_bytes);
    EXPECT_EQ(p.parameters, spec.parameter_count());
    EXPECT_EQ(p.buffer_elements, spec.buffer_count());  // DeepSeek-V3's router correction biases
    EXPECT_EQ(p.weight_bytes, 2 * (p.parameters + p.buffer_elements));  // bf16 throughout
    EXPECT_EQ(p.bytes_fp32, 4 * (p.parameters + p.buffer_elements));
    EXPECT_EQ(p.bytes_fp32, 2 * p.bytes_fp16);
    EXPECT_EQ(p.bytes_bf16, p.bytes_fp16);
    EXPECT_EQ(p.largest_layer_bytes, largest_layer);
    EXPECT_EQ(p.largest_tensor_bytes, largest_tensor);
    EXPECT_EQ(p.largest_tensor, largest_name);
  }
}

TEST(Plan, KnownLargestPartsAndMixedDTypes) {
  auto be = make_dry_backend();
  {
    // llama-tiny: vocab 512 x hidden 64 embedding (bf16: 65,536 bytes; the head has the same size,
    // the first one seen is named); a layer is 46,208 parameters.
    const Builder b(make_preset("llama-tiny"), make_recipe("hf"), opts(Layout::per_layer), *be, be->memory());
    const MemoryPlan p = make_memory_plan(b);
    EXPECT_EQ(p.largest_tensor, "model.embed_tokens.weight");
    EXPECT_EQ(p.largest_tensor_bytes, 65536u);
    EXPECT_EQ(p.largest_layer_bytes, 92416u);
    EXPECT_EQ(p.weight_bytes, 500864u);
    EXPECT_EQ(p.peak_streamed, 92416u);
    EXPECT_EQ(p.peak_restack, 500864u + 92416u);
  }
  {
    // gpt2-medium: wte [50257, 1024] is the largest part (98.16 MiB), larger than a layer.
    const Builder b(make_preset("gpt2-medium"), make_recipe("hf"), opts(Layout::per_layer), *be, be->memory());
    const MemoryPlan p = make_memory_plan(b);
    EXPECT_EQ(p.largest_tensor, "transformer.wte.weight");
    EXPECT_EQ(p.largest_tensor_bytes, 50257u * 1024u * 2u);
    EXPECT_EQ(p.peak_streamed, p.largest_tensor_bytes);
  }
  {
    // fp32 norms in a bf16 llama-tiny: 9 norms of 64 elements gain 2 bytes each per element.
    const Builder b(make_preset("llama-tiny"), make_recipe("hf"),
                    opts(Layout::per_layer, DType::bf16, {{"*norm*", DType::f32}}), *be, be->memory());
    const MemoryPlan p = make_memory_plan(b);
    EXPECT_EQ(p.weight_bytes, 500864u + 9u * 64u * 2u);
    EXPECT_EQ(p.largest_layer_bytes, 92416u + 2u * 64u * 2u);
    EXPECT_EQ(p.bytes_fp32, 4u * 250432u);  // the one-dtype totals ignore overrides
  }
}

TEST(Plan, TrainingEstimateLlama3_8bByHand) {
  // llama-3-8b: n = 8,030,261,248 parameters, h = 4096, a = 32 heads, L = 32 layers; b = 1, s = 2048.
  const ModelSpec spec = make_preset("llama-3-8b");
  const std::uint64_t n = 8030261248ull;
  ASSERT_EQ(spec.parameter_count(), n);
  {
    // Mixed precision with Adam (ZeRO, Rajbhandari et al. 2020, sec. 3.1): 2 + 2 + 4 + 4 + 4 = 16 B/param.
    const TrainingEstimate e = estimate_training(spec, TrainingSetup::mixed, 1, 2048);
    EXPECT_EQ(e.weights, 2 * n);
    EXPECT_EQ(e.gradients, 2 * n);
    EXPECT_EQ(e.optimizer, 8 * n);
    EXPECT_EQ(e.master, 4 * n);
    EXPECT_EQ(e.states(), 128484179968ull);  // 16 n
    // Korthikanti et al. 2022: s b h (34 + 5 a s / h) = 8,388,608 x (34 + 80) without recompute,
    // 34 s b h selective, 2 s b h full.
    const std::uint64_t sbh = 2048ull * 1 * 4096;
    ASSERT_TRUE(e.activation_per_layer[0] && e.activation_per_layer[1] && e.activation_per_layer[2]);
    EXPECT_EQ(*e.activation_per_layer[static_cast<int>(Recompute::none)], 956301312ull);
    EXPECT_EQ(*e.activation_per_layer[static_cast<int>(Recompute::none)], sbh * 114);
    EXPECT_EQ(*e.activation_per_layer[static_cast<int>(Recompute::selective)], 285212672ull);
    EXPECT_EQ(*e.activation_per_layer[static_cast<int>(Recompute::full)], 16777216ull);
    EXPECT_EQ(*e.activation_total[static_cast<int>(Recompute::none)], 30601641984ull);
    EXPECT_EQ(*e.activation_total[static_cast<int>(Recompute::selective)], 9126805504ull);
    EXPECT_EQ(*e.activation_total[static_cast<int>(Recompute::full)], 536870912ull);
  }
  {
    const TrainingEstimate e = estimate_training(spec, TrainingSetup::fp32, 1, 2048);
    EXPECT_EQ(e.weights, 4 * n);
    EXPECT_EQ(e.gradients, 4 * n);
    EXPECT_EQ(e.optimizer, 8 * n);
    EXPECT_EQ(e.master, 0u);
    EXPECT_EQ(e.states(), 16 * n);
  }
  {
    const TrainingEstimate e = estimate_training(spec, TrainingSetup::pure_bf16, 1, 2048);
    EXPECT_EQ(e.weights, 2 * n);
    EXPECT_EQ(e.gradients, 2 * n);
    EXPECT_EQ(e.optimizer, 4 * n);
    EXPECT_EQ(e.master, 0u);
    EXPECT_EQ(e.states(), 8 * n);
  }
  // Activations are linear in the batch; the quadratic term grows with s^2.
  const TrainingEstimate e4 = estimate_training(spec, TrainingSetup::mixed, 4, 8192);
  EXPECT_EQ(*e4.activation_per_layer[0], 8192ull * 4 * 4096 * (34 + 5 * 32 * 8192 / 4096));
  EXPECT_EQ(*e4.activation_per_layer[1], 34ull * 8192 * 4 * 4096);
  EXPECT_EQ(*e4.activation_per_layer[2], 2ull * 8192 * 4 * 4096);
}

TEST(Plan, TrainingEstimateNamesAndModelsWithoutHeads) {
  const TrainingEstimate e = estimate_training(make_preset("mlp-deep"), TrainingSetup::mixed, 1, 2048);
  for (int k = 0; k < 3; ++k) {
    EXPECT_FALSE(e.activation_per_layer[k].has_value());
    EXPECT_FALSE(e.activation_total[k].has_value());
  }
  EXPECT_EQ(largest_batch(make_preset("mlp-deep"), TrainingSetup::mixed, 2048, Recompute::full, 1ull << 50), 0u);
  for (TrainingSetup s : {TrainingSetup::mixed, TrainingSetup::fp32, TrainingSetup::pure_bf16})
    EXPECT_EQ(parse_training_setup(training_setup_name(s)), s);
  EXPECT_EQ(training_setup_name(TrainingSetup::pure_bf16), "pure-bf16");
  EXPECT_EQ(recompute_name(Recompute::selective), "selective");
  try {
    parse_training_setup("amp");
    ADD_FAILURE() << "no throw";
  } catch (const std::invalid_argument& ex) {
    EXPECT_NE(std::string(ex.what()).find("'amp'"), std::string::npos) << ex.what();
    EXPECT_NE(std::string(ex.what()).find("pure-bf16"), std::string::npos) << ex.what();
  }
}

TEST(Plan, LargestBatchAtAGivenMemory) {
  const ModelSpec spec = make_preset("llama-3-8b");
  const std::uint64_t states = 128484179968ull;  // mixed: 16 B/param
  const std::uint64_t act[3] = {30601641984ull, 9126805504ull, 536870912ull};  // per sample, s = 2048
  // 1 TiB: (2^40 - states) / activations = 31, 106, 1808.
  EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, Recompute::none, 1ull << 40), 31u);
  EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, Recompute::selective, 1ull << 40), 106u);
  EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, Recompute::full, 1ull << 40), 1808u);
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    const std::uint64_t a = act[static_cast<int>(r)];
    SCOPED_TRACE(recompute_name(r));
    // Exactly k batches fit; one byte less gives k - 1.
    EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, r, states + 7 * a), 7u);
    EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, r, states + 7 * a - 1), 6u);
    EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, r, states + a - 1), 0u);
    // The states alone do not fit in 80 GiB.
    EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, r, 80ull << 30), 0u);
    EXPECT_EQ(largest_batch(spec, TrainingSetup::mixed, 2048, r, states), 0u);
  }
  // pure-bf16 halves the states: 80 GiB leaves 85,899,345,920 - 64,242,089,984 for activations.
  EXPECT_EQ(largest_batch(spec, TrainingSetup::pure_bf16, 2048, Recompute::full, 80ull << 30),
            (85899345920ull - 64242089984ull) / act[2]);
  EXPECT_EQ(largest_batch(spec, TrainingSetup::pure_bf16, 2048, Recompute::full, 80ull << 30), 40u);
}

TEST(Plan, ParseByteSize) {
  EXPECT_EQ(parse_byte_size("80GiB"), 85899345920ull);
  EXPECT_EQ(parse_byte_size("80GB"), 80000000000ull);
  EXPECT_EQ(parse_byte_size("1.5 TiB"), 1649267441664ull);
  EXPECT_EQ(parse_byte_size("123456"), 123456u);
  EXPECT_EQ(parse_byte_size("0"), 0u);
  EXPECT_EQ(parse_byte_size("500MB"), 500000000u);
  EXPECT_EQ(parse_byte_size("500mib"), 500ull << 20);
  EXPECT_EQ(parse_byte_size("4 KiB"), 4096u);
  EXPECT_EQ(parse_byte_size("2kb"), 2000u);
  EXPECT_EQ(parse_byte_size("7b"), 7u);
  EXPECT_EQ(parse_byte_size("3TB"), 3000000000000ull);
  EXPECT_EQ(parse_byte_size(" 16 GiB "), 16ull << 30);
  EXPECT_EQ(parse_byte_size("1e3"), 1000u);
  for (const char* bad : {"", "abc", "GiB", "-5GB", "-1", "1e30", "80XB", "80 GiBs", "nan", "inf", "1.8e19", "12 34 x"}) {
    SCOPED_TRACE(bad);
    try {
      parse_byte_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}
