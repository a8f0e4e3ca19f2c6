#include "xla_handlers.hpp"

#include <map>
#include <memory>
#include <mutex>

#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/caller_queue.hpp>

namespace layerinit::jax {

namespace {

// The backends are made on first use and never destroyed: XLA may still run a fill while the
// process exits, after static destructors.
backend& host() {
  static backend* const be = make_host_backend().release();  // all the CPUs the process may use
  return *be;
}

// The CUDA path's stand-in for device `ordinal`: the kernel's work split over a simulated grid,
// recorded for the device XLA ran the call on (for the simulated node's tests).
backend& simulated(std::int32_t ordinal) {
  static std::mutex mu;
  static auto* const made = new std::map<std::int32_t, std::unique_ptr<backend>>;
  std::lock_guard lock(mu);
  std::unique_ptr<backend>& be = (*made)[ordinal];
  if (!be) be = make_simulated_cuda_backend(ordinal);
  return *be;
}

ffi::Error fill_host_impl(std::int32_t ordinal, ParamState<Platform::host>* param, std::optional<ffi::AnyBuffer>, std::int64_t seed,
                          std::string_view, ffi::Span<const std::int64_t> table, ffi::Result<ffi::AnyBuffer> out) {
  return fill_piece(ordinal, param, seed, table, *out, [] { return &host(); });
}

ffi::Error fill_grid_impl(std::int32_t ordinal, ParamState<Platform::host>* param, std::optional<ffi::AnyBuffer>, std::int64_t seed,
                          std::string_view, ffi::Span<const std::int64_t> table, ffi::Result<ffi::AnyBuffer> out) {
  return fill_piece(ordinal, param, seed, table, *out, [ordinal] { return &simulated(ordinal); });
}

ffi::Error ordinal_host_impl(std::int32_t ordinal, ffi::Result<ffi::Buffer<ffi::DataType::S32>> out) {
  *out->typed_data() = ordinal;
  return ffi::Error::Success();
}

}  // namespace
}  // namespace layerinit::jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitParamHost, layerinit::jax::instantiate_param<layerinit::jax::Platform::host>,
                              layerinit::jax::instantiate_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitFillHost, layerinit::jax::fill_host_impl,
                              layerinit::jax::fill_binding<layerinit::jax::Platform::host>(layerinit::jax::ffi::Ffi::Bind().Ctx<layerinit::jax::ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitFillGrid, layerinit::jax::fill_grid_impl,
                              layerinit::jax::fill_binding<layerinit::jax::Platform::host>(layerinit::jax::ffi::Ffi::Bind().Ctx<layerinit::jax::ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitOrdinalHost, layerinit::jax::ordinal_host_impl,
                              layerinit::jax::ffi::Ffi::Bind()
                                  .Ctx<layerinit::jax::ffi::DeviceOrdinal>()
                                  .Ret<layerinit::jax::ffi::Buffer<layerinit::jax::ffi::DataType::S32>>());
