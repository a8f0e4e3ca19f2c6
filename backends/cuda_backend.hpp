// The CUDA backend: device memory from a stream-ordered pool, fills with one kernel per batch.
//
// cuda_probe() and CudaProbe are declared in backends/backend.hpp; make_backend("cuda") is the usual way
// in. Everything here is for the CUDA build only (LAYERINIT_HAS_CUDA).
//
// A backend uses one device ("cuda:N") and one non-blocking stream: fill, copy, and the pool's
// allocations and frees are all ordered on it. Its memory() resource (backends/cuda_resource.cu):
//   allocate/deallocate  cudaMallocFromPoolAsync / cudaFreeAsync on the stream, from a pool of its own
//                        whose release threshold is "never", so memory freed mid-build stays in the pool;
//                        out of memory throws layerinit::out_of_memory(bytes asked, bytes in use, ...).
//   reserve/commit/release  the CUDA virtual memory API: address space first, physical granules mapped
//                        on commit (every granule touching the range), all unmapped and freed on release.
// Allocations and reservations from it must be freed before the backend is destroyed.
#pragma once

#include <cuda_runtime_api.h>  // cudaStream_t

#include <cstddef>
#include <memory>

#include <layerinit/backends/backend.hpp>

namespace layerinit {

// The CUDA backend on `device`, its own pool and stream. Throws layerinit::error when the device is
// unusable (see cuda_probe()), layerinit::cuda_error on a failed call.
std::unique_ptr<backend> make_cuda_backend(int device = 0);
// cuda_probe and cuda_device_count of the real devices (backend.cpp's put a simulated node first).
CudaProbe real_cuda_probe(int device);
int real_cuda_device_count() noexcept;

// The pool's own counters (cudaMemPoolAttr*): bytes handed to allocations and bytes of device memory
// backing the pool, now and at their high-water marks since creation or the last reset.
struct CudaPoolStats {
  std::size_t used_current = 0;
  std::size_t used_high = 0;
  std::size_t reserved_current = 0;
  std::size_t reserved_high = 0;
};

// `mr` must be the memory() of a CUDA backend; anything else is misuse (layerinit::logic_error).
CudaPoolStats cuda_pool_stats(memory_resource& mr);
// Resets both high-water marks to the current values.
void cuda_pool_reset_peak(memory_resource& mr);

// The stream a CUDA backend orders its work on (for events and interop); `b` must be a CUDA backend
// (else layerinit::logic_error).
cudaStream_t cuda_backend_stream(backend& b);

}  // namespace layerinit
