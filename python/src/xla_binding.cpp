// layerinit._core.xla: the XLA FFI fill handlers as capsules for jax.ffi.register_ffi_target
// (python/layerinit/jax.py; the composite texts their attributes carry come from _core.Plan). Compiled
// into _core only where the XLA FFI headers of a jaxlib are found.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>
#include <vector>

#include "xla_binding.hpp"
#include "xla_handlers.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace layerinit::jax {
namespace {

nb::capsule handler(XLA_FFI_Error* (*fn)(XLA_FFI_CallFrame*)) { return nb::capsule(reinterpret_cast<void*>(fn)); }

}  // namespace

void define_xla(nb::module_& m) {
  m.doc() = "layerinit's XLA FFI fill handlers; use layerinit.jax (docs/python.md)";
  m.attr("has_cuda_handler") = bool(LAYERINIT_HAS_CUDA);

  m.def("param_types", [] {
    // (name, registration, platform) for jax.ffi.register_ffi_type(name, registration, platform=...)
    auto reg = [](ffi::TypeId* id, const ffi::TypeInfo* info) {
      nb::dict r;
      r["type_id"] = nb::capsule(static_cast<void*>(id));
      r["type_info"] = nb::capsule(const_cast<void*>(static_cast<const void*>(info)));
      return r;
    };
    nb::list out;
    // A name per platform: jaxlib's XLA and a GPU plugin's may share one registry of type names.
    out.append(nb::make_tuple("layerinit_param_cpu", reg(&ParamState<Platform::host>::id, &param_state_info<Platform::host>),
                              "cpu"));
#if LAYERINIT_HAS_CUDA
    out.append(nb::make_tuple("layerinit_param_cuda", reg(&ParamState<Platform::cuda>::id, &param_state_info<Platform::cuda>),
                              "CUDA"));
#endif
    return out;
  }, "[(type name, registration, platform)] of the state the fill targets' instantiate stage makes");

  m.def("targets", [] {
    // (name, handler, platform) for jax.ffi.register_ffi_target(name, handler, platform=..., api_version=1);
    // a fill target's handler is its stages: the parameter parsed once per instance, then each call.
    auto fill = [](XLA_FFI_Error* (*instantiate)(XLA_FFI_CallFrame*), XLA_FFI_Error* (*execute)(XLA_FFI_CallFrame*)) {
      nb::dict stages;
      stages["instantiate"] = handler(instantiate);
      stages["execute"] = handler(execute);
      return stages;
    };
    nb::list out;
    out.append(nb::make_tuple("layerinit_fill", fill(LayerinitParamHost, LayerinitFillHost), "cpu"));
    out.append(nb::make_tuple("layerinit_ordinal", handler(LayerinitOrdinalHost), "cpu"));
#if LAYERINIT_HAS_CUDA
    out.append(nb::make_tuple("layerinit_fill", fill(LayerinitParamCuda, LayerinitFillCuda), "CUDA"));
    out.append(nb::make_tuple("layerinit_ordinal", handler(LayerinitOrdinalCuda), "CUDA"));
#endif
    out.append(nb::make_tuple("layerinit_fill_grid", fill(LayerinitParamHost, LayerinitFillGrid), "cpu"));
    return out;
  }, "[(target name, handler capsule or {stage: capsule}, platform)]");
  m.def("params_parsed", &params_parsed, "Test hook: how many param attributes the instantiate stage has parsed.");

  m.def("cancel_fills", &cancel_fills, "on"_a,
        "While on, every fill handler call fails with 'interrupted' (layerinit.jax's Ctrl-C).");
  m.def("interrupt_after", &interrupt_after, "n"_a,
        "Test hook: after n more filled arrays the handler raises SIGINT and waits until the fills are cancelled; "
        "n < 0: off.");
  m.def("record_writes", &record_writes, "on"_a, "Test hook: record every output buffer the handlers write.");
  m.def("take_writes", [] {
    std::vector<std::tuple<std::string, std::uintptr_t, std::uint64_t>> out;
    for (const auto& w : take_writes()) out.emplace_back(w.name, w.address, w.bytes);
    return out;
  }, "[(first slice name, address, bytes)] recorded since the last call");
}

}  // namespace layerinit::jax
