#include <cstring>

#include "kernels/fill_host.hpp"
#include "layerinit/config.hpp"
#include "memory/backend.hpp"
#include "memory/errors.hpp"

namespace layerinit {

namespace {

class host_backend final : public backend {
 public:
  explicit host_backend(int threads) : threads_(threads > 0 ? threads : default_thread_count()) {}
  BackendKind kind() const noexcept override { return BackendKind::host; }
  std::string describe() const override { return "cpu (" + std::to_string(threads_) + " threads)"; }
  memory_resource& memory() noexcept override { return mr_; }
  void fill(std::span<const FillJob> jobs) override { fill_host(jobs, threads_); }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { copy(dst, src, bytes); }
  void synchronize() override {}
  std::optional<AvailableMemory> available_memory() const override { return available_host_memory(); }

 private:
  int threads_;
  host_resource mr_;
};

}  // namespace

std::unique_ptr<backend> make_host_backend(int threads) { return std::make_unique<host_backend>(threads); }

#if !LAYERINIT_HAS_CUDA
CudaProbe cuda_probe() { return CudaProbe{false, "layerinit was built without CUDA", ""}; }
std::unique_ptr<backend> make_cuda_backend(int) {
  throw error("CUDA backend unavailable: layerinit was built without CUDA");
}
#else
std::unique_ptr<backend> make_cuda_backend(int threads);  // memory/cuda_backend.cu
#endif

std::unique_ptr<backend> make_backend(std::string_view name, int threads) {
  if (threads < 0) throw std::invalid_argument("thread count must be >= 0 (0 = all cores), got " + std::to_string(threads));
  if (name == "cpu" || name == "host") return make_host_backend(threads);
  if (name == "cuda") {
    const CudaProbe p = cuda_probe();
    if (!p.usable) throw error("CUDA backend unusable: " + p.why);
    return make_cuda_backend(threads);
  }
  if (name == "auto") {
    if (cuda_probe().usable) return make_cuda_backend(threads);
    return make_host_backend(threads);
  }
  throw std::invalid_argument("unknown backend '" + std::string(name) + "' (valid: auto, cpu, cuda)");
}

}  // namespace layerinit
