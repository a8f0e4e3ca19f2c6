// Phi-3 and Phi-4 (microsoft's): transformers' models/phi3 as one record. layerinit reads its
// config.json but writes none of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// Phi3Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {32064, 3072, 8192, 32, 32, std::nullopt, std::nullopt, 4096, 1e-5, false, 1e4, 32000};

// Phi-3 and Phi-4: fused qkv_proj and gate_up_proj.
ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  DecoderLayout l;
  l.fused_qkv = true;
  l.fused_gate_up = true;
  return decoder(c, d, std::move(name), c.hyper(d), l);
}

}  // namespace

FamilyRecord phi3_record() { return {"phi3", "Phi3ForCausalLM", kDefaults, {}, read}; }

}  // namespace layerinit::hf
