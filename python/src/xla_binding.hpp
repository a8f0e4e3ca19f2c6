// layerinit._core.xla, the XLA FFI fill handlers of layerinit.jax (xla_binding.cpp): defined on a
// submodule of _core where the package is built against a jaxlib's XLA FFI headers.
#pragma once

#include <nanobind/nanobind.h>

namespace layerinit::jax {

// Puts the handlers' capsules (targets), has_cuda_handler and the test hooks on `m`.
void define_xla(nanobind::module_& m);

}  // namespace layerinit::jax
