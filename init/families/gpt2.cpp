// GPT-2 (openai-community/gpt2): transformers' models/gpt2 as one record. The tensors are gpt2_spec's
// (init/families.hpp, which the gpt2 presets use too); GPT2PreTrainedModel._init_weights re-draws every
// c_proj.weight with std initializer_range / sqrt(2 n_layer), which the hf recipe asks the record.
#include "../family_record.hpp"

#include <layerinit/init/families.hpp>

namespace layerinit::hf {

namespace {

// GPT-2 under its own names (n_embd, n_layer, ...; transformers maps hidden_size and the like to them).
ModelSpec read(const Config& c, const Defaults&, std::string name) {
  Hyper h;
  h.vocab_size = c.count("vocab_size", 50257);
  h.hidden_size = c.count("n_embd", 768);
  h.num_heads = c.count("n_head", 12);
  h.max_position_embeddings = c.count("n_positions", 1024);
  h.intermediate_size = c.derived("n_inner", std::nullopt);  // null: 4 * n_embd
  h.norm_eps = c.real("layer_norm_epsilon", 1e-5);
  h.initializer_range = c.initializer_range();
  h.rope_theta = 0;  // learned positions
  if (!c.flag("tie_word_embeddings", true))
    c.fail("tie_word_embeddings", "false is not supported for gpt2 (layerinit's GPT-2 ties lm_head to the embedding)");
  if (c.flag("add_cross_attention", false))
    c.fail("add_cross_attention", "true is not supported (a decoder with cross-attention has tensors layerinit does not make)");
  if (h.hidden_size % h.num_heads != 0)
    c.fail("n_head", std::to_string(h.num_heads) + " does not divide n_embd " + std::to_string(h.hidden_size));
  return gpt2_spec(std::move(name), h, c.count("n_layer", 12));
}

// GPT-2 under its own names.
void write(const ModelSpec& spec, nlohmann::ordered_json& j) {
  const Hyper& h = spec.hyper;
  j["vocab_size"] = h.vocab_size;
  j["n_positions"] = h.max_position_embeddings;
  j["n_embd"] = h.hidden_size;
  j["n_layer"] = spec.num_layers;
  j["n_head"] = h.num_heads;
  if (h.intermediate_size && h.intermediate_size != 4 * h.hidden_size) j["n_inner"] = h.intermediate_size;
  else j["n_inner"] = nullptr;
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = h.norm_eps;
  j["initializer_range"] = h.initializer_range;
  j["tie_word_embeddings"] = true;
  // GPT2Config defaults both to 50256 (GPT-2's <|endoftext|>, its last token), which lies outside a
  // smaller vocabulary (gpt2-tiny's 512): the last token of this one.
  if (h.vocab_size > 0) {
    j["bos_token_id"] = h.vocab_size - 1;
    j["eos_token_id"] = h.vocab_size - 1;
  }
}

}  // namespace

FamilyRecord gpt2_record() {
  return {"gpt2",
          "GPT2LMHeadModel",
          {},
          {{"hidden_size", "n_embd"}, {"max_position_embeddings", "n_positions"}, {"num_attention_heads", "n_head"},
           {"num_hidden_layers", "n_layer"}},
          read,
          {},
          /*padding_idx=*/false,
          write,
          {.depth_scaled_outputs = true}};
}

}  // namespace layerinit::hf
