// What the family records in init/families/ share (family_record.hpp): the decoder every family but
// GPT-2 and GPT-NeoX is read into, the MoE readers, the readers of more than one family (Llama's for
// SmolLM3, DeepSeek-V3's for Kimi K2, Gemma's for Gemma 2 and 3) and the decoder config.json writer.
#include "family_record.hpp"

#include <layerinit/core/errors.hpp>
#include <layerinit/init/families.hpp>

namespace layerinit::hf {

namespace {

const JsonReader r("config.json");

// The config.json key of a Hyper field, for messages.
std::string config_key(const std::string& field) {
  if (field == "num_heads") return "num_attention_heads";
  if (field == "num_kv_heads") return "num_key_value_heads";
  if (field == "experts_per_token") return "num_experts_per_tok";
  if (field == "norm_eps") return "rms_norm_eps";
  return field;
}

void check_hyper(const Hyper& h) {
  if (const auto p = hyper_problem(h))
    r.fail(config_key(p->field), p->message);
}

}  // namespace

// ---- reading ----

void read_experts(const Config& c, Hyper& h, const char* key, std::uint64_t E, std::uint64_t k) {
  h.num_experts = c.count(key, E);
  h.experts_per_token = c.count("num_experts_per_tok", k);
}

void deepseek_moe(const Config& c, const Defaults& d, DecoderLayout& l, std::uint64_t width, std::uint64_t dense) {
  l.moe = MoeKind::routed;
  l.moe_intermediate_size = c.count("moe_intermediate_size", width);
  l.shared_experts = c.count0("n_shared_experts", 1);
  // DeepseekV3MoE and Glm4MoeMoE make shared_experts of width moe_intermediate_size * n_shared_experts
  // whatever it is: at 0, gate_proj, up_proj and down_proj of zero elements, made here too.
  l.shared_experts_always = true;
  l.correction_bias = true;
  l.dense_layers = c.count0("first_k_dense_replace", dense);
  if (l.dense_layers >= c.layers(d)) r.fail("first_k_dense_replace", "must leave at least one MoE layer");
}

ModelSpec decoder(const Config& c, const Defaults& d, std::string name, Hyper h, const DecoderLayout& l, const char* experts,
                  const char* dense) {
  h.bias = l.qkv_bias;
  check_hyper(h);
  if (const auto p = decoder_size_problem(h, l, c.layers(d)))
    r.fail(c.given(p->field == "num_experts" ? experts : dense), p->message);
  return decoder_spec(std::move(name), c.model_type(), h, l, c.layers(d));
}

ModelSpec read_llama(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.mlp_bias = c.flag("mlp_bias", false);
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

ModelSpec read_gemma(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.pre_feedforward_norm = l.post_feedforward_norm = true;
  l.zero_centered_norms = true;
  if (c.model_type() == "gemma3_text") l.qk_norm = QkNorm::head;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

ModelSpec read_deepseek_v3(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "n_routed_experts", 256, 8);
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  LatentAttention x;
  x.q_lora_rank = c.derived("q_lora_rank", 1536);  // null: no query compression
  x.kv_lora_rank = c.count("kv_lora_rank", 512);
  x.qk_nope_head_dim = c.count("qk_nope_head_dim", 128);
  x.qk_rope_head_dim = c.count("qk_rope_head_dim", 64);
  x.v_head_dim = c.count("v_head_dim", 128);
  l.latent = x;
  deepseek_moe(c, d, l, 2048, 3);
  // A query head's width.
  h.head_dim = checked_add(x.qk_nope_head_dim, x.qk_rope_head_dim, "qk_nope_head_dim + qk_rope_head_dim");
  return decoder(c, d, std::move(name), h, l, "n_routed_experts");
}

// ---- writing: the config.json of a spec made without one (a preset, a JSON spec) ----

using ojson = nlohmann::ordered_json;

void write_sizes(const ModelSpec& spec, ojson& j) {
  const Hyper& h = spec.hyper;
  j["vocab_size"] = h.vocab_size;
  j["hidden_size"] = h.hidden_size;
  j["intermediate_size"] = h.intermediate_size;
  j["num_hidden_layers"] = spec.total_layers();
  j["num_attention_heads"] = h.num_heads;
}

void write_decoder(const ModelSpec& spec, ojson& j, const char* act_key, const char* act) {
  const Hyper& h = spec.hyper;
  write_sizes(spec, j);
  j["num_key_value_heads"] = h.num_kv_heads ? h.num_kv_heads : h.num_heads;
  if (h.head_dim) j["head_dim"] = h.head_dim;
  j[act_key] = act;
  j["max_position_embeddings"] = h.max_position_embeddings;
  j["rms_norm_eps"] = h.norm_eps;
  j["rope_theta"] = h.rope_theta;
  ojson rope{{"rope_theta", h.rope_theta}, {"rope_type", "default"}};
  if (const RopeScaling& rs = h.rope_scaling; rs != RopeScaling{}) {  // Llama 3.1's, as its config.json writes it
    j["rope_scaling"] = {{"factor", rs.factor},
                         {"low_freq_factor", rs.low_freq_factor},
                         {"high_freq_factor", rs.high_freq_factor},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings},
                         {"rope_type", "llama3"}};
    rope = j["rope_scaling"];
    rope["rope_theta"] = h.rope_theta;
  }
  j["rope_parameters"] = rope;
  j["tie_word_embeddings"] = h.tie_word_embeddings;
  j["initializer_range"] = h.initializer_range;
}

void write_mistral(const ModelSpec& spec, ojson& j) {
  write_decoder(spec, j);
  j["sliding_window"] = nullptr;
}

}  // namespace layerinit::hf
