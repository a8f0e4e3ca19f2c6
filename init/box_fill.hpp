// Fill jobs for a box of a tensor: the one place that knows how a piece of a tensor becomes FillJobs,
// its regions (TensorSpec::regions) included.
//
// A FillJob writes runs of a tensor's global memory indices, evenly spaced, densely to dst, and an
// element's value depends only on its global index (kernels/fill.hpp), so a box of the whole tensor's
// memory is written straight into a local buffer: no full-tensor temporary, and no cost per element
// beyond the unsharded fill's. A tensor with regions has its box cut into disjoint boxes, each filled
// with one fill (the tensor's outside every region, a region's where it is the last one holding the
// element): the jobs of one fill may run in any order, or at once.
#pragma once

#include <cstdint>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/core/shape.hpp>
#include <layerinit/init/engine.hpp>

namespace layerinit {

// A tensor's fill as its jobs are cut from it: the job of its own fill over the whole tensor
// (fill_job_for) and each region's box in memory coordinates (transposed with the tensor) with its
// prepared params, in the tensor's order. Made once per tensor for callers that fill many boxes.
struct RegionParams {
  Box box;  // memory coordinates
  FillParams params;
};
struct TensorFill {
  FillJob whole;
  std::vector<RegionParams> regions;
};
// Prepares what p has not (prepare_fill of its fill and regions for p.dtype). Throws
// bad_input naming the tensor and the region for a region outside the tensor, of another
// rank, or whose fill p.dtype cannot hold.
LAYERINIT_API TensorFill tensor_fill(const PlannedTensor& p, std::uint64_t seed);

// Appends the jobs that fill the whole tensor p at dst (its memory, row-major): fill_job_for's one job
// without regions, else box_fill_jobs of the whole tensor.
LAYERINIT_API void tensor_fill_jobs(const PlannedTensor& p, void* dst, std::uint64_t seed, std::vector<FillJob>& out);

// Appends to `out` the jobs that fill `box` of tensor `p` (box in the coordinates of p.memory_shape)
// into a dense row-major buffer of box.shape at `dst`, with the values the unsharded build gives
// those elements. Without regions, one job per 2-level piece: the run is the box's extent in its last
// partial dimension k times the whole dimensions after it; the runs are the indices of dimensions
// a..k-1, where a is the partial dimension before k nearest to it (0 if none). So a piece split in one
// dimension, or in dimension 0 and one other, or whole, is one job ([out, in / T], [L, out, in / T],
// [out / P, in / T]); a piece split in two or more non-leading dimensions is one job per index of
// dimensions 0..a-1 (box.shape[0] * ... * box.shape[a - 1] jobs). With regions, the box is cut along
// them first (the parts outside every region, then each region's part outside the later regions) and
// each part is filled as region_fill_jobs fills a box. Nothing for an empty box; a 0-d tensor is one
// job of its one element. Throws bad_input when the box does not lie inside
// p.memory_shape.
LAYERINIT_API void box_fill_jobs(const PlannedTensor& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out);
// The same with p's fill prepared once (tensor_fill(p, seed)).
LAYERINIT_API void box_fill_jobs(const PlannedTensor& p, const TensorFill& f, const Box& box, void* dst, std::vector<FillJob>& out);

// Where a box's elements go: element (i_0, ..., i_{n-1}) of the box at data + sum(i_d * strides[d])
// elements. Empty strides: dense row-major over the box. A strided last dimension costs a run per
// element (a job's runs are contiguous); the array interfaces refuse one (not contiguous).
struct Region {
  void* data = nullptr;
  Shape strides;  // in elements, one per box dimension, or none
};

// Appends the jobs that fill `box` of tensor `p` into `dst`. With k the first dimension from which
// the region is dense: when the box is whole in the tensor's memory past dimension k, one job per
// index of dimensions 0..k-2, its runs the indices of dimension k - 1, dst_stride apart (a layer's
// [in, out] slice of a stack [in, L, out], or a [rows, cols] piece of a wider row: one job); else
// box_fill_jobs once per index of dimensions 0..k-1. A dense region is one box_fill_jobs call; a
// strided last dimension (k = n) is runs of one element (a layer's [E] of norm scales [E, L]). The
// tensor's regions cut the box as box_fill_jobs cuts it. Throws bad_input for a box
// outside the tensor; a stride count other than the box's rank is misuse (layerinit::logic_error).
LAYERINIT_API void region_fill_jobs(const PlannedTensor& p, const Box& box, const Region& dst, std::uint64_t seed,
                                    std::vector<FillJob>& out);
LAYERINIT_API void region_fill_jobs(const PlannedTensor& p, const TensorFill& f, const Box& box, const Region& dst,
                                    std::vector<FillJob>& out);

// Appends the jobs that fill memory elements [first, first + count) of p (row-major over
// p.memory_shape) densely at dst: one job without regions, else the range as at most two boxes per
// dimension (a partial row, whole rows, ...), each through box_fill_jobs. Throws bad_input
// for a range past the tensor's end.
LAYERINIT_API void range_fill_jobs(const PlannedTensor& p, const TensorFill& f, std::uint64_t first, std::uint64_t count,
                                   void* dst, std::vector<FillJob>& out);

// The first dimension from which a region of `box_shape` with `strides` is dense to the end (0: dense
// throughout, box_shape.size(): not even the last dimension); dimensions of extent 1 never break it.
LAYERINIT_API std::size_t dense_from(const Shape& box_shape, const Shape& strides);
// Row-major strides of a dense array of `shape`, in elements.
LAYERINIT_API Shape dense_strides(const Shape& shape);

}  // namespace layerinit
