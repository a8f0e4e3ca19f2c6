// Mistral (mistralai's Mistral 7B): transformers' models/mistral as one record. Its writer,
// write_mistral (init/families_common.cpp), is Mixtral's too.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// MistralConfig's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {32000, 4096, 14336, 32, 32, 8, std::nullopt, 131072, 1e-6, false, 1e4, std::nullopt};

ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  return decoder(c, d, std::move(name), c.hyper(d), DecoderLayout{});
}

}  // namespace

FamilyRecord mistral_record() {
  return {"mistral", "MistralForCausalLM", kDefaults, {}, read, {nullptr, true}, true, write_mistral};
}

}  // namespace layerinit::hf
