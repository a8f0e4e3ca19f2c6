// The layerinit binary's command line, typed as a user types it (tests/cli_runner.hpp runs it):
//   - bad input ends with exactly one line "layerinit: error: ..." naming the problem, exit code 2,
//     and nothing written, at once and in little memory even for specs of billions of layers;
//   - integer options are decimal only; user text in messages is escaped; overrides that match no
//     tensor warn (an error with --strict); fills that underflow the dtype are refused;
//   - --help lists every flag; --version.
// Skips (GTEST_SKIP) when the binary was not built (LAYERINIT_BUILD_TOOLS=OFF).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <layerinit/config.hpp>
#include "cli_runner.hpp"
#include "safetensors_reader.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;
using Cli = CliTest;

namespace {

// The JSON report of a build of llama-tiny on the CPU with extra flags; exit code checked.
json build_report(const std::vector<std::string>& extra) {
  std::vector<std::string> args{"build", "--preset", "llama-tiny", "--backend", "cpu", "--report", "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const Result r = run(args);
  EXPECT_EQ(r.code(), 0) << joined(args) << ": " << r.err;
  return r.code() == 0 ? json::parse(r.out) : json();
}

// Bytes a terminal could act on: C0 controls (but the final newline), DEL, and C1 controls, raw
// (0x80-0x9f outside a UTF-8 sequence) or UTF-8 encoded (U+0080-U+009F: c2 80 - c2 9f).
std::string terminal_controls(const std::string& s) {
  std::string found;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const bool last_newline = c == '\n' && i + 1 == s.size();
    const bool c1_utf8 = c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                         static_cast<unsigned char>(s[i + 1]) <= 0x9f;
    const bool c1_raw = c >= 0x80 && c <= 0x9f && !(i > 0 && static_cast<unsigned char>(s[i - 1]) >= 0xc0);
    if ((c < 0x20 && !last_newline) || c == 0x7f || c1_utf8 || c1_raw) found += "byte " + std::to_string(i) + " ";
  }
  return found;
}

}  // namespace

TEST_F(Cli, BadInputIsOneLineExitTwoAndNothingWritten) {
  TempDir dir;
  const std::string target = (dir / "out.h5").string();
  const std::string sttarget = (dir / "out").string();
  auto spec = [&](const std::string& name, const std::string& text) {
    write_file(dir / name, text);
    return (dir / name).string();
  };
  struct Case {
    std::string what;
    std::vector<std::string> args;
    std::vector<std::string> words;  // each must appear in the line
  };
  const std::vector<Case> cases = {
      {"unknown preset", {"emit", "--preset", "llama-huge", "-o", target},
       {"preset 'llama-huge' is unknown", "llama-tiny", "gpt2-medium", "mixtral-8x7b"}},
      {"unknown dtype", {"emit", "--preset", "llama-tiny", "--dtype", "fp8", "-o", target},
       {"--dtype: dtype 'fp8' is unknown", "fp32", "fp16", "bf16"}},
      {"unknown dtype in an override", {"emit", "--preset", "llama-tiny", "--dtype-override", "*norm*=fp9", "-o", target},
       {"--dtype-override '*norm*=fp9': dtype 'fp9' is unknown", "bf16"}},
      {"unknown recipe", {"emit", "--preset", "llama-tiny", "--recipe", "lecun", "-o", target},
       {"--recipe: recipe 'lecun' is unknown", "hf", "torchtitan", "megatron"}},
      {"unknown layout", {"emit", "--preset", "llama-tiny", "--layout", "diagonal", "-o", target},
       {"--layout: layout 'diagonal' is unknown", "per-layer", "stacked"}},
      {"restack is a build layout", {"emit", "--preset", "llama-tiny", "--layout", "restack", "-o", target},
       {"--layout: layout 'restack' is unknown", "per-layer, stacked)"}},
      {"unknown layout (build)", {"build", "--preset", "llama-tiny", "--layout", "diagonal"},
       {"--layout: layout 'diagonal' is unknown", "build also takes restack"}},
      {"unknown format", {"emit", "--preset", "llama-tiny", "--format", "npz", "-o", target},
       {"checkpoint format 'npz' is unknown", "hdf5", "safetensors"}},
      {"unknown orientation", {"emit", "--preset", "llama-tiny", "--orientation", "sideways", "-o", target},
       {"--orientation: orientation 'sideways' is unknown", "out-in", "in-out"}},
      {"unknown backend", {"emit", "--preset", "llama-tiny", "--backend", "tpu", "-o", target},
       {"backend 'tpu' is unknown", "cpu", "cuda"}},
      {"unknown training precision", {"plan", "--preset", "llama-tiny", "--precision", "amp"},
       {"training precision 'amp' is unknown", "mixed", "pure-bf16"}},
      {"unknown report", {"emit", "--preset", "llama-tiny", "--report", "xml", "-o", target},
       {"unknown report format 'xml'", "json"}},
      {"malformed JSON", {"emit", "--spec", spec("bad.json", "{\"name\": \"x\",\n  \"pre\": [}\n"), "-o", target},
       {"spec: malformed JSON at line 2"}},
      {"schema: unknown key", {"emit", "--spec", spec("key.json", R"({"name":"t","pre":[{"name":"e.weight","shape":[10,4],"rol":"embedding"}]})"), "-o", target},
       {"pre[0].rol", "unknown key", "role"}},
      {"schema: missing key", {"emit", "--spec", spec("missing.json", R"({"name":"t","layer":{"count":2,"tensors":[{"name":"w","role":"norm_weight"}]}})"), "-o", target},
       {"layer.tensors[0]", "shape"}},
      {"schema: wrong type", {"emit", "--spec", spec("type.json", R"({"name":"t","hyper":{"bias":"yes"},"pre":[{"name":"e.weight","shape":[4],"role":"norm_weight"}]})"), "-o", target},
       {"hyper.bias"}},
      {"negative dimension", {"emit", "--spec", spec("neg.json", R"({"name":"t","pre":[{"name":"e.weight","shape":[-10,4],"role":"embedding"}]})"), "-o", target},
       {"pre[0].shape[0]", "non-negative integer"}},
      {"non-integer dimension", {"emit", "--spec", spec("frac.json", R"({"name":"t","layer":{"count":1,"tensors":[{"name":"w","shape":[4,2.5],"role":"norm_weight"}]}})"), "-o", target},
       {"layer.tensors[0].shape[1]", "non-negative integer"}},
      {"string dimension", {"emit", "--spec", spec("str.json", R"({"name":"t","pre":[{"name":"e.weight","shape":["4"],"role":"embedding"}]})"), "-o", target},
       {"pre[0].shape[0]", "non-negative integer"}},
      {"negative layer count", {"emit", "--spec", spec("count.json", R"({"name":"t","layer":{"count":-1,"tensors":[{"name":"w","shape":[2],"role":"norm_weight"}]}})"), "-o", target},
       {"layer.count", "non-negative integer"}},
      {"heads do not divide the hidden size", {"emit", "--spec", spec("heads.json", R"({"name":"t","hyper":{"hidden_size":64,"num_heads":5},"pre":[{"name":"e.weight","shape":[10,64],"role":"embedding"}]})"), "-o", target},
       {"hyper.num_heads", "5 does not divide hidden_size 64"}},
      {"element count overflows", {"emit", "--spec", spec("ovf1.json", R"({"name":"t","pre":[{"name":"e.weight","shape":[4294967296,4294967296],"role":"embedding"}]})"), "-o", target},
       {"pre[0].shape", "overflows 64 bits"}},
      {"tensor byte count overflows", {"emit", "--spec", spec("ovf2.json", R"({"name":"t","pre":[{"name":"e.weight","shape":[4294967296,1073741824],"role":"embedding"}]})"), "-o", target},
       {"'e.weight'", "byte count overflows 64 bits"}},
      {"model byte count overflows", {"emit", "--spec", spec("ovf3.json", R"({"name":"t","pre":[{"name":"a.weight","shape":[2147483648,1073741824],"role":"embedding"},{"name":"b.weight","shape":[2147483648,1073741824],"role":"embedding"}]})"), "-o", target},
       {"byte count of 4611686018427387904 parameters overflows 64 bits"}},
      {"parameter count overflows", {"emit", "--spec", spec("ovf4.json", R"({"name":"t","layer":{"count":1000000000000,"tensors":[{"name":"w","shape":[1000000000],"role":"norm_weight"}]}})"), "-o", target},
       {"parameter count overflows 64 bits"}},
      {"activation bytes overflow (plan)", {"plan", "--preset", "llama-3-70b", "--batch", "100000000", "--seq", "100000000"},
       {"activation bytes overflow 64 bits"}},
      {"negative batch", {"plan", "--preset", "llama-tiny", "--batch", "-1"}, {"--batch", "positive integer", "'-1'"}},
      {"negative sequence", {"plan", "--preset", "llama-tiny", "--seq", "-2048"}, {"--seq", "positive integer", "'-2048'"}},
      {"zero sequence", {"plan", "--preset", "llama-tiny", "--seq", "0"}, {"--seq", "positive integer"}},
      {"non-integer batch", {"plan", "--preset", "llama-tiny", "--batch", "1.5"}, {"--batch", "1.5"}},
      {"bad memory size", {"plan", "--preset", "llama-tiny", "--gpu-mem", "80 gigs"}, {"byte size '80 gigs' cannot be read"}},
      {"negative memory size", {"plan", "--preset", "llama-tiny", "--gpu-mem", "-80GiB"}, {"'-80GiB'"}},
      {"missing spec file", {"emit", "--spec", (dir / "nope.json").string(), "-o", target},
       {"spec file '" + (dir / "nope.json").string() + "' cannot be read: No such file or directory"}},
      {"missing config.json", {"emit", "--hf-config", dir.path().string(), "-o", target},
       {"Hugging Face config '" + (dir / "config.json").string() + "' cannot be read: No such file or directory"}},
      {"no model", {"emit", "-o", target}, {"--preset or --spec"}},
      {"no output", {"emit", "--preset", "llama-tiny"}, {"-o PATH is required"}},
      {"unknown flag", {"emit", "--preset", "llama-tiny", "--fast", "-o", target}, {"--fast"}},
      {"no subcommand", {}, {"subcommand"}},
      {"bad fill", {"emit", "--preset", "llama-tiny", "--init-override", "*=normal(0,-1)", "-o", target},
       {"--init-override '*=normal(0,-1)': ", "std must be positive"}},
      {"override without a fill", {"emit", "--preset", "llama-tiny", "--init-override", "*=", "-o", target},
       {"--init-override expects PATTERN=FILL, got '*='"}},
      {"override without a pattern", {"emit", "--preset", "llama-tiny", "--dtype-override", "=fp32", "-o", target},
       {"--dtype-override expects PATTERN=DTYPE, got '=fp32'"}},
      {"shard size on hdf5", {"emit", "--preset", "llama-tiny", "--max-shard-size", "5GB", "-o", target},
       {"--max-shard-size", "safetensors"}},
      {"output directory missing", {"emit", "--preset", "llama-tiny", "-o", (dir / "no" / "such" / "out.h5").string()},
       {"cannot use output directory", (dir / "no" / "such").string(), "No such file or directory"}},
      {"output directory missing (safetensors)", {"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", (dir / "no" / "out").string()},
       {"cannot use output directory", "No such file or directory"}},
      {"output parent is a file", {"emit", "--preset", "llama-tiny", "-o", (fs::path(spec("file", "x")) / "out.h5").string()},
       {"Not a directory"}},
      {"hdf5 target is a directory", {"emit", "--preset", "llama-tiny", "--force", "-o", dir.path().string()},
       {"is a directory, not a file"}},
      {"unwritable trace file", {"build", "--preset", "llama-tiny", "--trace", (dir / "no" / "trace.csv").string()},
       {"cannot write trace file"}},
  };
  const std::vector<std::string> before = dir.entries();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what + ": " + joined(c.args));
    const Result r = run(c.args);
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, c.what);
    for (const auto& w : c.words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(fs::exists(target));
    EXPECT_FALSE(fs::exists(sttarget));
    EXPECT_EQ(dir.entries(), before) << "something was written";
  }
  std::printf("%zu bad inputs: exit code 2, one line each\n", cases.size());
}

// Sizes that used to grow before any check: 4e9 identical layers (8 TB of weights in per-layer
// layout: as many datasets, so a list of them alone is hundreds of GB) and spec files of any size.
// Each run is limited to 2 GiB of address space and 30 s, so a regression fails instead of taking the
// machine; each must end with exit 2 and one line in well under 10 s.
TEST_F(Cli, HugeLayerCountsAndSpecFilesAreRefusedQuickly) {
  if (layerinit::testing::kAddressSanitizer)
    GTEST_SKIP() << "ASan reserves terabytes of address space for its shadow: an RLIMIT_AS limit stops it before main";
  TempDir dir;
  const std::string huge = (dir / "huge.json").string();
  write_file(huge, kHugeSpec);
  // Valid specs padded with spaces to exactly the 16 MiB cap and one byte past it.
  const std::string small = R"({"name": "pad", "pre": [{"name": "w", "shape": [4], "role": "norm_weight"}]})";
  const std::string at_cap = (dir / "at_cap.json").string(), past_cap = (dir / "past_cap.json").string();
  write_file(at_cap, small + std::string((16u << 20) - small.size(), ' '));
  write_file(past_cap, small + std::string((16u << 20) + 1 - small.size(), ' '));
  // A few bytes of config.json with 2^40 or 2^32 experts: refused from the counts, the field named.
  auto hf = [&](const std::string& type, const std::string& key, const std::string& experts) {
    const std::string f = (dir / (type + ".json")).string();
    write_file(f, R"({"model_type": ")" + type + R"(", ")" + key + R"(": )" + experts + "}");
    return f;
  };
  const std::string mixtral = hf("mixtral", "num_local_experts", "1099511627776"),
                    deepseek = hf("deepseek_v3", "n_routed_experts", "4294967296"),
                    qwen3_moe = hf("qwen3_moe", "num_experts", "4294967296"), glm = hf("glm4_moe", "n_routed_experts", "4294967296");
  const std::vector<std::string> before = dir.entries();
  const fs::path target = dir / "out";
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> words;  // each must appear in the one line
  };
  const std::vector<Case> cases = {
      {{"plan", "--spec", huge, "--per-layer"}, {"4000000000 layers", "too many to list", "1048576"}},
      {{"plan", "--spec", huge, "--json"}, {"4000000000 tensors", "too many to list", "1048576"}},
      // The memory check first: 4e9 datasets (2 KiB of records each, in HDF5 as in safetensors), or in
      // stacked layout one HDF5 dataset and 4e9 layer hashes of 128 bytes; a build's weights.
      {{"emit", "--spec", huge, "--backend", "cpu", "-o", target.string()},
       {"not enough memory", "tensor records 7.45 TiB (8192000000000 bytes)"}},
      {{"emit", "--spec", huge, "--backend", "cpu", "--format", "safetensors", "-o", target.string()},
       {"not enough memory", "tensor records 7.45 TiB (8192000000000 bytes)"}},
      {{"emit", "--spec", huge, "--backend", "cpu", "--layout", "stacked", "-o", target.string()},
       {"not enough memory", "tensor records 476.84 GiB (512000002048 bytes)"}},
      {{"build", "--spec", huge, "--backend", "cpu", "--layout", "stacked"},
       {"not enough memory", "weights 7.45 TiB (8192000000000 bytes)"}},
      // Past it, the disk: data, and per dataset an HDF5 object header and index entries or a
      // safetensors header entry.
      {{"emit", "--spec", huge, "--backend", "cpu", "--no-memory-check", "-o", target.string()},
       {"not enough space for", "needs 22.71 TiB"}},
      {{"emit", "--spec", huge, "--backend", "cpu", "--no-memory-check", "--format", "safetensors", "-o", target.string()},
       {"not enough space for", "needs 8.02 TiB"}},
      {{"emit", "--spec", huge, "--backend", "cpu", "--no-memory-check", "--layout", "stacked", "-o", target.string()},
       {"not enough space for", "needs 7.68 TiB"}},
      {{"plan", "--spec", "/dev/zero"}, {"spec file '/dev/zero' is not a regular file"}},
      {{"plan", "--hf-config", "/dev/zero"}, {"Hugging Face config '/dev/zero' is not a regular file"}},
      {{"plan", "--hf-config", mixtral}, {"config.json: num_local_experts: 1099511627776 experts make", "at most 262144"}},
      {{"emit", "--hf-config", mixtral, "--format", "safetensors", "-o", target.string()},
       {"config.json: num_local_experts: 1099511627776 experts make"}},
      {{"plan", "--hf-config", deepseek}, {"config.json: n_routed_experts: 4294967296 experts make"}},
      {{"plan", "--hf-config", qwen3_moe}, {"config.json: num_experts: 4294967296 experts make"}},
      {{"plan", "--hf-config", glm}, {"config.json: n_routed_experts: 4294967296 experts make"}},
      {{"emit", "--spec", past_cap, "-o", target.string()}, {"spec file '" + past_cap + "' is larger than 16 MiB"}},
  };
  SpawnOptions so;
  so.max_address_space = 2ull << 30;
  so.alarm_s = 30;
  for (const auto& c : cases) {
    SCOPED_TRACE(joined(c.args));
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = run(c.args, so);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-90s %s in %.2f s, max RSS %.1f MiB\n", joined(c.args).substr(0, 90).c_str(), r.how().c_str(), secs,
                r.maxrss_kb / 1024.0);
    // Too little disk is the environment's failure (exit 1, docs/checkpoint.md); the rest are refusals.
    const bool disk = c.words.front() == "not enough space for";
    EXPECT_EQ(r.code(), disk ? 1 : 2) << r.how() << "\nstderr: " << r.err.substr(0, 500);
    expect_one_error_line(r, "huge");
    for (const auto& w : c.words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
    EXPECT_LT(secs, 5.0);
    EXPECT_LT(r.maxrss_kb, 256 * 1024) << "grew with the model";
    EXPECT_EQ(dir.entries(), before) << "something was written";
  }
  // The cap itself is allowed.
  const Result ok = run({"plan", "--spec", at_cap}, so);
  EXPECT_EQ(ok.code(), 0) << ok.how() << " " << ok.err;
}

// A FIFO as --spec or --hf-config (the file, or a directory's config.json) waited for a writer forever:
// only regular files are read, a FIFO is refused at once. SIGALRM ends a run that hangs.
TEST_F(Cli, InputFilesThatAreNotRegularFilesAreRefused) {
  TempDir dir;
  fs::create_directories(dir / "model");
  const std::string fifo = (dir / "spec.json").string(), config = (dir / "model" / "config.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(::mkfifo(config.c_str(), 0644), 0);
  const std::string target = (dir / "out.h5").string();
  struct Case {
    std::vector<std::string> args;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{"plan", "--spec", fifo}, "spec file '" + fifo + "' is not a regular file"},
      {{"emit", "--spec", fifo, "-o", target}, "spec file '" + fifo + "' is not a regular file"},
      {{"build", "--hf-config", config, "--backend", "cpu"}, "Hugging Face config '" + config + "' is not a regular file"},
      {{"plan", "--hf-config", (dir / "model").string()}, "Hugging Face config '" + config + "' is not a regular file"},
      {{"plan", "--spec", dir.path().string()}, "spec file '" + dir.path().string() + "' is not a regular file"},
  };
  const std::vector<std::string> before = dir.entries();
  SpawnOptions so;
  so.alarm_s = 10;
  for (const auto& c : cases) {
    SCOPED_TRACE(joined(c.args));
    const Result r = run(c.args, so);
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    EXPECT_EQ(r.err, "layerinit: error: " + c.line + "\n");
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(dir.entries(), before) << "something was written";
  }
}

// Every integer option reads decimal digits only: CLI11 read "010" as octal 8, "0x10" as 16, "-1"
// and 18446744073709551616 as 2^64 - 1, and accepted "+5" and " 5".
TEST_F(Cli, IntegerOptionsAreDecimalOnly) {
  TempDir dir;
  const std::string target = (dir / "out.h5").string();
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> words;
  };
  const std::string max64 = "18446744073709551615";
  const std::vector<Case> bad = {
      {{"build", "--preset", "llama-tiny", "--seed", "-1"}, {"--seed", "'-1'", "decimal integer from 0 to " + max64}},
      {{"build", "--preset", "llama-tiny", "--seed", "18446744073709551616"}, {"--seed", "'18446744073709551616'", "out of range"}},
      {{"build", "--preset", "llama-tiny", "--seed", "99999999999999999999999"}, {"--seed", "out of range"}},
      {{"build", "--preset", "llama-tiny", "--seed", "1e23"}, {"--seed", "'1e23'", "decimal integer"}},
      {{"build", "--preset", "llama-tiny", "--seed", "0x10"}, {"--seed", "'0x10'"}},
      {{"build", "--preset", "llama-tiny", "--seed", "+5"}, {"--seed", "'+5'"}},
      {{"build", "--preset", "llama-tiny", "--seed", " 5"}, {"--seed", "' 5'"}},
      {{"build", "--preset", "llama-tiny", "--seed", "5 "}, {"--seed", "'5 '"}},
      {{"build", "--preset", "llama-tiny", "--seed", ""}, {"--seed", "''"}},
      {{"build", "--preset", "llama-tiny", "--seed", "1.0"}, {"--seed", "'1.0'"}},
      {{"emit", "--preset", "llama-tiny", "--seed", "-0", "-o", target}, {"--seed", "'-0'"}},
      {{"build", "--preset", "llama-tiny", "--threads", "-1"}, {"--threads", "'-1'", "decimal integer from 0 to 4096"}},
      {{"build", "--preset", "llama-tiny", "--threads", "4097"}, {"--threads", "'4097'", "out of range"}},
      {{"build", "--preset", "llama-tiny", "--threads", "4294967298"}, {"--threads", "out of range"}},
      {{"emit", "--preset", "llama-tiny", "--threads", "0x2", "-o", target}, {"--threads", "'0x2'"}},
      {{"plan", "--preset", "llama-tiny", "--batch", "0x10"}, {"--batch", "'0x10'", "positive integer (decimal, at most " + max64 + ")"}},
      {{"plan", "--preset", "llama-tiny", "--batch", "1e3"}, {"--batch", "'1e3'"}},
      {{"plan", "--preset", "llama-tiny", "--batch", "0"}, {"--batch", "'0'", "out of range"}},
      {{"plan", "--preset", "llama-tiny", "--seq", "18446744073709551616"}, {"--seq", "out of range"}},
      {{"plan", "--preset", "llama-tiny", "--seq", "-0"}, {"--seq", "'-0'"}},
      {{"plan", "--preset", "llama-tiny", "--gpu-mem", "0x10GiB"}, {"byte size '0x10GiB' cannot be read"}},
      {{"plan", "--preset", "llama-tiny", "--gpu-mem", "0x1p4GiB"}, {"byte size '0x1p4GiB' cannot be read"}},
      {{"plan", "--preset", "llama-tiny", "--gpu-mem", "+80GiB"}, {"byte size '+80GiB' cannot be read"}},
      {{"emit", "--preset", "llama-tiny", "--format", "safetensors", "--max-shard-size", "0x100000", "-o", target},
       {"byte size '0x100000' cannot be read"}},
  };
  for (const auto& c : bad) {
    SCOPED_TRACE(joined(c.args));
    const Result r = run(c.args);
    EXPECT_EQ(r.code(), 2) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, joined(c.args));
    for (const auto& w : c.words) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_TRUE(dir.entries().empty());
  }
  // Leading zeros are decimal: 010 is ten (the same tensors as --seed 10), and the largest seed is accepted.
  const json ten = build_report({"--seed", "10"}), zero_ten = build_report({"--seed", "010"});
  EXPECT_EQ(zero_ten["seed"], 10u);
  EXPECT_EQ(zero_ten["tensors"], ten["tensors"]);
  EXPECT_EQ(build_report({"--seed", max64})["seed"], std::numeric_limits<std::uint64_t>::max());
  const json threads = build_report({"--threads", "010"});
  EXPECT_EQ(threads["tensors"], build_report({})["tensors"]);
  EXPECT_EQ(threads["backend"], "cpu (10 threads)");
  const Result p = run({"plan", "--preset", "llama-tiny", "--json", "--batch", "010", "--seq", "0100"});
  ASSERT_EQ(p.code(), 0) << p.err;
  const json plan = json::parse(p.out);
  EXPECT_EQ(plan["training"]["batch"], 10u);
  EXPECT_EQ(plan["training"]["seq"], 100u);
  const Result g = run({"plan", "--preset", "llama-tiny", "--json", "--gpu-mem", "1.5GiB"});
  ASSERT_EQ(g.code(), 0) << g.err;
  EXPECT_EQ(json::parse(g.out)["training"]["gpu_memory"], 1610612736u);
}

// plan --json gives each tensor's fill exactly, as --init-override reads it: torchtitan's depth-scaled
// std of layer 0's output projection, 0.02 / sqrt(2), was "0.0141421" (6 digits).
TEST_F(Cli, PlanJsonFillsAreExact) {
  const Result p = run({"plan", "--preset", "llama-tiny", "--recipe", "torchtitan", "--json"});
  ASSERT_EQ(p.code(), 0) << p.err;
  const json plan = json::parse(p.out);
  std::string fill;
  for (const json& t : plan["tensors"])
    if (t["name"] == "model.layers.0.self_attn.o_proj.weight") fill = t["fill"].get<std::string>();
  EXPECT_EQ(fill, "trunc_normal(0,0.014142135623730949,-2,2)");  // 0.02 / sqrt(2.0) in double
}

// User text echoed in a message (preset, dtype, recipe, fill, flag names, paths) had its newlines
// and escape sequences printed raw: a two-line message, or terminal commands. They are written
// \xNN now, as the spec parser already wrote names.
TEST_F(Cli, MessagesEscapeControlCharactersInUserText) {
  TempDir dir;
  const std::string esc = "\x1b]0;owned\x07\x1b[31m";  // set the window title, then red
  struct Case {
    std::vector<std::string> args;
    std::string escaped;  // must appear in the line
    int code;
  };
  const std::string nl_dir = (dir / "no\nsuch").string();
  const std::vector<Case> cases = {
      {{"emit", "--preset", "llama\n" + esc, "-o", (dir / "a.h5").string()},
       "preset 'llama\\x0a\\x1b]0;owned\\x07\\x1b[31m' is unknown", 2},
      {{"build", "--preset", "llama-tiny", "--dtype", "bf\n16"}, "dtype 'bf\\x0a16' is unknown", 2},
      {{"build", "--preset", "llama-tiny", "--recipe", "hf\r" + esc}, "recipe 'hf\\x0d\\x1b]0;owned\\x07\\x1b[31m' is unknown", 2},
      {{"build", "--preset", "llama-tiny", "--layout", "x\ny"}, "layout 'x\\x0ay' is unknown", 2},
      {{"build", "--preset", "llama-tiny", "--orientation", "x\ny"}, "orientation 'x\\x0ay' is unknown", 2},
      {{"build", "--preset", "llama-tiny", "--backend", "x\ny"}, "backend 'x\\x0ay' is unknown", 2},
      {{"build", "--preset", "llama-tiny", "--report", "x\ny"}, "unknown report format 'x\\x0ay'", 2},
      {{"plan", "--preset", "llama-tiny", "--precision", "x\ny"}, "training precision 'x\\x0ay' is unknown", 2},
      {{"emit", "--preset", "llama-tiny", "--format", "x\ny", "-o", (dir / "a").string()}, "'x\\x0ay'", 2},
      {{"build", "--preset", "llama-tiny", "--init-override", "*=normal(0,\n1x)"}, "normal(0,\\x0a1x)", 2},
      {{"build", "--preset", "llama-tiny", "--dtype-override", "*\n=fp32x"}, "fp32x", 2},
      {{"build", "--preset", "llama-tiny", "--dtype-override", "x\ny"}, "'x\\x0ay'", 2},
      {{"build", "--preset", "llama-tiny", "--seed", "1\n2"}, "'1\\x0a2'", 2},
      {{"build", "--preset", "llama-tiny", "--fa\nst"}, "--fa\\x0ast", 2},
      {{"build", "--spec", (dir / "no\nsuch.json").string()}, "no\\x0asuch.json", 2},
      {{"emit", "--preset", "llama-tiny", "-o", nl_dir + "/m.h5"}, "no\\x0asuch", 2},
      {{"build", "--preset", "llama-tiny", "--trace", nl_dir + "/t.csv"}, "no\\x0asuch", 2},
      // C1 controls: U+009B (CSI) in UTF-8 and a raw 0x9b byte; other UTF-8 passes as it is.
      {{"build", "--preset", "\xc2\x9b" "31m\xc3\xa9"}, "preset '\\xc2\\x9b31m\xc3\xa9' is unknown", 2},
      {{"build", "--preset", "\x9b" "31m\xff"}, "preset '\\x9b31m\\xff' is unknown", 2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(joined(c.args));
    const Result r = run(c.args);
    EXPECT_EQ(r.code(), c.code) << r.how() << "\nstderr: " << r.err;
    expect_one_error_line(r, joined(c.args));
    EXPECT_EQ(terminal_controls(r.err), "") << r.err;
    EXPECT_NE(r.err.find(c.escaped), std::string::npos) << "missing '" << c.escaped << "' in: " << r.err;
  }
  EXPECT_TRUE(dir.entries().empty());
  // A successful emit to such a path: its summary line escapes the path too.
  const std::string odd = (dir / "m\n\x1b[2J.h5").string();
  const Result ok = run({"emit", "--preset", "llama-tiny", "--backend", "cpu", "-o", odd});
  ASSERT_EQ(ok.code(), 0) << ok.err;
  EXPECT_TRUE(fs::exists(odd));
  EXPECT_EQ(std::count(ok.out.begin(), ok.out.end(), '\n'), 1) << ok.out;
  EXPECT_EQ(terminal_controls(ok.out), "") << ok.out;
  EXPECT_EQ(ok.out.rfind((dir / "m\\x0a\\x1b[2J.h5").string() + ": wrote ", 0), 0u) << ok.out;
}

// An override whose pattern matches no tensor (a typo, another model's names) was accepted without a
// word. It is a warning now, and an error with --strict.
TEST_F(Cli, OverridesThatMatchNoTensorWarnAndFailWithStrict) {
  TempDir dir;
  const std::string target = (dir / "m.h5").string();
  const std::string init_warning =
      "layerinit: warning: --init-override pattern 'model.layer.*.mlp.*' matches no tensor of llama-tiny\n";
  const std::string dtype_warning = "layerinit: warning: --dtype-override pattern '*layernorm\\x0a' matches no tensor of llama-tiny\n";
  const std::vector<std::string> unmatched = {"--init-override", "model.layer.*.mlp.*=normal(0,0.01)",
                                              "--dtype-override", "*layernorm\n=fp32"};
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"build", "--preset", "llama-tiny", "--backend", "cpu"},
        std::vector<std::string>{"plan", "--preset", "llama-tiny"},
        std::vector<std::string>{"emit", "--preset", "llama-tiny", "--backend", "cpu", "-o", target}}) {
    SCOPED_TRACE(cmd[0]);
    std::vector<std::string> args = cmd;
    args.insert(args.end(), unmatched.begin(), unmatched.end());
    const Result warned = run(args);
    EXPECT_EQ(warned.code(), 0) << warned.err;
    EXPECT_EQ(warned.err, init_warning + dtype_warning);
    fs::remove(target);
    args.push_back("--strict");
    const Result strict = run(args);
    EXPECT_EQ(strict.code(), 2) << strict.how();
    EXPECT_EQ(strict.err, "layerinit: error: --init-override pattern 'model.layer.*.mlp.*' matches no tensor of "
                          "llama-tiny (--strict)\n");
    EXPECT_TRUE(strict.out.empty());
    EXPECT_TRUE(dir.entries().empty());
    // Patterns that match (layer 3's down_proj only; the norms) say nothing, with or without --strict.
    std::vector<std::string> matched = cmd;
    for (const char* a : {"--init-override", "model.layers.3.mlp.down_proj.weight=normal(0,0.01)", "--dtype-override",
                          "*layernorm.weight=fp32", "--strict"})
      matched.push_back(a);
    const Result quiet = run(matched);
    EXPECT_EQ(quiet.code(), 0) << quiet.err;
    EXPECT_EQ(quiet.err, "");
    fs::remove(target);
  }
  // llama-tiny has layers 0 to 3: a two-digit index or layer 4 matches nothing, one digit does.
  for (const auto& [pattern, matches] : std::vector<std::pair<std::string, bool>>{
           {"model.layers.??.*", false}, {"model.layers.4.*", false}, {"model.layers.[4-9].*", false},
           {"model.layers.?.mlp.*", true}, {"model.layers.[3-9].*", true}, {"*.3.*", true}}) {
    const Result r = run({"plan", "--preset", "llama-tiny", "--init-override", pattern + "=normal(0,1)"});
    EXPECT_EQ(r.code(), 0) << r.err;
    EXPECT_EQ(r.err, matches ? "" : "layerinit: warning: --init-override pattern '" + pattern + "' matches no tensor of llama-tiny\n");
  }
}

// normal(0, 1e-300) wrote zeros in every dtype, normal(0, 1e-10) zeros in fp16: refused before
// anything is written, naming the tensor when the dtype is what makes the fill degenerate.
TEST_F(Cli, FillsThatUnderflowTheDtypeAreRefused) {
  TempDir dir;
  const std::string target = (dir / "m.h5").string();
  struct Case {
    std::vector<std::string> args;
    std::string line;
  };
  const std::vector<Case> cases = {
      {{"emit", "--preset", "llama-tiny", "--init-override", "*proj*=normal(0,1e-300)", "-o", target},
       "layerinit: error: --init-override '*proj*=normal(0,1e-300)': fill 'normal(0, 1e-300)' is invalid: std underflows float\n"},
      {{"emit", "--preset", "llama-tiny", "--dtype", "fp16", "--init-override", "*.mlp.*=normal(0,1e-10)", "-o", target},
       "layerinit: error: tensor 'model.layers.0.mlp.gate_proj.weight': fill 'normal(0, 1e-10)' is invalid: every value "
       "rounds to 0 in fp16 (too narrow for the dtype; write constant(0) for a constant)\n"},
      {{"build", "--preset", "llama-tiny", "--dtype", "bf16", "--init-override", "model.norm.weight=normal(1,1e-5)"},
       "layerinit: error: tensor 'model.norm.weight': fill 'normal(1, 1e-05)' is invalid: every value rounds to 1 in bf16 "
       "(too narrow for the dtype; write constant(1) for a constant)\n"},
      {{"plan", "--preset", "llama-tiny", "--dtype-override", "lm_head.weight=fp16", "--init-override",
        "lm_head.weight=uniform(0,1e-9)"},
       "layerinit: error: tensor 'lm_head.weight': fill 'uniform(0, 1e-09)' is invalid: every value rounds to 0 in fp16 "
       "(too narrow for the dtype; write constant(0) for a constant)\n"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(joined(c.args));
    const Result r = run(c.args);
    EXPECT_EQ(r.code(), 2) << r.how();
    EXPECT_EQ(r.err, c.line);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_TRUE(dir.entries().empty());
  }
  // The same fills where the dtype holds them.
  const Result ok = run({"emit", "--preset", "llama-tiny", "--dtype", "fp32", "--init-override", "*.mlp.*=normal(0,1e-10)",
                         "--backend", "cpu", "-o", target});
  EXPECT_EQ(ok.code(), 0) << ok.err;
}

TEST_F(Cli, HelpOfEachSubcommandListsEveryFlag) {
  const std::vector<std::string> model = {"--preset", "--spec", "--dtype", "--dtype-override", "--recipe",
                                          "--init-override", "--seed", "--layout", "--orientation"};
  std::map<std::string, std::vector<std::string>> flags = {
      {"build", {"--backend", "--threads", "--report", "--json", "--quiet", "--trace", "--force", "--no-memory-check"}},
      {"plan", {"--report", "--json", "--quiet", "--per-layer", "--precision", "--batch", "--seq", "--gpu-mem"}},
      {"emit", {"--backend", "--threads", "--format", "-o", "--output", "--force", "--report", "--json", "--progress",
                "--quiet", "--max-shard-size", "--no-memory-check"}},
  };
  for (auto& [sub, own] : flags) {
    SCOPED_TRACE(sub);
    const Result r = run({sub, "--help"});
    EXPECT_EQ(r.code(), 0) << r.how();
    std::vector<std::string> all = model;
    all.insert(all.end(), own.begin(), own.end());
    for (const auto& f : all) EXPECT_NE(r.out.find(f), std::string::npos) << sub << " --help lacks " << f << ":\n" << r.out;
  }
  const Result top = run({"--help"});
  EXPECT_EQ(top.code(), 0);
  for (const char* s : {"build", "plan", "emit", "--version"}) EXPECT_NE(top.out.find(s), std::string::npos) << s;
}

TEST_F(Cli, Version) {
  const Result r = run({"--version"});
  EXPECT_EQ(r.code(), 0);
  EXPECT_EQ(r.out, std::string("layerinit ") + LAYERINIT_VERSION + "\n");
  EXPECT_TRUE(r.err.empty());
}

// emit --hf-config writes the dtype the config declares (dtype, else torch_dtype) unless --dtype
// says otherwise; then it says so, and the config.json it writes declares the file's dtype, since
// transformers loads the weights as config.json says. A dtype layerinit does not write needs --dtype.
TEST_F(Cli, EmitHfConfigWritesTheConfigsDtype) {
  TempDir dir;
  const std::string tiny = slurp(fs::path(LAYERINIT_SOURCE_DIR) / "tests" / "hf_configs" / "tiny" / "llama.json");
  auto config = [&](const std::string& name, const std::string& field) {
    json j = json::parse(tiny);
    j.update(json::parse(field));
    write_file((dir / name).string(), j.dump(2));
    return (dir / name).string();
  };
  const std::string f32 = config("f32.json", R"({"torch_dtype": "float32"})"),
                    f16 = config("f16.json", R"({"dtype": "float16", "torch_dtype": "float32"})"),
                    f64 = config("f64.json", R"({"torch_dtype": "float64"})");
  auto dtypes = [](const fs::path& file) {  // the safetensors header's dtypes
    std::set<std::string> out;
    for (const auto& [name, t] : parse_safetensors(file).tensors) out.insert(t.dtype);
    return out;
  };
  const Result a = run({"emit", "--hf-config", f32, "--backend", "cpu", "--format", "safetensors", "-o", (dir / "a").string()});
  ASSERT_EQ(a.code(), 0) << a.err;
  EXPECT_EQ(a.err, "");
  EXPECT_EQ(dtypes(dir / "a" / "model.safetensors"), std::set<std::string>{"F32"});
  EXPECT_EQ(slurp(dir / "a" / "config.json"), slurp(f32));  // the user's file as it is
  // dtype wins over torch_dtype, as in transformers.
  const Result b = run({"emit", "--hf-config", f16, "--backend", "cpu", "--format", "safetensors", "-o", (dir / "b").string()});
  ASSERT_EQ(b.code(), 0) << b.err;
  EXPECT_EQ(dtypes(dir / "b" / "model.safetensors"), std::set<std::string>{"F16"});
  // An explicit --dtype: the weights are bf16, and so says the config.json written, both keys.
  const Result c = run({"emit", "--hf-config", f16, "--dtype", "bf16", "--backend", "cpu", "--format", "safetensors", "-o",
                        (dir / "c").string()});
  ASSERT_EQ(c.code(), 0) << c.err;
  EXPECT_EQ(c.err, "layerinit: note: the config declares another dtype than --dtype bf16; the config.json written beside the "
                   "weights declares theirs\n");
  EXPECT_EQ(dtypes(dir / "c" / "model.safetensors"), std::set<std::string>{"BF16"});
  json written = json::parse(slurp(dir / "c" / "config.json")), given = json::parse(slurp(f16));
  EXPECT_EQ(written["dtype"], "bfloat16");
  EXPECT_EQ(written["torch_dtype"], "bfloat16");
  written.erase("dtype"), written.erase("torch_dtype"), given.erase("dtype"), given.erase("torch_dtype");
  EXPECT_EQ(written, given);  // nothing else changes
  // float64: refused without --dtype (exit 2, the field named), written with it.
  const Result d = run({"emit", "--hf-config", f64, "--backend", "cpu", "--format", "safetensors", "-o", (dir / "d").string()});
  EXPECT_EQ(d.code(), 2);
  EXPECT_EQ(d.err, "layerinit: error: config.json: torch_dtype: 'float64' is not a dtype layerinit writes (float32, float16, "
                   "bfloat16): give the dtype to write (--dtype)\n");
  EXPECT_FALSE(fs::exists(dir / "d"));
  const Result e = run({"emit", "--hf-config", f64, "--dtype", "fp32", "--backend", "cpu", "--format", "safetensors", "-o",
                        (dir / "e").string()});
  ASSERT_EQ(e.code(), 0) << e.err;
  EXPECT_EQ(json::parse(slurp(dir / "e" / "config.json"))["torch_dtype"], "float32");
  // plan takes the same default.
  const Result p = run({"plan", "--hf-config", f32, "--json"});
  ASSERT_EQ(p.code(), 0) << p.err;
  EXPECT_EQ(json::parse(p.out)["dtype"], "fp32");
}
