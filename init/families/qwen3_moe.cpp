// Qwen3-MoE (Qwen's Qwen3-30B-A3B, Qwen3-235B-A22B): transformers' models/qwen3_moe as one record.
// layerinit reads its config.json but writes none of its own.
#include "../family_record.hpp"

#include <algorithm>
#include <set>

namespace layerinit::hf {

namespace {

const JsonReader r("config.json");

// Qwen3MoeConfig's class fields (transformers 5.23; pad_token_id as 5.24's).
const Defaults kDefaults = {151936, 2048, 6144, 24, 32, 4, std::nullopt, 32768, 1e-6, false, 1e4, std::nullopt};

// Qwen3MoeDecoderLayer: layer i has experts unless it is in mlp_only_layers or (i + 1) is not a
// multiple of decoder_sparse_step. The repeated block is one kind of layer: dense layers are allowed
// before the MoE layers only.
ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  Hyper h = c.hyper(d);
  h.num_experts = c.count0("num_local_experts", 128);
  h.experts_per_token = c.count("num_experts_per_tok", 8);
  const std::uint64_t L = c.layers(d), step = c.count("decoder_sparse_step", 1);
  std::set<std::uint64_t> dense_only;
  if (const json* v = c.get("mlp_only_layers"); v && !v->is_null()) {
    if (!v->is_array()) r.fail("mlp_only_layers", "must be an array of layer indices");
    for (std::size_t i = 0; i < v->size(); ++i) dense_only.insert(r.to_uint((*v)[i], at("mlp_only_layers", i), false));
  }
  // From the counts, not a flag per layer (num_hidden_layers may be 2^62): the first layer i with
  // (i + 1) % step == 0 outside mlp_only_layers, and whether a dense layer follows it.
  std::uint64_t first_moe = L;
  if (h.num_experts > 0)
    for (std::uint64_t i = step - 1; i < L; i += step) {
      if (!dense_only.count(i)) {
        first_moe = i;
        break;
      }
      if (L - 1 - i < step) break;  // i + step would pass the last layer (or wrap)
    }
  DecoderLayout l;
  l.qkv_bias = l.o_bias = c.flag("attention_bias", false);
  l.qk_norm = QkNorm::head;
  if (first_moe == L) {  // no experts anywhere: a dense model
    h.num_experts = h.experts_per_token = 0;
    return decoder(c, d, std::move(name), h, l);
  }
  const bool dense_after = (step > 1 && first_moe + 1 < L) ||
                           std::any_of(dense_only.begin(), dense_only.end(), [&](std::uint64_t i) { return i > first_moe && i < L; });
  const char* dense_key = dense_only.empty() ? "decoder_sparse_step" : "mlp_only_layers";
  if (dense_after)
    r.fail(dense_key, "dense layers between MoE layers are not supported (layerinit repeats one kind of layer; dense layers may "
                      "only come first)");
  l.moe = MoeKind::routed;
  l.moe_intermediate_size = c.count("moe_intermediate_size", 768);
  l.dense_layers = first_moe;
  return decoder(c, d, std::move(name), h, l, "num_local_experts", dense_key);
}

}  // namespace

FamilyRecord qwen3_moe_record() {
  FamilyRecord r{"qwen3_moe", "Qwen3MoeForCausalLM", kDefaults, {{"num_experts", "num_local_experts"}}, read};
  r.torchtitan = {"qwen3", true, false};  // torchtitan's qwen3 package, its models with MoE layers
  return r;
}

}  // namespace layerinit::hf
