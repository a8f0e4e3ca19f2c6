// DM-Haiku's naming conventions, one reading of them for describe (roles, layers) and the haiku
// recipe (MultiHeadAttention's projections). Not installed.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace layerinit::haiku {

// A module's name without Haiku's instance suffix (haiku/_src/module.py unique_and_canonical_name:
// the second Linear of a scope is linear_1): what names its class. "conv2_d_1" -> "conv2_d".
inline std::string_view base(std::string_view module) {
  const std::size_t us = module.rfind('_');
  if (us == std::string_view::npos || us + 1 == module.size()) return module;
  return module.find_first_not_of("0123456789", us + 1) == std::string_view::npos ? module.substr(0, us) : module;
}

// A module path's components: split at '/' (and at the '.' a stacked slice's index sits between),
// Haiku's constructor marker "~" dropped: "mlp/~/linear_0" -> mlp, linear_0.
inline std::vector<std::string_view> modules(std::string_view path) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0; start <= path.size();) {
    const std::size_t end = path.find_first_of("/.", start);
    const std::string_view c = path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!c.empty() && c != "~") out.push_back(c);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

// A name with every module's instance suffix dropped: the modules a loop made (block, block_1, ...)
// share it.
inline std::string unnumbered(std::string_view name) {
  std::string out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = name.find_first_of("/.", start);
    out += base(name.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    out += name[end];
    start = end + 1;
  }
}

// hk.MultiHeadAttention's Linears (attention.py): query, key, value (_linear_projection) and linear
// (the final projection, hk.Linear's default name), right inside the module.
inline constexpr std::string_view kMhaLinears[] = {"query", "key", "value", "linear"};

// Whether the module at `path` (".../attention/query") is one of a MultiHeadAttention's Linears:
// inside a module named multi_head_attention or multi_head_attention_<n>, or beside the other three
// (`has(path)`: a module of that path holds a weight), a MultiHeadAttention under its user's name.
template <class Has>
bool is_mha_linear(std::string_view path, const Has& has) {
  const auto ms = modules(path);
  if (ms.empty() || std::find(std::begin(kMhaLinears), std::end(kMhaLinears), ms.back()) == std::end(kMhaLinears))
    return false;
  if (ms.size() > 1 && base(ms[ms.size() - 2]) == "multi_head_attention") return true;
  const std::size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return false;
  return std::all_of(std::begin(kMhaLinears), std::end(kMhaLinears),
                     [&](std::string_view l) { return has(std::string(path.substr(0, slash + 1)) + std::string(l)); });
}

}  // namespace layerinit::haiku
