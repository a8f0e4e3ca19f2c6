// The CUDA handler: the jobs are made on the host from the attributes alone (the parameter parsed at
// instantiation, LayerinitParamCuda) and enqueued, through
// backend::fill, on the stream XLA hands the handler, writing XLA's device buffer; nothing is copied
// and nothing waits.
#include "xla_handlers.hpp"

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/caller_queue.hpp>

namespace layerinit::jax {
namespace {

// The CUDA backend of the device XLA runs the call on, ordered on the stream XLA hands the call (the
// tables and launch shapes are per device). Made on first use and never destroyed: XLA may still run
// a fill while the process exits.
backend& on_stream(std::int32_t ordinal, cudaStream_t stream) {
  static std::mutex mu;
  static auto* const made = new std::map<std::pair<std::int32_t, cudaStream_t>, std::unique_ptr<backend>>;
  std::lock_guard lock(mu);
  std::unique_ptr<backend>& be = (*made)[{ordinal, stream}];
  if (!be) be = make_cuda_backend_on_stream(ordinal, stream);
  return *be;
}

ffi::Error fill_cuda_impl(cudaStream_t stream, std::int32_t ordinal, ParamState<Platform::cuda>* param, std::optional<ffi::AnyBuffer>,
                          std::int64_t seed, std::string_view, ffi::Span<const std::int64_t> table,
                          ffi::Result<ffi::AnyBuffer> out) {
  return fill_piece(ordinal, param, seed, table, *out, [ordinal, stream] { return &on_stream(ordinal, stream); });
}

ffi::Error ordinal_cuda_impl(cudaStream_t stream, std::int32_t ordinal, ffi::Result<ffi::Buffer<ffi::DataType::S32>> out) {
  // From pageable memory the copy is staged before the call returns, so a local is a valid source.
  const cudaError_t e = cudaMemcpyAsync(out->typed_data(), &ordinal, sizeof ordinal, cudaMemcpyHostToDevice, stream);
  if (e != cudaSuccess) return ffi::Error::Internal(std::string("layerinit: ") + cudaGetErrorString(e));
  return ffi::Error::Success();
}

}  // namespace
}  // namespace layerinit::jax

XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitParamCuda, layerinit::jax::instantiate_param<layerinit::jax::Platform::cuda>,
                              layerinit::jax::instantiate_binding());
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitFillCuda, layerinit::jax::fill_cuda_impl,
                              layerinit::jax::fill_binding<layerinit::jax::Platform::cuda>(layerinit::jax::ffi::Ffi::Bind()
                                                               .Ctx<layerinit::jax::ffi::PlatformStream<cudaStream_t>>()
                                                               .Ctx<layerinit::jax::ffi::DeviceOrdinal>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerinitOrdinalCuda, layerinit::jax::ordinal_cuda_impl,
                              layerinit::jax::ffi::Ffi::Bind()
                                  .Ctx<layerinit::jax::ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<layerinit::jax::ffi::DeviceOrdinal>()
                                  .Ret<layerinit::jax::ffi::Buffer<layerinit::jax::ffi::DataType::S32>>());
