// Kimi K2 (moonshotai's Kimi-K2): DeepSeek-V3's record under another model_type, read_deepseek_v3
// (init/families_common.cpp) with DeepseekV3Config's defaults. layerinit writes no config.json of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// DeepseekV3Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {129280, 7168, 18432, 61, 128, 128, std::nullopt, 4096, 1e-6, false, 1e4, std::nullopt};

}  // namespace

FamilyRecord kimi_k2_record() {
  // Kimi K2 is DeepSeek-V3's architecture under its own model_type (its remote code's DeepseekV3Config).
  return {"kimi_k2", "DeepseekV3ForCausalLM", kDefaults, {{"num_local_experts", "n_routed_experts"}}, read_deepseek_v3,
          {nullptr, true}};
}

}  // namespace layerinit::hf
