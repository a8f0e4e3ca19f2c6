#include <layerinit/memory/available.hpp>

#include <layerinit/core/cgroups.hpp>

#include <charconv>
#include <sstream>
#include <string_view>
#include <vector>

namespace layerinit {

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kUnlimited = UINT64_MAX;

std::optional<std::string> read_text(const fs::path& p) { return read_text_file(p.string()); }

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  return v;
}

// A file holding one number, or "max" (cgroup v2: no limit).
std::optional<std::uint64_t> read_value(const fs::path& p) {
  const auto text = read_text(p);
  if (!text) return std::nullopt;
  std::string_view s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  if (s == "max") return kUnlimited;
  return parse_u64(s);
}

// The value of `key` in a "key value" file (memory.stat); 0 when absent.
std::uint64_t stat_value(const fs::path& p, std::string_view key) {
  const auto text = read_text(p);
  if (!text) return 0;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    std::string_view l = line;
    if (l.size() > key.size() && l.substr(0, key.size()) == key && l[key.size()] == ' ')
      if (const auto v = parse_u64(l.substr(key.size() + 1))) return *v;
  }
  return 0;
}

// The cgroup's directory under `mount` and each ancestor's (core/cgroups.hpp); the mount alone when the
// path does not exist there (no cgroup namespace: the mount shows the container's own cgroup at its
// root) or climbs out of it.
std::vector<fs::path> limit_dirs(const fs::path& mount, std::string_view path) {
  const std::vector<std::string> dirs = cgroup_dirs(mount.string(), path);
  std::error_code ec;
  if (dirs.empty() || !fs::is_directory(dirs.back(), ec)) return {mount};
  return {dirs.begin(), dirs.end()};
}

}  // namespace

std::optional<AvailableMemory> available_host_memory(const fs::path& root) {
  std::optional<AvailableMemory> best;
  auto consider = [&](std::uint64_t limit, std::uint64_t usage, std::uint64_t inactive_file, const std::string& source) {
    if (limit == kUnlimited) return;
    const std::uint64_t used = usage - std::min(usage, inactive_file);
    const std::uint64_t avail = limit > used ? limit - used : 0;
    if (!best || avail < best->bytes) best = AvailableMemory{avail, source};
  };

  if (const auto meminfo = read_text(root / "proc/meminfo")) {
    std::istringstream in(*meminfo);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("MemAvailable:", 0) != 0) continue;
      std::string_view v = std::string_view(line).substr(13);
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      if (const auto kb = parse_u64(v); kb && *kb <= kUnlimited / 1024)
        best = AvailableMemory{*kb * 1024, "MemAvailable in /proc/meminfo"};
    }
  }

  // /proc/self/cgroup: "hierarchy-id:controllers:path" per line; v2 is "0::path".
  const auto cgroups = read_text(root / "proc/self/cgroup");
  if (!cgroups) return best;
  for_each_cgroup(*cgroups, [&](const CgroupLine& line) {
    if (line.v2()) {
      for (const char* mount : {"sys/fs/cgroup", "sys/fs/cgroup/unified"}) {
        for (const auto& dir : limit_dirs(root / mount, line.path)) {
          const auto max = read_value(dir / "memory.max"), current = read_value(dir / "memory.current");
          if (max && current)
            consider(*max, *current, stat_value(dir / "memory.stat", "inactive_file"),
                     "cgroup v2 memory.max - memory.current of " + dir.string());
        }
      }
    } else if (line.has_controller("memory")) {
      for (const auto& dir : limit_dirs(root / "sys/fs/cgroup/memory", line.path)) {
        const auto limit = read_value(dir / "memory.limit_in_bytes"), usage = read_value(dir / "memory.usage_in_bytes");
        if (limit && usage)
          consider(*limit, *usage, stat_value(dir / "memory.stat", "total_inactive_file"),
                   "cgroup v1 memory.limit_in_bytes - memory.usage_in_bytes of " + dir.string());
      }
    }
  });
  return best;
}

}  // namespace layerinit
