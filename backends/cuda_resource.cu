// The CUDA backend's memory resource: a stream-ordered pool of its own for allocations, the CUDA
// virtual memory API for reserve/commit/release.
//
// The driver API (cuMemCreate & co., for reserve/commit) is reached through
// cudaGetDriverEntryPointByVersion rather than by calling libcuda's symbols, so nothing here needs
// libcuda.so.1 at load time and cuda_probe() can say "no CUDA driver" on a machine without one.
#include <layerinit/backends/cuda_resource.hpp>

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <layerinit/backends/cuda_backend.hpp>
#include <layerinit/core/cuda_check.hpp>
#include <layerinit/core/errors.hpp>

namespace layerinit {

namespace {

// The driver functions reserve/commit/release need, looked up once.
struct DriverApi {
  decltype(&::cuGetErrorString) getErrorString = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) memGetAllocationGranularity = nullptr;
  decltype(&::cuMemAddressReserve) memAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) memAddressFree = nullptr;
  decltype(&::cuMemCreate) memCreate = nullptr;
  decltype(&::cuMemRelease) memRelease = nullptr;
  decltype(&::cuMemMap) memMap = nullptr;
  decltype(&::cuMemUnmap) memUnmap = nullptr;
  decltype(&::cuMemSetAccess) memSetAccess = nullptr;
  std::string missing;  // empty when every function was found
};

template <class F>
void lookup(const char* symbol, F& f, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &p, CUDA_VERSION, cudaEnableDefault, &status);
  if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    if (!missing.empty()) missing += ", ";
    missing += symbol;
    return;
  }
  f = reinterpret_cast<F>(p);
}

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi a;
    lookup("cuGetErrorString", a.getErrorString, a.missing);
    lookup("cuDeviceGet", a.deviceGet, a.missing);
    lookup("cuDeviceGetAttribute", a.deviceGetAttribute, a.missing);
    lookup("cuMemGetAllocationGranularity", a.memGetAllocationGranularity, a.missing);
    lookup("cuMemAddressReserve", a.memAddressReserve, a.missing);
    lookup("cuMemAddressFree", a.memAddressFree, a.missing);
    lookup("cuMemCreate", a.memCreate, a.missing);
    lookup("cuMemRelease", a.memRelease, a.missing);
    lookup("cuMemMap", a.memMap, a.missing);
    lookup("cuMemUnmap", a.memUnmap, a.missing);
    lookup("cuMemSetAccess", a.memSetAccess, a.missing);
    return a;
  }();
  return api;
}

std::string cu_error_text(CUresult r) {
  const char* s = nullptr;
  if (driver().getErrorString && driver().getErrorString(r, &s) == CUDA_SUCCESS && s) return s;
  return "CUresult " + std::to_string(static_cast<int>(r));
}

[[noreturn]] void throw_cu_error(CUresult r, const char* call, const char* file, int line) {
  throw cuda_error(call, cu_error_text(r), file, line);
}

}  // namespace

#define LAYERINIT_CU_TRY(call)                                                                   \
  do {                                                                                           \
    const CUresult layerinit_res_ = (call);                                                      \
    if (layerinit_res_ != CUDA_SUCCESS) throw_cu_error(layerinit_res_, #call, __FILE__, __LINE__); \
  } while (0)

#define LAYERINIT_CU_TRY_NOTHROW(call)                                                           \
  do {                                                                                           \
    const CUresult layerinit_res_ = (call);                                                      \
    if (layerinit_res_ != CUDA_SUCCESS)                                                          \
      std::fprintf(stderr, "layerinit: %s:%d: %s failed: %s (ignored in a path that cannot throw)\n", \
                   __FILE__, __LINE__, #call, cu_error_text(layerinit_res_).c_str());            \
  } while (0)

namespace {

class cuda_resource final : public memory_resource {
 public:
  cuda_resource(int device, cudaStream_t stream, std::string label)
      : device_(device), stream_(stream), label_(std::move(label)) {
    DeviceScope scope(device_);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    LAYERINIT_CUDA_TRY(cudaMemPoolCreate(&pool_, &props));
    try {
      // Never hand memory back to the driver at a synchronize: a build frees and reallocates layer
      // after layer, and the pool keeps what it has (cudaMemPoolTrimTo gives it back on demand).
      cuuint64_t threshold = UINT64_MAX;
      LAYERINIT_CUDA_TRY(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
      std::size_t free_bytes = 0;
      LAYERINIT_CUDA_TRY(cudaMemGetInfo(&free_bytes, &device_bytes_));
    } catch (...) {
      (void)cudaMemPoolDestroy(pool_);
      throw;
    }
    // Virtual memory management (reserve/commit): needs the driver entry points and device support.
    const DriverApi& d = driver();
    if (d.missing.empty()) {
      CUdevice dev = 0;
      int vmm = 0;
      if (d.deviceGet(&dev, device_) == CUDA_SUCCESS &&
          d.deviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) == CUDA_SUCCESS &&
          vmm != 0) {
        prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop_.location.id = dev;
        if (d.memGetAllocationGranularity(&granularity_, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
                CUDA_SUCCESS ||
            granularity_ == 0)
          granularity_ = 0;
      }
    }
  }

  ~cuda_resource() override {
    DeviceScope scope(device_);
    LAYERINIT_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream_));
    std::vector<void*> bases;
    {
      std::lock_guard lock(vmm_mu_);
      for (const auto& [base, r] : reservations_) bases.push_back(reinterpret_cast<void*>(base));
    }
    for (void* b : bases) do_release(b, 0);
    // With allocations still outstanding, the pool is freed when the last one is.
    LAYERINIT_CUDA_TRY_NOTHROW(cudaMemPoolDestroy(pool_));
  }

  cuda_resource(const cuda_resource&) = delete;
  cuda_resource& operator=(const cuda_resource&) = delete;

  cudaMemPool_t pool() const noexcept { return pool_; }

  // The pool grown to hold `bytes` in one step: an allocation of them freed at once, which the pool
  // keeps (its release threshold is "never"). Out of memory is left to the allocations that follow.
  void grow(std::size_t bytes) noexcept {
    DeviceScope scope(device_);
    void* p = nullptr;
    if (cudaMallocFromPoolAsync(&p, bytes, pool_, stream_) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (cudaFreeAsync(p, stream_) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  // Pool allocations --------------------------------------------------------------------------------

  void* do_allocate(std::size_t bytes, const AllocTag&) override {
    DeviceScope scope(device_);
    const std::size_t n = bytes == 0 ? 1 : bytes;  // a distinct pointer for an empty allocation
    void* p = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&p, n, pool_, stream_);
    if (is_oom(e, n)) {
      // Frees still pending on the stream, or free blocks too fragmented for this size: wait for the
      // stream, hand the pool's unused memory back, and try once more.
      (void)cudaGetLastError();
      LAYERINIT_CUDA_TRY(cudaStreamSynchronize(stream_));
      LAYERINIT_CUDA_TRY(cudaMemPoolTrimTo(pool_, 0));
      e = cudaMallocFromPoolAsync(&p, n, pool_, stream_);
    }
    if (is_oom(e, n)) {
      (void)cudaGetLastError();
      throw out_of_memory(bytes, in_use_.load(), label_ + " (stream-ordered pool)");
    }
    if (e != cudaSuccess) detail::throw_cuda_error(e, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
    in_use_ += bytes;
    return p;
  }

  void do_deallocate(void* p, std::size_t bytes) noexcept override {
    if (!p) return;
    DeviceScope scope(device_);
    LAYERINIT_CUDA_TRY_NOTHROW(cudaFreeAsync(p, stream_));
    in_use_ -= bytes;
    freed_since_trim_ = true;
  }

  // Out of memory: the pool cannot grow, or (as some drivers answer a size beyond the device) an
  // invalid value for a size larger than the whole device.
  bool is_oom(cudaError_t e, std::size_t n) const noexcept {
    return e == cudaErrorMemoryAllocation || (e == cudaErrorInvalidValue && n > device_bytes_);
  }

  MemoryKind do_kind() const noexcept override { return MemoryKind::device; }
  std::string do_name() const override { return label_; }

  // Reservations ------------------------------------------------------------------------------------

  struct Mapping {
    std::size_t offset;  // from the reservation's base, a multiple of the granularity
    std::size_t bytes;   // a multiple of the granularity
  };
  struct Reservation {
    std::size_t asked = 0;       // bytes the caller reserved: commits must stay inside
    std::size_t bytes = 0;       // reserved address space, a multiple of the granularity
    std::vector<bool> mapped;    // per granule
    std::vector<Mapping> maps;   // each cuMemMap, unmapped one by one on release
  };

  bool do_supports_reserve() const noexcept override { return granularity_ != 0; }

  void* do_reserve(std::size_t bytes, const AllocTag& tag) override {
    (void)tag;
    LAYERINIT_EXPECTS(granularity_ != 0, "memory resource '" + label_ + "' cannot reserve address space "
                                         "(no CUDA virtual memory management on this device or driver)");
    const std::size_t g = granularity_;
    LAYERINIT_EXPECTS(bytes <= SIZE_MAX - g, "reserve: size too large");
    const std::size_t size = std::max<std::size_t>(1, (bytes + g - 1) / g) * g;
    DeviceScope scope(device_);
    CUdeviceptr base = 0;
    const CUresult r = driver().memAddressReserve(&base, size, 0, 0, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
      throw out_of_memory(bytes, in_use_.load(), label_ + " (address reservation)");
    if (r != CUDA_SUCCESS) throw_cu_error(r, "cuMemAddressReserve", __FILE__, __LINE__);
    try {
      std::lock_guard lock(vmm_mu_);
      Reservation& res = reservations_[base];
      res.asked = bytes;
      res.bytes = size;
      res.mapped.assign(size / g, false);
    } catch (...) {
      (void)driver().memAddressFree(base, size);
      throw;
    }
    return reinterpret_cast<void*>(base);
  }

  void do_commit(void* base, std::size_t offset, std::size_t bytes) override {
    if (bytes == 0) return;
    std::lock_guard lock(vmm_mu_);
    auto it = reservations_.find(reinterpret_cast<CUdeviceptr>(base));
    LAYERINIT_EXPECTS(it != reservations_.end(), "commit: base is not a reservation of " + label_);
    Reservation& res = it->second;
    LAYERINIT_EXPECTS(offset <= res.asked && bytes <= res.asked - offset, "commit: range outside the reservation");
    DeviceScope scope(device_);
    const std::size_t g = granularity_;
    const std::size_t last = (offset + bytes + g - 1) / g;  // one past the last granule touched
    // Map each run of granules not mapped yet with one physical allocation.
    for (std::size_t i = offset / g; i < last;) {
      if (res.mapped[i]) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < last && !res.mapped[j]) ++j;
      map_run(reinterpret_cast<CUdeviceptr>(base), res, i * g, (j - i) * g, bytes);
      std::fill(res.mapped.begin() + static_cast<std::ptrdiff_t>(i), res.mapped.begin() + static_cast<std::ptrdiff_t>(j), true);
      i = j;
    }
  }

  // Gives the pool's unused memory back to the device when it holds any: waits for the frees pending on
  // the stream (they become unused only then), then trims. Two attribute reads when there is none.
  void trim_pool_if_idle_memory() {
    std::uint64_t reserved = 0, used = 0;
    LAYERINIT_CUDA_TRY(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved));
    LAYERINIT_CUDA_TRY(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used));
    if (reserved <= used && !freed_since_trim_.load()) return;  // nothing idle, no free pending
    LAYERINIT_CUDA_TRY(cudaStreamSynchronize(stream_));
    freed_since_trim_ = false;
    LAYERINIT_CUDA_TRY(cudaMemPoolTrimTo(pool_, 0));
  }

  // Backs [offset, offset + len) of a reservation: create, map, allow access. The handle is released
  // once mapped; the memory lives until the range is unmapped.
  void map_run(CUdeviceptr base, Reservation& res, std::size_t offset, std::size_t len, std::size_t asked) {
    const DriverApi& d = driver();
    res.maps.reserve(res.maps.size() + 1);  // so the push_back below cannot throw after mapping
    CUmemGenericAllocationHandle h{};
    // Memory the pool holds but no allocation uses (stack() has just freed a layer into it) goes back
    // to the device first: the pool never returns it on its own (its release threshold is the whole
    // device), and physical memory for the commit comes from outside the pool.
    trim_pool_if_idle_memory();
    CUresult r = d.memCreate(&h, len, &prop_, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // frees may still be pending on the stream: wait, trim, retry once
      LAYERINIT_CUDA_TRY(cudaStreamSynchronize(stream_));
      LAYERINIT_CUDA_TRY(cudaMemPoolTrimTo(pool_, 0));
      r = d.memCreate(&h, len, &prop_, 0);
    }
    if (r == CUDA_ERROR_OUT_OF_MEMORY || (r == CUDA_ERROR_INVALID_VALUE && len > device_bytes_)) throw out_of_memory(asked, in_use_.load(), label_ + " (commit)");
    if (r != CUDA_SUCCESS) throw_cu_error(r, "cuMemCreate", __FILE__, __LINE__);
    r = d.memMap(base + offset, len, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      (void)d.memRelease(h);
      throw_cu_error(r, "cuMemMap", __FILE__, __LINE__);
    }
    CUmemAccessDesc access{};
    access.location = prop_.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d.memSetAccess(base + offset, len, &access, 1);
    if (r != CUDA_SUCCESS) {
      (void)d.memUnmap(base + offset, len);
      (void)d.memRelease(h);
      throw_cu_error(r, "cuMemSetAccess", __FILE__, __LINE__);
    }
    (void)d.memRelease(h);
    res.maps.push_back(Mapping{offset, len});
    in_use_ += len;
  }

  void do_release(void* base, std::size_t) noexcept override {
    if (!base) return;
    std::lock_guard lock(vmm_mu_);
    auto it = reservations_.find(reinterpret_cast<CUdeviceptr>(base));
    if (it == reservations_.end()) return;
    DeviceScope scope(device_);
    // Work queued on the stream may still touch the range.
    LAYERINIT_CUDA_TRY_NOTHROW(cudaStreamSynchronize(stream_));
    const DriverApi& d = driver();
    const auto b = reinterpret_cast<CUdeviceptr>(base);
    for (const Mapping& m : it->second.maps) {
      LAYERINIT_CU_TRY_NOTHROW(d.memUnmap(b + m.offset, m.bytes));
      in_use_ -= m.bytes;
    }
    LAYERINIT_CU_TRY_NOTHROW(d.memAddressFree(b, it->second.bytes));
    reservations_.erase(it);
  }

  int device_;
  cudaStream_t stream_;
  std::string label_;
  cudaMemPool_t pool_ = nullptr;
  std::size_t device_bytes_ = 0;
  std::atomic<bool> freed_since_trim_{false};  // a pool free may be pending on the stream
  std::atomic<std::size_t> in_use_{0};  // pool bytes asked plus committed bytes (granules)

  CUmemAllocationProp prop_{};
  std::size_t granularity_ = 0;  // 0: reserve/commit unsupported
  std::mutex vmm_mu_;
  std::unordered_map<CUdeviceptr, Reservation> reservations_;
};

cuda_resource& as_cuda_resource(memory_resource& mr) {
  auto* r = dynamic_cast<cuda_resource*>(&mr);
  LAYERINIT_EXPECTS(r != nullptr, "'" + mr.name() + "' is not the memory of a CUDA backend");
  return *r;
}

std::size_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  cuuint64_t v = 0;
  LAYERINIT_CUDA_TRY(cudaMemPoolGetAttribute(pool, attr, &v));
  return static_cast<std::size_t>(v);
}

}  // namespace

std::unique_ptr<memory_resource> make_cuda_resource(int device, cudaStream_t stream, std::string label) {
  return std::make_unique<cuda_resource>(device, stream, std::move(label));
}

CudaPoolStats cuda_pool_stats(memory_resource& mr) {
  cuda_resource& r = as_cuda_resource(mr);
  CudaPoolStats s;
  s.used_current = pool_attribute(r.pool(), cudaMemPoolAttrUsedMemCurrent);
  s.used_high = pool_attribute(r.pool(), cudaMemPoolAttrUsedMemHigh);
  s.reserved_current = pool_attribute(r.pool(), cudaMemPoolAttrReservedMemCurrent);
  s.reserved_high = pool_attribute(r.pool(), cudaMemPoolAttrReservedMemHigh);
  return s;
}

void cuda_pool_grow(memory_resource& mr, std::size_t bytes) noexcept {
  if (auto* r = dynamic_cast<cuda_resource*>(&mr); r != nullptr && bytes > 0) r->grow(bytes);
}

void cuda_pool_reset_peak(memory_resource& mr) {
  cuda_resource& r = as_cuda_resource(mr);
  cuuint64_t zero = 0;  // the only value these attributes accept: resets the mark to the current value
  LAYERINIT_CUDA_TRY(cudaMemPoolSetAttribute(r.pool(), cudaMemPoolAttrUsedMemHigh, &zero));
  LAYERINIT_CUDA_TRY(cudaMemPoolSetAttribute(r.pool(), cudaMemPoolAttrReservedMemHigh, &zero));
}

}  // namespace layerinit
