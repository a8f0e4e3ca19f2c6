// Recipes: the exact FillSpec each recipe gives each tensor, overrides, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include <layerinit/init/builder.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/kernels/fill_host.hpp>

using namespace layerinit;

namespace {

// The fill of a pre/post tensor (canonical name) or of a layer tensor (relative name) in layer i.
FillSpec fill(const Recipe& r, const ModelSpec& m, std::string_view name, std::optional<std::uint64_t> layer = {}) {
  if (layer) {
    for (const auto& t : m.layer.tensors)
      if (t.name == name) return r.rule_for(TensorContext{m, t, layer, m.canonical_name(*layer, t)});
  } else {
    for (const auto* list : {&m.pre, &m.post})
      for (const auto& t : *list)
        if (t.name == name) return r.rule_for(TensorContext{m, t, std::nullopt, t.name});
  }
  throw std::runtime_error("no tensor " + std::string(name));
}

const FillSpec one = FillSpec::constant(1.0);
const FillSpec zero = FillSpec::constant(0.0);

// Every tensor of every preset gets a fill that prepare_fill accepts, in every recipe.
void expect_all_valid(const Recipe& r, const ModelSpec& m) {
  auto check = [&](const TensorSpec& t, std::optional<std::uint64_t> layer, const std::string& cn) {
    const FillSpec f = r.rule_for(TensorContext{m, t, layer, cn});
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
                                                      "flax", "xavier-uniform", "kaiming-normal"}));
  for (const auto& n : recipe_names()) EXPECT_EQ(make_recipe(n).name(), n);
  try {
    make_recipe("jax");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "unknown recipe 'jax' (valid: hf, torchtitan, megatron, pytorch-default, "
                                     "equinox, flax, xavier-uniform, kaiming-normal)");
  }
}

TEST(Recipes, EveryRecipeCoversEveryPresetTensor) {
  for (const auto& rn : recipe_names())
    for (const char* pn : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "mlp-deep"})
      expect_all_valid(make_recipe(rn), make_preset(pn));
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
}

TEST(Recipes, PytorchDefaultAndEquinox) {
  const ModelSpec g = make_preset("gpt2-tiny");  // d = 64, ff = 256
  const ModelSpec m = make_preset("mlp-deep");
  for (const char* name : {"pytorch-default", "equinox"}) {
    const Recipe r = make_recipe(name);
    EXPECT_EQ(fill(r, g, "transformer.wte.weight"), FillSpec::normal(0, 1)) << name;
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
              "recipe hf: no rule for tensor 'model.extra' (role other); give it an init or an override");
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
  // Other recipes are unchanged by tying.
  EXPECT_EQ(fill(make_recipe("hf"), g, "transformer.wte.weight"), FillSpec::normal(0, 0.02));
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
