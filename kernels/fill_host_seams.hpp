// What tests and benchmarks reach below fill_host (kernels/fill_host.hpp): one range of a job on the
// calling thread, on a chosen instruction-set level, and a hook that makes thread starts fail. Not
// installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <layerinit/kernels/fill.hpp>

namespace layerinit {

// When set, called before the fill starts its k-th extra thread (k = 1, 2, ...); a throw
// from it is handled exactly like std::thread failing to start (EAGAIN under a pids limit). It lets
// tests make thread creation fail deterministically, even as root. Null (the default) in normal use;
// set it only while no fill runs.
using fill_thread_start_hook = void (*)(std::size_t k);
void set_fill_thread_start_hook(fill_thread_start_hook hook) noexcept;

// Fills memory elements [b, e) of a job of one run on the calling thread (b, e within [job.begin,
// job.end)), with the inner loops of the best instruction-set level this CPU runs. A job of several
// runs is refused: fill its runs (run_job) one by one.
void fill_host_range(const FillJob& job, std::uint64_t b, std::uint64_t e);

// The instruction-set levels the host loops are compiled for. The library runs on any x86-64 and picks
// the best level the CPU has at run time; the bytes are the same on every level (tests compare them).
// Elsewhere (aarch64) only the baseline is built: the portable loops at the target's default -march.
enum class HostIsa { baseline, x86_64_v3, x86_64_v4 };
std::string_view host_isa_name(HostIsa isa);   // "x86-64" ("aarch64" there), "x86-64-v3", "x86-64-v4"
std::vector<HostIsa> supported_host_isas();    // baseline first, best last
HostIsa best_host_isa();
// fill_host_range on one given level; a level this CPU cannot run, like a bad job, is misuse
// (layerinit::logic_error).
void fill_host_range(const FillJob& job, std::uint64_t b, std::uint64_t e, HostIsa isa);

}  // namespace layerinit
