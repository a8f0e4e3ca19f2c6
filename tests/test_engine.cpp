// The one allocate-fill-synchronize step (init/engine.hpp) and the plan it is given: parts filled as
// the builder fills them, slices of buffers made earlier, the one stacked-dtype check before anything
// is allocated, the between-parts hook (a throw stops a build and frees what it made), layer runs,
// prepared fills, and the small functions around the writers and emit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/engine.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/shard/rank.hpp>
#include "builder_util.hpp"
#include "test_util.hpp"

using namespace layerinit;
using layerinit::testing::hashes_by_name;
using layerinit::testing::TempDir;

namespace {

struct Env {
  std::unique_ptr<backend> be = make_host_backend(1);
  tracking_resource tracker{be->memory()};
};

Builder builder(Env& env, const ModelSpec& spec, Layout layout = Layout::per_layer, std::vector<DTypeOverride> o = {}) {
  BuildOptions opts;
  opts.layout = layout;
  opts.seed = 11;
  opts.dtype_overrides = std::move(o);
  return Builder(spec, make_recipe("hf"), opts, *env.be, env.tracker);
}

}  // namespace

TEST(Engine, FillPartMakesTheBuildersBytes) {
  Env env;
  const Builder b = builder(env, make_preset("llama-tiny"));
  const auto reference = hashes_by_name(*env.be, b.build(), b.spec());
  const std::vector<PlannedTensor> plans = b.plan_layer(1);
  const std::vector<Tensor> made = b.engine().fill_part(whole_tensors(plans));
  ASSERT_EQ(made.size(), plans.size());
  std::uint64_t bytes = 0;
  for (std::size_t j = 0; j < made.size(); ++j) {
    EXPECT_EQ(made[j].view.name, plans[j].name);
    EXPECT_EQ(made[j].view.shape, plans[j].memory_shape);
    EXPECT_EQ(hash_tensor(*env.be, made[j].view), reference.at(plans[j].name)) << plans[j].name;
    bytes += made[j].view.bytes();
  }
  EXPECT_EQ(env.tracker.stats().current_bytes, bytes);
}

TEST(Engine, FillPartWritesSlicesOfABufferMadeEarlier) {
  Env env;
  const Builder b = builder(env, make_preset("llama-tiny"));
  const std::vector<PlannedTensor> plans = b.plan_pre();
  ASSERT_FALSE(plans.empty());
  const PlannedTensor& p = plans[0];
  Tensor buffer = Tensor::allocate(env.tracker, "buffer", {2, p.numel()}, p.dtype);
  std::memset(buffer.view.data, 0, buffer.view.bytes());
  const std::uint64_t before = env.tracker.stats().total_count;
  PartTensor slot{&p, p.memory_shape, static_cast<unsigned char*>(buffer.view.data) + p.bytes(), StackSlot{"buffer", p.dtype}};
  EXPECT_TRUE(b.engine().fill_part({&slot, 1}).empty());
  EXPECT_EQ(env.tracker.stats().total_count, before);  // nothing allocated
  const std::vector<Tensor> made = b.engine().fill_part(whole_tensors(plans));
  const Tensor& whole = made.front();
  EXPECT_EQ(std::memcmp(static_cast<unsigned char*>(buffer.view.data) + p.bytes(), whole.view.data, p.bytes()), 0);
  const std::vector<unsigned char> zeros(p.bytes(), 0);
  EXPECT_EQ(std::memcmp(buffer.view.data, zeros.data(), p.bytes()), 0) << "slice 0 untouched";
}

TEST(Engine, AStackedSliceOfAnotherDtypeIsRefusedBeforeAllocating) {
  Env env;
  const Builder b = builder(env, make_preset("llama-tiny"));
  const std::vector<PlannedTensor> plans = b.plan_layer(0);
  std::vector<PartTensor> part = whole_tensors(plans);
  part.back().stack = StackSlot{"model.layers.x\n.weight", DType::f32};  // the name is user text
  try {
    b.engine().fill_part(part);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "tensor '" + plans.back().name +
                                         "' is bf16 but its stacked buffer 'model.layers.x\\x0a.weight' is fp32 (a stacked "
                                         "layout needs one dtype per stacked buffer)");
  }
  EXPECT_EQ(env.tracker.stats().total_count, 0u);
}

TEST(Engine, AfterPartRunsBetweenPartsAndAThrowFreesTheBuild) {
  for (Layout layout : {Layout::per_layer, Layout::stacked}) {
    Env env;
    const ModelSpec spec = make_preset("llama-tiny");
    BuildOptions opts;
    opts.layout = layout;
    int parts = 0;
    opts.after_part = [&] { ++parts; };
    const std::uint64_t expected = 1 + spec.num_layers + 1;  // pre, each layer, post (llama-tiny: one tensor each side)
    ASSERT_EQ(spec.pre.size() + spec.post.size(), 3u);  // embedding; norm and head
    {
      const Model m = Builder(spec, make_recipe("hf"), opts, *env.be, env.tracker).build();
      EXPECT_EQ(parts, static_cast<int>(expected));
    }
    // Streamed: one part per tensor outside the layers; the caller's hook runs after the builder's.
    parts = 0;
    std::vector<int> order;
    Builder(spec, make_recipe("hf"), opts, *env.be, env.tracker)
        .stream([](const Part&) {}, [&] { order.push_back(parts); });
    EXPECT_EQ(parts, static_cast<int>(spec.pre.size() + spec.num_layers + spec.post.size()));
    ASSERT_EQ(order.size(), static_cast<std::size_t>(parts));
    for (std::size_t k = 0; k < order.size(); ++k) EXPECT_EQ(order[k], static_cast<int>(k + 1));
    // A throw after layer 1: the build stops there, and everything it made is freed.
    parts = 0;
    opts.after_part = [&] {
      if (++parts == 3) throw error("interrupted");
    };
    EXPECT_THROW(Builder(spec, make_recipe("hf"), opts, *env.be, env.tracker).build(), error);
    EXPECT_EQ(parts, 3);
    EXPECT_EQ(env.tracker.stats().current_bytes, 0u);
    // A rank's build and stream stop the same way.
    const ParallelPlan plan(spec, {.tp = 2});
    parts = 0;
    const Builder rb(spec, make_recipe("hf"), opts, *env.be, env.tracker);
    EXPECT_THROW(build_rank(RankPlan(rb, plan, 1)), error);
    parts = 0;
    EXPECT_THROW(stream_rank(RankPlan(rb, plan, 1), [](const RankPart&) {}), error);
    EXPECT_EQ(env.tracker.stats().current_bytes, 0u);
  }
}

TEST(Engine, LayerRunsAreOneRunForUniformLayersElseOnePerLayer) {
  Env env;
  const ModelSpec spec = make_preset("llama-tiny");
  struct Run {
    std::uint64_t first, count;
    std::string first_name;
  };
  auto runs = [&](const Builder& b, std::uint64_t first, std::uint64_t count) {
    std::vector<Run> out;
    b.walk({.mode = WalkMode::runs, .first = first, .count = count}, [&](const PlanStep& s) {
      if (s.kind == Part::Kind::layer) out.push_back({s.layer, s.count, s.tensors.front().name});
    });
    return out;
  };
  const Builder uniform = builder(env, spec, Layout::per_layer, {{"*norm*", DType::f32}});
  auto u = runs(uniform, 1, 3);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].first, 1u);
  EXPECT_EQ(u[0].count, 3u);
  EXPECT_EQ(u[0].first_name, uniform.plan_layer(1).front().name);
  EXPECT_TRUE(runs(uniform, 2, 0).empty());
  const Builder by_layer = builder(env, spec, Layout::per_layer, {{"model.layers.1.*", DType::f32}});
  auto l = runs(by_layer, 0, spec.num_layers);
  ASSERT_EQ(l.size(), spec.num_layers);
  for (std::uint64_t i = 0; i < spec.num_layers; ++i) {
    EXPECT_EQ(l[i].first, i);
    EXPECT_EQ(l[i].count, 1u);
  }
}

TEST(Engine, APlannedTensorCarriesItsPreparedFill) {
  Env env;
  const Builder b = builder(env, make_preset("gpt2-tiny"));
  for (const PlannedTensor& p : b.plan_layer(0)) {
    ASSERT_TRUE(p.params.has_value()) << p.name;
    EXPECT_EQ(std::memcmp(&*p.params, &static_cast<const FillParams&>(prepare_fill(p.fill, p.dtype)), sizeof(FillParams)), 0);
    // By hand, without params: fill_job_for prepares it, to the same job.
    PlannedTensor by_hand = p;
    by_hand.params.reset();
    int dst = 0;
    const FillJob a = fill_job_for(p, &dst, 5), c = fill_job_for(by_hand, &dst, 5);
    EXPECT_EQ(std::memcmp(&a.params, &c.params, sizeof(FillParams)), 0);
    EXPECT_EQ(a.key, c.key);
    EXPECT_EQ(a.end, p.numel());
  }
  // make_fill_job from prepared params is the FillSpec one.
  const FillSpec s = FillSpec::trunc_normal_std(0, 0.02, -2, 2);
  int dst = 0;
  const FillJob x = make_fill_job(&dst, DType::bf16, 100, 3, "w", s);
  const FillJob y = make_fill_job(&dst, DType::bf16, 100, 3, "w", prepare_fill(s, DType::bf16));
  EXPECT_EQ(std::memcmp(&x.params, &y.params, sizeof(FillParams)), 0);
  EXPECT_EQ(x.key, y.key);
  EXPECT_EQ(x.end, y.end);
}

TEST(Engine, RankPiecesFromAGivenPlanAreTheRanksOwn) {
  Env env;
  const ModelSpec spec = make_preset("mixtral-tiny");
  const Builder b = builder(env, spec);
  const ParallelPlan plan(spec, {.tp = 2, .ep = 2});
  const RankPlan r(b, plan, 3);
  const auto a = r.layer(1), c = r.layer(1, b.plan_layer(1));
  ASSERT_EQ(a.size(), c.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].tensor.name, c[k].tensor.name);
    EXPECT_EQ(a[k].box, c[k].box);
  }
  EXPECT_THROW(r.layer(spec.num_layers, b.plan_layer(0)), std::out_of_range);
}

TEST(EmitRules, ConfigJsonOnlyForTheLayoutTransformersLoads) {
  const ModelSpec llama = make_preset("llama-tiny"), mlp = mlp_spec("mlp-small", {3, 8, 2}, true);
  EXPECT_TRUE(has_config_json(llama));
  EXPECT_FALSE(has_config_json(mlp));
  BuildOptions o;
  EXPECT_TRUE(hf_loadable(o));
  EXPECT_EQ(hf_config_for(llama, o), config_json(llama, o.dtype));
  EXPECT_EQ(hf_config_for(mlp, o), std::nullopt);
  o.layout = Layout::stacked;
  EXPECT_FALSE(hf_loadable(o));
  EXPECT_EQ(hf_config_for(llama, o), std::nullopt);
  o.layout = Layout::per_layer;
  o.orientation = Orientation::in_out;
  EXPECT_FALSE(hf_loadable(o));
  EXPECT_EQ(hf_config_for(llama, o), std::nullopt);
  EXPECT_EQ(rank_file_name(3, 8, ".h5"), "rank-00003-of-00008.h5");
}

TEST(EmitRules, TheTargetIsCheckedBeforeTheDatasetListIsMade) {
  TempDir dir;
  std::ofstream(dir / "taken.h5") << "mine";
  std::filesystem::create_directory(dir / "taken");
  for (CheckpointFormat f : {CheckpointFormat::hdf5, CheckpointFormat::safetensors}) {
    const auto taken = dir / (f == CheckpointFormat::hdf5 ? "taken.h5" : "taken");
    EXPECT_THROW(check_checkpoint_target(f, taken, {}, 0), checkpoint_refused);
    EXPECT_NO_THROW(check_checkpoint_target(f, dir / "free", {}, 0));
    EXPECT_THROW(check_checkpoint_target(f, dir / "no" / "dir", {}, 0), checkpoint_refused);
    bool made = false;
    EXPECT_THROW(open_checkpoint_writer(f, taken, 0, [&] { made = true; return std::vector<DatasetSpec>{}; }, {}, {}),
                 checkpoint_refused);
    EXPECT_FALSE(made);
    // Too little space for the planned bytes: refused before the list too.
    EXPECT_THROW(open_checkpoint_writer(f, dir / "free", UINT64_MAX, [&] { made = true; return std::vector<DatasetSpec>{}; }, {}, {}),
                 checkpoint_error);
    EXPECT_FALSE(made);
    // The list the source makes is validated.
    EXPECT_THROW(open_checkpoint_writer(f, dir / "free", 0, [] { return std::vector<DatasetSpec>{{"__metadata__", {1}, DType::f32, 0}}; }, {}, {}),
                 std::invalid_argument);
  }
  // An HDF5 file over a directory target, and a safetensors directory over a file: refused.
  EXPECT_THROW(check_checkpoint_target(CheckpointFormat::hdf5, dir / "taken", {.overwrite = true}, 0), checkpoint_refused);
  EXPECT_THROW(check_checkpoint_target(CheckpointFormat::safetensors, dir / "taken.h5", {.overwrite = true}, 0),
               checkpoint_refused);
  EXPECT_EQ(layerinit::testing::slurp(dir / "taken.h5"), "mine");
}

TEST(Text, Utf8SequenceLength) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xc3\xa9", 0), 2u);          // é
  EXPECT_EQ(utf8_sequence_length("\xe2\x82\xac", 0), 3u);      // €
  EXPECT_EQ(utf8_sequence_length("\xf0\x9f\x98\x80", 0), 4u);  // 😀
  EXPECT_EQ(utf8_sequence_length("x\xf0\x9f\x98\x80", 1), 4u);
  EXPECT_EQ(utf8_sequence_length("\xc0\xaf", 0), 0u);          // overlong
  EXPECT_EQ(utf8_sequence_length("\xed\xa0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(utf8_sequence_length("\xf4\x90\x80\x80", 0), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\xe2\x82", 0), 0u);          // cut short
  EXPECT_EQ(utf8_sequence_length("\x80", 0), 0u);              // a continuation byte
  EXPECT_EQ(utf8_sequence_length("\xff", 0), 0u);
}
