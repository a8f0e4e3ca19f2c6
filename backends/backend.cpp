#include <layerinit/backends/backend.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <layerinit/config.hpp>
#include <layerinit/core/errors.hpp>

namespace layerinit {

#if !LAYERINIT_HAS_CUDA
CudaProbe cuda_probe() { return CudaProbe{false, "layerinit was built without CUDA", ""}; }
std::unique_ptr<backend> make_cuda_backend(int) {
  throw error("CUDA backend unavailable: layerinit was built without CUDA");
}
#else
std::unique_ptr<backend> make_cuda_backend(int threads);  // backends/cuda_backend.cu
#endif

std::unique_ptr<backend> make_backend(std::string_view name, int threads) {
  if (threads < 0) bad_argument("thread count", threads, "must be >= 0 (0 = all cores)");
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
  bad_argument("backend", name, "is unknown (valid: auto, cpu, cuda)");
}

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
