// Init recipes: which fill every tensor gets, as the reference codebases do it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/init/spec.hpp>

namespace layerinit {

struct TensorContext {
  const ModelSpec& model;
  const TensorSpec& tensor;
  std::optional<std::uint64_t> layer;  // set for tensors of the repeated block
  std::string canonical_name;
};

class Recipe {
 public:
  Recipe() = default;
  const std::string& name() const noexcept { return name_; }
  // The fill of one tensor. Precedence: the last matching override, then the tensor's own init,
  // then the recipe's rule.
  FillSpec rule_for(const TensorContext& t) const;
  // Overrides the fill of every tensor whose canonical name matches `pattern` (fnmatch-style glob:
  // "*", "?", "[...]"; e.g. "*.norm.weight" or "model.layers.*.mlp.down_proj.weight").
  void add_override(std::string pattern, FillSpec fill);
  const std::vector<std::pair<std::string, FillSpec>>& overrides() const noexcept { return overrides_; }

  using Rule = FillSpec (*)(const TensorContext&);
  Recipe(std::string name, Rule rule) : name_(std::move(name)), rule_(rule) {}

 private:
  std::string name_;
  Rule rule_ = nullptr;
  std::vector<std::pair<std::string, FillSpec>> overrides_;
};

// hf, torchtitan, megatron, pytorch-default, equinox, flax, xavier-uniform, kaiming-normal.
// Throws std::invalid_argument "unknown recipe 'x' (valid: ...)".
Recipe make_recipe(std::string_view name);
std::vector<std::string> recipe_names();

}  // namespace layerinit
