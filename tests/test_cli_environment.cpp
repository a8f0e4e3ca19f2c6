// Failures of the environment, as a user meets them (tests/cli_runner.hpp runs the binary): exit 1,
// one line naming the cause, nothing left behind:
//   - a write past RLIMIT_FSIZE (SIGXFSZ ignored, or at a shell's default), a full or closed
//     standard output, too few file descriptors, a directory the user cannot write;
//   - memory: the preflight refuses before allocating (exit 2), a failed allocation is the
//     out-of-memory line, and peak resident memory of emit (ru_maxrss, measured from outside) stays
//     within baseline + the largest part + the writer's 64 MiB chunk staging + 32 MiB slack, for a
//     model 17x its largest part; verify of what it wrote within baseline + three of its chunks + 32 MiB.
// Skips (GTEST_SKIP) when the binary was not built (LAYERINIT_BUILD_TOOLS=OFF).
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;
using Cli = CliTest;

TEST_F(Cli, FullFileSystemFailsWithOneLineAndLeavesNothing) {
  // RLIMIT_FSIZE of 200 KiB in the child (SIGXFSZ ignored): writes fail with EFBIG. llama-tiny is
  // 489 KiB of weights, so the failure comes mid-write. HDF5 used to end in SIGSEGV at exit here
  // (its atexit handler closing the file whose close had failed): exit code 1 is asserted.
  TempDir dir;
  for (const char* format : {"hdf5", "safetensors"}) {
    SCOPED_TRACE(format);
    const fs::path target = dir / (std::string("m.") + format);
    SpawnOptions so;
    so.max_file_size = 200 << 10;
    const Result r = run({"emit", "--preset", "llama-tiny", "--format", format, "--backend", "cpu", "-o", target.string()}, so);
    EXPECT_TRUE(r.exited()) << r.how() << " (stderr: " << r.err << ")";
    EXPECT_EQ(r.code(), 1) << r.how();
    expect_one_error_line(r, "full filesystem");
    EXPECT_NE(r.err.find("cannot write " + target.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
    EXPECT_TRUE(dir.entries().empty()) << "left: " << dir.entries().front();
  }
}

TEST_F(Cli, WriteLimitWithTheShellsSigxfszFailsWithOneLine) {
  // ulimit -f as a shell sets it: SIGXFSZ left at its default (terminate). 200 KiB is less than
  // llama-tiny's 489 KiB, so the limit is reached mid-write.
  TempDir dir;
  for (const char* format : {"hdf5", "safetensors"}) {
    SCOPED_TRACE(format);
    const fs::path target = dir / (std::string("m.") + format);
    SpawnOptions so;
    so.max_file_size = 200 << 10;
    so.default_sigxfsz = true;
    const Result r = run({"emit", "--preset", "llama-tiny", "--format", format, "--backend", "cpu", "-o", target.string()}, so);
    EXPECT_EQ(r.code(), 1) << r.how() << " (stderr: " << r.err << ")";
    expect_one_error_line(r, "write limit");
    EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
    EXPECT_TRUE(dir.entries().empty()) << "left: " << dir.entries().front();
  }
}

TEST_F(Cli, FailedWritesToStdoutAreExitOneWithOneLine) {
  // A report lost to a full device or a closed stdout must not pass as success. A closed stdout is
  // found before any work (nothing written, and no file the command opens can take fd 1, where the
  // report would then land).
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  TempDir dir;
  const std::string target = (dir / "m.h5").string();
  const std::vector<std::vector<std::string>> commands = {
      {"build", "--preset", "llama-tiny", "--backend", "cpu", "--report", "json"},
      {"build", "--preset", "llama-tiny", "--backend", "cpu"},
      {"plan", "--preset", "llama-tiny"},
      {"plan", "--preset", "llama-tiny", "--json"},
      {"emit", "--preset", "llama-tiny", "--backend", "cpu", "--report", "json", "-o", target},
      {"--version"},
      {"build", "--help"},
  };
  // A pipe whose reader has gone (`| true`, `| head -c 0`): SIGPIPE killed the process (141, no line)
  // and left emit's temporary beside the target.
  enum class Stdout { full, closed, broken_pipe };
  for (const auto& args : commands) {
    for (const Stdout mode : {Stdout::full, Stdout::closed, Stdout::broken_pipe}) {
      SCOPED_TRACE(joined(args) + (mode == Stdout::closed ? " >&-" : mode == Stdout::full ? " >/dev/full" : " | true"));
      SpawnOptions so;
      if (mode == Stdout::closed) so.close_stdout = true;
      if (mode == Stdout::full) so.stdout_file = "/dev/full";
      if (mode == Stdout::broken_pipe) so.broken_stdout = true;
      const Result r = run(args, so);
      EXPECT_EQ(r.code(), 1) << r.how() << "\nstderr: " << r.err;
      expect_one_error_line(r, "stdout");
      const std::string reason = mode == Stdout::closed ? "Bad file descriptor"
                                 : mode == Stdout::full ? "No space left on device"
                                                        : "Broken pipe";
      EXPECT_NE(r.err.find("cannot write to standard output: " + reason), std::string::npos) << r.err;
      if (mode == Stdout::closed) EXPECT_TRUE(dir.entries().empty()) << "written with a closed stdout: " << dir.entries().front();
      if (mode == Stdout::broken_pipe) EXPECT_TRUE(dir.entries().empty()) << "left: " << dir.entries().front();
      fs::remove_all(target);
    }
  }
}

// `emit --force --report json -o fr.h5 >/dev/full` exited 1 with fr.h5 replaced. The report is part of
// what emit promises: written and its write checked before the rename, so a lost report publishes
// nothing and the old checkpoint stays.
TEST_F(Cli, AReportThatCannotBeWrittenPublishesNothing) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  TempDir dir;
  for (const char* format : {"hdf5", "safetensors"}) {
    for (const bool json_report : {true, false}) {
      for (const bool old : {true, false}) {
        SCOPED_TRACE(std::string(format) + (json_report ? ", --report json" : ", text report") +
                     (old ? ", over an old checkpoint" : ", new target"));
        const fs::path target = dir / "fr";
        std::string before;
        if (old) {
          ASSERT_EQ(run({"emit", "--preset", "gpt2-tiny", "--format", format, "-o", target.string()}).code(), 0);
          before = slurp(std::string(format) == "hdf5" ? target : target / "model.safetensors");
        }
        std::vector<std::string> args{"emit", "--preset", "llama-tiny", "--backend", "cpu", "--format", format,
                                      "--force", "-o", target.string()};
        if (json_report) args.insert(args.end(), {"--report", "json"});
        for (const bool broken_pipe : {false, true}) {
          SCOPED_TRACE(broken_pipe ? "| true" : ">/dev/full");
          SpawnOptions so;
          if (broken_pipe) so.broken_stdout = true;
          else so.stdout_file = "/dev/full";
          const Result r = run(args, so);
          EXPECT_EQ(r.code(), 1) << r.how() << "\nstderr: " << r.err;
          expect_one_error_line(r, "stdout");
          EXPECT_NE(r.err.find(std::string("cannot write to standard output: ") +
                               (broken_pipe ? "Broken pipe" : "No space left on device")),
                    std::string::npos) << r.err;
          if (old) {
            EXPECT_EQ(slurp(std::string(format) == "hdf5" ? target : target / "model.safetensors"), before);
            EXPECT_EQ(dir.entries(), std::vector<std::string>{"fr"});  // no temporary either
          } else {
            EXPECT_EQ(dir.entries(), std::vector<std::string>{});
          }
        }
        fs::remove_all(target);
      }
    }
  }
}

// Killed just before or just after publishing (LAYERINIT_TEST_KILL_AT): killed before, the next emit
// removes what was staged (a safetensors directory had lost its marker and stayed for good); killed
// after, the checkpoint reads whole and emit --force replaces it (a directory holding the marker was
// refused as not layerinit's).
TEST_F(Cli, KilledWhilePublishingLeavesWhatALaterEmitCleansUp) {
  for (const std::string format : {"safetensors", "hdf5"}) {
    for (const std::string point : {"before-rename", "after-rename"}) {
      SCOPED_TRACE(format + ", killed " + point);
      TempDir dir;
      const std::string out = (dir / "out").string();
      std::vector<std::string> args{"emit", "--preset", "llama-tiny", "--backend", "cpu", "--format", format, "-o", out};
      if (format == "safetensors") args.insert(args.end(), {"--max-shard-size", "60KB"});
      SpawnOptions so;
      so.env["LAYERINIT_TEST_KILL_AT"] = point + ":out";
      const Result killed = run(args, so);
      EXPECT_EQ(killed.how(), "signal 9") << killed.err;
      if (point == "after-rename") EXPECT_EQ(run({"verify", out}).code(), 0);
      args.push_back("--force");
      const Result again = run(args);
      ASSERT_EQ(again.code(), 0) << again.err;
      dir.expect_only_the_checkpoint(/*hdf5 rank directory=*/false);
      EXPECT_EQ(run({"verify", out}).code(), 0);
    }
  }
}

TEST_F(Cli, EnvironmentFailureAtOpenIsExitOne) {
  // Each shard is open from the start: 34 shards of llama-tiny under 16 descriptors fail to open,
  // an environment failure (exit 1), not bad input.
  TempDir dir;
  const fs::path target = dir / "st";
  SpawnOptions so;
  so.max_open_files = 16;
  const Result r = run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "--max-shard-size", "1KB", "-o",
                        target.string()}, so);
  EXPECT_EQ(r.code(), 1) << r.how() << "\nstderr: " << r.err;
  expect_one_error_line(r, "too many open files");
  EXPECT_NE(r.err.find("cannot create " + target.string() + "/model-"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Too many open files"), std::string::npos) << r.err;
  EXPECT_TRUE(dir.entries().empty());
}

TEST_F(Cli, UnwritableDirectoryIsAnEnvironmentFailure) {
  // Permission denied is the environment's (exit 1), like a full disk; a missing directory is a
  // wrong path (exit 2, in BadInputIsOneLineExitTwoAndNothingWritten). Root writes anywhere, so as
  // root the child runs as nobody, from a copy of the binary nobody can reach wherever the build
  // tree lies (a clone in a private directory ran nothing: exit 127).
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  const fs::path locked = dir / "locked";
  fs::create_directory(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                              fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  SpawnOptions so;
  std::string program = kLayerinit;
  if (::geteuid() == 0) {
    so.uid = 65534;
    program = copy_layerinit(dir / "bin");
    const Result version = run_command({program, "--version"}, so);
    if (version.code() != 0)
      GTEST_SKIP() << "nobody cannot run a copy of layerinit in " << dir.path() << " (" << version.how()
                   << "): a directory above it is private (TMPDIR)";
  }
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"emit", "--preset", "llama-tiny", "-o", (locked / "m.h5").string()},
           {"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", (locked / "m").string()},
           // --rank makes its directory (issue 19: exit 2 here)
           {"emit", "--preset", "llama-tiny", "--tp", "2", "--rank", "0", "--format", "safetensors", "-o",
            (locked / "ranks").string()},
           {"build", "--preset", "llama-tiny", "--trace", (locked / "t.csv").string()}}) {
    SCOPED_TRACE(joined(args));
    std::vector<std::string> command{program};
    command.insert(command.end(), args.begin(), args.end());
    const Result r = run_command(command, so);
    EXPECT_EQ(r.code(), 1) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "permission denied");
    EXPECT_NE(r.err.find(locked.string()), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "built before failing";
    EXPECT_TRUE(TempDir::list(locked).empty());
  }
}

TEST_F(Cli, NotEnoughMemoryIsRefusedBeforeAllocating) {
  if (layerinit::testing::kAddressSanitizer)
    GTEST_SKIP() << "ASan reserves terabytes of address space for its shadow: an RLIMIT_AS limit stops it before main";
  // LAYERINIT_TEST_AVAILABLE_MEMORY stands for a small cgroup (memory.max - memory.current). A
  // 512 MiB RLIMIT_AS makes a missing check fail instead of taking the machine's memory.
  TempDir dir;
  const std::string target = (dir / "g.h5").string();
  auto limited = [](const char* available) {
    SpawnOptions so;
    so.env = {{"LAYERINIT_TEST_AVAILABLE_MEMORY", available}};
    so.max_address_space = 512ull << 20;
    so.alarm_s = 60;
    return so;
  };
  const std::string hook = " available (LAYERINIT_TEST_AVAILABLE_MEMORY, a test hook); --no-memory-check to go ahead anyway";
  struct Case {
    std::vector<std::string> args;
    const char* available;
    std::vector<std::string> words;
  };
  // gpt2-large: 774,030,080 parameters, 1,548,060,160 bytes in bf16; 436 tensors (36 layers of 12,
  // and 4), 2 KiB of records each (in either checkpoint format) and 128 bytes per layer slice in
  // restack's report; a layer is 19,677,440 parameters; its largest part is wte, 50257 x 1280.
  const std::vector<Case> cases = {
      {{"build", "--preset", "gpt2-large", "--dtype", "bf16", "--backend", "cpu"}, "512MiB",
       {"not enough memory: needs 1.44 GiB (1548953088 bytes) at its peak (weights 1.44 GiB (1548060160 bytes) + tensor "
        "records 872.00 KiB (892928 bytes)), 512.00 MiB (536870912 bytes)" + hook}},
      {{"build", "--preset", "gpt2-large", "--dtype", "bf16", "--backend", "cpu", "--layout", "restack"}, "1GiB",
       {"needs 1.48 GiB (1588363264 bytes) at its peak (weights plus the largest layer 1.48 GiB (1587415040 bytes) + "
        "tensor records 926.00 KiB (948224 bytes)), 1.00 GiB (1073741824 bytes)" + hook}},
      {{"emit", "--preset", "gpt2-large", "--dtype", "bf16", "--backend", "cpu", "-o", target}, "64MiB",
       {"needs 123.55 MiB (129550848 bytes) at its peak (the largest part 122.70 MiB (128657920 bytes) + tensor records "
        "872.00 KiB (892928 bytes)), 64.00 MiB (67108864 bytes)" + hook}},
      {{"build", "--preset", "llama-tiny", "--backend", "cpu"}, "100KiB", {"(weights 489.12 KiB (500864 bytes)"}},
      // Refused before the trace file is created.
      {{"build", "--preset", "llama-tiny", "--backend", "cpu", "--trace", (dir / "t.csv").string()}, "100KiB",
       {"not enough memory"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(joined(c.args) + " with " + c.available);
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = run(c.args, limited(c.available));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, "memory");
    for (const auto& w : c.words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
    EXPECT_LT(secs, 5.0);
    EXPECT_LT(r.maxrss_kb, 128 * 1024) << "allocated before refusing";
    EXPECT_TRUE(r.out.empty());
    EXPECT_TRUE(dir.entries().empty()) << "written: " << dir.entries().front();
  }
  // --no-memory-check goes ahead; enough memory needs no flag.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"build", "--preset", "llama-tiny", "--backend", "cpu", "--no-memory-check"},
           {"emit", "--preset", "llama-tiny", "--backend", "cpu", "--no-memory-check", "-o", target}}) {
    SCOPED_TRACE(joined(args));
    const Result r = run(args, limited("100KiB"));
    EXPECT_EQ(r.code(), 0) << r.how() << "\nstderr: " << r.err;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"g.h5"});
  const Result enough = run({"build", "--preset", "llama-tiny", "--backend", "cpu"}, limited("600KiB"));
  EXPECT_EQ(enough.code(), 0) << enough.how() << "\nstderr: " << enough.err;
  const Result bad = run({"build", "--preset", "llama-tiny"}, limited("lots"));
  EXPECT_EQ(bad.code(), 2) << bad.how();
  expect_one_error_line(bad, "bad hook");
  EXPECT_NE(bad.err.find("LAYERINIT_TEST_AVAILABLE_MEMORY 'lots' is not a byte size"), std::string::npos) << bad.err;
}

TEST_F(Cli, BadAllocIsTheOutOfMemoryLine) {
  if (layerinit::testing::kAddressSanitizer)
    GTEST_SKIP() << "ASan reserves terabytes of address space for its shadow: an RLIMIT_AS limit stops it before main";
  // Past the check, an allocation outside the tracked tensors fails: the per-layer list of 4e9
  // layers under a 1 GiB RLIMIT_AS. One typed line, exit 1, not a raw "std::bad_alloc".
  TempDir dir;
  const std::string huge = (dir / "huge.json").string();
  write_file(huge, kHugeSpec);
  SpawnOptions so;
  so.max_address_space = 1ull << 30;
  so.alarm_s = 30;
  const Result r = run({"build", "--spec", huge, "--backend", "cpu", "--no-memory-check"}, so);
  EXPECT_EQ(r.code(), 1) << r.how() << "\nstderr: " << r.err;
  expect_one_error_line(r, "bad_alloc");
  EXPECT_EQ(r.err, "layerinit: error: out of memory on host: an allocation outside the tracked tensors failed (std::bad_alloc)\n");
}

TEST_F(Cli, EmitPeakResidentMemoryStaysWithinItsBound) {
  if (layerinit::testing::kAddressSanitizer)
    GTEST_SKIP() << "AddressSanitizer build: its shadow memory and quarantine count in RSS (the plain build checks the bound)";
  TempDir dir;
  const std::string spec = (dir / "big.json").string();
  write_file(spec, kBigSpec);
  // The plan: total weights and the largest part (what emit holds at once).
  const Result p = run({"plan", "--spec", spec, "--json"});
  ASSERT_EQ(p.code(), 0) << p.err;
  const json plan = json::parse(p.out);
  const std::uint64_t weights = plan["totals"]["weights"], part = plan["peaks"]["streamed"];
  EXPECT_EQ(part, 16u * 1024 * 1024 + 2048);
  ASSERT_GE(weights, 8 * part) << "the model must be several times its largest part";
  // Baseline: the same binary, started and doing a tiny plan (code, libraries, allocator).
  const Result base = run({"plan", "--preset", "llama-tiny"});
  ASSERT_EQ(base.code(), 0);
  const std::uint64_t staging = 64ull << 20, slack = 32ull << 20;
  const std::uint64_t bound = static_cast<std::uint64_t>(base.maxrss_kb) * 1024 + part + staging + slack;
  for (const char* format : {"hdf5", "safetensors"}) {
    SCOPED_TRACE(format);
    const fs::path target = dir / (std::string("m.") + format);
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = run({"emit", "--spec", spec, "--format", format, "--backend", "cpu", "--threads", "2", "--report",
                          "json", "-o", target.string()});
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.code(), 0) << r.how() << " " << r.err;
    const json rep = json::parse(r.out);
    EXPECT_EQ(rep["peak_bytes"].get<std::uint64_t>(), part) << "tracked peak";
    EXPECT_EQ(rep["total_bytes"].get<std::uint64_t>(), weights);
    const std::uint64_t rss = static_cast<std::uint64_t>(r.maxrss_kb) * 1024;
    std::printf("emit %-11s weights %.1f MiB (file %.1f MiB), largest part %.2f MiB, %.2f s: max RSS %.1f MiB <= bound "
                "%.1f MiB (baseline %.1f + part %.2f + staging 64 + slack 32)\n",
                format, weights / 1048576.0, rep["file_bytes"].get<double>() / 1048576.0, part / 1048576.0, secs,
                rss / 1048576.0, bound / 1048576.0, base.maxrss_kb / 1024.0, part / 1048576.0);
    EXPECT_LE(rss, bound) << "max RSS " << rss << " bytes";
    // A build of the whole model would hold every weight: the bound is below that.
    EXPECT_LT(bound, weights);
    // verify holds three chunks (stored, next stored, expected), each at most 64 MiB and at most the
    // tensor: here at most the largest part each.
    const Result v = run({"verify", target.string(), "--threads", "2"});
    ASSERT_EQ(v.code(), 0) << v.how() << " " << v.err;
    const std::uint64_t verify_rss = static_cast<std::uint64_t>(v.maxrss_kb) * 1024;
    const std::uint64_t verify_bound = static_cast<std::uint64_t>(base.maxrss_kb) * 1024 + 3 * part + slack;
    std::printf("verify %-11s max RSS %.1f MiB <= bound %.1f MiB (baseline + 3 x part + slack 32)\n", format,
                verify_rss / 1048576.0, verify_bound / 1048576.0);
    EXPECT_LE(verify_rss, verify_bound) << "max RSS " << verify_rss << " bytes";
    EXPECT_LT(verify_bound, weights);
    fs::remove_all(target);
  }
}

// Device selection on a simulated node of 4 GPUs (LAYERINIT_TEST_SIMULATED_CUDA_DEVICES): --device
// (or --backend) cuda:N is that device; auto and cuda follow the launcher's node-local rank, modulo
// the node's GPUs; an index past the node is one line, exit 2, before anything is written.
TEST_F(Cli, DeviceIndexAndLocalRankPickTheGpu) {
  auto backend_of = [](const std::vector<std::string>& extra, std::map<std::string, std::string> env) {
    env["LAYERINIT_TEST_SIMULATED_CUDA_DEVICES"] = "4";
    std::vector<std::string> args{"build", "--preset", "llama-tiny", "--report", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = run(args, {.env = env});
    EXPECT_EQ(r.code(), 0) << r.err;
    return r.code() == 0 ? json::parse(r.out)["backend"].get<std::string>() : r.err;
  };
  EXPECT_EQ(backend_of({"--device", "cuda:3"}, {}), "cuda:3 simulated (host memory)");
  EXPECT_EQ(backend_of({"--backend", "cuda:1"}, {}), "cuda:1 simulated (host memory)");
  EXPECT_EQ(backend_of({"--device", "cuda"}, {}), "cuda:0 simulated (host memory)");
  EXPECT_EQ(backend_of({}, {{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}}), "cuda:2 simulated (host memory)");
  EXPECT_EQ(backend_of({"--device", "cuda"}, {{"SLURM_LOCALID", "5"}}), "cuda:1 simulated (host memory)");
  EXPECT_EQ(backend_of({}, {{"MPI_LOCALRANKID", "3"}}), "cuda:3 simulated (host memory)");
  EXPECT_EQ(backend_of({}, {{"LOCAL_RANK", "7"}}), "cuda:3 simulated (host memory)");
  // A named device is the one used, whatever the local rank; cpu stays the host.
  EXPECT_EQ(backend_of({"--device", "cuda:1"}, {{"LOCAL_RANK", "2"}}), "cuda:1 simulated (host memory)");
  EXPECT_EQ(backend_of({"--device", "cpu"}, {{"LOCAL_RANK", "2"}}).rfind("cpu (", 0), 0u);

  TempDir dir;
  const std::string out = (dir / "ckpt").string();
  for (const char* device : {"cuda:4", "cuda:x"}) {
    const Result r = run({"emit", "--preset", "llama-tiny", "--device", device, "-o", out},
                         {.env = {{"LAYERINIT_TEST_SIMULATED_CUDA_DEVICES", "4"}}});
    EXPECT_EQ(r.code(), 2) << device;
    ASSERT_EQ(r.our_lines().size(), 1u) << r.err;
    EXPECT_NE(r.err.find(std::string("backend '") + device + "' "), std::string::npos) << r.err;
  }
  EXPECT_TRUE(dir.entries().empty());
}
