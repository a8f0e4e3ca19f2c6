// Fill jobs for a box of a tensor: the one place that knows how a piece of a tensor becomes FillJobs.
//
// A FillJob writes a contiguous range of a tensor's global memory indices [begin, end) to dst, and
// an element's value depends only on its global index (kernels/fill.hpp), so any contiguous run of the
// whole tensor's memory can be written straight into a local buffer: no full-tensor temporary, and no
// cost per element beyond the unsharded fill's.
#pragma once

#include <cstdint>
#include <vector>

#include <layerinit/init/builder.hpp>
#include <layerinit/shard/mesh.hpp>

namespace layerinit {

// Appends to `out` the jobs that fill `box` of tensor `p` (box in the coordinates of p.memory_shape)
// into a dense row-major buffer of box.shape at `dst`, with the values the unsharded build gives
// those elements: one job per contiguous run of the whole tensor's memory, so a piece split only in
// its first dimension (or whole) is one job, a piece split in dimension k is one job per index of
// dimensions 0..k-1. Nothing for an empty box. Throws std::invalid_argument when the box does not lie
// inside p.memory_shape.
void box_fill_jobs(const PlannedTensor& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out);

}  // namespace layerinit
