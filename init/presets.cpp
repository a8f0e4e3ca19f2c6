// Named presets, with the numbers of each model's config.json on the Hugging Face Hub
// (openai-community/gpt2*, meta-llama/Meta-Llama-3-{8B,70B}, meta-llama/Llama-3.1-405B,
// mistralai/Mistral-7B-v0.1, mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen2.5-7B, google/gemma-2-9b,
// deepseek-ai/DeepSeek-V3). tests/python/hf_meta.py builds each of them in transformers on the meta
// device, from the config.json emit writes for it, and compares.
#include <layerinit/init/presets.hpp>

#include <stdexcept>

#include <layerinit/core/errors.hpp>
#include <layerinit/init/hf_spec.hpp>

namespace layerinit {

namespace {

Hyper gpt2_hyper(std::uint64_t d, std::uint64_t heads) {
  Hyper h;
  h.vocab_size = 50257;
  h.hidden_size = d;
  h.num_heads = heads;
  h.max_position_embeddings = 1024;  // n_positions
  h.norm_eps = 1e-5;                 // layer_norm_epsilon
  h.rope_theta = 0;                  // learned positions, no rotary embedding
  h.initializer_range = 0.02;
  return h;
}

Hyper llama_hyper(std::uint64_t vocab, std::uint64_t d, std::uint64_t ff, std::uint64_t heads, std::uint64_t kv,
                  std::uint64_t positions, double theta) {
  Hyper h;
  h.vocab_size = vocab;
  h.hidden_size = d;
  h.intermediate_size = ff;
  h.num_heads = heads;
  h.num_kv_heads = kv;
  h.max_position_embeddings = positions;
  h.norm_eps = 1e-5;  // rms_norm_eps
  h.rope_theta = theta;
  h.initializer_range = 0.02;
  h.tie_word_embeddings = false;
  return h;
}

Hyper mixtral_hyper(std::uint64_t vocab, std::uint64_t d, std::uint64_t ff, std::uint64_t heads, std::uint64_t kv,
                    std::uint64_t experts, std::uint64_t top_k) {
  Hyper h = llama_hyper(vocab, d, ff, heads, kv, 32768, 1e6);
  h.num_experts = experts;          // num_local_experts
  h.experts_per_token = top_k;      // num_experts_per_tok
  return h;
}

Hyper qwen2_hyper(std::uint64_t vocab, std::uint64_t d, std::uint64_t ff, std::uint64_t heads, std::uint64_t kv,
                  std::uint64_t positions) {
  Hyper h = llama_hyper(vocab, d, ff, heads, kv, positions, 1e6);
  h.norm_eps = 1e-6;
  h.bias = true;  // Qwen2Attention: q/k/v with bias, o_proj without
  return h;
}

Hyper gemma2_hyper(std::uint64_t vocab, std::uint64_t d, std::uint64_t ff, std::uint64_t heads, std::uint64_t kv,
                   std::uint64_t head_dim) {
  Hyper h = llama_hyper(vocab, d, ff, heads, kv, 8192, 10000.0);
  h.head_dim = head_dim;
  h.norm_eps = 1e-6;
  h.tie_word_embeddings = true;
  return h;
}

ModelSpec mixtral(std::string name, const Hyper& h, std::uint64_t num_layers) {
  DecoderLayout l;
  l.moe = MoeKind::mixtral;
  return decoder_spec(std::move(name), "mixtral", h, l, num_layers);
}

ModelSpec gemma2(std::string name, const Hyper& h, std::uint64_t num_layers) {
  DecoderLayout l;
  l.pre_feedforward_norm = l.post_feedforward_norm = true;
  l.zero_centered_norms = true;
  return decoder_spec(std::move(name), "gemma2", h, l, num_layers);
}

// DeepSeek-V3's numbers are more than Hyper holds: its presets are config.json texts, which emit
// writes beside the weights. deepseek-ai/DeepSeek-V3: hidden 7168, 61 layers of which 3 dense
// (intermediate 18432), 256 routed experts of 2048 and 1 shared, 8 per token, 128 heads, q_lora_rank
// 1536, kv_lora_rank 512, qk_nope 128 + qk_rope 64, v 128, vocab 129280; its yarn rope scaling.
constexpr const char* kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "model_type": "deepseek_v3",
  "vocab_size": 129280,
  "hidden_size": 7168,
  "intermediate_size": 18432,
  "moe_intermediate_size": 2048,
  "num_hidden_layers": 61,
  "first_k_dense_replace": 3,
  "num_attention_heads": 128,
  "num_key_value_heads": 128,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "num_experts_per_tok": 8,
  "n_group": 8,
  "topk_group": 4,
  "routed_scaling_factor": 2.5,
  "norm_topk_prob": true,
  "q_lora_rank": 1536,
  "kv_lora_rank": 512,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "v_head_dim": 128,
  "hidden_act": "silu",
  "max_position_embeddings": 163840,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
                      "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
  "initializer_range": 0.02,
  "tie_word_embeddings": false,
  "bos_token_id": 0,
  "eos_token_id": 1
}
)";

// DeepSeek-V3's structure at a few hundred thousand parameters: 1 dense layer, 2 MoE layers of 4
// routed experts and 1 shared.
constexpr const char* kDeepseekV3Tiny = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "model_type": "deepseek_v3",
  "vocab_size": 512,
  "hidden_size": 64,
  "intermediate_size": 128,
  "moe_intermediate_size": 32,
  "num_hidden_layers": 3,
  "first_k_dense_replace": 1,
  "num_attention_heads": 4,
  "num_key_value_heads": 4,
  "n_routed_experts": 4,
  "n_shared_experts": 1,
  "num_experts_per_tok": 2,
  "n_group": 1,
  "topk_group": 1,
  "q_lora_rank": 32,
  "kv_lora_rank": 16,
  "qk_nope_head_dim": 16,
  "qk_rope_head_dim": 8,
  "v_head_dim": 16,
  "hidden_act": "silu",
  "max_position_embeddings": 256,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
  "initializer_range": 0.02,
  "tie_word_embeddings": false,
  "bos_token_id": 0,
  "eos_token_id": 1
}
)";

// meta-llama/Llama-3.1-405B config.json: hidden 16384, intermediate 53248, 126 layers, 128 heads, 8
// key/value heads, 131072 positions with llama3 rope scaling (factor 8 of 8192 original positions).
ModelSpec llama_3_1_405b() {
  Hyper h = llama_hyper(128256, 16384, 53248, 128, 8, 131072, 500000.0);
  h.rope_scaling = {8.0, 1.0, 4.0, 8192};
  return llama_spec("llama-3.1-405b", h, 126);
}

struct Preset {
  const char* name;
  ModelSpec (*make)();
};

const Preset kPresets[] = {
    // 2 -> 1024 x 10 hidden layers -> 1 with biases: 10,500,097 parameters.
    {"mlp-deep", [] { return mlp_spec("mlp-deep", {2, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1}, true); }},
    {"gpt2", [] { return gpt2_spec("gpt2", gpt2_hyper(768, 12), 12); }},
    {"gpt2-medium", [] { return gpt2_spec("gpt2-medium", gpt2_hyper(1024, 16), 24); }},
    {"gpt2-large", [] { return gpt2_spec("gpt2-large", gpt2_hyper(1280, 20), 36); }},
    {"gpt2-xl", [] { return gpt2_spec("gpt2-xl", gpt2_hyper(1600, 25), 48); }},
    {"llama-3-8b", [] { return llama_spec("llama-3-8b", llama_hyper(128256, 4096, 14336, 32, 8, 8192, 500000.0), 32); }},
    {"llama-3-70b", [] { return llama_spec("llama-3-70b", llama_hyper(128256, 8192, 28672, 64, 8, 8192, 500000.0), 80); }},
    {"llama-3.1-405b", llama_3_1_405b},
    {"mistral-7b", [] { return llama_spec("mistral-7b", llama_hyper(32000, 4096, 14336, 32, 8, 32768, 10000.0), 32, "mistral"); }},
    {"mixtral-8x7b", [] { return mixtral("mixtral-8x7b", mixtral_hyper(32000, 4096, 14336, 32, 8, 8, 2), 32); }},
    {"qwen2.5-7b", [] { return llama_spec("qwen2.5-7b", qwen2_hyper(152064, 3584, 18944, 28, 4, 131072), 28, "qwen2"); }},
    {"gemma-2-9b", [] { return gemma2("gemma-2-9b", gemma2_hyper(256000, 3584, 14336, 16, 8, 256), 42); }},
    {"deepseek-v3", [] { return spec_from_hf_config(kDeepseekV3, "deepseek-v3"); }},
    // Small models of each family for tests: same structure, a few hundred thousand parameters.
    {"llama-tiny", [] { return llama_spec("llama-tiny", llama_hyper(512, 64, 176, 4, 2, 256, 10000.0), 4); }},
    {"gpt2-tiny", [] {
       Hyper h = gpt2_hyper(64, 4);
       h.vocab_size = 512;
       h.max_position_embeddings = 128;
       return gpt2_spec("gpt2-tiny", h, 2);
     }},
    {"mixtral-tiny", [] { return mixtral("mixtral-tiny", mixtral_hyper(512, 64, 128, 4, 2, 4, 2), 2); }},
    {"qwen2.5-tiny", [] { return llama_spec("qwen2.5-tiny", qwen2_hyper(512, 64, 176, 4, 2, 256), 2, "qwen2"); }},
    // head_dim 32 x 4 heads = 128 != hidden 64, as gemma-2-9b's 256 x 16 != 3584.
    {"gemma-2-tiny", [] { return gemma2("gemma-2-tiny", gemma2_hyper(512, 64, 128, 4, 2, 32), 2); }},
    {"deepseek-v3-tiny", [] { return spec_from_hf_config(kDeepseekV3Tiny, "deepseek-v3-tiny"); }},
};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

ModelSpec make_preset(std::string_view name) {
  std::string valid;
  for (const auto& p : kPresets) {
    if (name == p.name) return p.make();
    valid += (valid.empty() ? "" : ", ") + std::string(p.name);
  }
  bad_argument("preset", name, "is unknown (valid: " + valid + ")");
}

}  // namespace layerinit
