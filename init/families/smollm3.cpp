// SmolLM3 (HuggingFaceTB's SmolLM3-3B): transformers' models/smollm3 as one record, read as Llama
// (read_llama, init/families_common.cpp). layerinit writes no config.json of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// SmolLM3Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {128256, 2048, 11008, 36, 16, 4, std::nullopt, 32768, 1e-6, true, 2e6, 128004};

}  // namespace

FamilyRecord smollm3_record() { return {"smollm3", "SmolLM3ForCausalLM", kDefaults, {}, read_llama}; }

}  // namespace layerinit::hf
