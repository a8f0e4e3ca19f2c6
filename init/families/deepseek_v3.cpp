// DeepSeek-V3 (deepseek-ai's DeepSeek-V3 and R1): transformers' models/deepseek_v3 as one record. Its
// reader, read_deepseek_v3 (init/families_common.cpp), is Kimi K2's too; layerinit reads its config.json
// but writes none of its own.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// DeepseekV3Config's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {129280, 7168, 18432, 61, 128, 128, std::nullopt, 4096, 1e-6, false, 1e4, std::nullopt};

}  // namespace

FamilyRecord deepseek_v3_record() {
  FamilyRecord r{"deepseek_v3", "DeepseekV3ForCausalLM", kDefaults, {{"num_local_experts", "n_routed_experts"}},
                 read_deepseek_v3, {nullptr, true}};
  r.torchtitan = {"deepseek_v3", std::nullopt, false};
  return r;
}

}  // namespace layerinit::hf
