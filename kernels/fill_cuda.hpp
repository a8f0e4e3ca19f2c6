// The CUDA fill: one kernel launch writes a whole batch of jobs, byte for byte what fill_host writes.
#pragma once

#include <cuda_runtime_api.h>  // cudaStream_t

#include <span>
#include <string>

#include <layerinit/kernels/fill.hpp>

namespace layerinit {

// Makes `device` current for a scope (which also makes its primary context current for the driver API)
// and restores the caller's device after. Never throws, so destructors may use it; status() is the
// switch's result, for a caller that must not go on on another device (LAYERINIT_CUDA_TRY it).
class DeviceScope {
 public:
  explicit DeviceScope(int device) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t status() const noexcept { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// Enqueues the writes of every job on `stream` and returns without waiting: one kernel launch per
// dtype in the batch and per grid::max_grid_jobs jobs (the job table is the launch's parameter).
// Every job's dst must be device memory (of the current device) aligned to its element size; jobs must
// not overlap; a transposed job needs rows * cols >= end. A bad job is misuse: layerinit::logic_error
// (check_fill_job; nothing is enqueued then) and layerinit::cuda_error when a CUDA call fails.
// The first call on a device that fill_cuda_prepare has not prepared prepares it (synchronously).
void fill_cuda(std::span<const FillJob> jobs, cudaStream_t stream);

// Prepares `device` for fill_cuda: copies the quantile tables to it and caches its SM count and the
// kernels' blocks per SM for each launch shape (dtype, with or without a table), so no fill copies or
// queries. Synchronous; once per device (later calls return at once); thread-safe. The CUDA backend
// calls it when it is made. layerinit::cuda_error when a CUDA call fails.
void fill_cuda_prepare(int device);

// Whether the fill kernel can run on the current device (its architecture is in the fat binary).
// Returns an empty string when it can, else the reason. Never throws.
std::string fill_cuda_check_device() noexcept;

}  // namespace layerinit
