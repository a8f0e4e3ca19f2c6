// `layerinit verify PATH` as a user runs it (tests/cli_runner.hpp runs the binary):
//   - layerinit's own emits verify from their metadata alone (exit 0, text and JSON): HDF5 and
//     safetensors, per-layer and stacked, sharded, in-out, dtype and init overrides, an MPI emit,
//     every rank file of a mesh; a rank file removed leaves tensors missing with their uncovered count;
//   - one flipped bit is found at its index with both values (exit 1);
//   - flags that contradict the file (another seed) make every random tensor differ, diagnosed;
//   - a file of another model, a file without metadata and no model, bad flags: one line, exit 2.
// Skips (GTEST_SKIP) when the binary was not built (LAYERINIT_BUILD_TOOLS=OFF); the MPI case skips
// without mpirun or MPI.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;
using CliVerify = CliTest;

namespace {

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The number of tensors emit reported writing.
std::size_t emitted(const Result& r) { return json::parse(r.out).at("tensors").size(); }

// verify PATH (and flags) in text and in JSON: both exit `code`; the JSON report.
json verify_both(const std::string& path, const std::vector<std::string>& flags, int code) {
  const Result t = run(cat({"verify", path}, flags));
  EXPECT_EQ(t.code(), code) << t.out << t.err;
  const Result j = run(cat({"verify", path, "--report", "json"}, flags));
  EXPECT_EQ(j.code(), code) << j.err;
  EXPECT_EQ(j.err, "");
  return json::parse(j.out);
}

// Expects every tensor equal: text summary and JSON counts.
void expect_all_equal(const std::string& path, std::size_t tensors, const std::string& format, const std::string& what) {
  SCOPED_TRACE(what);
  const Result t = run({"verify", path});
  ASSERT_EQ(t.code(), 0) << t.out << t.err;
  EXPECT_EQ(t.err, "");
  const std::string n = std::to_string(tensors);
  EXPECT_NE(t.out.find("\n" + n + " tensors: " + n + " equal, 0 differ, 0 missing, 0 unexpected\n"), std::string::npos) << t.out;
  const json j = verify_both(path, {}, 0);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["format"], format);
  EXPECT_EQ(j["source"], "metadata");
  EXPECT_EQ(j["equal"], tensors);
  EXPECT_EQ(j["tensors"].size(), tensors);
  for (const auto& x : j["tensors"]) EXPECT_EQ(x["status"], "equal") << x.dump();
}

// A safetensors file's header (JSON) and where its data starts.
struct Header {
  json h;
  std::uint64_t data = 0;
};
Header read_header(const fs::path& p) {
  const std::string raw = slurp(p);
  std::uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(raw[b]);
  return {json::parse(raw.substr(8, n)), 8 + n};
}

float bf16_value(std::uint16_t bits) {
  const std::uint32_t w = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

std::string hex4(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", v);
  return buf;
}

// mpirun as test_cli_mpi runs it: --oversubscribe on 2 cores, as root on CI, tcp.
std::vector<std::string> mpirun(int np, const std::vector<std::string>& args) {
  std::vector<std::string> v{"mpirun", "--allow-run-as-root", "--oversubscribe", "-q", "--mca", "btl", "self,tcp",
                             "-x", "ASAN_OPTIONS", "-np", std::to_string(np), kLayerinit};
  return cat(v, args);
}

}  // namespace

TEST_F(CliVerify, OwnEmitsVerifyFromTheirMetadata) {
  struct Case {
    std::vector<std::string> flags;
    const char* out;
    const char* format;  // verify's name for it
  };
  const std::vector<Case> cases = {
      {{"--preset", "llama-tiny"}, "a.h5", "hdf5"},
      {{"--preset", "llama-tiny", "--format", "safetensors"}, "a", "safetensors"},
      {{"--preset", "llama-tiny", "--format", "safetensors", "--max-shard-size", "100KB"}, "sharded", "safetensors"},
      {{"--preset", "mixtral-tiny", "--layout", "stacked"}, "stacked.h5", "hdf5"},
      {{"--preset", "mixtral-tiny", "--layout", "stacked", "--format", "safetensors"}, "stacked", "safetensors"},
      {{"--preset", "mixtral-tiny", "--layout", "stacked", "--experts", "per-expert", "--format", "safetensors"},
       "per-expert", "safetensors"},
      {{"--preset", "llama-tiny", "--orientation", "in-out", "--format", "safetensors"}, "in-out", "safetensors"},
      {{"--preset", "gpt2-tiny", "--orientation", "in-out"}, "in-out.h5", "hdf5"},
      // Overrides and a seed: the metadata carries them (dtype_overrides, init_overrides, seed).
      {{"--preset", "llama-tiny", "--dtype", "fp16", "--seed", "7", "--dtype-override", "*norm*=fp32", "--init-override",
        "*.o_proj.weight=normal(0,0.01)", "--format", "safetensors"},
       "overrides", "safetensors"},
      {{"--preset", "qwen2.5-tiny", "--dtype-override", "*.bias=fp32", "--init-override", "*.bias=uniform(-1,1)"},
       "qwen.h5", "hdf5"},
  };
  TempDir dir;
  for (const Case& c : cases) {
    const std::string out = (dir / c.out).string();
    const Result e = run(cat(cat({"emit"}, c.flags), {"--report", "json", "-o", out}));
    ASSERT_EQ(e.code(), 0) << e.err;
    expect_all_equal(out, emitted(e), c.format, joined(c.flags));
  }
}

TEST_F(CliVerify, JsonHeaderSaysWhatWasCompared) {
  TempDir dir;
  const std::string out = (dir / "a").string();
  ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "--seed", "3", "--dtype-override",
                 "*norm*=fp32", "-o", out}).code(), 0);
  const json j = verify_both(out, {"--threads", "1"}, 0);
  EXPECT_EQ(j["path"], out);
  EXPECT_EQ(j["format"], "safetensors");
  EXPECT_EQ(j["source"], "metadata");
  EXPECT_EQ(j["model"], "llama-tiny");
  EXPECT_EQ(j["dtype"], "bf16");
  EXPECT_EQ(j["seed"], 3);
  EXPECT_EQ(j["recipe"], "hf");
  EXPECT_EQ(j["layout"], "per-layer");
  EXPECT_EQ(j["orientation"], "out-in");
  EXPECT_EQ(j["backend"], "cpu (1 threads)");
  EXPECT_EQ(j["dtype_overrides"], json::array({json::array({"*norm*", "fp32"})}));
  EXPECT_EQ(j["init_overrides"], json::array());
  // The model given as flags: the options still come from the metadata.
  const json f = verify_both(out, {"--preset", "llama-tiny"}, 0);
  EXPECT_EQ(f["source"], "flags");
  EXPECT_EQ(f["seed"], 3);
}

TEST_F(CliVerify, MpiEmitsVerify) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun on PATH";
  // A layerinit without MPI refuses mpirun (exit 2): nothing to verify then.
  TempDir dir;
  const SpawnOptions env = {.env = {{"ASAN_OPTIONS", "detect_leaks=0"}}};
  const std::string st = (dir / "st").string(), h5 = (dir / "m.h5").string();
  const Result a = run_command(
      mpirun(3, {"emit", "--preset", "llama-tiny", "--format", "safetensors", "--max-shard-size", "100KB", "--report", "json",
                 "-o", st}),
      env);
  if (a.code() == 2 && a.err.find("built without MPI") != std::string::npos) GTEST_SKIP() << "layerinit built without MPI";
  ASSERT_EQ(a.code(), 0) << a.err;
  expect_all_equal(st, emitted(a), "safetensors", "mpirun safetensors");
  // The HDF5 master reads its rank directory's files through virtual datasets.
  const Result b = run_command(
      mpirun(3, {"emit", "--preset", "mixtral-tiny", "--layout", "stacked", "--report", "json", "-o", h5}), env);
  ASSERT_EQ(b.code(), 0) << b.err;
  expect_all_equal(h5, emitted(b), "hdf5", "mpirun hdf5 master");
}

TEST_F(CliVerify, RankFilesOfAMesh) {
  TempDir dir;
  const std::string out = (dir / "ranks").string();
  std::size_t tensors = 0;
  {
    const Result e = run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "--report", "json", "-o", (dir / "whole").string()});
    ASSERT_EQ(e.code(), 0) << e.err;
    tensors = emitted(e);
  }
  for (const char* r : {"0", "1", "2", "3"}) {
    const Result e = run({"emit", "--preset", "llama-tiny", "--tp", "2", "--pp", "2", "--rank", r, "--format", "safetensors", "-o", out});
    ASSERT_EQ(e.code(), 0) << e.err;
  }
  expect_all_equal(out, tensors, "rank files", "tp 2 x pp 2");

  // Rank 3 (tp 1 of the last stage) gone: its pieces' elements are in no file.
  fs::remove(fs::path(out) / "rank-00003-of-00004.safetensors");
  const json j = verify_both(out, {}, 1);
  EXPECT_EQ(j["ok"], false);
  EXPECT_GT(j["missing"].get<int>(), 0);
  EXPECT_EQ(j["differs"], 0);
  EXPECT_EQ(j["unexpected"], 0);
  EXPECT_EQ(j["equal"].get<std::size_t>() + j["missing"].get<std::size_t>(), tensors);
  for (const auto& t : j["tensors"]) {
    if (t["status"] == "equal") continue;
    EXPECT_EQ(t["status"], "missing") << t.dump();
    ASSERT_TRUE(t.contains("uncovered")) << t.dump();
    EXPECT_GT(t["uncovered"].get<std::uint64_t>(), 0u);
    // Layers 2 and 3 are the last stage's.
    const std::string name = t["name"];
    EXPECT_TRUE(name.find("layers.2.") != std::string::npos || name.find("layers.3.") != std::string::npos ||
                name.rfind("model.layers.", 0) != 0)
        << name;
  }
  const Result t = run({"verify", out});
  EXPECT_EQ(t.code(), 1);
  EXPECT_NE(t.out.find(" of its elements are in no rank file\n"), std::string::npos) << t.out;
}

TEST_F(CliVerify, FlippedBitIsFoundWithItsIndex) {
  TempDir dir;
  const std::string out = (dir / "a").string();
  ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", out}).code(), 0);
  const fs::path file = fs::path(out) / "model.safetensors";
  const std::string name = "model.layers.1.self_attn.q_proj.weight";
  const Header h = read_header(file);
  ASSERT_EQ(h.h[name]["dtype"], "BF16");
  ASSERT_EQ(h.h[name]["shape"], json::array({64, 64}));
  const std::uint64_t index = 1234;  // [19, 18]
  const std::uint64_t at = h.data + h.h[name]["data_offsets"][0].get<std::uint64_t>() + 2 * index;
  std::uint16_t before = 0;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    unsigned char b[2];
    f.seekg(static_cast<std::streamoff>(at));
    f.read(reinterpret_cast<char*>(b), 2);
    before = static_cast<std::uint16_t>(b[0] | (b[1] << 8));
    b[0] ^= 1;  // the mantissa's lowest bit
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(b), 2);
  }
  const std::uint16_t after = before ^ 1;
  const json j = verify_both(out, {}, 1);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["differs"], 1);
  EXPECT_EQ(j["missing"], 0);
  EXPECT_EQ(j["unexpected"], 0);
  std::size_t found = 0;
  for (const auto& t : j["tensors"]) {
    if (t["name"] != name) {
      EXPECT_EQ(t["status"], "equal") << t.dump();
      continue;
    }
    ++found;
    EXPECT_EQ(t["status"], "differs");
    EXPECT_EQ(t["elements"], 4096);
    EXPECT_EQ(t["differing"], 1);
    const json& d = t["first_difference"];
    EXPECT_EQ(d["index"], index);
    EXPECT_EQ(d["coords"], json::array({19, 18}));
    EXPECT_EQ(d["expected_bits"], hex4(before));
    EXPECT_EQ(d["stored_bits"], hex4(after));
    EXPECT_EQ(d["expected"].get<double>(), static_cast<double>(bf16_value(before)));
    EXPECT_EQ(d["stored"].get<double>(), static_cast<double>(bf16_value(after)));
  }
  EXPECT_EQ(found, 1u);
  const Result t = run({"verify", out});
  EXPECT_EQ(t.code(), 1);
  EXPECT_NE(t.out.find("\ndiffers    " + name + " [64, 64] bf16: 1 of 4096 elements differ, first [19, 18]: "),
            std::string::npos)
      << t.out;
}

TEST_F(CliVerify, FlagsThatContradictTheFileDiagnoseIt) {
  TempDir dir;
  const std::string out = (dir / "a").string();
  ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", out}).code(), 0);
  const json j = verify_both(out, {"--seed", "5"}, 1);
  EXPECT_EQ(j["seed"], 5);
  EXPECT_GT(j["differs"].get<int>(), 0);
  EXPECT_EQ(j["missing"], 0);
  EXPECT_EQ(j["unexpected"], 0);
  for (const auto& t : j["tensors"]) {
    if (t["status"] == "equal") {  // the norms' ones are the same for every seed
      EXPECT_NE(t["name"].get<std::string>().find("norm"), std::string::npos) << t.dump();
      continue;
    }
    EXPECT_EQ(t["status"], "differs") << t.dump();
    EXPECT_EQ(t["diagnosis"]["kind"], "other_seed") << t.dump();
    EXPECT_EQ(t["diagnosis"]["seed"], 0) << t.dump();
  }
  // --no-diagnose: the same differences, no diagnosis.
  const json n = verify_both(out, {"--seed", "5", "--no-diagnose"}, 1);
  EXPECT_EQ(n["differs"], j["differs"]);
  for (const auto& t : n["tensors"]) EXPECT_FALSE(t.contains("diagnosis")) << t.dump();
}

TEST_F(CliVerify, AnotherModelIsRefused) {
  TempDir dir;
  const std::string out = (dir / "gpt2").string();
  ASSERT_EQ(run({"emit", "--preset", "gpt2-tiny", "--format", "safetensors", "-o", out}).code(), 0);
  const Result r = run({"verify", out, "--preset", "llama-tiny"});
  EXPECT_EQ(r.code(), 2) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  expect_one_error_line(r, "another model");
  EXPECT_EQ(r.err.rfind("layerinit: error: verify: checkpoint '" + out + "' is not of model 'llama-tiny' (per-layer, out-in): 0 of ",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find("its metadata names model 'gpt2-tiny'"), std::string::npos) << r.err;
}

// A model of 2^40 layers, claimed by the file's metadata or given with --spec: refused before any of
// its tensors is looked at, as emit refuses it (verify walked every layer first, for minutes).
TEST_F(CliVerify, AClaimedModelTooLargeToHoldIsRefusedFirst) {
  TempDir dir;
  const std::string out = (dir / "a").string();
  ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", out}).code(), 0);
  const std::string huge = R"({"name": "huge", "layer": {"count": 1099511627776, "tensors": [{"name": "w", "shape": [2], "role": "norm_weight"}]}})";
  write_file(dir / "huge.json", huge);
  const std::string refusal_start = "layerinit: error: not enough memory: needs 2176.00 TiB";
  const Result given = run({"verify", out, "--spec", (dir / "huge.json").string()}, SpawnOptions{.alarm_s = 60});
  EXPECT_EQ(given.code(), 2) << given.how() << given.err;
  EXPECT_EQ(given.err.rfind(refusal_start, 0), 0u) << given.err;
  EXPECT_NE(given.err.find("tensor records 2176.00 TiB"), std::string::npos) << given.err;
  // The same model in the file's metadata.
  const fs::path file = fs::path(out) / "model.safetensors";
  const std::string raw = slurp(file);
  Header h = read_header(file);
  h.h["__metadata__"]["model_spec"] = huge;
  std::string header = h.h.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string bytes(8, '\0');
  for (int b = 0; b < 8; ++b) bytes[b] = static_cast<char>((header.size() >> (8 * b)) & 0xff);
  write_file(file, bytes + header + raw.substr(h.data));
  const Result claimed = run({"verify", out, "--report", "json"}, SpawnOptions{.alarm_s = 60});
  EXPECT_EQ(claimed.code(), 2) << claimed.how() << claimed.err;
  EXPECT_EQ(claimed.err.rfind(refusal_start, 0), 0u) << claimed.err;
  EXPECT_EQ(claimed.out, "");
}

TEST_F(CliVerify, WithoutMetadataTheModelMustBeGiven) {
  TempDir dir;
  const std::string out = (dir / "a").string();
  ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", out}).code(), 0);
  // The same file without __metadata__, as another tool would write it.
  const fs::path file = fs::path(out) / "model.safetensors";
  const std::string raw = slurp(file);
  Header h = read_header(file);
  h.h.erase("__metadata__");
  std::string header = h.h.dump();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string bytes(8, '\0');
  for (int b = 0; b < 8; ++b) bytes[b] = static_cast<char>((header.size() >> (8 * b)) & 0xff);
  write_file(file, bytes + header + raw.substr(h.data));

  const Result r = run({"verify", out});
  EXPECT_EQ(r.code(), 2) << r.out << r.err;
  expect_one_error_line(r, "no metadata");
  EXPECT_EQ(r.err, "layerinit: error: " + out +
                       " has no layerinit metadata (model_spec): give the model it should hold (--preset, --spec or "
                       "--hf-config) and the options it was made with\n");
  // Given the model (and emit's defaults for the rest), it verifies.
  const json j = verify_both(out, {"--preset", "llama-tiny"}, 0);
  EXPECT_EQ(j["source"], "flags");
  EXPECT_EQ(j["ok"], true);
  // Given another seed than the file's, it differs.
  EXPECT_EQ(run({"verify", out, "--preset", "llama-tiny", "--seed", "1"}).code(), 1);
}

TEST_F(CliVerify, BadInputIsOneLineExit2) {
  TempDir dir;
  const std::string out = (dir / "a").string();
  ASSERT_EQ(run({"emit", "--preset", "llama-tiny", "--format", "safetensors", "-o", out}).code(), 0);
  struct Case {
    std::vector<std::string> args;
    std::string err;  // the line's start, after "layerinit: error: "
  };
  const std::vector<Case> cases = {
      {{"verify", out, "--report", "xml"}, "--report: unknown report format 'xml' (valid: json)"},
      {{"verify", (dir / "nothing").string()}, ""},
      {{"verify"}, "path is required"},
      {{"verify", out, "--backend", "cuda"}, "The following arguments were not expected: cuda --backend"},
      {{"verify", out, "--seed-guess", "-1"}, "--seed-guess must be a decimal integer"},
      {{"verify", out, "--dtype", "fp9"}, "--dtype"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code(), 2) << joined(c.args) << "\n" << r.err;
    EXPECT_EQ(r.out, "") << joined(c.args);
    expect_one_error_line(r, joined(c.args));
    EXPECT_EQ(r.err.rfind("layerinit: error: " + c.err, 0), 0u) << joined(c.args) << "\n" << r.err;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a"});
}

TEST_F(CliVerify, AllListsEveryTensor) {
  TempDir dir;
  const std::string out = (dir / "a.h5").string();
  const Result e = run({"emit", "--preset", "gpt2-tiny", "--report", "json", "-o", out});
  ASSERT_EQ(e.code(), 0) << e.err;
  const Result r = run({"verify", out, "--all"});
  ASSERT_EQ(r.code(), 0) << r.err;
  std::size_t equal_lines = 0;
  for (std::size_t p = 0; (p = r.out.find("\nequal      ", p)) != std::string::npos; ++p) ++equal_lines;
  EXPECT_EQ(equal_lines, emitted(e)) << r.out;
  EXPECT_EQ(r.out.rfind(out + ": hdf5 of gpt2-tiny (from its metadata), ", 0), 0u) << r.out;
}
