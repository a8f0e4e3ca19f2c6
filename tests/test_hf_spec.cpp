// Hugging Face config.json -> spec (init/hf_spec.hpp): the real configs of tests/hf_configs/ plan to
// transformers' parameter counts, each family's empty config to its config class's defaults, the
// tiny configs to the tiny presets, and every bad field is one line naming it. The counts are
// transformers 5.23's num_parameters() on the meta device; tests/test_hf_load.cpp checks them live
// where transformers is installed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec_json.hpp>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace layerinit;
namespace fs = std::filesystem;
using layerinit::testing::slurp;
using layerinit::testing::TempDir;

namespace {

const fs::path kConfigs = fs::path(LAYERINIT_SOURCE_DIR) / "tests" / "hf_configs";

struct Count {
  std::uint64_t parameters, buffers;
};

// The message of the spec_error a config throws.
std::string refusal(const std::string& config) {
  try {
    spec_from_hf_config(config);
  } catch (const spec_error& e) {
    return e.what();
  }
  return "(accepted)";
}

const TensorSpec* find(const std::vector<TensorSpec>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

// Every config of tests/hf_configs/: transformers' num_parameters() and the elements of the buffers
// in its state_dict (DeepSeek-V3's and GLM-4.5's router correction biases).
TEST(HfSpec, RealConfigsHaveTransformersParameterCounts) {
  const std::map<std::string, Count> expected = {
      {"deepseek-v3", {671'026'404'352ULL, 58 * 256}},
      {"gemma-3-12b", {11'766'034'176ULL, 0}},
      {"glm-4.5-air", {106'852'245'504ULL, 45 * 128}},
      {"gpt-oss-20b", {20'914'757'184ULL, 0}},
      {"kimi-k2", {1'026'408'209'408ULL, 60 * 384}},
      {"llama-3.1-8b", {8'030'261'248ULL, 0}},
      {"mixtral-8x7b", {46'702'792'704ULL, 0}},
      {"olmo-2-7b", {7'298'617'344ULL, 0}},
      {"phi-4", {14'659'507'200ULL, 0}},
      {"qwen3-30b-a3b", {30'532'122'624ULL, 0}},
      {"qwen3-8b", {8'190'735'360ULL, 0}},
      {"smollm3-3b", {3'075'098'624ULL, 0}},
  };
  std::set<std::string> seen;
  for (const auto& e : fs::directory_iterator(kConfigs)) {
    if (e.path().extension() != ".json") continue;
    const std::string name = e.path().stem().string();
    SCOPED_TRACE(name);
    seen.insert(name);
    const auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << "no expected count for " << e.path();
    const ModelSpec s = load_hf_config(e.path().string());
    EXPECT_EQ(s.name, name);
    EXPECT_EQ(s.parameter_count(), it->second.parameters);
    EXPECT_EQ(s.buffer_count(), it->second.buffers);
    EXPECT_EQ(s.hf_config, slurp(e.path()));  // byte for byte
  }
  EXPECT_EQ(seen.size(), expected.size());
}

// The families listed in `types`, joined by ", ".
std::string joined(const std::vector<std::string>& types) {
  std::string out;
  for (const auto& t : types) out += (out.empty() ? "" : ", ") + t;
  return out;
}

// {"model_type": T} is transformers' T config with every default: the same model. A family not listed
// here (init/families/<type>.cpp) checks its defaults in its own test, tests/test_<type>.cpp.
TEST(HfSpec, MissingFieldsTakeTheConfigClassDefaults) {
  const std::map<std::string, Count> expected = {
      {"deepseek_v3", {671'026'404'352ULL, 14848}}, {"gemma2", {2'614'341'888ULL, 0}},
      {"gemma3_text", {2'628'658'432ULL, 0}},           {"glm4_moe", {103'481'200'640ULL, 5760}}, {"gpt2", {124'439'808ULL, 0}},
      {"gpt_oss", {116'829'156'672ULL, 0}},           {"kimi_k2", {671'026'404'352ULL, 14848}},
      {"llama", {6'738'415'616ULL, 0}},             {"mistral", {7'241'732'096ULL, 0}}, {"mixtral", {46'702'792'704ULL, 0}},
      {"olmo2", {6'888'624'128ULL, 0}},               {"phi3", {3'821'079'552ULL, 0}},
      {"qwen2", {12'049'846'272ULL, 0}},           {"qwen3", {12'049'461'248ULL, 0}},
      {"qwen3_moe", {15'350'731'776ULL, 0}},       {"smollm3", {3'075'098'624ULL, 0}},
  };
  for (const auto& type : hf_model_types()) {
    SCOPED_TRACE(type);
    const auto it = expected.find(type);
    if (it == expected.end()) {
      EXPECT_TRUE(fs::exists(fs::path(LAYERINIT_SOURCE_DIR) / "init" / "families" / (type + ".cpp")));
      EXPECT_TRUE(fs::exists(fs::path(LAYERINIT_SOURCE_DIR) / "tests" / ("test_" + type + ".cpp")));
      continue;
    }
    const ModelSpec s = spec_from_hf_config(R"({"model_type": ")" + type + R"("})");
    EXPECT_EQ(s.family, type);
    EXPECT_EQ(s.name, type);  // no _name_or_path
    EXPECT_EQ(s.parameter_count(), it->second.parameters);
    EXPECT_EQ(s.buffer_count(), it->second.buffers);
  }
}

// Every family has a tiny config in tests/hf_configs/tiny/, which the tests emit, load and compare;
// Kimi K2 has DeepSeek-V3's tensors (transformers loads its model_type only with its remote code).
TEST(HfSpec, EveryFamilyHasATinyConfig) {
  for (const auto& type : hf_model_types()) {
    if (type == "kimi_k2") continue;
    const ModelSpec s = load_hf_config((kConfigs / "tiny" / (type + ".json")).string());
    EXPECT_EQ(s.family, type);
    EXPECT_LT(s.element_count(), 1'000'000u) << type;
  }
  const ModelSpec k = spec_from_hf_config(R"({"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]})");
  ModelSpec d = spec_from_hf_config(R"({"model_type": "deepseek_v3"})");
  d.name = k.name;
  d.family = k.family;
  d.hf_config = k.hf_config;
  EXPECT_EQ(k, d);
}

// The tiny configs of today's families describe the tiny presets: the same tensors and numbers
// (deepseek-v3-tiny is its config, byte for byte).
TEST(HfSpec, TinyConfigsAreTheTinyPresets) {
  for (const auto& [file, preset] : std::map<std::string, std::string>{{"llama", "llama-tiny"},
                                                                        {"gpt2", "gpt2-tiny"},
                                                                        {"mixtral", "mixtral-tiny"},
                                                                        {"qwen2", "qwen2.5-tiny"},
                                                                        {"gemma2", "gemma-2-tiny"},
                                                                        {"deepseek_v3", "deepseek-v3-tiny"}}) {
    SCOPED_TRACE(file);
    ModelSpec s = load_hf_config((kConfigs / "tiny" / (file + ".json")).string());
    const ModelSpec p = make_preset(preset);
    EXPECT_EQ(s.name, file);
    if (file == "deepseek_v3") EXPECT_EQ(s.hf_config, p.hf_config);
    s.name = p.name;
    s.hf_config = p.hf_config;
    // The presets set no pad_token_id; Gemma 2's tiny config says 0 (Gemma2Config's default), whose row
    // transformers zeroes: the config's spec has that region, the preset not.
    if (file == "gemma2") {
      EXPECT_EQ(s.pre[0].regions, (std::vector<FillRegion>{{{0, 0}, {1, 64}, FillSpec::constant(0)}}));
      s.pre[0].regions.clear();
    }
    EXPECT_EQ(s, p);
  }
}

namespace {

// The row of the token embedding a spec zeroes (its one region, checked to be a whole row of zeros), or
// nothing.
std::optional<std::uint64_t> pad_row(const ModelSpec& m) {
  for (const TensorSpec& t : m.pre) {
    if (t.role != TensorRole::embedding) {
      EXPECT_TRUE(t.regions.empty()) << t.name;
      continue;
    }
    if (t.regions.empty()) return std::nullopt;
    EXPECT_EQ(t.regions.size(), 1u);
    const FillRegion& r = t.regions[0];
    EXPECT_EQ(r.shape, (Shape{1, t.shape[1]}));
    EXPECT_EQ(r.offset[1], 0u);
    EXPECT_EQ(r.fill, FillSpec::constant(0));
    return r.offset[0];
  }
  return std::nullopt;
}

// A tiny config with `pad_token_id` set to `value` (JSON text; empty: left as the file has it).
std::string tiny_with_pad(const std::string& family, const std::string& value) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(slurp(kConfigs / "tiny" / (family + ".json")));
  if (!value.empty()) j["pad_token_id"] = nlohmann::ordered_json::parse(value);
  return j.dump();
}

}  // namespace

// transformers' _init_weights zeroes the token embedding's padding_idx row (config.pad_token_id) after
// drawing it: the families that make embed_tokens with a padding_idx (all but GPT-2) have that row as
// a region of zeros, at the config's pad_token_id or its config class's default (transformers 5.24:
// Gemma 2 and 3: 0, OLMo 2: 1, Phi-3: 32000, SmolLM3: 128004; the rest None). Ground truth: each
// family built by transformers on the CPU from its tiny config (python/tests/test_hf.py compares the
// rows live). A negative id counts from the end, as nn.Embedding takes it; one outside
// [-vocab, vocab), which nn.Embedding refuses, or not an integer or null (@strict refuses it), is
// refused.
TEST(HfSpec, ThePaddingRowIsZeroWhereTransformersZeroesIt) {
  const std::map<std::string, std::optional<std::uint64_t>> tiny = {
      {"deepseek_v3", std::nullopt}, {"gemma2", 0},         {"gemma3_text", 0},       {"glm4_moe", 0},
      {"gpt2", std::nullopt},        {"gpt_oss", 0},        {"llama", std::nullopt},  {"mistral", std::nullopt},
      {"mixtral", std::nullopt},     {"olmo2", 1},          {"phi3", 0},              {"qwen2", std::nullopt},
      {"qwen3", std::nullopt},       {"qwen3_moe", std::nullopt}, {"smollm3", 0}};
  for (const auto& [family, row] : tiny) {
    SCOPED_TRACE(family);
    EXPECT_EQ(pad_row(spec_from_hf_config(tiny_with_pad(family, ""))), row);
    // Any row, the last included; null: none.
    const bool padding_idx = family != "gpt2";
    EXPECT_EQ(pad_row(spec_from_hf_config(tiny_with_pad(family, "5"))), padding_idx ? std::optional<std::uint64_t>(5) : std::nullopt);
    EXPECT_EQ(pad_row(spec_from_hf_config(tiny_with_pad(family, "511"))), padding_idx ? std::optional<std::uint64_t>(511) : std::nullopt);
    EXPECT_EQ(pad_row(spec_from_hf_config(tiny_with_pad(family, "-1"))), padding_idx ? std::optional<std::uint64_t>(511) : std::nullopt);
    EXPECT_EQ(pad_row(spec_from_hf_config(tiny_with_pad(family, "-512"))), padding_idx ? std::optional<std::uint64_t>(0) : std::nullopt);
    EXPECT_EQ(pad_row(spec_from_hf_config(tiny_with_pad(family, "null"))), std::nullopt);
    // Outside the vocabulary: transformers cannot build the model (GPT-2's wte has no padding_idx).
    for (const char* bad : {"512", "-513", "18446744073709551615", "-9223372036854775808"}) {
      if (padding_idx)
        EXPECT_EQ(refusal(tiny_with_pad(family, bad)),
                  "config.json: pad_token_id: " + std::string(bad) + " is not a row of the embedding of vocab_size 512 "
                  "(nn.Embedding's padding_idx must lie in [-vocab_size, vocab_size)): transformers cannot build this model; "
                  "give pad_token_id a row or null");
      else
        EXPECT_EQ(pad_row(spec_from_hf_config(tiny_with_pad(family, bad))), std::nullopt);
    }
    for (const char* bad : {"[5, 6]", "5.0", "\"5\"", "true"})
      EXPECT_EQ(refusal(tiny_with_pad(family, bad)),
                "config.json: pad_token_id: must be an integer or null (transformers' pad_token_id: int | None)");
  }
  // The real configs: their pad_token_id, or the class default (Gemma 3's 0).
  const std::map<std::string, std::optional<std::uint64_t>> real = {
      {"deepseek-v3", std::nullopt}, {"gemma-3-12b", 0},          {"glm-4.5-air", 151329}, {"gpt-oss-20b", 199999},
      {"kimi-k2", std::nullopt},     {"llama-3.1-8b", std::nullopt}, {"mixtral-8x7b", std::nullopt},
      {"olmo-2-7b", 100277},         {"phi-4", 100349},           {"qwen3-30b-a3b", std::nullopt},
      {"qwen3-8b", std::nullopt},    {"smollm3-3b", 128004}};
  for (const auto& [name, row] : real) EXPECT_EQ(pad_row(load_hf_config((kConfigs / (name + ".json")).string())), row) << name;
  // The class defaults, where a config says nothing.
  EXPECT_EQ(pad_row(spec_from_hf_config(R"({"model_type": "phi3"})")), 32000u);
  EXPECT_EQ(pad_row(spec_from_hf_config(R"({"model_type": "smollm3"})")), 128004u);
  EXPECT_EQ(pad_row(spec_from_hf_config(R"({"model_type": "olmo2"})")), 1u);
  EXPECT_EQ(pad_row(spec_from_hf_config(R"({"model_type": "llama"})")), std::nullopt);
  EXPECT_EQ(refusal(R"({"model_type": "phi3", "vocab_size": 100})"),
            "config.json: pad_token_id: 32000 (phi3's default) is not a row of the embedding of vocab_size 100 (nn.Embedding's "
            "padding_idx must lie in [-vocab_size, vocab_size)): transformers cannot build this model; give pad_token_id a row "
            "or null");
  // A tied head is the embedding: its row is zero too (no lm_head tensor of its own).
  const ModelSpec tied = spec_from_hf_config(tiny_with_pad("smollm3", "7"));
  EXPECT_TRUE(tied.hyper.tie_word_embeddings);
  EXPECT_EQ(find(tied.post, "lm_head.weight"), nullptr);
  EXPECT_EQ(pad_row(tied), 7u);
  // The spec JSON keeps it.
  EXPECT_EQ(spec_from_json(spec_to_json(tied)), tied);
}

// A Llama config as transformers 5 writes LlamaConfig(rope_theta=500000): rope_theta only inside
// rope_parameters. Python's mapping read config.rope_theta, found nothing and wrote 10000.
TEST(HfSpec, RopeThetaFromRopeParametersOrTheTopLevel) {
  const std::string base = R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
      "num_hidden_layers": 1, "vocab_size": 32, )";
  EXPECT_DOUBLE_EQ(spec_from_hf_config(base + R"("rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}})")
                       .hyper.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(spec_from_hf_config(base + R"("rope_theta": 250000})").hyper.rope_theta, 250000.0);
  // Both: transformers 5 takes rope_parameters.
  EXPECT_DOUBLE_EQ(spec_from_hf_config(base + R"("rope_theta": 1.0, "rope_parameters": {"rope_theta": 2.0}})")
                       .hyper.rope_theta, 2.0);
  EXPECT_DOUBLE_EQ(spec_from_hf_config(base + R"("rope_scaling": null})").hyper.rope_theta, 10000.0);
  // Llama 3.1's scaling from either place.
  const RopeScaling llama31{8.0, 1.0, 4.0, 8192};
  EXPECT_EQ(load_hf_config((kConfigs / "llama-3.1-8b.json").string()).hyper.rope_scaling, llama31);
  EXPECT_EQ(spec_from_hf_config(base + R"("max_position_embeddings": 131072, "rope_parameters": {"rope_type": "llama3",
      "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}})").hyper.rope_scaling, llama31);
}

TEST(HfSpec, FieldsTheFamiliesRead) {
  // Aliases (transformers' attribute_map): Mixtral's num_experts is num_local_experts.
  const ModelSpec m = spec_from_hf_config(R"({"model_type": "mixtral", "num_experts": 3, "num_experts_per_tok": 1,
      "hidden_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 8, "num_hidden_layers": 1,
      "vocab_size": 10})");
  EXPECT_EQ(m.hyper.num_experts, 3u);
  EXPECT_EQ(num_experts(m.layer), 3u);
  // null kv heads and head_dim: derived, as the config classes' None.
  const ModelSpec l = spec_from_hf_config(R"({"model_type": "mistral", "num_key_value_heads": null, "head_dim": null,
      "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 8, "num_hidden_layers": 1, "vocab_size": 10})");
  EXPECT_EQ(l.hyper.num_kv_heads, 2u);
  EXPECT_EQ(l.hyper.head_dim, 8u);
  // Heads that do not divide the width: transformers' hidden_size // heads, rounded down, where the
  // config class allows it (MistralConfig has no validate_architecture; LlamaConfig's refuses it).
  const ModelSpec r = spec_from_hf_config(R"({"model_type": "mistral", "hidden_size": 10, "num_key_value_heads": 4, "num_attention_heads": 4,
      "intermediate_size": 8, "num_hidden_layers": 1, "vocab_size": 10})");
  EXPECT_EQ(find(r.layer.tensors, "self_attn.q_proj.weight")->shape, (Shape{8, 10}));
  // Llama's attention_bias: q, k, v and o; mlp_bias: gate, up and down.
  const ModelSpec b = spec_from_hf_config(R"({"model_type": "llama", "attention_bias": true, "mlp_bias": true,
      "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 8, "num_hidden_layers": 1, "vocab_size": 10})");
  for (const char* t : {"self_attn.q_proj.bias", "self_attn.o_proj.bias", "mlp.gate_proj.bias", "mlp.down_proj.bias"})
    EXPECT_NE(find(b.layer.tensors, t), nullptr) << t;
  EXPECT_EQ(find(b.layer.tensors, "mlp.down_proj.bias")->shape, (Shape{16}));
  // DeepSeek's q_lora_rank null: q_proj from the hidden state (DeepSeek-V2-Lite's attention).
  const ModelSpec d = spec_from_hf_config(R"({"model_type": "deepseek_v3", "q_lora_rank": null, "hidden_size": 32,
      "num_attention_heads": 2, "num_key_value_heads": 2, "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
      "v_head_dim": 4, "intermediate_size": 16, "moe_intermediate_size": 8, "n_routed_experts": 2, "num_experts_per_tok": 1,
      "n_group": 1, "topk_group": 1, "num_hidden_layers": 2, "first_k_dense_replace": 1, "vocab_size": 10})");
  EXPECT_EQ(find(d.layer.tensors, "self_attn.q_proj.weight")->shape, (Shape{16, 32}));
  EXPECT_EQ(find(d.layer.tensors, "self_attn.q_a_proj.weight"), nullptr);
  // The router correction bias: a buffer, zero.
  const TensorSpec* c = find(d.layer.tensors, "mlp.gate.e_score_correction_bias");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->buffer);
  EXPECT_EQ(c->init, FillSpec::constant(0.0));
  EXPECT_EQ(d.buffer_count(), 2u);
  // A name: given, else _name_or_path, else the model_type.
  EXPECT_EQ(spec_from_hf_config(R"({"model_type": "gpt2", "_name_or_path": "openai-community/gpt2"})").name,
            "openai-community/gpt2");
  EXPECT_EQ(spec_from_hf_config(R"({"model_type": "gpt2"})", "mine").name, "mine");
}

TEST(HfSpec, EveryProblemIsOneLineNamingTheField) {
  const std::string tiny =
      R"("hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 8, "num_hidden_layers": 1, "vocab_size": 10)";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"model_type": "bert"})",
       "config.json: model_type: no layerinit spec for Hugging Face model_type 'bert' (supported: " +
           joined(hf_model_types()) + ")"},
      {R"({"vocab_size": 10})", "config.json: top level: missing key 'model_type'"},
      {R"([1, 2])", "config.json: top level: must be an object"},
      {R"({"model_type": "llama", )" + tiny + R"(, "hidden_size": 8})", "config.json: hidden_size: duplicate key"},
      {"{\"model_type\": \"llama\",\n \"vocab_size\": }", "config.json: malformed JSON at line 2, column 16: syntax error while "
                                                          "parsing value - unexpected '}'; expected '[', '{', or a literal"},
      {R"({"model_type": "llama", "vocab_size": 4096.0})", "config.json: vocab_size: must be a positive integer"},
      {R"({"model_type": "llama", "num_attention_heads": -4})", "config.json: num_attention_heads: must be a positive integer"},
      {R"({"model_type": "llama", "num_hidden_layers": 0})", "config.json: num_hidden_layers: must be a positive integer"},
      {R"({"model_type": "llama", "mlp_bias": "no"})", "config.json: mlp_bias: must be true or false"},
      {R"({"model_type": "llama", "rms_norm_eps": -1})", "config.json: rms_norm_eps: must not be negative"},
      {R"({"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 3})",
       "config.json: num_key_value_heads: 3 does not divide num_heads 4"},
      {R"({"model_type": "gpt2", "n_embd": 10, "n_head": 4})", "config.json: n_head: 4 does not divide n_embd 10"},
      {R"({"model_type": "mixtral", "num_experts": 4, "num_local_experts": 8})",
       "config.json: num_local_experts: given twice, as num_local_experts and as its alias num_experts, with different values"},
      {R"({"model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3})",
       "config.json: num_experts_per_tok: 3 exceeds num_experts 2"},
      {R"({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]})",
       "config.json: architectures: [\"LlamaForSequenceClassification\"] does not name LlamaForCausalLM, the model layerinit "
       "makes for llama"},
      {R"({"model_type": "gpt2", "tie_word_embeddings": false})",
       "config.json: tie_word_embeddings: false is not supported for gpt2 (layerinit's GPT-2 ties lm_head to the embedding)"},
      {R"({"model_type": "gpt2", "add_cross_attention": true})",
       "config.json: add_cross_attention: true is not supported (a decoder with cross-attention has tensors layerinit does "
       "not make)"},
      {R"({"model_type": "deepseek_v3", "num_hidden_layers": 3, "first_k_dense_replace": 3})",
       "config.json: first_k_dense_replace: must leave at least one MoE layer"},
      {R"({"model_type": "llama", "rope_parameters": 5})", "config.json: rope_parameters: must be an object"},
      {R"({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})",
       "config.json: rope_scaling: missing key 'low_freq_factor'"},
      // Products past 64 bits: refused, not wrapped into small shapes.
      {R"({"model_type": "mistral", "num_attention_heads": 4294967296, "num_key_value_heads": 1, "head_dim": 4294967296})",
       "config.json: a layer dimension overflows 64 bits"},
      {R"({"model_type": "llama", "vocab_size": 18446744073709551615, "hidden_size": 4096})",
       "config.json: model 'llama': pre tensor 0 'model.embed_tokens.weight': shape [18446744073709551615, 4096]: element "
       "count overflows 64 bits"},
  };
  for (const auto& [config, message] : cases) EXPECT_EQ(refusal(config), message) << config;
  // Gemma 3's image-text config names the part to give.
  EXPECT_NE(refusal(R"({"model_type": "gemma3", "text_config": {}})").find("give its text_config (model_type gemma3_text)"),
            std::string::npos);
}

TEST(HfSpec, LoadsAFileOrADirectory) {
  TempDir dir;
  fs::create_directories(dir / "Tiny-Llama");
  fs::copy_file(kConfigs / "tiny" / "llama.json", dir / "Tiny-Llama" / "config.json");
  const ModelSpec a = load_hf_config((dir / "Tiny-Llama").string());
  const ModelSpec b = load_hf_config((dir / "Tiny-Llama" / "config.json").string());
  EXPECT_EQ(a.name, "Tiny-Llama");  // named after the model's directory
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hf_config, slurp(kConfigs / "tiny" / "llama.json"));
  try {
    load_hf_config((dir / "nothing").string());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "Hugging Face config '" + (dir / "nothing").string() + "' cannot be read: No such file or directory");
  }
  try {
    load_hf_config(dir.path().string());  // a directory without config.json
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "Hugging Face config '" + (dir / "config.json").string() + "' cannot be read: No such file or directory");
  }
}

// A FIFO waited for a writer forever (as the file, or as a directory's config.json), and /dev/zero was
// read to the 16 MiB cap: only a regular file is read. Each call runs in a child that SIGALRM ends,
// so a regression fails instead of hanging the test.
TEST(HfSpec, ReadsRegularFilesOnly) {
  TempDir dir;
  fs::create_directories(dir / "model");
  ASSERT_EQ(::mkfifo((dir / "config.fifo").c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo((dir / "model" / "config.json").c_str(), 0644), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {(dir / "config.fifo").string(), (dir / "config.fifo").string()},
      {(dir / "model").string(), (dir / "model" / "config.json").string()},
      {"/dev/zero", "/dev/zero"},
  };
  for (const auto& [path, file] : cases) {
    SCOPED_TRACE(path);
    const auto r = layerinit::testing::in_child_with_message([&](std::string& msg) {
      ::alarm(10);
      try {
        load_hf_config(path);
      } catch (const std::invalid_argument& e) {
        msg = e.what();
        return 0;
      }
      return 1;
    });
    ASSERT_TRUE(WIFEXITED(r.status)) << "ended by signal " << WTERMSIG(r.status) << " (SIGALRM 14: it hung)";
    EXPECT_EQ(WEXITSTATUS(r.status), 0);
    EXPECT_EQ(r.message, "Hugging Face config '" + file + "' is not a regular file");
  }
}

// emit writes the config.json a spec was read from as it is; one describing quantized weights is
// refused (transformers would load layerinit's bf16 weights as FP8 or MXFP4 blocks).
TEST(HfSpec, ConfigJsonIsTheUsersFile) {
  const ModelSpec s = load_hf_config((kConfigs / "tiny" / "mistral.json").string());
  EXPECT_TRUE(has_config_json(s));
  EXPECT_EQ(config_json(s, DType::f16), slurp(kConfigs / "tiny" / "mistral.json"));
  const ModelSpec q = load_hf_config((kConfigs / "deepseek-v3.json").string());
  try {
    config_json(q, DType::bf16);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "config.json: quantization_config (fp8) describes quantized weights, and layerinit writes "
                                     "fp32/fp16/bf16 ones that transformers would load as quantized: remove "
                                     "quantization_config from the config");
  }
  // The JSON spec keeps it, so a checkpoint's model_spec rebuilds the same config.json.
  EXPECT_EQ(spec_from_json(spec_to_json(s)), s);
}

// What each new family adds to Llama's layer, in its tiny config.
TEST(HfSpec, FamilyTensors) {
  auto tiny = [](const std::string& family) { return load_hf_config((kConfigs / "tiny" / (family + ".json")).string()); };
  auto shape = [](const ModelSpec& m, const std::string& name) {
    const TensorSpec* t = find(m.layer.tensors, name);
    return t ? t->shape : Shape{};
  };
  // Qwen3: q/k norms of head_dim (32, free of hidden 64 / 4 heads), norms of one.
  const ModelSpec q = tiny("qwen3");
  EXPECT_EQ(shape(q, "self_attn.q_norm.weight"), (Shape{32}));
  EXPECT_EQ(shape(q, "self_attn.k_norm.weight"), (Shape{32}));
  EXPECT_EQ(find(q.layer.tensors, "self_attn.q_norm.weight")->role, TensorRole::norm_weight);
  EXPECT_EQ(shape(q, "self_attn.o_proj.weight"), (Shape{64, 128}));

  // Qwen3-MoE: layer 0 dense (mlp_only_layers), then MoE layers of 4 experts, the router after them.
  const ModelSpec m = tiny("qwen3_moe");
  EXPECT_EQ(m.first_layer, 1u);
  EXPECT_EQ(m.num_layers, 2u);
  EXPECT_EQ(m.layer.expert_prefix, "mlp.experts.");
  EXPECT_EQ(num_experts(m.layer), 4u);
  EXPECT_EQ(shape(m, "mlp.experts.3.down_proj.weight"), (Shape{64, 32}));
  EXPECT_EQ(shape(m, "mlp.gate.weight"), (Shape{4, 64}));
  EXPECT_EQ(find(m.layer.tensors, "mlp.gate.weight")->role, TensorRole::router_weight);
  EXPECT_NE(find(m.pre, "model.layers.0.mlp.up_proj.weight"), nullptr);
  EXPECT_EQ(find(m.pre, "model.layers.0.mlp.up_proj.weight")->shape, (Shape{128, 64}));
  // Dense layers only before the MoE layers: the repeated block is one kind of layer.
  EXPECT_EQ(refusal(R"({"model_type": "qwen3_moe", "decoder_sparse_step": 2})"),
            "config.json: decoder_sparse_step: dense layers between MoE layers are not supported (layerinit repeats one "
            "kind of layer; dense layers may only come first)");
  EXPECT_EQ(refusal(R"({"model_type": "qwen3_moe", "mlp_only_layers": [0, 5]})"),
            "config.json: mlp_only_layers: dense layers between MoE layers are not supported (layerinit repeats one kind "
            "of layer; dense layers may only come first)");
  // Gemma 3: Gemma 2's four norms and q/k norms of head_dim, all stored as offsets from one (zeros).
  const ModelSpec g = tiny("gemma3_text");
  EXPECT_EQ(shape(g, "self_attn.q_norm.weight"), (Shape{32}));
  EXPECT_EQ(find(g.layer.tensors, "self_attn.k_norm.weight")->init, FillSpec::constant(0.0));
  EXPECT_EQ(find(g.layer.tensors, "post_feedforward_layernorm.weight")->init, FillSpec::constant(0.0));
  EXPECT_TRUE(g.hyper.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(g.hyper.rope_theta, 1e6);  // rope_parameters per layer type: the full-attention layers'

  // OLMo 2: no input norm; q/k norms over all heads ([heads * head_dim], [kv_heads * head_dim]).
  const ModelSpec o = tiny("olmo2");
  EXPECT_EQ(find(o.layer.tensors, "input_layernorm.weight"), nullptr);
  EXPECT_NE(find(o.layer.tensors, "post_feedforward_layernorm.weight"), nullptr);
  EXPECT_EQ(shape(o, "self_attn.q_norm.weight"), (Shape{64}));
  EXPECT_EQ(shape(o, "self_attn.k_norm.weight"), (Shape{32}));

  // Phi-3: o_proj, then the fused qkv_proj [(4 + 2 * 2) * 16, 64]; gate and up in one [2 * 128, 64].
  const ModelSpec f = tiny("phi3");
  EXPECT_EQ(f.layer.tensors[0].name, "self_attn.o_proj.weight");
  EXPECT_EQ(shape(f, "self_attn.qkv_proj.weight"), (Shape{128, 64}));
  EXPECT_EQ(shape(f, "mlp.gate_up_proj.weight"), (Shape{256, 64}));
  EXPECT_EQ(find(f.layer.tensors, "mlp.gate_proj.weight"), nullptr);

  // SmolLM3: Llama's layer (NoPE layers change no tensor); attention_bias and mlp_bias, tied.
  const ModelSpec sm = tiny("smollm3");
  EXPECT_EQ(shape(sm, "self_attn.o_proj.bias"), (Shape{64}));
  EXPECT_EQ(shape(sm, "mlp.up_proj.bias"), (Shape{128}));
  EXPECT_EQ(find(sm.post, "lm_head.weight"), nullptr);

  // GLM-4.5: a dense layer, then MoE layers with DeepSeek-V3's router (a correction-bias buffer) and
  // shared experts; q/k/v biases but none on o_proj; q/k norms with use_qk_norm.
  const ModelSpec z = tiny("glm4_moe");
  EXPECT_EQ(z.first_layer, 1u);
  EXPECT_EQ(shape(z, "self_attn.q_proj.bias"), (Shape{64}));
  EXPECT_EQ(find(z.layer.tensors, "self_attn.o_proj.bias"), nullptr);
  EXPECT_EQ(shape(z, "self_attn.q_norm.weight"), (Shape{16}));
  EXPECT_TRUE(find(z.layer.tensors, "mlp.gate.e_score_correction_bias")->buffer);
  EXPECT_EQ(shape(z, "mlp.shared_experts.down_proj.weight"), (Shape{64, 32}));
  EXPECT_EQ(z.buffer_count(), 2u * 4u);
  // n_shared_experts 0: Glm4MoeMoE and DeepseekV3MoE still make mlp.shared_experts, of width
  // moe_intermediate_size * 0: tensors of zero elements, which a checkpoint must hold for it to load
  // without missing keys. Qwen3-MoE has no shared experts at all.
  for (const char* family : {"glm4_moe", "deepseek_v3"}) {
    std::string config = slurp(kConfigs / "tiny" / (std::string(family) + ".json"));
    const std::string one = "\"n_shared_experts\": 1";
    ASSERT_NE(config.find(one), std::string::npos) << family;
    config.replace(config.find(one), one.size(), "\"n_shared_experts\": 0");
    const ModelSpec e = spec_from_hf_config(config);  // hidden 64, moe_intermediate_size 32
    EXPECT_EQ(shape(e, "mlp.shared_experts.gate_proj.weight"), (Shape{0, 64})) << family;
    EXPECT_EQ(shape(e, "mlp.shared_experts.up_proj.weight"), (Shape{0, 64})) << family;
    EXPECT_EQ(shape(e, "mlp.shared_experts.down_proj.weight"), (Shape{64, 0})) << family;
    EXPECT_EQ(shape(e, "mlp.experts.0.down_proj.weight"), (Shape{64, 32})) << family;
  }
  EXPECT_EQ(find(m.layer.tensors, "mlp.shared_experts.down_proj.weight"), nullptr);

  // gpt-oss: sinks, q/k/v/o biases, a router with a bias, and fused expert tensors [E, in, out] with
  // biases, as its checkpoints hold them (not per expert: no expert prefix).
  const ModelSpec o2 = tiny("gpt_oss");
  EXPECT_EQ(o2.layer.tensors[0].name, "self_attn.sinks");
  EXPECT_EQ(shape(o2, "self_attn.sinks"), (Shape{4}));
  EXPECT_EQ(shape(o2, "self_attn.o_proj.bias"), (Shape{64}));
  EXPECT_EQ(shape(o2, "mlp.router.bias"), (Shape{4}));
  EXPECT_EQ(shape(o2, "mlp.experts.gate_up_proj"), (Shape{4, 64, 64}));
  EXPECT_EQ(shape(o2, "mlp.experts.gate_up_proj_bias"), (Shape{4, 64}));
  EXPECT_EQ(shape(o2, "mlp.experts.down_proj"), (Shape{4, 32, 64}));
  EXPECT_FALSE(find(o2.layer.tensors, "mlp.experts.down_proj")->transposable);
  EXPECT_EQ(o2.layer.expert_prefix, "");
  // gpt-oss-20b's MXFP4 config plans, but emit refuses to write it beside unquantized weights.
  const ModelSpec big = load_hf_config((kConfigs / "gpt-oss-20b.json").string());
  EXPECT_THROW(config_json(big, DType::bf16), std::invalid_argument);

  // No experts at all: a dense model.
  EXPECT_EQ(spec_from_hf_config(R"({"model_type": "qwen3_moe", "num_experts": 0})").layer.expert_prefix, "");
}

// DeepSeek-V3: 671,026,404,352 parameters as transformers counts them, and 58 x 256 router
// correction biases it keeps as buffers (in the state_dict and the checkpoint).
TEST(HfSpec, ParametersAndBuffersApart) {
  const ModelSpec d = make_preset("deepseek-v3");
  EXPECT_EQ(d.parameter_count(), 671'026'404'352ULL);
  EXPECT_EQ(d.buffer_count(), 14'848u);
  EXPECT_EQ(d.element_count(), 671'026'419'200ULL);
  EXPECT_EQ(make_preset("llama-3-8b").buffer_count(), 0u);
}

// A few bytes of config.json must not make 2^40 tensor records: each count that multiplies the
// tensors a spec lists (experts, dense layers) is refused from the counts, naming the field, before
// any tensor is made. gpt-oss keeps its experts in fused [E, ...] tensors: no records per expert.
TEST(HfSpec, CountsThatMultiplyTensorsAreRefusedBeforeTheTensorsAreMade) {
  const std::string small =
      R"("hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 4, "vocab_size": 16, )";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"model_type": "mixtral", )" + small + R"("num_local_experts": 1099511627776})",
       "config.json: num_local_experts: 1099511627776 experts make 3298534883335 tensors in a layer; a spec lists at most 262144"},
      {R"({"model_type": "mixtral", )" + small + R"("num_experts": 4294967296})",
       "config.json: num_experts: 4294967296 experts make 12884901895 tensors in a layer; a spec lists at most 262144"},
      {R"({"model_type": "deepseek_v3", )" + small + R"("n_routed_experts": 4294967296})",
       "config.json: n_routed_experts: 4294967296 experts make 12884901902 tensors in a layer; a spec lists at most 262144"},
      {R"({"model_type": "kimi_k2", )" + small + R"("num_local_experts": 4294967296})",
       "config.json: num_local_experts: 4294967296 experts make 12884901902 tensors in a layer; a spec lists at most 262144"},
      {R"({"model_type": "glm4_moe", )" + small + R"("n_routed_experts": 4294967296})",
       "config.json: n_routed_experts: 4294967296 experts make 12884901899 tensors in a layer; a spec lists at most 262144"},
      {R"({"model_type": "qwen3_moe", )" + small + R"("num_experts": 4294967296})",
       "config.json: num_experts: 4294967296 experts make 12884901897 tensors in a layer; a spec lists at most 262144"},
      {R"({"model_type": "qwen3_moe", )" + small + R"("num_local_experts": 1099511627776})",
       "config.json: num_local_experts: 1099511627776 experts make 3298534883337 tensors in a layer; a spec lists at most 262144"},
      // Dense layers before the MoE layers are listed one by one too.
      {R"({"model_type": "deepseek_v3", )" + small + R"("num_hidden_layers": 9223372036854775807, "first_k_dense_replace": 4611686018427387904})",
       "config.json: first_k_dense_replace: 4611686018427387904 dense layers before the MoE layers of 9223372036854775807 make "
       "2^64 or more tensors; a spec lists at most 262144"},
      {R"({"model_type": "qwen3_moe", )" + small + R"("num_hidden_layers": 4611686018427387904, "decoder_sparse_step": 4611686018427387904})",
       "config.json: decoder_sparse_step: 4611686018427387903 dense layers before the MoE layers of 4611686018427387904 make "
       "2^64 or more tensors; a spec lists at most 262144"},
  };
  for (const auto& [config, message] : cases) EXPECT_EQ(refusal(config), message) << config;
  // The largest count that fits is made: 2 layers' worth of router and experts.
  const ModelSpec m = spec_from_hf_config(R"({"model_type": "mixtral", )" + small + R"("num_local_experts": 87000})");
  EXPECT_EQ(m.layer.tensors.size(), 4u + 1 + 3 * 87000 + 2);
  const ModelSpec g = spec_from_hf_config(R"({"model_type": "gpt_oss", )" + small + R"("head_dim": 4, "num_local_experts": 1099511627776})");
  EXPECT_EQ(g.hyper.num_experts, 1099511627776u);
  EXPECT_EQ(g.layer.tensors.size(), 17u);
}

// What transformers' config classes refuse (transformers 5.24) is refused here too, with exit 2 from
// the CLI, rather than written as a checkpoint transformers cannot load: heads that do not divide
// hidden_size where validate_architecture says so (LlamaConfig, Gemma2Config, Gemma3TextConfig, even
// with a head_dim), head_dim null where the class does not derive it, and layer_types or
// mlp_layer_types of another length than num_hidden_layers (PreTrainedConfig.validate_layer_type).
TEST(HfSpec, WhatTransformersConfigClassesRefuse) {
  const std::string dims = R"("intermediate_size": 8, "num_hidden_layers": 2, "vocab_size": 10)";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"model_type": "llama", "hidden_size": 10, "num_attention_heads": 4, )" + dims + "}",
       "config.json: num_attention_heads: 4 does not divide hidden_size 10 (transformers' LlamaConfig.validate_architecture "
       "refuses it)"},
      {R"({"model_type": "llama", "hidden_size": 10, "num_attention_heads": 4, "head_dim": 8, )" + dims + "}",
       "config.json: num_attention_heads: 4 does not divide hidden_size 10 (transformers' LlamaConfig.validate_architecture "
       "refuses it)"},
      {R"({"model_type": "gemma2", "hidden_size": 10, "num_attention_heads": 4, "num_key_value_heads": 4, )" + dims + "}",
       "config.json: num_attention_heads: 4 does not divide hidden_size 10 (transformers' Gemma2Config.validate_architecture "
       "refuses it)"},
      {R"({"model_type": "gemma3_text", "hidden_size": 10, "num_attention_heads": 4, "num_key_value_heads": 4, )" + dims + "}",
       "config.json: num_attention_heads: 4 does not divide hidden_size 10 (transformers' Gemma3TextConfig.validate_architecture "
       "refuses it)"},
      {R"({"model_type": "gemma2", "head_dim": null, "hidden_size": 16, "num_attention_heads": 4, )" + dims + "}",
       "config.json: head_dim: null is not a head width for gemma2 (transformers derives a null head_dim for llama, mistral "
       "and mixtral only): give the width or leave head_dim out"},
      {R"({"model_type": "qwen2", "head_dim": null, "hidden_size": 16, "num_attention_heads": 4, )" + dims + "}",
       "config.json: head_dim: null is not a head width for qwen2 (transformers derives a null head_dim for llama, mistral "
       "and mixtral only): give the width or leave head_dim out"},
      {R"({"model_type": "llama", "layer_types": ["full_attention"], "hidden_size": 16, "num_attention_heads": 4, )" + dims + "}",
       "config.json: layer_types: has 1 entries for 2 layers (num_hidden_layers); transformers' validate_layer_type wants one "
       "per layer"},
      {R"({"model_type": "gpt2", "n_layer": 3, "mlp_layer_types": ["dense", "dense"]})",
       "config.json: mlp_layer_types: has 2 entries for 3 layers (num_hidden_layers); transformers' validate_layer_type wants "
       "one per layer"},
      {R"({"model_type": "qwen2", "layer_types": "full_attention"})",
       "config.json: layer_types: must be an array of layer types, one per layer"},
      {R"({"model_type": "qwen2", "num_hidden_layers": 1, "layer_types": [1]})", "config.json: layer_types[0]: must be a string"},
  };
  for (const auto& [config, message] : cases) EXPECT_EQ(refusal(config), message) << config;
  // What they accept: head_dim null in Llama's family (hidden // heads) and DeepSeek-V3's (its own),
  // and layer_types of the right length.
  EXPECT_EQ(spec_from_hf_config(R"({"model_type": "llama", "head_dim": null, "hidden_size": 16, "num_attention_heads": 4, )" +
                                dims + "}").hyper.head_dim, 4u);
  EXPECT_NO_THROW(spec_from_hf_config(R"({"model_type": "deepseek_v3", "head_dim": null})"));
  EXPECT_NO_THROW(spec_from_hf_config(R"({"model_type": "qwen2", "layer_types": ["full_attention", "sliding_attention"], )" +
                                      dims + "}"));
}

// torchtitan's model packages, each the family whose checkpoints its state-dict adapter loads: the
// family records say it (a new family names its package in its own file).
TEST(HfSpec, TorchtitanPackagesAreTheFamilyRecords) {
  EXPECT_EQ(torchtitan_packages(), (std::vector<std::string>{"deepseek_v3", "llama3", "qwen3"}));
  const auto llama = torchtitan_family("llama3", false);
  ASSERT_TRUE(llama);
  EXPECT_EQ(llama->model_type, "llama");
  EXPECT_TRUE(llama->rope_interleaved);  // llama3/state_dict_adapter.py's _reverse_permute
  EXPECT_EQ(torchtitan_family("qwen3", false)->model_type, "qwen3");
  EXPECT_EQ(torchtitan_family("qwen3", true)->model_type, "qwen3_moe");
  EXPECT_FALSE(torchtitan_family("qwen3", true)->rope_interleaved);
  EXPECT_EQ(torchtitan_family("deepseek_v3", true)->model_type, "deepseek_v3");
  EXPECT_EQ(torchtitan_family("deepseek_v3", false)->model_type, "deepseek_v3");
  EXPECT_FALSE(torchtitan_family("gpt_oss", true));
  EXPECT_FALSE(torchtitan_family("", false));
}
