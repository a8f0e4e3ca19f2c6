// How the HDF5 writer cuts a dataset into chunks, and the file size that implies: plain arithmetic,
// without libhdf5, so a build without HDF5 still plans an HDF5 checkpoint's bytes (layerinit plan).
#pragma once

#include <cstdint>
#include <vector>

#include "detail.hpp"

namespace layerinit::detail {

// How a dataset is cut into chunks: chunk = [1, ..., 1, k, d[p+1], ..., d[n-1]]. Every chunk is a
// contiguous run of row-major elements, and none crosses a slab boundary.
struct Chunking {
  std::vector<std::uint64_t> shape, chunk;
  std::size_t p = 0;           // the split dimension
  std::uint64_t k = 0;         // rows of dimension p per chunk
  std::uint64_t inner = 1;     // elements per row of dimension p
  std::uint64_t blocks = 0;    // chunks along dimension p
  bool empty = false;          // zero elements: a contiguous dataset of no bytes, no chunks
  std::uint64_t chunk_elements() const { return k * inner; }
  std::uint64_t count() const {
    std::uint64_t outer = 1;
    for (std::size_t i = 0; i < p; ++i) outer *= shape[i];
    return outer * blocks;
  }
};

Chunking choose_chunking(const DatasetSpec& d, std::uint64_t max_chunk_bytes);

}  // namespace layerinit::detail
