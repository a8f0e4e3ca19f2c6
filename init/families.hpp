// Model families: the tensors of an MLP, GPT-2 and transformers' decoder models, with the names and
// shapes of their Hugging Face checkpoints (Linear weights [out, in]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// An MLP: widths[0] inputs -> widths.back() outputs. widths[1..n-2] are hidden widths; if every
// hidden width is equal, the hidden->hidden linears form the repeated layers ("layers.{i}.weight"),
// the first linear is "input.weight" and the last "output.weight".
LAYERINIT_API ModelSpec mlp_spec(std::string name, const std::vector<std::uint64_t>& widths, bool bias);
// GPT-2: learned positions, LayerNorm with bias, fused qkv (Conv1D, [in, out]), tied head.
LAYERINIT_API ModelSpec gpt2_spec(std::string name, const Hyper& h, std::uint64_t num_layers);

// q and k normalized inside attention (an RMSNorm weight each).
enum class QkNorm : std::uint8_t {
  none,
  head,   // q_norm, k_norm of [head_dim], shared by the heads (Qwen3, Gemma 3, GLM-4.5)
  whole,  // q_norm [heads * head_dim], k_norm [kv_heads * head_dim] (OLMo 2)
};

// DeepSeek's multi-head latent attention, under its config.json's names.
struct LatentAttention {
  std::uint64_t q_lora_rank = 0;  // 0: q_proj straight from the hidden state (config.json's null)
  std::uint64_t kv_lora_rank = 0;
  std::uint64_t qk_nope_head_dim = 0;
  std::uint64_t qk_rope_head_dim = 0;
  std::uint64_t v_head_dim = 0;
  bool operator==(const LatentAttention&) const = default;
};

// An MoE layer's tensors, as each transformers module names them.
enum class MoeKind : std::uint8_t {
  none,
  mixtral,  // block_sparse_moe.gate [E, d], then block_sparse_moe.experts.{e}.w1, w2, w3
  routed,   // mlp.experts.{e}.gate_proj, up_proj, down_proj, then mlp.gate [E, d] (Qwen3-MoE, DeepSeek-V3, GLM-4.5)
  gpt_oss,  // mlp.router [E, d] with a bias, then mlp.experts.gate_up_proj [E, d, 2F] (gate and up
            // interleaved), down_proj [E, F, d], each with a bias: fused tensors, as its checkpoints hold them
};

// What one decoder layer holds besides the Hyper numbers. The default is Llama's.
struct DecoderLayout {
  // Attention.
  bool qkv_bias = false;   // q/k/v projection biases (Qwen2; attention_bias)
  bool o_bias = false;     // an o_proj bias (attention_bias of Llama, Qwen3, gpt-oss)
  QkNorm qk_norm = QkNorm::none;
  bool fused_qkv = false;  // Phi-3: o_proj, then qkv_proj [(heads + 2 kv_heads) * head_dim, d]
  bool sinks = false;      // gpt-oss: self_attn.sinks [heads], a learned logit per head
  std::optional<LatentAttention> latent;  // DeepSeek's attention instead of q/k/v/o
  // Feed-forward.
  bool mlp_bias = false;       // gate/up/down biases (mlp_bias)
  bool fused_gate_up = false;  // Phi-3: mlp.gate_up_proj [2 F, d]
  // Norms, in this order.
  bool input_norm = true;  // input_layernorm (OLMo 2 normalizes outputs only)
  bool post_attention_norm = true;
  bool pre_feedforward_norm = false;   // Gemma 2 and 3
  bool post_feedforward_norm = false;  // Gemma 2 and 3, OLMo 2
  // Gemma's RMSNorm scales by (1 + weight) and creates the weight as zeros: every norm weight is
  // stored as its offset from one and starts at zero, whatever the recipe.
  bool zero_centered_norms = false;
  // Experts: Hyper.num_experts of them, Hyper.experts_per_token per token.
  MoeKind moe = MoeKind::none;
  std::uint64_t moe_intermediate_size = 0;  // an expert's width; 0: Hyper.intermediate_size
  std::uint64_t shared_experts = 0;         // mlp.shared_experts, a SwiGLU of shared_experts x the expert width
  bool shared_experts_always = false;       // ...made even at 0 shared experts, of zero elements (DeepseekV3MoE)
  bool correction_bias = false;             // mlp.gate.e_score_correction_bias [E]: a buffer, zero
  // Layers before the MoE layers with a dense SwiGLU of Hyper.intermediate_size
  // (first_k_dense_replace): in `pre` under their canonical names, the spec's first_layer.
  std::uint64_t dense_layers = 0;
  bool operator==(const DecoderLayout&) const = default;
};

// A decoder-only transformer of num_hidden_layers layers: the token embedding, the layers, the final
// norm and an untied lm_head. Missing numbers take a transformer config's defaults: kv heads =
// heads, head_dim = hidden / heads. Throws bad_input naming an inconsistent number.
LAYERINIT_API ModelSpec decoder_spec(std::string name, std::string family, const Hyper& h, const DecoderLayout& layout,
                                     std::uint64_t num_hidden_layers);

// Whether decoder_spec's tensors would fit a spec (kMaxSpecTensors), from the counts alone, before
// any is made: "num_experts" when one layer's experts are too many, "dense_layers" when the dense
// layers listed before the MoE layers are. decoder_spec refuses the same (bad_input).
LAYERINIT_API std::optional<HyperProblem> decoder_size_problem(const Hyper& h, const DecoderLayout& layout,
                                                               std::uint64_t num_hidden_layers);

// Llama / Mistral: decoder_spec with Llama's layout, plus q/k/v biases when Hyper.bias (Qwen2).
LAYERINIT_API ModelSpec llama_spec(std::string name, const Hyper& h, std::uint64_t num_layers, std::string family = "llama");

}  // namespace layerinit
