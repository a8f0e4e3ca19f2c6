// Fill jobs for a box of a tensor: the one place that knows how a piece of a tensor becomes FillJobs.
//
// A FillJob writes runs of a tensor's global memory indices, evenly spaced, densely to dst, and an
// element's value depends only on its global index (kernels/fill.hpp), so a box of the whole tensor's
// memory is written straight into a local buffer: no full-tensor temporary, and no cost per element
// beyond the unsharded fill's.
#pragma once

#include <cstdint>
#include <vector>

#include <layerinit/init/builder.hpp>
#include <layerinit/shard/mesh.hpp>

namespace layerinit {

// Appends to `out` the jobs that fill `box` of tensor `p` (box in the coordinates of p.memory_shape)
// into a dense row-major buffer of box.shape at `dst`, with the values the unsharded build gives
// those elements: one job per 2-level piece. The run is the box's extent in its last partial dimension
// k times the whole dimensions after it; the runs are the indices of dimensions a..k-1, where a is the
// partial dimension before k nearest to it (0 if none). So a piece split in one dimension, or in
// dimension 0 and one other, or whole, is one job ([out, in / T], [L, out, in / T], [out / P, in / T]);
// a piece split in two or more non-leading dimensions is one job per index of dimensions 0..a-1
// (box.shape[0] * ... * box.shape[a - 1] jobs). Nothing for an empty box. Throws
// std::invalid_argument when the box does not lie inside p.memory_shape.
void box_fill_jobs(const PlannedTensor& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out);

}  // namespace layerinit
