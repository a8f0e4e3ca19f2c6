// Internal to checkpoint/: what emit, emit_rank and emit_parallel share to move built tensors into
// writers. Not installed as API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <layerinit/backends/backend.hpp>
#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/writer.hpp>
#include <layerinit/core/text.hpp>

namespace layerinit::detail {

// Runs after the commit, so it never throws: a failure here must not report a published checkpoint
// as failed (0 when the size cannot be read).
inline std::uint64_t disk_bytes(const std::filesystem::path& target) noexcept {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(target, ec)) {
    const std::uint64_t n = fs::file_size(target, ec);
    return ec ? 0 : n;
  }
  std::uint64_t n = 0;
  for (fs::recursive_directory_iterator it(target, ec), end; !ec && it != end; it.increment(ec)) {
    const std::uint64_t size = it->is_regular_file(ec) ? it->file_size(ec) : 0;
    if (!ec) n += size;
  }
  return n;
}

// Writes tensor views (in host or device memory) into a writer's datasets, hashing the bytes as they
// pass into each dataset's running hash (a stacked dataset receives its layer slices in order).
class DatasetFeed {
 public:
  DatasetFeed(backend& be, CheckpointWriter& w, std::size_t datasets, std::uint64_t staging_bytes, EmitProgress& progress)
      : be_(be), w_(w), hash_(datasets), progress_(progress) {
    // Device memory comes through staging, at least one element of any dtype.
    if (be.memory().kind() != MemoryKind::host) staging_.resize(std::max<std::uint64_t>(staging_bytes, 8));
  }
  // View v into dataset k at element `first`; its bytes also go into `own` when given.
  void put(const TensorView& v, std::size_t k, std::uint64_t first, ContentHash* own) {
    // A stacked dataset has the dtype of layer 0's tensor; a dtype override that names one layer
    // would otherwise pour another dtype's bytes into it.
    const DatasetSpec& d = w_.datasets()[k];
    if (v.dtype != d.dtype)
      throw std::invalid_argument("emit: stacked layout needs one dtype per layer parameter, but " + printable(v.name) + " is " +
                                  std::string(dtype_name(v.dtype)) + " and " + printable(d.name) + " is " +
                                  std::string(dtype_name(d.dtype)));
    const std::uint64_t esize = dtype_size(v.dtype);
    // Pieces of whole elements: the writer takes element counts.
    const std::span<unsigned char> pieces(staging_.data(), staging_.size() / esize * esize);
    read_on_host(be_, v.data, v.bytes(), pieces, [&](const void* host, std::uint64_t offset, std::uint64_t nbytes) {
      hash_[k].update(host, nbytes);
      if (own) own->update(host, nbytes);
      w_.write(k, first + offset / esize, host, nbytes / esize);
      progress_.bytes_done += nbytes;
    });
  }
  std::uint64_t digest(std::size_t k) const { return hash_[k].digest(); }

 private:
  backend& be_;
  CheckpointWriter& w_;
  std::vector<unsigned char> staging_;
  std::vector<ContentHash> hash_;
  EmitProgress& progress_;
};

}  // namespace layerinit::detail
