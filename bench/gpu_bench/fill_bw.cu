// GPU fill bandwidth against the floors. On --gb GB of device memory (default 4):
//   copy      cudaMemcpyAsync device to device: bytes read + written per second (the copy floor)
//   store     a store-only kernel writing 16-byte vectors of a constant: bytes written per second
//             (the write floor every fill is measured against)
//   layerinit the CUDA backend's fill for fp32/fp16/bf16 x normal/trunc_normal/uniform: bytes written
//             per second and the fraction of the store floor
// Each is the median of --reps timed runs (CUDA events on the backend's stream) after one warm-up.
// CSV rows on stdout (impl,dtype,kind,bytes,median_ms,gb_per_s,fraction_of_store_floor), a table on
// stderr last. Exits 3 with "no GPU: not measured" when no CUDA device is usable.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <layerinit/kernels/fill.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/cuda_backend.hpp>

using namespace layerinit;

namespace {

#define CHECK_CUDA(call)                                                                                    \
  do {                                                                                                      \
    const cudaError_t e_ = (call);                                                                          \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_));  \
  } while (0)

__global__ void store_only(uint4* __restrict__ dst, std::size_t n16) {
  const uint4 v = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n16;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = v;
}

template <class F>
double median_ms(cudaStream_t s, int reps, F&& f) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  f();  // warm-up
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a, s));
    f();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string impl, dtype, kind;
  double bytes, ms;
};

}  // namespace

int main(int argc, char** argv) {
  double gb = 4;
  int reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--gb") gb = std::atof(argv[i + 1]);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else { std::fprintf(stderr, "usage: gpu_fill_bw [--gb GB] [--reps R]\n"); return 2; }
  }
  const CudaProbe probe = cuda_probe();
  if (!probe.usable) {
    std::printf("no GPU: not measured (%s)\n", probe.why.c_str());
    return 3;
  }
  try {
    auto be = make_cuda_backend();
    memory_resource& mr = be->memory();
    cudaStream_t s = cuda_backend_stream(*be);
    const std::size_t bytes = static_cast<std::size_t>(gb * 1e9) / 256 * 256;
    void* a = mr.allocate(bytes, AllocTag{"bench.a", std::nullopt});
    void* b = mr.allocate(bytes, AllocTag{"bench.b", std::nullopt});
    std::vector<Row> rows;

    rows.push_back({"copy", "-", "-", 2.0 * bytes,
                    median_ms(s, reps, [&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); })});
    int sms = 0, dev = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    rows.push_back({"store", "-", "-", static_cast<double>(bytes), median_ms(s, reps, [&] {
                      store_only<<<sms * 8, 256, 0, s>>>(static_cast<uint4*>(a), bytes / 16);
                      CHECK_CUDA(cudaGetLastError());
                    })});
    const struct { const char* name; DType t; } dtypes[] = {{"fp32", DType::f32}, {"fp16", DType::f16}, {"bf16", DType::bf16}};
    const struct { const char* name; FillSpec f; } kinds[] = {
        {"normal", FillSpec::normal(0, 0.02)},
        {"trunc_normal", FillSpec::trunc_normal(0, 0.02, -0.04, 0.04)},
        {"uniform", FillSpec::uniform(-0.02, 0.02)}};
    for (const auto& d : dtypes)
      for (const auto& k : kinds) {
        const std::uint64_t n = bytes / dtype_size(d.t);
        const FillJob job = make_fill_job(a, d.t, n, 1234, "bench.weight", k.f);
        rows.push_back({"layerinit", d.name, k.name, static_cast<double>(n * dtype_size(d.t)),
                        median_ms(s, reps, [&] { be->fill({&job, 1}); })});
      }
    be->synchronize();
    mr.deallocate(a, bytes);
    mr.deallocate(b, bytes);
    be->synchronize();

    const double floor_gbs = rows[1].bytes / rows[1].ms / 1e6;
    std::printf("impl,dtype,kind,bytes,median_ms,gb_per_s,fraction_of_store_floor\n");
    for (const Row& r : rows) {
      const double gbs = r.bytes / r.ms / 1e6;
      std::printf("%s,%s,%s,%.0f,%.4f,%.1f,%.3f\n", r.impl.c_str(), r.dtype.c_str(), r.kind.c_str(), r.bytes, r.ms,
                  gbs, gbs / floor_gbs);
    }
    std::fprintf(stderr, "\n%s, %.1f GB buffers, median of %d\n%-10s %-5s %-13s %10s %9s %8s\n", probe.device_name.c_str(),
                 bytes / 1e9, reps, "impl", "dtype", "kind", "ms", "GB/s", "of floor");
    for (const Row& r : rows) {
      const double gbs = r.bytes / r.ms / 1e6;
      std::fprintf(stderr, "%-10s %-5s %-13s %10.3f %9.1f %7.1f%%\n", r.impl.c_str(), r.dtype.c_str(), r.kind.c_str(),
                   r.ms, gbs, 100 * gbs / floor_gbs);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_fill_bw: %s\n", e.what());
    return 1;
  }
  return 0;
}
