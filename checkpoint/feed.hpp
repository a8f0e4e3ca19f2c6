// Internal to checkpoint/: the one way emit, emit_rank and emit_parallel move built parts into a
// writer. Not installed as API.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <layerinit/backends/backend.hpp>
#include <layerinit/checkpoint/emit.hpp>
#include <layerinit/checkpoint/writer.hpp>

namespace layerinit::detail {

// Never throws: a size that cannot be read is no failure of the checkpoint (0 then).
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

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Where one tensor of a part goes: all of dataset `dataset`, or slice `slice` of it (a stacked
// dataset: elements from slice * the tensor's count, with a hash of its own).
struct FeedSlot {
  std::string_view dataset;
  std::optional<std::uint64_t> slice;
};

// Writes the parts of a streamed build (in host or device memory) into a writer's datasets, hashing
// the bytes on the way (a stacked dataset receives its slices in order), and reports progress.
class DatasetFeed {
 public:
  DatasetFeed(backend& be, CheckpointWriter& w, const EmitOptions& opts, std::uint64_t layers_total,
              std::chrono::steady_clock::time_point t0)
      : be_(be), w_(w), opts_(opts), t0_(t0), digest_(w.datasets().size(), 0), slices_(w.datasets().size()) {
    // Device memory comes through staging, at least one element of any dtype.
    if (be.memory().kind() != MemoryKind::host) staging_.resize(std::max<std::uint64_t>(opts.staging_bytes, 8));
    progress_.layers_total = layers_total;
    const auto& d = w.datasets();
    index_.reserve(d.size());
    for (std::size_t k = 0; k < d.size(); ++k) {
      index_.emplace(d[k].name, k);
      progress_.bytes_total += numel(d[k].shape) * dtype_size(d[k].dtype);
    }
  }

  // The writer's dataset named `name`, if it has one.
  std::optional<std::size_t> find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? std::nullopt : std::optional(it->second);
  }

  // Writes tensor j of a part into slot(j), then reports progress (opts.progress).
  void put_part(bool layer, std::span<const TensorView> tensors, const std::function<FeedSlot(std::size_t)>& slot) {
    for (std::size_t j = 0; j < tensors.size(); ++j) {
      const FeedSlot s = slot(j);
      const std::size_t k = index_.at(s.dataset);
      const TensorView& v = tensors[j];
      if (!s.slice) {
        ContentHash h;
        put(v, k, 0, h, nullptr);
        digest_[k] = h.digest();
        continue;
      }
      ContentHash& whole = open_[k];
      ContentHash own;
      put(v, k, *s.slice * numel(v.shape), whole, &own);
      auto& hashes = slices_[k];
      if (hashes.size() <= *s.slice) hashes.resize(*s.slice + 1);
      hashes[*s.slice] = own.digest();
    }
    if (layer) ++progress_.layers_done;
    progress_.seconds = seconds_since(t0_);
    if (opts_.progress) opts_.progress(progress_);
  }

  // Dataset k's hash once all its bytes went through, and a stacked dataset's slice hashes.
  std::uint64_t digest(std::size_t k) const {
    const auto it = open_.find(k);
    return it == open_.end() ? digest_[k] : it->second.digest();
  }
  const std::vector<std::uint64_t>& slice_hashes(std::size_t k) const { return slices_[k]; }

  // The writer's datasets with their hashes, in its order.
  std::vector<TensorReport> reports() const {
    std::vector<TensorReport> out;
    const auto& d = w_.datasets();
    out.reserve(d.size());
    for (std::size_t k = 0; k < d.size(); ++k) {
      TensorReport& t = out.emplace_back(d[k].name, d[k].shape, d[k].dtype);
      t.hash = digest(k);
      t.layer_hashes = slices_[k];
    }
    return out;
  }

 private:
  void put(const TensorView& v, std::size_t k, std::uint64_t first, ContentHash& hash, ContentHash* own) {
    const std::uint64_t esize = dtype_size(v.dtype);
    // Pieces of whole elements: the writer takes element counts.
    const std::span<unsigned char> pieces(staging_.data(), staging_.size() / esize * esize);
    read_on_host(be_, v.data, v.bytes(), pieces, [&](const void* host, std::uint64_t offset, std::uint64_t nbytes) {
      hash.update(host, nbytes);
      if (own) own->update(host, nbytes);
      w_.write(k, first + offset / esize, host, nbytes / esize);
      progress_.bytes_done += nbytes;
    });
  }

  backend& be_;
  CheckpointWriter& w_;
  const EmitOptions& opts_;
  std::chrono::steady_clock::time_point t0_;
  EmitProgress progress_;
  std::vector<unsigned char> staging_;
  std::unordered_map<std::string_view, std::size_t> index_;  // names live in the writer's datasets
  std::vector<std::uint64_t> digest_;                          // whole datasets
  std::map<std::size_t, ContentHash> open_;                    // stacked datasets, written slice by slice
  std::vector<std::vector<std::uint64_t>> slices_;
};

// The checks emit_checkpoint and emit_parallel make before any work: layers in order, a backend that
// holds bytes (else misuse: layerinit::logic_error), config.json only where hf_loadable. Throws
// bad_input.
void check_emit(const Builder& b, backend& be, const EmitOptions& opts);

// The cancellation point emit passes to the engine: opts.cancel set stops the build between parts.
inline std::function<void()> cancellation(const EmitOptions& opts) {
  if (!opts.cancel) return {};
  return [c = opts.cancel] {
    if (c->load()) throw error("interrupted");
  };
}

// The writer's before_publish of an emit: completes `result` from the staged files (file_bytes, what
// the rename will not change) and the time so far, then stops on a cancel that came meanwhile and
// runs the caller's opts.before_publish: the last moment a failure leaves the target as it was.
inline CheckpointWriter::BeforePublish before_publish(const EmitOptions& opts, EmitResult& result,
                                                      std::chrono::steady_clock::time_point t0) {
  return [&opts, &result, t0](const std::filesystem::path& staged) {
    result.file_bytes = disk_bytes(staged);
    result.seconds = seconds_since(t0);
    if (const auto stop = cancellation(opts)) stop();
    if (opts.before_publish) opts.before_publish(result);
  };
}

}  // namespace layerinit::detail
