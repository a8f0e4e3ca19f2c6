// The memory preflight the CLI and the Python package share (plan/memory_check.hpp): exact record
// estimates, the refusal's numbers, and the LAYERINIT_TEST_AVAILABLE_MEMORY hook.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>

#include <layerinit/init/builder.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/plan/memory_check.hpp>

#include "simulated_node.hpp"

using namespace layerinit;

namespace {

// Sets (or clears) the hook for one scope.
class Hook {
 public:
  explicit Hook(const char* value) { value ? ::setenv(kName, value, 1) : ::unsetenv(kName); }
  ~Hook() { ::unsetenv(kName); }

 private:
  static constexpr const char* kName = "LAYERINIT_TEST_AVAILABLE_MEMORY";
};

}  // namespace

TEST(MemoryCheck, RecordBytesCountTensorsAndSlices) {
  const ModelSpec spec = make_preset("llama-tiny");  // 1 tensor before the layers, 2 after, 9 per layer
  const std::uint64_t L = spec.num_layers, T = spec.layer.tensors.size(), outer = spec.pre.size() + spec.post.size();
  ASSERT_EQ(T, 9u);
  EXPECT_EQ(record_bytes(spec, Layout::per_layer, false), (outer + L * T) * 2048);
  EXPECT_EQ(record_bytes(spec, Layout::stacked, true), (outer + T) * 2048 + L * T * 128);
  EXPECT_EQ(record_bytes(spec, Layout::per_layer, true), (outer + L * T) * 2048 + L * T * 128);  // restack
  ModelSpec huge = spec;
  huge.num_layers = UINT64_MAX / 4;
  EXPECT_EQ(record_bytes(huge, Layout::per_layer, false), UINT64_MAX);  // saturates
}

// verify's need: the records with a hash per layer slice, and three chunks of the compare, each the
// chunk or the model's largest tensor if smaller; no time per layer (2^40 layers).
TEST(MemoryCheck, VerifyNeedsTheRecordsAndThreeChunks) {
  auto be = make_host_backend(1);
  memory_resource& mem = be->memory();
  const ModelSpec spec = make_preset("llama-tiny");  // largest tensor: the embedding, [512, 64]
  BuildOptions o;
  o.dtype = DType::bf16;
  const Builder b(spec, make_recipe("hf"), o, *be, mem);
  MemoryNeed need = verify_memory_need(b, 64ull << 20);
  EXPECT_EQ(need.peak, 3u * 512 * 64 * 2);
  EXPECT_EQ(need.records, record_bytes(spec, Layout::per_layer, true));
  EXPECT_EQ(verify_memory_need(b, 1000).peak, 3000u);
  ModelSpec huge = spec;
  huge.num_layers = 1ull << 40;
  const Builder h(huge, make_recipe("hf"), o, *be, mem);
  need = verify_memory_need(h, 64ull << 20);
  EXPECT_EQ(need.records, record_bytes(huge, Layout::per_layer, true));
  EXPECT_GT(need.records, 1ull << 50);
}

TEST(MemoryCheck, RefusesWithBothNumbers) {
  auto be = make_host_backend(1);
  const MemoryNeed need{"weights", 1000, 24};
  {
    Hook hook("1KiB");
    EXPECT_NO_THROW(check_memory(*be, need));  // 1024 bytes: exactly enough
  }
  Hook hook("1000B");
  try {
    check_memory(*be, need);
    ADD_FAILURE() << "not refused";
  } catch (const memory_refused& e) {
    EXPECT_EQ(std::string(e.what()),
              "not enough memory: needs 1.00 KiB (1024 bytes) at its peak (weights 1000 bytes + tensor records 24 bytes), "
              "1000 bytes available (LAYERINIT_TEST_AVAILABLE_MEMORY, a test hook)");
  }
}

// A need that fits is reserved on the backend before anything is allocated (the CUDA pool grows
// once); a refused one reserves nothing.
TEST(MemoryCheck, AFittingPeakIsReservedOnTheDevice) {
  const layerinit::testing::SimulatedNode node(1);
  auto be = make_backend("cuda:0");
  using W = SimulatedDeviceEvent::What;
  {
    Hook hook("1KiB");
    check_memory(*be, MemoryNeed{"weights", 1000, 24});
    const auto events = node.events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(std::make_tuple(events[0].device, events[0].what, events[0].bytes), std::make_tuple(0, W::reserve, std::uint64_t{1000}));
  }
  Hook hook("999B");
  EXPECT_THROW(check_memory(*be, MemoryNeed{"weights", 1000, 24}), memory_refused);
  EXPECT_TRUE(node.events().empty());
}

TEST(MemoryCheck, AHookThatIsNoByteSizeIsBadInput) {
  auto be = make_host_backend(1);
  Hook hook("lots");
  try {
    check_memory(*be, {"weights", 1, 0});
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("LAYERINIT_TEST_AVAILABLE_MEMORY 'lots' is not a byte size", 0), 0u) << e.what();
  }
}

TEST(MemoryCheck, WithoutTheHookTheProcessLimitDecides) {
  auto be = make_host_backend(1);
  Hook none(nullptr);
  EXPECT_NO_THROW(check_memory(*be, {"weights", 1, 1}));
  EXPECT_THROW(check_memory(*be, {"weights", UINT64_MAX / 2, UINT64_MAX / 2}), memory_refused);
}
