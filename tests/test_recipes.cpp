// Recipes: the exact FillSpec each recipe gives each tensor, overrides, errors.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <span>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/kernels/fill_host.hpp>

#include "stats.hpp"
#include "test_util.hpp"

using namespace layerinit;

namespace {

// The fill of a pre/post tensor (canonical name) or of a layer tensor (relative name) in layer i.
// `layer` is the block's index (0-based in the block), as the builder passes it.
FillSpec fill(const Recipe& r, const ModelSpec& m, std::string_view name, std::optional<std::uint64_t> layer = {}) {
  if (layer) {
    for (const auto& t : m.layer.tensors)
      if (t.name == name) return r.rule_for(tensor_context(m, t, layer));
  } else {
    for (const auto* list : {&m.pre, &m.post})
      for (const auto& t : *list)
        if (t.name == name) return r.rule_for(tensor_context(m, t, std::nullopt));
  }
  throw std::runtime_error("no tensor " + std::string(name));
}

const FillSpec one = FillSpec::constant(1.0);
const FillSpec zero = FillSpec::constant(0.0);

// Every tensor of every preset gets a fill that prepare_fill accepts, in every recipe.
void expect_all_valid(const Recipe& r, const ModelSpec& m) {
  auto check = [&](const TensorSpec& t, std::optional<std::uint64_t> layer, const std::string& cn) {
    const FillSpec f = r.rule_for(tensor_context(m, t, layer));
    EXPECT_EQ(tensor_context(m, t, layer).canonical_name, cn);
    EXPECT_NO_THROW(validate_fill(f)) << r.name() << " " << cn << " " << f.describe();
  };
  for (const auto& t : m.pre) check(t, std::nullopt, t.name);
  for (std::uint64_t i = 0; i < m.num_layers; ++i)
    for (const auto& t : m.layer.tensors) check(t, i, m.canonical_name(i, t));
  for (const auto& t : m.post) check(t, std::nullopt, t.name);
}

}  // namespace

TEST(Recipes, NamesAndUnknown) {
  EXPECT_EQ(recipe_names(), (std::vector<std::string>{"hf", "torchtitan", "megatron", "pytorch-default", "equinox",
                                                      "flax", "xavier-uniform", "kaiming-normal", "olmo-normal",
                                                      "olmo-llama", "olmo-llama-depth", "olmo-normalized", "neox", "mpt",
                                                      "mup", "haiku"}));
  for (const auto& n : recipe_names()) EXPECT_EQ(make_recipe(n).name(), n);
  try {
    make_recipe("jax");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "recipe 'jax' is unknown (valid: hf, torchtitan, megatron, pytorch-default, "
                                     "equinox, flax, xavier-uniform, kaiming-normal, olmo-normal, olmo-llama, "
                                     "olmo-llama-depth, olmo-normalized, neox, mpt, mup, haiku)");
  }
}

TEST(Recipes, EveryRecipeCoversEveryPresetTensor) {
  for (const auto& rn : recipe_names())
    for (const char* pn : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "qwen2.5-tiny", "gemma-2-tiny", "deepseek-v3-tiny", "mlp-deep"})
      expect_all_valid(make_recipe(rn), make_preset(pn));
}

// The tiny config of every family of tests/hf_configs/tiny/: every tensor has a rule in every recipe.
ModelSpec tiny(const std::string& family) {
  return load_hf_config(std::string(LAYERINIT_SOURCE_DIR) + "/tests/hf_configs/tiny/" + family + ".json");
}

// gpt-oss's attention sinks (role other) have a rule in hf only: the other recipes' sources have no
// such tensor, and refuse it in one line until an override gives it a fill.
TEST(Recipes, EveryRecipeCoversEveryFamilysTensors) {
  for (const auto& e : std::filesystem::directory_iterator(std::string(LAYERINIT_SOURCE_DIR) + "/tests/hf_configs/tiny"))
    for (const auto& rn : recipe_names()) {
      const std::string family = e.path().stem().string();
      SCOPED_TRACE(family + " " + rn);
      Recipe r = make_recipe(rn);
      if (family == "gpt_oss" && rn != "hf") r.add_override("*.self_attn.sinks", FillSpec::normal(0, 0.02));
      expect_all_valid(r, tiny(family));
    }
  try {
    fill(make_recipe("torchtitan"), tiny("gpt_oss"), "self_attn.sinks", 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "recipe 'torchtitan': no rule for tensor 'model.layers.0.self_attn.sinks' (role other); give it an "
                           "init or an override");
  }
}

// A tensor of zero elements (glm4_moe's shared experts at n_shared_experts 0: [0, 64] and [64, 0])
// has no values to draw: constant(0) in every recipe, where a fan of 0 would give 1 / sqrt(0); an
// override still wins.
TEST(Recipes, ZeroElementTensorsGetZeros) {
  const ModelSpec m = spec_from_hf_config(R"({"model_type": "glm4_moe", "n_shared_experts": 0, "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "num_hidden_layers": 2, "first_k_dense_replace": 1})");
  for (const auto& rn : recipe_names()) {
    SCOPED_TRACE(rn);
    expect_all_valid(make_recipe(rn), m);
    EXPECT_EQ(fill(make_recipe(rn), m, "mlp.shared_experts.down_proj.weight", 0), zero);
    EXPECT_EQ(fill(make_recipe(rn), m, "mlp.shared_experts.up_proj.weight", 0), zero);
  }
  Recipe r = make_recipe("pytorch-default");
  r.add_override("*.shared_experts.*", FillSpec::constant(2.0));
  EXPECT_EQ(fill(r, m, "mlp.shared_experts.down_proj.weight", 0), FillSpec::constant(2.0));
}

// GptOssPreTrainedModel._init_weights: sinks and the router's bias normal(0, r), the experts' biases zero.
TEST(Recipes, HfGptOss) {
  const Recipe r = make_recipe("hf");
  const ModelSpec g = tiny("gpt_oss");
  EXPECT_EQ(fill(r, g, "self_attn.sinks", 1), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "mlp.router.bias", 1), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "mlp.router.weight", 1), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "self_attn.q_proj.bias", 1), zero);
  EXPECT_EQ(fill(r, g, "mlp.experts.gate_up_proj", 1), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "mlp.experts.down_proj_bias", 1), zero);
  // Another family's router bias (none has one) and a sink-named tensor of another family: no rule change.
  ModelSpec other = g;
  other.family = "custom";
  EXPECT_EQ(fill(r, other, "mlp.router.bias", 1), zero);
  EXPECT_THROW(fill(r, other, "self_attn.sinks", 1), std::invalid_argument);
}

// Phi-3's fused gate_up_proj holds w1 and w3 in one tensor: w1's rule (not depth-scaled).
TEST(Recipes, FusedGateUpTakesTheGateRule) {
  const ModelSpec f = tiny("phi3");
  EXPECT_EQ(fill(make_recipe("torchtitan"), f, "mlp.gate_up_proj.weight", 1), FillSpec::trunc_normal(0, 0.02, -2, 2));
  EXPECT_EQ(fill(make_recipe("olmo-llama"), f, "mlp.gate_up_proj.weight", 1), FillSpec::trunc_normal_std(0, 0.02, -3, 3));
  EXPECT_EQ(fill(make_recipe("hf"), f, "self_attn.qkv_proj.weight", 1), FillSpec::normal(0, 0.02));
}

TEST(Recipes, Hf) {
  const Recipe r = make_recipe("hf");
  const ModelSpec l = make_preset("llama-tiny");
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 0), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 3), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 1), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "input_layernorm.weight", 1), one);
  EXPECT_EQ(fill(r, l, "model.norm.weight"), one);
  EXPECT_EQ(fill(r, l, "lm_head.weight"), FillSpec::normal(0, 0.02));

  const ModelSpec g = make_preset("gpt2-tiny");  // 2 layers: c_proj std 0.02 / sqrt(4)
  EXPECT_EQ(fill(r, g, "transformer.wte.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "transformer.wpe.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "attn.c_attn.weight", 0), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "attn.c_attn.bias", 0), zero);
  EXPECT_EQ(fill(r, g, "attn.c_proj.weight", 1), FillSpec::normal(0, 0.02 / std::sqrt(4.0)));
  EXPECT_EQ(fill(r, g, "mlp.c_proj.weight", 0), FillSpec::normal(0, 0.02 / std::sqrt(4.0)));
  EXPECT_EQ(fill(r, g, "mlp.c_proj.bias", 0), zero);
  EXPECT_EQ(fill(r, g, "ln_1.weight", 0), one);
  EXPECT_EQ(fill(r, g, "ln_1.bias", 0), zero);
  EXPECT_EQ(fill(r, g, "transformer.ln_f.bias"), zero);
  EXPECT_EQ(fill(r, make_preset("gpt2"), "attn.c_proj.weight", 5), FillSpec::normal(0, 0.02 / std::sqrt(24.0)));

  const ModelSpec x = make_preset("mixtral-tiny");
  EXPECT_EQ(fill(r, x, "block_sparse_moe.gate.weight", 0), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.1.w2.weight", 0), FillSpec::normal(0, 0.02));

  ModelSpec wide = l;
  wide.hyper.initializer_range = 0.01;
  EXPECT_EQ(fill(r, wide, "mlp.up_proj.weight", 0), FillSpec::normal(0, 0.01));
}

TEST(Recipes, Torchtitan) {
  const Recipe r = make_recipe("torchtitan");
  const ModelSpec l = make_preset("llama-tiny");
  ASSERT_GE(l.num_layers, 4u);
  const FillSpec base = FillSpec::trunc_normal(0, 0.02, -2, 2);
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 1));
  for (std::uint64_t i : {0u, 3u}) {
    EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", i), base);
    EXPECT_EQ(fill(r, l, "self_attn.k_proj.weight", i), base);
    EXPECT_EQ(fill(r, l, "self_attn.v_proj.weight", i), base);
    EXPECT_EQ(fill(r, l, "mlp.gate_proj.weight", i), base);  // w1
  }
  const FillSpec depth0 = FillSpec::trunc_normal(0, 0.02 / std::sqrt(2.0), -2, 2);
  const FillSpec depth3 = FillSpec::trunc_normal(0, 0.02 / std::sqrt(8.0), -2, 2);
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 0), depth0);
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 3), depth3);  // wo
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 3), depth3);     // w2
  EXPECT_EQ(fill(r, l, "mlp.up_proj.weight", 3), depth3);       // w3
  EXPECT_EQ(fill(r, l, "post_attention_layernorm.weight", 3), one);
  EXPECT_EQ(fill(r, l, "model.norm.weight"), one);
  // output: std dim^-0.5 = 1/8 for dim 64, cut at 3 std.
  EXPECT_EQ(fill(r, l, "lm_head.weight"), FillSpec::trunc_normal_std(0, 0.125, -3, 3));

  const ModelSpec x = make_preset("mixtral-tiny");
  const FillSpec x1 = FillSpec::trunc_normal(0, 0.02 / std::sqrt(4.0), -2, 2);
  EXPECT_EQ(fill(r, x, "block_sparse_moe.gate.weight", 1), x1);
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.2.w1.weight", 1), base);
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.2.w2.weight", 1), x1);
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.2.w3.weight", 1), x1);

  const ModelSpec m = make_preset("mlp-deep");
  EXPECT_EQ(fill(r, m, "input.weight"), base);
  EXPECT_EQ(fill(r, m, "weight", 9), base);
  EXPECT_EQ(fill(r, m, "bias", 9), zero);
  EXPECT_EQ(fill(r, m, "output.weight"), FillSpec::trunc_normal_std(0, 1.0 / 32.0, -3, 3));
}

TEST(Recipes, Megatron) {
  const Recipe r = make_recipe("megatron");
  const ModelSpec l = make_preset("llama-tiny");  // 4 layers
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 2), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "mlp.up_proj.weight", 2), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 2), FillSpec::normal(0, 0.02 / std::sqrt(8.0)));
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 0), FillSpec::normal(0, 0.02 / std::sqrt(8.0)));
  EXPECT_EQ(fill(r, l, "lm_head.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "model.norm.weight"), one);
  const ModelSpec g = make_preset("gpt2-tiny");
  EXPECT_EQ(fill(r, g, "transformer.wpe.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, g, "mlp.c_fc.bias", 1), zero);
  EXPECT_EQ(fill(r, g, "ln_2.bias", 1), zero);
  // Megatron-core's Router draws its bias with init_method (transformer/moe/router.py); gpt-oss names its router so.
  const ModelSpec o = tiny("gpt_oss");
  EXPECT_EQ(fill(r, o, "mlp.router.bias", 0), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, o, "mlp.experts.gate_up_proj_bias", 0), zero);
}

TEST(Recipes, PytorchDefaultAndEquinox) {
  const ModelSpec g = make_preset("gpt2-tiny");  // d = 64, ff = 256
  const ModelSpec m = make_preset("mlp-deep");
  for (const char* name : {"pytorch-default", "equinox"}) {
    const Recipe r = make_recipe(name);
    // gpt2-tiny is tied: its embedding is the head, U(+-1/sqrt(64)); an untied one is normal(0, 1).
    EXPECT_EQ(fill(r, g, "transformer.wte.weight"), FillSpec::uniform(-0.125, 0.125)) << name;
    EXPECT_EQ(fill(r, make_preset("llama-tiny"), "model.embed_tokens.weight"), FillSpec::normal(0, 1)) << name;
    EXPECT_EQ(fill(r, g, "attn.c_attn.weight", 0), FillSpec::uniform(-0.125, 0.125)) << name;
    EXPECT_EQ(fill(r, g, "attn.c_attn.bias", 0), FillSpec::uniform(-0.125, 0.125)) << name;
    EXPECT_EQ(fill(r, g, "mlp.c_proj.weight", 0), FillSpec::uniform(-1.0 / 16, 1.0 / 16)) << name;
    EXPECT_EQ(fill(r, g, "mlp.c_proj.bias", 1), FillSpec::uniform(-1.0 / 16, 1.0 / 16)) << name;
    EXPECT_EQ(fill(r, g, "ln_1.weight", 0), one) << name;
    EXPECT_EQ(fill(r, g, "ln_1.bias", 0), zero) << name;
    EXPECT_EQ(fill(r, m, "input.weight"), FillSpec::uniform(-1 / std::sqrt(2.0), 1 / std::sqrt(2.0))) << name;
    EXPECT_EQ(fill(r, m, "input.bias"), FillSpec::uniform(-1 / std::sqrt(2.0), 1 / std::sqrt(2.0))) << name;
    EXPECT_EQ(fill(r, m, "weight", 4), FillSpec::uniform(-1.0 / 32, 1.0 / 32)) << name;
    EXPECT_EQ(fill(r, m, "output.bias"), FillSpec::uniform(-1.0 / 32, 1.0 / 32)) << name;
  }
}

TEST(Recipes, Flax) {
  const Recipe r = make_recipe("flax");
  const ModelSpec l = make_preset("llama-tiny");  // d = 64, ff = 176
  const double c = 0.87962566103423978;
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, std::sqrt(1.0 / 64)));
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 1), FillSpec::trunc_normal_std(0, std::sqrt(1.0 / 64) / c, -2, 2));
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 1), FillSpec::trunc_normal_std(0, std::sqrt(1.0 / 176) / c, -2, 2));
  EXPECT_EQ(fill(r, l, "lm_head.weight"), FillSpec::trunc_normal_std(0, std::sqrt(1.0 / 64) / c, -2, 2));
  EXPECT_EQ(fill(r, l, "model.norm.weight"), one);
  const ModelSpec m = make_preset("mlp-deep");
  EXPECT_EQ(fill(r, m, "input.weight"), FillSpec::trunc_normal_std(0, std::sqrt(1.0 / 2) / c, -2, 2));
  EXPECT_EQ(fill(r, m, "bias", 0), zero);
}

// ---- haiku: DM-Haiku 0.0.17's defaults (haiku/_src basic.py, conv.py, embed.py, attention.py) ----

namespace {

TensorSpec haiku_tensor(std::string name, Shape shape, TensorRole role, std::uint64_t fan_in = 0, std::uint64_t fan_out = 0) {
  TensorSpec t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.role = role;
  t.fan_in = fan_in;
  t.fan_out = fan_out;
  return t;
}

// Haiku's parameter names, with a hk.layer_stack'ed block (its canonical names as a description of a
// Haiku model gives them). Shapes are [out, in] for 2-D maps, as every spec's; the conv kernel is
// Haiku's [3, 3, in 8, out 32], its fan_in 3 * 3 * 8 given.
ModelSpec haiku_spec() {
  ModelSpec m;
  m.name = "haiku-test";
  m.family = "custom";
  m.hyper.vocab_size = 512;
  m.hyper.hidden_size = 64;
  m.layer_prefix = "__layer_stack_no_per_layer.";
  m.num_layers = 4;
  m.pre = {haiku_tensor("embed/embeddings", {512, 64}, TensorRole::embedding),
           haiku_tensor("pos_embed/embeddings", {128, 64}, TensorRole::position_embedding),
           haiku_tensor("conv2_d.w", {3, 3, 8, 32}, TensorRole::linear_weight, 72, 32),
           haiku_tensor("conv2_d.b", {32}, TensorRole::linear_bias, 72, 32)};
  m.layer.tensors = {haiku_tensor("block/multi_head_attention/query.w", {64, 64}, TensorRole::linear_weight, 64, 64),
                     haiku_tensor("block/multi_head_attention/query.b", {64}, TensorRole::linear_bias, 64, 64),
                     haiku_tensor("block/multi_head_attention/linear.w", {64, 32}, TensorRole::output_weight, 32, 64),
                     haiku_tensor("block/layer_norm.scale", {64}, TensorRole::norm_weight),
                     haiku_tensor("block/layer_norm.offset", {64}, TensorRole::norm_bias),
                     haiku_tensor("block/mlp/~/linear_0.w", {16, 64}, TensorRole::linear_weight, 64, 16),
                     haiku_tensor("block/mlp/~/linear_0.b", {16}, TensorRole::linear_bias, 64, 16),
                     haiku_tensor("block/mlp/~/linear_1.w", {64, 16}, TensorRole::output_weight, 16, 64)};
  m.post = {haiku_tensor("transformer/multi_head_attention_2/query.w", {64, 64}, TensorRole::linear_weight, 64, 64),
            haiku_tensor("transformer/multi_head_attention_2/value.w", {64, 64}, TensorRole::linear_weight, 64, 64),
            haiku_tensor("multi_head_attention/key.w", {32, 64}, TensorRole::linear_weight, 64, 32),
            haiku_tensor("block/multi_head_attention_1/linear.w", {64, 128}, TensorRole::output_weight, 128, 64),
            haiku_tensor("block/linear.w", {16, 64}, TensorRole::linear_weight, 64, 16),
            haiku_tensor("mlp/~/linear_0.w", {16, 64}, TensorRole::linear_weight),  // no fans: the shape's [out, in]
            haiku_tensor("multi_head_attention_x/query.w", {16, 64}, TensorRole::linear_weight, 64, 16),
            haiku_tensor("my_multi_head_attention/key.w", {16, 64}, TensorRole::linear_weight, 64, 16),
            haiku_tensor("multi_head_attention_/value.w", {16, 64}, TensorRole::linear_weight, 64, 16),
            haiku_tensor("multi_head_attention/value_proj.w", {16, 64}, TensorRole::linear_weight, 64, 16),
            haiku_tensor("multi_head_attention/key.b", {32}, TensorRole::linear_bias, 64, 32),
            haiku_tensor("moe/router.w", {8, 64}, TensorRole::router_weight, 64, 8),
            haiku_tensor("rms_norm.scale", {64}, TensorRole::norm_weight),
            haiku_tensor("head.w", {512, 64}, TensorRole::head_weight, 64, 512)};
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// Linear and ConvND: TruncatedNormal(stddev = 1 / sqrt(fan_in)) cut at +-2 (in std units), zero bias;
// Embed: TruncatedNormal(stddev 1); norms ones and zeros.
TEST(Recipes, HaikuDefaults) {
  const Recipe r = make_recipe("haiku");
  const ModelSpec m = haiku_spec();
  const FillSpec tn_in64 = FillSpec::trunc_normal_std(0, 0.125, -2, 2);  // 1 / sqrt(64)
  EXPECT_EQ(fill(r, m, "block/mlp/~/linear_0.w", 2), tn_in64);
  EXPECT_EQ(fill(r, m, "block/mlp/~/linear_1.w", 2), FillSpec::trunc_normal_std(0, 0.25, -2, 2));  // output_weight, in 16
  EXPECT_EQ(fill(r, m, "mlp/~/linear_0.w"), tn_in64);
  EXPECT_EQ(fill(r, m, "block/linear.w"), tn_in64);
  EXPECT_EQ(fill(r, m, "moe/router.w"), tn_in64);
  EXPECT_EQ(fill(r, m, "head.w"), tn_in64);
  EXPECT_EQ(fill(r, m, "conv2_d.w"), FillSpec::trunc_normal_std(0, 1 / std::sqrt(72.0), -2, 2));  // prod(w_shape[:-1])
  EXPECT_EQ(fill(r, m, "conv2_d.b"), zero);
  EXPECT_EQ(fill(r, m, "block/mlp/~/linear_0.b", 1), zero);
  EXPECT_EQ(fill(r, m, "embed/embeddings"), FillSpec::trunc_normal_std(0, 1, -2, 2));
  EXPECT_EQ(fill(r, m, "pos_embed/embeddings"), FillSpec::trunc_normal_std(0, 1, -2, 2));
  EXPECT_EQ(fill(r, m, "block/layer_norm.scale", 0), one);
  EXPECT_EQ(fill(r, m, "block/layer_norm.offset", 0), zero);
  EXPECT_EQ(fill(r, m, "rms_norm.scale"), one);
  // Not MultiHeadAttention's projections: a Linear outside it, or a module whose name only looks like it.
  for (const char* n : {"multi_head_attention_x/query.w", "my_multi_head_attention/key.w", "multi_head_attention_/value.w",
                        "multi_head_attention/value_proj.w"})
    EXPECT_EQ(fill(r, m, n), tn_in64) << n;
  // A MultiHeadAttention under its user's name has the signature of its four Linears; three are not it.
  ModelSpec renamed = m;
  for (const char* n : {"attention/query.w", "attention/key.w", "attention/value.w", "attention/linear.w", "attn/query.w",
                        "attn/key.w", "attn/linear.w"})
    renamed.post.push_back(haiku_tensor(n, {64, 64}, TensorRole::linear_weight, 64, 64));
  for (const char* n : {"attention/query.w", "attention/linear.w"})
    EXPECT_NE(error_of([&] { fill(r, renamed, n); }).find("mha_w_init_scale"), std::string::npos) << n;
  for (const char* n : {"attn/query.w", "attn/linear.w"}) EXPECT_EQ(fill(r, renamed, n), tn_in64) << n;
  // Haiku ties by reusing Embed's matrix: a tied embedding keeps the embedding's rule.
  ModelSpec tied = m;
  tied.hyper.tie_word_embeddings = true;
  tied.post.pop_back();  // no head.w
  EXPECT_EQ(fill(r, tied, "embed/embeddings"), FillSpec::trunc_normal_std(0, 1, -2, 2));
  // Roles Haiku has no default for refuse.
  ModelSpec other = m;
  other.post.push_back(haiku_tensor("gate", {4}, TensorRole::other));
  EXPECT_EQ(error_of([&] { fill(r, other, "gate"); }),
            "recipe 'haiku': no rule for tensor 'gate' (role other); give it an init or an override");
}

// MultiHeadAttention has no default w_init (attention.py raises without one): its query, key, value
// and final linear weights are refused unless mha_w_init_scale S gives VarianceScaling(S, "fan_in",
// "truncated_normal"), stddev sqrt(S / fan_in) / .87962566103423978; its biases are zeros either way.
TEST(Recipes, HaikuMultiHeadAttentionNeedsItsScale) {
  const ModelSpec m = haiku_spec();
  const Recipe r = make_recipe("haiku");
  EXPECT_EQ(r.params().at("mha_w_init_scale"), 0.0);
  const std::string why =
      ": Haiku's MultiHeadAttention has no default w_init; give the scale of its VarianceScaling as recipe "
      "'haiku:mha_w_init_scale=S' (as MultiHeadAttention(w_init_scale=S)) or a fill for these names; give it an init or "
      "an override";
  EXPECT_EQ(error_of([&] { fill(r, m, "transformer/multi_head_attention_2/query.w"); }),
            "recipe 'haiku': no rule for tensor 'transformer/multi_head_attention_2/query.w' (role linear_weight)" + why);
  EXPECT_EQ(error_of([&] { fill(r, m, "block/multi_head_attention/linear.w", 3); }),
            "recipe 'haiku': no rule for tensor '__layer_stack_no_per_layer.3.block/multi_head_attention/linear.w' (role "
            "output_weight)" + why);
  for (const char* n : {"transformer/multi_head_attention_2/value.w", "multi_head_attention/key.w",
                        "block/multi_head_attention_1/linear.w"})
    EXPECT_THROW(fill(r, m, n), std::invalid_argument) << n;
  EXPECT_EQ(fill(r, m, "multi_head_attention/key.b"), zero);
  EXPECT_EQ(fill(r, m, "block/multi_head_attention/query.b", 1), zero);
  Recipe overridden = r;  // an override for these names is the other way
  overridden.add_override("*multi_head_attention*", FillSpec::normal(0, 0.01));
  EXPECT_EQ(fill(overridden, m, "multi_head_attention/key.w"), FillSpec::normal(0, 0.01));

  const Recipe s = make_recipe("haiku:mha_w_init_scale=2");
  EXPECT_EQ(s.name(), "haiku:mha_w_init_scale=2");
  const double c = 0.87962566103423978;
  EXPECT_EQ(fill(s, m, "transformer/multi_head_attention_2/query.w"), FillSpec::trunc_normal_std(0, std::sqrt(2.0 / 64) / c, -2, 2));
  EXPECT_EQ(fill(s, m, "multi_head_attention/key.w"), FillSpec::trunc_normal_std(0, std::sqrt(2.0 / 64) / c, -2, 2));
  EXPECT_EQ(fill(s, m, "block/multi_head_attention/linear.w", 0), FillSpec::trunc_normal_std(0, std::sqrt(2.0 / 32) / c, -2, 2));
  EXPECT_EQ(fill(s, m, "block/multi_head_attention_1/linear.w"), FillSpec::trunc_normal_std(0, std::sqrt(2.0 / 128) / c, -2, 2));
  EXPECT_NEAR(fill(s, m, "multi_head_attention/key.w").std, 0.2009681, 1e-7);  // sqrt(2 / 64) / c, by hand
  // The parameter changes nothing else.
  EXPECT_EQ(fill(s, m, "block/linear.w"), FillSpec::trunc_normal_std(0, 0.125, -2, 2));
  EXPECT_EQ(fill(s, m, "block/mlp/~/linear_1.w", 1), FillSpec::trunc_normal_std(0, 0.25, -2, 2));
  EXPECT_EQ(fill(s, m, "multi_head_attention/key.b"), zero);
  EXPECT_EQ(error_of([] { make_recipe("haiku:mha_w_init_scale=0"); }),
            "recipe 'haiku': parameter mha_w_init_scale '0' must be a positive finite number");
  // Decimal numbers only, each key once (std::stod took "0x10" as 16 and " 0.5"; both duplicates were kept).
  for (const char* bad : {"0x10", " 0.5", "0.5 ", "+0.5", "1e-400", "nan", "inf", "", "1,5"})
    EXPECT_EQ(error_of([&] { make_recipe(std::string("haiku:mha_w_init_scale=") + bad); }).rfind("recipe 'haiku': parameter ", 0), 0u) << bad;
  EXPECT_EQ(error_of([] { make_recipe("haiku:mha_w_init_scale=0x10"); }),
            "recipe 'haiku': parameter mha_w_init_scale '0x10' must be a positive finite number");
  EXPECT_EQ(error_of([] { make_recipe("haiku:mha_w_init_scale=2,mha_w_init_scale=3"); }),
            "recipe 'haiku': parameter mha_w_init_scale is given twice");
  EXPECT_EQ(make_recipe("haiku:mha_w_init_scale=2.5e0").name(), "haiku:mha_w_init_scale=2.5");
  EXPECT_EQ(error_of([] { make_recipe("haiku:scale=1"); }),
            "recipe 'haiku': parameter 'scale' is unknown (valid: mha_w_init_scale; write name:key=value)");
}

TEST(Recipes, XavierAndKaiming) {
  const Recipe xr = make_recipe("xavier-uniform");
  const Recipe kr = make_recipe("kaiming-normal");
  const ModelSpec l = make_preset("llama-tiny");  // d 64, kv 2 x 16 = 32, vocab 512
  const double bk = std::sqrt(6.0 / (64 + 32));
  EXPECT_EQ(fill(xr, l, "self_attn.k_proj.weight", 0), FillSpec::uniform(-bk, bk));
  const double be = std::sqrt(6.0 / (64 + 512));
  EXPECT_EQ(fill(xr, l, "model.embed_tokens.weight"), FillSpec::uniform(-be, be));
  EXPECT_EQ(fill(xr, l, "model.norm.weight"), one);
  EXPECT_EQ(fill(kr, l, "mlp.down_proj.weight", 0), FillSpec::normal(0, std::sqrt(2.0 / 176)));
  EXPECT_EQ(fill(kr, l, "model.embed_tokens.weight"), FillSpec::normal(0, std::sqrt(2.0 / 64)));
  const ModelSpec g = make_preset("gpt2-tiny");  // Conv1D [in, out]: fans from the spec, not the shape
  const double bf = std::sqrt(6.0 / (64 + 256));
  EXPECT_EQ(fill(xr, g, "mlp.c_fc.weight", 0), FillSpec::uniform(-bf, bf));
  EXPECT_EQ(fill(kr, g, "mlp.c_proj.weight", 0), FillSpec::normal(0, std::sqrt(2.0 / 256)));
  EXPECT_EQ(fill(xr, g, "mlp.c_fc.bias", 0), zero);
  EXPECT_EQ(fill(kr, g, "transformer.ln_f.bias"), zero);
}

TEST(Recipes, OverridesLastMatchWins) {
  Recipe r = make_recipe("hf");
  const ModelSpec l = make_preset("llama-tiny");
  r.add_override("*.mlp.*_proj.weight", FillSpec::constant(3));
  r.add_override("model.layers.1.mlp.down_proj.weight", FillSpec::constant(4));
  r.add_override("*norm.weight", FillSpec::constant(2));
  r.add_override("model.layers.[02].self_attn.?_proj.weight", FillSpec::uniform(-1, 1));
  ASSERT_EQ(r.overrides().size(), 4u);
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 1), FillSpec::constant(4));
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 0), FillSpec::constant(3));
  EXPECT_EQ(fill(r, l, "mlp.up_proj.weight", 3), FillSpec::constant(3));
  EXPECT_EQ(fill(r, l, "input_layernorm.weight", 2), FillSpec::constant(2));
  EXPECT_EQ(fill(r, l, "model.norm.weight"), FillSpec::constant(2));
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 2), FillSpec::uniform(-1, 1));
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 1), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 0.02));
  EXPECT_THROW(r.add_override("", one), std::invalid_argument);
}

// torchtitan's qwen3 flavours (models/qwen3/__init__.py) draw normal(0, 0.02) everywhere; its MoE
// flavours draw wo and the experts' w2 with 0.02 / sqrt(2 L), the same in every layer.
TEST(Recipes, TorchtitanQwen3) {
  const Recipe r = make_recipe("torchtitan");
  ModelSpec q = make_preset("llama-tiny");
  q.family = "qwen3";
  const FillSpec base = FillSpec::normal(0, 0.02);
  EXPECT_EQ(fill(r, q, "model.embed_tokens.weight"), base);
  EXPECT_EQ(fill(r, q, "lm_head.weight"), base);
  for (std::uint64_t i : {0u, 3u})
    for (const char* n : {"self_attn.q_proj.weight", "self_attn.o_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"})
      EXPECT_EQ(fill(r, q, n, i), base) << n;
  EXPECT_EQ(fill(r, q, "input_layernorm.weight", 1), one);
  q.hyper.tie_word_embeddings = true;  // the tied embedding is the head: normal(0, 0.02) too
  EXPECT_EQ(fill(r, q, "model.embed_tokens.weight"), base);

  ModelSpec moe = make_preset("mixtral-tiny");
  moe.family = "qwen3_moe";
  const FillSpec residual = FillSpec::normal(0, 0.02 / std::sqrt(2.0 * static_cast<double>(moe.num_layers)));
  for (std::uint64_t i : {0u, 1u}) {
    EXPECT_EQ(fill(r, moe, "self_attn.o_proj.weight", i), residual);
    EXPECT_EQ(fill(r, moe, "block_sparse_moe.experts.1.w2.weight", i), residual);
    EXPECT_EQ(fill(r, moe, "block_sparse_moe.experts.1.w3.weight", i), base);
    EXPECT_EQ(fill(r, moe, "block_sparse_moe.gate.weight", i), base);
  }
}

TEST(Recipes, TensorInitBeatsRuleButNotOverride) {
  ModelSpec l = make_preset("llama-tiny");
  l.post[0].init = FillSpec::constant(7);  // model.norm.weight
  Recipe r = make_recipe("torchtitan");
  EXPECT_EQ(fill(r, l, "model.norm.weight"), FillSpec::constant(7));
  r.add_override("model.norm.*", FillSpec::constant(8));
  EXPECT_EQ(fill(r, l, "model.norm.weight"), FillSpec::constant(8));
}

TEST(Recipes, OtherRoleNeedsInit) {
  ModelSpec m = make_preset("llama-tiny");
  TensorSpec extra;
  extra.name = "model.extra";
  extra.shape = {4};
  m.post.push_back(extra);
  try {
    fill(make_recipe("hf"), m, "model.extra");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "recipe 'hf': no rule for tensor 'model.extra' (role other); give it an init or an override");
  }
  m.post.back().init = FillSpec::constant(0.5);
  EXPECT_EQ(fill(make_recipe("hf"), m, "model.extra"), FillSpec::constant(0.5));
  EXPECT_THROW(fill(Recipe{}, m, "model.norm.weight"), std::invalid_argument);
}

// torchtitan with tied embeddings (its llama3 1B/3B and qwen3 configs): the embedding's own init is
// skipped and the shared tensor gets the output rule, trunc_normal(0, dim^-0.5, +-3 std). layerinit
// gave it normal(0, 1): 8x too large at gpt2-tiny's dim 64, 45x at dim 2048.
TEST(Recipes, TorchtitanTiedEmbeddingGetsTheOutputRule) {
  const Recipe r = make_recipe("torchtitan");
  const ModelSpec g = make_preset("gpt2-tiny");  // tied, dim 64
  ASSERT_TRUE(g.hyper.tie_word_embeddings);
  EXPECT_EQ(fill(r, g, "transformer.wte.weight"), FillSpec::trunc_normal_std(0, 0.125, -3, 3));
  EXPECT_EQ(fill(r, g, "transformer.wpe.weight"), FillSpec::normal(0, 1));  // positions are not tied
  const ModelSpec gpt2 = make_preset("gpt2");  // dim 768
  EXPECT_EQ(fill(r, gpt2, "transformer.wte.weight"), FillSpec::trunc_normal_std(0, 1.0 / std::sqrt(768.0), -3, 3));
  ModelSpec l = make_preset("llama-tiny");  // untied: the embedding keeps normal(0, 1)
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 1));
  // A tied llama-style spec (no lm_head tensor): the embedding is the output.
  l.hyper.tie_word_embeddings = true;
  l.post.pop_back();
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::trunc_normal_std(0, 0.125, -3, 3));
  // hf draws the embedding and the head alike: tying changes nothing there.
  EXPECT_EQ(fill(make_recipe("hf"), g, "transformer.wte.weight"), FillSpec::normal(0, 0.02));
}

// Every recipe gives a tied embedding its head's rule (Recipe::rule_for): the frameworks initialize
// the head after the embedding, and only the head's scale starts near ln(vocab). pytorch-default,
// equinox, olmo-llama and olmo-llama-depth gave it normal(0, 1) (a first loss of 85-90 at ln V = 6.9).
TEST(Recipes, ATiedEmbeddingGetsTheHeadsRuleInEveryRecipe) {
  const ModelSpec g = make_preset("gpt2-tiny");  // tied: no lm_head tensor
  ModelSpec untied = g;
  untied.hyper.tie_word_embeddings = false;
  TensorSpec head = g.pre.at(0);
  head.name = "lm_head.weight";
  head.role = TensorRole::head_weight;
  head.fan_in = head.shape.back();
  head.fan_out = head.shape.front();
  untied.post.push_back(head);
  int differs = 0;
  for (const auto& name : recipe_names()) {
    const Recipe r = make_recipe(name);
    if (name == "flax") {  // tied by Embed.attend: the embedding's own rule, normal(0, d^-0.5)
      EXPECT_EQ(fill(r, g, "transformer.wte.weight"), FillSpec::normal(0, 0.125));
      continue;
    }
    if (name == "haiku") {  // tied by reusing Embed's matrix: the embedding's own rule, TruncatedNormal(1)
      EXPECT_EQ(fill(r, g, "transformer.wte.weight"), FillSpec::trunc_normal_std(0, 1, -2, 2));
      continue;
    }
    EXPECT_EQ(fill(r, g, "transformer.wte.weight"), fill(r, untied, "lm_head.weight")) << name;
    differs += fill(r, untied, "transformer.wte.weight") != fill(r, untied, "lm_head.weight");
  }
  EXPECT_GE(differs, 4);  // the rule matters: in those recipes the embedding's own rule is another
}

// The bytes: gpt2-tiny built with torchtitan holds exactly the output rule's fill in its embedding,
// every value within 3 std = 0.375.
TEST(Recipes, TorchtitanTiedEmbeddingBytesAreTheOutputRulesFill) {
  auto be = make_host_backend(2);
  const ModelSpec g = make_preset("gpt2-tiny");
  BuildOptions o;
  o.dtype = DType::f32;
  o.seed = 7;
  const Model m = Builder(g, make_recipe("torchtitan"), o, *be, be->memory()).build();
  const TensorView& wte = m.pre.at(0).view;
  ASSERT_EQ(wte.name, "transformer.wte.weight");
  const std::uint64_t n = numel(wte.shape);
  std::vector<float> expected(n);
  const FillJob j = make_fill_job(expected.data(), DType::f32, n, 7, wte.name, FillSpec::trunc_normal_std(0, 0.125, -3, 3));
  fill_host(std::span(&j, 1), 1);
  const auto* got = static_cast<const float*>(wte.data);
  EXPECT_EQ(std::memcmp(got, expected.data(), n * sizeof(float)), 0);
  float lo = 0, hi = 0;
  for (std::uint64_t i = 0; i < n; ++i) lo = std::min(lo, got[i]), hi = std::max(hi, got[i]);
  EXPECT_GE(lo, -0.375f);
  EXPECT_LE(hi, 0.375f);
  EXPECT_LT(lo, -0.3f);  // 32768 draws reach past 2.4 std on both sides
  EXPECT_GT(hi, 0.3f);
}

// ---- recipe parameters ----

TEST(Recipes, ParametersAfterAColon) {
  const Recipe m = make_recipe("mup:base_width=16");
  EXPECT_EQ(m.name(), "mup:base_width=16");
  EXPECT_EQ(m.params().at("base_width"), 16.0);
  EXPECT_EQ(make_recipe(m.name()).params(), m.params());  // the name reads back as the same recipe
  EXPECT_EQ(make_recipe("mup").params().at("base_width"), 0.0);  // default: the model's own width
  EXPECT_EQ(make_recipe("olmo-llama").params().at("std"), 0.02);
  EXPECT_EQ(make_recipe("olmo-llama:std=0.01").name(), "olmo-llama:std=0.01");
  EXPECT_TRUE(make_recipe("hf").params().empty());
  auto error = [](const char* text) {
    try {
      make_recipe(text);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error("mup:base=3"), "recipe 'mup': parameter 'base' is unknown (valid: base_width; write name:key=value)");
  EXPECT_EQ(error("hf:std=1"), "recipe 'hf': parameter 'std' is unknown (valid: none; write name:key=value)");
  EXPECT_EQ(error("mup:base_width"), "recipe 'mup': parameter 'base_width' is unknown (valid: base_width; write name:key=value)");
  EXPECT_EQ(error("mup:base_width=-1"), "recipe 'mup': parameter base_width '-1' must be a positive finite number");
  EXPECT_EQ(error("mup:base_width=0"), "recipe 'mup': parameter base_width '0' must be a positive finite number");
  EXPECT_EQ(error("mup:base_width=1e999"), "recipe 'mup': parameter base_width '1e999' must be a positive finite number");
  EXPECT_EQ(error("olmo-normal:std=0.02x"), "recipe 'olmo-normal': parameter std '0.02x' must be a positive finite number");
  EXPECT_EQ(error("olmo:std=1"), "recipe 'olmo' is unknown (valid: hf, torchtitan, megatron, pytorch-default, equinox, flax, "
                                 "xavier-uniform, kaiming-normal, olmo-normal, olmo-llama, olmo-llama-depth, "
                                 "olmo-normalized, neox, mpt, mup, haiku)");
}

// ---- OLMo-core (olmo_core/nn/transformer/init.py) ----

namespace {
FillSpec tn(double std) { return FillSpec::trunc_normal_std(0, std, -3, 3); }  // init_linear: +-3 std
}  // namespace

TEST(Recipes, OlmoNormal) {
  const Recipe r = make_recipe("olmo-normal");
  const ModelSpec l = make_preset("llama-tiny");
  for (const char* t : {"self_attn.q_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                        "mlp.down_proj.weight"})
    EXPECT_EQ(fill(r, l, t, 3), tn(0.02)) << t;
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), tn(0.02));
  EXPECT_EQ(fill(r, l, "lm_head.weight"), tn(0.02));
  EXPECT_EQ(fill(r, l, "input_layernorm.weight", 0), one);
  const ModelSpec x = make_preset("mixtral-tiny");
  EXPECT_EQ(fill(r, x, "block_sparse_moe.gate.weight", 1), tn(0.02));
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.3.w2.weight", 1), tn(0.02));
  EXPECT_EQ(fill(r, make_preset("qwen2.5-tiny"), "self_attn.k_proj.bias", 0), zero);
  // std is init_std, a parameter.
  EXPECT_EQ(fill(make_recipe("olmo-normal:std=0.01"), l, "mlp.down_proj.weight", 0), tn(0.01));
}

TEST(Recipes, OlmoLlama) {
  const Recipe r = make_recipe("olmo-llama");
  const ModelSpec l = make_preset("llama-tiny");  // d 64, 4 blocks: w_out, w2, w3 get 0.02 / sqrt(8)
  const FillSpec out = tn(0.02 / std::sqrt(8.0));
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 1));
  for (std::uint64_t i : {0u, 3u}) {
    EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", i), tn(0.02));
    EXPECT_EQ(fill(r, l, "self_attn.v_proj.weight", i), tn(0.02));
    EXPECT_EQ(fill(r, l, "mlp.gate_proj.weight", i), tn(0.02));  // w1
    EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", i), out);   // w_out
    EXPECT_EQ(fill(r, l, "mlp.up_proj.weight", i), out);        // w3
    EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", i), out);      // w2
  }
  EXPECT_EQ(fill(r, l, "lm_head.weight"), tn(0.125));  // init_final_w_out: d_model^-0.5
  EXPECT_EQ(fill(r, l, "model.norm.weight"), one);
  // MoE (init_feed_forward_moe): router and every expert weight scaled, 2 blocks.
  const ModelSpec x = make_preset("mixtral-tiny");
  const FillSpec moe = tn(0.02 / std::sqrt(4.0));
  EXPECT_EQ(fill(r, x, "block_sparse_moe.gate.weight", 0), moe);
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.0.w1.weight", 0), moe);
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.2.w2.weight", 1), moe);
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.3.w3.weight", 1), moe);
  EXPECT_EQ(fill(r, x, "self_attn.q_proj.weight", 1), tn(0.02));
  // DeepSeek-V3 tiny: 3 layers in all (1 dense + 2 MoE) is the depth.
  const ModelSpec d = make_preset("deepseek-v3-tiny");
  EXPECT_EQ(fill(r, d, "self_attn.o_proj.weight", 1), tn(0.02 / std::sqrt(6.0)));
  EXPECT_EQ(fill(r, d, "model.layers.0.mlp.down_proj.weight"), tn(0.02 / std::sqrt(6.0)));
  EXPECT_EQ(fill(r, d, "mlp.shared_experts.up_proj.weight", 0), tn(0.02 / std::sqrt(6.0)));
  EXPECT_EQ(fill(r, d, "mlp.shared_experts.gate_proj.weight", 0), tn(0.02));
  EXPECT_EQ(fill(r, d, "mlp.experts.1.gate_proj.weight", 0), tn(0.02 / std::sqrt(6.0)));
  EXPECT_EQ(fill(r, d, "self_attn.kv_b_proj.weight", 0), tn(0.02));
  EXPECT_EQ(fill(r, d, "mlp.gate.e_score_correction_bias", 0), zero);
  EXPECT_EQ(fill(r, d, "self_attn.q_a_layernorm.weight", 0), one);
}

TEST(Recipes, OlmoLlamaDepthUsesTheModelsLayerIndex) {
  const Recipe r = make_recipe("olmo-llama-depth");
  const ModelSpec l = make_preset("llama-tiny");
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 0), tn(0.02 / std::sqrt(2.0)));
  EXPECT_EQ(fill(r, l, "mlp.up_proj.weight", 1), tn(0.02 / std::sqrt(4.0)));
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 3), tn(0.02 / std::sqrt(8.0)));
  EXPECT_EQ(fill(r, l, "mlp.gate_proj.weight", 3), tn(0.02));
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 1));
  EXPECT_EQ(fill(r, l, "lm_head.weight"), tn(0.125));
  // deepseek-v3-tiny: the dense layer 0 is a pre tensor and still layer 0; block layer i is model
  // layer 1 + i.
  const ModelSpec d = make_preset("deepseek-v3-tiny");
  EXPECT_EQ(fill(r, d, "model.layers.0.self_attn.o_proj.weight"), tn(0.02 / std::sqrt(2.0)));
  EXPECT_EQ(fill(r, d, "model.layers.0.mlp.up_proj.weight"), tn(0.02 / std::sqrt(2.0)));
  EXPECT_EQ(fill(r, d, "self_attn.o_proj.weight", 0), tn(0.02 / std::sqrt(4.0)));  // model layer 1
  EXPECT_EQ(fill(r, d, "self_attn.o_proj.weight", 1), tn(0.02 / std::sqrt(6.0)));  // model layer 2
  EXPECT_EQ(fill(r, d, "mlp.experts.3.down_proj.weight", 1), tn(0.02 / std::sqrt(6.0)));
  EXPECT_EQ(fill(r, d, "mlp.gate.weight", 0), tn(0.02 / std::sqrt(4.0)));
  EXPECT_FALSE(tensor_context(d, d.pre[0], std::nullopt).layer.has_value());  // the embedding is in no layer
  EXPECT_EQ(tensor_context(d, d.pre[1], std::nullopt).layer, 0u);
  EXPECT_EQ(tensor_context(d, d.layer.tensors[0], 1).layer, 2u);
  EXPECT_EQ(tensor_context(d, d.layer.tensors[0], 1).canonical_name, "model.layers.2.self_attn.q_a_proj.weight");
}

TEST(Recipes, OlmoNormalized) {
  const Recipe r = make_recipe("olmo-normalized");
  const ModelSpec l = make_preset("llama-tiny");  // d^-0.5 = 1/8
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 0.125));
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 2), tn(0.125));
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 2), tn(0.125 / std::sqrt(8.0)));
  EXPECT_EQ(fill(r, l, "mlp.gate_proj.weight", 2), tn(0.125));
  EXPECT_EQ(fill(r, l, "mlp.up_proj.weight", 2), tn(0.125));  // w3 keeps d^-0.5 in nGPT
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 2), tn(0.125 / std::sqrt(8.0)));
  EXPECT_EQ(fill(r, l, "lm_head.weight"), tn(0.125));
  // init_feed_forward_moe has no nGPT case: router and experts keep init_std.
  const ModelSpec x = make_preset("mixtral-tiny");
  EXPECT_EQ(fill(r, x, "block_sparse_moe.gate.weight", 1), tn(0.02));
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.1.w2.weight", 1), tn(0.02));
  // A spec without hidden_size cannot take d^-0.5.
  ModelSpec custom = l;
  custom.hyper.hidden_size = 0;
  try {
    fill(r, custom, "self_attn.q_proj.weight", 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "recipe 'olmo-normalized': no rule for tensor 'model.layers.0.self_attn.q_proj.weight' "
                                     "(role linear_weight): hyper.hidden_size is unknown; give it an init or an override");
  }
}

// ---- GPT-NeoX (megatron/model/init_functions.py) and MPT (llm-foundry param_init_fns.py) ----

TEST(Recipes, NeoxSmallInitAndWangInit) {
  const Recipe r = make_recipe("neox");
  const ModelSpec l = make_preset("llama-tiny");  // d 64, L 4
  const FillSpec small = FillSpec::normal(0, std::sqrt(2.0 / (5.0 * 64)));
  const FillSpec wang = FillSpec::normal(0, 2.0 / 4 / std::sqrt(64.0));
  EXPECT_EQ(wang, FillSpec::normal(0, 0.0625));
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), small);
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 1), small);
  EXPECT_EQ(fill(r, l, "mlp.up_proj.weight", 1), small);
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 1), wang);
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 3), wang);
  EXPECT_EQ(fill(r, l, "lm_head.weight"), small);
  EXPECT_EQ(fill(r, l, "input_layernorm.weight", 0), one);
  const ModelSpec g = make_preset("gpt2-tiny");  // L 2: wang 2 / 2 / 8
  EXPECT_EQ(fill(r, g, "transformer.wpe.weight"), small);
  EXPECT_EQ(fill(r, g, "attn.c_proj.weight", 0), FillSpec::normal(0, 0.125));
  EXPECT_EQ(fill(r, g, "attn.c_proj.bias", 0), zero);
  EXPECT_EQ(fill(r, g, "ln_1.bias", 0), zero);
  const ModelSpec x = make_preset("mixtral-tiny");  // L 2
  EXPECT_EQ(fill(r, x, "block_sparse_moe.experts.0.w2.weight", 0), FillSpec::normal(0, 0.125));
  EXPECT_EQ(fill(r, x, "block_sparse_moe.gate.weight", 0), small);
}

TEST(Recipes, MptDividesResidualProjections) {
  const Recipe r = make_recipe("mpt");
  const ModelSpec l = make_preset("llama-tiny");
  const double small = std::sqrt(2.0 / (5.0 * 64));
  const FillSpec residual = FillSpec::normal(0, small / (4 / std::sqrt(10.0)));
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 2), residual);
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 2), residual);
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 2), FillSpec::normal(0, small));
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, small));
  EXPECT_EQ(fill(r, l, "lm_head.weight"), FillSpec::normal(0, small));
  EXPECT_EQ(fill(r, make_preset("qwen2.5-tiny"), "self_attn.q_proj.bias", 1), zero);
  // small / (L / sqrt(10)) is GPT-NeoX's wang_init 2 / (L sqrt(d)), computed the way llm-foundry does.
  EXPECT_NEAR(residual.std, 2.0 / 4 / std::sqrt(64.0), 1e-17);
  const ModelSpec d = make_preset("deepseek-v3-tiny");  // 3 layers in all
  EXPECT_EQ(fill(r, d, "mlp.experts.2.down_proj.weight", 1), FillSpec::normal(0, small / (3 / std::sqrt(10.0))));
  EXPECT_EQ(fill(r, d, "mlp.experts.2.up_proj.weight", 1), FillSpec::normal(0, small));
}

// ---- muP as Megatron-LM implements it (transformer_config.py, use_mup) ----

TEST(Recipes, MupScalesHiddenAndOutputLayersByWidth) {
  const ModelSpec l = make_preset("llama-tiny");  // r 0.02, d 64, L 4
  // base_width = hidden_size (the default): width_mult 1, Megatron's plain rule.
  const Recipe base = make_recipe("mup");
  EXPECT_EQ(fill(base, l, "self_attn.q_proj.weight", 0), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(base, l, "self_attn.o_proj.weight", 0), FillSpec::normal(0, 0.02 / (std::sqrt(8.0) * 1.0)));
  for (const char* t : {"self_attn.q_proj.weight", "self_attn.o_proj.weight", "mlp.down_proj.weight"})
    EXPECT_EQ(fill(base, l, t, 1), fill(make_recipe("megatron"), l, t, 1)) << t;
  // base_width 16: width_mult 4.
  const Recipe r = make_recipe("mup:base_width=16");
  EXPECT_EQ(fill(r, l, "self_attn.q_proj.weight", 0), FillSpec::normal(0, 0.02 / 2.0));
  EXPECT_EQ(fill(r, l, "mlp.gate_proj.weight", 3), FillSpec::normal(0, 0.01));
  EXPECT_EQ(fill(r, l, "self_attn.o_proj.weight", 0), FillSpec::normal(0, 0.02 / (std::sqrt(8.0) * 2.0)));
  EXPECT_EQ(fill(r, l, "mlp.down_proj.weight", 3), FillSpec::normal(0, 0.02 / (std::sqrt(8.0) * 2.0)));
  // Embeddings and the untied output layer keep the unscaled std (embedding_init_method).
  EXPECT_EQ(fill(r, l, "model.embed_tokens.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "lm_head.weight"), FillSpec::normal(0, 0.02));
  EXPECT_EQ(fill(r, l, "model.norm.weight"), one);
  const ModelSpec x = make_preset("mixtral-tiny");
  EXPECT_EQ(fill(r, x, "block_sparse_moe.gate.weight", 0), FillSpec::normal(0, 0.01));
  EXPECT_EQ(fill(r, make_preset("qwen2.5-tiny"), "self_attn.v_proj.bias", 0), zero);
  // base_width above the width: width_mult 1/4 widens the std.
  EXPECT_EQ(fill(make_recipe("mup:base_width=256"), l, "self_attn.q_proj.weight", 0), FillSpec::normal(0, 0.02 / std::sqrt(0.25)));
}

// ---- the held distributions, on emitted models ----

namespace {

// name -> float32 values of a safetensors file written by emit.
std::map<std::string, std::vector<float>> read_f32_safetensors(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);
  const auto header = nlohmann::json::parse(all.substr(8, n));
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(v["dtype"], "F32") << name;
    const std::uint64_t begin = v["data_offsets"][0], end = v["data_offsets"][1];
    std::vector<float> x((end - begin) / 4);
    std::memcpy(x.data(), all.data() + 8 + n + begin, end - begin);
    out[name] = std::move(x);
  }
  return out;
}

// Checks one emitted tensor against its planned fill; returns whether it had a random fill large
// enough to check the moments of.
bool holds_its_fill(const PlannedTensor& p, const std::vector<float>& x, double std_scale = 1.0) {
  EXPECT_EQ(x.size(), p.numel()) << p.name;
  const FillSpec& f = p.fill;
  if (f.kind == FillKind::constant) {
    for (float v : x) EXPECT_EQ(v, static_cast<float>(f.value)) << p.name;
    return false;
  }
  if (x.size() < 1000) return false;  // too few values for a useful moment check
  double mean_ref = f.mean, std_ref = f.std, lo = -INFINITY, hi = INFINITY;
  if (f.kind == FillKind::trunc_normal) {
    const double a = f.bounds_in_std ? f.mean + f.a * f.std : f.a, b = f.bounds_in_std ? f.mean + f.b * f.std : f.b;
    const auto mm = stats::trunc_normal_moments(f.mean, f.std, a, b);
    mean_ref = mm.mean, std_ref = std::sqrt(mm.var), lo = a, hi = b;
  } else {
    EXPECT_EQ(f.kind, FillKind::normal) << p.name;
  }
  std_ref *= std_scale;
  double s1 = 0, s2 = 0;
  std::size_t outside = 0;
  for (float v : x) {
    outside += v < lo || v > hi;
    s1 += v;
  }
  EXPECT_EQ(outside, 0u) << p.name;
  const double n = static_cast<double>(x.size()), mean = s1 / n;
  for (float v : x) s2 += (v - mean) * (v - mean);
  const double sd = std::sqrt(s2 / (n - 1));
  EXPECT_LE(std::fabs(mean - mean_ref), 6 * std_ref / std::sqrt(n)) << p.name << " " << f.describe();
  EXPECT_LE(std::fabs(sd / std_ref - 1), 6 / std::sqrt(2 * n)) << p.name << " " << f.describe() << " sample std " << sd;
  return true;
}

}  // namespace

// Each new recipe emits deepseek-v3-tiny (dense and MoE layers, latent attention, experts, router)
// and qwen2.5-tiny (biases) in fp32; every tensor of the file holds its planned fill: constants
// exactly, random fills with their mean and std (the truncated normal's own std for trunc fills,
// all values inside the bounds). Tolerances are 6 standard errors (normal theory: sd of the sample
// std ~ std / sqrt(2 n)), so a false alarm is below 1e-8 per check; fixed seed. The same check with
// a reference std 10% off fails on every role checked (the check can fail).
TEST(Recipes, EmittedModelsHoldEachRolesDistribution) {
  auto be = make_host_backend(2);
  layerinit::testing::TempDir dir("layerinit-recipe-stats");
  std::map<std::string, int> checked;  // recipe -> tensors with a random fill checked
  for (const char* rn : {"olmo-normal", "olmo-llama", "olmo-llama-depth", "olmo-normalized", "neox", "mpt", "mup:base_width=16",
                         "haiku"}) {
    for (const char* pn : {"deepseek-v3-tiny", "qwen2.5-tiny"}) {
      SCOPED_TRACE(std::string(rn) + " " + pn);
      const ModelSpec spec = make_preset(pn);
      BuildOptions o;
      o.dtype = DType::f32;
      o.seed = 11;
      const Builder b(spec, make_recipe(rn), o, *be, be->memory());
      const auto target = dir / (std::string(rn).substr(0, std::string(rn).find(':')) + "-" + pn);
      EmitOptions eo;
      eo.format = CheckpointFormat::safetensors;
      emit_checkpoint(b, *be, target, eo);
      const auto file = read_f32_safetensors(target / "model.safetensors");
      std::vector<PlannedTensor> plans = b.plan_pre();
      for (std::uint64_t i = 0; i < spec.num_layers; ++i)
        for (auto& p : b.plan_layer(i)) plans.push_back(p);
      for (auto& p : b.plan_post()) plans.push_back(p);
      ASSERT_EQ(file.size(), plans.size());
      for (const auto& p : plans)
        if (holds_its_fill(p, file.at(p.name))) ++checked[rn];
      // A wrong std is caught: every large random tensor, checked against 1.1x its std, fails.
      const PlannedTensor* big = nullptr;
      for (const auto& p : plans)
        if (p.fill.kind != FillKind::constant && p.numel() >= 4096) big = &p;
      ASSERT_NE(big, nullptr);
      ::testing::TestPartResultArray failures;
      {
        ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
        holds_its_fill(*big, file.at(big->name), 1.1);
      }
      EXPECT_GE(failures.size(), 1) << big->name;
    }
  }
  for (const auto& [rn, count] : checked) EXPECT_GE(count, 40) << rn;
  EXPECT_EQ(checked.size(), 8u);
}
