#include <layerinit/checkpoint/hf_config.hpp>

#include <stdexcept>

#include <nlohmann/json.hpp>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

namespace layerinit {

namespace {

constexpr const char* kFamilies[] = {"llama", "mistral", "mixtral", "qwen2", "gemma2", "gpt2"};

bool generated_family(const std::string& fam) {
  for (const char* f : kFamilies)
    if (fam == f) return true;
  return false;
}

// The user's config.json, refused when it describes quantized weights. Byte for byte, unless it
// declares a dtype other than the file's: transformers loads the weights as config.json's "dtype"
// (else "torch_dtype") says, so a float32 config over bf16 weights would load them as float32
// without a word. Then each of the two keys it has says the file's dtype.
std::string checked_hf_config(const ModelSpec& spec, DType dtype) {
  // Ordered: a rewritten config keeps the user's order of keys.
  auto j = nlohmann::ordered_json::parse(spec.hf_config, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("quantization_config") && !j["quantization_config"].is_null()) {
    const auto& q = j["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? " (" + printable(q["quant_method"].get<std::string>(), 64) + ")"
                                   : "";
    bad_argument("config.json", ": quantization_config" + method +
                                    " describes quantized weights, and layerinit writes fp32/fp16/bf16 ones that transformers "
                                    "would load as quantized: remove quantization_config from the config");
  }
  const std::string file_dtype(torch_dtype_name(dtype));
  bool differs = false;
  for (const char* key : {"dtype", "torch_dtype"})
    if (j.is_object() && j.contains(key) && !j[key].is_null() && j[key] != file_dtype) {
      j[key] = file_dtype;
      differs = true;
    }
  return differs ? j.dump(2) + "\n" : spec.hf_config;
}

}  // namespace

bool has_config_json(const ModelSpec& spec) { return !spec.hf_config.empty() || generated_family(spec.family); }

std::string config_json(const ModelSpec& spec, DType dtype) {
  if (!spec.hf_config.empty()) return checked_hf_config(spec, dtype);
  const Hyper& h = spec.hyper;
  const std::string& fam = spec.family;
  nlohmann::ordered_json j;
  if (!generated_family(fam)) {
    std::string supported;
    for (const char* f : kFamilies) supported += (supported.empty() ? "" : ", ") + std::string(f);
    bad_argument("config.json", ": family " + quote(fam) + " has no Hugging Face model_type (supported: " + supported +
                                    "); a spec read from a config.json carries its own");
  }
  if (fam != "gpt2") {
    const char* arch = fam == "llama"     ? "LlamaForCausalLM"
                       : fam == "mistral" ? "MistralForCausalLM"
                       : fam == "mixtral" ? "MixtralForCausalLM"
                       : fam == "qwen2"   ? "Qwen2ForCausalLM"
                                          : "Gemma2ForCausalLM";
    j["architectures"] = {arch};
    j["model_type"] = fam;
    j["vocab_size"] = h.vocab_size;
    j["hidden_size"] = h.hidden_size;
    j["intermediate_size"] = h.intermediate_size;
    j["num_hidden_layers"] = spec.total_layers();
    j["num_attention_heads"] = h.num_heads;
    j["num_key_value_heads"] = h.num_kv_heads ? h.num_kv_heads : h.num_heads;
    if (h.head_dim) j["head_dim"] = h.head_dim;
    if (fam == "gemma2") j["hidden_activation"] = "gelu_pytorch_tanh";
    else j["hidden_act"] = "silu";
    j["max_position_embeddings"] = h.max_position_embeddings;
    j["rms_norm_eps"] = h.norm_eps;
    j["rope_theta"] = h.rope_theta;
    // rope_parameters as transformers 5 writes them; rope_theta and rope_scaling for older releases.
    nlohmann::ordered_json rope{{"rope_theta", h.rope_theta}, {"rope_type", "default"}};
    if (const RopeScaling& rs = h.rope_scaling; rs != RopeScaling{}) {  // Llama 3.1's, as its config.json writes it
      j["rope_scaling"] = {{"factor", rs.factor},
                           {"low_freq_factor", rs.low_freq_factor},
                           {"high_freq_factor", rs.high_freq_factor},
                           {"original_max_position_embeddings", rs.original_max_position_embeddings},
                           {"rope_type", "llama3"}};
      rope = j["rope_scaling"];
      rope["rope_theta"] = h.rope_theta;
    }
    j["rope_parameters"] = rope;
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
    if (fam == "qwen2") {  // Qwen2.5's configs: full attention in every layer
      j["use_sliding_window"] = false;
      j["sliding_window"] = h.max_position_embeddings;
      j["max_window_layers"] = spec.total_layers();
    }
    if (fam == "gemma2") {  // google/gemma-2-9b's attention numbers
      j["query_pre_attn_scalar"] = h.head_dim ? h.head_dim : h.hidden_size / h.num_heads;
      j["sliding_window"] = 4096;
      j["final_logit_softcapping"] = 30.0;
      j["attn_logit_softcapping"] = 50.0;
      j["pad_token_id"] = 0;
      j["eos_token_id"] = 1;
      j["bos_token_id"] = 2;
    }
  } else {
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
  }
  j["torch_dtype"] = torch_dtype_name(dtype);
  return j.dump(2) + "\n";
}

}  // namespace layerinit
