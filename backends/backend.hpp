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
#include <vector>

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
  // A hint before a build: its allocations will hold up to `bytes` at once, so memory that grows in
  // steps (the CUDA backend's pool) grows once, before the first fill, not at each allocation. Does
  // nothing where memory comes allocation by allocation (the host); never throws (out of memory is
  // the allocations' to say).
  virtual void reserve(std::uint64_t bytes) noexcept { (void)bytes; }
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
// Whether CUDA device `device` can be used, and why not. Never throws.
LAYERINIT_API CudaProbe cuda_probe(int device = 0);

// How many CUDA devices this process sees (0 when CUDA is unusable). Never throws.
LAYERINIT_API int cuda_device_count() noexcept;

// Where a backend name puts tensors: the host, or CUDA device `cuda_device`.
struct DeviceChoice {
  BackendKind kind = BackendKind::host;
  int cuda_device = -1;  // kind == cuda: the device index
};

// The device a name asks for, as torch names devices: "cpu" or "host"; "cuda" (device 0) or "cuda:N";
// "auto" (CUDA device 0 when usable, else the host). `argument` names the name in errors:
// bad_input for an unknown name or a device index this process does not have,
// layerinit::error when CUDA is asked but unusable. Allocates nothing.
LAYERINIT_API DeviceChoice choose_device(std::string_view name, std::string_view argument = "backend");

// The backend of a device (choose_device's names). threads: host threads, 0 = the CPUs the process may use
// (affinity and cgroup quota, core/cpus.hpp).
LAYERINIT_API std::unique_ptr<backend> make_backend(std::string_view name, int threads = 0);
LAYERINIT_API std::unique_ptr<backend> make_backend(const DeviceChoice& device, int threads = 0);

// A simulated node, for tests of device selection on machines without a GPU: with
// LAYERINIT_TEST_SIMULATED_CUDA_DEVICES=N in the environment (1 <= N <= 64), cuda_probe and
// cuda_device_count see N CUDA devices, and a CUDA backend is a stand-in whose memory says "device" but
// is host memory, whose fills run the CUDA kernel's work split over a simulated grid
// (kernels/fill_grid.hpp), and which records each allocation, fill and copy to the host with its device.
struct SimulatedDeviceEvent {
  enum class What { reserve, allocate, fill, copy_to_host, synchronize };
  int device = 0;
  What what = What::fill;
  std::uint64_t bytes = 0;
};
// The simulated node's size: 0 when not simulating.
LAYERINIT_API int simulated_cuda_devices() noexcept;
// Records a fill of `jobs` on simulated device `device` when simulating (the stand-in backends do, and
// the JAX grid handler for the device XLA runs it on); does nothing otherwise.
LAYERINIT_API void record_simulated_fill(int device, std::span<const FillJob> jobs);
// The events recorded since the last call, in order; clears the record.
LAYERINIT_API std::vector<SimulatedDeviceEvent> take_simulated_device_events();

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
