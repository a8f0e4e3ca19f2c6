// Qwen2 (Qwen's Qwen2 and Qwen2.5): transformers' models/qwen2 as one record.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// Qwen2Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {151936, 4096, 22016, 32, 32, 32, std::nullopt, 32768, 1e-6, false, 1e4, std::nullopt};

// Qwen2Attention: q/k/v always with biases, o_proj without.
ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = true;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

// Qwen2.5's configs: full attention in every layer.
void write(const ModelSpec& spec, nlohmann::ordered_json& j) {
  write_decoder(spec, j);
  j["use_sliding_window"] = false;
  j["sliding_window"] = spec.hyper.max_position_embeddings;
  j["max_window_layers"] = spec.total_layers();
}

}  // namespace

FamilyRecord qwen2_record() { return {"qwen2", "Qwen2ForCausalLM", kDefaults, {}, read, {}, true, write}; }

}  // namespace layerinit::hf
