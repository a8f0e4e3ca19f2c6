// The naive strategies users hit, reproduced through the same tracker so the gap is a number.
// defines: NaiveStrategy, naive_name, all_naive_strategies, run_naive
#pragma once

#include <string_view>

#include "init/builder.hpp"

namespace layerinit {

enum class NaiveStrategy {
  all_fp32_then_cast,        // vmap over layers in fp32, then cast the tree: fp32 + target alive together
  fp32_then_cast_per_layer,  // each part in fp32, cast, fp32 freed: final + one part in fp32
  list_then_stack,           // every layer in the target dtype, then a full [L, ...] stack: twice the layers
};
inline constexpr NaiveStrategy all_naive_strategies[] = {
    NaiveStrategy::all_fp32_then_cast, NaiveStrategy::fp32_then_cast_per_layer, NaiveStrategy::list_then_stack};
std::string_view naive_name(NaiveStrategy s);  // "all-fp32-then-cast", "fp32-then-cast-per-layer", "list-then-stack"

// Runs the strategy on `be` with every allocation through `memory`, and returns the model it ends
// with (per-layer, or stacked for list_then_stack). The bytes equal the builder's: casting an fp32
// fill rounds the same float values to nearest. Casts run on the host; a device backend throws
// std::invalid_argument (the dry backend only counts).
Model run_naive(NaiveStrategy s, const Builder& builder, backend& be, memory_resource& memory);

}  // namespace layerinit
