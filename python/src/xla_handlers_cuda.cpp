// The CUDA handler: the jobs are made on the host from the attributes alone and enqueued on the stream
// XLA hands the handler, writing XLA's device buffer; nothing is copied and nothing waits.
#include "xla_handlers.hpp"

#include <cuda_runtime_api.h>

#include <layerinit/core/cuda_check.hpp>
#include <layerinit/kernels/fill_cuda.hpp>

namespace layerinit::jax {
namespace {

ffi::Error fill_cuda_impl(cudaStream_t stream, std::int32_t ordinal, std::optional<ffi::AnyBuffer>, std::int64_t seed,
                          std::string_view param, ffi::Span<const std::int64_t> table, ffi::Result<ffi::AnyBuffer> out) {
  return fill_piece(ordinal, seed, param, table, *out, [stream, ordinal](const std::vector<FillJob>& jobs) {
    // The device XLA runs the call on current for the launch: XLA's stream is that device's, and the
    // tables and launch shapes are per device.
    const DeviceScope on(ordinal);
    LAYERINIT_CUDA_TRY(on.status());
    fill_cuda(jobs, stream);
  });
}

ffi::Error ordinal_cuda_impl(cudaStream_t stream, std::int32_t ordinal, ffi::Result<ffi::Buffer<ffi::DataType::S32>> out) {
  // From pageable memory the copy is staged before the call returns, so a local is a valid source.
  const cudaError_t e = cudaMemcpyAsync(out->typed_data(), &ordinal, sizeof ordinal, cudaMemcpyHostToDevice, stream);
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("layerinit: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace
}  // namespace layerinit::jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitFillCuda, layerinit::jax::fill_cuda_impl,
                              layerinit::jax::fill_binding(layerinit::jax::ffi::Ffi::Bind()
                                                               .Ctx<layerinit::jax::ffi::PlatformStream<cudaStream_t>>()
                                                               .Ctx<layerinit::jax::ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitOrdinalCuda, layerinit::jax::ordinal_cuda_impl,
                              layerinit::jax::ffi::Ffi::Bind()
                                  .Ctx<layerinit::jax::ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<layerinit::jax::ffi::DeviceOrdinal>()
                                  .Ret<layerinit::jax::ffi::Buffer<layerinit::jax::ffi::DataType::S32>>());
