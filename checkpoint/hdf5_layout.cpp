// The HDF5 writer's chunking and planned sizes (hdf5_layout.hpp).
#include "hdf5_layout.hpp"

#include <algorithm>

namespace layerinit::detail {

Chunking choose_chunking(const DatasetSpec& d, std::uint64_t max_chunk_bytes) {
  const std::size_t n = d.shape.size();
  const std::uint64_t es = dtype_size(d.dtype);
  Chunking c;
  c.shape.assign(d.shape.begin(), d.shape.end());
  // A zero dimension (torch makes such tensors): nothing to cut, and HDF5 refuses a chunk dimension of 0.
  if (std::find(d.shape.begin(), d.shape.end(), 0) != d.shape.end()) {
    c.empty = true;
    c.k = 1;
    return c;
  }
  // s: first dimension of the slab (0 when the whole tensor is one slab).
  std::size_t s = 0;
  if (d.slab_elements != 0) {
    std::uint64_t prod = 1;
    s = n;
    for (std::size_t j = n + 1; j-- > 0;) {
      if (j < n) prod *= d.shape[j];
      if (prod == d.slab_elements) s = j;
    }
  }
  if (s == n) {  // one-element slabs: one-element chunks
    c.p = n - 1;
    c.k = 1;
  } else {
    // j: the first dimension (>= s) whose suffix fits in a chunk.
    std::size_t j = n;
    std::uint64_t suffix = es;
    while (j > s && suffix * d.shape[j - 1] <= max_chunk_bytes) suffix *= d.shape[--j];
    if (j == s) {
      c.p = s;
      c.k = d.shape[s];
    } else {
      c.p = j - 1;
      const std::uint64_t rows = d.shape[c.p];
      const std::uint64_t kmax = std::max<std::uint64_t>(1, max_chunk_bytes / suffix);
      const std::uint64_t nblocks = (rows + kmax - 1) / kmax;
      c.k = (rows + nblocks - 1) / nblocks;
      for (std::uint64_t k = c.k; k <= kmax; ++k)  // prefer a divisor: no padded edge chunk
        if (rows % k == 0) {
          c.k = k;
          break;
        }
    }
  }
  c.inner = 1;
  for (std::size_t i = c.p + 1; i < n; ++i) c.inner *= d.shape[i];
  c.blocks = (d.shape[c.p] + c.k - 1) / c.k;
  c.chunk.assign(n, 1);
  c.chunk[c.p] = c.k;
  for (std::size_t i = c.p + 1; i < n; ++i) c.chunk[i] = d.shape[i];
  return c;
}


// Whole chunks (an edge chunk is stored full), an object header and a chunk index entry each.
PlannedRun hdf5_planned_run(const DatasetSpec& d, std::uint64_t count, std::uint64_t name_bytes,
                            std::uint64_t max_chunk_bytes) {
  const Chunking c = choose_chunking(d, max_chunk_bytes);
  return {saturating_mul(count, c.count() * c.chunk_elements() * dtype_size(d.dtype)),
          saturating_add(saturating_mul(count, 4096 + 64 * c.count()), name_bytes)};
}

// The superblock, root group and its attributes.
std::uint64_t hdf5_planned_fixed(std::uint64_t meta_bytes) { return (1u << 20) + meta_bytes; }

}  // namespace layerinit::detail
