// The CUDA handler: the jobs are made on the host from the attributes alone and enqueued on the stream
// XLA hands the handler, writing XLA's device buffer; nothing is copied and nothing waits.
#include "xla_handlers.hpp"

#include <cuda_runtime_api.h>

#include <layerinit/kernels/fill_cuda.hpp>

namespace layerinit::jax {
namespace {

ffi::Error fill_cuda_impl(cudaStream_t stream, std::int32_t ordinal, std::uint64_t seed, std::string_view param,
                          ffi::Span<const std::int64_t> table, ffi::Result<ffi::AnyBuffer> out) {
  return fill_piece(ordinal, seed, param, table, *out, [stream](const std::vector<FillJob>& jobs) { fill_cuda(jobs, stream); });
}

}  // namespace
}  // namespace layerinit::jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitFillCuda, layerinit::jax::fill_cuda_impl,
                              layerinit::jax::ffi::Ffi::Bind()
                                  .Ctx<layerinit::jax::ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<layerinit::jax::ffi::DeviceOrdinal>()
                                  .Attr<std::uint64_t>("seed")
                                  .Attr<std::string_view>("param")
                                  .Attr<layerinit::jax::ffi::Span<const std::int64_t>>("table")
                                  .Ret<layerinit::jax::ffi::AnyBuffer>());
