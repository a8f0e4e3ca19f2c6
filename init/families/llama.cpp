// Llama (meta-llama's Llama 2, Llama 3 and 3.1): transformers' models/llama as one record. Its reader,
// read_llama (init/families_common.cpp), is SmolLM3's too.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// LlamaConfig's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {32000, 4096, 11008, 32, 32, std::nullopt, std::nullopt, 2048, 1e-6, false, 1e4, std::nullopt};

void write(const ModelSpec& spec, nlohmann::ordered_json& j) {
  write_decoder(spec, j);
  j["attention_bias"] = spec.hyper.bias;
  j["mlp_bias"] = false;
}

}  // namespace

FamilyRecord llama_record() {
  FamilyRecord r{"llama", "LlamaForCausalLM", kDefaults, {}, read_llama, {"LlamaConfig", true}, true, write};
  r.torchtitan = {"llama3", std::nullopt, true};
  return r;
}

}  // namespace layerinit::hf
