#include <layerinit/checkpoint/hf_config.hpp>

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace layerinit {

std::string config_json(const ModelSpec& spec, DType dtype) {
  const Hyper& h = spec.hyper;
  const std::string& fam = spec.family;
  const char* torch_dtype = dtype == DType::bf16 ? "bfloat16" : dtype == DType::f16 ? "float16" : "float32";
  nlohmann::ordered_json j;
  if (fam == "llama" || fam == "mistral" || fam == "mixtral") {
    const char* arch = fam == "llama" ? "LlamaForCausalLM" : fam == "mistral" ? "MistralForCausalLM" : "MixtralForCausalLM";
    j["architectures"] = {arch};
    j["model_type"] = fam;
    j["vocab_size"] = h.vocab_size;
    j["hidden_size"] = h.hidden_size;
    j["intermediate_size"] = h.intermediate_size;
    j["num_hidden_layers"] = spec.num_layers;
    j["num_attention_heads"] = h.num_heads;
    j["num_key_value_heads"] = h.num_kv_heads ? h.num_kv_heads : h.num_heads;
    if (h.head_dim) j["head_dim"] = h.head_dim;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = h.max_position_embeddings;
    j["rms_norm_eps"] = h.norm_eps;
    j["rope_theta"] = h.rope_theta;
    j["tie_word_embeddings"] = h.tie_word_embeddings;
    j["initializer_range"] = h.initializer_range;
    if (fam == "llama") {
      j["attention_bias"] = h.bias;
      j["mlp_bias"] = false;
    }
    if (fam == "mistral" || fam == "mixtral") j["sliding_window"] = nullptr;
    if (fam == "mixtral") {
      j["num_local_experts"] = h.num_experts;
      j["num_experts_per_tok"] = h.experts_per_token;
    }
  } else if (fam == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
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
  } else {
    throw std::invalid_argument("config.json: no Hugging Face model_type for family '" + fam +
                                "' (supported: llama, mistral, mixtral, gpt2)");
  }
  j["torch_dtype"] = torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace layerinit
