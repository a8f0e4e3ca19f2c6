// Sharded builds, exhaustively on the tiny presets: for meshes of 1 to 8 ranks (uneven splits and empty
// pieces included), every named plan and their compositions, both orientations, both layouts, every
// dtype and fill kind, each rank's pieces equal those boxes of the unsharded build byte for byte; the
// pieces of all ranks cover every element exactly once per replica; a rank's tracked peak is its
// local bytes (build) or its largest part (stream), and the plan predicts both.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include <layerinit/init/presets.hpp>
#include <layerinit/plan/plan.hpp>
#include <layerinit/shard/rank.hpp>
#include <layerinit/stacking/stack.hpp>

#include "region_util.hpp"

using namespace layerinit;

namespace {

struct Case {
  ModelSpec spec;
  ParallelDegrees d;
};

Recipe recipe_for(const ModelSpec& spec) {
  // Every fill kind: torchtitan's trunc_normal and normal, norms' constants, and uniform overrides.
  Recipe r = make_recipe(spec.family == "llama" || spec.family == "mixtral" ? "torchtitan" : "hf");
  r.add_override("*.up_proj.weight", FillSpec::uniform(-0.1, 0.1));
  r.add_override("*.w3.weight", FillSpec::uniform(-0.1, 0.1));
  r.add_override("*.c_fc.weight", FillSpec::uniform(-0.1, 0.1));
  r.add_override("layers.1.weight", FillSpec::uniform(-0.5, 0.5));
  return r;
}

std::vector<Case> cases() {
  const ModelSpec llama = make_preset("llama-tiny"), mix = make_preset("mixtral-tiny"), gpt2 = make_preset("gpt2-tiny");
  const ModelSpec ds = make_preset("deepseek-v3-tiny");  // 4 experts, a dense layer before 2 MoE layers
  // Widths 5 and 2 leave ranks with uneven and empty pieces under FSDP.
  const ModelSpec mlp = mlp_spec("mlp-odd", {3, 5, 5, 5, 5, 2}, true);
  return {
      {llama, {}},
      {llama, {.tp = 2}},
      {llama, {.pp = 3}},
      {llama, {.fsdp = 3}},
      {llama, {.tp = 2, .pp = 2, .fsdp = 2}},
      {llama, {.tp = 2, .fsdp = 3}},
      {llama, {.pp = 4, .fsdp = 2}},
      {mix, {.ep = 4}},
      {mix, {.tp = 2, .pp = 2, .ep = 2}},
      {mix, {.ep = 2, .fsdp = 3}},
      {mix, {.tp = 2, .ep = 4}},
      {mix, {.pp = 2, .fsdp = 3}},
      {ds, {.tp = 2, .ep = 2}},
      {ds, {.tp = 2, .pp = 2, .ep = 2}},
      {ds, {.ep = 4, .fsdp = 2}},
      {gpt2, {.tp = 3}},
      {gpt2, {.tp = 2, .pp = 2}},
      {gpt2, {.tp = 2, .pp = 2, .fsdp = 2}},
      {mlp, {.fsdp = 4}},
      {mlp, {.pp = 2, .fsdp = 3}},
      {mlp, {.fsdp = 7}},
      // Regions on every tensor (region_util.hpp): pieces cut across them; test_regions checks the
      // unsharded build against them.
      {layerinit::testing::with_regions(llama), {.tp = 2, .fsdp = 3}},
      {layerinit::testing::with_regions(mix), {.tp = 2, .ep = 2}},
      {layerinit::testing::with_regions(gpt2), {.tp = 2, .pp = 2}},
  };
}

// Calls f(global element, local element, count) for each run of the box along its last dimension.
template <class F>
void for_each_row(const Shape& g, const Box& b, F&& f) {
  const std::size_t n = g.size();
  if (b.empty()) return;
  std::uint64_t rows = 1;
  for (std::size_t d = 0; d + 1 < n; ++d) rows *= b.shape[d];
  Shape idx(n, 0);
  for (std::uint64_t r = 0; r < rows; ++r) {
    std::uint64_t global = 0;
    for (std::size_t d = 0; d < n; ++d) global = global * g[d] + b.offset[d] + idx[d];
    f(global, r * b.shape[n - 1], b.shape[n - 1]);
    for (std::size_t d = n - 1; d-- > 0;) {
      if (++idx[d] < b.shape[d]) break;
      idx[d] = 0;
    }
  }
}

// How many ranks hold each element of a tensor: 1 for a dimension split by a mesh dimension, the
// degree for one that replicates it. `name` is a canonical name (a fused expert buffer's: that of one
// of its experts).
std::uint64_t replicas(const ParallelPlan& plan, const ModelSpec& spec, const std::string& name, bool tied_embedding) {
  const ParallelDegrees& d = plan.degrees();
  TpRule rule = TpRule::replicate;
  using K = TensorPlace::Kind;
  for (const auto& [list, kind] : {std::pair{&spec.pre, K::pre}, {&spec.post, K::post}})
    for (const TensorSpec& t : *list)
      if (t.name == name) rule = plan.tp_rule(t, {kind, 0});
  bool expert = false;
  for (std::uint64_t i = 0; i < spec.num_layers; ++i)
    for (const TensorSpec& t : spec.layer.tensors)
      if (spec.canonical_name(i, t) == name) {
        rule = plan.tp_rule(t, {K::layer, i});
        expert = split_expert_name(spec.layer, t.name).has_value();
      }
  std::uint64_t n = 1;
  if (rule == TpRule::replicate) n *= d.tp;
  if (!expert) n *= d.ep;
  if (tied_embedding && d.pp > 1) n *= 2;  // the last stage's replica of the output layer
  return n;
}

}  // namespace

TEST(ShardBuild, EveryRankHoldsExactlyItsBoxOfTheUnshardedBuild) {
  auto be = make_host_backend(1);
  int checked_pieces = 0, fused_pieces = 0;
  for (const Case& c : cases()) {
    const Recipe recipe = recipe_for(c.spec);
    const ParallelPlan plan(c.spec, c.d);
    const bool moe = !c.spec.layer.expert_prefix.empty();
    for (Layout layout : {Layout::per_layer, Layout::stacked})
      for (ExpertLayout experts : {ExpertLayout::stacked, ExpertLayout::per_expert})
      for (Orientation o : {Orientation::out_in, Orientation::in_out})
        for (DType t : {DType::f32, DType::f16, DType::bf16}) {
          // The expert layout only matters to a stacked MoE build; per expert, one dtype is enough
          // (its pieces are those of any stacked layer parameter), which keeps the test fast.
          if (experts == ExpertLayout::per_expert && (layout == Layout::per_layer || !moe || t != DType::bf16)) continue;
          SCOPED_TRACE(c.spec.name + " " + plan.describe() + " " + std::string(layout_name(layout)) + " experts " +
                       std::string(expert_layout_name(experts)) + " " + std::string(orientation_name(o)) + " " +
                       std::string(dtype_name(t)));
          BuildOptions opts;
          opts.dtype = t;
          opts.layout = layout;
          opts.orientation = o;
          opts.seed = 11;
          opts.experts = experts;
          tracking_resource whole_mr(be->memory());
          const Model whole = Builder(c.spec, recipe, opts, *be, whole_mr).build();
          std::map<std::string, TensorView> by_name;
          whole.for_each([&](const TensorView& v) { by_name[v.name] = v; });
          // Stacked buffers: the canonical name of (one of) the layer tensors each holds.
          const StackedLayout sl = stacked_layout(c.spec, experts);
          std::map<std::string, std::string> stacked_of;
          std::map<std::string, bool> fused_buffer;
          if (layout == Layout::stacked)
            for (const auto& sb : sl.buffers) {
              stacked_of[sb.name] = c.spec.canonical_name(0, c.spec.layer.tensors[sb.first]);
              fused_buffer[sb.name] = sb.fused;
            }
          std::map<std::string, std::vector<std::uint8_t>> counts;
          for (const auto& [name, v] : by_name) counts[name].assign(numel(v.shape), 0);
          const std::uint64_t es = dtype_size(t);

          for (std::uint64_t r = 0; r < plan.ranks(); ++r) {
            SCOPED_TRACE("rank " + std::to_string(r));
            tracking_resource mr(be->memory());
            const Builder b(c.spec, recipe, opts, *be, mr);
            const RankPlan rp(b, plan, r);
            std::uint64_t local_bytes = 0, pieces_per_layer_build = 0;
            {
              const RankModel m = build_rank(rp);
              EXPECT_EQ(m.rank, r);
              EXPECT_EQ(m.layers, plan.stage_layers(plan.coords(r).pp));
              for (const LocalTensor& lt : m.tensors) {
                const TensorView& v = lt.tensor.view;
                ASSERT_TRUE(by_name.count(v.name)) << v.name;
                const TensorView& g = by_name.at(v.name);
                ASSERT_EQ(lt.global_shape, g.shape) << v.name;
                const Box box{lt.offset, v.shape};
                ASSERT_FALSE(box.empty()) << v.name;
                EXPECT_EQ(v.dtype, g.dtype);
                EXPECT_EQ(lt.stacked, stacked_of.count(v.name) == 1) << v.name;
                // A fused [L, E, ...] piece holds whole experts of one ep block, with the same piece of each.
                const bool fused = lt.stacked && fused_buffer.at(v.name);
                EXPECT_EQ(fused, lt.stacked && g.shape.size() == 4) << v.name;  // [L, E, out, in]
                EXPECT_EQ(lt.experts, fused ? v.shape[1] : 1) << v.name;
                if (fused) {
                  const Range block = chunk(c.spec.hyper.num_experts, c.d.ep, plan.coords(r).ep);
                  EXPECT_EQ(lt.offset[1], block.offset) << v.name;
                  EXPECT_EQ(v.shape[1], block.size) << v.name;
                  ++fused_pieces;
                }
                auto& count = counts[v.name];
                for_each_row(g.shape, box, [&](std::uint64_t gi, std::uint64_t li, std::uint64_t n) {
                  ASSERT_EQ(std::memcmp(static_cast<const char*>(v.data) + li * es, static_cast<const char*>(g.data) + gi * es, n * es), 0)
                      << v.name << " at global element " << gi;
                  for (std::uint64_t k = 0; k < n; ++k) ++count[gi + k];
                });
                ++checked_pieces;
              }
              local_bytes = m.bytes();
              pieces_per_layer_build = m.tensors.size();
              EXPECT_EQ(mr.stats().peak_bytes, local_bytes);  // nothing but the pieces, ever
              EXPECT_EQ(mr.stats().current_bytes, local_bytes);
            }
            EXPECT_EQ(mr.stats().current_bytes, 0u);

            // Streamed: the same bytes, one part at a time.
            tracking_resource smr(be->memory());
            const Builder sb(c.spec, recipe, opts, *be, smr);
            std::uint64_t largest = 0, streamed = 0;
            stream_rank(RankPlan(sb, plan, r), [&](const RankPart& p) {
              largest = std::max(largest, p.bytes());
              ASSERT_EQ(p.shards.size(), p.tensors.size());
              for (std::size_t k = 0; k < p.tensors.size(); ++k) {
                const TensorView& v = p.tensors[k];
                const ShardTensor& s = p.shards[k];
                EXPECT_EQ(v.shape, s.box.shape);
                // Per-layer names: compare against the per-layer piece inside the whole model.
                const TensorView* g = nullptr;
                Box gbox = s.box;
                if (by_name.count(s.tensor.name)) {
                  g = &by_name.at(s.tensor.name);
                } else {  // stacked: slice p.layer (and expert) of the [L, ...] or [L, E, ...] tensor
                  const auto& lt = c.spec.layer.tensors;
                  for (std::size_t j = 0; j < lt.size(); ++j)
                    if (c.spec.canonical_name(p.layer, lt[j]) == s.tensor.name) {
                      const StackedBuffer& sb = sl.buffers[sl.buffer[j]];
                      g = &by_name.at(sb.name);
                      if (sb.fused) {
                        gbox.offset.insert(gbox.offset.begin(), sl.expert[j]);
                        gbox.shape.insert(gbox.shape.begin(), 1);
                      }
                    }
                  ASSERT_NE(g, nullptr) << s.tensor.name;
                  gbox.offset.insert(gbox.offset.begin(), p.layer);
                  gbox.shape.insert(gbox.shape.begin(), 1);
                }
                for_each_row(g->shape, gbox, [&](std::uint64_t gi, std::uint64_t li, std::uint64_t n) {
                  ASSERT_EQ(std::memcmp(static_cast<const char*>(v.data) + li * es, static_cast<const char*>(g->data) + gi * es, n * es), 0)
                      << s.tensor.name;
                });
                streamed += v.bytes();
              }
            });
            EXPECT_EQ(streamed, local_bytes);
            EXPECT_EQ(smr.stats().peak_bytes, largest);

            // The plan's numbers are the measured ones.
            const RankMemoryPlan pm = plan_rank(rp, TrainingSetup::mixed);
            EXPECT_EQ(pm.weight_bytes, local_bytes);
            EXPECT_EQ(pm.peak_streamed, largest);
            EXPECT_EQ(pm.parameters * es, local_bytes);
            EXPECT_EQ(pm.states.states(), 16 * pm.parameters);
            if (layout == Layout::per_layer) EXPECT_EQ(pm.tensors, pieces_per_layer_build);
          }
          // Every element of every tensor, exactly once per replica.
          for (const auto& [name, count] : counts) {
            const bool tied_embedding = c.spec.hyper.tie_word_embeddings && name == c.spec.pre[0].name;
            const std::uint64_t want = replicas(plan, c.spec, stacked_of.count(name) ? stacked_of.at(name) : name, tied_embedding);
            for (std::size_t k = 0; k < count.size(); ++k)
              ASSERT_EQ(count[k], want) << name << " element " << k << " (" << plan.describe() << ")";
          }
        }
  }
  EXPECT_GT(checked_pieces, 10000);
  EXPECT_GT(fused_pieces, 500);
}

// Ranks whose piece of a tensor is empty do not hold it; the rest of their model is still there.
TEST(ShardBuild, EmptyPiecesAreNotHeld) {
  auto be = make_host_backend(1);
  const ModelSpec mlp = mlp_spec("mlp-odd", {3, 5, 5, 5, 5, 2}, true);  // output.weight [2, 5], output.bias [2]
  const ParallelPlan plan(mlp, {.fsdp = 4});
  const Builder b(mlp, make_recipe("hf"), {}, *be, be->memory());
  std::vector<std::string> names;
  for (const auto& s : RankPlan(b, plan, 3).post()) names.push_back(s.tensor.name);
  EXPECT_TRUE(names.empty());  // 2 rows over 4 ranks: 1, 1, 0, 0
  names.clear();
  for (const auto& s : RankPlan(b, plan, 1).post()) names.push_back(s.tensor.name);
  EXPECT_EQ(names, (std::vector<std::string>{"output.weight", "output.bias"}));
  // input.weight [5, 3] and the layers' [5, 5]: 5 rows over 4 ranks are 2, 2, 1, 0.
  const RankPlan r3(b, plan, 3), r2(b, plan, 2);
  EXPECT_TRUE(r3.pre().empty());
  EXPECT_TRUE(r3.layer(0).empty());
  EXPECT_TRUE(r3.layer_tensors().empty());
  ASSERT_EQ(r2.pre().size(), 2u);
  EXPECT_EQ(r2.pre()[0].box, (Box{{4, 0}, {1, 3}}));
  EXPECT_EQ(r2.layer(2).size(), 2u);
  EXPECT_EQ(r2.layer_tensors(), (std::vector<std::size_t>{0, 1}));
  EXPECT_THROW(RankPlan(b, plan, 4), std::invalid_argument);
  EXPECT_THROW(r3.layer(3), std::out_of_range);
}

// Layers that differ in size (a dtype override naming one layer): the plan goes layer by layer.
TEST(ShardBuild, PlanOfRanksWithUnequalLayersMatchesTheirBuilds) {
  auto be = make_host_backend(1);
  const ModelSpec spec = make_preset("llama-tiny");
  BuildOptions opts;
  opts.dtype_overrides = {{"model.layers.1.*", DType::f32}};
  const ParallelPlan plan(spec, {.tp = 2, .pp = 2});
  tracking_resource probe(be->memory());
  ASSERT_FALSE(Builder(spec, make_recipe("hf"), opts, *be, probe).uniform_layers());
  const auto ranks = plan_ranks(Builder(spec, make_recipe("hf"), opts, *be, probe), plan, TrainingSetup::pure_bf16);
  ASSERT_EQ(ranks.size(), 4u);
  for (std::uint64_t r = 0; r < 4; ++r) {
    tracking_resource mr(be->memory());
    const Builder b(spec, make_recipe("hf"), opts, *be, mr);
    const std::uint64_t bytes = build_rank(RankPlan(b, plan, r)).bytes();
    EXPECT_EQ(ranks[r].weight_bytes, bytes);
    EXPECT_EQ(mr.stats().peak_bytes, bytes);
    EXPECT_EQ(ranks[r].states.states(), 8 * ranks[r].parameters);
    EXPECT_EQ(ranks[r].coords, plan.coords(r));
  }
  // Stage 0 holds layer 1 in fp32 and the embedding; stage 1 the head: the heaviest is rank 0 or 1.
  EXPECT_GT(ranks[0].weight_bytes, ranks[2].weight_bytes);
  const RankBalance bal = rank_balance(ranks);
  EXPECT_EQ(bal.largest_rank, ranks[0].weight_bytes >= ranks[1].weight_bytes ? 0u : 1u);
  double total = 0;
  for (const auto& r : ranks) total += static_cast<double>(r.weight_bytes);
  EXPECT_DOUBLE_EQ(bal.imbalance, static_cast<double>(ranks[bal.largest_rank].weight_bytes) / (total / 4));
  EXPECT_GT(bal.imbalance, 1.0);
  EXPECT_EQ(rank_balance({}).imbalance, 0.0);
}

// Fused [L, E, out, in] expert buffers under ep, tp, pp and fsdp: the rank's piece is its ep block
// of experts, each split as the per-expert tensor is, over its stage's layers.
TEST(ShardBuild, FusedExpertPiecesAreExactBoxes) {
  auto be = make_dry_backend();
  const ModelSpec mix = make_preset("mixtral-tiny");  // 2 layers, 4 experts, w1/w3 [128, 64], w2 [64, 128]
  BuildOptions opts;
  opts.layout = Layout::stacked;  // experts stacked: the default
  const Builder b(mix, make_recipe("hf"), opts, *be, be->memory());
  auto piece = [](const RankPlan& r, const std::string& name) {
    for (const StackedPiece& p : r.stacked())
      if (p.name == name) return p;
    ADD_FAILURE() << name << " not held";
    return StackedPiece{};
  };
  const std::string w1 = "model.layers.block_sparse_moe.experts.w1.weight", w2 = "model.layers.block_sparse_moe.experts.w2.weight";
  {
    const ParallelPlan plan(mix, {.tp = 2, .ep = 2});
    const RankPlan r3(b, plan, 3);  // ep 1, tp 1: experts 2 and 3, the second half of w1's rows and w2's columns
    const StackedPiece p1 = piece(r3, w1), p2 = piece(r3, w2);
    EXPECT_EQ(p1.global_shape, (Shape{2, 4, 128, 64}));
    EXPECT_EQ(p1.box, (Box{{0, 2, 64, 0}, {2, 2, 64, 64}}));
    EXPECT_EQ(p2.box, (Box{{0, 2, 0, 64}, {2, 2, 64, 64}}));
    EXPECT_TRUE(p1.fused);
    EXPECT_EQ(p1.experts, 2u);
    EXPECT_EQ(p1.slice_numel(), 64u * 64u);
    // Slices: experts 2 and 3 of each layer, in the order of the layer's held tensors.
    for (std::size_t k = 0; k < r3.layer_tensors().size(); ++k) {
      const std::string& n = mix.layer.tensors[r3.layer_tensors()[k]].name;
      if (n.starts_with("block_sparse_moe.experts.")) EXPECT_EQ(r3.expert_slice(k), n[25] - '2') << n;
      else EXPECT_EQ(r3.expert_slice(k), 0u) << n;
    }
    // The router and the attention are whole [L, ...] pieces or tp pieces, never fused.
    const StackedPiece gate = piece(r3, "model.layers.block_sparse_moe.gate.weight");
    EXPECT_FALSE(gate.fused);
    EXPECT_EQ(gate.box, (Box{{0, 0, 0}, {2, 4, 64}}));
    // In the unsharded file's order: each buffer where stacked_layout puts it.
    const StackedLayout sl = stacked_layout(mix, ExpertLayout::stacked);
    ASSERT_EQ(r3.stacked().size(), sl.buffers.size());
    for (std::size_t k = 0; k < sl.buffers.size(); ++k) EXPECT_EQ(r3.stacked()[k].name, sl.buffers[k].name);
  }
  {
    // in-out: w1 is stored [64, 128], so its output dimension is dimension 3 of [L, E, in, out].
    BuildOptions io = opts;
    io.orientation = Orientation::in_out;
    const Builder bio(mix, make_recipe("hf"), io, *be, be->memory());
    const ParallelPlan plan(mix, {.tp = 2, .ep = 4});
    const RankPlan r5(bio, plan, 5);  // ep 2, tp 1
    EXPECT_EQ(piece(r5, w1).box, (Box{{0, 2, 0, 64}, {2, 1, 64, 64}}));
    EXPECT_EQ(piece(r5, w2).box, (Box{{0, 2, 64, 0}, {2, 1, 64, 64}}));
  }
  {
    // pp 2 x fsdp 3: stage 1 holds layer 1; fsdp splits each expert's dimension 0 (128 rows: 43, 43, 42).
    const ParallelPlan plan(mix, {.pp = 2, .fsdp = 3});
    const RankPlan r5(b, plan, 5);  // pp 1, fsdp 2
    EXPECT_EQ(piece(r5, w1).box, (Box{{1, 0, 86, 0}, {1, 4, 42, 64}}));
    EXPECT_EQ(piece(r5, w2).box, (Box{{1, 0, 44, 0}, {1, 4, 20, 128}}));  // 64 rows: 22, 22, 20
    EXPECT_EQ(piece(r5, w1).experts, 4u);
  }
  // The per-layer layout and per-expert stacked layout have no fused pieces.
  BuildOptions per = opts;
  per.experts = ExpertLayout::per_expert;
  const Builder bper(mix, make_recipe("hf"), per, *be, be->memory());
  const ParallelPlan plan(mix, {.ep = 2});
  const RankPlan rper(bper, plan, 1);
  for (const StackedPiece& p : rper.stacked()) EXPECT_FALSE(p.fused) << p.name;
  EXPECT_EQ(rper.stacked().size(), rper.layer_tensors().size());
  const Builder bl(mix, make_recipe("hf"), {}, *be, be->memory());
  EXPECT_TRUE(RankPlan(bl, plan, 1).stacked().empty());
}
