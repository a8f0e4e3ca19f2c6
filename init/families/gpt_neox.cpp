// GPT-NeoX (EleutherAI's GPT-NeoX-20B, Pythia): transformers 5.24's models/gpt_neox. One record: the
// config.json GPTNeoXConfig reads, the tensors GPTNeoXForCausalLM makes from it, the config.json
// written for a spec of the family made without one. Its _init_weights is PreTrainedModel's: normal(0,
// initializer_range) for every Linear and the Embedding, zero biases, LayerNorms at 1 and 0 (the hf
// recipe's rules by role); embed_in has no padding_idx.
#include "../family_record.hpp"

#include <layerinit/core/errors.hpp>

namespace layerinit::hf {

namespace {

// GPTNeoXConfig's class fields. No kv heads or head_dim: heads are hidden_size / num_attention_heads.
const Defaults kDefaults = {50432, 6144, 24576, 44, 64, std::nullopt, std::nullopt, 2048, 1e-5, false, 1e4, std::nullopt};

// GPTNeoXForCausalLM's tensors in module order (modeling_gpt_neox.py): gpt_neox.embed_in; per layer
// input_layernorm, post_attention_layernorm (LayerNorms with biases), attention.query_key_value
// [3 d, d] (q, k and v interleaved per head, so a split by heads keeps each head whole, as its
// tp_plan's "colwise" does) and attention.dense, with biases when attention_bias; mlp.dense_h_to_4h
// and mlp.dense_4h_to_h, always with biases; gpt_neox.final_layer_norm; the head, untied unless
// tie_word_embeddings, under the checkpoints' name embed_out (transformers renames it lm_head when
// it loads one, conversion_mapping.py).
ModelSpec gpt_neox_spec(std::string name, const Hyper& h, std::uint64_t layers) {
  const std::uint64_t d = h.hidden_size, ff = h.intermediate_size;
  ModelSpec m;
  m.name = std::move(name);
  m.family = "gpt_neox";
  m.hyper = h;
  m.layer_prefix = "gpt_neox.layers.";
  m.num_layers = layers;
  m.pre.push_back(embedding_tensor("gpt_neox.embed_in.weight", h.vocab_size, d));
  auto& ts = m.layer.tensors;
  for (const char* n : {"input_layernorm", "post_attention_layernorm"}) {
    ts.push_back(norm_tensor(std::string(n) + ".weight", d));
    ts.push_back(norm_tensor(std::string(n) + ".bias", d, TensorRole::norm_bias));
  }
  auto linear = [&](const std::string& base, std::uint64_t in, std::uint64_t out, TensorRole role, bool bias) {
    ts.push_back(linear_tensor(base + ".weight", in, out, role));
    if (bias) ts.push_back(bias_tensor(base + ".bias", in, out));
  };
  linear("attention.query_key_value", d, checked_mul(3, d, "3 * hidden_size"), TensorRole::linear_weight, h.bias);
  linear("attention.dense", d, d, TensorRole::output_weight, h.bias);
  linear("mlp.dense_h_to_4h", d, ff, TensorRole::linear_weight, true);
  linear("mlp.dense_4h_to_h", ff, d, TensorRole::output_weight, true);
  m.post.push_back(norm_tensor("gpt_neox.final_layer_norm.weight", d));
  m.post.push_back(norm_tensor("gpt_neox.final_layer_norm.bias", d, TensorRole::norm_bias));
  if (!h.tie_word_embeddings) m.post.push_back(linear_tensor("embed_out.weight", d, h.vocab_size, TensorRole::head_weight));
  return m;
}

// The fields GPTNeoXConfig and its model read. rotary_pct (partial_rotary_factor), rotary_emb_base
// (rope_theta when rope_parameters gives none) and use_parallel_residual change no tensor: checked
// for their type and kept in the config.json text.
ModelSpec read(const Config& c, const Defaults& d, std::string name) {
  Hyper h;
  h.vocab_size = c.count("vocab_size", d.vocab_size);
  h.hidden_size = c.count("hidden_size", d.hidden_size);
  h.intermediate_size = c.count("intermediate_size", d.intermediate_size);
  h.num_heads = h.num_kv_heads = c.count("num_attention_heads", d.num_attention_heads);
  h.max_position_embeddings = c.count("max_position_embeddings", d.max_position_embeddings);
  h.initializer_range = c.initializer_range();
  h.norm_eps = c.real("layer_norm_eps", d.rms_norm_eps);
  h.tie_word_embeddings = c.flag("tie_word_embeddings", d.tie_word_embeddings);
  h.bias = c.flag("attention_bias", true);
  if (c.real("rotary_pct", 0.25) > 1) c.fail("rotary_pct", "must be at most 1 (the share of a head's width that is rotated)");
  (void)c.flag("use_parallel_residual", true);
  c.read_rope(h, c.real("rotary_emb_base", d.rope_theta));
  // GPTNeoXConfig.validate_architecture.
  if (h.hidden_size % h.num_heads != 0)
    c.fail("num_attention_heads", std::to_string(h.num_heads) + " does not divide hidden_size " + std::to_string(h.hidden_size) +
                                      " (transformers' GPTNeoXConfig.validate_architecture refuses it)");
  h.head_dim = h.hidden_size / h.num_heads;
  if (const auto p = hyper_problem(h)) c.fail(p->field == "num_heads" ? "num_attention_heads" : p->field, p->message);
  return gpt_neox_spec(std::move(name), h, c.layers(d));
}

// GPTNeoXConfig's keys, with rope_parameters as transformers 5 reads them and rotary_emb_base and
// rotary_pct as older releases do; what Hyper does not hold (the rotated share, the parallel residual)
// is the class default.
void write(const ModelSpec& spec, nlohmann::ordered_json& j) {
  const Hyper& h = spec.hyper;
  write_sizes(spec, j);
  j["hidden_act"] = "gelu";
  j["max_position_embeddings"] = h.max_position_embeddings;
  j["layer_norm_eps"] = h.norm_eps;
  j["rotary_emb_base"] = h.rope_theta;
  j["rotary_pct"] = 0.25;
  j["rope_parameters"] = {{"rope_theta", h.rope_theta}, {"rope_type", "default"}, {"partial_rotary_factor", 0.25}};
  j["use_parallel_residual"] = true;
  j["attention_bias"] = h.bias;
  j["tie_word_embeddings"] = h.tie_word_embeddings;
  j["initializer_range"] = h.initializer_range;
}

}  // namespace

FamilyRecord gpt_neox_record() {
  // Checkpoints (Pythia's, the hub's) hold the head as embed_out; transformers 5's module is lm_head
  // (conversion_mapping.py: WeightRenaming "^embed_out." -> "lm_head.").
  return {"gpt_neox", "GPTNeoXForCausalLM", kDefaults, {}, read, {}, /*padding_idx=*/false, write, {},
          {{"lm_head.weight", "embed_out.weight"}}};
}

}  // namespace layerinit::hf
