// Model families, with the tensor names, shapes and module order of transformers' modeling_*.py
// (tests/python/hf_meta.py builds each in transformers on the meta device and compares).
#include <layerinit/init/families.hpp>

#include <stdexcept>

#include <layerinit/core/shape.hpp>

#include <layerinit/core/errors.hpp>

#include "family_record.hpp"

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

// Products of config numbers: std::overflow_error rather than a wrapped shape.
std::uint64_t mul(std::uint64_t a, std::uint64_t b) { return checked_mul(a, b, "a layer dimension"); }
std::uint64_t add(std::uint64_t a, std::uint64_t b) { return checked_add(a, b, "a layer dimension"); }

void require(bool ok, const std::string& name, const std::string& what) {
  if (!ok) bad_argument("model", name, ": " + what);
}

// Fills the defaults a transformer config leaves implicit: kv heads = heads, head_dim = hidden / heads.
Hyper attention_defaults(const std::string& name, Hyper h) {
  require(h.vocab_size > 0, name, "vocab_size must be positive");
  require(h.hidden_size > 0, name, "hidden_size must be positive");
  require(h.num_heads > 0, name, "num_heads must be positive");
  if (h.num_kv_heads == 0) h.num_kv_heads = h.num_heads;
  if (const auto p = hyper_problem(h)) bad_argument("model", name, ": " + p->field + " " + p->message);
  if (h.head_dim == 0) h.head_dim = h.hidden_size / h.num_heads;
  return h;
}

// The tensors of one decoder layer (relative names after prefix p), or of a dense layer before the
// MoE layers (dense = true: a SwiGLU of Hyper.intermediate_size wherever the layout has experts).
class LayerWriter {
 public:
  LayerWriter(const Hyper& h, const DecoderLayout& l) : h_(h), l_(l) {}

  void write(std::vector<TensorSpec>& ts, const std::string& p, bool dense) const {
    if (l_.latent) latent_attention(ts, p);
    else attention(ts, p);
    if (l_.moe == MoeKind::none || dense) swiglu(ts, p + "mlp.", h_.intermediate_size, l_.mlp_bias);
    else experts(ts, p);
    if (l_.input_norm) ts.push_back(norm_of(p + "input_layernorm.weight", h_.hidden_size));
    if (l_.post_attention_norm) ts.push_back(norm_of(p + "post_attention_layernorm.weight", h_.hidden_size));
    if (l_.pre_feedforward_norm) ts.push_back(norm_of(p + "pre_feedforward_layernorm.weight", h_.hidden_size));
    if (l_.post_feedforward_norm) ts.push_back(norm_of(p + "post_feedforward_layernorm.weight", h_.hidden_size));
  }

  TensorSpec norm_of(std::string name, std::uint64_t d) const {
    TensorSpec t = norm(std::move(name), d);
    if (l_.zero_centered_norms) t.init = FillSpec::constant(0.0);
    return t;
  }

  std::uint64_t expert_width() const { return l_.moe_intermediate_size ? l_.moe_intermediate_size : h_.intermediate_size; }

 private:
  void projection(std::vector<TensorSpec>& ts, const std::string& name, std::uint64_t in, std::uint64_t out, bool with_bias,
                  TensorRole role = TensorRole::linear_weight) const {
    ts.push_back(linear(name + ".weight", in, out, role));
    if (with_bias) ts.push_back(bias(name + ".bias", in, out));
  }
  // A map tensor parallelism keeps whole (TensorSpec::tp_replicated), its bias with it.
  void whole_projection(std::vector<TensorSpec>& ts, const std::string& name, std::uint64_t in, std::uint64_t out,
                        bool with_bias) const {
    projection(ts, name, in, out, with_bias);
    ts[ts.size() - (with_bias ? 2 : 1)].tp_replicated = true;
  }

  void attention(std::vector<TensorSpec>& ts, const std::string& p) const {
    const std::uint64_t d = h_.hidden_size, q = mul(h_.num_heads, h_.head_dim), kv = mul(h_.num_kv_heads, h_.head_dim);
    const std::string a = p + "self_attn.";
    if (l_.sinks) ts.push_back(TensorSpec{a + "sinks", {h_.num_heads}, TensorRole::other, 0, 0, false, std::nullopt});
    if (l_.fused_qkv) {  // Phi3Attention registers o_proj first
      projection(ts, a + "o_proj", q, d, l_.o_bias, TensorRole::output_weight);
      whole_projection(ts, a + "qkv_proj", d, add(q, mul(2, kv)), l_.qkv_bias);  // [q; k; v]
    } else {
      projection(ts, a + "q_proj", d, q, l_.qkv_bias);
      projection(ts, a + "k_proj", d, kv, l_.qkv_bias);
      projection(ts, a + "v_proj", d, kv, l_.qkv_bias);
      projection(ts, a + "o_proj", q, d, l_.o_bias, TensorRole::output_weight);
    }
    if (l_.qk_norm == QkNorm::head) {
      ts.push_back(norm_of(a + "q_norm.weight", h_.head_dim));
      ts.push_back(norm_of(a + "k_norm.weight", h_.head_dim));
    } else if (l_.qk_norm == QkNorm::whole) {
      ts.push_back(norm_of(a + "q_norm.weight", q));
      ts.push_back(norm_of(a + "k_norm.weight", kv));
    }
  }

  // DeepseekV3Attention: attention_bias puts biases on q_a_proj, kv_a_proj_with_mqa and o_proj.
  void latent_attention(std::vector<TensorSpec>& ts, const std::string& p) const {
    const LatentAttention& x = *l_.latent;
    const std::uint64_t d = h_.hidden_size, H = h_.num_heads, qk = h_.head_dim;
    const std::string a = p + "self_attn.";
    if (x.q_lora_rank == 0) {
      projection(ts, a + "q_proj", d, mul(H, qk), false);
    } else {
      whole_projection(ts, a + "q_a_proj", d, x.q_lora_rank, l_.qkv_bias);  // q_a_layernorm reads it
      ts.push_back(norm(a + "q_a_layernorm.weight", x.q_lora_rank));
      projection(ts, a + "q_b_proj", x.q_lora_rank, mul(H, qk), false);
    }
    whole_projection(ts, a + "kv_a_proj_with_mqa", d, add(x.kv_lora_rank, x.qk_rope_head_dim), l_.qkv_bias);
    ts.push_back(norm(a + "kv_a_layernorm.weight", x.kv_lora_rank));
    projection(ts, a + "kv_b_proj", x.kv_lora_rank, mul(H, add(x.qk_nope_head_dim, x.v_head_dim)), false);
    projection(ts, a + "o_proj", mul(H, x.v_head_dim), d, l_.o_bias, TensorRole::output_weight);
  }

  void swiglu(std::vector<TensorSpec>& ts, const std::string& p, std::uint64_t ff, bool with_bias) const {
    const std::uint64_t d = h_.hidden_size;
    if (l_.fused_gate_up) {  // Phi3MLP: gate and up stacked in one Linear [2 F, d]
      whole_projection(ts, p + "gate_up_proj", d, mul(2, ff), with_bias);
    } else {
      projection(ts, p + "gate_proj", d, ff, with_bias);
      projection(ts, p + "up_proj", d, ff, with_bias);
    }
    projection(ts, p + "down_proj", ff, d, with_bias, TensorRole::output_weight);
  }

  void experts(std::vector<TensorSpec>& ts, const std::string& p) const {
    const std::uint64_t d = h_.hidden_size, E = h_.num_experts, ff = expert_width(), ff2 = mul(2, ff);
    switch (l_.moe) {
      case MoeKind::mixtral:
        ts.push_back(linear(p + "block_sparse_moe.gate.weight", d, E, TensorRole::router_weight));
        for (std::uint64_t e = 0; e < E; ++e) {
          const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
          ts.push_back(linear(x + "w1.weight", d, ff));                            // gate
          ts.push_back(linear(x + "w2.weight", ff, d, TensorRole::output_weight));  // down
          ts.push_back(linear(x + "w3.weight", d, ff));                            // up
        }
        break;
      case MoeKind::routed: {
        for (std::uint64_t e = 0; e < E; ++e) swiglu(ts, p + "mlp.experts." + std::to_string(e) + ".", ff, false);
        ts.push_back(linear(p + "mlp.gate.weight", d, E, TensorRole::router_weight));
        if (l_.correction_bias) {
          // Updated by the load balancing, not by gradients: zero at the start in every recipe.
          TensorSpec c = bias(p + "mlp.gate.e_score_correction_bias", d, E);
          c.init = FillSpec::constant(0.0);
          c.buffer = true;
          ts.push_back(c);
        }
        // DeepseekV3MoE and Glm4MoeMoE make shared_experts of width moe_intermediate_size *
        // n_shared_experts even at 0: tensors of zero elements, which a checkpoint must hold to load.
        if (l_.shared_experts_always || l_.shared_experts > 0)
          swiglu(ts, p + "mlp.shared_experts.", mul(ff, l_.shared_experts), false);
        break;
      }
      case MoeKind::gpt_oss: {
        // GptOssExperts keeps [E, in, out] tensors: no Linear, so not transposable.
        ts.push_back(linear(p + "mlp.router.weight", d, E, TensorRole::router_weight));
        ts.push_back(bias(p + "mlp.router.bias", d, E));
        const std::string x = p + "mlp.experts.";
        ts.push_back(TensorSpec{x + "gate_up_proj", {E, d, ff2}, TensorRole::linear_weight, d, ff2, false, std::nullopt});
        ts.back().tp_replicated = true;  // gate and up interleaved along the output
        ts.push_back(TensorSpec{x + "gate_up_proj_bias", {E, ff2}, TensorRole::linear_bias, d, ff2, false, std::nullopt});
        ts.push_back(TensorSpec{x + "down_proj", {E, ff, d}, TensorRole::output_weight, ff, d, false, std::nullopt});
        ts.push_back(TensorSpec{x + "down_proj_bias", {E, d}, TensorRole::linear_bias, ff, d, false, std::nullopt});
        break;
      }
      case MoeKind::none: break;
    }
  }

  const Hyper& h_;
  const DecoderLayout& l_;
};

}  // namespace

// The helpers above for the family records in files of their own (family_record.hpp).
TensorSpec hf::linear_tensor(std::string name, std::uint64_t in, std::uint64_t out, TensorRole role) {
  return linear(std::move(name), in, out, role);
}
TensorSpec hf::bias_tensor(std::string name, std::uint64_t in, std::uint64_t out) { return bias(std::move(name), in, out); }
TensorSpec hf::norm_tensor(std::string name, std::uint64_t d, TensorRole role) { return norm(std::move(name), d, role); }
TensorSpec hf::embedding_tensor(std::string name, std::uint64_t rows, std::uint64_t d, TensorRole role) {
  return embedding(std::move(name), rows, d, role);
}

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

std::optional<HyperProblem> decoder_size_problem(const Hyper& hyper, const DecoderLayout& l, std::uint64_t num_hidden_layers) {
  Hyper h = hyper;
  if (h.num_kv_heads == 0) h.num_kv_heads = h.num_heads;
  if (h.head_dim == 0 && h.num_heads > 0) h.head_dim = h.hidden_size / h.num_heads;
  // The layer written with 0 and 1 experts: what an expert adds, from the one writer that lists
  // them, without making E of them.
  auto tensors = [&](std::uint64_t experts, bool dense) {
    Hyper p = h;
    p.num_experts = experts;
    std::vector<TensorSpec> ts;
    LayerWriter(p, l).write(ts, "", dense);
    return static_cast<std::uint64_t>(ts.size());
  };
  const std::uint64_t base = tensors(0, false), per_expert = l.moe == MoeKind::none ? 0 : tensors(1, false) - base;
  const std::uint64_t layer = saturating_add(base, saturating_mul(h.num_experts, per_expert));
  const std::string most = "; a spec lists at most " + std::to_string(kMaxSpecTensors);
  auto n = [](std::uint64_t v) { return v == UINT64_MAX ? std::string("2^64 or more") : std::to_string(v); };  // saturated
  if (layer > kMaxSpecTensors)
    return HyperProblem{"num_experts", std::to_string(h.num_experts) + " experts make " + n(layer) +
                                           " tensors in a layer" + most};
  const std::uint64_t dense = l.dense_layers > 0 ? saturating_mul(l.dense_layers, tensors(0, true)) : 0;
  if (saturating_add(saturating_add(dense, layer), 3) > kMaxSpecTensors)  // 3: embedding, final norm, lm_head
    return HyperProblem{"dense_layers", std::to_string(l.dense_layers) + " dense layers before the MoE layers of " +
                                            std::to_string(num_hidden_layers) + " make " + n(dense) +
                                            " tensors" + most};
  return std::nullopt;
}

ModelSpec decoder_spec(std::string name, std::string family, const Hyper& hyper, const DecoderLayout& l,
                       std::uint64_t num_hidden_layers) {
  Hyper h = hyper;
  if (l.latent)  // a query head's width
    h.head_dim = add(l.latent->qk_nope_head_dim, l.latent->qk_rope_head_dim);
  h = attention_defaults(name, h);
  if (const auto p = decoder_size_problem(h, l, num_hidden_layers)) bad_argument("model", name, ": " + p->field + " " + p->message);
  require(h.intermediate_size > 0 || (l.moe != MoeKind::none && l.moe_intermediate_size > 0 && l.dense_layers == 0), name,
          "intermediate_size must be positive");
  if (l.latent) {
    const LatentAttention& x = *l.latent;
    require(x.kv_lora_rank > 0 && x.qk_nope_head_dim > 0 && x.qk_rope_head_dim > 0 && x.v_head_dim > 0, name,
            "kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim and v_head_dim must be positive");
  }
  if (l.moe != MoeKind::none) {
    require(h.num_experts > 0, name, "num_experts must be positive");
    require(l.dense_layers < num_hidden_layers, name, "the dense layers must leave at least one MoE layer");
  } else {
    require(l.dense_layers == 0 && l.shared_experts == 0 && !l.shared_experts_always && !l.correction_bias, name, "dense layers, shared experts and a "
            "correction bias need experts");
  }
  ModelSpec m;
  m.name = std::move(name);
  m.family = std::move(family);
  m.hyper = h;
  m.first_layer = l.dense_layers;
  m.num_layers = num_hidden_layers - l.dense_layers;
  const LayerWriter w(m.hyper, l);
  const std::uint64_t d = h.hidden_size;
  m.pre.push_back(embedding("model.embed_tokens.weight", h.vocab_size, d));
  for (std::uint64_t i = 0; i < l.dense_layers; ++i) w.write(m.pre, m.layer_prefix + std::to_string(i) + ".", true);
  if (l.moe != MoeKind::none) {
    m.layer.expert_prefix = l.moe == MoeKind::mixtral  ? "block_sparse_moe.experts."
                            : l.moe == MoeKind::routed ? "mlp.experts."
                                                       : "";  // gpt-oss: fused tensors, no per-expert ones
    require(w.expert_width() > 0, m.name, "the experts' intermediate size must be positive");
  }
  w.write(m.layer.tensors, "", false);
  m.post.push_back(w.norm_of("model.norm.weight", d));
  if (!h.tie_word_embeddings) m.post.push_back(linear("lm_head.weight", d, h.vocab_size, TensorRole::head_weight));
  return m;
}

ModelSpec llama_spec(std::string name, const Hyper& h, std::uint64_t num_layers, std::string family) {
  DecoderLayout l;
  l.qkv_bias = h.bias;
  return decoder_spec(std::move(name), std::move(family), h, l, num_layers);
}

ModelSpec gpt2_spec(std::string name, const Hyper& hyper, std::uint64_t num_layers) {
  ModelSpec m;
  m.hyper = attention_defaults(name, hyper);
  require(m.hyper.num_kv_heads == m.hyper.num_heads, name, "GPT-2 has no grouped-query attention");
  require(m.hyper.head_dim * m.hyper.num_heads == m.hyper.hidden_size, name, "head_dim * num_heads must be hidden_size");
  require(m.hyper.max_position_embeddings > 0, name, "max_position_embeddings must be positive");
  if (m.hyper.intermediate_size == 0) m.hyper.intermediate_size = mul(4, m.hyper.hidden_size);  // n_inner = None
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
  add("attn.c_attn", d, mul(3, d), TensorRole::linear_weight);
  ts[ts.size() - 2].tp_replicated = true;  // [q, k, v] side by side along the output (docs/sharding.md)
  add("attn.c_proj", d, d, TensorRole::output_weight);
  ts.push_back(norm("ln_2.weight", d));
  ts.push_back(norm("ln_2.bias", d, TensorRole::norm_bias));
  add("mlp.c_fc", d, ff, TensorRole::linear_weight);
  add("mlp.c_proj", ff, d, TensorRole::output_weight);
  m.post.push_back(norm("transformer.ln_f.weight", d));
  m.post.push_back(norm("transformer.ln_f.bias", d, TensorRole::norm_bias));
  return m;
}

}  // namespace layerinit
