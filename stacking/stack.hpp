// Stacked layouts: every layer parameter of all L layers in one contiguous [L, ...] buffer.
// defines: stack, unstack, stacked_name
#pragma once

#include <vector>

#include "init/builder.hpp"

namespace layerinit {

// "model.layers." + "mlp.up_proj.weight" -> "model.layers.mlp.up_proj.weight".
std::string stacked_name(const ModelSpec& spec, const TensorSpec& t);
// [L, ...slice]: the shape of a stacked layer parameter whose layer slices have `slice` shape.
Shape stacked_shape(const ModelSpec& spec, const Shape& slice);

// Turns a per-layer model into a stacked one with in-place copies: each stacked buffer is reserved
// (address space only) and its slice i committed just before layer i is copied into it; layer i is
// freed right after. Peak: final weights + the largest layer. `memory` must be the resource the
// layers came from or share its accounting; it must support reserve() (host and CUDA do), else
// std::invalid_argument. Layers may arrive in any order of index.
Model stack(Model&& per_layer, const ModelSpec& spec, backend& be, memory_resource& memory);

// Per-layer views of a stacked model, without copying: result[i] holds layer i's tensors, each
// named as in the per-layer layout and pointing into slice i.
std::vector<std::vector<TensorView>> unstack(const Model& stacked, const ModelSpec& spec);

}  // namespace layerinit
