// The full mistral-7b (7.24e9 parameters) built stacked in bf16 on the host: 14.5 GB, peak equal
// to the weights. Runs alone (RUN_SERIAL) and skips when the machine lacks the memory.
#include <gtest/gtest.h>

#include <fstream>

#include "builder_util.hpp"

using namespace layerinit;

namespace {
std::uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

}  // namespace

TEST(Peak, Mistral7bBf16OnTheHost) {
  const ModelSpec spec = make_preset("mistral-7b");
  const std::uint64_t weights = spec.parameter_count() * 2;
  ASSERT_EQ(weights, 14'483'464'192ull);
  if (mem_available() < weights + (3ull << 30))
    GTEST_SKIP() << "needs " << (weights >> 20) << " MiB plus 3 GiB free; MemAvailable is " << (mem_available() >> 20) << " MiB";
  auto be = make_host_backend(0);
  tracking_resource t(be->memory());
  std::uint64_t layers_done = 0;
  const Model m = Builder(spec, make_recipe("hf"), [] { BuildOptions o; o.layout = Layout::stacked; o.dtype = DType::bf16; return o; }(), *be, t).build([&](std::uint64_t) { ++layers_done; });
  EXPECT_EQ(layers_done, spec.num_layers);
  EXPECT_EQ(m.bytes(), weights);
  EXPECT_EQ(t.stats().peak_bytes, weights);  // the final weights, exactly
  EXPECT_EQ(t.stats().total_count, spec.pre.size() + spec.post.size() + spec.layer.tensors.size());
}
