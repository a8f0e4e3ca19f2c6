// Init recipes: the fill each tensor gets in the codebase a recipe is named after (docs/recipes.md).
#include <layerinit/init/recipes.hpp>

#include <cmath>
#include <stdexcept>

#include <layerinit/core/text.hpp>

namespace layerinit {

namespace {

[[noreturn]] void no_rule(const char* recipe, const TensorContext& c, const char* why = nullptr) {
  throw std::invalid_argument("recipe " + std::string(recipe) + ": no rule for tensor '" + c.canonical_name + "' (role " +
                              std::string(role_name(c.tensor.role)) + ")" + (why ? std::string(": ") + why : "") +
                              "; give it an init or an override");
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

double num_layers(const TensorContext& c) {
  return static_cast<double>(c.model.num_layers > 0 ? c.model.num_layers : 1);
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
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding:
    case TensorRole::linear_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: return FillSpec::normal(0.0, r);
    case TensorRole::output_weight:
      // GPT2PreTrainedModel._init_weights re-draws every "c_proj.weight" with std r / sqrt(2 n_layer).
      if (c.model.family == "gpt2") return FillSpec::normal(0.0, r / std::sqrt(2.0 * num_layers(c)));
      return FillSpec::normal(0.0, r);
    default: no_rule("hf", c);
  }
}

// ---- torchtitan: models/llama3/model.py init_weights (depth_init = True) ----
// Its w1/w2/w3 are HF's gate/down/up: w2 (down, role output_weight) and w3 (up) are depth-scaled.
bool is_up_projection(const TensorContext& c) {
  const auto& n = c.tensor.name;
  return ends_with(n, "up_proj.weight") || n == "w3.weight" || ends_with(n, ".w3.weight");
}
FillSpec torchtitan_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  // depth_init: 0.02 / sqrt(2 (layer_id + 1)); tensors outside the repeated block use n_layers.
  const double depth_std = c.layer ? 0.02 / std::sqrt(2.0 * (static_cast<double>(*c.layer) + 1.0))
                                   : 0.02 / std::sqrt(2.0 * num_layers(c));
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
      // Tied to the output (llama3 1B/3B, qwen3 with enable_weight_tying): torchtitan skips the
      // embedding's init and the shared tensor gets the output's, trunc_normal(0, dim^-0.5, +-3 std).
      if (c.model.hyper.tie_word_embeddings) return FillSpec::trunc_normal_std(0.0, 1.0 / std::sqrt(embedding_fan_in(c)), -3.0, 3.0);
      return FillSpec::normal(0.0, 1.0);  // nn.init.normal_(tok_embeddings)
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

// ---- megatron: init_method_normal / scaled_init_method_normal ----
FillSpec megatron_rule(const TensorContext& c) {
  if (auto n = norm_rule(c)) return *n;
  const double s = c.model.hyper.initializer_range;  // init_method_std
  switch (c.tensor.role) {
    case TensorRole::linear_bias: return FillSpec::constant(0.0);
    case TensorRole::embedding:
    case TensorRole::position_embedding:
    case TensorRole::linear_weight:
    case TensorRole::router_weight:
    case TensorRole::head_weight: return FillSpec::normal(0.0, s);
    case TensorRole::output_weight: return FillSpec::normal(0.0, s / std::sqrt(2.0 * num_layers(c)));
    default: no_rule("megatron", c);
  }
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

struct Entry {
  const char* name;
  Recipe::Rule rule;
};
constexpr Entry kRecipes[] = {
    {"hf", hf_rule},           {"torchtitan", torchtitan_rule}, {"megatron", megatron_rule},
    {"pytorch-default", pytorch_rule}, {"equinox", equinox_rule}, {"flax", flax_rule},
    {"xavier-uniform", xavier_rule},   {"kaiming-normal", kaiming_rule},
};

}  // namespace

FillSpec Recipe::rule_for(const TensorContext& c) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it)
    if (name_matches(it->first, c.canonical_name)) return it->second;
  if (c.tensor.init) return *c.tensor.init;
  if (!rule_) throw std::invalid_argument("recipe '" + name_ + "' has no rule for tensor '" + c.canonical_name + "'");
  return rule_(c);
}

void Recipe::add_override(std::string pattern, FillSpec fill) {
  if (pattern.empty()) throw std::invalid_argument("recipe override: empty pattern");
  overrides_.emplace_back(std::move(pattern), fill);
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> out;
  for (const auto& e : kRecipes) out.emplace_back(e.name);
  return out;
}

Recipe make_recipe(std::string_view name) {
  std::string valid;
  for (const auto& e : kRecipes) {
    if (name == e.name) return Recipe(e.name, e.rule);
    valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  }
  throw std::invalid_argument("unknown recipe '" + printable(name) + "' (valid: " + valid + ")");
}

}  // namespace layerinit
