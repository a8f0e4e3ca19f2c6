// How many CPUs this process may use: what `threads = 0` means everywhere (the host backend, the
// CLI's --threads 0, the Python package's threads=0). std::thread::hardware_concurrency() counts the
// machine's CPUs, so under `taskset -c 0`, a SLURM allocation or a container's CPU quota it
// oversubscribed what the process was given.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace layerinit {

// CPUs a cgroup v2 cpu.max allows ("QUOTA PERIOD", e.g. "150000 100000" = 1.5); nullopt for "max"
// (no limit) or text that is not that.
std::optional<double> parse_cgroup_cpu_max(std::string_view cpu_max);
// The same for cgroup v1: cpu.cfs_quota_us ("-1" = no limit) over cpu.cfs_period_us.
std::optional<double> parse_cgroup_cfs_quota(std::string_view quota_us, std::string_view period_us);

// The CPU quota of the process's cgroups: the smallest over its cgroup and every ancestor, v2 (the
// "0::PATH" line of /proc/self/cgroup, cpu.max under /sys/fs/cgroup) and v1 (the line whose
// controllers include cpu, cpu.cfs_quota_us and cpu.cfs_period_us under /sys/fs/cgroup/cpu or
// /sys/fs/cgroup/CONTROLLERS). `proc_self_cgroup` is the text of /proc/self/cgroup; `read` returns a
// file's text by absolute path, or nullopt (tests pass a map). A directory that cannot be read
// (a container without a cgroup namespace shows its own cgroup at the mount's root) is skipped.
// nullopt: no quota.
using text_file_reader = std::function<std::optional<std::string>(const std::string& path)>;
std::optional<double> cgroup_cpu_quota(std::string_view proc_self_cgroup, const text_file_reader& read);

// The CPUs this thread may run on (sched_getaffinity), nullopt when that cannot be read.
std::optional<int> affinity_cpu_count();

// min(affinity_cpu_count(), the cgroup quota rounded up), at least 1; hardware_concurrency() when
// neither can be read. Read once per call (cheap: a syscall and a few small files).
int usable_cpu_count();

}  // namespace layerinit
