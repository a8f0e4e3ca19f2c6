// Memory plans: what a build will need, computed from the spec before anything is allocated.
// defines: MemoryPlan, make_memory_plan, TrainingSetup, TrainingEstimate, estimate_training,
//          largest_batch
//
// Every peak here is derived from the same plan the builder follows (Builder::plan_*), and
// tests/test_plan.cpp checks each against the tracker's measured peak of a real or dry build.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "init/builder.hpp"
#include "init/naive.hpp"

namespace layerinit {

struct MemoryPlan {
  std::uint64_t parameters = 0;
  std::uint64_t weight_bytes = 0;        // in the build's dtypes
  std::uint64_t bytes_fp32 = 0, bytes_fp16 = 0, bytes_bf16 = 0;  // the same model in one dtype
  // Bytes of the repeated layers as runs of consecutive layers of equal size, in order, covering
  // every layer: one run when the layers are uniform (Builder::uniform_layers), so a plan of 10^9
  // layers takes no memory or time per layer.
  struct LayerRun {
    std::uint64_t first = 0, count = 0, bytes = 0;  // layers [first, first + count), `bytes` each
  };
  std::vector<LayerRun> layer_runs;
  std::uint64_t layer_bytes(std::uint64_t i) const;  // of layer i; throws std::out_of_range
  std::uint64_t pre_bytes = 0, post_bytes = 0;
  std::uint64_t largest_layer_bytes = 0;
  std::string largest_tensor;
  std::uint64_t largest_tensor_bytes = 0;
  // Predicted tracked peaks of layerinit's builds.
  std::uint64_t peak_stacked = 0, peak_per_layer = 0, peak_restack = 0, peak_streamed = 0;
  // Predicted tracked peaks of the naive strategies (init/naive.hpp), in NaiveStrategy order.
  std::uint64_t peak_naive[3] = {0, 0, 0};
};

MemoryPlan make_memory_plan(const Builder& b);

// Optimizer-state setups (bytes per parameter: weights, gradients, optimizer, master weights).
enum class TrainingSetup {
  mixed,      // 16-bit weights and gradients, fp32 master weights, fp32 Adam m and v: 2+2+4+8 = 16
  fp32,       // everything fp32 with Adam: 4+4+8 = 16
  pure_bf16,  // bf16 weights, gradients and Adam moments, no master copy: 2+2+4 = 8
};
std::string_view training_setup_name(TrainingSetup s);  // "mixed", "fp32", "pure-bf16"
TrainingSetup parse_training_setup(std::string_view s);

enum class Recompute { none, selective, full };
std::string_view recompute_name(Recompute r);

struct TrainingEstimate {
  std::uint64_t weights = 0, gradients = 0, optimizer = 0, master = 0;
  std::uint64_t states() const { return weights + gradients + optimizer + master; }
  // Activation bytes per transformer layer and for all layers (16-bit activations, Korthikanti et
  // al. 2022, table 2: s*b*h*(34 + 5*a*s/h) without recomputation, 34*s*b*h selective, 2*s*b*h
  // full). Empty for models without attention (MLPs, custom specs without heads).
  std::optional<std::uint64_t> activation_per_layer[3];
  std::optional<std::uint64_t> activation_total[3];
};

TrainingEstimate estimate_training(const ModelSpec& spec, TrainingSetup setup, std::uint64_t batch, std::uint64_t seq);
// The largest batch whose states plus activations fit in `memory` bytes, or 0 if none does (or the
// model has no activation formula).
std::uint64_t largest_batch(const ModelSpec& spec, TrainingSetup setup, std::uint64_t seq, Recompute r, std::uint64_t memory);

// "80GiB", "80GB", "1.5 TiB", "123456" (bytes). Throws std::invalid_argument naming the text.
std::uint64_t parse_byte_size(std::string_view text);

}  // namespace layerinit
