// Whole models built on the GPU: the same bytes as the host for every layout (stacked, per-layer,
// restacked through virtual-memory reserve/commit), and the tracker's peak against the pool's own
// high-water mark. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <cuda_runtime.h>

#include "../builder_util.hpp"
#include <layerinit/backends/cuda_backend.hpp>

using namespace layerinit;
using layerinit::testing::hashes_by_name;

namespace {

#define REQUIRE_GPU()                                                      \
  do {                                                                     \
    const CudaProbe probe = cuda_probe();                                  \
    if (!probe.usable) GTEST_SKIP() << "no usable GPU: " << probe.why;     \
  } while (0)

BuildOptions opts(Layout layout) {
  BuildOptions o;
  o.layout = layout;
  o.dtype = DType::bf16;
  o.seed = 11;
  return o;
}

}  // namespace

TEST(BuilderCuda, EveryLayoutMatchesTheHostBitwise) {
  REQUIRE_GPU();
  auto host = make_host_backend(2);
  auto gpu = make_backend("cuda");
  for (const char* name : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "mlp-deep"}) {
    SCOPED_TRACE(name);
    const ModelSpec spec = make_preset(name);
    const Recipe recipe = make_recipe("torchtitan");
    tracking_resource ht(host->memory());
    const auto reference = hashes_by_name(*host, Builder(spec, recipe, opts(Layout::per_layer), *host, ht).build(), spec);
    tracking_resource gt(gpu->memory());
    EXPECT_EQ(hashes_by_name(*gpu, Builder(spec, recipe, opts(Layout::per_layer), *gpu, gt).build(), spec), reference);
    EXPECT_EQ(hashes_by_name(*gpu, Builder(spec, recipe, opts(Layout::stacked), *gpu, gt).build(), spec), reference);
    Model restacked = stack(Builder(spec, recipe, opts(Layout::per_layer), *gpu, gt).build(), spec, *gpu, gt);
    EXPECT_EQ(hashes_by_name(*gpu, restacked, spec), reference);
    BuildOptions in_out = opts(Layout::stacked);
    in_out.orientation = Orientation::in_out;
    tracking_resource ht2(host->memory());
    EXPECT_EQ(hashes_by_name(*gpu, Builder(spec, recipe, in_out, *gpu, gt).build(), spec),
              hashes_by_name(*host, Builder(spec, recipe, in_out, *host, ht2).build(), spec));
  }
}

TEST(BuilderCuda, TrackedPeakEqualsWeightsAndThePoolAgrees) {
  REQUIRE_GPU();
  auto gpu = make_backend("cuda");
  const ModelSpec spec = make_preset("gpt2");
  cuda_pool_reset_peak(gpu->memory());
  const CudaPoolStats before = cuda_pool_stats(gpu->memory());
  tracking_resource t(gpu->memory());
  const Model m = Builder(spec, make_recipe("hf"), opts(Layout::stacked), *gpu, t).build();
  EXPECT_EQ(t.stats().peak_bytes, m.bytes());
  const CudaPoolStats after = cuda_pool_stats(gpu->memory());
  // The pool rounds each allocation up and holds the fill's job table briefly: its high-water mark
  // may exceed the tracker's peak by that rounding, never fall below it.
  EXPECT_GE(after.used_high - before.used_current, t.stats().peak_bytes);
  EXPECT_LE(after.used_high - before.used_current, t.stats().peak_bytes + (4u << 20)) << "pool overhead above 4 MiB";
  std::printf("gpt2 bf16 stacked: tracked peak %zu, pool high-water %llu bytes\n", t.stats().peak_bytes,
              static_cast<unsigned long long>(after.used_high - before.used_current));
}

// Restacking a per-layer model on the device: each layer is freed into the pool right before the
// next stacked slices are committed with cuMemCreate, so the pool must hand that memory back; the
// device's own count (cudaMemGetInfo, sampled by a second thread while stack() runs) stays within
// the weights + one layer + allocation granularity and pool rounding.
TEST(BuilderCuda, RestackDeviceFootprintIsWeightsPlusOneLayer) {
  REQUIRE_GPU();
  auto gpu = make_backend("cuda");
  const ModelSpec spec = make_preset("gpt2-medium");
  tracking_resource t(gpu->memory());
  Model m = Builder(spec, make_recipe("hf"), opts(Layout::per_layer), *gpu, t).build();
  gpu->synchronize();
  std::uint64_t largest_layer = 0;
  for (const auto& l : m.layers) {
    std::uint64_t b = 0;
    for (const auto& x : l.tensors) b += x.view.bytes();
    largest_layer = std::max(largest_layer, b);
  }
  const std::uint64_t weights = m.bytes();
  std::size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  const std::uint64_t used_with_model = total - free0;  // includes the per-layer model itself
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> peak_used{used_with_model};
  std::thread sampler([&] {
    while (!done.load()) {
      std::size_t f = 0, tt = 0;
      if (cudaMemGetInfo(&f, &tt) == cudaSuccess) {
        const std::uint64_t u = tt - f;
        std::uint64_t p = peak_used.load();
        while (u > p && !peak_used.compare_exchange_weak(p, u)) {}
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  Model stacked = stack(std::move(m), spec, *gpu, t);
  gpu->synchronize();
  done = true;
  sampler.join();
  const std::uint64_t growth = peak_used.load() - used_with_model;  // above the per-layer model
  const std::uint64_t slack = (2u << 20) * 2 + (8u << 20);          // granularity at each end, pool rounding
  std::printf("restack gpt2-medium bf16: weights %llu, largest layer %llu, device growth above the model %llu bytes\n",
              static_cast<unsigned long long>(weights), static_cast<unsigned long long>(largest_layer),
              static_cast<unsigned long long>(growth));
  EXPECT_LE(growth, largest_layer + slack) << "restack held more than one layer beyond the weights on the device";
  EXPECT_EQ(stacked.bytes(), weights);
}
