// Gemma 3's text model (google's gemma-3-1b-it; the text_config of the larger image-text ones):
// transformers' models/gemma3 Gemma3ForCausalLM as one record. Its reader, read_gemma
// (init/families_common.cpp), is Gemma 2's with q/k norms; layerinit writes no config.json of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// Gemma3TextConfig's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, true, 1e6, 0};

}  // namespace

FamilyRecord gemma3_text_record() {
  return {"gemma3_text", "Gemma3ForCausalLM", kDefaults, {}, read_gemma, {"Gemma3TextConfig", false}};
}

}  // namespace layerinit::hf
