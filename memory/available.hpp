// How much memory this process may still use, before a build allocates: cgroup limits and
// MemAvailable on the host (backend::available_memory adds cudaMemGetInfo on a GPU).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <layerinit/core/api.hpp>

namespace layerinit {

struct AvailableMemory {
  std::uint64_t bytes = 0;
  std::string source;  // where the number comes from, for messages: "MemAvailable in /proc/meminfo"
};

// The smallest of
//   - MemAvailable in /proc/meminfo;
//   - for the process's cgroup v2 (the "0::PATH" line of /proc/self/cgroup, under /sys/fs/cgroup or
//     /sys/fs/cgroup/unified) and each ancestor with a limit: memory.max - memory.current;
//   - for its cgroup v1 memory controller (under /sys/fs/cgroup/memory) and each ancestor:
//     memory.limit_in_bytes - memory.usage_in_bytes;
// where the usage does not count the cgroup's inactive file cache (inactive_file, v1
// total_inactive_file in memory.stat), which the kernel reclaims before it kills anything. A cgroup
// path missing under the mount (a container without a cgroup namespace) means the mount's root.
// Every file is read under `root` (tests pass a fake tree). nullopt when nothing can be read; never
// throws.
LAYERINIT_API std::optional<AvailableMemory> available_host_memory(const std::filesystem::path& root = "/");

}  // namespace layerinit
