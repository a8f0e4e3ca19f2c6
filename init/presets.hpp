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

// mlp-deep, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3-8b, llama-3-70b, mistral-7b,
// mixtral-8x7b, llama-tiny, gpt2-tiny, mixtral-tiny. Throws std::invalid_argument
// "unknown preset 'x' (valid: ...)".
ModelSpec make_preset(std::string_view name);
std::vector<std::string> preset_names();

}  // namespace layerinit
