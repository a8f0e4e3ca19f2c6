// A rank's pieces built on the GPU: the same bytes as the host's pieces (many fill jobs per tensor for
// pieces split past dimension 0, transposed jobs under in-out), and a tracked peak equal to the local
// bytes. Skips without a usable GPU.
#include <gtest/gtest.h>

#include <layerinit/backends/cuda_backend.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/shard/rank.hpp>

using namespace layerinit;

TEST(ShardCuda, RankPiecesMatchTheHostBitwise) {
  const CudaProbe probe = cuda_probe();
  if (!probe.usable) GTEST_SKIP() << "no usable GPU: " << probe.why;
  auto host = make_host_backend(2);
  auto gpu = make_backend("cuda");
  struct Case {
    const char* preset;
    ParallelDegrees d;
  };
  const Case cases[] = {{"llama-tiny", {.tp = 2, .pp = 2}}, {"mixtral-tiny", {.tp = 2, .ep = 2}}, {"gpt2-tiny", {.tp = 2, .fsdp = 3}}};
  int pieces = 0;
  for (const Case& c : cases) {
    const ModelSpec spec = make_preset(c.preset);
    const ParallelPlan plan(spec, c.d);
    for (Layout layout : {Layout::per_layer, Layout::stacked})
      for (Orientation o : {Orientation::out_in, Orientation::in_out}) {
        SCOPED_TRACE(std::string(c.preset) + " " + plan.describe() + " " + std::string(layout_name(layout)) + " " +
                     std::string(orientation_name(o)));
        BuildOptions opts;
        opts.layout = layout;
        opts.orientation = o;
        opts.seed = 21;
        const Recipe recipe = make_recipe("torchtitan");
        for (std::uint64_t r = 0; r < plan.ranks(); ++r) {
          tracking_resource ht(host->memory()), gt(gpu->memory());
          const Builder hb(spec, recipe, opts, *host, ht), gb(spec, recipe, opts, *gpu, gt);
          const RankModel want = build_rank(RankPlan(hb, plan, r));
          const RankModel got = build_rank(RankPlan(gb, plan, r));
          EXPECT_EQ(gt.stats().peak_bytes, got.bytes());
          ASSERT_EQ(got.tensors.size(), want.tensors.size());
          for (std::size_t k = 0; k < got.tensors.size(); ++k) {
            const TensorView& g = got.tensors[k].tensor.view;
            const TensorView& h = want.tensors[k].tensor.view;
            ASSERT_EQ(g.name, h.name);
            EXPECT_EQ(g.shape, h.shape) << g.name;
            EXPECT_EQ(hash_tensor(*gpu, g), hash_tensor(*host, h)) << g.name << " rank " << r;
            ++pieces;
          }
        }
      }
  }
  EXPECT_GT(pieces, 500);
}
