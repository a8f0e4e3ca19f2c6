// GLM-4.5 (zai-org's GLM-4.5 and GLM-4.5-Air): transformers' models/glm4_moe as one record.
// layerinit reads its config.json but writes none of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// Glm4MoeConfig's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {151552, 4096, 10944, 46, 96, 8, std::nullopt, 131072, 1e-5, false, 1e4, std::nullopt};

// GLM-4.5: attention_bias on q, k and v only; first_k_dense_replace dense layers, then MoE layers with
// a sigmoid router, its correction bias and shared experts (DeepSeek-V3's MoE with Llama's attention).
ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "n_routed_experts", 128, 8);
  DecoderLayout l;
  l.qkv_bias = c.flag("attention_bias", false);
  if (c.flag("use_qk_norm", false)) l.qk_norm = QkNorm::head;
  deepseek_moe(c, d, l, 1408, 1);
  return decoder(c, d, std::move(name), h, l, "n_routed_experts");
}

}  // namespace

FamilyRecord glm4_moe_record() {
  return {"glm4_moe", "Glm4MoeForCausalLM", kDefaults, {{"num_local_experts", "n_routed_experts"}}, read};
}

}  // namespace layerinit::hf
