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

  m.def("targets", [] {
    // (name, capsule, platform) for jax.ffi.register_ffi_target(name, capsule, platform=..., api_version=1)
    nb::list out;
    out.append(nb::make_tuple("layerinit_fill", handler(LayerinitFillHost), "cpu"));
    out.append(nb::make_tuple("layerinit_ordinal", handler(LayerinitOrdinalHost), "cpu"));
#if LAYERINIT_HAS_CUDA
    out.append(nb::make_tuple("layerinit_fill", handler(LayerinitFillCuda), "CUDA"));
    out.append(nb::make_tuple("layerinit_ordinal", handler(LayerinitOrdinalCuda), "CUDA"));
#endif
    out.append(nb::make_tuple("layerinit_fill_grid", handler(LayerinitFillGrid), "cpu"));
    return out;
  }, "[(target name, handler capsule, platform)]");

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
