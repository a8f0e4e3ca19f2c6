// Hugging Face transformers loads `layerinit emit --format safetensors` directories of the llama,
// gpt2 and mixtral families as models whose parameters equal the file's bytes. Needs a Python with
// torch and transformers: $LAYERINIT_HF_PYTHON, or the benchmark venv (.venv-bench, made by
// bench/cpu/run); without one the test skips and says so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_util.hpp"

namespace fs = std::filesystem;

TEST(HuggingFace, TransformersLoadsEmittedModelsWithTheSameValues) {
  const char* env = std::getenv("LAYERINIT_HF_PYTHON");
  const std::string python = env ? env : std::string(LAYERINIT_SOURCE_DIR) + "/.venv-bench/bin/python";
  const std::string cli = std::string(LAYERINIT_BINARY_DIR) + "/bin/layerinit";
  if (!fs::exists(cli)) GTEST_SKIP() << "no layerinit binary at " << cli;
  if (!fs::exists(python) || std::system((python + " -c 'import torch, transformers' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "no Python with torch and transformers (set LAYERINIT_HF_PYTHON or run bench/cpu/run)";
  layerinit::testing::TempDir dir("layerinit-hf");
  std::string dirs;
  for (const char* preset : {"llama-tiny", "gpt2-tiny", "mixtral-tiny"}) {
    const std::string out = (dir / preset).string();
    const std::string cmd = cli + " emit --preset " + preset + " --dtype bf16 --seed 9 --format safetensors -o " + out + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    dirs += " " + out;
  }
  const std::string check = python + " " + LAYERINIT_SOURCE_DIR + "/tests/python/hf_load.py" + dirs;
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}
