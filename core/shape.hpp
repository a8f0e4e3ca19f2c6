// Tensor shapes as every layer of the library passes them: row-major dimensions, outermost first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <layerinit/core/api.hpp>

namespace layerinit {

using Shape = std::vector<std::uint64_t>;
LAYERINIT_API std::uint64_t numel(const Shape& s);       // throws std::overflow_error past 2^64
LAYERINIT_API std::string shape_string(const Shape& s);  // "[4096, 4096]"

// A piece of a tensor: elements offset[d] .. offset[d] + shape[d] - 1 of every dimension d. A rank's
// piece (shard/mesh.hpp), a region with a fill of its own (init/spec.hpp), a box to fill
// (init/box_fill.hpp).
struct LAYERINIT_API Box {
  Shape offset;
  Shape shape;
  std::uint64_t numel() const { return layerinit::numel(shape); }
  bool empty() const;  // some dimension of the piece is 0
  bool operator==(const Box&) const = default;
};
LAYERINIT_API Box whole_box(const Shape& global);
// Steps `index` (over the first index.size() dimensions of `extent`) to the next position in row-major
// order, the last dimension fastest; false past the last, `index` back at all zeros.
LAYERINIT_API bool next_index(Shape& index, const Shape& extent);  // offset 0, the global shape
// a and b's common box (boxes of one rank), when it holds an element.
LAYERINIT_API std::optional<Box> intersect(const Box& a, const Box& b);
// a without b as disjoint boxes, cut dimension by dimension, outermost first: the slabs of a below and
// above b in dimension 0, then beside it in dimension 1 within b's rows, ... (so parts keep long runs).
// {a} when they do not meet, nothing when b covers a.
LAYERINIT_API std::vector<Box> subtract(const Box& a, const Box& b);

// Counts of elements and bytes past 2^64: checked_* throw std::overflow_error("<what> overflows 64
// bits"); saturating_* stop at 2^64 - 1, for estimates that only need to exceed any real limit.
LAYERINIT_API std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what);
LAYERINIT_API std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what);
LAYERINIT_API std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b);
LAYERINIT_API std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b);

}  // namespace layerinit
