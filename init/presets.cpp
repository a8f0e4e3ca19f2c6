// Model families and named presets, with the tensor names and shapes of the Hugging Face models.
//
// Sources of the numbers: each preset's config.json on the Hugging Face Hub (openai-community/gpt2*,
// meta-llama/Meta-Llama-3-{8B,70B}, mistralai/Mistral-7B-v0.1, mistralai/Mixtral-8x7B-v0.1); names and
// module order from transformers' modeling_{gpt2,llama,mistral,mixtral}.py.
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
    {"mistral-7b", [] { return llama_spec("mistral-7b", llama_hyper(32000, 4096, 14336, 32, 8, 32768, 10000.0), 32, "mistral"); }},
    {"mixtral-8x7b", [] { return mixtral_spec("mixtral-8x7b", mixtral_hyper(32000, 4096, 14336, 32, 8, 8, 2), 32); }},
    // Small models of each family for tests: same structure, a few hundred thousand parameters.
    {"llama-tiny", [] { return llama_spec("llama-tiny", llama_hyper(512, 64, 176, 4, 2, 256, 10000.0), 4); }},
    {"gpt2-tiny", [] {
       Hyper h = gpt2_hyper(64, 4);
       h.vocab_size = 512;
       h.max_position_embeddings = 128;
       return gpt2_spec("gpt2-tiny", h, 2);
     }},
    {"mixtral-tiny", [] { return mixtral_spec("mixtral-tiny", mixtral_hyper(512, 64, 128, 4, 2, 4, 2), 2); }},
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
