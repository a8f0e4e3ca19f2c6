// Hugging Face transformers and layerinit agree: every preset and every config.json of
// tests/hf_configs/ (and tiny/) builds in transformers on the meta device with exactly the spec's
// tensor names, shapes, buffers and parameter count; the tiny configs and presets emitted as
// safetensors load in from_pretrained with no missing, unexpected or re-initialized weight and every
// tensor equal to the file. Needs a Python with torch and transformers: $LAYERINIT_HF_PYTHON, or the
// benchmark venv (.venv-bench, made by bench/cpu/run); without one those tests skip and say so.
// `plan --hf-config` needs no Python.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <layerinit/checkpoint/hf_config.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec_json.hpp>

#include "test_util.hpp"

namespace fs = std::filesystem;
using layerinit::testing::slurp;

namespace {

const fs::path kConfigs = fs::path(LAYERINIT_SOURCE_DIR) / "tests" / "hf_configs";
const std::string kCli = std::string(LAYERINIT_BINARY_DIR) + "/bin/layerinit";

// The Python with torch and transformers, or nothing.
std::string hf_python() {
  const char* env = std::getenv("LAYERINIT_HF_PYTHON");
  const std::string python = env ? env : std::string(LAYERINIT_SOURCE_DIR) + "/.venv-bench/bin/python";
  if (!fs::exists(python) || std::system((python + " -c 'import torch, transformers' 2>/dev/null").c_str()) != 0) return "";
  return python;
}

// tiny/glm4_moe.json with n_shared_experts 0, written into `dir`: Glm4MoeMoE still makes
// mlp.shared_experts, of zero elements, which the checkpoint must hold to load without missing keys.
fs::path glm4_moe_without_shared_experts(const fs::path& dir) {
  auto config = nlohmann::json::parse(slurp(kConfigs / "tiny" / "glm4_moe.json"));
  config["n_shared_experts"] = 0;
  const fs::path f = dir / "glm4_moe-no-shared.json";
  std::ofstream(f) << config.dump(2);
  return f;
}

std::vector<fs::path> configs(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << cmd;
  return out;
}

}  // namespace

// plan --hf-config prints the parameters as transformers counts them (test_hf_spec pins the
// counts) and the buffers apart.
TEST(HuggingFace, PlanOfEachConfigCountsParametersAndBuffers) {
  if (!fs::exists(kCli)) GTEST_SKIP() << "no layerinit binary at " << kCli;
  for (const auto& f : configs(kConfigs)) {
    SCOPED_TRACE(f.string());
    const layerinit::ModelSpec s = layerinit::load_hf_config(f.string());
    const auto j = nlohmann::json::parse(run(kCli + " plan --json --hf-config " + f.string()));
    EXPECT_EQ(j["model"], f.stem().string());
    EXPECT_EQ(j["parameters"], s.parameter_count());
    EXPECT_EQ(j["buffers"], s.buffer_count());
  }
  const std::string text = run(kCli + " plan --hf-config " + (kConfigs / "deepseek-v3.json").string());
  EXPECT_NE(text.find("deepseek-v3 (deepseek_v3): 671026404352 parameters, 14848 buffer elements, 61 layers"), std::string::npos)
      << text;
  // build and emit report them apart too: GLM-4.5's tiny model has 2 MoE layers of 4 router biases.
  const std::string glm = (kConfigs / "tiny" / "glm4_moe.json").string();
  const auto b = nlohmann::json::parse(run(kCli + " build --backend cpu --report json --hf-config " + glm));
  EXPECT_EQ(b["parameters"], 189'856u);
  EXPECT_EQ(b["buffers"], 8u);
  EXPECT_NE(run(kCli + " build --backend cpu --hf-config " + glm).find("glm4_moe: 189856 parameters, 8 buffer elements in 73 tensors"),
            std::string::npos);
  layerinit::testing::TempDir dir("layerinit-hf-emit");
  const auto e = nlohmann::json::parse(
      run(kCli + " emit --backend cpu --report json --format safetensors -o " + (dir / "m").string() + " --hf-config " + glm));
  EXPECT_EQ(e["buffers"], 8u);
}

TEST(HuggingFace, TransformersLoadsEmittedModelsWithTheSameValues) {
  const std::string python = hf_python();
  if (!fs::exists(kCli)) GTEST_SKIP() << "no layerinit binary at " << kCli;
  if (python.empty()) GTEST_SKIP() << "no Python with torch and transformers (set LAYERINIT_HF_PYTHON or run bench/cpu/run)";
  layerinit::testing::TempDir dir("layerinit-hf");
  std::string dirs;
  auto emit = [&](const std::string& model, const std::string& out) {
    const std::string cmd = kCli + " emit " + model + " --dtype bf16 --seed 9 --format safetensors -o " + out + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    dirs += " " + out;
  };
  for (const char* preset : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "qwen2.5-tiny", "gemma-2-tiny", "deepseek-v3-tiny"})
    emit(std::string("--preset ") + preset, (dir / preset).string());
  for (const auto& f : configs(kConfigs / "tiny")) {
    const fs::path out = dir / ("hf-" + f.stem().string());
    emit("--hf-config " + f.string(), out.string());
    EXPECT_EQ(slurp(out / "config.json"), slurp(f)) << "emit --hf-config writes the user's config.json as it is";
  }
  emit("--hf-config " + glm4_moe_without_shared_experts(dir.path()).string(), (dir / "hf-glm4_moe-no-shared").string());
  const std::string check = python + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/hf_load.py" + dirs;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

// Every preset with a Hugging Face model (all but mlp-deep), from the config.json emit writes for
// it, and every config of tests/hf_configs/: transformers' own model has exactly the spec's
// state_dict names, shapes and buffers and its parameter count.
TEST(HuggingFace, EveryPresetAndConfigMatchesTransformersOnTheMetaDevice) {
  const std::string python = hf_python();
  if (python.empty()) GTEST_SKIP() << "no Python with torch and transformers (set LAYERINIT_HF_PYTHON or run bench/cpu/run)";
  layerinit::testing::TempDir dir("layerinit-hf-meta");
  std::string pairs;
  auto add = [&](const layerinit::ModelSpec& spec, const fs::path& config, const std::string& tag) {
    const fs::path f = dir / (tag + ".spec.json");
    std::ofstream(f) << layerinit::spec_to_json(spec);
    pairs += " " + config.string() + " " + f.string();
  };
  int count = 0;
  for (const auto& name : layerinit::preset_names()) {
    const layerinit::ModelSpec spec = layerinit::make_preset(name);
    if (!layerinit::has_config_json(spec)) continue;
    const fs::path config = dir / (name + ".config.json");
    std::ofstream(config) << layerinit::config_json(spec, layerinit::DType::bf16);
    add(spec, config, name);
    ++count;
  }
  EXPECT_EQ(count, 18);
  for (const auto* sub : {"", "tiny"})
    for (const auto& f : configs(kConfigs / sub)) add(layerinit::load_hf_config(f.string()), f, std::string(sub) + f.stem().string());
  const fs::path no_shared = glm4_moe_without_shared_experts(dir.path());
  add(layerinit::load_hf_config(no_shared.string()), no_shared, "glm4_moe-no-shared");
  const std::string check = python + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/hf_meta.py" + pairs;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;

  // The comparison can fail: qwen2.5-tiny without one k_proj bias, deepseek-v3-tiny with one expert
  // fewer, and its correction bias called a parameter, are refused.
  layerinit::ModelSpec qwen = layerinit::make_preset("qwen2.5-tiny");
  std::erase_if(qwen.layer.tensors, [](const auto& t) { return t.name == "self_attn.k_proj.bias"; });
  layerinit::ModelSpec deepseek = layerinit::make_preset("deepseek-v3-tiny");
  std::erase_if(deepseek.layer.tensors, [](const auto& t) { return t.name.starts_with("mlp.experts.3."); });
  layerinit::ModelSpec buffer = layerinit::make_preset("deepseek-v3-tiny");
  for (auto& t : buffer.layer.tensors) t.buffer = false;
  buffer.name = "deepseek-v3-tiny-no-buffers";
  std::string broken_pairs;
  for (const auto* broken : {&qwen, &deepseek, &buffer}) {
    const fs::path spec = dir / ("broken-" + broken->name + ".json"), config = dir / ("broken-" + broken->name + ".config.json");
    std::ofstream(spec) << layerinit::spec_to_json(*broken);
    std::ofstream(config) << layerinit::config_json(*broken, layerinit::DType::bf16);
    broken_pairs += " " + config.string() + " " + spec.string();
  }
  const std::string differ = python + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/hf_meta.py --differ" + broken_pairs;
  EXPECT_EQ(std::system(differ.c_str()), 0) << differ;
}
