// Full-model initialization on the GPU, one model per process: layerinit stacked or per-layer in
// bf16 on the CUDA backend. Reports the wall time (host clock around build() + synchronize), the
// tracked peak, the pool's high-water marks (used and reserved) and the device's free memory before
// and after. CSV on stdout:
//   impl,model,layout,parameters,weights_bytes,seconds,tracked_peak,pool_used_high,pool_reserved_high,
//   free_before,free_after
// Exits 3 with "no GPU: not measured" when no CUDA device is usable; 4 on out of memory.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <layerinit/init/builder.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/cuda_backend.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/memory/tracking.hpp>

using namespace layerinit;

int main(int argc, char** argv) {
  std::string model = "mistral-7b", layout = "stacked";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--model") model = argv[i + 1];
    else if (k == "--layout") layout = argv[i + 1];
    else { std::fprintf(stderr, "usage: gpu_init [--model PRESET] [--layout stacked|per-layer]\n"); return 2; }
  }
  const CudaProbe probe = cuda_probe();
  if (!probe.usable) {
    std::printf("no GPU: not measured (%s)\n", probe.why.c_str());
    return 3;
  }
  try {
    const ModelSpec spec = make_preset(model);
    auto be = make_cuda_backend();
    tracking_resource tracker(be->memory());
    BuildOptions opts;
    opts.dtype = DType::bf16;
    opts.layout = parse_layout(layout);
    const Recipe recipe = make_recipe("hf");
    Builder builder(spec, recipe, opts, *be, tracker);
    be->synchronize();
    std::size_t free_before = 0, free_after = 0, total = 0;
    if (cudaMemGetInfo(&free_before, &total) != cudaSuccess) throw std::runtime_error("cudaMemGetInfo failed");
    const auto t0 = std::chrono::steady_clock::now();
    Model m = builder.build();
    be->synchronize();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (cudaMemGetInfo(&free_after, &total) != cudaSuccess) throw std::runtime_error("cudaMemGetInfo failed");
    const CudaPoolStats ps = cuda_pool_stats(be->memory());
    std::printf("layerinit,%s,%s,%llu,%llu,%.5f,%zu,%zu,%zu,%zu,%zu\n", model.c_str(), layout.c_str(),
                static_cast<unsigned long long>(spec.parameter_count()), static_cast<unsigned long long>(m.bytes()), sec,
                tracker.stats().peak_bytes, ps.used_high, ps.reserved_high, free_before, free_after);
    m = Model{};
    be->synchronize();
  } catch (const out_of_memory& e) {
    std::printf("layerinit,%s,%s,OOM\n", model.c_str(), layout.c_str());
    std::fprintf(stderr, "gpu_init: %s\n", e.what());
    return 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_init: %s\n", e.what());
    return 1;
  }
  return 0;
}
