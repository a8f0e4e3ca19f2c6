// The layerinit binary's mesh flags (--tp --pp --ep --fsdp --rank), run as a user runs them:
//   - bad mesh input is exactly one line "layerinit: error: ...", exit 2, nothing written;
//   - emit --rank files of every rank, put together by their layerinit.shards metadata, are the
//     unsharded emit's tensors byte for byte; build --rank and emit --rank report the same hashes,
//     which are the files' bytes;
//   - plan's per-rank numbers are what build --rank and emit --rank measure (peak_bytes).
// Skips (GTEST_SKIP) when the binary was not built (LAYERINIT_BUILD_TOOLS=OFF).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include <layerinit/backends/content_hash.hpp>
#include "cli_runner.hpp"
#include "safetensors_reader.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;
using CliShard = CliTest;

namespace {

json ok_json(const std::vector<std::string>& args) {
  const Result r = run(args);
  EXPECT_EQ(r.code(), 0) << joined(args) << "\n" << r.err;
  return r.code() == 0 ? json::parse(r.out) : json();
}

}  // namespace

TEST_F(CliShard, BadMeshInputIsOneLineExitTwoAndNothingWritten) {
  TempDir dir;
  const std::string out = (dir / "ranks").string();
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {{"build", "--preset", "llama-tiny", "--tp", "2"}, {"mesh of 2 ranks", "build needs --rank R", "(0-1)"}},
      {{"emit", "--preset", "llama-tiny", "--fsdp", "3", "--format", "safetensors", "-o", out}, {"emit needs --rank R", "(0-2)"}},
      {{"build", "--preset", "llama-tiny", "--tp", "2", "--pp", "2", "--rank", "4"},
       {"--rank 4 is outside the mesh of 4 ranks", "pp 2 x fsdp 1 x ep 1 x tp 2", "ranks 0-3"}},
      {{"build", "--preset", "llama-tiny", "--rank", "1"}, {"--rank 1 is outside the mesh of 1 rank"}},
      {{"plan", "--preset", "llama-tiny", "--ep", "2"}, {"ep 2", "'llama-tiny' has no experts"}},
      {{"plan", "--preset", "mixtral-tiny", "--ep", "3"}, {"ep 3 does not divide the 4 experts of 'mixtral-tiny'"}},
      {{"plan", "--preset", "llama-tiny", "--tp", "4"}, {"tp 4 does not divide the 2 key/value heads"}},
      {{"plan", "--preset", "llama-tiny", "--pp", "5"}, {"pp 5 needs at least 5 layers", "has 4"}},
      {{"plan", "--preset", "mlp-deep", "--tp", "2"}, {"no tensor of 'mlp-deep' has a tensor-parallel rule"}},
      {{"plan", "--preset", "llama-tiny", "--tp", "0"}, {"--tp", "positive integer", "'0'"}},
      {{"plan", "--preset", "llama-tiny", "--fsdp", "-2"}, {"--fsdp", "'-2'"}},
      {{"plan", "--preset", "llama-tiny", "--rank", "0x1"}, {"--rank", "'0x1'"}},
      {{"plan", "--preset", "llama-tiny", "--tp", "4294967296", "--fsdp", "4294967296"}, {"overflows 64 bits"}},
      {{"plan", "--preset", "llama-tiny", "--fsdp", "2000000"}, {"2000000 ranks are too many to list"}},
      {{"emit", "--preset", "llama-tiny", "--tp", "2", "--rank", "0", "-o", out}, {"give --format safetensors"}},
      {{"emit", "--preset", "llama-tiny", "--tp", "2", "--rank", "0", "--format", "hdf5", "-o", out}, {"give --format safetensors"}},
      {{"emit", "--preset", "llama-tiny", "--tp", "2", "--rank", "0", "--format", "safetensors", "--max-shard-size", "1MB", "-o", out},
       {"--max-shard-size does not apply to --rank"}},
      {{"build", "--preset", "llama-tiny", "--tp", "2", "--rank", "0", "--layout", "restack"}, {"restack does not apply to --rank"}},
      {{"emit", "--preset", "llama-tiny", "--tp", "2", "--rank", "0", "--format", "safetensors", "-o", (dir / "no" / "such").string()},
       {"no/such"}},
  };
  for (const auto& c : cases) {
    const Result r = run(c.args);
    EXPECT_EQ(r.code(), 2) << joined(c.args) << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("layerinit: error:", 0), 0u) << joined(c.args) << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << joined(c.args) << "\n" << r.err;
    for (const auto& w : c.words) EXPECT_NE(r.err.find(w), std::string::npos) << joined(c.args) << ": no '" << w << "' in " << r.err;
    EXPECT_TRUE(r.out.empty()) << joined(c.args);
    EXPECT_TRUE(dir.entries().empty()) << joined(c.args);
  }
}

TEST_F(CliShard, EmitRankFilesPutTogetherAreTheUnshardedFileAndReportTheirHashes) {
  struct Case {
    std::vector<std::string> model;  // preset and build flags
    std::vector<std::string> mesh;
    std::uint64_t ranks;
  };
  const std::vector<Case> cases = {
      {{"--preset", "llama-tiny"}, {"--tp", "2", "--pp", "2", "--fsdp", "2"}, 8},
      {{"--preset", "gpt2-tiny", "--layout", "stacked", "--orientation", "in-out", "--dtype", "fp32"}, {"--tp", "2", "--pp", "2"}, 4},
      {{"--preset", "mixtral-tiny", "--dtype", "fp16", "--seed", "5"}, {"--ep", "2", "--tp", "2"}, 4},
      // Fused [L, E, out, in] experts (the stacked layout's default): each rank's block of experts.
      {{"--preset", "deepseek-v3-tiny", "--layout", "stacked"}, {"--ep", "2", "--tp", "2"}, 4},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(joined(c.model) + " " + joined(c.mesh));
    TempDir dir;
    auto with = [&](std::vector<std::string> head, const std::vector<std::string>& tail) {
      head.insert(head.end(), c.model.begin(), c.model.end());
      head.insert(head.end(), tail.begin(), tail.end());
      if (head[0] != "plan") head.insert(head.end(), {"--backend", "cpu", "--threads", "1"});
      return head;
    };
    ASSERT_EQ(run(with({"emit"}, {"--format", "safetensors", "-o", (dir / "whole").string()})).code(), 0);
    const SafetensorsFile whole = parse_safetensors(dir / "whole" / "model.safetensors");
    std::map<std::string, std::string> joined_bytes;
    std::map<std::string, std::uint64_t> covered;  // bytes written into each tensor, over all ranks
    for (const auto& [name, t] : whole.tensors) joined_bytes[name].assign(t.bytes.size(), '\0');

    std::vector<std::string> plan_args = with({"plan"}, c.mesh);
    plan_args.push_back("--json");
    const json plan = ok_json(plan_args);
    ASSERT_EQ(plan["parallel"]["ranks"], c.ranks);

    for (std::uint64_t r = 0; r < c.ranks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      std::vector<std::string> mesh = c.mesh;
      mesh.insert(mesh.end(), {"--rank", std::to_string(r)});
      std::vector<std::string> emit_tail = mesh;
      emit_tail.insert(emit_tail.end(), {"--format", "safetensors", "-o", (dir / "ranks").string(), "--report", "json"});
      const json emitted = ok_json(with({"emit"}, emit_tail));
      std::vector<std::string> build_tail = mesh;
      build_tail.insert(build_tail.end(), {"--report", "json"});
      const json built = ok_json(with({"build"}, build_tail));
      const json& per_rank = plan["parallel"]["per_rank"][r];
      EXPECT_EQ(built["rank"], r);
      EXPECT_EQ(built["ranks"], c.ranks);
      EXPECT_EQ(built["coords"], per_rank["coords"]);
      EXPECT_EQ(built["peak_bytes"], per_rank["build_peak"]);
      EXPECT_EQ(built["total_bytes"], per_rank["weights"]);
      EXPECT_EQ(built["parameters"], per_rank["parameters"]);
      EXPECT_EQ(emitted["peak_bytes"], per_rank["emit_peak"]);
      char name[64];
      std::snprintf(name, sizeof name, "rank-%05llu-of-%05llu.safetensors", (unsigned long long)r, (unsigned long long)c.ranks);
      EXPECT_EQ(emitted["output"], (dir / "ranks" / name).string());
      ASSERT_EQ(built["tensors"].size(), emitted["tensors"].size());

      const SafetensorsFile f = parse_safetensors(dir / "ranks" / name);
      const json shards = json::parse(f.metadata.at("layerinit.shards").get<std::string>());
      EXPECT_EQ(json::parse(f.metadata.at("layerinit.mesh").get<std::string>())["rank"], r);
      ASSERT_EQ(f.tensors.size(), emitted["tensors"].size());
      for (std::size_t k = 0; k < built["tensors"].size(); ++k) {
        const json& b = built["tensors"][k];
        const json& e = emitted["tensors"][k];
        const std::string n = b["name"];
        EXPECT_EQ(e["name"], n);
        EXPECT_EQ(b["xxh3_64"], e["xxh3_64"]) << n;
        EXPECT_EQ(b.value("layers", json()), e.value("layers", json())) << n;  // stacked: a hash per layer (and expert) slice
        EXPECT_EQ(b["global_shape"], shards[n]["global_shape"]) << n;
        EXPECT_EQ(b["offset"], shards[n]["offset"]) << n;
        EXPECT_FALSE(b.contains("shape")) << n;
        const auto& t = f.tensors.at(n);
        EXPECT_EQ(json(t.shape), b["local_shape"]) << n;
        char hash[17];
        std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)layerinit::content_hash(t.bytes.data(), t.bytes.size()));
        EXPECT_EQ(b["xxh3_64"], hash) << n;
        // Into the whole tensor, row by row along the last dimension.
        const auto global = shards[n]["global_shape"].get<std::vector<std::uint64_t>>();
        const auto offset = shards[n]["offset"].get<std::vector<std::uint64_t>>();
        ASSERT_EQ(whole.tensors.at(n).shape, global) << n;
        const std::size_t dims = global.size();
        const std::uint64_t es = t.dtype == "F32" ? 4 : 2, len = t.shape[dims - 1];
        std::uint64_t rows = 1;
        for (std::size_t d = 0; d + 1 < dims; ++d) rows *= t.shape[d];
        std::vector<std::uint64_t> idx(dims, 0);
        for (std::uint64_t row = 0; row < rows; ++row) {
          std::uint64_t g = 0;
          for (std::size_t d = 0; d < dims; ++d) g = g * global[d] + offset[d] + idx[d];
          std::memcpy(joined_bytes[n].data() + g * es, t.bytes.data() + row * len * es, len * es);
          for (std::size_t d = dims - 1; d-- > 0;) {
            if (++idx[d] < t.shape[d]) break;
            idx[d] = 0;
          }
        }
        covered[n] += t.bytes.size();
      }
    }
    for (const auto& [name, t] : whole.tensors) {
      EXPECT_EQ(joined_bytes[name], t.bytes) << name;
      EXPECT_EQ(covered[name] % t.bytes.size(), 0u) << name << ": a whole number of replicas";
    }
    EXPECT_EQ(TempDir::list(dir / "ranks").size(), c.ranks);
  }
}

// deepseek-v3-tiny stacked under ep 2 x tp 2: the fused expert buffers [2 layers, 4 experts, out, in]
// are split into expert blocks and tp halves, and the report says where each piece sits.
TEST_F(CliShard, BuildRankReportsFusedExpertPieces) {
  const json j = ok_json({"build", "--preset", "deepseek-v3-tiny", "--layout", "stacked", "--ep", "2", "--tp", "2", "--rank",
                          "3", "--report", "json", "--backend", "cpu", "--threads", "1"});
  std::map<std::string, json> by_name;
  for (const auto& t : j["tensors"]) by_name[t["name"]] = t;
  // Rank 3 = ep 1, tp 1: experts 2-3; gate_proj [32, 64] column-parallel, down_proj [64, 32] row-parallel.
  const json& gate = by_name.at("model.layers.mlp.experts.gate_proj.weight");
  EXPECT_EQ(gate["global_shape"], json({2, 4, 32, 64}));
  EXPECT_EQ(gate["offset"], json({0, 2, 16, 0}));
  EXPECT_EQ(gate["local_shape"], json({2, 2, 16, 64}));
  EXPECT_EQ(gate["bytes"], 2 * 2 * 16 * 64 * 2);
  EXPECT_EQ(gate["layers"].size(), 4u);  // per layer, per expert
  const json& down = by_name.at("model.layers.mlp.experts.down_proj.weight");
  EXPECT_EQ(down["offset"], json({0, 2, 0, 16}));
  EXPECT_EQ(down["local_shape"], json({2, 2, 64, 16}));
  EXPECT_EQ(by_name.count("model.layers.mlp.experts.2.gate_proj.weight"), 0u);  // no per-expert tensors
  // The shared experts and the dense layer's MLP follow tp too; the router is whole.
  EXPECT_EQ(by_name.at("model.layers.mlp.shared_experts.up_proj.weight")["offset"], json({0, 16, 0}));
  EXPECT_EQ(by_name.at("model.layers.0.mlp.down_proj.weight")["local_shape"], json({64, 64}));
  EXPECT_EQ(by_name.at("model.layers.mlp.gate.weight")["local_shape"], json({2, 4, 64}));
  std::uint64_t bytes = 0;
  for (const auto& t : j["tensors"]) bytes += t["bytes"].get<std::uint64_t>();
  EXPECT_EQ(j["peak_bytes"], bytes);
  EXPECT_EQ(j["total_bytes"], bytes);
}

// llama-3.1-405b on 8-way tensor and 16-way pipeline parallelism (128 ranks), planned without
// allocating anything.
TEST_F(CliShard, PlanOfLlama31_405bOnTp8Pp16) {
  // By hand, per tp rank: a layer's q and o 16384 x 16384 / 8 each (33,554,432), k and v 1024 x
  // 16384 / 8 (2,097,152 each), gate, up and down 53248 x 16384 / 8 (109,051,904 each), its two
  // norms whole (32,768): 398,491,648 parameters. 126 layers over 16 stages: 8 layers on stages
  // 0-13, 7 on 14 and 15. Stage 0 adds the vocab-parallel embedding, 128256 / 8 x 16384 =
  // 262,668,288: 8 x 398,491,648 + 262,668,288 = 3,450,601,472 parameters, 6,901,202,944 bytes in
  // bf16, the largest rank. Stage 15: 7 layers, lm_head's 262,668,288 and the final norm's 16,384:
  // 3,052,126,208 parameters. The mean is 405,853,388,800 x 2 / 128 = 6,341,459,200 bytes, so the
  // imbalance is 6,901,202,944 / 6,341,459,200 = 1.0883.
  const std::vector<std::string> args = {"plan", "--preset", "llama-3.1-405b", "--dtype", "bf16", "--tp", "8", "--pp", "16"};
  const Result r = run(args);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("llama-3.1-405b (llama): 405853388800 parameters, 126 layers, bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parallel: pp 16 x fsdp 1 x ep 1 x tp 8 = 128 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n0-7                0  0-7             3450601472"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n112-119           14  112-118         2789441536"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n120-127           15  119-125         3052126208"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest rank 0: weights 6.43 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("imbalance 1.088 "), std::string::npos) << r.out;

  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  const json j = ok_json(with_json);
  const json& p = j["parallel"];
  ASSERT_EQ(p["per_rank"].size(), 128u);
  EXPECT_EQ(p["largest_rank"], 0);
  EXPECT_EQ(p["per_rank"][0]["weights"], 6'901'202'944ULL);
  EXPECT_EQ(p["per_rank"][0]["parameters"], 3'450'601'472ULL);
  EXPECT_EQ(p["per_rank"][0]["layers"], json::array({0, 8}));
  EXPECT_EQ(p["per_rank"][127]["parameters"], 3'052'126'208ULL);
  EXPECT_EQ(p["per_rank"][127]["layers"], json::array({119, 7}));
  EXPECT_EQ(p["per_rank"][64]["weights"], 2 * 8 * 398'491'648ULL);
  std::uint64_t params = 0;
  for (const auto& rank : p["per_rank"]) params += rank["parameters"].get<std::uint64_t>();
  // Every tp rank holds the norms whole: 126 x 2 + 1 norms of 16384, 7 times more than once.
  EXPECT_EQ(params, 405'853'388'800ULL + 7ULL * (126 * 2 + 1) * 16384);
}

TEST_F(CliShard, PlanPrintsACompactPerRankTable) {
  const Result r = run({"plan", "--preset", "llama-tiny", "--tp", "2", "--pp", "2", "--rank", "3"});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("parallel: pp 2 x fsdp 1 x ep 1 x tp 2 = 4 ranks; rank = ((pp * 1 + fsdp) * 1 + ep) * 2 + tp"), std::string::npos)
      << r.out;
  // Ranks of a stage hold the same numbers: one row each.
  EXPECT_NE(r.out.find("\n0-1 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n2-3 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 3 (pp 1, fsdp 0, ep 0, tp 1), layers 2-3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.2.mlp.down_proj.weight                  [64, 176]        [0, 88]      [64, 88]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  layers 2-3, each"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest rank 2:"), std::string::npos) << r.out;  // the final norm tips the last stage
  EXPECT_NE(r.out.find("imbalance 1.001"), std::string::npos) << r.out;  // 125568 / ((125440 + 125568) / 2)

  const json j = ok_json({"plan", "--preset", "llama-tiny", "--tp", "2", "--pp", "2", "--json"});
  const json& p = j["parallel"];
  ASSERT_EQ(p["per_rank"].size(), 4u);
  std::uint64_t total = 0, params = 0;
  for (const auto& r : p["per_rank"]) total += r["weights"].get<std::uint64_t>(), params += r["parameters"].get<std::uint64_t>();
  // tp splits everything but the norms, which both tp ranks hold: the parameters plus the norms once more.
  const std::uint64_t norms = (4 * 2 + 1) * 64;
  EXPECT_EQ(params, j["parameters"].get<std::uint64_t>() + norms);
  EXPECT_EQ(total, 2 * params);
  EXPECT_EQ(p["largest_rank"], 2);
  EXPECT_EQ(p["per_rank"][2]["layers"], json::array({2, 2}));
  EXPECT_FALSE(p.contains("rank_tensors"));
  // Without mesh flags the plan has no "parallel" at all.
  EXPECT_FALSE(ok_json({"plan", "--preset", "llama-tiny", "--json"}).contains("parallel"));
}

TEST_F(CliShard, HelpListsTheMeshFlags) {
  for (const char* cmd : {"plan", "build", "emit"}) {
    const Result r = run({cmd, "--help"});
    EXPECT_EQ(r.code(), 0);
    for (const char* flag : {"--tp", "--pp", "--ep", "--fsdp", "--rank"}) EXPECT_NE(r.out.find(flag), std::string::npos) << cmd << " " << flag;
  }
}
