// The CUDA backend's memory resource (the device scope it and the backend use: kernels/fill_cuda.hpp).
// Private to backends/ (CUDA build only).
#pragma once

#include <cuda_runtime_api.h>  // cudaStream_t

#include <memory>
#include <string>

#include <layerinit/kernels/fill_cuda.hpp>  // DeviceScope
#include <layerinit/memory/resource.hpp>

namespace layerinit {

// The memory of a CUDA backend on `device` whose work is ordered on `stream` (backends/cuda_backend.hpp
// describes it); `label` names it in messages. Reservations need the driver's virtual memory
// management (supports_reserve() says whether this device and driver have it). Throws
// layerinit::cuda_error when the pool cannot be created.
std::unique_ptr<memory_resource> make_cuda_resource(int device, cudaStream_t stream, std::string label);

// Grows the pool of a CUDA backend's memory to `bytes` at once (backend::reserve). Never throws.
void cuda_pool_grow(memory_resource& mr, std::size_t bytes) noexcept;

}  // namespace layerinit
