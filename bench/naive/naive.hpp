// The naive strategies users hit, reproduced through the same tracker so the gap is a number. A
// benchmark and test baseline (bench/, tests/), not library API; plan/ predicts their peaks.
#pragma once

#include <string_view>

#include <layerinit/plan/plan.hpp>

namespace layerinit {

// Runs the strategy on `be` with every allocation through `memory`, and returns the model it ends
// with (per-layer, or stacked for list_then_stack). The bytes equal the builder's: casting an fp32
// fill rounds the same float values to nearest. Casts run on the host; a device backend throws
// std::invalid_argument (the dry backend only counts).
Model run_naive(NaiveStrategy s, const Builder& builder, backend& be, memory_resource& memory);

}  // namespace layerinit
