// The memory preflight: whether a build's planned peak fits the memory this process may use, asked
// before anything is allocated. The CLI and the Python package refuse with the same numbers.
#pragma once

#include <cstdint>
#include <string>

#include <layerinit/core/api.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/init/builder.hpp>

namespace layerinit {

// A build whose peak does not fit, refused before anything is allocated. what() names both numbers:
// "not enough memory: needs 1.44 GiB (...) at its peak (weights ... + tensor records ...), 512.00 MiB
// (...) available (cgroup v2 memory.max - memory.current of ...)". The CLI reports it as bad input
// (exit 2), Python as MemoryError (layerinit.MemoryRefusedError, with both numbers).
class LAYERINIT_API memory_refused : public error {
 public:
  memory_refused(const std::string& what, std::uint64_t needed, std::uint64_t available)
      : error(what), needed_(needed), available_(available) {}
  std::uint64_t needed() const noexcept { return needed_; }        // bytes at the peak, the records included
  std::uint64_t available() const noexcept { return available_; }  // bytes this process may use

 private:
  std::uint64_t needed_, available_;
};

// What a build or emit holds at its worst moment.
struct MemoryNeed {
  std::string peak_what;      // "weights", "the largest part", ...
  std::uint64_t peak = 0;     // the plan's peak, on the backend's memory
  std::uint64_t records = 0;  // host memory besides the tensors that grows with their count (record_bytes)
};

// An estimate of the host bytes of the lists, reports and writer state that grow with the number of
// tensors held in `layout` (each tensor, and with `slice_hashes` a hash per layer slice of every
// layer tensor, as a stacked report keeps them), in either checkpoint format. Saturates at 2^64 - 1.
LAYERINIT_API std::uint64_t record_bytes(const ModelSpec& spec, Layout layout, bool slice_hashes);

// What verify holds besides the stored tensors: a record per tensor of b's model (with a hash per layer
// slice) and three chunks of the compare (stored, the next stored, expected: checkpoint/verify.hpp) of
// at most `chunk_bytes` each, or of the model's largest tensor. Takes no time per layer, so a model
// of 2^40 layers is refused before it is walked.
LAYERINIT_API MemoryNeed verify_memory_need(const Builder& b, std::uint64_t chunk_bytes);

// Throws memory_refused when `need` exceeds what this process may use: be.available_memory() for
// the peak and the records together on the host; on a device the peak against the device's and the
// records against the host's (available_host_memory). Nothing is refused where nothing can be read.
// The environment variable LAYERINIT_TEST_AVAILABLE_MEMORY, a test hook, replaces both available
// numbers ("512MiB"; bad_input naming it when it is not a byte size). When the need
// fits, reserves its peak on the backend (backend::reserve: the CUDA pool grows once, before the
// first fill).
LAYERINIT_API void check_memory(backend& be, const MemoryNeed& need);

}  // namespace layerinit
