#include <layerinit/stacking/stack.hpp>

#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

Model stack(Model&& m, const ModelSpec& spec, backend& be, memory_resource& memory) {
  if (m.layout != Layout::per_layer) throw std::invalid_argument("stack: the model is already stacked");
  if (m.layers.size() != spec.num_layers)
    throw std::invalid_argument("stack: the model has " + std::to_string(m.layers.size()) + " layers, the spec " +
                                std::to_string(spec.num_layers));
  if (!memory.supports_reserve())
    throw std::invalid_argument("stack: memory resource '" + memory.name() + "' cannot reserve address space");

  Model out;
  out.layout = Layout::stacked;
  out.num_layers = m.num_layers;
  out.pre = std::move(m.pre);
  out.post = std::move(m.post);
  if (m.layers.empty()) return out;

  // Slice geometry from the first layer (copied: layers are freed as they are consumed); every layer
  // must match it.
  const std::size_t count = m.layers.front().tensors.size();
  if (count != spec.layer.tensors.size()) throw std::invalid_argument("stack: layer tensors do not match the spec");
  std::vector<std::uint64_t> slice(count);
  for (std::size_t j = 0; j < count; ++j) {
    const TensorView& v = m.layers.front().tensors[j].view;
    slice[j] = v.bytes();
    out.stacked.push_back(Tensor::reserve(memory, stacked_name(spec, spec.layer.tensors[j]), stacked_shape(spec, v.shape), v.dtype));
  }

  std::vector<bool> seen(spec.num_layers, false);
  for (Layer& layer : m.layers) {
    const std::uint64_t i = layer.index;
    if (i >= spec.num_layers || seen[i]) throw std::invalid_argument("stack: layer index " + std::to_string(i) + " repeated or out of range");
    seen[i] = true;
    if (layer.tensors.size() != count) throw std::invalid_argument("stack: layer " + std::to_string(i) + " has a different tensor count");
    for (std::size_t j = 0; j < slice.size(); ++j) {
      const TensorView& v = layer.tensors[j].view;
      if (v.bytes() != slice[j] || v.dtype != out.stacked[j].view.dtype || v.shape != Shape(out.stacked[j].view.shape.begin() + 1, out.stacked[j].view.shape.end()))
        throw std::invalid_argument("stack: " + v.name + " does not match the shape or dtype of layer 0's tensor");
      out.stacked[j].storage.commit(i * slice[j], slice[j]);
      be.copy(static_cast<unsigned char*>(out.stacked[j].view.data) + i * slice[j], v.data, slice[j]);
    }
    be.synchronize();
    layer.tensors.clear();  // layer i is freed before layer i+1 is committed: peak = final + one layer
  }
  return out;
}

std::vector<std::vector<TensorView>> unstack(const Model& m, const ModelSpec& spec) {
  if (m.layout != Layout::stacked) throw std::invalid_argument("unstack: the model is not stacked");
  std::vector<std::vector<TensorView>> out(m.num_layers);
  for (std::uint64_t i = 0; i < m.num_layers; ++i) {
    for (std::size_t j = 0; j < m.stacked.size(); ++j) {
      const TensorView& s = m.stacked[j].view;
      const std::uint64_t slice = s.bytes() / m.num_layers;
      out[i].push_back(TensorView{spec.canonical_name(i, spec.layer.tensors[j]), Shape(s.shape.begin() + 1, s.shape.end()),
                                  s.dtype, static_cast<unsigned char*>(s.data) + i * slice, s.where});
    }
  }
  return out;
}

}  // namespace layerinit
