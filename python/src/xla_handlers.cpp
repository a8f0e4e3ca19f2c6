#include "xla_handlers.hpp"

#include <layerinit/backends/backend.hpp>
#include <layerinit/kernels/fill_grid.hpp>
#include <layerinit/kernels/fill_host.hpp>

namespace layerinit::jax {
namespace {

ffi::Error fill_host_impl(std::int32_t ordinal, std::optional<ffi::AnyBuffer>, std::int64_t seed, std::string_view param,
                          ffi::Span<const std::int64_t> table, ffi::Result<ffi::AnyBuffer> out) {
  return fill_piece(ordinal, seed, param, table, *out, [](const std::vector<FillJob>& jobs) { fill_host(jobs); });
}

ffi::Error fill_grid_impl(std::int32_t ordinal, std::optional<ffi::AnyBuffer>, std::int64_t seed, std::string_view param,
                          ffi::Span<const std::int64_t> table, ffi::Result<ffi::AnyBuffer> out) {
  // A small odd grid, so tasks wrap around blocks as they do on a GPU with more work than blocks.
  return fill_piece(ordinal, seed, param, table, *out,
                    [ordinal](const std::vector<FillJob>& jobs) {
                      grid::fill_grid_simulated(jobs, 3, 64);
                      record_simulated_fill(ordinal, jobs);  // which device XLA ran it on, for the simulated node's tests
                    });
}

ffi::Error ordinal_host_impl(std::int32_t ordinal, ffi::Result<ffi::Buffer<ffi::DataType::S32>> out) {
  *out->typed_data() = ordinal;
  return ffi::Error::Success();
}

}  // namespace
}  // namespace layerinit::jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitFillHost, layerinit::jax::fill_host_impl,
                              layerinit::jax::fill_binding(layerinit::jax::ffi::Ffi::Bind().Ctx<layerinit::jax::ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitFillGrid, layerinit::jax::fill_grid_impl,
                              layerinit::jax::fill_binding(layerinit::jax::ffi::Ffi::Bind().Ctx<layerinit::jax::ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitOrdinalHost, layerinit::jax::ordinal_host_impl,
                              layerinit::jax::ffi::Ffi::Bind()
                                  .Ctx<layerinit::jax::ffi::DeviceOrdinal>()
                                  .Ret<layerinit::jax::ffi::Buffer<layerinit::jax::ffi::DataType::S32>>());
