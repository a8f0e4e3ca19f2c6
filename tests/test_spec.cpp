// ModelSpec: sizes, names, roles and validation messages.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <variant>

#include <layerinit/core/errors.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec.hpp>

using namespace layerinit;

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

TensorSpec t(std::string name, Shape shape, TensorRole role = TensorRole::linear_weight) {
  TensorSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.role = role;
  return s;
}

ModelSpec small() {
  ModelSpec m;
  m.name = "small";
  m.family = "custom";
  m.pre = {t("embed.weight", {10, 4}, TensorRole::embedding)};
  m.layer.tensors = {t("w.weight", {4, 4}), t("norm.weight", {4}, TensorRole::norm_weight)};
  m.num_layers = 3;
  m.post = {t("head.weight", {10, 4}, TensorRole::head_weight)};
  return m;
}

std::string message(const ModelSpec& m) {
  try {
    m.validate();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(valid)";
}

}  // namespace

TEST(Spec, Numel) {
  EXPECT_EQ(numel({}), 1u);
  EXPECT_EQ(numel({7}), 7u);
  EXPECT_EQ(numel({4096, 14336}), 58720256u);
  EXPECT_EQ(numel({0, 5}), 0u);
  EXPECT_EQ(numel({kMax}), kMax);
  EXPECT_EQ(numel({1ULL << 32, (1ULL << 32) - 1}), (1ULL << 32) * ((1ULL << 32) - 1));
  EXPECT_THROW(numel({1ULL << 32, 1ULL << 32}), std::overflow_error);
  EXPECT_THROW(numel({kMax, 2}), std::overflow_error);
  EXPECT_EQ(numel({kMax, 0}), 0u);
}

TEST(Spec, ShapeString) {
  EXPECT_EQ(shape_string({}), "[]");
  EXPECT_EQ(shape_string({4096}), "[4096]");
  EXPECT_EQ(shape_string({4096, 4096}), "[4096, 4096]");
}

TEST(Spec, Roles) {
  for (auto r : {TensorRole::embedding, TensorRole::position_embedding, TensorRole::linear_weight,
                 TensorRole::output_weight, TensorRole::linear_bias, TensorRole::norm_weight, TensorRole::norm_bias,
                 TensorRole::router_weight, TensorRole::head_weight, TensorRole::other})
    EXPECT_EQ(parse_role(role_name(r)), r);
  EXPECT_EQ(role_name(TensorRole::output_weight), "output_weight");
  try {
    parse_role("weight");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "tensor role 'weight' is unknown (valid: embedding, position_embedding, linear_weight, output_weight, "
              "linear_bias, norm_weight, norm_bias, router_weight, head_weight, other)");
  }
  EXPECT_EQ(role_names().size(), 10u);
  EXPECT_EQ(role_names().front(), "embedding");
  EXPECT_EQ(role_names().back(), "other");
  // A rule's text: a role's name, else a fill; neither is one line naming the caller's argument.
  EXPECT_EQ(std::get<TensorRole>(parse_role_or_fill("head_weight", "rules['*']")), TensorRole::head_weight);
  EXPECT_EQ(std::get<FillSpec>(parse_role_or_fill("normal(0, 0.02)", "rules['*']")), FillSpec::normal(0, 0.02));
  try {
    parse_role_or_fill("normal(0, -1)", "rules['*.w']");
    FAIL();
  } catch (const bad_input& e) {
    EXPECT_EQ(e.argument(), "rules['*.w']");
    EXPECT_EQ(std::string(e.what()),
              "rules['*.w'] 'normal(0, -1)' is neither a tensor role (valid: embedding, position_embedding, linear_weight, "
              "output_weight, linear_bias, norm_weight, norm_bias, router_weight, head_weight, other) nor a fill: is "
              "invalid: std must be positive");
  }
}

TEST(Spec, NamesAndCounts) {
  const ModelSpec m = small();
  EXPECT_EQ(m.canonical_name(2, m.layer.tensors[0]), "model.layers.2.w.weight");
  EXPECT_EQ(m.layer_parameter_count(), 20u);
  EXPECT_EQ(m.parameter_count(), 40u + 3u * 20u + 40u);
  EXPECT_EQ(message(m), "(valid)");
}

TEST(Spec, CountOverflow) {
  ModelSpec m = small();
  m.num_layers = kMax / 10;
  EXPECT_THROW(m.parameter_count(), std::overflow_error);
  EXPECT_EQ(message(m), "model 'small': parameter count overflows 64 bits");
  m.num_layers = kMax / 20 / 4;  // elements fit, bytes at 4 per element do not
  EXPECT_NO_THROW(m.parameter_count());
  EXPECT_NE(message(m).find("byte count of"), std::string::npos) << message(m);
}

TEST(Spec, ValidateMessages) {
  ModelSpec m = small();
  m.name = "";
  EXPECT_EQ(message(m), "model spec: name is empty");

  // A zero dimension is a tensor of zero elements, as torch makes them (DeepseekV3MoE's shared
  // experts at n_shared_experts 0): valid.
  m = small();
  m.layer.tensors[0].shape = {4, 0};
  EXPECT_NO_THROW(m.validate());
  m.layer.tensors[0].shape = {1ULL << 40, 0, 1ULL << 40};  // the other dimensions' product must still fit
  EXPECT_EQ(message(m),
            "model 'small': layer tensor 0 'w.weight': shape [1099511627776, 0, 1099511627776]: element count overflows 64 bits");

  m = small();
  m.pre[0].shape = {};
  EXPECT_EQ(message(m), "model 'small': pre tensor 0 'embed.weight': shape is empty (scalars are written as [1])");

  m = small();
  m.post[0].shape = {1ULL << 40, 1ULL << 40};
  EXPECT_EQ(message(m),
            "model 'small': post tensor 0 'head.weight': shape [1099511627776, 1099511627776]: element count "
            "overflows 64 bits");

  m = small();
  m.post[0].shape = {1ULL << 31, 1ULL << 31};
  EXPECT_EQ(message(m),
            "model 'small': post tensor 0 'head.weight': shape [2147483648, 2147483648]: byte count overflows 64 bits");

  m = small();
  m.layer.tensors[1].name = "w.weight";
  EXPECT_EQ(message(m), "model 'small': duplicate layer tensor name 'w.weight'");

  m = small();
  m.post[0].name = "embed.weight";
  EXPECT_EQ(message(m), "model 'small': duplicate tensor name 'embed.weight' (pre tensor 0 'embed.weight' and post "
                        "tensor 0 'embed.weight')");

  m = small();
  m.post[0].name = "model.layers.2.w.weight";
  m.post[0].shape = {4, 4};
  EXPECT_EQ(message(m), "model 'small': duplicate tensor name 'model.layers.2.w.weight' (post tensor 0 "
                        "'model.layers.2.w.weight' and layer 2)");
  m.post[0].name = "model.layers.3.w.weight";  // layer 3 does not exist
  EXPECT_EQ(message(m), "(valid)");
  m.post[0].name = "model.layers.02.w.weight";  // not a canonical layer name
  EXPECT_EQ(message(m), "(valid)");

  m = small();
  m.layer.tensors[0].name = "";
  EXPECT_EQ(message(m), "model 'small': layer tensor 0: name is empty");

  m = small();
  m.layer.tensors[0].name = "a\nb";
  EXPECT_EQ(message(m), "model 'small': layer tensor 0 'a\\x0ab': name contains control characters");

  m = small();
  m.pre[0].transposable = true;
  m.pre[0].shape = {2, 3, 4};
  EXPECT_EQ(message(m), "model 'small': pre tensor 0 'embed.weight': transposable but shape [2, 3, 4] is not 2-D");

  m = small();
  m.layer.tensors[0].init = FillSpec::normal(0, -1);
  EXPECT_EQ(message(m), "model 'small': layer tensor 0 'w.weight': init: fill 'normal(0, -1)' is invalid: std must be "
                        "positive");
  m.layer.tensors[0].init = FillSpec::normal(0, 1e300);
  EXPECT_EQ(message(m), "model 'small': layer tensor 0 'w.weight': init: fill 'normal(0, 1e+300)' is invalid: numbers "
                        "must be finite and within float range");

  m = small();
  m.hyper.hidden_size = 10;
  m.hyper.num_heads = 3;
  EXPECT_EQ(message(m), "model 'small': num_heads 3 does not divide hidden_size 10");
  m.hyper.head_dim = 4;  // an explicit head_dim allows it
  EXPECT_EQ(message(m), "(valid)");
  m.hyper.num_kv_heads = 2;
  EXPECT_EQ(message(m), "model 'small': num_kv_heads 2 does not divide num_heads 3");
}

TEST(Spec, EmptyLayers) {
  ModelSpec m = small();
  m.num_layers = 0;
  m.layer.tensors.clear();
  EXPECT_EQ(message(m), "(valid)");  // pre and post hold tensors
  EXPECT_EQ(m.parameter_count(), 80u);
  m.pre.clear();
  m.post.clear();
  EXPECT_EQ(message(m), "model 'small': has no tensors");
  m.num_layers = 2;
  EXPECT_EQ(message(m), "model 'small': has no tensors");
  m = small();
  m.layer.tensors.clear();
  EXPECT_EQ(message(m), "model 'small': num_layers is 3 but the layer has no tensors");
  m = small();
  m.pre.clear();
  m.post.clear();
  EXPECT_EQ(message(m), "(valid)");  // layers alone are a model
}

// A spec lists at most kMaxSpecTensors tensors (pre, one layer, post; the layer's repeats are not
// listed): the records of a spec no real model needs are refused, whatever made them.
TEST(Spec, ListsAtMostKMaxSpecTensors) {
  ModelSpec m = small();
  m.pre.clear();
  m.post.clear();
  const TensorSpec w = m.layer.tensors.front();
  m.layer.tensors.clear();
  for (std::uint64_t i = 0; i < kMaxSpecTensors; ++i) {
    m.layer.tensors.push_back(w);
    m.layer.tensors.back().name = "w" + std::to_string(i);
  }
  EXPECT_EQ(message(m), "(valid)");
  m.post.push_back(w);
  m.post.back().name = "head";
  EXPECT_EQ(message(m), "model 'small': lists 262145 tensors; a spec lists at most 262144");
}

// One check of the architecture numbers serves presets, ModelSpec::validate and JSON specs.
TEST(Spec, HyperProblemNamesTheFirstInconsistentField) {
  Hyper h;
  EXPECT_FALSE(hyper_problem(h).has_value());
  h.hidden_size = 10;
  h.num_heads = 3;
  auto p = hyper_problem(h);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->field, "num_heads");
  EXPECT_EQ(p->message, "3 does not divide hidden_size 10");
  h.head_dim = 4;  // an explicit head_dim lifts the divisibility rule
  EXPECT_FALSE(hyper_problem(h).has_value());
  h.num_kv_heads = 2;
  p = hyper_problem(h);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->field, "num_kv_heads");
  EXPECT_EQ(p->message, "2 does not divide num_heads 3");
  h.num_kv_heads = 3;
  h.experts_per_token = 2;
  p = hyper_problem(h);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->message, "2 exceeds num_experts 0");
  h.experts_per_token = 0;
  h.norm_eps = -1;
  p = hyper_problem(h);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->field, "norm_eps");
  EXPECT_EQ(p->message, "must be finite and >= 0");
  EXPECT_THROW(llama_spec("x", Hyper{.vocab_size = 8, .hidden_size = 10, .num_heads = 3}, 1), std::invalid_argument);
}

// One parser of "<prefix><i>.<rel>" for spec validation, the CLI's trace and the benchmarks.
TEST(Spec, SplitLayerNameFindsTheCanonicalIndex) {
  auto l = split_layer_name("model.layers.", "model.layers.12.mlp.up_proj.weight");
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->layer, 12u);
  EXPECT_EQ(l->relative, "mlp.up_proj.weight");
  l = split_layer_name("model.layers.", "model.layers.18446744073709551615.x");  // 20 digits: not canonical here
  EXPECT_FALSE(l.has_value());
  l = split_layer_name("model.layers.", "model.layers.9999999999999999999.x");  // 19 digits
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->layer, 9999999999999999999ull);
  EXPECT_FALSE(split_layer_name("model.layers.", "model.layers.mlp.up_proj.weight").has_value());  // stacked
  EXPECT_FALSE(split_layer_name("model.layers.", "model.layers.03.x").has_value());  // leading zero
  EXPECT_FALSE(split_layer_name("model.layers.", "model.layers.3").has_value());     // no dot
  EXPECT_FALSE(split_layer_name("model.layers.", "model.embed_tokens.weight").has_value());
  EXPECT_FALSE(split_layer_name("h.", "model.layers.3.x").has_value());
}

// Element and byte counts past 2^64 (core/shape.hpp): checked arithmetic names what overflowed,
// saturating arithmetic stops at 2^64 - 1.
TEST(Spec, CheckedAndSaturatingCounts) {
  EXPECT_EQ(checked_add(1, 2, "x"), 3u);
  EXPECT_EQ(checked_mul(1ull << 32, (1ull << 32) - 1, "x"), (1ull << 32) * ((1ull << 32) - 1));
  try {
    checked_mul(1ull << 32, 1ull << 32, "parameter count");
    ADD_FAILURE() << "no throw";
  } catch (const std::overflow_error& e) {
    EXPECT_STREQ(e.what(), "parameter count overflows 64 bits");
  }
  EXPECT_THROW(checked_add(UINT64_MAX, 1, "x"), std::overflow_error);
  EXPECT_EQ(saturating_add(UINT64_MAX - 1, 5), UINT64_MAX);
  EXPECT_EQ(saturating_mul(1ull << 40, 1ull << 40), UINT64_MAX);
  EXPECT_EQ(saturating_mul(0, UINT64_MAX), 0u);
  EXPECT_EQ(saturating_add(2, 3), 5u);
}

// first_layer: the repeated block starts at a later layer; the layers before it are pre tensors.
TEST(Spec, FirstLayerOffsetsNamesAndDepth) {
  ModelSpec m = small();
  m.first_layer = 2;
  m.pre.push_back(t("model.layers.0.w.weight", {4, 4}));
  m.pre.push_back(t("model.layers.1.w.weight", {4, 4}));
  EXPECT_EQ(message(m), "(valid)");
  EXPECT_EQ(m.canonical_name(0, m.layer.tensors[0]), "model.layers.2.w.weight");
  EXPECT_EQ(m.canonical_name(2, m.layer.tensors[1]), "model.layers.4.norm.weight");
  EXPECT_EQ(m.total_layers(), 5u);
  m.pre.push_back(t("model.layers.2.w.weight", {4, 4}));  // the block's first layer
  EXPECT_EQ(message(m), "model 'small': duplicate tensor name 'model.layers.2.w.weight' (pre tensor 3 "
                        "'model.layers.2.w.weight' and layer 2)");
  m.pre.pop_back();
  m.pre.push_back(t("model.layers.5.w.weight", {4, 4}));  // past the block: no collision
  EXPECT_EQ(message(m), "(valid)");
  m.num_layers = 0;
  m.layer.tensors.clear();
  EXPECT_EQ(message(m), "model 'small': first_layer is 2 but there is no repeated layer");
  m = small();
  m.first_layer = kMax;
  EXPECT_EQ(message(m), "model 'small': first_layer + num_layers overflows 64 bits");
}

TEST(Spec, ExpertPrefixGroupsExpertsOfOneWeight) {
  ModelSpec m = small();
  m.layer.expert_prefix = "moe.";
  EXPECT_EQ(message(m), "model 'small': expert prefix 'moe.' matches no layer tensor");
  for (int e = 0; e < 3; ++e) {
    m.layer.tensors.push_back(t("moe." + std::to_string(e) + ".up.weight", {8, 4}));
    m.layer.tensors.push_back(t("moe." + std::to_string(e) + ".down.weight", {4, 8}, TensorRole::output_weight));
  }
  EXPECT_EQ(message(m), "(valid)");
  EXPECT_EQ(num_experts(m.layer), 3u);
  const auto e = split_expert_name(m.layer, "moe.2.down.weight");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->layer, 2u);
  EXPECT_EQ(e->relative, "down.weight");
  EXPECT_FALSE(split_expert_name(m.layer, "w.weight").has_value());
  EXPECT_FALSE(split_expert_name(LayerSpec{}, "moe.2.down.weight").has_value());

  const StackedLayout fused = stacked_layout(m, ExpertLayout::stacked);
  ASSERT_EQ(fused.buffers.size(), 4u);  // w, norm, moe.up, moe.down
  EXPECT_EQ(fused.buffers[2].name, "model.layers.moe.up.weight");
  EXPECT_TRUE(fused.buffers[2].fused);
  EXPECT_EQ(fused.buffers[2].experts, 3u);
  EXPECT_EQ(fused.buffers[2].first, 2u);
  EXPECT_EQ(fused.shape(m, 2, {8, 4}), (Shape{3, 3, 8, 4}));
  EXPECT_EQ(fused.shape(m, 0, {4, 4}), (Shape{3, 4, 4}));
  EXPECT_EQ(fused.buffer[6], 2u);  // moe.2.up.weight
  EXPECT_EQ(fused.expert[6], 2u);
  EXPECT_EQ(fused.slice(6, 1), 1u * 3u + 2u);
  EXPECT_EQ(fused.slice(1, 2), 2u);
  const StackedLayout per = stacked_layout(m, ExpertLayout::per_expert);
  EXPECT_EQ(per.buffers.size(), m.layer.tensors.size());
  EXPECT_EQ(per.buffers[6].name, "model.layers.moe.2.up.weight");
  EXPECT_EQ(per.shape(m, 6, {8, 4}), (Shape{3, 8, 4}));

  ModelSpec bad = m;
  bad.layer.tensors[6].shape = {9, 4};
  EXPECT_EQ(message(bad), "model 'small': expert tensor 'moe.2.up.weight' differs from 'moe.0.up.weight' in shape, role "
                          "or transposability (experts of one weight must match)");
  bad = m;
  bad.layer.tensors.pop_back();  // moe.2.down.weight
  EXPECT_EQ(message(bad), "model 'small': expert weight 'moe.*.down.weight' has 2 of 3 experts (every expert weight needs "
                          "experts 0..2)");
  bad = m;
  std::swap(bad.layer.tensors[2], bad.layer.tensors[4]);  // moe.1.up before moe.0.up
  EXPECT_EQ(message(bad), "model 'small': expert tensor 'moe.1.up.weight' is listed out of order (expected expert 0 of "
                          "'up.weight')");
}
