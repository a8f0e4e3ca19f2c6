// The host fill: all cores, same bytes as the CUDA kernels.
#pragma once

#include <span>

#include <layerinit/kernels/fill.hpp>

namespace layerinit {

int default_thread_count();  // std::thread::hardware_concurrency(), at least 1

// Fills every job with `threads` threads (0 = default_thread_count()). Work is split into chunks of
// whole Philox groups; the bytes do not depend on the split.
void fill_host(std::span<const FillJob> jobs, int threads = 0);

// Fills memory elements [b, e) of one job on the calling thread (b, e within [job.begin, job.end)).
void fill_host_range(const FillJob& job, std::uint64_t b, std::uint64_t e);

}  // namespace layerinit
