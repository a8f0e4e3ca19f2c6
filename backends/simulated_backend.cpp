// The simulated node's stand-in CUDA backends (backend.hpp, LAYERINIT_TEST_SIMULATED_CUDA_DEVICES).
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/caller_queue.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/kernels/fill_grid.hpp>

namespace layerinit {

namespace {

std::mutex& record_mutex() {
  static std::mutex mu;
  return mu;
}

std::vector<SimulatedDeviceEvent>& record() {
  static std::vector<SimulatedDeviceEvent> events;
  return events;
}

void record_simulated_device_event(const SimulatedDeviceEvent& e) {
  std::lock_guard lock(record_mutex());
  record().push_back(e);
}

// Host memory that says "device", recording what each call asks for on its device.
class simulated_resource final : public memory_resource {
 public:
  explicit simulated_resource(int device) : device_(device) {}

 private:
  void* do_allocate(std::size_t bytes, const AllocTag& tag) override {
    void* p = host_.allocate(bytes, tag);
    record_simulated_device_event({device_, SimulatedDeviceEvent::What::allocate, bytes});
    return p;
  }
  void do_deallocate(void* p, std::size_t bytes) noexcept override { host_.deallocate(p, bytes); }
  MemoryKind do_kind() const noexcept override { return MemoryKind::device; }
  std::string do_name() const override { return "cuda:" + std::to_string(device_) + " (simulated)"; }
  bool do_supports_reserve() const noexcept override { return true; }
  void* do_reserve(std::size_t bytes, const AllocTag& tag) override { return host_.reserve(bytes, tag); }
  void do_commit(void* base, std::size_t offset, std::size_t bytes) override {
    host_.commit(base, offset, bytes);
    record_simulated_device_event({device_, SimulatedDeviceEvent::What::allocate, bytes});
  }
  void do_release(void* base, std::size_t reserved_bytes) noexcept override { host_.release(base, reserved_bytes); }

  int device_;
  host_resource host_;
};

class simulated_backend final : public backend {
 public:
  explicit simulated_backend(int device) : device_(device), mr_(device) {}
  BackendKind kind() const noexcept override { return BackendKind::cuda; }
  std::string describe() const override { return "cuda:" + std::to_string(device_) + " simulated (host memory)"; }
  memory_resource& memory() noexcept override { return mr_; }
  void fill(std::span<const FillJob> jobs) override {
    // A small odd grid, so tasks wrap around blocks as they do on a GPU with more work than blocks.
    grid::fill_grid_simulated(jobs, 3, 64);
    record_simulated_fill(device_, jobs);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    copy(host_dst, src, bytes);
    record_simulated_device_event({device_, SimulatedDeviceEvent::What::copy_to_host, bytes});
  }
  void reserve(std::uint64_t bytes) noexcept override {
    try {
      record_simulated_device_event({device_, SimulatedDeviceEvent::What::reserve, bytes});
    } catch (...) {  // a hint: the record's memory is the tests', never the build's failure
    }
  }
  void synchronize() override { record_simulated_device_event({device_, SimulatedDeviceEvent::What::synchronize, 0}); }

 private:
  int device_;
  simulated_resource mr_;
};

}  // namespace

int simulated_cuda_devices() noexcept {
  const char* v = std::getenv("LAYERINIT_TEST_SIMULATED_CUDA_DEVICES");
  if (v == nullptr) return 0;
  const std::string_view text(v);
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  return ec == std::errc() && end == text.data() + text.size() && n >= 1 && n <= 64 ? n : 0;
}

void record_simulated_fill(int device, std::span<const FillJob> jobs) {
  if (simulated_cuda_devices() == 0) return;
  std::uint64_t bytes = 0;
  for (const FillJob& j : jobs) bytes += job_elements(j) * dtype_size(j.dtype);
  record_simulated_device_event({device, SimulatedDeviceEvent::What::fill, bytes});
}

std::vector<SimulatedDeviceEvent> take_simulated_device_events() {
  std::lock_guard lock(record_mutex());
  return std::exchange(record(), {});
}

std::unique_ptr<backend> make_simulated_cuda_backend(int device) { return std::make_unique<simulated_backend>(device); }

}  // namespace layerinit
