// emit_parallel with its ranks as threads of one process (a Collective over a mutex), so the
// protocol is checked without MPI (tests/test_cli_mpi.cpp runs the same under mpirun):
//   - split_by_bytes' owners, exactly;
//   - safetensors: the directory N ranks write is byte for byte emit_checkpoint's (files, index,
//     config.json), for 2-4 ranks, both layouts and orientations, every dtype, one file or many;
//     rank 0's report has the one-process hashes;
//   - hdf5: the master's datasets are virtual, read through the rank files they equal the
//     one-process file's bytes, and its root attributes are the same plus layerinit.rank_files;
//   - a rank that fails: every rank throws (the first failed rank its own error, the others
//     rank_failed naming it), nothing is published and no temporary is left; a refused target; a
//     group that breaks (a peer died); --force over a parallel HDF5 checkpoint removes its old ranks.
#include <gtest/gtest.h>

#include <sys/file.h>
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <layerinit/checkpoint/detail.hpp>  // TempPath: in-tree only
#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/checkpoint/parallel.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/plan/plan.hpp>
#include "hdf5_reader.hpp"
#include "region_util.hpp"
#include "thread_collective.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace layerinit;
using layerinit::testing::slurp;
using layerinit::testing::TempDir;
using layerinit::testing::ThreadCollective;
using layerinit::testing::ThreadGroup;

namespace {

struct Job {
  ModelSpec spec;
  BuildOptions opts;
  EmitOptions eo;
};

// What one rank ended with: its result, or its exception's type and message.
struct Outcome {
  EmitResult result;
  std::string error;  // empty on success
  bool rank_failed = false;
  std::uint64_t failed_rank = 0;
  bool refused = false;
  std::uint64_t peak = 0;         // the rank's tracked peak
  std::uint64_t largest_part = 0; // the one-process emit's peak (make_memory_plan's peak_streamed)
};

// Runs emit_parallel on n threads, each with its own backend and builder (as processes have).
// `per_rank` may adjust a rank's options (a failure injected into one rank).
std::vector<Outcome> run_parallel(const Job& s, std::uint64_t n, const fs::path& target,
                                  const std::function<void(std::uint64_t, EmitOptions&, ThreadGroup&)>& per_rank = {}) {
  ThreadGroup group(n);
  std::vector<Outcome> out(n);
  std::vector<std::thread> threads;
  for (std::uint64_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto be = make_host_backend(1);
      tracking_resource mr(be->memory());
      const Builder b(s.spec, make_recipe("hf"), s.opts, *be, mr);
      EmitOptions eo = s.eo;
      if (per_rank) per_rank(r, eo, group);
      ThreadCollective c(group, r);
      out[r].largest_part = make_memory_plan(b).peak_streamed;
      try {
        out[r].result = emit_parallel(b, *be, target, eo, c);
        out[r].peak = mr.stats().peak_bytes;
      } catch (const rank_failed& e) {
        out[r].error = e.what();
        out[r].rank_failed = true;
        out[r].failed_rank = e.rank();
      } catch (const checkpoint_refused& e) {
        out[r].error = e.what();
        out[r].refused = true;
      } catch (const std::exception& e) {
        out[r].error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

EmitResult run_serial(const Job& s, const fs::path& target) {
  auto be = make_host_backend(1);
  tracking_resource mr(be->memory());
  const Builder b(s.spec, make_recipe("hf"), s.opts, *be, mr);
  return emit_checkpoint(b, *be, target, s.eo);
}

// The job with regions on its tensors (region_util.hpp; test_regions checks the one-process emit).
Job with_regions(Job s) {
  s.spec = layerinit::testing::with_regions(s.spec);
  if (!s.eo.writer.config_json.empty()) s.eo.writer.config_json = config_json(s.spec, s.opts.dtype);
  return s;
}

Job safetensors_setup(const std::string& preset, Layout layout, Orientation o, DType t, std::uint64_t shard) {
  Job s{make_preset(preset), {}, {}};
  s.opts.layout = layout;
  s.opts.orientation = o;
  s.opts.dtype = t;
  s.eo.format = CheckpointFormat::safetensors;
  s.eo.writer.max_shard_size = shard;
  if (layout == Layout::per_layer && o == Orientation::out_in) s.eo.writer.config_json = config_json(s.spec, t);
  return s;
}

Job hdf5_setup(const std::string& preset, Layout layout, DType t) {
  Job s{make_preset(preset), {}, {}};
  s.opts.layout = layout;
  s.opts.dtype = t;
  s.eo.format = CheckpointFormat::hdf5;
  return s;
}

std::map<std::string, std::string> directory_bytes(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = slurp(e.path());
  return m;
}

}  // namespace

TEST(EmitParallel, SplitByBytesGivesEachUnitTheRankOfItsMiddleByte) {
  using V = std::vector<std::uint64_t>;
  EXPECT_EQ(split_by_bytes({10, 10, 10, 10}, 2), (V{0, 0, 1, 1}));
  EXPECT_EQ(split_by_bytes({10, 10, 10, 10}, 3), (V{0, 1, 1, 2}));  // middles 5, 15, 25, 35 of 40
  EXPECT_EQ(split_by_bytes({100, 1, 1}, 2), (V{0, 1, 1}));
  EXPECT_EQ(split_by_bytes({1, 1}, 5), (V{1, 3}));                  // more ranks than units
  EXPECT_EQ(split_by_bytes({7}, 1), (V{0}));
  EXPECT_EQ(split_by_bytes({}, 3), (V{}));
  EXPECT_EQ(split_by_bytes({0, 0}, 3), (V{0, 0}));
  // Near 2^64 bytes in all: no overflow, the last unit's middle is in the last share.
  const std::uint64_t big = std::uint64_t{1} << 62;
  EXPECT_EQ(split_by_bytes({big, big, big, big}, 4), (V{0, 1, 2, 3}));
  EXPECT_THROW(split_by_bytes({1}, 0), layerinit::logic_error);  // misuse
  // Owners never decrease and stay below the rank count.
  std::uint64_t x = 12345;
  for (int trial = 0; trial < 200; ++trial) {
    V bytes(1 + trial % 17);
    for (auto& b : bytes) b = (x = x * 6364136223846793005ull + 1442695040888963407ull) >> 50;
    const std::uint64_t ranks = 1 + trial % 9;
    const V owner = split_by_bytes(bytes, ranks);
    ASSERT_EQ(owner.size(), bytes.size());
    for (std::size_t k = 0; k < owner.size(); ++k) {
      EXPECT_LT(owner[k], ranks);
      if (k) EXPECT_LE(owner[k - 1], owner[k]);
    }
  }
}

TEST(EmitParallel, HDF5RankFileNames) {
  EXPECT_EQ(hdf5_rank_file_name(3, 8), "rank-00003-of-00008.h5");
  EXPECT_EQ(hdf5_rank_file_name(123456, 200000), "rank-123456-of-200000.h5");
}

TEST(EmitParallel, SafetensorsIsByteIdenticalToOneProcess) {
  struct Case {
    Job s;
    std::uint64_t ranks;
  };
  const std::vector<Case> cases = {
      {safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in, DType::bf16, 100'000), 2},
      {safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in, DType::bf16, 100'000), 3},
      {safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in, DType::f32, 0), 2},  // one file
      {safetensors_setup("llama-tiny", Layout::stacked, Orientation::in_out, DType::f16, 50'000), 4},
      {safetensors_setup("mixtral-tiny", Layout::stacked, Orientation::out_in, DType::bf16, 30'000), 3},
      {safetensors_setup("mixtral-tiny", Layout::per_layer, Orientation::in_out, DType::f32, 60'000), 4},
      {safetensors_setup("gpt2-tiny", Layout::per_layer, Orientation::out_in, DType::bf16, 40'000), 3},
      {with_regions(safetensors_setup("mixtral-tiny", Layout::stacked, Orientation::in_out, DType::bf16, 30'000)), 3},
      {with_regions(safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in, DType::f16, 50'000)), 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.s.spec.name + " " + std::string(layout_name(c.s.opts.layout)) + " " +
                 std::string(dtype_name(c.s.opts.dtype)) + " shard " + std::to_string(c.s.eo.writer.max_shard_size) +
                 " ranks " + std::to_string(c.ranks));
    TempDir dir;
    const EmitResult one = run_serial(c.s, dir / "one");
    const auto outcomes = run_parallel(c.s, c.ranks, dir / "par");
    for (const auto& o : outcomes) ASSERT_EQ(o.error, "");
    const auto a = directory_bytes(dir / "one"), b = directory_bytes(dir / "par");
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, bytes] : a) {
      ASSERT_TRUE(b.count(name)) << name;
      EXPECT_TRUE(b.at(name) == bytes) << name << " differs";
    }
    // Only what the two emits put there: no temporary left.
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"one", "par"}));
    // Rank 0 reports the whole checkpoint with the one-process hashes.
    const EmitResult& r0 = outcomes[0].result;
    ASSERT_EQ(r0.tensors.size(), one.tensors.size());
    for (std::size_t k = 0; k < one.tensors.size(); ++k) {
      EXPECT_EQ(r0.tensors[k].name, one.tensors[k].name);
      EXPECT_EQ(r0.tensors[k].hash, one.tensors[k].hash) << one.tensors[k].name;
      EXPECT_TRUE(r0.tensors[k].hashed);
      EXPECT_EQ(r0.tensors[k].layer_hashes, one.tensors[k].layer_hashes);
    }
    EXPECT_EQ(r0.weight_bytes, one.weight_bytes);
    EXPECT_EQ(r0.file_bytes, one.file_bytes);
    // A rank holds one part at a time: at most the one-process emit's largest part.
    for (const auto& o : outcomes) EXPECT_LE(o.peak, o.largest_part);
    // The other ranks report their own files' tensors, with the one-process hashes, none twice.
    std::map<std::string, std::uint64_t> serial_hash;
    for (const auto& t : one.tensors) serial_hash[t.name] = t.hash;
    std::set<std::string> seen;
    for (std::uint64_t r = 1; r < c.ranks; ++r)
      for (const auto& t : outcomes[r].result.tensors) {
        EXPECT_TRUE(seen.insert(t.name).second) << t.name;
        ASSERT_TRUE(serial_hash.count(t.name)) << t.name;
        EXPECT_EQ(t.hash, serial_hash[t.name]) << t.name;
      }
  }
}

TEST(EmitParallel, HDF5MasterReadsAsTheOneProcessFile) {
  for (Layout layout : {Layout::per_layer, Layout::stacked})
    for (std::uint64_t ranks : {2, 3}) {
      const Job s = hdf5_setup(ranks == 2 ? "mixtral-tiny" : "llama-tiny", layout, ranks == 2 ? DType::f16 : DType::bf16);
      SCOPED_TRACE(s.spec.name + " " + std::string(layout_name(layout)) + " ranks " + std::to_string(ranks));
      TempDir dir;
      const EmitResult one = run_serial(s, dir / "one.h5");
      const auto outcomes = run_parallel(s, ranks, dir / "par.h5");
      for (const auto& o : outcomes) ASSERT_EQ(o.error, "");
      const auto a = layerinit::testing::read_hdf5_datasets(dir / "one.h5");
      const auto b = layerinit::testing::read_hdf5_datasets(dir / "par.h5");
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(a.size(), one.tensors.size());
      for (const auto& [name, d] : a) {
        ASSERT_TRUE(b.count(name)) << name;
        const auto& v = b.at(name);
        EXPECT_TRUE(v.is_virtual) << name;
        EXPECT_EQ(v.shape, d.shape) << name;
        EXPECT_EQ(v.dtype, d.dtype) << name;
        EXPECT_TRUE(v.bytes == d.bytes) << name << " differs";
      }
      for (const auto& o : outcomes) EXPECT_LE(o.peak, o.largest_part);
      // Root attributes: the one-process file's, plus the rank directory's name.
      auto attrs = layerinit::testing::read_hdf5_root_attributes(dir / "par.h5");
      const std::string ranks_dir = attrs["layerinit.rank_files"];
      EXPECT_TRUE(ranks_dir.starts_with("par.h5.ranks-")) << ranks_dir;
      attrs.erase("layerinit.rank_files");
      EXPECT_EQ(attrs, layerinit::testing::read_hdf5_root_attributes(dir / "one.h5"));
      // The directory: the master, its ranks' files and nothing else.
      EXPECT_EQ(dir.entries(), (std::vector<std::string>{"one.h5", "par.h5", ranks_dir}));
      std::uint64_t files = 0;
      for (const auto& e : fs::directory_iterator(dir / ranks_dir)) {
        const std::string f = e.path().filename().string();
        EXPECT_TRUE(f.starts_with("rank-") && f.ends_with("-of-0000" + std::to_string(ranks) + ".h5")) << f;
        ++files;
      }
      EXPECT_GE(files, 2u);
      EXPECT_LE(files, ranks);
      // Rank 0's report: per-layer every hash; stacked, a dataset split among ranks has no whole
      // hash but every layer's.
      const EmitResult& r0 = outcomes[0].result;
      ASSERT_EQ(r0.tensors.size(), one.tensors.size());
      for (std::size_t k = 0; k < one.tensors.size(); ++k) {
        const TensorReport& t = r0.tensors[k];
        EXPECT_EQ(t.name, one.tensors[k].name);
        EXPECT_EQ(t.layer_hashes, one.tensors[k].layer_hashes) << t.name;
        if (t.hashed) EXPECT_EQ(t.hash, one.tensors[k].hash) << t.name;
        if (!t.hashed) EXPECT_EQ(layout, Layout::stacked) << t.name;
      }
    }
}

TEST(EmitParallel, AFailingRankPublishesNothingAndLeavesNoTemporary) {
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5})
    for (std::uint64_t bad : {0, 1, 2}) {
      SCOPED_TRACE(std::string(format_name(f)) + " failing rank " + std::to_string(bad));
      Job s = f == CheckpointFormat::hdf5 ? hdf5_setup("llama-tiny", Layout::per_layer, DType::bf16)
                                            : safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in,
                                                                DType::bf16, 60'000);
      TempDir dir;
      const fs::path target = dir / (f == CheckpointFormat::hdf5 ? "out.h5" : "out");
      const auto outcomes = run_parallel(s, 3, target, [&](std::uint64_t r, EmitOptions& eo, ThreadGroup&) {
        if (r == bad) eo.progress = [](const EmitProgress&) { throw checkpoint_error("checkpoint: disk on fire"); };
      });
      for (std::uint64_t r = 0; r < 3; ++r) {
        if (r == bad) {
          EXPECT_EQ(outcomes[r].error, "checkpoint: disk on fire");
        } else {
          EXPECT_TRUE(outcomes[r].rank_failed) << r << ": " << outcomes[r].error;
          EXPECT_EQ(outcomes[r].failed_rank, bad);
          EXPECT_EQ(outcomes[r].error, "emit: rank " + std::to_string(bad) + " of 3 failed; nothing was published");
        }
      }
      EXPECT_EQ(dir.entries(), std::vector<std::string>{});
    }
}

TEST(EmitParallel, TwoFailingRanksReportTheLowest) {
  Job s = safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in, DType::bf16, 60'000);
  TempDir dir;
  const auto outcomes = run_parallel(s, 4, dir / "out", [&](std::uint64_t r, EmitOptions& eo, ThreadGroup&) {
    if (r == 1 || r == 3) eo.progress = [r](const EmitProgress&) { throw error("rank " + std::to_string(r) + " broke"); };
  });
  EXPECT_EQ(outcomes[1].error, "rank 1 broke");
  for (std::uint64_t r : {0, 2, 3}) {
    EXPECT_TRUE(outcomes[r].rank_failed) << r;
    EXPECT_EQ(outcomes[r].failed_rank, 1u) << r;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(EmitParallel, ARefusedTargetIsRefusedBeforeAnyWork) {
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5}) {
    SCOPED_TRACE(format_name(f));
    Job s = f == CheckpointFormat::hdf5 ? hdf5_setup("llama-tiny", Layout::per_layer, DType::bf16)
                                          : safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in,
                                                              DType::bf16, 0);
    TempDir dir;
    const fs::path target = dir / "out";
    {
      std::ofstream(target) << "mine";
    }
    const auto outcomes = run_parallel(s, 3, target);
    EXPECT_TRUE(outcomes[0].refused) << outcomes[0].error;
    EXPECT_EQ(outcomes[0].error, "checkpoint: refusing to overwrite existing " + target.string() + " (use --force)");
    for (std::uint64_t r : {1, 2}) EXPECT_EQ(outcomes[r].failed_rank, 0u);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"out"});
    EXPECT_EQ(slurp(target), "mine");
    // With --force it is still not layerinit's: refused, untouched.
    s.eo.writer.overwrite = true;
    const auto forced = run_parallel(s, 2, target);
    EXPECT_TRUE(forced[0].refused) << forced[0].error;
    EXPECT_EQ(slurp(target), "mine");
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"out"});
  }
}

TEST(EmitParallel, ABrokenGroupLeavesNothing) {
  // A rank that vanishes mid-run (its collective never answers): the others give up waiting, remove
  // the staging directory and rethrow.
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5}) {
    SCOPED_TRACE(format_name(f));
    Job s = f == CheckpointFormat::hdf5 ? hdf5_setup("llama-tiny", Layout::stacked, DType::bf16)
                                          : safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in,
                                                              DType::bf16, 60'000);
    TempDir dir;
    const auto outcomes = run_parallel(s, 3, dir / "out", [&](std::uint64_t r, EmitOptions& eo, ThreadGroup& g) {
      if (r == 2)
        eo.progress = [&g](const EmitProgress&) {
          g.leave();
          throw error("rank 2 lost");
        };
    });
    EXPECT_EQ(outcomes[0].error, "interrupted");
    EXPECT_EQ(outcomes[1].error, "interrupted");
    EXPECT_EQ(dir.entries(), std::vector<std::string>{});
  }
}

TEST(EmitParallel, ForceReplacesAParallelHDF5CheckpointAndItsRanks) {
  const Job s0 = hdf5_setup("llama-tiny", Layout::per_layer, DType::bf16);
  TempDir dir;
  for (const auto& o : run_parallel(s0, 3, dir / "out.h5")) ASSERT_EQ(o.error, "");
  const std::string first = layerinit::testing::read_hdf5_root_attributes(dir / "out.h5")["layerinit.rank_files"];
  ASSERT_TRUE(fs::is_directory(dir / first));
  // Again with --force and another seed: a new rank directory, the old one gone.
  Job s1 = s0;
  s1.opts.seed = 7;
  s1.eo.writer.overwrite = true;
  for (const auto& o : run_parallel(s1, 2, dir / "out.h5")) ASSERT_EQ(o.error, "");
  const std::string second = layerinit::testing::read_hdf5_root_attributes(dir / "out.h5")["layerinit.rank_files"];
  EXPECT_NE(second, first);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"out.h5", second}));
  EXPECT_EQ(layerinit::testing::read_hdf5_root_attributes(dir / "out.h5")["seed"], "7");
  // One process with --force replaces it by one file and removes the ranks.
  run_serial(s1, dir / "out.h5");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});
  EXPECT_FALSE(layerinit::testing::read_hdf5_datasets(dir / "out.h5").begin()->second.is_virtual);
}

TEST(EmitParallel, OneRankIsEmitCheckpoint) {
  const Job s = hdf5_setup("llama-tiny", Layout::per_layer, DType::bf16);
  TempDir dir;
  const auto outcomes = run_parallel(s, 1, dir / "out.h5");
  ASSERT_EQ(outcomes[0].error, "");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});
  EXPECT_FALSE(layerinit::testing::read_hdf5_datasets(dir / "out.h5").begin()->second.is_virtual);
}

// Every rank fails at once after writing hundreds of files: each removes the shared staging
// directory at the same moment. An entry another rank removed first is no error, so nothing is left
// (remove_all stopped at the first ENOENT and left the rest; issue 19).
TEST(EmitParallel, RanksRemovingTheStagingTogetherLeaveNothing) {
  // 300 tensors of a deep narrow MLP, one file each.
  Job s{mlp_spec("deep", std::vector<std::uint64_t>(151, 4), true), {}, {}};
  s.eo.format = CheckpointFormat::safetensors;
  s.eo.writer.max_shard_size = 1;
  // Each rank fails as it completes its last file: the three leave together, with hundreds of files staged.
  auto be = make_dry_backend();
  const Builder b(s.spec, make_recipe("hf"), s.opts, *be, be->memory());
  std::vector<std::uint64_t> bytes;
  for (const auto& f : safetensors_shards(checkpoint_datasets(b), s.eo.writer.max_shard_size)) bytes.push_back(f.data_bytes);
  ASSERT_EQ(bytes.size(), 300u);
  std::vector<int> files(3, 0);
  for (auto o : split_by_bytes(bytes, 3)) ++files[o];
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    TempDir dir;
    const auto outcomes = run_parallel(s, 3, dir / "out", [&](std::uint64_t r, EmitOptions& eo, ThreadGroup&) {
      eo.progress = [left = files[r]](const EmitProgress& p) mutable {
        if (p.bytes_done == p.bytes_total && --left == 0) throw checkpoint_error("checkpoint: disk on fire");
      };
    });
    for (const auto& o : outcomes) EXPECT_FALSE(o.error.empty());
    EXPECT_EQ(dir.entries(), std::vector<std::string>{});
  }
}

// A staging directory removed by its owner while another rank removes the same files (the ranks of
// a job torn down together, one of them killed midway): what the other removed first is no error,
// and nothing is left. std::filesystem::remove_all stopped at the first such file (issue 19).
TEST(EmitParallel, StagingRemovalToleratesAnotherRemover) {
  for (int round = 0; round < 5; ++round) {
    TempDir dir;
    std::optional<detail::TempPath> staging(std::in_place, dir / "out", true);
    const fs::path p = staging->path();
    for (int k = 0; k < 3000; ++k) std::ofstream(p / ("model-" + std::to_string(k) + ".safetensors")) << k;
    std::thread other([&] {
      for (int k = 2999; k >= 0; --k) ::unlink((p / ("model-" + std::to_string(k) + ".safetensors")).c_str());
    });
    staging.reset();  // TempPath::remove
    other.join();
    EXPECT_EQ(dir.entries(), std::vector<std::string>{}) << round;
  }
}

// What a killed emit left beside its target (its lock released with its process) is removed by the
// next emit to the same target; nothing else is: not a directory without layerinit's marker, not one
// whose emit is still running (its marker locked), not a name of another target or another length.
TEST(EmitParallel, ALaterEmitRemovesStaleStagingAndNothingElse) {
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5}) {
    for (std::uint64_t ranks : {1, 3}) {
      SCOPED_TRACE(std::string(format_name(f)) + ", " + std::to_string(ranks) + " ranks");
      TempDir dir;
      const std::string name = f == CheckpointFormat::hdf5 ? "out.h5" : "out";
      auto staging = [&](const std::string& entry, bool marker) {
        fs::create_directory(dir / entry);
        std::ofstream(dir / entry / "model-00001-of-00002.safetensors") << std::string(1000, 'x');
        if (marker) std::ofstream(dir / entry / ".layerinit-staging");
      };
      staging("." + name + ".tmp-AbC123", true);    // stale
      staging(name + ".ranks-Zz9yX8", true);        // stale
      staging("." + name + ".tmp-Foreig", false);   // someone's own directory
      staging("." + name + ".tmp-toolong", true);   // not a name layerinit makes
      staging(".other.tmp-AbC123", true);           // another target's
      staging("." + name + ".tmp-InUse1", true);    // an emit still running
      const int lock = ::open((dir / ("." + name + ".tmp-InUse1") / ".layerinit-staging").c_str(), O_RDONLY);
      ASSERT_EQ(::flock(lock, LOCK_EX), 0);
      Job s = f == CheckpointFormat::hdf5 ? hdf5_setup("llama-tiny", Layout::per_layer, DType::bf16)
                                          : safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in,
                                                              DType::bf16, 0);
      const auto outcomes = run_parallel(s, ranks, dir / name);
      for (const auto& o : outcomes) EXPECT_EQ(o.error, "");
      ::close(lock);
      std::vector<std::string> left;
      for (const auto& e : dir.entries())
        if (e != name && e.find(".ranks-") == std::string::npos) left.push_back(e);
        else if (e.find(".ranks-") != std::string::npos) EXPECT_NE(e, name + ".ranks-Zz9yX8");
      EXPECT_EQ(left, (std::vector<std::string>{".other.tmp-AbC123", "." + name + ".tmp-Foreig", "." + name + ".tmp-InUse1",
                                                "." + name + ".tmp-toolong"}));
    }
  }
}
// Rank 0 checks, before publishing, that every file the ranks wrote is in the staging directory
// with its size and that nothing else is: a file removed meanwhile (rm -rf of the working directory,
// issue 19) fails the emit with nothing published, instead of an index naming missing files.
TEST(EmitParallel, AFileRemovedBeforePublishingPublishesNothing) {
  for (CheckpointFormat f : {CheckpointFormat::safetensors, CheckpointFormat::hdf5}) {
    for (const std::string change : {"removed", "cut", "added"}) {
      SCOPED_TRACE(std::string(format_name(f)) + ", " + change);
      Job s = f == CheckpointFormat::hdf5 ? hdf5_setup("llama-tiny", Layout::per_layer, DType::bf16)
                                          : safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in,
                                                              DType::bf16, 60'000);
      TempDir dir;
      const fs::path target = dir / (f == CheckpointFormat::hdf5 ? "out.h5" : "out");
      const auto outcomes = run_parallel(s, 3, target, [&](std::uint64_t r, EmitOptions&, ThreadGroup& g) {
        if (r != 0) return;
        // Every rank has written and agreed when rank 0 gathers: change a file of rank 1's there.
        g.before_gather = [&] {
          for (const auto& e : fs::directory_iterator(dir.path())) {
            if (!fs::is_directory(e.path())) continue;
            std::vector<fs::path> files;
            for (const auto& x : fs::directory_iterator(e.path()))
              if (x.path().filename().string()[0] != '.') files.push_back(x.path());
            std::sort(files.begin(), files.end());
            ASSERT_GE(files.size(), 3u);
            const fs::path staged = files[1];
            if (change == "removed") fs::remove(staged);
            if (change == "cut") fs::resize_file(staged, fs::file_size(staged) - 1);
            if (change == "added") std::ofstream(e.path() / "notes.txt") << "mine";
          }
        };
      });
      EXPECT_NE(outcomes[0].error.find("changed while the emit ran?); nothing was published"), std::string::npos)
          << outcomes[0].error;
      for (std::uint64_t r : {1, 2}) EXPECT_TRUE(outcomes[r].rank_failed) << outcomes[r].error;
      EXPECT_EQ(dir.entries(), std::vector<std::string>{});
    }
  }
}

// Ranks given different options (another seed, model, format or target: a process group not started
// from one command line) are refused before anything is written, on every rank, naming what differs.
TEST(EmitParallel, RanksGivenDifferentOptionsWriteNothing) {
  struct Case {
    std::string what;
    std::function<void(Job&)> change;
    std::string words;
    std::function<void(Recipe&, std::uint64_t rank)> recipe = nullptr;  // each rank's overrides
  };
  const std::vector<Case> cases = {
      {"seed", [](Job& j) { j.opts.seed = 2; }, "rank 1 was given another seed than rank 0 ('2', rank 0: '0')"},
      // Fills that differ past the 6 digits FillSpec::describe() prints (the digest read those).
      {"init override", [](Job&) {}, "another init overrides",
       [](Recipe& rec, std::uint64_t r) { rec.add_override("*mlp*", FillSpec::normal(0, r == 0 ? 0.02000001 : 0.02000002)); }},
      {"model", [](Job& j) { j.spec = make_preset("gpt2-tiny"); j.eo.writer.config_json = config_json(j.spec, DType::bf16); },
       "rank 1 was given another model than rank 0: every process"},
      {"format", [](Job& j) { j.eo.format = CheckpointFormat::hdf5; j.eo.writer.config_json.clear(); },
       "rank 1 was given another format than rank 0 ('hdf5', rank 0: 'safetensors')"},
      {"shards", [](Job& j) { j.eo.writer.max_shard_size = 1; }, "another max shard size"},
      {"dtype override", [](Job& j) { j.opts.dtype_overrides = {{"*norm*", DType::f32}}; }, "another dtype overrides"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    const Job base = safetensors_setup("llama-tiny", Layout::per_layer, Orientation::out_in, DType::bf16, 60'000);
    Job other = base;
    c.change(other);
    ThreadGroup group(2);
    std::vector<std::string> errors(2);
    std::vector<bool> failed_rank(2, false);
    std::vector<std::thread> threads;
    for (std::uint64_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        const Job& s = r == 1 ? other : base;
        auto be = make_host_backend(1);
        Recipe rec = make_recipe("hf");
        if (c.recipe) c.recipe(rec, r);
        const Builder b(s.spec, rec, s.opts, *be, be->memory());
        ThreadCollective col(group, r);
        try {
          emit_parallel(b, *be, dir / "out", s.eo, col);
        } catch (const rank_failed& e) {
          errors[r] = e.what();
          failed_rank[r] = true;
        } catch (const std::invalid_argument& e) {
          errors[r] = e.what();
        } catch (const std::exception& e) {
          errors[r] = std::string("unexpected: ") + e.what();
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_TRUE(failed_rank[0]) << errors[0];
    EXPECT_EQ(errors[0], "emit: rank 1 of 2 failed; nothing was published");
    EXPECT_NE(errors[1].find(c.words), std::string::npos) << errors[1];
    EXPECT_EQ(dir.entries(), std::vector<std::string>{});
  }
}
