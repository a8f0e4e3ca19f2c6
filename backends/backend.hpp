// Backends: where tensors live and how they are filled, behind one interface.
//
// The host backend is the reference: the CUDA backend must produce the same bytes for every fill.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <layerinit/core/api.hpp>
#include <layerinit/backends/content_hash.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/memory/resource.hpp>
#include <layerinit/memory/tensor.hpp>
#include <layerinit/memory/available.hpp>

namespace layerinit {

// dry: allocations are address space that is never touched and fills do nothing; for exact memory
// accounting of models larger than the machine (plan, peak tests).
enum class BackendKind { host, cuda, dry };

class LAYERINIT_API backend {
 public:
  virtual ~backend() = default;
  virtual BackendKind kind() const noexcept = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (16 threads)", "cuda:0 NVIDIA H200"
  // The untracked resource tensors of this backend come from; wrap it in a tracking_resource.
  virtual memory_resource& memory() noexcept = 0;
  // Writes every job. Jobs must not overlap in memory. May return before the writes finish on CUDA;
  // synchronize() waits.
  virtual void fill(std::span<const FillJob> jobs) = 0;
  // Copies within this backend's memory.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // Copies from this backend's memory to host memory, then waits.
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void synchronize() = 0;
  // What this backend's memory() may still hand out, for a check before a build allocates: on the
  // host available_host_memory() (cgroup limits, MemAvailable), on a GPU cudaMemGetInfo's free
  // bytes; nullopt when unknown (the dry backend). Never throws.
  virtual std::optional<AvailableMemory> available_memory() const { return std::nullopt; }
};

struct CudaProbe {
  bool usable = false;
  std::string why;  // when unusable: "layerinit was built without CUDA", "no CUDA driver: ...", "no CUDA device"
  std::string device_name;
};
// Whether a CUDA device can be used, and why not. Never throws.
LAYERINIT_API CudaProbe cuda_probe();

// "auto" (CUDA when usable, else host), "cpu" or "host", "cuda". threads: host threads, 0 = all cores.
// Throws std::invalid_argument for an unknown name, layerinit::error when CUDA is asked but unusable.
LAYERINIT_API std::unique_ptr<backend> make_backend(std::string_view name, int threads = 0);

// The host backend on its own (always available).
LAYERINIT_API std::unique_ptr<backend> make_host_backend(int threads = 0);

// The dry backend: the same allocation calls as a real build, no bytes written or backed.
LAYERINIT_API std::unique_ptr<backend> make_dry_backend();

// Hands [data, data + bytes) of the backend's memory to visit(host, offset, n) in order, as host
// memory: in one chunk (offset 0) when the backend's memory is host memory, else copied into
// `staging` chunk by chunk, each staging.size() bytes but the last. Device bytes to be read through an
// empty staging buffer are misuse (layerinit::logic_error).
LAYERINIT_API void read_on_host(backend& be, const void* data, std::uint64_t bytes, std::span<unsigned char> staging,
                                const std::function<void(const void* host, std::uint64_t offset, std::uint64_t n)>& visit);

// The report hash of a tensor: XXH3-64 of its raw bytes (content_hash.hpp), read through the
// backend (device memory is copied to the host in chunks of at most 64 MiB).
LAYERINIT_API std::uint64_t hash_tensor(backend& be, const TensorView& t);
LAYERINIT_API std::uint64_t hash_bytes(backend& be, const void* data, std::uint64_t bytes);

}  // namespace layerinit
