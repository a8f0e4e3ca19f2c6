// layerinit._xla: the XLA FFI fill handlers as capsules for jax.ffi.register_ffi_target, and the
// composite texts their attributes carry, made from a layerinit spec with the library's own recipes
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
#include <layerinit/shard/composite.hpp>
#include <layerinit/shard/tensor_index.hpp>

#include "xla_handlers.hpp"
#include "xla_piece.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace layerinit::jax {
namespace {

using Leaf = std::tuple<std::string, std::vector<std::uint64_t>, std::string, std::string>;

// A spec planned with a recipe (shard/tensor_index.hpp): the composite text of any array of its
// tensors, without memory.
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
    index_.emplace(*builder_);
  }

  // The composite text of an array holding the tensors named by `name` ("{k}": stack axis k's index)
  // at every position of `stack`, made in `dtype`. Checks that the tensors make an array of `shape`
  // and that every fill suits the dtype.
  std::string param(const std::string& name, const std::vector<std::uint64_t>& stack,
                    const std::vector<std::uint64_t>& shape, const std::string& dtype) const {
    std::vector<StackAxis> axes;
    for (const auto size : stack) axes.push_back({size, 0});
    const std::string templates[] = {name};
    Composite c = index_->assemble(templates, axes, 0, {}, 1, "the leaf");
    c.dtype = parse_dtype(dtype);  // values depend on the dtype only through the fills, prepared per call
    for (auto& part : c.parts) part.dtype = c.dtype;
    const Shape want(shape.begin(), shape.end());
    if (c.shape != want)
      throw std::invalid_argument("its tensors make " + shape_string(c.shape) + ", the leaf is " + shape_string(want));
    c.validate();
    return composite_to_text(c);
  }

  // Every array a build of the plan lists, in file order, as the builder's options lay them out:
  // (name, stored shape, dtype, composite text).
  std::vector<Leaf> model() const {
    std::vector<Leaf> out;
    auto add = [&](const std::string& name) {
      const Composite c = index_->composite(name);
      out.emplace_back(name, std::vector<std::uint64_t>(c.shape.begin(), c.shape.end()), std::string(dtype_name(c.dtype)),
                       composite_to_text(c));
    };
    for (const auto& t : builder_->plan_pre()) add(t.name);
    if (builder_->options().layout == Layout::per_layer) {
      for (std::uint64_t l = 0; l < spec_.num_layers; ++l)
        for (const auto& t : builder_->plan_layer(l)) add(t.name);
    } else if (spec_.num_layers > 0) {
      for (const auto& b : index_->stacked_layout().buffers) add(b.name);
    }
    for (const auto& t : builder_->plan_post()) add(t.name);
    return out;
  }

 private:
  ModelSpec spec_;
  Recipe recipe_;
  std::unique_ptr<backend> dry_;
  std::optional<Builder> builder_;
  std::optional<TensorIndex> index_;  // refers to *builder_
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

  nb::class_<Planner>(m, "Planner", "A spec planned with a recipe: the composite texts of the fill handlers' attributes.")
      .def(nb::init<const std::string&, const std::string&, const std::map<std::string, std::string>&, const std::string&,
                    const std::map<std::string, std::string>&, const std::string&, const std::string&, const std::string&>(),
           "spec_json"_a, "recipe"_a, "overrides"_a, "dtype"_a, "dtype_overrides"_a, "layout"_a, "orientation"_a, "experts"_a)
      .def("param", &Planner::param, "name"_a, "stack"_a, "shape"_a, "dtype"_a)
      .def("model", &Planner::model, "[(name, stored shape, dtype, composite text)] in file order");

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
  m.def("record_writes", &record_writes, "on"_a, "Test hook: record every output buffer the handlers write.");
  m.def("take_writes", [] {
    std::vector<std::tuple<std::string, std::uintptr_t, std::uint64_t>> out;
    for (const auto& w : take_writes()) out.emplace_back(w.name, w.address, w.bytes);
    return out;
  }, "[(first slice name, address, bytes)] recorded since the last call");
}
