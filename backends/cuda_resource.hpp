// The CUDA backend's memory resource, and the device scope both the backend and the resource use.
// Private to backends/ (CUDA build only).
#pragma once

#include <cuda_runtime_api.h>  // cudaStream_t

#include <memory>
#include <string>

#include <layerinit/memory/resource.hpp>

namespace layerinit {

// Makes `device` current for a scope (which also makes its primary context current for the driver API)
// and restores the caller's device after. Never throws: a failure shows up in the next checked call.
class DeviceScope {
 public:
  explicit DeviceScope(int device) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// The memory of a CUDA backend on `device` whose work is ordered on `stream` (backends/cuda_backend.hpp
// describes it); `label` names it in messages. Reservations need the driver's virtual memory
// management (supports_reserve() says whether this device and driver have it). Throws
// layerinit::cuda_error when the pool cannot be created.
std::unique_ptr<memory_resource> make_cuda_resource(int device, cudaStream_t stream, std::string label);

// Grows the pool of a CUDA backend's memory to `bytes` at once (backend::reserve). Never throws.
void cuda_pool_grow(memory_resource& mr, std::size_t bytes) noexcept;

}  // namespace layerinit
