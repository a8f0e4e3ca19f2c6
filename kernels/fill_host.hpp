// The host fill: all cores, same bytes as the CUDA kernels.
// defines: fill_host, default_thread_count, set_fill_thread_start_hook
#pragma once

#include <cstddef>
#include <span>

#include "kernels/fill.hpp"

namespace layerinit {

int default_thread_count();  // std::thread::hardware_concurrency(), at least 1

// Fills every job with `threads` threads (0 = default_thread_count()). Work is split into chunks of
// whole Philox groups; the bytes do not depend on the split. A thread that cannot be started (a pids
// limit) is not an error: the fill goes on with those that started, at least the calling thread.
void fill_host(std::span<const FillJob> jobs, int threads = 0);

// Test seam: when set, called before the fill starts its k-th extra thread (k = 1, 2, ...); a throw
// from it is handled exactly like std::thread failing to start (EAGAIN under a pids limit). It lets
// tests make thread creation fail deterministically, even as root. Null (the default) in normal use;
// set it only while no fill runs.
using fill_thread_start_hook = void (*)(std::size_t k);
void set_fill_thread_start_hook(fill_thread_start_hook hook) noexcept;

// Fills memory elements [b, e) of one job on the calling thread (b, e within [job.begin, job.end)).
void fill_host_range(const FillJob& job, std::uint64_t b, std::uint64_t e);

}  // namespace layerinit
