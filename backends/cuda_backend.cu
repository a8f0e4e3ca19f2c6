// The CUDA backend: one non-blocking stream on its device orders fills, copies and its memory
// resource's work (backends/cuda_resource.cu).
#include <layerinit/backends/cuda_backend.hpp>

#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>

#include <layerinit/backends/caller_queue.hpp>
#include <layerinit/backends/cuda_resource.hpp>
#include <layerinit/core/cuda_check.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/kernels/fill_cuda.hpp>

namespace layerinit {

namespace {

class cuda_backend final : public backend {
 public:
  // `caller_stream` null: a stream of its own; else the caller's, which it never synchronizes on
  // destruction nor destroys (make_cuda_backend_on_stream).
  explicit cuda_backend(int device, cudaStream_t caller_stream = nullptr)
      : device_(device), stream_(caller_stream), owns_stream_(caller_stream == nullptr) {
    DeviceScope scope(device_);
    cudaDeviceProp prop{};
    LAYERINIT_CUDA_TRY(cudaGetDeviceProperties(&prop, device_));
    name_ = "cuda:" + std::to_string(device_) + " " + prop.name;
    fill_cuda_prepare(device_);  // the tables and launch shapes now, not at the first fill
    if (owns_stream_) LAYERINIT_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    try {
      mr_ = make_cuda_resource(device_, stream_, name_);
    } catch (...) {
      if (owns_stream_) (void)cudaStreamDestroy(stream_);
      throw;
    }
  }

  ~cuda_backend() override {
    DeviceScope scope(device_);
    if (owns_stream_) LAYERINIT_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream_));
    mr_.reset();
    if (owns_stream_) LAYERINIT_CUDA_TRY_NOTHROW(cudaStreamDestroy(stream_));
  }

  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  BackendKind kind() const noexcept override { return BackendKind::cuda; }
  std::string describe() const override { return name_; }
  memory_resource& memory() noexcept override { return *mr_; }

  void fill(std::span<const FillJob> jobs) override {
    DeviceScope scope(device_);
    fill_cuda(jobs, stream_);
  }

  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceScope scope(device_);
    LAYERINIT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceScope scope(device_);
    LAYERINIT_CUDA_TRY(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    LAYERINIT_CUDA_TRY(cudaStreamSynchronize(stream_));
  }

  void reserve(std::uint64_t bytes) noexcept override { cuda_pool_grow(*mr_, bytes); }

  void synchronize() override {
    DeviceScope scope(device_);
    LAYERINIT_CUDA_TRY(cudaStreamSynchronize(stream_));
  }

  std::optional<AvailableMemory> available_memory() const override {
    DeviceScope scope(device_);
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return std::nullopt;
    }
    return AvailableMemory{free_bytes, "cudaMemGetInfo free bytes of " + name_};
  }

  cudaStream_t stream() const noexcept { return stream_; }

 private:
  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = true;
  std::unique_ptr<memory_resource> mr_;  // destroyed before the stream
};

}  // namespace

std::unique_ptr<backend> make_cuda_backend(int device) {
  const CudaProbe p = real_cuda_probe(device);
  if (!p.usable) throw error("CUDA backend unusable: " + p.why);
  return std::make_unique<cuda_backend>(device);
}

std::unique_ptr<backend> make_cuda_backend_on_stream(int device, void* stream) {
  LAYERINIT_EXPECTS(stream != nullptr, "make_cuda_backend_on_stream: no stream (the legacy default stream is not a caller's queue)");
  const CudaProbe p = real_cuda_probe(device);
  if (!p.usable) throw error("CUDA backend unusable: " + p.why);
  return std::make_unique<cuda_backend>(device, static_cast<cudaStream_t>(stream));
}

int real_cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

CudaProbe real_cuda_probe(int device) {
  try {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaProbe{false, std::string("no CUDA driver: ") + cudaGetErrorString(e), ""};
    }
    if (n <= 0) return CudaProbe{false, "no CUDA device", ""};
    const std::string which = "CUDA device " + std::to_string(device);
    if (device < 0 || device >= n) return CudaProbe{false, "no " + which + " (this process sees " + std::to_string(n) + ")", ""};
    cudaDeviceProp prop{};
    if (const cudaError_t e2 = cudaGetDeviceProperties(&prop, device); e2 != cudaSuccess) {
      (void)cudaGetLastError();
      return CudaProbe{false, "cannot query " + which + ": " + cudaGetErrorString(e2), ""};
    }
    const std::string name = prop.name;
    const std::string arch = " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess || pools == 0) {
      (void)cudaGetLastError();
      return CudaProbe{false, which + " " + name + " does not support stream-ordered memory pools", name};
    }
    DeviceScope scope(device);
    if (const std::string why = fill_cuda_check_device(); !why.empty())
      return CudaProbe{false, which + " " + name + arch + ": " + why, name};
    return CudaProbe{true, "", name};
  } catch (...) {
    return CudaProbe{false, "CUDA probe failed", ""};
  }
}

cudaStream_t cuda_backend_stream(backend& b) {
  auto* c = dynamic_cast<cuda_backend*>(&b);
  LAYERINIT_EXPECTS(c != nullptr, "backend '" + b.describe() + "' is not a CUDA backend");
  return c->stream();
}

}  // namespace layerinit
