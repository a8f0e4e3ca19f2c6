// OLMo 2 (allenai's OLMo-2): transformers' models/olmo2 as one record. layerinit reads its config.json
// but writes none of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// Olmo2Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {50304, 4096, 11008, 32, 32, std::nullopt, std::nullopt, 2048, 1e-5, false, 1e4, 1};

// Olmo2: q/k norms over all heads, and norms after attention and the MLP instead of before.
ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.qk_norm = QkNorm::whole;
  l.input_norm = false;
  l.post_feedforward_norm = true;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

}  // namespace

FamilyRecord olmo2_record() { return {"olmo2", "Olmo2ForCausalLM", kDefaults, {}, read}; }

}  // namespace layerinit::hf
