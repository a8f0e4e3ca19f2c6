// Stacked layouts: every layer parameter of all L layers in one contiguous [L, ...] buffer.
#pragma once

#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/builder.hpp>

namespace layerinit {

// Turns a per-layer model into a stacked one with in-place copies: each stacked buffer is reserved
// (address space only) and its slice i committed just before layer i is copied into it; layer i is
// freed right after. Peak: final weights + the largest layer. `memory` must be the resource the
// layers came from or share its accounting; it must support reserve() (host and CUDA do). A model,
// spec or memory that do not match is misuse (layerinit::logic_error). Layers may arrive in any order of index. MoE experts go into one
// [L, E, ...] buffer per expert weight (ExpertLayout::stacked) or stay one [L, ...] buffer per
// expert tensor, as stacked_layout(spec, experts) places them; bytes are copied unchanged.
LAYERINIT_API Model stack(Model&& per_layer, const ModelSpec& spec, backend& be, memory_resource& memory,
                          ExpertLayout experts = ExpertLayout::stacked);

// Per-layer views of a stacked model, without copying: result[i] holds layer i's tensors in
// LayerSpec order, each named as in the per-layer layout and pointing into its slice.
LAYERINIT_API std::vector<std::vector<TensorView>> unstack(const Model& stacked, const ModelSpec& spec);

}  // namespace layerinit
