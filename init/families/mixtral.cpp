// Mixtral (mistralai's Mixtral 8x7B): transformers' models/mixtral as one record, Mistral's layers with
// block_sparse_moe experts.
#include "../family_record.hpp"

namespace layerinit::hf {

namespace {

// MixtralConfig's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {32000, 4096, 14336, 32, 32, 8, std::nullopt, 131072, 1e-5, false, 1e6, std::nullopt};

ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  read_experts(c, h, "num_local_experts", 8, 2);
  DecoderLayout l;
  l.moe = MoeKind::mixtral;
  return decoder(c, d, std::move(name), h, l, "num_local_experts");
}

void write(const ModelSpec& spec, nlohmann::ordered_json& j) {
  write_mistral(spec, j);
  j["num_local_experts"] = spec.hyper.num_experts;
  j["num_experts_per_tok"] = spec.hyper.experts_per_token;
}

}  // namespace

FamilyRecord mixtral_record() {
  return {"mixtral", "MixtralForCausalLM", kDefaults, {{"num_experts", "num_local_experts"}}, read, {nullptr, true}, true, write};
}

}  // namespace layerinit::hf
