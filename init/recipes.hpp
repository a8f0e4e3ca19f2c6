// Init recipes: which fill every tensor gets, as the reference codebases do it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

struct TensorContext {
  const ModelSpec& model;
  const TensorSpec& tensor;
  std::optional<std::uint64_t> layer;  // the model's layer index (first_layer + i in the block), if any
  std::string canonical_name;
};

// The context of tensor t: a layer tensor of block layer i (0-based in the block) is in layer
// first_layer + i; a pre tensor named as one of the layers before the block (DeepSeek-V3's dense
// layers) is in that layer; other pre/post tensors are in none.
LAYERINIT_API TensorContext tensor_context(const ModelSpec& spec, const TensorSpec& t, std::optional<std::uint64_t> block_layer);

// A recipe's numeric parameters, all of them with values (defaults filled in), by name.
using RecipeParams = std::map<std::string, double, std::less<>>;

class LAYERINIT_API Recipe {
 public:
  Recipe() = default;
  // The recipe as make_recipe reads it back: "mup" or "mup:base_width=256" (the parameters given).
  const std::string& name() const noexcept { return name_; }
  // The fill of one tensor. Precedence: the last matching override, then the tensor's own init,
  // then the recipe's rule.
  FillSpec rule_for(const TensorContext& t) const;
  // Overrides the fill of every tensor whose canonical name matches `pattern` (fnmatch-style glob:
  // "*", "?", "[...]"; e.g. "*.norm.weight" or "model.layers.*.mlp.down_proj.weight").
  void add_override(std::string pattern, FillSpec fill);
  const std::vector<std::pair<std::string, FillSpec>>& overrides() const noexcept { return overrides_; }
  // The overrides as compact JSON, in order, each fill exact (FillSpec::text): [["*norm*","constant(1)"]];
  // "" when there are none. What a checkpoint's metadata records and the ranks of an emit compare.
  std::string overrides_text() const;
  const RecipeParams& params() const noexcept { return params_; }

  using Rule = FillSpec (*)(const TensorContext&, const RecipeParams&);
  // tied_is_head: a token embedding tied to the head (hyper.tie_word_embeddings) gets the head's rule
  // (the framework initializes the head last); false where the framework's tied models have no head
  // of their own (Flax's Embed.attend) and the embedding's rule stands (docs/recipes.md).
  Recipe(std::string name, Rule rule, RecipeParams params = {}, bool tied_is_head = true)
      : name_(std::move(name)), rule_(rule), params_(std::move(params)), tied_is_head_(tied_is_head) {}

 private:
  std::string name_;
  Rule rule_ = nullptr;
  RecipeParams params_;
  bool tied_is_head_ = true;
  std::vector<std::pair<std::string, FillSpec>> overrides_;
};

// A recipe by name, with optional parameters after a colon: "olmo-llama", "mup:base_width=256",
// "olmo-normal:std=0.01". Names: hf, torchtitan, megatron, pytorch-default, equinox, flax,
// xavier-uniform, kaiming-normal, olmo-normal, olmo-llama, olmo-llama-depth, olmo-normalized, neox,
// mpt, mup, haiku (docs/recipes.md). Throws bad_input "unknown recipe 'x' (valid: ...)", or
// naming a parameter the recipe does not have (with the ones it has) or a value that is not a
// positive finite number.
LAYERINIT_API Recipe make_recipe(std::string_view name);
LAYERINIT_API std::vector<std::string> recipe_names();

// The field of Megatron-core's TransformerConfig that decides the fill of a tensor of this role
// (recipe megatron is their defaults; megatron-core 0.16.1): attention.py and mlp.py give linear_proj
// and linear_fc2 output_layer_init_method, linear_qkv and linear_fc1 init_method; gpt_model.py the
// output layer init_method; language_model_embedding.py the word and position embeddings
// embedding_init_method; moe/router.py the router's weight and bias init_method; a norm's weight is
// zeros under layernorm_zero_centered_gamma (fusions/fused_layer_norm.py), else ones. "" where no field
// changes the fill (other biases are zeros: tensor_parallel/layers.py).
LAYERINIT_API std::string_view megatron_init_field(TensorRole role, std::string_view tensor);

}  // namespace layerinit
