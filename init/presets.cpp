// Model families and named presets, with the tensor names and shapes of the Hugging Face models.
//
// Sources of the numbers: each preset's config.json on the Hugging Face Hub (openai-community/gpt2*,
// meta-llama/Meta-Llama-3-{8B,70B}, meta-llama/Llama-3.1-405B, mistralai/Mistral-7B-v0.1,
// mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen2.5-7B, google/gemma-2-9b, deepseek-ai/DeepSeek-V3); names
// and module order from transformers' modeling_{gpt2,llama,mistral,mixtral,qwen2,gemma2,deepseek_v3}.py.
// tests/readers/hf_meta.py builds each of them in transformers on the meta device and compares.
#include <layerinit/init/presets.hpp>

#include <stdexcept>

namespace layerinit {

namespace {

// A Linear weight, [out, in] as PyTorch stores it.
TensorSpec linear(std::string name, std::uint64_t in, std::uint64_t out, TensorRole role = TensorRole::linear_weight) {
  return TensorSpec{std::move(name), {out, in}, role, in, out, /*transposable=*/true, std::nullopt};
}
TensorSpec bias(std::string name, std::uint64_t in, std::uint64_t out) {
  return TensorSpec{std::move(name), {out}, TensorRole::linear_bias, in, out, false, std::nullopt};
}
// GPT-2's Conv1D weight, [in, out] in both the PyTorch and the Flax model.
TensorSpec conv1d(std::string name, std::uint64_t in, std::uint64_t out, TensorRole role = TensorRole::linear_weight) {
  return TensorSpec{std::move(name), {in, out}, role, in, out, /*transposable=*/false, std::nullopt};
}
TensorSpec norm(std::string name, std::uint64_t d, TensorRole role = TensorRole::norm_weight) {
  return TensorSpec{std::move(name), {d}, role, 0, 0, false, std::nullopt};
}
TensorSpec embedding(std::string name, std::uint64_t rows, std::uint64_t d, TensorRole role = TensorRole::embedding) {
  return TensorSpec{std::move(name), {rows, d}, role, 0, 0, false, std::nullopt};
}

void require(bool ok, const std::string& name, const char* what) {
  if (!ok) throw std::invalid_argument("model '" + name + "': " + what);
}

// Fills the defaults a transformer config leaves implicit: kv heads = heads, head_dim = hidden / heads.
Hyper attention_defaults(const std::string& name, Hyper h) {
  require(h.vocab_size > 0, name, "vocab_size must be positive");
  require(h.hidden_size > 0, name, "hidden_size must be positive");
  require(h.num_heads > 0, name, "num_heads must be positive");
  if (h.num_kv_heads == 0) h.num_kv_heads = h.num_heads;
  if (const auto p = hyper_problem(h)) throw std::invalid_argument("model '" + name + "': " + p->field + " " + p->message);
  if (h.head_dim == 0) h.head_dim = h.hidden_size / h.num_heads;
  return h;
}

// Llama attention: q/k/v/o projections, optional q/k/v biases (Qwen2-style).
void add_attention(std::vector<TensorSpec>& ts, const Hyper& h) {
  const std::uint64_t d = h.hidden_size, q = h.num_heads * h.head_dim, kv = h.num_kv_heads * h.head_dim;
  ts.push_back(linear("self_attn.q_proj.weight", d, q));
  if (h.bias) ts.push_back(bias("self_attn.q_proj.bias", d, q));
  ts.push_back(linear("self_attn.k_proj.weight", d, kv));
  if (h.bias) ts.push_back(bias("self_attn.k_proj.bias", d, kv));
  ts.push_back(linear("self_attn.v_proj.weight", d, kv));
  if (h.bias) ts.push_back(bias("self_attn.v_proj.bias", d, kv));
  ts.push_back(linear("self_attn.o_proj.weight", q, d, TensorRole::output_weight));
}

// Embeddings before the layers, final norm and (untied) head after them.
void add_llama_ends(ModelSpec& m) {
  const Hyper& h = m.hyper;
  m.pre.push_back(embedding("model.embed_tokens.weight", h.vocab_size, h.hidden_size));
  m.post.push_back(norm("model.norm.weight", h.hidden_size));
  if (!h.tie_word_embeddings) m.post.push_back(linear("lm_head.weight", h.hidden_size, h.vocab_size, TensorRole::head_weight));
}

}  // namespace

ModelSpec mlp_spec(std::string name, const std::vector<std::uint64_t>& widths, bool with_bias) {
  require(widths.size() >= 2, name, "an MLP needs at least an input and an output width");
  for (auto w : widths) require(w > 0, name, "MLP widths must be positive");
  ModelSpec m;
  m.name = std::move(name);
  m.family = "mlp";
  m.layer_prefix = "layers.";
  m.hyper.bias = with_bias;
  const std::size_t n = widths.size();
  auto add = [&](std::vector<TensorSpec>& ts, const std::string& base, std::uint64_t in, std::uint64_t out,
                 TensorRole role) {
    ts.push_back(linear(base + "weight", in, out, role));
    if (with_bias) ts.push_back(bias(base + "bias", in, out));
  };
  if (n == 2) {  // a single linear map
    add(m.post, "output.", widths[0], widths[1], TensorRole::head_weight);
    return m;
  }
  bool uniform = true;
  for (std::size_t i = 2; i + 1 < n; ++i) uniform = uniform && widths[i] == widths[1];
  m.hyper.hidden_size = uniform ? widths[1] : 0;
  add(m.pre, "input.", widths[0], widths[1], TensorRole::linear_weight);
  if (uniform) {
    m.num_layers = n - 3;  // hidden -> hidden maps
    if (m.num_layers > 0) add(m.layer.tensors, "", widths[1], widths[1], TensorRole::linear_weight);
  } else {
    // Unequal hidden widths: the hidden maps are listed one by one, with the names layers would get.
    for (std::size_t i = 1; i + 2 < n; ++i)
      add(m.pre, "layers." + std::to_string(i - 1) + ".", widths[i], widths[i + 1], TensorRole::linear_weight);
  }
  add(m.post, "output.", widths[n - 2], widths[n - 1], TensorRole::head_weight);
  return m;
}

ModelSpec llama_spec(std::string name, const Hyper& hyper, std::uint64_t num_layers, std::string family) {
  ModelSpec m;
  m.hyper = attention_defaults(name, hyper);
  require(m.hyper.intermediate_size > 0, name, "intermediate_size must be positive");
  m.name = std::move(name);
  m.family = std::move(family);
  m.num_layers = num_layers;
  const Hyper& h = m.hyper;
  auto& ts = m.layer.tensors;
  add_attention(ts, h);
  ts.push_back(linear("mlp.gate_proj.weight", h.hidden_size, h.intermediate_size));
  ts.push_back(linear("mlp.up_proj.weight", h.hidden_size, h.intermediate_size));
  ts.push_back(linear("mlp.down_proj.weight", h.intermediate_size, h.hidden_size, TensorRole::output_weight));
  ts.push_back(norm("input_layernorm.weight", h.hidden_size));
  ts.push_back(norm("post_attention_layernorm.weight", h.hidden_size));
  add_llama_ends(m);
  return m;
}

ModelSpec mixtral_spec(std::string name, const Hyper& hyper, std::uint64_t num_layers) {
  ModelSpec m;
  m.hyper = attention_defaults(name, hyper);
  require(m.hyper.intermediate_size > 0, name, "intermediate_size must be positive");
  require(m.hyper.num_experts > 0, name, "num_experts must be positive");
  require(m.hyper.experts_per_token <= m.hyper.num_experts, name, "experts_per_token exceeds num_experts");
  m.name = std::move(name);
  m.family = "mixtral";
  m.num_layers = num_layers;
  const Hyper& h = m.hyper;
  const std::uint64_t d = h.hidden_size, ff = h.intermediate_size;
  auto& ts = m.layer.tensors;
  m.layer.expert_prefix = "block_sparse_moe.experts.";
  add_attention(ts, h);
  ts.push_back(linear("block_sparse_moe.gate.weight", d, h.num_experts, TensorRole::router_weight));
  for (std::uint64_t e = 0; e < h.num_experts; ++e) {
    const std::string p = "block_sparse_moe.experts." + std::to_string(e) + ".";
    ts.push_back(linear(p + "w1.weight", d, ff));                            // gate
    ts.push_back(linear(p + "w2.weight", ff, d, TensorRole::output_weight));  // down
    ts.push_back(linear(p + "w3.weight", d, ff));                            // up
  }
  ts.push_back(norm("input_layernorm.weight", d));
  ts.push_back(norm("post_attention_layernorm.weight", d));
  add_llama_ends(m);
  return m;
}

ModelSpec gemma2_spec(std::string name, const Hyper& hyper, std::uint64_t num_layers) {
  ModelSpec m;
  m.hyper = attention_defaults(name, hyper);
  require(m.hyper.intermediate_size > 0, name, "intermediate_size must be positive");
  m.hyper.tie_word_embeddings = true;
  m.name = std::move(name);
  m.family = "gemma2";
  m.num_layers = num_layers;
  const Hyper& h = m.hyper;
  // Gemma2RMSNorm: x * (1 + weight), weight created as zeros.
  auto gemma_norm = [](std::string n, std::uint64_t d) {
    TensorSpec t = norm(std::move(n), d);
    t.init = FillSpec::constant(0.0);
    return t;
  };
  auto& ts = m.layer.tensors;
  add_attention(ts, h);
  ts.push_back(linear("mlp.gate_proj.weight", h.hidden_size, h.intermediate_size));
  ts.push_back(linear("mlp.up_proj.weight", h.hidden_size, h.intermediate_size));
  ts.push_back(linear("mlp.down_proj.weight", h.intermediate_size, h.hidden_size, TensorRole::output_weight));
  ts.push_back(gemma_norm("input_layernorm.weight", h.hidden_size));
  ts.push_back(gemma_norm("post_attention_layernorm.weight", h.hidden_size));
  ts.push_back(gemma_norm("pre_feedforward_layernorm.weight", h.hidden_size));
  ts.push_back(gemma_norm("post_feedforward_layernorm.weight", h.hidden_size));
  m.pre.push_back(embedding("model.embed_tokens.weight", h.vocab_size, h.hidden_size));
  m.post.push_back(gemma_norm("model.norm.weight", h.hidden_size));
  return m;
}

namespace {

// Multi-head latent attention (DeepseekV3Attention), relative names.
void add_mla(std::vector<TensorSpec>& ts, const Hyper& h, const DeepseekDims& x, const std::string& p = "") {
  const std::uint64_t d = h.hidden_size, H = h.num_heads;
  const std::uint64_t qk = x.qk_nope_head_dim + x.qk_rope_head_dim;
  ts.push_back(linear(p + "self_attn.q_a_proj.weight", d, x.q_lora_rank));
  ts.push_back(norm(p + "self_attn.q_a_layernorm.weight", x.q_lora_rank));
  ts.push_back(linear(p + "self_attn.q_b_proj.weight", x.q_lora_rank, H * qk));
  ts.push_back(linear(p + "self_attn.kv_a_proj_with_mqa.weight", d, x.kv_lora_rank + x.qk_rope_head_dim));
  ts.push_back(norm(p + "self_attn.kv_a_layernorm.weight", x.kv_lora_rank));
  ts.push_back(linear(p + "self_attn.kv_b_proj.weight", x.kv_lora_rank, H * (x.qk_nope_head_dim + x.v_head_dim)));
  ts.push_back(linear(p + "self_attn.o_proj.weight", H * x.v_head_dim, d, TensorRole::output_weight));
}

void add_swiglu(std::vector<TensorSpec>& ts, const std::string& p, std::uint64_t d, std::uint64_t ff) {
  ts.push_back(linear(p + "gate_proj.weight", d, ff));
  ts.push_back(linear(p + "up_proj.weight", d, ff));
  ts.push_back(linear(p + "down_proj.weight", ff, d, TensorRole::output_weight));
}

}  // namespace

ModelSpec deepseek_v3_spec(std::string name, const Hyper& hyper, const DeepseekDims& x, std::uint64_t num_hidden_layers) {
  ModelSpec m;
  Hyper h = hyper;
  h.head_dim = x.qk_nope_head_dim + x.qk_rope_head_dim;  // a query head's width
  m.hyper = attention_defaults(name, h);
  require(m.hyper.intermediate_size > 0, name, "intermediate_size must be positive");
  require(m.hyper.num_experts > 0, name, "num_experts (n_routed_experts) must be positive");
  require(x.q_lora_rank > 0 && x.kv_lora_rank > 0 && x.qk_nope_head_dim > 0 && x.qk_rope_head_dim > 0 && x.v_head_dim > 0,
          name, "q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be positive");
  require(x.moe_intermediate_size > 0, name, "moe_intermediate_size must be positive");
  require(x.first_k_dense_replace < num_hidden_layers, name, "first_k_dense_replace must leave at least one MoE layer");
  m.name = std::move(name);
  m.family = "deepseek_v3";
  m.first_layer = x.first_k_dense_replace;
  m.num_layers = num_hidden_layers - x.first_k_dense_replace;
  const Hyper& hh = m.hyper;
  const std::uint64_t d = hh.hidden_size;
  m.pre.push_back(embedding("model.embed_tokens.weight", hh.vocab_size, d));
  // The dense layers, after the embedding, under their canonical names.
  for (std::uint64_t i = 0; i < x.first_k_dense_replace; ++i) {
    const std::string p = m.layer_prefix + std::to_string(i) + ".";
    add_mla(m.pre, hh, x, p);
    add_swiglu(m.pre, p + "mlp.", d, hh.intermediate_size);
    m.pre.push_back(norm(p + "input_layernorm.weight", d));
    m.pre.push_back(norm(p + "post_attention_layernorm.weight", d));
  }
  // The MoE layers: routed experts, the router and its correction bias, the shared experts.
  auto& ts = m.layer.tensors;
  m.layer.expert_prefix = "mlp.experts.";
  add_mla(ts, hh, x);
  for (std::uint64_t e = 0; e < hh.num_experts; ++e)
    add_swiglu(ts, "mlp.experts." + std::to_string(e) + ".", d, x.moe_intermediate_size);
  ts.push_back(linear("mlp.gate.weight", d, hh.num_experts, TensorRole::router_weight));
  // Updated by the load balancing, not by gradients: zero at the start in every recipe.
  TensorSpec correction = bias("mlp.gate.e_score_correction_bias", d, hh.num_experts);
  correction.init = FillSpec::constant(0.0);
  ts.push_back(correction);
  if (x.n_shared_experts > 0) add_swiglu(ts, "mlp.shared_experts.", d, x.moe_intermediate_size * x.n_shared_experts);
  ts.push_back(norm("input_layernorm.weight", d));
  ts.push_back(norm("post_attention_layernorm.weight", d));
  m.post.push_back(norm("model.norm.weight", d));
  if (!hh.tie_word_embeddings) m.post.push_back(linear("lm_head.weight", d, hh.vocab_size, TensorRole::head_weight));
  return m;
}

ModelSpec gpt2_spec(std::string name, const Hyper& hyper, std::uint64_t num_layers) {
  ModelSpec m;
  m.hyper = attention_defaults(name, hyper);
  require(m.hyper.num_kv_heads == m.hyper.num_heads, name, "GPT-2 has no grouped-query attention");
  require(m.hyper.head_dim * m.hyper.num_heads == m.hyper.hidden_size, name, "head_dim * num_heads must be hidden_size");
  require(m.hyper.max_position_embeddings > 0, name, "max_position_embeddings must be positive");
  if (m.hyper.intermediate_size == 0) m.hyper.intermediate_size = 4 * m.hyper.hidden_size;  // n_inner = None
  m.hyper.tie_word_embeddings = true;
  m.hyper.bias = true;
  m.name = std::move(name);
  m.family = "gpt2";
  m.layer_prefix = "transformer.h.";
  m.num_layers = num_layers;
  const Hyper& h = m.hyper;
  const std::uint64_t d = h.hidden_size, ff = h.intermediate_size;
  m.pre.push_back(embedding("transformer.wte.weight", h.vocab_size, d));
  m.pre.push_back(embedding("transformer.wpe.weight", h.max_position_embeddings, d, TensorRole::position_embedding));
  auto& ts = m.layer.tensors;
  auto add = [&](const std::string& base, std::uint64_t in, std::uint64_t out, TensorRole role) {
    ts.push_back(conv1d(base + ".weight", in, out, role));
    ts.push_back(bias(base + ".bias", in, out));
  };
  ts.push_back(norm("ln_1.weight", d));
  ts.push_back(norm("ln_1.bias", d, TensorRole::norm_bias));
  add("attn.c_attn", d, 3 * d, TensorRole::linear_weight);
  add("attn.c_proj", d, d, TensorRole::output_weight);
  ts.push_back(norm("ln_2.weight", d));
  ts.push_back(norm("ln_2.bias", d, TensorRole::norm_bias));
  add("mlp.c_fc", d, ff, TensorRole::linear_weight);
  add("mlp.c_proj", ff, d, TensorRole::output_weight);
  m.post.push_back(norm("transformer.ln_f.weight", d));
  m.post.push_back(norm("transformer.ln_f.bias", d, TensorRole::norm_bias));
  return m;
}

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

// deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers of which 3 dense (intermediate 18432),
// 256 routed experts of 2048 and 1 shared, 8 per token, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
// qk_nope 128 + qk_rope 64, v 128, vocab 129280.
ModelSpec deepseek_v3() {
  Hyper h = llama_hyper(129280, 7168, 18432, 128, 128, 163840, 10000.0);
  h.norm_eps = 1e-6;
  h.num_experts = 256;
  h.experts_per_token = 8;
  return deepseek_v3_spec("deepseek-v3", h, DeepseekDims{1536, 512, 128, 64, 128, 2048, 1, 3}, 61);
}

ModelSpec deepseek_v3_tiny() {
  Hyper h = llama_hyper(512, 64, 128, 4, 4, 256, 10000.0);
  h.norm_eps = 1e-6;
  h.num_experts = 4;
  h.experts_per_token = 2;
  return deepseek_v3_spec("deepseek-v3-tiny", h, DeepseekDims{32, 16, 16, 8, 16, 32, 1, 1}, 3);
}

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
    {"mixtral-8x7b", [] { return mixtral_spec("mixtral-8x7b", mixtral_hyper(32000, 4096, 14336, 32, 8, 8, 2), 32); }},
    {"qwen2.5-7b", [] { return llama_spec("qwen2.5-7b", qwen2_hyper(152064, 3584, 18944, 28, 4, 131072), 28, "qwen2"); }},
    {"gemma-2-9b", [] { return gemma2_spec("gemma-2-9b", gemma2_hyper(256000, 3584, 14336, 16, 8, 256), 42); }},
    {"deepseek-v3", deepseek_v3},
    // Small models of each family for tests: same structure, a few hundred thousand parameters.
    {"llama-tiny", [] { return llama_spec("llama-tiny", llama_hyper(512, 64, 176, 4, 2, 256, 10000.0), 4); }},
    {"gpt2-tiny", [] {
       Hyper h = gpt2_hyper(64, 4);
       h.vocab_size = 512;
       h.max_position_embeddings = 128;
       return gpt2_spec("gpt2-tiny", h, 2);
     }},
    {"mixtral-tiny", [] { return mixtral_spec("mixtral-tiny", mixtral_hyper(512, 64, 128, 4, 2, 4, 2), 2); }},
    {"qwen2.5-tiny", [] { return llama_spec("qwen2.5-tiny", qwen2_hyper(512, 64, 176, 4, 2, 256), 2, "qwen2"); }},
    // head_dim 32 x 4 heads = 128 != hidden 64, as gemma-2-9b's 256 x 16 != 3584.
    {"gemma-2-tiny", [] { return gemma2_spec("gemma-2-tiny", gemma2_hyper(512, 64, 128, 4, 2, 32), 2); }},
    {"deepseek-v3-tiny", deepseek_v3_tiny},
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
  throw std::invalid_argument("unknown preset '" + printable(name) + "' (valid: " + valid + ")");
}

}  // namespace layerinit
