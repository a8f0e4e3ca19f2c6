// Qwen3 (Qwen's dense Qwen3 models): transformers' models/qwen3 as one record. layerinit reads its
// config.json but writes none of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// Qwen3Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, false, 1e4, std::nullopt};

// Qwen3: Llama's layer with q/k norms of a head's width; attention_bias on q, k, v and o.
ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.qk_norm = QkNorm::head;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

}  // namespace

FamilyRecord qwen3_record() {
  FamilyRecord r{"qwen3", "Qwen3ForCausalLM", kDefaults, {}, read};
  r.torchtitan = {"qwen3", false, false};
  return r;
}

}  // namespace layerinit::hf
