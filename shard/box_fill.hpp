// Fill jobs for a box of a tensor: the one place that knows how a piece of a tensor becomes FillJobs.
//
// A FillJob writes runs of a tensor's global memory indices, evenly spaced, densely to dst, and an
// element's value depends only on its global index (kernels/fill.hpp), so a box of the whole tensor's
// memory is written straight into a local buffer: no full-tensor temporary, and no cost per element
// beyond the unsharded fill's.
#pragma once

#include <cstdint>
#include <vector>

#include <layerinit/core/api.hpp>
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
// (box.shape[0] * ... * box.shape[a - 1] jobs). Nothing for an empty box; a 0-d tensor is one job of
// its one element. Throws std::invalid_argument when the box does not lie inside p.memory_shape.
LAYERINIT_API void box_fill_jobs(const PlannedTensor& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out);
// The same with p's whole-tensor job prepared once (fill_job_for(p, nullptr, seed)), for callers that
// fill many boxes of one tensor.
LAYERINIT_API void box_fill_jobs(const PlannedTensor& p, const FillJob& whole, const Box& box, void* dst, std::vector<FillJob>& out);

// Where a box's elements go: element (i_0, ..., i_{n-1}) of the box at data + sum(i_d * strides[d])
// elements. Empty strides: dense row-major over the box. The last dimension must be contiguous
// (stride 1) wherever the box has more than one element in it.
struct Region {
  void* data = nullptr;
  Shape strides;  // in elements, one per box dimension, or none
};

// Appends the jobs that fill `box` of tensor `p` into `dst`: box_fill_jobs once per index of the
// leading dimensions in which the region is not dense, so a region costs jobs only where its layout
// breaks the runs (a dense region, or one strided only in dimension 0 past a dense rest, is one
// box_fill_jobs call; a [rows, cols] piece of a wider row is one job per row). Throws
// std::invalid_argument for a box outside the tensor or a last dimension that is not contiguous; a
// stride count other than the box's rank is misuse (layerinit::logic_error).
LAYERINIT_API void region_fill_jobs(const PlannedTensor& p, const Box& box, const Region& dst, std::uint64_t seed,
                                    std::vector<FillJob>& out);
LAYERINIT_API void region_fill_jobs(const PlannedTensor& p, const FillJob& whole, const Box& box, const Region& dst,
                                    std::vector<FillJob>& out);

// The first dimension from which a region of `box_shape` with `strides` is dense to the end (0: dense
// throughout, box_shape.size(): not even the last dimension); dimensions of extent 1 never break it.
LAYERINIT_API std::size_t dense_from(const Shape& box_shape, const Shape& strides);
// Row-major strides of a dense array of `shape`, in elements.
LAYERINIT_API Shape dense_strides(const Shape& shape);

}  // namespace layerinit
