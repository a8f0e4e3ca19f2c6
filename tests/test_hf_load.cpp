// Hugging Face transformers loads `layerinit emit --format safetensors` directories of the llama,
// gpt2, mixtral, qwen2 and gemma2 families as models whose parameters equal the file's bytes, and
// builds every preset's model (from its Hub config.json numbers, on the meta device) with exactly the
// preset's tensor names, shapes and parameter count. Needs a Python with torch and transformers:
// $LAYERINIT_HF_PYTHON, or the benchmark venv (.venv-bench, made by bench/cpu/run); without one the
// tests skip and say so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fstream>

#include <layerinit/init/presets.hpp>
#include <layerinit/init/spec_json.hpp>

#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {
// The Python with torch and transformers, or nothing.
std::string hf_python() {
  const char* env = std::getenv("LAYERINIT_HF_PYTHON");
  const std::string python = env ? env : std::string(LAYERINIT_SOURCE_DIR) + "/.venv-bench/bin/python";
  if (!fs::exists(python) || std::system((python + " -c 'import torch, transformers' 2>/dev/null").c_str()) != 0) return "";
  return python;
}
}  // namespace

TEST(HuggingFace, TransformersLoadsEmittedModelsWithTheSameValues) {
  const std::string python = hf_python();
  const std::string cli = std::string(LAYERINIT_BINARY_DIR) + "/bin/layerinit";
  if (!fs::exists(cli)) GTEST_SKIP() << "no layerinit binary at " << cli;
  if (python.empty()) GTEST_SKIP() << "no Python with torch and transformers (set LAYERINIT_HF_PYTHON or run bench/cpu/run)";
  layerinit::testing::TempDir dir("layerinit-hf");
  std::string dirs;
  for (const char* preset : {"llama-tiny", "gpt2-tiny", "mixtral-tiny", "qwen2.5-tiny", "gemma-2-tiny"}) {
    const std::string out = (dir / preset).string();
    const std::string cmd = cli + " emit --preset " + preset + " --dtype bf16 --seed 9 --format safetensors -o " + out + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    dirs += " " + out;
  }
  const std::string check = python + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/hf_load.py" + dirs;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

// Every preset with a Hugging Face model (all but mlp-deep): transformers' own model built from the
// same config has exactly the spec's state_dict names and shapes and its parameter count.
TEST(HuggingFace, EveryPresetMatchesTransformersModelOnTheMetaDevice) {
  const std::string python = hf_python();
  if (python.empty()) GTEST_SKIP() << "no Python with torch and transformers (set LAYERINIT_HF_PYTHON or run bench/cpu/run)";
  layerinit::testing::TempDir dir("layerinit-hf-meta");
  std::string files;
  int count = 0;
  for (const auto& name : layerinit::preset_names()) {
    if (name == "mlp-deep") continue;
    const fs::path f = dir / (name + ".json");
    std::ofstream(f) << layerinit::spec_to_json(layerinit::make_preset(name));
    files += " " + f.string();
    ++count;
  }
  EXPECT_EQ(count, 18);
  const std::string check = python + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/hf_meta.py" + files;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;

  // The comparison can fail: qwen2.5-tiny without one k_proj bias, and deepseek-v3-tiny with one
  // expert fewer, are refused.
  layerinit::ModelSpec qwen = layerinit::make_preset("qwen2.5-tiny");
  std::erase_if(qwen.layer.tensors, [](const auto& t) { return t.name == "self_attn.k_proj.bias"; });
  layerinit::ModelSpec deepseek = layerinit::make_preset("deepseek-v3-tiny");
  std::erase_if(deepseek.layer.tensors, [](const auto& t) { return t.name.starts_with("mlp.experts.3."); });
  for (const auto* broken : {&qwen, &deepseek}) {
    const fs::path f = dir / ("broken-" + broken->name + ".json");
    std::ofstream(f) << layerinit::spec_to_json(*broken);
    const std::string cmd = python + " " + LAYERINIT_SOURCE_DIR + "/tests/readers/hf_meta.py " + f.string();
    EXPECT_NE(std::system(cmd.c_str()), 0) << cmd;
  }
}
