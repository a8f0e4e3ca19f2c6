// Memory plans: what a build will need, computed from the spec before anything is allocated.
//
// Every peak here is derived from the same plan the builder follows (Builder::plan_*), and
// tests/test_plan.cpp checks each against the tracker's measured peak of a real or dry build.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/shard/parallel.hpp>
#include <layerinit/shard/rank.hpp>

namespace layerinit {

// The naive strategies users hit (bench/naive runs them through the same tracker); the plan predicts
// their peaks so the gap is a number before anything is allocated.
enum class NaiveStrategy {
  all_fp32_then_cast,        // vmap over layers in fp32, then cast the tree: fp32 + target alive together
  fp32_then_cast_per_layer,  // each part in fp32, cast, fp32 freed: final + one part in fp32
  list_then_stack,           // every layer in the target dtype, then a full [L, ...] stack: twice the layers
};
inline constexpr NaiveStrategy all_naive_strategies[] = {
    NaiveStrategy::all_fp32_then_cast, NaiveStrategy::fp32_then_cast_per_layer, NaiveStrategy::list_then_stack};
LAYERINIT_API std::string_view naive_name(NaiveStrategy s);  // "all-fp32-then-cast", "fp32-then-cast-per-layer", "list-then-stack"


struct LAYERINIT_API MemoryPlan {
  std::uint64_t parameters = 0;
  std::uint64_t buffer_elements = 0;     // of buffers (ModelSpec::buffer_count): stored, not trained
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

LAYERINIT_API MemoryPlan make_memory_plan(const Builder& b);

// The plan's record: what a build of `b` makes, as bytes every face of layerinit gives for the same
// model and options (the CLI's `plan --record`, Python's Plan.record(), layerinit.torch.plan and
// layerinit.jax.plan; docs/design.md, "The plan's record"). Its first line is
// "layerinit plan record 1", then "seed <seed>" and "layout <layout>", then one line per tensor in
// walk order, tab-separated: the canonical name, logical shape, memory shape, dtype, fill (its exact
// text), regions ("-", or "<offset>+<shape>=<fill>" joined by ";"), and where the tensor goes ("pre",
// "layer <i>" with i the canonical index, "post"; in the stacked layout "layer <i> <buffer>[<slice>]"). The model's name is not
// in it: the same tensors under another model name are the same plan. It lists every tensor, so a
// caller bounds listed_tensor_count first (the CLI and the binding refuse above 2^20).
LAYERINIT_API std::string plan_record(const Builder& b);
// The tensors plan_record lists: pre + layers x per-layer + post, UINT64_MAX where that overflows.
LAYERINIT_API std::uint64_t listed_tensor_count(const ModelSpec& spec);

// Optimizer-state setups (bytes per parameter: weights, gradients, optimizer, master weights).
enum class TrainingSetup {
  mixed,      // 16-bit weights and gradients, fp32 master weights, fp32 Adam m and v: 2+2+4+8 = 16
  fp32,       // everything fp32 with Adam: 4+4+8 = 16
  pure_bf16,  // bf16 weights, gradients and Adam moments, no master copy: 2+2+4 = 8
};
LAYERINIT_API std::string_view training_setup_name(TrainingSetup s);  // "mixed", "fp32", "pure-bf16"
LAYERINIT_API TrainingSetup parse_training_setup(std::string_view s);

enum class Recompute { none, selective, full };
LAYERINIT_API std::string_view recompute_name(Recompute r);

struct TrainingEstimate {
  std::uint64_t weights = 0, gradients = 0, optimizer = 0, master = 0;
  std::uint64_t states() const { return weights + gradients + optimizer + master; }
  // Activation bytes per transformer layer and for all layers (16-bit activations, Korthikanti et
  // al. 2022, table 2: s*b*h*(34 + 5*a*s/h) without recomputation, 34*s*b*h selective, 2*s*b*h
  // full). Empty for models without attention (MLPs, custom specs without heads).
  std::optional<std::uint64_t> activation_per_layer[3];
  std::optional<std::uint64_t> activation_total[3];
};

LAYERINIT_API TrainingEstimate estimate_training(const ModelSpec& spec, TrainingSetup setup, std::uint64_t batch, std::uint64_t seq);
// The states alone (no activations) of `parameters` parameters.
LAYERINIT_API TrainingEstimate training_states(std::uint64_t parameters, TrainingSetup setup);
// The largest batch whose states plus activations fit in `memory` bytes, or 0 if none does (or the
// model has no activation formula).
LAYERINIT_API std::uint64_t largest_batch(const ModelSpec& spec, TrainingSetup setup, std::uint64_t seq, Recompute r, std::uint64_t memory);
// What one rank of a parallel plan needs (docs/sharding.md), from the same RankPlan its build follows:
// tests/test_shard_build.cpp checks each number against the tracked peaks of build_rank and
// stream_rank.
struct RankMemoryPlan {
  std::uint64_t rank = 0;
  ParallelPlan::Coords coords;
  Range layers;                     // the stage's layers
  std::uint64_t tensors = 0;        // pieces held, per-layer layout
  std::uint64_t parameters = 0;     // elements of its pieces
  std::uint64_t weight_bytes = 0;   // its pieces in the build's dtypes: the peak of build_rank, either layout
  std::uint64_t peak_streamed = 0;  // its largest part (a layer's pieces, or one piece outside the layers): emit --rank
  // Training states with every state sharded like the weights (FSDP / ZeRO-3): parameters times the
  // setup's bytes per parameter.
  TrainingEstimate states;
};
// O(tensors of one layer) per rank for uniform layers (Builder::uniform_layers), else O(its layers).
LAYERINIT_API RankMemoryPlan plan_rank(const RankPlan& r, TrainingSetup setup);
LAYERINIT_API std::vector<RankMemoryPlan> plan_ranks(const Builder& b, const ParallelPlan& plan, TrainingSetup setup);

// The rank with the most weight bytes (the first on a tie) and max / mean of the ranks' weight bytes
// (1 when all are equal; 0 for an empty list or no bytes).
struct RankBalance {
  std::uint64_t largest_rank = 0;
  double imbalance = 0;
};
LAYERINIT_API RankBalance rank_balance(const std::vector<RankMemoryPlan>& ranks);

}  // namespace layerinit
