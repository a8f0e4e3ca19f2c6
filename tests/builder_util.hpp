// Helpers shared by the builder and peak tests.
#pragma once

#include <map>
#include <string>

#include <layerinit/init/builder.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/stacking/stack.hpp>

namespace layerinit::testing {

// Canonical per-layer name -> content hash (XXH3-64) of its bytes, whatever the model's layout.
inline std::map<std::string, std::uint64_t> hashes_by_name(backend& be, const Model& m, const ModelSpec& spec) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& t : m.pre) out[t.view.name] = hash_tensor(be, t.view);
  for (const auto& l : m.layers)
    for (const auto& t : l.tensors) out[t.view.name] = hash_tensor(be, t.view);
  if (m.layout == Layout::stacked)
    for (const auto& layer : unstack(m, spec))
      for (const auto& v : layer) out[v.name] = hash_tensor(be, v);
  for (const auto& t : m.post) out[t.view.name] = hash_tensor(be, t.view);
  return out;
}

// Bytes of every layer part and every tensor outside the layers.
struct PartSizes {
  std::uint64_t pre = 0, post = 0, layers = 0, largest_layer = 0, largest_outside = 0;
  std::uint64_t total() const { return pre + post + layers; }
};

inline PartSizes part_sizes(const Builder& b) {
  PartSizes s;
  for (const auto& p : b.plan_pre()) s.pre += p.bytes(), s.largest_outside = std::max(s.largest_outside, p.bytes());
  for (const auto& p : b.plan_post()) s.post += p.bytes(), s.largest_outside = std::max(s.largest_outside, p.bytes());
  for (std::uint64_t i = 0; i < b.spec().num_layers; ++i) {
    std::uint64_t layer = 0;
    for (const auto& p : b.plan_layer(i)) layer += p.bytes();
    s.layers += layer;
    s.largest_layer = std::max(s.largest_layer, layer);
  }
  return s;
}

}  // namespace layerinit::testing
