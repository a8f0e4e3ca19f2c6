// The command line in a batch job (tests/cli_runner.hpp runs the binary; stderr is a pipe, as under
// SLURM):
//   - progress is plain lines off a terminal (no carriage return, no escape), one per 10% reached,
//     under --progress always at once and under auto every few seconds; --progress never and --quiet
//     print nothing but errors, and bad values are one line naming the option and its values;
//   - --report json and --json are one option on every subcommand that reports;
//   - an unknown command, and a Hugging Face Hub id given as --hf-config, are answered with what to do;
//   - --threads 0 (the default) is the CPUs the process may use: one under `taskset -c N`.
// Lines are compared by their shape and numbers of bytes, never by times.
#include <sched.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;
using Cli = CliTest;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::size_t p = 0;
  while (p < text.size()) {
    const std::size_t e = text.find('\n', p);
    v.push_back(text.substr(p, e == std::string::npos ? std::string::npos : e - p));
    p = e == std::string::npos ? text.size() : e + 1;
  }
  return v;
}

// kBigSpec's bytes in bf16: the embedding, 16 layers of a norm and two 4096 x 1024 weights, the final norm.
constexpr unsigned long long kBigBytes = 8192ull * 1024 * 2 + 16 * (1024 * 2 + 2 * 4096ull * 1024 * 2) + 1024 * 2;

// Every line is "layerinit: COMMAND P% D of T MB[, R UNIT/s, N s left]" with T the model's bytes, the
// percentages rising to a last 100%, each line at least a tenth further (kBigSpec's parts are each
// under 7% of it: one line per tenth, 10 in all). Returns why not, or "".
std::string check_progress_lines(const std::string& err, const std::string& command) {
  if (err.find('\r') != std::string::npos || err.find('\x1b') != std::string::npos) return "a carriage return or escape";
  char total[32];
  std::snprintf(total, sizeof total, "%.1f", static_cast<double>(kBigBytes) / 1e6);
  const std::regex line("layerinit: " + command + " ([0-9]+)% ([0-9]+\\.[0-9]) of " + std::string(total) +
                        " MB(, [0-9]+\\.[0-9] (B|kB|MB|GB)/s, [0-9]+ (s|min|h) left)?");
  const std::vector<std::string> lines = lines_of(err);
  if (lines.size() != 10) return std::to_string(lines.size()) + " lines, not 10";
  int last = -1, tenth = 0;
  for (const auto& l : lines) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) return "not a progress line: '" + l + "'";
    const int pct = std::stoi(m[1]);
    if (pct <= last || pct / 10 <= tenth - 1 || pct < 10) return "percentages do not rise by tenths at '" + l + "'";
    last = pct;
    tenth = pct / 10 + 1;
  }
  if (last != 100) return "the last line is not 100%";
  if (lines.back().find(std::string(total) + " of " + total) == std::string::npos) return "the last line is not all bytes";
  return "";
}

}  // namespace

TEST_F(Cli, ProgressOffATerminalIsPlainLines) {
  TempDir dir;
  write_file(dir / "big.json", kBigSpec);
  const std::string spec = (dir / "big.json").string(), target = (dir / "big.h5").string();
  const Result emit = run({"emit", "--spec", spec, "--backend", "cpu", "--progress", "always", "-o", target});
  ASSERT_EQ(emit.code(), 0) << emit.err;
  EXPECT_EQ(check_progress_lines(emit.err, "emit"), "") << emit.err;
  const Result verify = run({"verify", target, "--progress", "always"});
  ASSERT_EQ(verify.code(), 0) << verify.err;
  EXPECT_EQ(check_progress_lines(verify.err, "verify"), "") << verify.err;
  // auto: lines off a terminal too, at most one per interval (0 here, so the test needs no long run).
  SpawnOptions now;
  now.env["LAYERINIT_TEST_PROGRESS_INTERVAL"] = "0";
  const Result automatic = run({"emit", "--spec", spec, "--backend", "cpu", "--force", "-o", target}, now);
  ASSERT_EQ(automatic.code(), 0) << automatic.err;
  EXPECT_EQ(check_progress_lines(automatic.err, "emit"), "") << automatic.err;
  // never and --quiet: nothing on stderr; the report on stdout as ever.
  for (const char* flag : {"--progress=never", "--quiet", "-q"}) {
    SCOPED_TRACE(flag);
    const Result e = run({"emit", "--spec", spec, "--backend", "cpu", "--force", flag, "-o", target}, now);
    EXPECT_EQ(e.code(), 0) << e.err;
    EXPECT_EQ(e.err, "");
    EXPECT_NE(e.out.find("wrote"), std::string::npos) << e.out;
    const Result v = run({"verify", target, flag}, now);
    EXPECT_EQ(v.code(), 0) << v.err;
    EXPECT_EQ(v.err, "");
  }
}

TEST_F(Cli, QuietKeepsErrorsAndDropsWarnings) {
  TempDir dir;
  const std::string target = (dir / "m.h5").string();
  const std::string nomatch = "nomatch*=normal(0,0.01)";
  const std::string warning = "layerinit: warning: --init-override pattern 'nomatch*' matches no tensor of llama-tiny\n";
  const std::vector<std::vector<std::string>> commands = {
      {"build", "--preset", "llama-tiny", "--backend", "cpu", "--init-override", nomatch},
      {"plan", "--preset", "llama-tiny", "--init-override", nomatch},
      {"emit", "--preset", "llama-tiny", "--backend", "cpu", "--force", "--init-override", nomatch, "-o", target},
  };
  for (const auto& c : commands) {
    SCOPED_TRACE(joined(c));
    const Result loud = run(c);
    EXPECT_EQ(loud.code(), 0) << loud.err;
    EXPECT_EQ(loud.err, warning);
    std::vector<std::string> quiet = c;
    quiet.push_back("--quiet");
    const Result q = run(quiet);
    EXPECT_EQ(q.code(), 0) << q.err;
    EXPECT_EQ(q.err, "");
    EXPECT_FALSE(q.out.empty());  // the report is printed as ever
    // An error stays one line with its exit code.
    quiet.push_back("--strict");
    const Result strict = run(quiet);
    EXPECT_EQ(strict.code(), 2) << strict.err;
    expect_one_error_line(strict, "--quiet --strict");
    EXPECT_NE(strict.err.find("matches no tensor"), std::string::npos) << strict.err;
  }
  const Result verify = run({"verify", target, "--quiet", "--init-override", nomatch});
  EXPECT_EQ(verify.code(), 0) << verify.err;  // a pattern matching nothing changes no value
  EXPECT_EQ(verify.err, "");
}

TEST_F(Cli, BadProgressValuesAreOneLineNamingTheValues) {
  TempDir dir;
  const std::string target = (dir / "m.h5").string();
  const std::vector<std::vector<std::string>> commands = {
      {"emit", "--preset", "llama-tiny", "--progress", "sometimes", "-o", target},
      {"verify", target, "--progress", "sometimes"},
  };
  for (const auto& c : commands) {
    SCOPED_TRACE(joined(c));
    const Result r = run(c);
    EXPECT_EQ(r.code(), 2);
    expect_one_error_line(r, "bad --progress");
    EXPECT_EQ(r.err, "layerinit: error: --progress must be auto, always or never, got 'sometimes'\n");
  }
  for (const char* when : {"auto", "always"}) {
    const Result r = run({"emit", "--preset", "llama-tiny", "--quiet", "--progress", when, "-o", target});
    EXPECT_EQ(r.code(), 2);
    EXPECT_EQ(r.err, std::string("layerinit: error: --quiet and --progress ") + when + " contradict each other: give one\n");
  }
  EXPECT_FALSE(fs::exists(target));
}

TEST_F(Cli, ReportJsonAndJsonAreOneOptionEverywhere) {
  TempDir dir;
  const std::string target = (dir / "m.h5").string();
  ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--backend", "cpu", "-o", target}).code(), 0);
  // Times differ between runs; everything else is the same report.
  auto without_times = [](json j) {
    for (const char* k : {"wall_seconds", "hash_seconds", "seconds"}) j.erase(k);
    return j;
  };
  const std::vector<std::vector<std::string>> commands = {
      {"build", "--preset", "llama-tiny", "--backend", "cpu"},
      {"plan", "--preset", "llama-tiny"},
      {"emit", "--preset", "llama-tiny", "--backend", "cpu", "--force", "-o", target},
      {"verify", target},
  };
  for (const auto& c : commands) {
    SCOPED_TRACE(joined(c));
    std::vector<std::string> report = c, alias = c, bad = c;
    report.insert(report.end(), {"--report", "json"});
    alias.push_back("--json");
    bad.insert(bad.end(), {"--report", "xml"});
    const Result a = run(report), b = run(alias);
    ASSERT_EQ(a.code(), 0) << a.err;
    ASSERT_EQ(b.code(), 0) << b.err;
    EXPECT_EQ(without_times(json::parse(a.out)), without_times(json::parse(b.out)));
    const Result r = run(bad);
    EXPECT_EQ(r.code(), 2);
    EXPECT_EQ(r.err, "layerinit: error: --report: unknown report format 'xml' (valid: json)\n");
    const Result help = run({c[0], "--help"});
    EXPECT_NE(help.out.find("--report"), std::string::npos) << help.out;
    EXPECT_NE(help.out.find("--json"), std::string::npos) << help.out;
  }
}

TEST_F(Cli, UnknownCommandIsNamedWithTheCommands) {
  for (const char* word : {"foo", "emitt", "Build"}) {
    const Result r = run({word, "--preset", "llama-tiny"});
    EXPECT_EQ(r.code(), 2);
    EXPECT_EQ(r.err, std::string("layerinit: error: unknown command '") + word +
                         "' (commands: build, plan, emit, verify; see --help)\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(Cli, HubIdAsHfConfigSaysHowToDownloadIt) {
  TempDir dir;
  const Result r = run({"plan", "--hf-config", "Qwen/Qwen3-8B"}, SpawnOptions{.cwd = dir.path().string()});
  EXPECT_EQ(r.code(), 2);
  EXPECT_EQ(r.err,
            "layerinit: error: --hf-config Qwen/Qwen3-8B: no such file; it looks like a Hugging Face Hub id: download its "
            "config.json first (hf download Qwen/Qwen3-8B config.json --local-dir DIR, or huggingface-cli download "
            "Qwen/Qwen3-8B config.json --local-dir DIR) and pass DIR/config.json\n");
  // Only when nothing is there: a directory of that name holding a config.json is read.
  fs::create_directories(dir / "Qwen" / "Qwen3-8B");
  fs::copy_file(fs::path(LAYERINIT_SOURCE_DIR) / "tests" / "hf_configs" / "tiny" / "llama.json",
                dir / "Qwen" / "Qwen3-8B" / "config.json");
  const Result ok = run({"plan", "--hf-config", "Qwen/Qwen3-8B"}, SpawnOptions{.cwd = dir.path().string()});
  EXPECT_EQ(ok.code(), 0) << ok.err;
  // A path that is no Hub id keeps the file's own message.
  const Result missing = run({"plan", "--hf-config", "configs/qwen.json"}, SpawnOptions{.cwd = dir.path().string()});
  EXPECT_EQ(missing.code(), 2);
  EXPECT_NE(missing.err.find("cannot be read: No such file or directory"), std::string::npos) << missing.err;
}

TEST_F(Cli, ThreadsZeroIsTheCpusOfTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &set)) ++cpu;
  ASSERT_LT(cpu, CPU_SETSIZE);
  SpawnOptions taskset;
  taskset.only_cpu = cpu;
  for (const std::vector<std::string>& threads : {std::vector<std::string>{}, std::vector<std::string>{"--threads", "0"}}) {
    std::vector<std::string> args = {"build", "--preset", "llama-tiny", "--backend", "cpu", "--report", "json"};
    args.insert(args.end(), threads.begin(), threads.end());
    const Result r = run(args, taskset);
    ASSERT_EQ(r.code(), 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["backend"], "cpu (1 threads)");
  }
}
