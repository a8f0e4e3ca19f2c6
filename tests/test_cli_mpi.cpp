// `mpirun -np N layerinit emit` as a user runs it (Open MPI's mpirun, --oversubscribe so 3 or 4
// ranks run on CI's 2 cores, --allow-run-as-root since CI runs as root):
//   - safetensors: the directory is byte for byte the one-process emit's, and the report (rank 0's,
//     the only one printed) has its hashes;
//   - hdf5: the master reads (HDF5's C API, and h5py when .venv has it) as the one-process file;
//   - a rank that fails (a write past `ulimit -f`) or is killed (SIGKILL): nothing published, no
//     temporary left, and a failure is one line on stderr with the failed rank's exit code;
//   - bad input under mpirun: one line, exit 2.
// Skips (GTEST_SKIP) when mpirun is missing or the tool was built without MPI.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "hdf5_reader.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;

namespace {

// mpirun for np ranks of `args` (layerinit's arguments). -q drops mpirun's advice banners; the tcp
// transport instead of shared memory, whose backing file `ulimit -f` would also cut. After a rank
// dies, mpirun sends the others SIGTERM and SIGKILL odls_base_sigkill_timeout seconds later (1 by
// default, and mpirun sleeps that long after any failed rank): `grace` raises it where a rank is
// killed, so that the others finish their part and clean up in time on a loaded 2-core machine
// (docs/checkpoint.md). LeakSanitizer stays off in the ranks: Open MPI's own allocations outlive
// MPI_Finalize.
std::vector<std::string> mpirun(int np, const std::vector<std::string>& args, const std::string& ulimit_f = "",
                                int grace = 1) {
  std::vector<std::string> v{"mpirun", "--allow-run-as-root", "--oversubscribe", "-q", "--mca", "btl", "self,tcp",
                             "--mca", "odls_base_sigkill_timeout", std::to_string(grace),
                             "-x", "ASAN_OPTIONS", "-x", "LAYERINIT_TEST_KILL_RANK", "-x", "LAYERINIT_TEST_TERM_RANK", "-x", "LAYERINIT_TEST_SIMULATED_CUDA_DEVICES", "-np", std::to_string(np)};
  // The binary and its arguments reach the shell as its own arguments, never as text to parse.
  if (!ulimit_f.empty()) v.insert(v.end(), {"sh", "-c", "ulimit -f " + ulimit_f + "; exec \"$@\"", "sh"});
  v.push_back(kLayerinit);
  v.insert(v.end(), args.begin(), args.end());
  return v;
}

const SpawnOptions kEnv = {.env = {{"ASAN_OPTIONS", "detect_leaks=0"}, {"LAYERINIT_TEST_KILL_RANK", ""},
                                   {"LAYERINIT_TEST_TERM_RANK", ""}, {"LAYERINIT_TEST_SIMULATED_CUDA_DEVICES", ""}}};

std::map<std::string, std::string> directory_bytes(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = slurp(e.path());
  return m;
}

class CliMpi : public ::testing::Test {
 protected:
  void SetUp() override {
#if !LAYERINIT_CLI_MPI
    GTEST_SKIP() << "layerinit was built without MPI (LAYERINIT_MPI=OFF, or CMake found none)";
#endif
    if (::access(kLayerinit.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << kLayerinit << " (tools not built)";
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun on PATH";
  }
};

}  // namespace

TEST_F(CliMpi, SafetensorsIsByteIdenticalToOneProcess) {
  struct Case {
    int np;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {2, {"emit", "--preset", "llama-tiny", "--max-shard-size", "100KB"}},
      {3, {"emit", "--preset", "llama-tiny", "--max-shard-size", "100KB", "--dtype", "fp16"}},
      {4, {"emit", "--preset", "mixtral-tiny", "--layout", "stacked", "--max-shard-size", "40KB"}},
  };
  for (const Case& c : cases) {
    TempDir dir;
    auto args = c.flags;
    args.insert(args.end(), {"--format", "safetensors", "--report", "json", "-o"});
    const Result a = run([&] { auto v = args; v.push_back((dir / "one").string()); return v; }());
    ASSERT_EQ(a.code(), 0) << a.err;
    const Result b = run_command(mpirun(c.np, [&] { auto v = args; v.push_back((dir / "par").string()); return v; }()), kEnv);
    ASSERT_EQ(b.code(), 0) << b.err;
    EXPECT_EQ(b.our_lines(), std::vector<std::string>{}) << b.err;
    const auto x = directory_bytes(dir / "one"), y = directory_bytes(dir / "par");
    ASSERT_EQ(x.size(), y.size());
    ASSERT_GE(x.size(), 3u);  // shards and their index at least
    for (const auto& [name, bytes] : x) {
      ASSERT_TRUE(y.count(name)) << name;
      EXPECT_TRUE(y.at(name) == bytes) << name << " differs (np " << c.np << ")";
    }
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"one", "par"}));
    // One report (rank 0's), with the one-process hashes.
    const json ra = json::parse(a.out), rb = json::parse(b.out);
    EXPECT_EQ(rb["processes"], c.np);
    ASSERT_EQ(ra["tensors"].size(), rb["tensors"].size());
    for (std::size_t k = 0; k < ra["tensors"].size(); ++k) EXPECT_EQ(ra["tensors"][k], rb["tensors"][k]);
    EXPECT_EQ(ra["file_bytes"], rb["file_bytes"]);
  }
}

TEST_F(CliMpi, HDF5MasterReadsAsOneModel) {
  TempDir dir;
  const std::vector<std::string> flags{"emit", "--preset", "mixtral-tiny", "--layout", "stacked", "-o"};
  auto with = [&](const std::string& out) { auto v = flags; v.push_back((dir / out).string()); return v; };
  ASSERT_EQ(run(with("one.h5")).code(), 0);
  const Result r = run_command(mpirun(3, with("par.h5")), kEnv);
  ASSERT_EQ(r.code(), 0) << r.err;
  const auto a = layerinit::testing::read_hdf5_datasets(dir / "one.h5");
  const auto b = layerinit::testing::read_hdf5_datasets(dir / "par.h5");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 5u);
  for (const auto& [name, d] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(b.at(name).is_virtual) << name;
    EXPECT_TRUE(b.at(name).bytes == d.bytes) << name;
  }
  const std::string ranks = layerinit::testing::read_hdf5_root_attributes(dir / "par.h5")["layerinit.rank_files"];
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"one.h5", "par.h5", ranks}));
  // h5py reads the master as one model, from another directory (the rank files' paths are relative).
  const std::string py = std::string(LAYERINIT_SOURCE_DIR) + "/.venv/bin/python";
  if (!fs::exists(py)) GTEST_SKIP() << "no " << py << " (run scripts/python-env): h5py not checked";
  const std::string script =
      "import h5py, os, sys\n"
      "os.chdir('/')\n"
      "a, b = h5py.File(sys.argv[1], 'r'), h5py.File(sys.argv[2], 'r')\n"
      "assert sorted(a) == sorted(b), 'names'\n"
      "bad = [k for k in a if not b[k].is_virtual or a[k][...].tobytes() != b[k][...].tobytes()]\n"
      "assert not bad, bad\n"
      "print(len(a))\n";
  const Result p = run_command({py, "-c", script, (dir / "one.h5").string(), (dir / "par.h5").string()});
  EXPECT_EQ(p.code(), 0) << p.err;
  EXPECT_EQ(p.out, std::to_string(a.size()) + "\n");
}

TEST_F(CliMpi, AFailingRankIsOneLineAndLeavesNothing) {
  // Files above 60 KiB fail with "File too large" (the tool ignores SIGXFSZ); the 64 KiB embedding
  // is in rank 0's file.
  for (const std::string format : {"safetensors", "hdf5"}) {
    SCOPED_TRACE(format);
    TempDir dir;
    std::vector<std::string> args{"emit", "--preset", "llama-tiny", "--format", format, "-o", (dir / "out").string()};
    if (format == "safetensors") args.insert(args.end(), {"--max-shard-size", "100KB"});
    const Result f = run_command(mpirun(3, args, "60"), kEnv);
    EXPECT_EQ(f.code(), 1) << f.err;
    const auto lines = f.our_lines();
    ASSERT_EQ(lines.size(), 1u) << f.err;
    EXPECT_TRUE(lines[0].starts_with("layerinit: error: rank ")) << lines[0];
    EXPECT_NE(lines[0].find("File too large"), std::string::npos) << lines[0];
    // The file is named as it would have been published, not inside the removed staging directory.
    if (format == "safetensors")
      EXPECT_NE(lines[0].find("cannot write " + (dir / "out").string() + "/model-0000"), std::string::npos) << lines[0];
    else  // the checkpoint and the rank file, not the removed rank directory (issue 19)
      EXPECT_NE(lines[0].find((dir / "out").string() + " (its rank file rank-0000"), std::string::npos) << lines[0];
    EXPECT_EQ(lines[0].find(".ranks-"), std::string::npos) << lines[0];
    EXPECT_EQ(dir.entries(), std::vector<std::string>{}) << f.err;
  }
}

// Rank 0 killed just before or just after it publishes (LAYERINIT_TEST_KILL_AT): killed before, what
// the job staged is removed by the next emit (the staging directory, or the HDF5 rank directory, had
// lost its marker and stayed for good); killed after, the checkpoint reads whole and the next emit
// replaces it, leaving nothing else.
TEST_F(CliMpi, RankZeroKilledWhilePublishingLeavesWhatALaterEmitCleansUp) {
  for (const std::string format : {"safetensors", "hdf5"}) {
    for (const std::string point : {"before-rename", "after-rename"}) {
      SCOPED_TRACE(format + ", killed " + point);
      TempDir dir;
      const std::string out = (dir / "out").string();
      std::vector<std::string> args{"emit", "--preset", "llama-tiny", "--format", format, "-o", out};
      if (format == "safetensors") args.insert(args.end(), {"--max-shard-size", "60KB"});
      auto env = kEnv;
      env.env["LAYERINIT_TEST_KILL_AT"] = point + ":out";
      const Result killed = run_command(mpirun(2, args, "", 3), env);
      EXPECT_NE(killed.code(), 0) << killed.err;
      if (point == "after-rename") EXPECT_EQ(run({"verify", out}, kEnv).code(), 0);
      args.push_back("--force");
      const Result again = run_command(mpirun(2, args), kEnv);
      ASSERT_EQ(again.code(), 0) << again.err;
      dir.expect_only_the_checkpoint(format == "hdf5");
      EXPECT_EQ(run({"verify", out}, kEnv).code(), 0);
    }
  }
}

TEST_F(CliMpi, AKilledRankLeavesNothing) {
  for (const std::string format : {"safetensors", "hdf5"}) {
    SCOPED_TRACE(format);
    TempDir dir;
    std::vector<std::string> args{"emit", "--preset", "llama-tiny", "--format", format, "-o", (dir / "out").string()};
    if (format == "safetensors") args.insert(args.end(), {"--max-shard-size", "60KB"});
    auto env = kEnv;
    env.env["LAYERINIT_TEST_KILL_RANK"] = "1";
    const Result r = run_command(mpirun(3, args, "", 3), env);
    EXPECT_NE(r.code(), 0) << r.err;
    EXPECT_EQ(dir.entries(), std::vector<std::string>{}) << r.err;
  }
}

// The job torn down while the ranks write a checkpoint of many files (SIGTERM to every rank at once,
// as mpirun sends it after a Ctrl-C or a lost rank): nothing published and no staging directory
// left, however the ranks' removals of it interleave (issue 19: 9 of 9 runs left 1-2 GB of
// `.ck.tmp-*` behind, one rank stopping at a file another had removed first).
TEST_F(CliMpi, ATornDownJobLeavesNoStaging) {
  TempDir dir;
  const fs::path out = dir / "ck";
  Child c = spawn_command(mpirun(3, {"emit", "--preset", "gpt2-large", "--threads", "1", "--format", "safetensors",
                                     "--max-shard-size", "10MB", "-o", out.string()},
                                 "", 10),
                          kEnv);
  // Files in the staging directory (0 before it exists): the ranks are stopped once 20 of ~150 are there.
  auto staged_files = [&]() -> std::size_t {
    for (const auto& e : TempDir::list(dir.path()))
      if (e.rfind(".ck.tmp-", 0) == 0) {
        std::error_code ec;
        std::size_t n = 0;
        for (fs::directory_iterator it(dir / e, ec), end; !ec && it != end; it.increment(ec)) ++n;
        return n;
      }
    return 0;
  };
  bool staged = false;
  for (int i = 0; i < 6000 && !(staged = staged_files() >= 20); ++i) ::usleep(10'000);
  // mpirun's children are the ranks.
  std::vector<pid_t> ranks;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::ifstream stat(e.path() / "stat");
    std::string pid, comm, state;
    long ppid = 0;
    if (stat >> pid >> comm >> state >> ppid && ppid == c.pid) ranks.push_back(std::stoi(pid));
  }
  for (pid_t r : ranks) ::kill(r, SIGTERM);
  const Result r = finish(c);
  ASSERT_TRUE(staged) << r.err;
  EXPECT_EQ(ranks.size(), 3u);
  EXPECT_NE(r.code(), 0) << r.how() << "\n" << r.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{}) << r.err;
}

// Ranks started with different options (mpirun's "A : B" form, or a wrapper that varies them per
// rank) would each write their share of a different checkpoint: every rank exits 2 before anything is
// written, rank 0 naming the first rank and option that differ (issue 19: published a mix, exit 0).
TEST_F(CliMpi, RanksGivenDifferentOptionsExitTwoWritingNothing) {
  TempDir dir;
  const std::string out = (dir / "m").string();
  struct Case {
    std::vector<std::string> other;  // rank 1's flags where rank 0 has the first command's
    std::string words;
  };
  const std::vector<std::string> base{"emit", "--preset", "llama-tiny", "--seed", "1", "--format", "safetensors",
                                      "--max-shard-size", "100KB", "-o", out};
  const std::vector<Case> cases = {
      {{"emit", "--preset", "llama-tiny", "--seed", "2", "--format", "safetensors", "--max-shard-size", "100KB", "-o", out},
       "rank 1 of 2: emit: rank 1 was given another seed than rank 0 ('2', rank 0: '1')"},
      {{"emit", "--preset", "gpt2-tiny", "--seed", "1", "--format", "safetensors", "--max-shard-size", "100KB", "-o", out},
       "rank 1 was given another model than rank 0"},
      {{"emit", "--preset", "llama-tiny", "--seed", "1", "--format", "hdf5", "-o", out}, "another format than rank 0"},
      {{"emit", "--preset", "llama-tiny", "--seed", "1", "--format", "safetensors", "--max-shard-size", "100KB", "-o",
        (dir / "elsewhere").string()},
       "another output than rank 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.words);
    std::vector<std::string> cmd = mpirun(1, base);
    cmd.insert(cmd.end(), {":", "-np", "1", kLayerinit});
    cmd.insert(cmd.end(), c.other.begin(), c.other.end());
    const Result r = run_command(cmd, kEnv);
    EXPECT_EQ(r.code(), 2) << r.how() << "\n" << r.err;
    const auto lines = r.our_lines();
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find(c.words), std::string::npos) << lines[0];
    EXPECT_EQ(dir.entries(), std::vector<std::string>{});
  }
}

// A one-file checkpoint goes to the rank holding its middle byte (rank 1 of 3, split_by_bytes), and
// the report's peak is the job's largest rank's, here that rank's: the one-process peak (issue 19:
// "peak 0 bytes (rank 0)").
TEST_F(CliMpi, TheReportsPeakIsTheLargestRanks) {
  TempDir dir;
  const std::vector<std::string> flags{"emit", "--preset", "llama-tiny", "--format", "safetensors"};
  auto with = [&](std::vector<std::string> extra) { auto v = flags; v.insert(v.end(), extra.begin(), extra.end()); return v; };
  const Result one = run(with({"--report", "json", "-o", (dir / "one").string()}));
  ASSERT_EQ(one.code(), 0) << one.err;
  const Result par = run_command(mpirun(3, with({"--report", "json", "-o", (dir / "par").string()})), kEnv);
  ASSERT_EQ(par.code(), 0) << par.err;
  const json a = json::parse(one.out), b = json::parse(par.out);
  EXPECT_GT(b["peak_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(b["peak_bytes"], a["peak_bytes"]);
  EXPECT_EQ(b["peak_rank"], 1);
  const Result text = run_command(mpirun(3, with({"-o", (dir / "text").string()})), kEnv);
  ASSERT_EQ(text.code(), 0) << text.err;
  EXPECT_NE(text.out.find("with 3 processes in "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" (rank 1, the largest)\n"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("peak 0 bytes"), std::string::npos) << text.out;
}

// Each rank on its node-local GPU, from mpirun's own local rank: 3 ranks on a simulated node of 2 GPUs
// take cuda:0, cuda:1 and cuda:0 (build is not an MPI command: each rank reports); an MPI emit on that
// node writes the bytes the CPU does.
TEST_F(CliMpi, EachRankTakesItsNodeLocalGpu) {
  auto env = kEnv;
  env.env["LAYERINIT_TEST_SIMULATED_CUDA_DEVICES"] = "2";
  const Result b = run_command(mpirun(3, {"build", "--preset", "llama-tiny", "--device", "cuda"}), env);
  ASSERT_EQ(b.code(), 0) << b.err;
  std::multiset<std::string> backends;
  for (std::size_t at = b.out.find("backend "); at != std::string::npos; at = b.out.find("backend ", at + 1))
    backends.insert(b.out.substr(at + 8, b.out.find('\n', at) - at - 8));
  EXPECT_EQ(backends, (std::multiset<std::string>{"cuda:0 simulated (host memory)", "cuda:0 simulated (host memory)",
                                                  "cuda:1 simulated (host memory)"}))
      << b.out;
  TempDir dir;
  const Result cpu = run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "--device", "cpu", "-o", (dir / "cpu").string()});
  ASSERT_EQ(cpu.code(), 0) << cpu.err;
  const Result gpus = run_command(mpirun(2, {"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", (dir / "gpus").string()}), env);
  ASSERT_EQ(gpus.code(), 0) << gpus.err;
  EXPECT_EQ(directory_bytes(dir / "gpus"), directory_bytes(dir / "cpu"));
}

TEST_F(CliMpi, BadInputIsOneLineExitTwo) {
  TempDir dir;
  {
    std::ofstream(dir / "taken") << "mine";
  }
  const std::string out = (dir / "out").string();
  struct Case {
    std::vector<std::string> args;
    std::string words;
  };
  const std::vector<Case> cases = {
      {{"emit", "--preset", "llama-tiny", "--bogus", "-o", out}, "--bogus"},
      {{"emit", "--preset", "llama-tiny", "--tp", "2", "-o", out}, "under mpirun"},
      {{"emit", "--preset", "llama-tiny", "-o", (dir / "taken").string()}, "rank 0 of 2: checkpoint: refusing to overwrite existing"},
  };
  for (const auto& c : cases) {
    const Result r = run_command(mpirun(2, c.args), kEnv);
    EXPECT_EQ(r.code(), 2) << r.err;
    const auto lines = r.our_lines();
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find(c.words), std::string::npos) << lines[0];
  }
  // mpirun's SIGTERM, sent once the first rank exited 2, reaching rank 0 as it leaves finds the outcome
  // decided: not "layerinit: interrupted" under the line, nor exit 130 (in CI, now and then).
  auto env = kEnv;
  env.env["LAYERINIT_TEST_TERM_RANK"] = "0";
  const Result r = run_command(mpirun(2, cases[1].args), env);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_EQ(r.our_lines().size(), 1u) << r.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"taken"});
  EXPECT_EQ(slurp(dir / "taken"), "mine");
}

// Built without MPI, a process that a launcher started as one of several refuses (rank 0 says why,
// the others are quiet) instead of N processes writing the same checkpoint. The launcher is played
// by its environment variables.
TEST(CliWithoutMpi, ALauncherWithSeveralProcessesIsRefused) {
#if LAYERINIT_CLI_MPI
  GTEST_SKIP() << "layerinit was built with MPI: CliMpi runs it under mpirun";
#endif
  if (::access(kLayerinit.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << kLayerinit << " (tools not built)";
  TempDir dir;
  for (const std::string rank : {"0", "1"}) {
    const Result r = run({"emit", "--preset", "llama-tiny", "-o", (dir / "out.h5").string()},
                         {.env = {{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_RANK", rank}}});
    EXPECT_EQ(r.code(), 2) << r.err;
    if (rank == "0") {
      EXPECT_EQ(r.err,
                "layerinit: error: started by an MPI launcher with 3 processes, but this layerinit was built without MPI "
                "(LAYERINIT_MPI=OFF, or CMake found none): run one process, or rebuild with MPI\n");
    } else {
      EXPECT_EQ(r.err, "");
    }
  }
  // One process of one is the ordinary emit.
  const Result r = run({"emit", "--preset", "llama-tiny", "-o", (dir / "out.h5").string()},
                       {.env = {{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}}});
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.h5"});
}
