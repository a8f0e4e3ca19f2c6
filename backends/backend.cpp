#include <layerinit/backends/backend.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <layerinit/config.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/kernels/philox.hpp>

namespace layerinit {

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

std::uint64_t hash_bytes(backend& be, const void* data, std::uint64_t bytes) {
  if (be.kind() == BackendKind::dry) throw std::logic_error("hash_bytes: the dry backend holds no bytes");
  if (be.memory().kind() == MemoryKind::host) return rng::fnv1a64(data, bytes);
  constexpr std::uint64_t chunk = 64ull << 20;
  std::vector<unsigned char> staging(std::min(bytes, chunk));
  std::uint64_t h = rng::fnv1a64_init;
  for (std::uint64_t off = 0; off < bytes; off += chunk) {
    const std::uint64_t n = std::min(chunk, bytes - off);
    be.copy_to_host(staging.data(), static_cast<const unsigned char*>(data) + off, n);
    h = rng::fnv1a64(staging.data(), n, h);
  }
  return h;
}

std::uint64_t hash_tensor(backend& be, const TensorView& t) { return hash_bytes(be, t.data, t.bytes()); }

}  // namespace layerinit
