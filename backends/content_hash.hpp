// The report hash of tensor contents: XXH3-64 (seed 0) of the raw bytes, exactly xxhash's
// XXH3_64bits and Python's xxhash.xxh3_64 of the same bytes. Not part of the value contract (the
// tensor-name hash that keys Philox is FNV-1a 64, kernels/philox.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <layerinit/core/api.hpp>

namespace layerinit {

// One-shot XXH3-64 of host memory.
LAYERINIT_API std::uint64_t content_hash(const void* host_data, std::size_t bytes);

// Streaming XXH3-64: update() with consecutive chunks of host memory, in order; digest() equals
// content_hash() of their concatenation, however the bytes were split. Move-only.
class LAYERINIT_API ContentHash {
 public:
  ContentHash();
  ~ContentHash();
  ContentHash(ContentHash&&) noexcept;
  ContentHash& operator=(ContentHash&&) noexcept;

  // A hash of the same bytes so far, to go on apart (verify: the expected side of an equal prefix).
  ContentHash copy() const;

  void update(const void* host_data, std::size_t bytes);
  std::uint64_t digest() const;  // of everything so far; update() may continue afterwards

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace layerinit
