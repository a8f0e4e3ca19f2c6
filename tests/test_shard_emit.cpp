// A rank's safetensors file (emit_rank): every rank's file, read back with the independent reader and
// put together by its "layerinit.shards" metadata, gives the unsharded emit's tensors byte for byte,
// each element once per replica; the report's hashes are the file's bytes; the tracked peak is the
// rank's largest part; the file appears atomically and --force replaces only a rank file layerinit
// wrote.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>

#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/plan/plan.hpp>
#include "safetensors_reader.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace layerinit;
using layerinit::testing::parse_safetensors;
using layerinit::testing::SafetensorsFile;
using layerinit::testing::TempDir;

namespace {

EmitOptions safetensors() {
  EmitOptions o;
  o.format = CheckpointFormat::safetensors;
  return o;
}

}  // namespace

TEST(ShardEmit, RankFileNames) {
  EXPECT_EQ(rank_file_name(3, 8), "rank-00003-of-00008.safetensors");
  EXPECT_EQ(rank_file_name(0, 1), "rank-00000-of-00001.safetensors");
  EXPECT_EQ(rank_file_name(123456, 200000), "rank-123456-of-200000.safetensors");
}

TEST(ShardEmit, RankFilesPutTogetherAreTheUnshardedCheckpoint) {
  struct Case {
    ModelSpec spec;
    ParallelDegrees d;
    Layout layout;
    Orientation o;
    DType t;
  };
  const ModelSpec llama = make_preset("llama-tiny"), mix = make_preset("mixtral-tiny"), gpt2 = make_preset("gpt2-tiny");
  const std::vector<Case> cases = {
      {llama, {.tp = 2, .pp = 2}, Layout::per_layer, Orientation::out_in, DType::bf16},
      {llama, {.tp = 2, .fsdp = 3}, Layout::stacked, Orientation::in_out, DType::f32},
      {mix, {.tp = 2, .pp = 2, .ep = 2}, Layout::per_layer, Orientation::in_out, DType::f16},
      {gpt2, {.tp = 2, .pp = 2, .fsdp = 2}, Layout::stacked, Orientation::out_in, DType::bf16},
      {mlp_spec("mlp-odd", {3, 5, 5, 5, 5, 2}, true), {.fsdp = 4}, Layout::per_layer, Orientation::out_in, DType::bf16},
  };
  auto be = make_host_backend(1);
  for (const Case& c : cases) {
    const ParallelPlan plan(c.spec, c.d);
    SCOPED_TRACE(c.spec.name + " " + plan.describe() + " " + std::string(layout_name(c.layout)));
    BuildOptions opts;
    opts.layout = c.layout;
    opts.orientation = c.o;
    opts.dtype = c.t;
    opts.seed = 3;
    const Recipe recipe = make_recipe("hf");
    TempDir dir;
    emit_checkpoint(Builder(c.spec, recipe, opts, *be, be->memory()), *be, dir / "whole", safetensors());
    const SafetensorsFile whole = parse_safetensors(dir / "whole" / "model.safetensors");
    std::map<std::string, std::string> joined;  // name -> bytes put together from the ranks
    std::map<std::string, std::vector<std::uint8_t>> counts;
    for (const auto& [name, t] : whole.tensors) {
      joined[name].assign(t.bytes.size(), '\0');
      counts[name].assign(t.bytes.size() / dtype_size(c.t), 0);
    }

    for (std::uint64_t r = 0; r < plan.ranks(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      tracking_resource mr(be->memory());
      const Builder b(c.spec, recipe, opts, *be, mr);
      const RankPlan rp(b, plan, r);
      const EmitResult res = emit_rank(rp, *be, dir / "ranks", safetensors());
      EXPECT_EQ(mr.stats().peak_bytes, plan_rank(rp, TrainingSetup::mixed).peak_streamed);
      const fs::path file = dir / "ranks" / rank_file_name(r, plan.ranks());
      ASSERT_TRUE(fs::is_regular_file(file));
      EXPECT_EQ(res.file_bytes, fs::file_size(file));
      const SafetensorsFile f = parse_safetensors(file);
      EXPECT_EQ(f.metadata.at("format"), "pt");
      EXPECT_EQ(f.metadata.at("layout"), std::string(layout_name(c.layout)));
      const auto mesh = nlohmann::json::parse(f.metadata.at("layerinit.mesh").get<std::string>());
      EXPECT_EQ(mesh, (nlohmann::json{{"pp", c.d.pp}, {"fsdp", c.d.fsdp}, {"ep", c.d.ep}, {"tp", c.d.tp}, {"rank", r}}));
      const auto shards = nlohmann::json::parse(f.metadata.at("layerinit.shards").get<std::string>());
      ASSERT_EQ(shards.size(), f.tensors.size());
      ASSERT_EQ(res.tensors.size(), f.tensors.size());
      std::uint64_t bytes = 0;
      for (std::size_t k = 0; k < res.tensors.size(); ++k) {
        const TensorReport& rep = res.tensors[k];
        const auto& t = f.tensors.at(rep.name);
        EXPECT_EQ(t.shape, rep.shape);
        EXPECT_EQ(content_hash(t.bytes.data(), t.bytes.size()), rep.hash) << rep.name;
        const Shape global = shards.at(rep.name).at("global_shape").get<Shape>();
        const Shape offset = shards.at(rep.name).at("offset").get<Shape>();
        EXPECT_EQ(global, rep.global_shape);
        EXPECT_EQ(offset, rep.offset);
        ASSERT_EQ(whole.tensors.at(rep.name).shape, global) << rep.name;
        bytes += t.bytes.size();
        // Rows of the piece along its last dimension, into the whole tensor.
        const std::size_t n = global.size(), es = dtype_size(c.t);
        std::uint64_t rows = 1;
        for (std::size_t d = 0; d + 1 < n; ++d) rows *= t.shape[d];
        Shape idx(n, 0);
        for (std::uint64_t row = 0; row < rows; ++row) {
          std::uint64_t g = 0;
          for (std::size_t d = 0; d < n; ++d) g = g * global[d] + offset[d] + idx[d];
          const std::uint64_t len = t.shape[n - 1];
          std::memcpy(joined[rep.name].data() + g * es, t.bytes.data() + row * len * es, len * es);
          for (std::uint64_t e = 0; e < len; ++e) ++counts[rep.name][g + e];
          for (std::size_t d = n - 1; d-- > 0;) {
            if (++idx[d] < t.shape[d]) break;
            idx[d] = 0;
          }
        }
      }
      EXPECT_EQ(bytes, res.weight_bytes);
    }
    EXPECT_EQ(TempDir::list(dir / "ranks").size(), plan.ranks());  // the files, no temporaries
    for (const auto& [name, t] : whole.tensors) {
      EXPECT_EQ(joined[name], t.bytes) << name;
      const std::uint8_t lo = *std::min_element(counts[name].begin(), counts[name].end());
      const std::uint8_t hi = *std::max_element(counts[name].begin(), counts[name].end());
      EXPECT_EQ(lo, hi) << name << ": every element the same number of times";
      EXPECT_GE(lo, 1) << name;
    }
  }
}

TEST(ShardEmit, RankFilesFollowTheOutputRules) {
  auto be = make_host_backend(1);
  const ModelSpec spec = make_preset("llama-tiny");
  const ParallelPlan plan(spec, {.tp = 2});
  const Builder b(spec, make_recipe("hf"), {}, *be, be->memory());
  const RankPlan r1(b, plan, 1);
  TempDir dir;
  const fs::path out = dir / "ranks";
  const fs::path file = out / "rank-00001-of-00002.safetensors";
  emit_rank(r1, *be, out, safetensors());
  const std::string first = layerinit::testing::slurp(file);

  // Exists: refused without overwrite, untouched.
  EXPECT_THROW(emit_rank(r1, *be, out, safetensors()), checkpoint_refused);
  EXPECT_EQ(layerinit::testing::slurp(file), first);
  // With overwrite: replaced (another seed gives other bytes).
  EmitOptions force = safetensors();
  force.writer.overwrite = true;
  BuildOptions seeded;
  seeded.seed = 9;
  const Builder b9(spec, make_recipe("hf"), seeded, *be, be->memory());
  emit_rank(RankPlan(b9, plan, 1), *be, out, force);
  EXPECT_NE(layerinit::testing::slurp(file), first);
  // Not a file layerinit wrote: refused even with overwrite.
  { std::ofstream(out / "rank-00000-of-00002.safetensors") << "my notes"; }
  try {
    emit_rank(RankPlan(b, plan, 0), *be, out, force);
    ADD_FAILURE() << "replaced a file layerinit did not write";
  } catch (const checkpoint_refused& e) {
    EXPECT_NE(std::string(e.what()).find("not a safetensors file layerinit wrote"), std::string::npos) << e.what();
  }
  EXPECT_EQ(layerinit::testing::slurp(out / "rank-00000-of-00002.safetensors"), "my notes");
  EXPECT_EQ(TempDir::list(out), (std::vector<std::string>{"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"}));

  // The directory's parent must exist; a file where the directory should be is refused.
  EXPECT_THROW(emit_rank(r1, *be, dir / "no" / "such", safetensors()), checkpoint_refused);
  { std::ofstream(dir / "plain") << "x"; }
  EXPECT_THROW(emit_rank(r1, *be, dir / "plain", safetensors()), checkpoint_refused);
  // Only safetensors, one file, no config.json.
  EmitOptions h5;
  EXPECT_THROW(emit_rank(r1, *be, out, h5), std::invalid_argument);
  EmitOptions sharded = safetensors();
  sharded.writer.max_shard_size = 1000;
  EXPECT_THROW(emit_rank(r1, *be, out, sharded), std::invalid_argument);
  EmitOptions theirs = safetensors();
  theirs.meta.extra["layerinit.shards"] = "{}";
  EXPECT_THROW(emit_rank(r1, *be, out, theirs), std::invalid_argument);
  EXPECT_THROW(open_safetensors_file_writer(dir / "x.bin", {}, {}, {}), std::invalid_argument);

  // Interrupted: nothing published, no temporary, and the directory it made is gone again.
  std::atomic<bool> cancel{true};
  EmitOptions cancelled = safetensors();
  cancelled.cancel = &cancel;
  EXPECT_THROW(emit_rank(r1, *be, dir / "fresh", cancelled), error);
  EXPECT_FALSE(fs::exists(dir / "fresh"));
  EXPECT_THROW(emit_rank(RankPlan(b9, plan, 1), *be, out, [&] {
                 EmitOptions o = cancelled;
                 o.writer.overwrite = true;
                 return o;
               }()),
               error);
  EXPECT_EQ(TempDir::list(out).size(), 2u);
}

// A dtype override that names one layer cannot be stacked: refused (it poured fp32 bytes into a bf16
// dataset before), and nothing is left behind.
TEST(ShardEmit, StackedLayersOfTwoDtypesAreRefused) {
  auto be = make_host_backend(1);
  const ModelSpec spec = make_preset("llama-tiny");
  BuildOptions opts;
  opts.layout = Layout::stacked;
  opts.dtype_overrides = {{"model.layers.1.*", DType::f32}};
  const Builder b(spec, make_recipe("hf"), opts, *be, be->memory());
  TempDir dir;
  EXPECT_THROW(emit_checkpoint(b, *be, dir / "whole", safetensors()), std::invalid_argument);
  const ParallelPlan plan(spec, {.tp = 2});
  try {
    emit_rank(RankPlan(b, plan, 0), *be, dir / "ranks", safetensors());
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'model.layers.1.self_attn.q_proj.weight' is fp32 but its stacked buffer 'model.layers.self_attn.q_proj.weight' is bf16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

// The rank files of one mesh share a directory, and the reassembly glob takes them all: a rank file
// of another mesh there (another number of ranks, or as many on other degrees) is refused before
// anything is written (issue 19: both were written side by side).
TEST(ShardEmit, AnotherMeshsRankFilesAreRefused) {
  auto be = make_host_backend(1);
  const ModelSpec spec = make_preset("llama-tiny");
  const Builder b(spec, make_recipe("hf"), BuildOptions{}, *be, be->memory());
  TempDir dir;
  const fs::path ranks = dir / "ranks";
  const ParallelPlan tp2(spec, {.tp = 2}), four(spec, {.tp = 2, .pp = 2}), pp2(spec, {.pp = 2});
  emit_rank(RankPlan(b, tp2, 0), *be, ranks, safetensors());
  for (const ParallelPlan* other : {&four, &pp2}) {
    SCOPED_TRACE(other->describe());
    try {
      emit_rank(RankPlan(b, *other, 1), *be, ranks, safetensors());
      ADD_FAILURE() << "not refused";
    } catch (const checkpoint_refused& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("holds rank-00000-of-00002.safetensors, a rank file of another mesh"), std::string::npos) << m;
      EXPECT_NE(m.find("write each mesh's rank files to a directory of its own"), std::string::npos) << m;
    }
  }
  EXPECT_EQ(TempDir::list(ranks), std::vector<std::string>{"rank-00000-of-00002.safetensors"});
  // The same mesh's other rank joins it.
  emit_rank(RankPlan(b, tp2, 1), *be, ranks, safetensors());
  EXPECT_EQ(TempDir::list(ranks), (std::vector<std::string>{"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"}));
}
