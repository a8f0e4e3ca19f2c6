#include <layerinit/stacking/stack.hpp>

#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

Model stack(Model&& m, const ModelSpec& spec, backend& be, memory_resource& memory, ExpertLayout experts) {
  // The model, spec and memory are the caller's to match: a mismatch is misuse, not bad input.
  LAYERINIT_EXPECTS(m.layout == Layout::per_layer, "stack: the model is already stacked");
  LAYERINIT_EXPECTS(m.layers.size() == spec.num_layers, "stack: the model has " + std::to_string(m.layers.size()) +
                                                            " layers, the spec " + std::to_string(spec.num_layers));
  LAYERINIT_EXPECTS(memory.supports_reserve(), "stack: memory resource '" + memory.name() + "' cannot reserve address space");

  Model out;
  out.layout = Layout::stacked;
  out.experts = experts;
  out.num_layers = m.num_layers;
  out.pre = std::move(m.pre);
  out.post = std::move(m.post);
  if (m.layers.empty()) return out;

  // Slice geometry from the first layer (copied: layers are freed as they are consumed); every layer
  // must match it.
  const std::size_t count = m.layers.front().tensors.size();
  LAYERINIT_EXPECTS(count == spec.layer.tensors.size(), "stack: layer tensors do not match the spec");
  const StackedLayout sl = stacked_layout(spec, experts);
  std::vector<std::uint64_t> slice(count);
  std::vector<Shape> shape(count);
  for (std::size_t j = 0; j < count; ++j) {
    const TensorView& v = m.layers.front().tensors[j].view;
    slice[j] = v.bytes();
    shape[j] = v.shape;
  }
  for (std::size_t b = 0; b < sl.buffers.size(); ++b) {
    const TensorView& v = m.layers.front().tensors[sl.buffers[b].first].view;
    out.stacked.push_back(Tensor::reserve(memory, sl.buffers[b].name, sl.shape(spec, b, v.shape), v.dtype));
  }

  std::vector<bool> seen(spec.num_layers, false);
  for (Layer& layer : m.layers) {
    const std::uint64_t i = layer.index;
    LAYERINIT_EXPECTS(i < spec.num_layers && !seen[i], "stack: layer index " + std::to_string(i) + " repeated or out of range");
    seen[i] = true;
    LAYERINIT_EXPECTS(layer.tensors.size() == count, "stack: layer " + std::to_string(i) + " has a different tensor count");
    for (std::size_t j = 0; j < count; ++j) {
      const TensorView& v = layer.tensors[j].view;
      Tensor& dst = out.stacked[sl.buffer[j]];
      LAYERINIT_EXPECTS(v.bytes() == slice[j] && v.dtype == dst.view.dtype && v.shape == shape[j] &&
                            v.shape == shape[sl.buffers[sl.buffer[j]].first],
                        "stack: " + v.name + " does not match the shape or dtype of its stacked buffer " + dst.view.name);
      const std::uint64_t offset = sl.slice(j, i) * slice[j];
      dst.storage.commit(offset, slice[j]);
      be.copy(static_cast<unsigned char*>(dst.view.data) + offset, v.data, slice[j]);
    }
    be.synchronize();
    layer.tensors.clear();  // layer i is freed before layer i+1 is committed: peak = final + one layer
  }
  return out;
}

std::vector<std::vector<TensorView>> unstack(const Model& m, const ModelSpec& spec) {
  LAYERINIT_EXPECTS(m.layout == Layout::stacked, "unstack: the model is not stacked");
  const StackedLayout sl = stacked_layout(spec, m.experts);
  LAYERINIT_EXPECTS(sl.buffers.size() == m.stacked.size() || m.num_layers == 0,
                    "unstack: the model's stacked buffers do not match the spec");
  std::vector<std::vector<TensorView>> out(m.num_layers);
  for (std::uint64_t i = 0; i < m.num_layers; ++i) {
    for (std::size_t j = 0; j < spec.layer.tensors.size(); ++j) {
      const TensorView& s = m.stacked[sl.buffer[j]].view;
      const std::size_t lead = sl.buffers[sl.buffer[j]].fused ? 2 : 1;  // [L, ...] or [L, E, ...]
      const std::uint64_t slice = s.bytes() / (m.num_layers * sl.buffers[sl.buffer[j]].experts);
      out[i].push_back(TensorView{spec.canonical_name(i, spec.layer.tensors[j]), Shape(s.shape.begin() + lead, s.shape.end()),
                                  s.dtype, static_cast<unsigned char*>(s.data) + sl.slice(j, i) * slice, s.where});
    }
  }
  return out;
}

}  // namespace layerinit
