// The host fill: every CPU the process may use, same bytes as the CUDA kernels.
#pragma once

#include <span>

#include <layerinit/kernels/fill.hpp>

namespace layerinit {

int default_thread_count();  // usable_cpu_count() (core/cpus.hpp): affinity and cgroup quota, at least 1

// Fills every job with `threads` threads (0 = default_thread_count()). Work is split into chunks of
// whole Philox groups: parts of long runs, groups of short runs, tiles of transposed ones; the bytes
// do not depend on the split. Every job is checked (check_fill_job) before anything is written. A thread that cannot be started (a pids
// limit) is not an error: the fill goes on with those that started, at least the calling thread.
void fill_host(std::span<const FillJob> jobs, int threads = 0);

}  // namespace layerinit
