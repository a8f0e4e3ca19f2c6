// Gemma 2 (google's gemma-2-2b, 9b, 27b): transformers' models/gemma2 as one record. Its reader,
// read_gemma (init/families_common.cpp), is Gemma 3's too.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// Gemma2Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, true, 1e4, 0};

// google/gemma-2-9b's attention numbers.
void write(const ModelSpec& spec, nlohmann::ordered_json& j) {
  const Hyper& h = spec.hyper;
  write_decoder(spec, j, "hidden_activation", "gelu_pytorch_tanh");
  j["query_pre_attn_scalar"] = h.head_dim ? h.head_dim : h.hidden_size / h.num_heads;
  j["sliding_window"] = 4096;
  j["final_logit_softcapping"] = 30.0;
  j["attn_logit_softcapping"] = 50.0;
  j["pad_token_id"] = 0;
  j["eos_token_id"] = 1;
  j["bos_token_id"] = 2;
}

}  // namespace

FamilyRecord gemma2_record() {
  return {"gemma2", "Gemma2ForCausalLM", kDefaults, {}, read_gemma, {"Gemma2Config", false}, true, write};
}

}  // namespace layerinit::hf
