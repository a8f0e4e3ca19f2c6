#include <cstring>

#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/config.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/core/errors.hpp>

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

}  // namespace layerinit
