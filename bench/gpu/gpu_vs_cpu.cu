// GPU versus CPU, bit for bit, at scale: every fill kind and dtype on --elements values (default 10^8),
// filled by the CUDA backend and by the host fill, compared element by element. Also times the GPU
// fill (best of --reps launches, CUDA events on the backend's stream). Prints a summary table last;
// exits 0 when every byte agrees, 1 on any mismatch, 2 when no GPU is usable or on an error.
//
// usage: gpu_vs_cpu [--elements N] [--reps R] [--seed S] [--offset E]
//   --offset E  places dst E elements past a 256-byte boundary (tests the head/tail path at scale)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/cuda_backend.hpp>

using namespace layerinit;

namespace {

struct Row {
  std::string fill, dtype;
  std::uint64_t elements = 0, mismatches = 0;
  double gpu_gbs = 0, cpu_gbs = 0;
};

#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    const cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

std::uint64_t parse_u64(const char* s, const char* what) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);  // accepts 1e8
  if (end == s || *end != '\0' || v < 0) throw std::invalid_argument(std::string("bad ") + what + ": " + s);
  return static_cast<std::uint64_t>(v);
}

std::uint32_t element_bits(const unsigned char* p, std::size_t es) {
  std::uint32_t v = 0;
  std::memcpy(&v, p, es);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t n = 100000000, reps = 3, seed = 20240601, offset = 0;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
      if (a == "--elements") n = parse_u64(argv[++i], "--elements");
      else if (a == "--reps") reps = std::max<std::uint64_t>(1, parse_u64(argv[++i], "--reps"));
      else if (a == "--seed") seed = parse_u64(argv[++i], "--seed");
      else if (a == "--offset") offset = parse_u64(argv[++i], "--offset");
      else throw std::invalid_argument("unknown option " + a + " (valid: --elements, --reps, --seed, --offset)");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_vs_cpu: %s\n", e.what());
    return 2;
  }

  const CudaProbe probe = cuda_probe();
  if (!probe.usable) {
    std::fprintf(stderr, "gpu_vs_cpu: no usable GPU: %s\n", probe.why.c_str());
    return 2;
  }

  const std::pair<const char*, FillSpec> fills[] = {
      {"normal(0, 0.02)", FillSpec::normal(0.0, 0.02)},
      {"trunc_normal(0, 1, -2, 2)", FillSpec::trunc_normal(0.0, 1.0, -2.0, 2.0)},
      {"trunc_normal(0, 0.02, +-3 std)", FillSpec::trunc_normal_std(0.0, 0.02, -3.0, 3.0)},
      {"uniform(-0.1, 0.1)", FillSpec::uniform(-0.1, 0.1)},
      {"constant(0.5)", FillSpec::constant(0.5)},
  };

  std::vector<Row> rows;
  try {
    auto b = make_cuda_backend();
    std::printf("gpu_vs_cpu: %s, %llu elements per fill, dst offset %llu elements, seed %llu\n", b->describe().c_str(),
                static_cast<unsigned long long>(n), static_cast<unsigned long long>(offset),
                static_cast<unsigned long long>(seed));
    const cudaStream_t stream = cuda_backend_stream(*b);
    cudaEvent_t start{}, stop{};
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    for (DType t : all_dtypes) {
      const std::size_t es = dtype_size(t);
      const std::size_t bytes = n * es;
      Storage dev = Storage::allocate(b->memory(), bytes + offset * es + 256, {});
      auto* dst = static_cast<unsigned char*>(dev.data()) + offset * es;
      std::vector<unsigned char> got(bytes), want(bytes);
      for (const auto& [label, spec] : fills) {
        const std::string name = std::string("bench.") + label + "." + std::string(dtype_name(t));
        FillJob job = make_fill_job(dst, t, n, seed, name, spec);
        b->fill({&job, 1});  // warm-up (and the bytes compared below: every launch writes the same)
        float best_ms = 0;
        for (std::uint64_t r = 0; r < reps; ++r) {
          CHECK_CUDA(cudaEventRecord(start, stream));
          b->fill({&job, 1});
          CHECK_CUDA(cudaEventRecord(stop, stream));
          CHECK_CUDA(cudaEventSynchronize(stop));
          float ms = 0;
          CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
          best_ms = r == 0 ? ms : std::min(best_ms, ms);
        }
        b->copy_to_host(got.data(), dst, bytes);

        FillJob host_job = job;
        host_job.dst = want.data();
        const auto t0 = std::chrono::steady_clock::now();
        fill_host({&host_job, 1}, 0);
        const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

        Row row{label, std::string(dtype_name(t)), n, 0, 0, 0};
        if (std::memcmp(got.data(), want.data(), bytes) != 0) {
          for (std::uint64_t i = 0; i < n; ++i) {
            if (std::memcmp(&got[i * es], &want[i * es], es) == 0) continue;
            if (row.mismatches < 5)
              std::printf("  mismatch %s %s element %llu: gpu 0x%0*x cpu 0x%0*x\n", label, row.dtype.c_str(),
                          static_cast<unsigned long long>(i), static_cast<int>(2 * es), element_bits(&got[i * es], es),
                          static_cast<int>(2 * es), element_bits(&want[i * es], es));
            ++row.mismatches;
          }
        }
        row.gpu_gbs = best_ms > 0 ? static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9 : 0;
        row.cpu_gbs = cpu_s > 0 ? static_cast<double>(bytes) / cpu_s / 1e9 : 0;
        std::printf("  %-32s %-5s done: %llu mismatches, GPU %.1f GB/s, CPU %.2f GB/s\n", label, row.dtype.c_str(),
                    static_cast<unsigned long long>(row.mismatches), row.gpu_gbs, row.cpu_gbs);
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_vs_cpu: %s\n", e.what());
    return 2;
  }

  std::uint64_t total_bad = 0;
  std::printf("\n%-32s %-6s %12s %12s %10s %10s\n", "fill", "dtype", "elements", "mismatches", "GPU GB/s", "CPU GB/s");
  for (const Row& r : rows) {
    std::printf("%-32s %-6s %12llu %12llu %10.1f %10.2f\n", r.fill.c_str(), r.dtype.c_str(),
                static_cast<unsigned long long>(r.elements), static_cast<unsigned long long>(r.mismatches), r.gpu_gbs,
                r.cpu_gbs);
    total_bad += r.mismatches;
  }
  std::printf("%s: %llu mismatching elements in %zu fills\n", total_bad == 0 ? "PASS" : "FAIL",
              static_cast<unsigned long long>(total_bad), rows.size());
  return total_bad == 0 ? 0 : 1;
}
