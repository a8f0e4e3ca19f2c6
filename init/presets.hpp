// Model families and named presets.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <layerinit/init/spec.hpp>

namespace layerinit {

// An MLP: widths[0] inputs -> widths.back() outputs. widths[1..n-2] are hidden widths; if every
// hidden width is equal, the hidden->hidden linears form the repeated layers ("layers.{i}.weight"),
// the first linear is "input.weight" and the last "output.weight".
ModelSpec mlp_spec(std::string name, const std::vector<std::uint64_t>& widths, bool bias);
// Llama / Mistral: grouped-query attention, SwiGLU, RMSNorm, tied or untied embeddings, optional
// biases (Hyper.bias adds q/k/v biases as in Qwen2-style variants).
ModelSpec llama_spec(std::string name, const Hyper& h, std::uint64_t num_layers, std::string family = "llama");
// GPT-2: learned positions, LayerNorm with bias, fused qkv (Conv1D, [in, out]), tied head.
ModelSpec gpt2_spec(std::string name, const Hyper& h, std::uint64_t num_layers);
// Mixtral: Llama attention, a router and num_experts SwiGLU experts per layer.
ModelSpec mixtral_spec(std::string name, const Hyper& h, std::uint64_t num_layers);
// Gemma 2: Llama attention with head_dim * num_heads free of hidden_size, four norms per layer
// (input, post-attention, pre- and post-feed-forward), tied embeddings. Gemma's RMSNorm scales by
// (1 + weight), so its norm weights are stored as offsets from one: they start at zero, whatever
// the recipe.
ModelSpec gemma2_spec(std::string name, const Hyper& h, std::uint64_t num_layers);

// DeepSeek-V3's numbers beyond Hyper, under its config.json's names.
struct DeepseekDims {
  std::uint64_t q_lora_rank = 0;
  std::uint64_t kv_lora_rank = 0;
  std::uint64_t qk_nope_head_dim = 0;
  std::uint64_t qk_rope_head_dim = 0;
  std::uint64_t v_head_dim = 0;
  std::uint64_t moe_intermediate_size = 0;
  std::uint64_t n_shared_experts = 0;
  std::uint64_t first_k_dense_replace = 0;  // dense layers before the MoE layers
};
// DeepSeek-V3: multi-head latent attention; first_k_dense_replace dense SwiGLU layers (listed in
// `pre`, the spec's first_layer), then MoE layers (the repeated block) with a sigmoid router and
// its correction bias (zero), h.num_experts routed experts and n_shared_experts shared ones fused
// into one MLP. num_hidden_layers counts both kinds; the multi-token-prediction layer is not part of
// it (transformers does not build it).
ModelSpec deepseek_v3_spec(std::string name, const Hyper& h, const DeepseekDims& x, std::uint64_t num_hidden_layers);

// mlp-deep, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3-8b, llama-3-70b, mistral-7b,
// mixtral-8x7b, qwen2.5-7b, gemma-2-9b, deepseek-v3, llama-tiny, gpt2-tiny, mixtral-tiny,
// qwen2.5-tiny, gemma-2-tiny, deepseek-v3-tiny. Throws std::invalid_argument
// "unknown preset 'x' (valid: ...)".
ModelSpec make_preset(std::string_view name);
std::vector<std::string> preset_names();

}  // namespace layerinit
