// GPT-NeoX's family record (init/families/gpt_neox.cpp): a config.json read into the tensors
// transformers 5.24's GPTNeoXForCausalLM makes (names, shapes and num_parameters() computed once in
// transformers on the meta device), its refusals, the hf recipe as its _init_weights, and the
// config.json written for a spec of the family. python/tests/test_gpt_neox.py loads an emitted one
// with from_pretrained.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec_json.hpp>

using namespace layerinit;
using json = nlohmann::json;

namespace {

// Pythia-like: untied head, biases everywhere.
const std::string kConfig = R"({"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": 512,
  "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
  "max_position_embeddings": 128, "layer_norm_eps": 1e-05, "rotary_pct": 0.25, "rotary_emb_base": 10000,
  "use_parallel_residual": true, "initializer_range": 0.02})";

// kConfig with the fields of `changes` ("\"attention_bias\": false") set.
std::string with(const std::string& changes) {
  json j = json::parse(kConfig);
  j.update(json::parse("{" + changes + "}"));
  return j.dump();
}

// Every tensor's canonical name and shape, in order.
std::vector<std::pair<std::string, Shape>> tensors(const ModelSpec& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& t : m.pre) out.emplace_back(t.name, t.shape);
  for (std::uint64_t i = 0; i < m.num_layers; ++i)
    for (const auto& t : m.layer.tensors) out.emplace_back(m.canonical_name(i, t), t.shape);
  for (const auto& t : m.post) out.emplace_back(t.name, t.shape);
  return out;
}

std::string refusal(const std::string& config) {
  try {
    spec_from_hf_config(config);
  } catch (const spec_error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

// GPTNeoXForCausalLM(config).state_dict() of this config on the meta device, in its order; the head
// under the checkpoints' name embed_out (transformers' lm_head, renamed when it loads one).
TEST(GptNeox, ReadsTheTensorsTransformersMakes) {
  const ModelSpec m = spec_from_hf_config(kConfig);
  EXPECT_EQ(m.family, "gpt_neox");
  EXPECT_EQ(m.name, "gpt_neox");
  std::vector<std::pair<std::string, Shape>> want = {{"gpt_neox.embed_in.weight", {512, 64}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "gpt_neox.layers." + std::to_string(i) + ".";
    const std::vector<std::pair<std::string, Shape>> layer = {
        {p + "input_layernorm.weight", {64}},           {p + "input_layernorm.bias", {64}},
        {p + "post_attention_layernorm.weight", {64}},  {p + "post_attention_layernorm.bias", {64}},
        {p + "attention.query_key_value.weight", {192, 64}}, {p + "attention.query_key_value.bias", {192}},
        {p + "attention.dense.weight", {64, 64}},       {p + "attention.dense.bias", {64}},
        {p + "mlp.dense_h_to_4h.weight", {256, 64}},    {p + "mlp.dense_h_to_4h.bias", {256}},
        {p + "mlp.dense_4h_to_h.weight", {64, 256}},    {p + "mlp.dense_4h_to_h.bias", {64}},
    };
    want.insert(want.end(), layer.begin(), layer.end());
  }
  want.push_back({"gpt_neox.final_layer_norm.weight", {64}});
  want.push_back({"gpt_neox.final_layer_norm.bias", {64}});
  want.push_back({"embed_out.weight", {512, 64}});
  EXPECT_EQ(tensors(m), want);
  EXPECT_EQ(m.parameter_count(), 165'632u);  // transformers' num_parameters()
  EXPECT_EQ(m.buffer_count(), 0u);           // the rotary inv_freq buffers are not persistent
  EXPECT_EQ(m.hyper.head_dim, 16u);
  EXPECT_EQ(m.hyper.norm_eps, 1e-5);
  EXPECT_EQ(m.hyper.rope_theta, 1e4);
}

// attention_bias takes the biases of query_key_value and dense (not the MLP's); a tied head is the
// embedding; the class defaults are GPT-NeoX-20B.
TEST(GptNeox, AttentionBiasAndTyingChangeTheTensors) {
  const ModelSpec no_bias = spec_from_hf_config(with(R"("attention_bias": false)"));
  EXPECT_EQ(no_bias.parameter_count(), 165'120u);
  for (const auto& t : no_bias.layer.tensors) EXPECT_NE(t.name.rfind("attention.", 0) == 0 && t.name.ends_with(".bias"), true) << t.name;
  const ModelSpec tied = spec_from_hf_config(with(R"("tie_word_embeddings": true)"));
  EXPECT_EQ(tied.parameter_count(), 132'864u);
  EXPECT_EQ(tied.post.size(), 2u);
  EXPECT_EQ(spec_from_hf_config(R"({"model_type": "gpt_neox"})").parameter_count(), 20'554'567'680ULL);
  // No padding_idx: no zero row, whatever pad_token_id says.
  EXPECT_TRUE(spec_from_hf_config(with(R"("pad_token_id": 1)")).pre[0].regions.empty());
}

TEST(GptNeox, RefusesWhatTransformersRefuses) {
  EXPECT_EQ(refusal(with(R"("num_attention_heads": 5)")),
            "config.json: num_attention_heads: 5 does not divide hidden_size 64 (transformers' "
            "GPTNeoXConfig.validate_architecture refuses it)");
  EXPECT_EQ(refusal(with(R"("rotary_pct": 2)")),
            "config.json: rotary_pct: must be at most 1 (the share of a head's width that is rotated)");
  EXPECT_EQ(refusal(with(R"("use_parallel_residual": 1)")), "config.json: use_parallel_residual: must be true or false");
  EXPECT_EQ(refusal(R"({"model_type": "gpt_neox", "architectures": ["GPTNeoXForSequenceClassification"]})"),
            "config.json: architectures: [\"GPTNeoXForSequenceClassification\"] does not name GPTNeoXForCausalLM, the model "
            "layerinit makes for gpt_neox");
}

// PreTrainedModel._init_weights: normal(0, initializer_range) for the Linears and the Embedding,
// dense and dense_4h_to_h included; zero biases; LayerNorms 1 and 0.
TEST(GptNeox, HfRecipeIsItsInitWeights) {
  const ModelSpec m = spec_from_hf_config(with(R"("initializer_range": 0.01)"));
  const Recipe hf = make_recipe("hf");
  auto rule = [&](const TensorSpec& t, std::optional<std::uint64_t> layer) { return hf.rule_for(tensor_context(m, t, layer)); };
  EXPECT_EQ(rule(m.pre[0], std::nullopt), FillSpec::normal(0.0, 0.01));
  for (const auto& t : m.layer.tensors) {
    SCOPED_TRACE(t.name);
    if (t.name.ends_with("layernorm.weight")) EXPECT_EQ(rule(t, 0), FillSpec::constant(1.0));
    else if (t.name.ends_with(".bias")) EXPECT_EQ(rule(t, 0), FillSpec::constant(0.0));
    else EXPECT_EQ(rule(t, 0), FillSpec::normal(0.0, 0.01));
  }
  EXPECT_EQ(rule(m.post[2], std::nullopt), FillSpec::normal(0.0, 0.01));
}

// The user's config.json is written as it is; a spec of the family made without one (here the read
// spec without its text) gets GPTNeoXConfig's keys, which read back to the same spec.
TEST(GptNeox, WritesAConfigThatReadsBack) {
  const ModelSpec m = spec_from_hf_config(kConfig);
  EXPECT_TRUE(has_config_json(m));
  EXPECT_EQ(config_json(m, DType::bf16), kConfig);
  ModelSpec bare = m;
  bare.hf_config.clear();
  EXPECT_TRUE(has_config_json(bare));
  const std::string text = config_json(bare, DType::f32);
  const json j = json::parse(text);
  EXPECT_EQ(j["architectures"], json({"GPTNeoXForCausalLM"}));
  EXPECT_EQ(j["model_type"], "gpt_neox");
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["attention_bias"], true);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["torch_dtype"], "float32");
  ModelSpec back = spec_from_hf_config(text);
  back.name = bare.name;
  back.hf_config.clear();
  EXPECT_EQ(back, bare);
}

// transformers 5 names the head lm_head where checkpoints hold embed_out (conversion_mapping.py renames
// it on load): the record says so for the framework adapters; a family with no renames says nothing.
TEST(GptNeox, ItsModuleNamesTheHeadLmHead) {
  using Names = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(hf_module_names("gpt_neox"), (Names{{"lm_head.weight", "embed_out.weight"}}));
  EXPECT_EQ(hf_module_names("llama"), Names{});
  EXPECT_EQ(hf_module_names("no-such-family"), Names{});
}
