// Peak memory, measured through the tracking resource and compared with exact formulas.
// Real host builds for models that fit; the dry backend (same allocation calls, unbacked memory)
// for every preset at full size; the full mistral-7b in bf16 on the host when memory allows.
#include <gtest/gtest.h>

#include "builder_util.hpp"
#include "naive.hpp"

using namespace layerinit;
using layerinit::testing::part_sizes;

namespace {

BuildOptions opts(Layout layout, DType dtype = DType::bf16) {
  BuildOptions o;
  o.layout = layout;
  o.dtype = dtype;
  o.seed = 3;
  return o;
}

struct Peaks {
  std::uint64_t per_layer, stacked, restack, streamed;
};

Peaks measure(const ModelSpec& spec, backend& be, DType dtype) {
  const Recipe recipe = make_recipe("hf");
  Peaks p{};
  {
    tracking_resource t(be.memory());
    Model m = Builder(spec, recipe, opts(Layout::per_layer, dtype), be, t).build();
    p.per_layer = t.stats().peak_bytes;
    m = stack(std::move(m), spec, be, t);
    p.restack = t.stats().peak_bytes;
  }
  {
    tracking_resource t(be.memory());
    Model m = Builder(spec, recipe, opts(Layout::stacked, dtype), be, t).build();
    p.stacked = t.stats().peak_bytes;
  }
  {
    tracking_resource t(be.memory());
    Builder(spec, recipe, opts(Layout::per_layer, dtype), be, t).stream([](const Part&) {});
    p.streamed = t.stats().peak_bytes;
    EXPECT_EQ(t.stats().current_bytes, 0u);
  }
  return p;
}

// The bound each strategy must meet exactly (the host and dry resources add no tracked overhead:
// the tracker counts the bytes asked, and host_resource's 64-byte rounding is not tracked memory).
void expect_layerinit_peaks(const ModelSpec& spec, backend& be, DType dtype) {
  tracking_resource scratch(be.memory());
  const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer, dtype), be, scratch);
  const auto s = part_sizes(b);
  const Peaks p = measure(spec, be, dtype);
  EXPECT_EQ(p.per_layer, s.total());
  EXPECT_EQ(p.stacked, s.total());
  EXPECT_EQ(p.restack, s.total() + s.largest_layer);
  EXPECT_EQ(p.streamed, std::max(s.largest_layer, s.largest_outside));
}

}  // namespace

TEST(Peak, RealHostBuildsMeetExactBounds) {
  auto be = make_host_backend(2);
  for (const char* name : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "mlp-deep", "gpt2"}) {
    SCOPED_TRACE(name);
    expect_layerinit_peaks(make_preset(name), *be, DType::bf16);
  }
  expect_layerinit_peaks(make_preset("llama-tiny"), *be, DType::f32);
}

TEST(Peak, EveryPresetAtFullSizeMeetsExactBoundsDry) {
  auto be = make_dry_backend();
  for (const auto& name : preset_names()) {
    SCOPED_TRACE(name);
    expect_layerinit_peaks(make_preset(name), *be, DType::bf16);
  }
}

TEST(Peak, NaiveStrategiesShowTheGap) {
  // Exact peaks of the strategies layerinit replaces, through the same tracker.
  auto dry = make_dry_backend();
  auto host = make_host_backend(2);
  struct Case {
    const char* preset;
    backend* be;
  };
  for (const Case c : {Case{"mlp-deep", host.get()}, Case{"gpt2-tiny", host.get()}, Case{"llama-3-8b", dry.get()},
                       Case{"mistral-7b", dry.get()}}) {
    SCOPED_TRACE(c.preset);
    const ModelSpec spec = make_preset(c.preset);
    tracking_resource scratch(c.be->memory());
    const Builder b(spec, make_recipe("hf"), opts(Layout::per_layer), *c.be, scratch);
    const auto s = part_sizes(b);  // bf16 bytes; fp32 is exactly twice
    // all-fp32-then-cast: the fp32 tree and the bf16 tree together.
    // fp32-then-cast-per-layer: after the last part, every bf16 part plus that part's fp32 copy;
    //   the maximum over parts of (bf16 bytes so far + 2 x the part's bf16 bytes).
    std::uint64_t per_part = 0, so_far = 0;
    auto part = [&](std::uint64_t bytes) {
      so_far += bytes;
      per_part = std::max(per_part, so_far + 2 * bytes);
    };
    part(s.pre);
    for (std::uint64_t i = 0; i < spec.num_layers; ++i) {
      std::uint64_t layer = 0;
      for (const auto& p : b.plan_layer(i)) layer += p.bytes();
      part(layer);
    }
    part(s.post);
    const std::uint64_t expected[] = {3 * s.total(), per_part, s.total() + s.layers};
    std::size_t k = 0;
    for (NaiveStrategy n : all_naive_strategies) {
      tracking_resource t(c.be->memory());
      run_naive(n, b, *c.be, t);
      EXPECT_EQ(t.stats().peak_bytes, expected[k++]) << naive_name(n);
    }
  }
}
