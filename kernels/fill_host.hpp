// The host fill: all cores, same bytes as the CUDA kernels.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include <layerinit/kernels/fill.hpp>

namespace layerinit {

int default_thread_count();  // std::thread::hardware_concurrency(), at least 1

// Fills every job with `threads` threads (0 = default_thread_count()). Work is split into chunks of
// whole Philox groups; the bytes do not depend on the split.
void fill_host(std::span<const FillJob> jobs, int threads = 0);

// Fills memory elements [b, e) of one job on the calling thread (b, e within [job.begin, job.end)),
// with the inner loops of the best instruction-set level this CPU runs.
void fill_host_range(const FillJob& job, std::uint64_t b, std::uint64_t e);

// The instruction-set levels the host loops are compiled for. The library runs on any x86-64 and picks
// the best level the CPU has at run time; the bytes are the same on every level (tests compare them).
enum class HostIsa { baseline, x86_64_v3, x86_64_v4 };
std::string_view host_isa_name(HostIsa isa);   // "x86-64", "x86-64-v3", "x86-64-v4"
std::vector<HostIsa> supported_host_isas();    // baseline first, best last
HostIsa best_host_isa();
// fill_host_range on one given level; throws std::invalid_argument if this CPU cannot run it.
void fill_host_range(const FillJob& job, std::uint64_t b, std::uint64_t e, HostIsa isa);

}  // namespace layerinit
