#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/caller_queue.hpp>

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <vector>

#include <layerinit/config.hpp>
#include <layerinit/core/errors.hpp>

namespace layerinit {

#if !LAYERINIT_HAS_CUDA
namespace {
CudaProbe real_cuda_probe(int) { return CudaProbe{false, "layerinit was built without CUDA", ""}; }
int real_cuda_device_count() noexcept { return 0; }
std::unique_ptr<backend> make_cuda_backend(int) { throw error("CUDA backend unavailable: layerinit was built without CUDA"); }
}  // namespace
std::unique_ptr<backend> make_cuda_backend_on_stream(int, void*) {
  throw error("CUDA backend unavailable: layerinit was built without CUDA");
}
#else
CudaProbe real_cuda_probe(int device);        // backends/cuda_backend.cu
int real_cuda_device_count() noexcept;        // backends/cuda_backend.cu
std::unique_ptr<backend> make_cuda_backend(int device);
#endif

CudaProbe cuda_probe(int device) {
  if (const int n = simulated_cuda_devices(); n > 0) {
    if (device < 0 || device >= n) return CudaProbe{false, "no CUDA device " + std::to_string(device) + " (simulated node of " + std::to_string(n) + ")", ""};
    return CudaProbe{true, "", "simulated"};
  }
  return real_cuda_probe(device);
}

int cuda_device_count() noexcept {
  if (const int n = simulated_cuda_devices(); n > 0) return n;
  return real_cuda_device_count();
}

DeviceChoice choose_device(std::string_view name, std::string_view argument) {
  if (name == "cpu" || name == "host") return {BackendKind::host, -1};
  if (name == "auto") {
    if (cuda_probe(0).usable) return {BackendKind::cuda, 0};
    return {BackendKind::host, -1};
  }
  int index = -1;
  if (name == "cuda") {
    index = 0;
  } else if (name.starts_with("cuda:")) {
    const std::string_view digits = name.substr(5);
    const bool canonical = !digits.empty() && (digits.size() == 1 || digits.front() != '0');
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!canonical || ec != std::errc() || end != digits.data() + digits.size() || index < 0)
      bad_argument(argument, name, "is not a device (valid: auto, cpu, cuda, cuda:N with N a device index)");
  } else {
    bad_argument(argument, name, "is unknown (valid: auto, cpu, cuda, cuda:N)");
  }
  const CudaProbe first = cuda_probe(0);
  if (!first.usable) throw error("CUDA backend unusable: " + first.why);
  const int n = cuda_device_count();
  if (index >= n)
    bad_argument(argument, name, "does not exist: this process sees " + std::to_string(n) + " CUDA device" + (n == 1 ? "" : "s") +
                                     " (cuda:0" + (n > 1 ? " to cuda:" + std::to_string(n - 1) : "") + ")");
  if (index > 0) {
    const CudaProbe p = cuda_probe(index);
    if (!p.usable) throw error("CUDA backend unusable: " + p.why);
  }
  return {BackendKind::cuda, index};
}

std::unique_ptr<backend> make_backend(const DeviceChoice& device, int threads) {
  if (threads < 0) bad_argument("thread count", threads, "must be >= 0 (0 = the CPUs this process may use)");
  if (device.kind == BackendKind::host) return make_host_backend(threads);
  if (device.kind == BackendKind::dry) return make_dry_backend();
  if (simulated_cuda_devices() > 0) return make_simulated_cuda_backend(device.cuda_device);
  return make_cuda_backend(device.cuda_device);
}

std::unique_ptr<backend> make_backend(std::string_view name, int threads) { return make_backend(choose_device(name), threads); }

void read_on_host(backend& be, const void* data, std::uint64_t bytes, std::span<unsigned char> staging,
                  const std::function<void(const void* host, std::uint64_t offset, std::uint64_t n)>& visit) {
  if (be.memory().kind() == MemoryKind::host) {
    visit(data, 0, bytes);
    return;
  }
  LAYERINIT_EXPECTS(bytes == 0 || !staging.empty(), "read_on_host: device memory needs a staging buffer");
  for (std::uint64_t off = 0; off < bytes; off += staging.size()) {
    const std::uint64_t n = std::min<std::uint64_t>(staging.size(), bytes - off);
    be.copy_to_host(staging.data(), static_cast<const unsigned char*>(data) + off, n);
    visit(staging.data(), off, n);
  }
}

std::uint64_t hash_bytes(backend& be, const void* data, std::uint64_t bytes) {
  LAYERINIT_EXPECTS(be.kind() != BackendKind::dry, "hash_bytes: the dry backend holds no bytes");
  if (be.memory().kind() == MemoryKind::host) return content_hash(data, bytes);
  std::vector<unsigned char> staging(std::min<std::uint64_t>(bytes, 64ull << 20));
  ContentHash h;
  read_on_host(be, data, bytes, staging, [&](const void* host, std::uint64_t, std::uint64_t n) { h.update(host, n); });
  return h.digest();
}

std::uint64_t hash_tensor(backend& be, const TensorView& t) { return hash_bytes(be, t.data, t.bytes()); }

}  // namespace layerinit
