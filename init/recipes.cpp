// Init recipes: the fill each tensor gets in the codebase a recipe is named after (docs/recipes.md).
#include <layerinit/init/recipes.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

#include <nlohmann/json.hpp>

#include "family_record.hpp"
#include "haiku_names.hpp"

namespace layerinit {

namespace {

[[noreturn]] void no_rule(const char* recipe, const TensorContext& c, const char* why = nullptr) {
  bad_argument("recipe", recipe,
               ": no rule for tensor " + quote(c.canonical_name) + " (role " + std::string(role_name(c.tensor.role)) + ")" +
                   (why ? std::string(": ") + why : "") + "; give it an init or an override");
}

// fan_in as the spec gives it, else PyTorch's _calculate_fan_in_and_fan_out on the shape.
double fan_in(const char* recipe, const TensorContext& c) {
  const auto& t = c.tensor;
  if (t.fan_in > 0) return static_cast<double>(t.fan_in);
  if (t.shape.size() >= 2) {
    double n = static_cast<double>(t.shape[1]);
    for (std::size_t i = 2; i < t.shape.size(); ++i) n *= static_cast<double>(t.shape[i]);
    return n;
  }
  no_rule(recipe, c, "fan_in is unknown");
}
double fan_out(const char* recipe, const TensorContext& c) {
  const auto& t = c.tensor;
  if (t.fan_out > 0) return static_cast<double>(t.fan_out);
  if (t.shape.size() >= 2) {
    double n = static_cast<double>(t.shape[0]);
    for (std::size_t i = 2; i < t.shape.size(); ++i) n *= static_cast<double>(t.shape[i]);
    return n;
  }
  no_rule(recipe, c, "fan_out is unknown");
}
// Embeddings are not maps; PyTorch's fan convention on [rows, features] gives fan_in = features.
double embedding_fan_in(const TensorContext& c) { return static_cast<double>(c.tensor.shape.back()); }
double embedding_fan_out(const TensorContext& c) { return static_cast<double>(c.tensor.shape.front()); }

// L: the model's depth, layers before the repeated block included.
double num_layers(const TensorContext& c) {
  return static_cast<double>(c.model.total_layers() > 0 ? c.model.total_layers() : 1);
}

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// Norms are ones, norm biases zeros, in every recipe here.
std::optional<FillSpec> norm_rule(const TensorContext& c) {
  if (c.tensor.role == TensorRole::norm_weight) return FillSpec::constant(1.0);
  if (c.tensor.role == TensorRole::norm_bias) return FillSpec::constant(0.0);
  return std::nullopt;
}

// ---- hf: transformers' PreTrainedModel._init_weights ----
FillSpec hf_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  const double r = c.model.hyper.initializer_range;
  // What the family's own _init_weights adds, as its record says (none for an MLP or a custom spec).
  const hf::FamilyRecord* family = hf::find_family(c.model.family);
  const hf::HfInitQuirks quirks = family ? family->hf_init : hf::HfInitQuirks{};
  switch (c.tensor.role) {
    case TensorRole::linear_bias:
      if (quirks.sinks_and_router_bias_drawn && ends_with(c.tensor.name, "mlp.router.bias")) return FillSpec::normal(0.0, r);
      return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding:
    case TensorRole::linear_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: return FillSpec::normal(0.0, r);
    case TensorRole::output_weight:
      if (quirks.depth_scaled_outputs) return FillSpec::normal(0.0, r / std::sqrt(2.0 * num_layers(c)));
      return FillSpec::normal(0.0, r);
    case TensorRole::other:
      if (quirks.sinks_and_router_bias_drawn && ends_with(c.tensor.name, "self_attn.sinks")) return FillSpec::normal(0.0, r);
      no_rule("hf", c);
    default: no_rule("hf", c);
  }
}

// ---- torchtitan 0.3.0: each model package's __init__.py sets every module's param_init ----
// qwen3 and qwen3_moe (models/qwen3/__init__.py): normal(0, 0.02) for every linear, the router, the
// head and the embedding; the MoE flavours draw the residual outputs (wo, experts' w2) with
// 0.02 / sqrt(2 L), Megatron's scaled init.
FillSpec torchtitan_qwen3_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::linear_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: return FillSpec::normal(0.0, 0.02);
    case TensorRole::output_weight:
      if (c.model.hyper.num_experts > 0) return FillSpec::normal(0.0, 0.02 / std::sqrt(2.0 * num_layers(c)));
      return FillSpec::normal(0.0, 0.02);
    default: no_rule("torchtitan", c);
  }
}

// llama3 and deepseek_v3 (models/llama3/__init__.py, models/deepseek_v3/__init__.py; depth_scaled_std
// in models/common/param_init.py). Its w1/w2/w3 are HF's gate/down/up: w2 (down, role
// output_weight) and w3 (up) are depth-scaled. Phi-3's gate_up_proj holds w1 and w3 in one tensor and
// one fill: it takes w1's (gate's) rule.
bool is_up_projection(const TensorContext& c) {
  const auto& n = c.tensor.name;
  return (ends_with(n, "up_proj.weight") && !ends_with(n, "gate_up_proj.weight")) || n == "w3.weight" ||
         ends_with(n, ".w3.weight") || n == "w3_EFD" || ends_with(n, ".w3_EFD");  // torchtitan's stacked experts
}
FillSpec torchtitan_rule(const TensorContext& c) {
  if (c.model.family == "qwen3" || c.model.family == "qwen3_moe") return torchtitan_qwen3_rule(c);
  if (auto n = norm_rule(c)) return *n;
  // depth_init: 0.02 / sqrt(2 (layer_id + 1)); tensors outside the repeated block use n_layers.
  const double depth_std = c.layer ? 0.02 / std::sqrt(2.0 * (static_cast<double>(*c.layer) + 1.0))
                                   : 0.02 / std::sqrt(2.0 * num_layers(c));
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding: return FillSpec::normal(0.0, 1.0);  // nn.init.normal_(tok_embeddings)
    case TensorRole::position_embedding: return FillSpec::normal(0.0, 1.0);
    case TensorRole::linear_weight:
      if (is_up_projection(c)) return FillSpec::trunc_normal(0.0, depth_std, -2.0, 2.0);
      return FillSpec::trunc_normal(0.0, 0.02, -2.0, 2.0);
    case TensorRole::output_weight:
    case TensorRole::router_weight: return FillSpec::trunc_normal(0.0, depth_std, -2.0, 2.0);
    case TensorRole::head_weight: {
      // final_out_std = dim ** -0.5, cut at +-3 std.
      const double s = 1.0 / std::sqrt(fan_in("torchtitan", c));
      return FillSpec::trunc_normal_std(0.0, s, -3.0, 3.0);
    }
    default: no_rule("torchtitan", c);
  }
}

// ---- megatron: init_method_normal / scaled_init_method_normal (docs/recipes.md, megatron-core 0.16.1):
// TransformerConfig's default init methods, by megatron_init_field ----
FillSpec megatron_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  const double s = c.model.hyper.initializer_range;  // init_method_std, every init method's σ by default
  const std::string_view field = megatron_init_field(c.tensor.role, c.tensor.name);
  if (field == "init_method" || field == "embedding_init_method") return FillSpec::normal(0.0, s);
  if (field == "output_layer_init_method") return FillSpec::normal(0.0, s / std::sqrt(2.0 * num_layers(c)));
  if (c.tensor.role == TensorRole::linear_bias) return FillSpec::constant(0.0);
  no_rule("megatron", c);
}

// ---- pytorch-default (nn.Linear.reset_parameters, nn.Embedding) and equinox (eqx.nn.Linear,
// eqx.nn.Embedding): the same rule in both sources. Embeddings normal(0, 1); every weight and bias
// U(+-1/sqrt(fan_in)): PyTorch's kaiming_uniform_(a=sqrt(5)) has gain sqrt(2 / 6) and bound
// sqrt(3) gain / sqrt(fan_in) = 1 / sqrt(fan_in), which is Equinox's bound too. ----
FillSpec fan_in_uniform_rule(const char* recipe, const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  switch (c.tensor.role) {
    case TensorRole::embedding:
    case TensorRole::position_embedding: return FillSpec::normal(0.0, 1.0);
    case TensorRole::linear_weight:
    case TensorRole::output_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight:
    case TensorRole::linear_bias: {
      const double b = 1.0 / std::sqrt(fan_in(recipe, c));
      return FillSpec::uniform(-b, b);
    }
    default: no_rule(recipe, c);
  }
}
FillSpec pytorch_rule(const TensorContext& c) { return fan_in_uniform_rule("pytorch-default", c); }
FillSpec equinox_rule(const TensorContext& c) { return fan_in_uniform_rule("equinox", c); }

// ---- flax: nn.Dense (lecun_normal kernel, zero bias), nn.Embed (variance_scaling(1, fan_in, normal)) ----
FillSpec flax_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding: return FillSpec::normal(0.0, std::sqrt(1.0 / embedding_fan_in(c)));
    case TensorRole::linear_weight:
    case TensorRole::output_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: {
      // variance_scaling(1, "fan_in", "truncated_normal"): a standard normal cut at +-2, times
      // sqrt(1 / fan_in) / .87962566103423978 (the std of that truncated normal).
      const double s = std::sqrt(1.0 / fan_in("flax", c)) / 0.87962566103423978;
      return FillSpec::trunc_normal_std(0.0, s, -2.0, 2.0);
    }
    default: no_rule("flax", c);
  }
}

// ---- xavier-uniform: nn.init.xavier_uniform_ on every weight, zero biases ----
FillSpec xavier_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  double fi = 0, fo = 0;
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding: fi = embedding_fan_in(c), fo = embedding_fan_out(c); break;
    case TensorRole::linear_weight:
    case TensorRole::output_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: fi = fan_in("xavier-uniform", c), fo = fan_out("xavier-uniform", c); break;
    default: no_rule("xavier-uniform", c);
  }
  const double b = std::sqrt(6.0 / (fi + fo));
  return FillSpec::uniform(-b, b);
}

// ---- kaiming-normal: nn.init.kaiming_normal_ (fan_in, gain sqrt(2)) on every weight, zero biases ----
FillSpec kaiming_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  double fi = 0;
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding: fi = embedding_fan_in(c); break;
    case TensorRole::linear_weight:
    case TensorRole::output_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: fi = fan_in("kaiming-normal", c); break;
    default: no_rule("kaiming-normal", c);
  }
  return FillSpec::normal(0.0, std::sqrt(2.0 / fi));
}

// ---- OLMo-core: olmo_core/nn/transformer/init.py InitMethod, attention/__init__.py
// Attention.init_weights. Every linear weight is trunc_normal(0, s, +-3 s) (init_linear); `s` starts
// at the recipe's std (init_std, 0.02). ----
enum class Olmo { normal, llama, llama_depth, normalized };

double hidden_size(const char* recipe, const TensorContext& c) {
  if (c.model.hyper.hidden_size == 0) no_rule(recipe, c, "hyper.hidden_size is unknown");
  return static_cast<double>(c.model.hyper.hidden_size);
}

bool is_expert(const TensorContext& c) { return c.layer && split_expert_name(c.model.layer, c.tensor.name).has_value(); }

FillSpec olmo_rule(const char* recipe, Olmo kind, const TensorContext& c, const RecipeParams& p) {
  if (auto n = norm_rule(c)) return *n;
  const double s = p.at("std");
  auto trunc = [](double std) { return FillSpec::trunc_normal_std(0.0, std, -3.0, 3.0); };
  // The std of "output" layers: by depth (llama), by layer index (llama_depth); tensors outside the
  // blocks have no index and take the depth rule.
  const double L = num_layers(c);
  auto scaled = [&](double std) {
    if (kind == Olmo::llama || (kind == Olmo::llama_depth && !c.layer)) return std / std::sqrt(2.0 * L);
    if (kind == Olmo::llama_depth) return std / std::sqrt(2.0 * (static_cast<double>(*c.layer) + 1.0));
    return std;
  };
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding:
      if (kind == Olmo::llama || kind == Olmo::llama_depth) return FillSpec::normal(0.0, 1.0);
      if (kind == Olmo::normalized) return FillSpec::normal(0.0, 1.0 / std::sqrt(hidden_size(recipe, c)));
      return trunc(s);
    case TensorRole::head_weight:  // init_final_w_out
      return trunc(kind == Olmo::normal ? s : 1.0 / std::sqrt(hidden_size(recipe, c)));
    case TensorRole::router_weight:  // init_feed_forward_moe: router and experts alike, no nGPT case
      return trunc(scaled(s));
    case TensorRole::linear_weight:
    case TensorRole::output_weight: {
      if (is_expert(c)) return trunc(scaled(s));
      // init_attention / init_feed_forward: w_q, w_k, w_v, w1 keep s (nGPT: d^-0.5); w3 (up) is
      // scaled like w_out and w2 except in nGPT, which scales only w_out and w2 by sqrt(2 L).
      const double base = kind == Olmo::normalized ? 1.0 / std::sqrt(hidden_size(recipe, c)) : s;
      if (c.tensor.role == TensorRole::output_weight)
        return trunc(kind == Olmo::normalized ? base / std::sqrt(2.0 * L) : scaled(base));
      if (is_up_projection(c) && kind != Olmo::normalized) return trunc(scaled(base));
      return trunc(base);
    }
    default: no_rule(recipe, c);
  }
}

// ---- neox: GPT-NeoX megatron/model/init_functions.py, init_method = small_init on every weight
// (embeddings and the final linear too), output_layer_init_method = wang_init on the projections into
// the residual stream ----
FillSpec neox_rule(const TensorContext& c, const RecipeParams&) {
  if (auto n = norm_rule(c)) return *n;
  const double d = hidden_size("neox", c);
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding:
    case TensorRole::linear_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: return FillSpec::normal(0.0, std::sqrt(2.0 / (5.0 * d)));  // small_init
    case TensorRole::output_weight: return FillSpec::normal(0.0, 2.0 / num_layers(c) / std::sqrt(d));  // wang_init
    default: no_rule("neox", c);
  }
}

// ---- mpt: llm-foundry llmfoundry/models/utils/param_init_fns.py neox_param_init_fn_: small_init's
// std on every weight, and the `_is_residual` projections (attention out_proj, FFN down_proj, the
// experts' w2) divided by n_layers / sqrt(10) ----
FillSpec mpt_rule(const TensorContext& c, const RecipeParams&) {
  if (auto n = norm_rule(c)) return *n;
  const double small = std::sqrt(2.0 / (5.0 * hidden_size("mpt", c)));
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding:
    case TensorRole::linear_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: return FillSpec::normal(0.0, small);
    case TensorRole::output_weight: return FillSpec::normal(0.0, small / (num_layers(c) / std::sqrt(10.0)));
    default: no_rule("mpt", c);
  }
}

// ---- mup: Megatron-LM megatron/core/transformer/transformer_config.py with use_mup: width_mult =
// hidden_size / base_width; hidden weights normal(0, r / sqrt(width_mult)), output layers
// normal(0, r / (sqrt(2 L) sqrt(width_mult))) (megatron/core/utils.py mup_scaled_init_method_normal),
// embeddings and the untied output layer unscaled normal(0, r) ----
FillSpec mup_rule(const TensorContext& c, const RecipeParams& p) {
  if (auto n = norm_rule(c)) return *n;
  const double r = c.model.hyper.initializer_range;
  const double base = p.at("base_width");
  const double m = base > 0 ? hidden_size("mup", c) / base : 1.0;  // 0: base_width = hidden_size
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding:
    case TensorRole::head_weight: return FillSpec::normal(0.0, r);
    case TensorRole::linear_weight:
    case TensorRole::router_weight: return FillSpec::normal(0.0, r / std::sqrt(m));
    case TensorRole::output_weight: return FillSpec::normal(0.0, r / (std::sqrt(2.0 * num_layers(c)) * std::sqrt(m)));
    default: no_rule("mup", c);
  }
}

// ---- haiku: DM-Haiku 0.0.17's own defaults (haiku/_src). hk.Linear (basic.py Linear.__call__): w
// TruncatedNormal(stddev = 1 / sqrt(input_size)), b zeros; hk.ConvND (conv.py ConvND.__call__): w
// TruncatedNormal(stddev = 1 / sqrt(prod(w_shape[:-1]))), the window times the in-channels per group,
// which is the spec's fan_in, b zeros; hk.Embed (embed.py Embed.__init__): TruncatedNormal() =
// stddev 1. TruncatedNormal (initializers.py) draws mean + stddev * Z, Z a standard normal cut at
// lower = -2, upper = 2: trunc_normal_std(0, stddev, -2, 2). Norm scales ones, offsets zeros
// (layer_norm.py LayerNorm, rms_norm.py RMSNorm, batch_norm.py BatchNorm, group_norm.py GroupNorm). ----

// hk.MultiHeadAttention (attention.py) has no default w_init: it raises without one, and the
// deprecated w_init_scale=S means VarianceScaling(S). Its projections are Linears named query, key,
// value (_linear_projection) and linear (the final projection, hk.Linear's default name) right
// inside the module, named multi_head_attention or multi_head_attention_<n> (Haiku's name for the
// n-th further instance): "transformer/multi_head_attention_2/query.w".
// A MultiHeadAttention under a name of its user's (hk.MultiHeadAttention(name="attention")) is found
// by its signature, the four Linears side by side among the spec's tensors ("block/attention/query.w"
// beside "block/attention/key.w", ...).
bool is_haiku_mha_projection(const TensorContext& c) {
  const std::string& n = c.tensor.name;
  const std::size_t dot = n.rfind('.');
  if (dot == std::string::npos) return false;
  return haiku::is_mha_linear(std::string_view(n).substr(0, dot), [&](const std::string& module) {
    const std::string want = module + n.substr(dot);
    for (const auto* list : {&c.model.pre, &c.model.layer.tensors, &c.model.post})
      for (const auto& t : *list)
        if (t.name == want) return true;
    return false;
  });
}

FillSpec haiku_rule(const TensorContext& c, const RecipeParams& p) {
  if (auto n = norm_rule(c)) return *n;
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);  // Linear's and ConvND's b_init, MHA's too
    case TensorRole::embedding:
    case TensorRole::position_embedding: return FillSpec::trunc_normal_std(0.0, 1.0, -2.0, 2.0);
    case TensorRole::linear_weight:
    case TensorRole::output_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: {
      if (is_haiku_mha_projection(c)) {
        const double scale = p.at("mha_w_init_scale");  // 0: not given
        if (scale == 0)
          no_rule("haiku", c,
                  "Haiku's MultiHeadAttention has no default w_init; give the scale of its VarianceScaling as recipe "
                  "'haiku:mha_w_init_scale=S' (as MultiHeadAttention(w_init_scale=S)) or a fill for these names");
        // initializers.py VarianceScaling(scale, "fan_in", "truncated_normal"): variance
        // scale / max(1, fan_in), a TruncatedNormal (+-2) whose stddev is divided by
        // .87962566103423978, the std of a standard normal cut at +-2.
        const double s = std::sqrt(scale / std::max(1.0, fan_in("haiku", c))) / 0.87962566103423978;
        return FillSpec::trunc_normal_std(0.0, s, -2.0, 2.0);
      }
      return FillSpec::trunc_normal_std(0.0, 1.0 / std::sqrt(fan_in("haiku", c)), -2.0, 2.0);
    }
    default: no_rule("haiku", c);
  }
}

struct Param {
  const char* name;
  double default_value;
};
struct Entry {
  const char* name;
  Recipe::Rule rule;
  std::vector<Param> params;
  bool tied_is_head = true;  // Recipe's constructor
};
const std::vector<Entry>& recipes() {
  static const std::vector<Entry> all = {
      {"hf", [](const TensorContext& c, const RecipeParams&) { return hf_rule(c); }, {}},
      {"torchtitan", [](const TensorContext& c, const RecipeParams&) { return torchtitan_rule(c); }, {}},
      {"megatron", [](const TensorContext& c, const RecipeParams&) { return megatron_rule(c); }, {}},
      {"pytorch-default", [](const TensorContext& c, const RecipeParams&) { return pytorch_rule(c); }, {}},
      {"equinox", [](const TensorContext& c, const RecipeParams&) { return equinox_rule(c); }, {}},
      // Flax ties by Embed.attend: no head parameter, the embedding's rule (std d^-0.5) stands.
      {"flax", [](const TensorContext& c, const RecipeParams&) { return flax_rule(c); }, {}, false},
      {"xavier-uniform", [](const TensorContext& c, const RecipeParams&) { return xavier_rule(c); }, {}},
      {"kaiming-normal", [](const TensorContext& c, const RecipeParams&) { return kaiming_rule(c); }, {}},
      {"olmo-normal", [](const TensorContext& c, const RecipeParams& p) { return olmo_rule("olmo-normal", Olmo::normal, c, p); }, {{"std", 0.02}}},
      {"olmo-llama", [](const TensorContext& c, const RecipeParams& p) { return olmo_rule("olmo-llama", Olmo::llama, c, p); }, {{"std", 0.02}}},
      {"olmo-llama-depth", [](const TensorContext& c, const RecipeParams& p) { return olmo_rule("olmo-llama-depth", Olmo::llama_depth, c, p); }, {{"std", 0.02}}},
      {"olmo-normalized", [](const TensorContext& c, const RecipeParams& p) { return olmo_rule("olmo-normalized", Olmo::normalized, c, p); }, {{"std", 0.02}}},
      {"neox", neox_rule, {}},
      {"mpt", mpt_rule, {}},
      {"mup", mup_rule, {{"base_width", 0.0}}},
      // Haiku ties by reusing Embed's matrix (Embed.embeddings): no head parameter, the embedding's rule stands.
      {"haiku", haiku_rule, {{"mha_w_init_scale", 0.0}}, false},
  };
  return all;
}

// "key=value,key=value" into the entry's parameters; the canonical text of what was given.
RecipeParams parse_params(const Entry& e, std::string_view text, std::string& canonical) {
  RecipeParams out;
  for (const auto& p : e.params) out[p.name] = p.default_value;
  std::string valid;
  for (const auto& p : e.params) valid += (valid.empty() ? "" : ", ") + std::string(p.name);
  std::set<std::string> given;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    const std::size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    if (eq == std::string_view::npos || !out.count(key))
      bad_argument("recipe", e.name,
                   ": parameter " + quote(key) + " is unknown (valid: " + (valid.empty() ? "none" : valid) +
                       "; write name:key=value)");
    if (!given.insert(key).second)
      bad_argument("recipe", e.name, ": parameter " + key + " is given twice");
    const std::string value(item.substr(eq + 1));
    // Decimal only, as the JSON readers take numbers: no hexadecimal (std::stod read "0x10" as 16), no
    // blanks (" 0.01"), no sign.
    double v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v, std::chars_format::general);
    if (ec != std::errc{} || end != value.data() + value.size() || value.empty() || !std::isfinite(v) || v <= 0)
      bad_argument("recipe", e.name, ": parameter " + key + " " + quote(value) + " must be a positive finite number");
    out[key] = v;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    canonical += (canonical.find(':') == std::string::npos ? ":" : ",") + key + "=" + buf;
  }
  return out;
}

}  // namespace

FillSpec Recipe::rule_for(const TensorContext& c) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it)
    if (name_matches(it->first, c.canonical_name)) return it->second;
  if (c.tensor.init) return *c.tensor.init;
  // A tensor of zero elements has no values to draw: its rule is moot, and a fan of zero would make
  // it infinite (1 / sqrt(0)). Every recipe gives it zeros.
  if (numel(c.tensor.shape) == 0) return FillSpec::constant(0.0);
  if (!rule_) bad_argument("recipe", name_, "has no rule for tensor " + quote(c.canonical_name));
  if (c.tensor.role == TensorRole::embedding && c.model.hyper.tie_word_embeddings && tied_is_head_) {
    // A token embedding tied to the head is one tensor with the head's rule: the frameworks
    // initialize the head after the embedding (torchtitan's decoder.py skips the tied embedding's
    // init; nanoGPT assigns wte.weight = lm_head.weight after both are made), and only the head's
    // scale gives a first loss near ln(vocab) (docs/recipes.md, "Tied embeddings").
    TensorSpec head = c.tensor;
    head.role = TensorRole::head_weight;
    head.fan_in = c.tensor.shape.back();    // [vocab, hidden]: the head maps hidden -> vocab
    head.fan_out = c.tensor.shape.front();
    head.transposable = false;
    return rule_(TensorContext{c.model, head, c.layer, c.canonical_name}, params_);
  }
  return rule_(c, params_);
}

void Recipe::add_override(std::string pattern, FillSpec fill) {
  if (pattern.empty()) bad_argument("recipe override", "has an empty pattern");
  overrides_.emplace_back(std::move(pattern), fill);
}

std::string Recipe::overrides_text() const {
  if (overrides_.empty()) return "";
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [pattern, fill] : overrides_) a.push_back({pattern, fill.text()});
  return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> out;
  for (const auto& e : recipes()) out.emplace_back(e.name);
  return out;
}

TensorContext tensor_context(const ModelSpec& spec, const TensorSpec& t, std::optional<std::uint64_t> block_layer) {
  if (block_layer) return TensorContext{spec, t, spec.first_layer + *block_layer, spec.canonical_name(*block_layer, t)};
  std::optional<std::uint64_t> layer;
  if (spec.first_layer > 0)
    if (const auto l = split_layer_name(spec.layer_prefix, t.name); l && l->layer < spec.first_layer) layer = l->layer;
  return TensorContext{spec, t, layer, t.name};
}

Recipe make_recipe(std::string_view text) {
  const std::size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  std::string valid;
  for (const auto& e : recipes()) {
    if (name == e.name) {
      std::string canonical(e.name);
      RecipeParams params = parse_params(e, colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1), canonical);
      return Recipe(canonical, e.rule, std::move(params), e.tied_is_head);
    }
    valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  }
  bad_argument("recipe", name, "is unknown (valid: " + valid + ")");
}

std::string_view megatron_init_field(TensorRole role, std::string_view tensor) {
  switch (role) {
    case TensorRole::norm_weight: return "layernorm_zero_centered_gamma";
    case TensorRole::linear_weight:
    case TensorRole::head_weight:
    case TensorRole::router_weight: return "init_method";
    case TensorRole::output_weight: return "output_layer_init_method";
    case TensorRole::embedding:
    case TensorRole::position_embedding: return "embedding_init_method";
    case TensorRole::linear_bias: return tensor.ends_with("router.bias") ? "init_method" : "";
    default: return "";
  }
}

}  // namespace layerinit
