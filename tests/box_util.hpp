// Helpers of the box tests (test_shard, test_composite, test_tensor_index): a planned tensor made by
// hand, and where element e of a box lies.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <layerinit/init/builder.hpp>
#include <layerinit/shard/mesh.hpp>

namespace layerinit::testing {

// A tensor of `logical` shape, stored transposed ([in, out]) when asked.
inline PlannedTensor planned_tensor(std::string name, Shape logical, DType t, FillSpec fill, bool transposed = false) {
  PlannedTensor p;
  p.name = std::move(name);
  p.shape = logical;
  p.memory_shape = logical;
  if (transposed) std::swap(p.memory_shape[0], p.memory_shape[1]);
  p.transposed = transposed;
  p.dtype = t;
  p.fill = fill;
  return p;
}

// Element e of a box (row-major over the box): its offset in the whole array and in the region the
// box was written to, both given by their strides in elements.

struct ElementOffsets {
  std::uint64_t global = 0;  // in the whole array
  std::uint64_t local = 0;   // in the region
};

inline ElementOffsets box_element(const Box& box, std::uint64_t e, const Shape& global_strides, const Shape& region_strides) {
  ElementOffsets o;
  for (std::size_t d = box.shape.size(); d-- > 0;) {
    const std::uint64_t x = e % box.shape[d];
    e /= box.shape[d];
    o.global += (box.offset[d] + x) * global_strides[d];
    o.local += x * region_strides[d];
  }
  return o;
}

}  // namespace layerinit::testing
