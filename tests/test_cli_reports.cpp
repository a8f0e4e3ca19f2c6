// What build, plan and emit report and write (tests/cli_runner.hpp runs the binary):
//   - build and emit reports agree; plan prints runs of identical layers as one row;
//   - an independent Python reader (h5py, safetensors; .venv from scripts/python-env) hashes the
//     files' raw bytes to the report's XXH3-64 values (Python's xxhash package);
//   - build --trace records every allocation and free; config.json only where transformers loads
//     the layout, with token ids inside the vocabulary; the Qwen, Gemma and DeepSeek presets end to end.
// Skips (GTEST_SKIP) when the binary was not built (LAYERINIT_BUILD_TOOLS=OFF).
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <layerinit/init/presets.hpp>
#include "cli_runner.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace layerinit::testing;
using Cli = CliTest;

namespace {
const std::string kPython = std::string(LAYERINIT_SOURCE_DIR) + "/.venv/bin/python";
}  // namespace

TEST_F(Cli, BuildAndEmitReportsAgree) {
  TempDir dir;
  struct Case {
    std::vector<std::string> model;
    const char* format;
  };
  const std::vector<Case> cases = {
      {{"--preset", "llama-tiny", "--layout", "per-layer"}, "hdf5"},
      {{"--preset", "llama-tiny", "--layout", "stacked"}, "safetensors"},
      {{"--preset", "mixtral-tiny", "--layout", "stacked", "--dtype", "fp16", "--orientation", "in-out"}, "hdf5"},
      {{"--preset", "gpt2-tiny", "--seed", "77", "--dtype-override", "*ln*=fp32", "--recipe", "megatron"}, "safetensors"},
  };
  int k = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(joined(c.model));
    std::vector<std::string> b{"build", "--backend", "cpu", "--report", "json"};
    b.insert(b.end(), c.model.begin(), c.model.end());
    const Result br = run(b);
    ASSERT_EQ(br.code(), 0) << br.err;
    const std::string target = (dir / ("m" + std::to_string(k++))).string();
    std::vector<std::string> e{"emit", "--backend", "cpu", "--report", "json", "--format", c.format, "-o", target};
    e.insert(e.end(), c.model.begin(), c.model.end());
    const Result er = run(e);
    ASSERT_EQ(er.code(), 0) << er.err;
    const json bj = json::parse(br.out), ej = json::parse(er.out);
    ASSERT_FALSE(bj["tensors"].empty());
    EXPECT_EQ(bj["tensors"], ej["tensors"]);
    for (const char* key : {"model", "dtype", "seed", "recipe", "layout", "orientation", "parameters", "total_bytes"})
      EXPECT_EQ(bj[key], ej[key]) << key;
    EXPECT_EQ(ej["format"], c.format);
    EXPECT_EQ(ej["output"], target);
    EXPECT_GT(ej["file_bytes"].get<std::uint64_t>(), ej["total_bytes"].get<std::uint64_t>());
    EXPECT_LT(ej["peak_bytes"].get<std::uint64_t>(), bj["peak_bytes"].get<std::uint64_t>());
    // The build's time and its hashing's, apart (issue 8's budget: hashing <= 10% of the process).
    EXPECT_GE(bj["wall_seconds"].get<double>(), 0.0);
    EXPECT_GE(bj["hash_seconds"].get<double>(), 0.0);
  }
}

// The plan table prints a run of identical layers as one row; --per-layer gives a row per layer. A
// layer told apart by a dtype override splits the run.
TEST_F(Cli, PlanPrintsRunsOfIdenticalLayersAsOneRow) {
  auto subtotals = [](const std::string& out) {
    std::vector<std::string> rows;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("  layer ", 0) == 0 || line.rfind("  layers ", 0) == 0) rows.push_back(line.substr(2, line.find("  ", 2) - 2));
    return rows;
  };
  Result r = run({"plan", "--preset", "llama-3-70b", "--dtype", "bf16"});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(subtotals(r.out), (std::vector<std::string>{"layers 0-79, each"}));
  EXPECT_NE(r.out.find("1711308800  1.59 GiB"), std::string::npos) << r.out;
  r = run({"plan", "--preset", "llama-tiny", "--per-layer"});
  ASSERT_EQ(r.code(), 0) << r.err;
  const std::vector<std::string> rows = subtotals(r.out);
  ASSERT_EQ(rows.size(), layerinit::make_preset("llama-tiny").num_layers);
  EXPECT_EQ(rows.front(), "layer 0 subtotal");
  r = run({"plan", "--preset", "llama-3-70b", "--dtype-override", "model.layers.1.*=fp32"});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(subtotals(r.out), (std::vector<std::string>{"layer 0 subtotal", "layer 1 subtotal", "layers 2-79, each"}));
  // 4e9 identical layers: one row, at once.
  TempDir dir;
  const std::string huge = (dir / "huge.json").string();
  write_file(huge, kHugeSpec);
  r = run({"plan", "--spec", huge});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(subtotals(r.out), (std::vector<std::string>{"layers 0-3999999999, each"}));
}

// plan --record is the plan's record (plan/plan.hpp): the golden record every face's test compares
// with (tests/plan_records/; test_plan.cpp for C++, python/tests/test_plan_record.py for the rest).
TEST_F(Cli, PlanRecordIsTheGoldenRecordOfEveryFace) {
  const fs::path source = LAYERINIT_SOURCE_DIR;
  Result r = run({"plan", "--hf-config", (source / "tests/hf_configs/tiny/llama.json").string(), "--recipe", "hf",
                  "--dtype", "fp32", "--record"});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, slurp(source / "tests/plan_records/llama_tiny_hf_fp32.txt"));
  EXPECT_EQ(r.err, "");
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--json"}, std::vector<std::string>{"--tp", "2"}}) {
    std::vector<std::string> args = {"plan", "--preset", "llama-tiny", "--record"};
    args.insert(args.end(), extra.begin(), extra.end());
    r = run(args);
    EXPECT_EQ(r.code(), 2) << extra[0];
    EXPECT_EQ(r.err, "layerinit: error: --record is the whole model's plan in a text of its own: leave out --json and the "
                     "mesh flags\n");
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(Cli, PythonReadersHashTheFilesToTheReport) {
  if (::access(kPython.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << kPython << " (run scripts/python-env to create it)";
  if (run_command({kPython, "-c", "import h5py, safetensors, xxhash"}).code() != 0)
    GTEST_SKIP() << kPython << " lacks h5py, safetensors or xxhash (run scripts/python-env)";
  TempDir dir;
  struct Case {
    const char* format;
    std::vector<std::string> model;
  };
  for (const Case& c : {Case{"hdf5", {"--preset", "llama-tiny", "--dtype-override", "*norm*=fp32"}},
                        Case{"hdf5", {"--preset", "gpt2-tiny", "--dtype", "fp16", "--layout", "stacked"}},
                        Case{"safetensors", {"--preset", "mixtral-tiny", "--layout", "stacked"}},
                        Case{"safetensors", {"--preset", "llama-tiny", "--max-shard-size", "100KB"}}}) {
    SCOPED_TRACE(std::string(c.format) + " " + joined(c.model));
    const fs::path target = dir / "m";
    std::vector<std::string> e{"emit", "--backend", "cpu", "--report", "json", "--format", c.format, "-o", target.string()};
    e.insert(e.end(), c.model.begin(), c.model.end());
    const Result er = run(e);
    ASSERT_EQ(er.code(), 0) << er.err;
    const json report = json::parse(er.out);
    // No shell between: the checkout's path may hold any character.
    const Result hashed = run_command(
        {kPython, std::string(LAYERINIT_SOURCE_DIR) + "/tests/readers/hash_checkpoint.py", c.format, target.string()});
    ASSERT_EQ(hashed.code(), 0) << hashed.how() << "\nstderr: " << hashed.err;
    const json read = json::parse(hashed.out);
    ASSERT_EQ(read.size(), report["tensors"].size());
    std::size_t bf16 = 0;
    for (const auto& t : report["tensors"]) {
      const std::string name = t["name"];
      SCOPED_TRACE(name);
      ASSERT_TRUE(read.contains(name));
      const auto& r = read[name];
      EXPECT_EQ(r["xxh3_64"], t["xxh3_64"]);
      EXPECT_EQ(r["shape"], t["shape"]);
      if (std::string(c.format) == "hdf5") {
        EXPECT_EQ(r["dtype"], t["dtype"]);
        if (t["dtype"] == "bf16") {
          ++bf16;
          EXPECT_EQ(r["numpy_dtype"], "float32");
          EXPECT_EQ(r["bf16_as_f32_exact"], true) << "h5py's float32 is not bits << 16";
        }
      } else {
        const std::string d = t["dtype"];
        EXPECT_EQ(r["dtype"], d == "bf16" ? "BF16" : d == "fp16" ? "F16" : "F32");
      }
    }
    if (std::string(c.format) == "hdf5" && c.model[1] == "llama-tiny") EXPECT_EQ(bf16, 30u);
    fs::remove_all(target);
  }
}

// build --trace: every row of a tiny model, exactly. The tracker was made without its live list, so
// a free had neither tensor nor layer (",deallocate,16,112,-1,"). Restack frees each per-layer tensor
// after its slice is committed into the [L, ...] buffer.
TEST_F(Cli, BuildTraceRecordsEveryAllocationAndFreeWithItsTensorAndLayer) {
  TempDir dir;
  const std::string spec = (dir / "tiny.json").string();
  write_file(spec, R"({"name": "trace-tiny", "family": "custom",
 "pre": [{"name": "embed.weight", "shape": [4, 2], "role": "embedding"}],
 "layer": {"prefix": "blocks.", "count": 2, "tensors": [
   {"name": "w", "shape": [2, 2], "role": "linear_weight"},
   {"name": "b", "shape": [2], "role": "linear_bias"}]},
 "post": [{"name": "head.weight", "shape": [3, 2], "role": "head_weight"}]})");
  const std::string alloc_rows = "allocate,32,32,-1,embed.weight\n"
                                 "allocate,16,48,0,blocks.0.w\n"
                                 "allocate,8,56,0,blocks.0.b\n"
                                 "allocate,16,72,1,blocks.1.w\n"
                                 "allocate,8,80,1,blocks.1.b\n"
                                 "allocate,24,104,-1,head.weight\n";
  const std::map<std::string, std::string> expected = {
      {"per-layer", alloc_rows},
      {"stacked", "allocate,32,32,-1,embed.weight\n"
                  "allocate,32,64,-1,blocks.w\n"
                  "allocate,16,80,-1,blocks.b\n"
                  "allocate,24,104,-1,head.weight\n"},
      {"restack", alloc_rows + "commit,16,120,-1,blocks.w\n"
                               "commit,8,128,-1,blocks.b\n"
                               "deallocate,16,112,0,blocks.0.w\n"
                               "deallocate,8,104,0,blocks.0.b\n"
                               "commit,16,120,-1,blocks.w\n"
                               "commit,8,128,-1,blocks.b\n"
                               "deallocate,16,112,1,blocks.1.w\n"
                               "deallocate,8,104,1,blocks.1.b\n"},
  };
  for (const auto& [layout, rows] : expected) {
    SCOPED_TRACE(layout);
    const fs::path trace = dir / ("trace-" + layout + ".csv");
    const Result r = run({"build", "--spec", spec, "--dtype", "fp32", "--backend", "cpu", "--layout", layout,
                          "--trace", trace.string()});
    ASSERT_EQ(r.code(), 0) << r.err;
    std::istringstream in(slurp(trace));
    std::string line, without_time;
    std::getline(in, line);
    EXPECT_EQ(line, "seconds,event,bytes,current_bytes,layer,tensor");
    double last = 0;
    while (std::getline(in, line)) {
      const auto comma = line.find(',');
      ASSERT_NE(comma, std::string::npos) << line;
      const double t = std::stod(line.substr(0, comma));
      EXPECT_GE(t, last) << line;  // seconds since the tracker was made, in order
      last = t;
      without_time += line.substr(comma + 1) + "\n";
    }
    EXPECT_EQ(without_time, rows);
  }
}

// A stacked (or in-out) safetensors directory had a Hugging Face config.json: from_pretrained loaded
// it, reported 36 missing and 9 unexpected keys and initialized those anew. config.json is written
// for the per-layer, out-in layout only; the layout is in the file's metadata either way.
TEST_F(Cli, SafetensorsConfigJsonOnlyForTheLayoutTransformersLoads) {
  TempDir dir;
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> files;
  };
  for (const Case& c : {Case{{"--layout", "stacked"}, {"model.safetensors"}},
                        Case{{"--orientation", "in-out"}, {"model.safetensors"}},
                        Case{{"--layout", "stacked", "--orientation", "in-out"}, {"model.safetensors"}},
                        Case{{}, {"config.json", "model.safetensors"}}}) {
    SCOPED_TRACE(joined(c.flags));
    const fs::path target = dir / "m";
    std::vector<std::string> args{"emit", "--preset", "llama-tiny", "--format", "safetensors", "--backend", "cpu", "-o",
                                  target.string()};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const Result r = run(args);
    ASSERT_EQ(r.code(), 0) << r.err;
    EXPECT_EQ(TempDir::list(target), c.files);
    fs::remove_all(target);
  }
}

// gpt2-tiny's config.json had no bos/eos ids, so transformers took GPT-2's 50256, outside its
// 512-token vocabulary. GPT-2's end-of-text token is the last one.
TEST_F(Cli, Gpt2TinyConfigJsonHasTokenIdsInsideItsVocabulary) {
  TempDir dir;
  const Result r = run({"emit", "--preset", "gpt2-tiny", "--format", "safetensors", "--backend", "cpu", "-o",
                        (dir / "g").string()});
  ASSERT_EQ(r.code(), 0) << r.err;
  const json config = json::parse(slurp(dir / "g" / "config.json"));
  EXPECT_EQ(config["vocab_size"], 512);
  EXPECT_EQ(config["bos_token_id"], 511);
  EXPECT_EQ(config["eos_token_id"], 511);
}

// The presets of issue 13 from the command line: plan at full size with transformers' counts, build
// and emit the tiny ones (reports agree), MoE experts stacked [L, E, out, in] or per expert, recipes
// with parameters.
TEST_F(Cli, QwenGemmaDeepseekPlanBuildAndEmit) {
  // DeepSeek-V3's 58 x 256 router correction biases are buffers, as transformers keeps them.
  for (const auto& [preset, parameters, buffers] : std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>>{
           {"qwen2.5-7b", 7'615'616'512ULL, 0}, {"gemma-2-9b", 9'241'705'984ULL, 0}, {"deepseek-v3", 671'026'404'352ULL, 14'848}}) {
    const Result r = run({"plan", "--preset", preset, "--json"});
    ASSERT_EQ(r.code(), 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["parameters"], parameters) << preset;
    EXPECT_EQ(j["buffers"], buffers) << preset;
    EXPECT_EQ(j["totals"]["bf16"], 2 * (parameters + buffers)) << preset;
  }
  const json ds = json::parse(run({"plan", "--preset", "deepseek-v3", "--json"}).out);
  EXPECT_EQ(ds["layers"], 61);
  EXPECT_EQ(ds["first_layer"], 3);
  EXPECT_EQ(ds["layer_bytes"].size(), 58u);
  const Result text = run({"plan", "--preset", "deepseek-v3"});
  EXPECT_NE(text.out.find("61 layers (3 before the repeated block)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("layers 3-60, each"), std::string::npos) << text.out;

  TempDir dir;
  int k = 0;
  for (const char* preset : {"qwen2.5-tiny", "gemma-2-tiny", "deepseek-v3-tiny"}) {
    for (const char* layout : {"per-layer", "stacked"}) {
      SCOPED_TRACE(std::string(preset) + " " + layout);
      const std::vector<std::string> model{"--preset", preset, "--layout", layout, "--recipe", "mup:base_width=32", "--seed", "5"};
      std::vector<std::string> b{"build", "--backend", "cpu", "--report", "json"};
      b.insert(b.end(), model.begin(), model.end());
      const Result br = run(b);
      ASSERT_EQ(br.code(), 0) << br.err;
      const fs::path target = dir / ("m" + std::to_string(k++));
      std::vector<std::string> e{"emit", "--backend", "cpu", "--report", "json", "--format", "safetensors", "-o", target.string()};
      e.insert(e.end(), model.begin(), model.end());
      const Result er = run(e);
      ASSERT_EQ(er.code(), 0) << er.err;
      const json bj = json::parse(br.out), ej = json::parse(er.out);
      EXPECT_EQ(bj["tensors"], ej["tensors"]);
      EXPECT_EQ(bj["recipe"], "mup:base_width=32");
      EXPECT_EQ(bj["experts"], "stacked");
      const layerinit::ModelSpec spec = layerinit::make_preset(preset);
      EXPECT_EQ(bj["parameters"], spec.parameter_count());
      // config.json for the families transformers loads (per-layer only).
      const bool config = std::string(layout) == "per-layer";
      EXPECT_EQ(fs::exists(target / "config.json"), config);
    }
  }
  // deepseek-v3-tiny stacked: 2 MoE layers of 4 experts, gate/up [32, 64] and down [64, 32] each.
  auto shapes = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> b{"build", "--backend", "cpu", "--report", "json", "--preset", "deepseek-v3-tiny", "--layout", "stacked"};
    b.insert(b.end(), extra.begin(), extra.end());
    const Result r = run(b);
    EXPECT_EQ(r.code(), 0) << r.err;
    std::map<std::string, json> out;
    const json report = json::parse(r.out);
    for (const auto& t : report["tensors"]) out[t["name"]] = t;
    return out;
  };
  auto fused = shapes({});
  EXPECT_EQ(fused.at("model.layers.mlp.experts.gate_proj.weight")["shape"], json({2, 4, 32, 64}));
  EXPECT_EQ(fused.at("model.layers.mlp.experts.down_proj.weight")["shape"], json({2, 4, 64, 32}));
  EXPECT_EQ(fused.at("model.layers.mlp.experts.up_proj.weight")["layers"].size(), 8u);  // per layer, per expert
  EXPECT_EQ(fused.at("model.layers.mlp.gate.weight")["shape"], json({2, 4, 64}));
  EXPECT_EQ(fused.at("model.layers.0.mlp.down_proj.weight")["shape"], json({64, 128}));  // the dense layer
  EXPECT_EQ(fused.count("model.layers.mlp.experts.0.gate_proj.weight"), 0u);
  EXPECT_EQ(fused.at("model.layers.mlp.experts.down_proj.weight")["shape"], json({2, 4, 64, 32}));
  EXPECT_EQ(shapes({"--orientation", "in-out"}).at("model.layers.mlp.experts.down_proj.weight")["shape"], json({2, 4, 32, 64}));
  auto per_expert = shapes({"--experts", "per-expert"});
  EXPECT_EQ(per_expert.at("model.layers.mlp.experts.3.down_proj.weight")["shape"], json({2, 64, 32}));
  EXPECT_EQ(per_expert.count("model.layers.mlp.experts.down_proj.weight"), 0u);
  // The fused buffer's slice hashes are the per-expert buffers' layer hashes, interleaved.
  for (std::uint64_t l = 0; l < 2; ++l)
    for (std::uint64_t e = 0; e < 4; ++e)
      EXPECT_EQ(fused.at("model.layers.mlp.experts.down_proj.weight")["layers"][l * 4 + e],
                per_expert.at("model.layers.mlp.experts." + std::to_string(e) + ".down_proj.weight")["layers"][l]);

  // Bad names: one line, exit 2.
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"build", "--preset", "deepseek-v3-tiny", "--layout", "stacked", "--experts", "fused"},
            "layerinit: error: --experts: expert layout 'fused' is unknown (valid: per-expert, stacked)\n"},
           {{"plan", "--preset", "qwen2.5-tiny", "--recipe", "mup:width=3"},
            "layerinit: error: --recipe: recipe 'mup': parameter 'width' is unknown (valid: base_width; write name:key=value)\n"},
           {{"plan", "--preset", "qwen2.5-tiny", "--recipe", "olmo-llama:std=-1"},
            "layerinit: error: --recipe: recipe 'olmo-llama': parameter std '-1' must be a positive finite number\n"}}) {
    const Result r = run(args);
    EXPECT_EQ(r.code(), 2) << joined(args);
    EXPECT_EQ(r.err, message) << joined(args);
  }
}
