// layerinit._xla: the XLA FFI fill handlers as capsules for jax.ffi.register_ffi_target, and the
// parameter texts their attributes carry, made from a layerinit spec with the library's own recipes
// (python/layerinit/jax.py). Built only where the XLA FFI headers of a jaxlib are found.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <layerinit/backends/backend.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec_json.hpp>

#include "xla_handlers.hpp"
#include "xla_param.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace layerinit::jax {
namespace {

using Leaf = std::tuple<std::string, std::vector<std::uint64_t>, std::string, std::string>;

// A spec planned with a recipe: every canonical tensor's fill and shape, without memory.
class Planner {
 public:
  Planner(const std::string& spec_json, const std::string& recipe, const std::map<std::string, std::string>& overrides,
          const std::string& dtype, const std::map<std::string, std::string>& dtype_overrides, const std::string& layout,
          const std::string& orientation, const std::string& experts)
      : spec_(spec_from_json(spec_json)), recipe_(make_recipe(recipe)), dry_(make_dry_backend()) {
    for (const auto& [pattern, text] : overrides) {
      FillSpec f = parse_fill(text);
      validate_fill(f);
      recipe_.add_override(pattern, f);
    }
    BuildOptions o;
    o.dtype = parse_dtype(dtype);
    for (const auto& [pattern, d] : dtype_overrides) o.dtype_overrides.push_back({pattern, parse_dtype(d)});
    o.layout = parse_layout(layout);
    o.orientation = parse_orientation(orientation);
    o.experts = parse_expert_layout(experts);
    builder_.emplace(spec_, recipe_, o, *dry_, dry_->memory());
  }

  // The parameter text of an array holding the canonical tensors `names` (row-major over its `lead`
  // leading dimensions), stored as `shape`, in `dtype`, each slice transposed or not. Checks that
  // every name is a tensor of the spec whose shape is the slice's, and every fill against the dtype.
  std::string param(const std::vector<std::string>& names, const std::vector<std::uint64_t>& shape, std::size_t lead,
                    const std::string& dtype, bool transposed) const {
    Param p;
    p.dtype = parse_dtype(dtype);
    p.shape = Shape(shape.begin(), shape.end());
    p.lead = lead;
    p.transposed = transposed;
    for (const auto& name : names) {
      const PlannedTensor& t = planned(name);
      p.slices.push_back({name, t.fill});
      const PlannedTensor s = p.planned(p.slices.size() - 1);
      if (lead <= p.shape.size() && s.shape != t.shape)
        throw std::invalid_argument("tensor '" + printable(name) + "' is " + shape_string(t.shape) + ", but the array holds " +
                                    shape_string(s.shape) + (transposed ? " (stored transposed as " : " (stored as ") +
                                    shape_string(s.memory_shape) + ")");
    }
    check_fills(p);
    return param_text(p);
  }

  // Every array of the planned model in file order, as the builder's options lay them out:
  // (name, stored shape, dtype, parameter text).
  std::vector<Leaf> model() const {
    std::vector<Leaf> out;
    auto one = [&](const PlannedTensor& t) {
      Param p;
      p.dtype = t.dtype;
      p.shape = t.memory_shape;
      p.transposed = t.transposed;
      p.slices.push_back({t.name, t.fill});
      add(out, t.name, p);
    };
    for (const auto& t : builder_->plan_pre()) one(t);
    const BuildOptions& o = builder_->options();
    if (o.layout == Layout::per_layer) {
      for (std::uint64_t l = 0; l < spec_.num_layers; ++l)
        for (const auto& t : builder_->plan_layer(l)) one(t);
    } else if (spec_.num_layers > 0) {
      // A stacked buffer [L, ...] or [L, E, ...]: slice (l, e) is layer l's member of expert e.
      const StackedLayout s = stacked_layout(spec_, o.experts);
      std::vector<std::vector<PlannedTensor>> layers;
      for (std::uint64_t l = 0; l < spec_.num_layers; ++l) layers.push_back(builder_->plan_layer(l));
      for (std::size_t b = 0; b < s.buffers.size(); ++b) {
        const StackedBuffer& buf = s.buffers[b];
        const PlannedTensor& first = layers[0][buf.first];
        Param p;
        p.dtype = first.dtype;
        p.shape = s.shape(spec_, b, first.memory_shape);
        p.lead = buf.fused ? 2 : 1;
        p.transposed = first.transposed;
        for (std::uint64_t l = 0; l < spec_.num_layers; ++l)
          for (std::uint64_t e = 0; e < buf.experts; ++e)
            for (std::size_t j = 0; j < s.buffer.size(); ++j)
              if (s.buffer[j] == b && s.expert[j] == e) {
                if (layers[l][j].dtype != p.dtype)
                  throw std::invalid_argument("tensor '" + printable(layers[l][j].name) + "' is " +
                                              std::string(dtype_name(layers[l][j].dtype)) + " but its stacked array " +
                                              printable(buf.name) + " is " + std::string(dtype_name(p.dtype)));
                p.slices.push_back({layers[l][j].name, layers[l][j].fill});
              }
        add(out, buf.name, p);
      }
    }
    for (const auto& t : builder_->plan_post()) one(t);
    return out;
  }

 private:
  static void add(std::vector<Leaf>& out, const std::string& name, const Param& p) {
    check_fills(p);
    out.emplace_back(name, std::vector<std::uint64_t>(p.shape.begin(), p.shape.end()), std::string(dtype_name(p.dtype)),
                     param_text(p));
  }

  const PlannedTensor& planned(const std::string& name) const {
    if (index_.empty()) {
      for (const auto& t : builder_->plan_pre()) index_.emplace(t.name, t);
      for (std::uint64_t l = 0; l < spec_.num_layers; ++l)
        for (const auto& t : builder_->plan_layer(l)) index_.emplace(t.name, t);
      for (const auto& t : builder_->plan_post()) index_.emplace(t.name, t);
    }
    const auto it = index_.find(name);
    if (it == index_.end()) throw std::invalid_argument("tensor '" + printable(name) + "' is not in " + printable(spec_.name));
    return it->second;
  }

  ModelSpec spec_;
  Recipe recipe_;
  std::unique_ptr<backend> dry_;
  std::optional<Builder> builder_;
  mutable std::map<std::string, PlannedTensor> index_;
};

nb::capsule handler(XLA_FFI_Error* (*fn)(XLA_FFI_CallFrame*)) { return nb::capsule(reinterpret_cast<void*>(fn)); }

}  // namespace
}  // namespace layerinit::jax

NB_MODULE(_xla, m) {
  using namespace layerinit;
  using namespace layerinit::jax;
  m.doc() = "layerinit's XLA FFI fill handlers; use layerinit.jax (docs/python.md)";
  m.attr("has_cuda_handler") = bool(LAYERINIT_HAS_CUDA);

  m.def("targets", [] {
    // (name, capsule, platform) for jax.ffi.register_ffi_target(name, capsule, platform=..., api_version=1)
    nb::list out;
    out.append(nb::make_tuple("layerinit_fill", handler(LayerinitFillHost), "cpu"));
#if LAYERINIT_HAS_CUDA
    out.append(nb::make_tuple("layerinit_fill", handler(LayerinitFillCuda), "CUDA"));
#endif
    out.append(nb::make_tuple("layerinit_fill_grid", handler(LayerinitFillGrid), "cpu"));
    return out;
  }, "[(target name, handler capsule, platform)]");

  nb::class_<Planner>(m, "Planner", "A spec planned with a recipe: the parameter texts of the fill handlers' attributes.")
      .def(nb::init<const std::string&, const std::string&, const std::map<std::string, std::string>&, const std::string&,
                    const std::map<std::string, std::string>&, const std::string&, const std::string&, const std::string&>(),
           "spec_json"_a, "recipe"_a, "overrides"_a, "dtype"_a, "dtype_overrides"_a, "layout"_a, "orientation"_a, "experts"_a)
      .def("param", &Planner::param, "names"_a, "shape"_a, "lead"_a, "dtype"_a, "transposed"_a)
      .def("model", &Planner::model, "[(name, stored shape, dtype, parameter text)] in file order");

  m.def("spec_with_fills", [](const std::string& spec_json, const std::map<std::string, std::string>& fills) {
    // The spec with an explicit init for each named tensor (pre, post, or the layer of a one-layer
    // block), so the spec alone (layerinit emit --spec) gives the values init() makes.
    ModelSpec spec = spec_from_json(spec_json);
    for (const auto& [name, text] : fills) {
      FillSpec f = parse_fill(text);
      validate_fill(f);
      bool found = false;
      for (auto* list : {&spec.pre, &spec.post})
        for (auto& t : *list)
          if (t.name == name) {
            t.init = f;
            found = true;
          }
      if (spec.num_layers == 1)  // a block of one layer: its tensors' canonical names are unique
        for (auto& t : spec.layer.tensors)
          if (spec.canonical_name(0, t) == name) {
            t.init = f;
            found = true;
          }
      if (!found) throw std::invalid_argument("tensor '" + printable(name) + "' is not in " + printable(spec.name));
    }
    return spec_to_json(spec);
  }, "spec_json"_a, "fills"_a, "The spec with `fills` (canonical name -> fill text) as the named tensors' init (pre, post, a one-layer block).");
  m.def("parse_param", [](const std::string& text) {
    const Param p = parse_param(text);
    std::vector<std::string> names;
    for (const auto& s : p.slices) names.push_back(s.name);
    return nb::make_tuple(std::string(dtype_name(p.dtype)), std::vector<std::uint64_t>(p.shape.begin(), p.shape.end()), p.lead,
                          p.transposed, names);
  }, "text"_a, "(dtype, shape, lead, transposed, slice names) of a parameter text; ValueError when malformed");
  m.def("record_writes", &record_writes, "on"_a, "Test hook: record every output buffer the handlers write.");
  m.def("take_writes", [] {
    std::vector<std::tuple<std::string, std::uintptr_t, std::uint64_t>> out;
    for (const auto& w : take_writes()) out.emplace_back(w.name, w.address, w.bytes);
    return out;
  }, "[(first slice name, address, bytes)] recorded since the last call");
}
