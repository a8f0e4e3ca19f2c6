#include <layerinit/memory/available.hpp>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace layerinit {

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kUnlimited = UINT64_MAX;

std::optional<std::string> read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

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

// `base` and each directory of `rel` below it, outermost first; `base` alone when `rel` does not
// exist there (no cgroup namespace: the mount shows the container's own cgroup at its root).
std::vector<fs::path> cgroup_dirs(const fs::path& base, const std::string& rel) {
  std::vector<fs::path> dirs{base};
  fs::path dir = base;
  for (const auto& part : fs::path(rel).relative_path()) {
    if (part == ".." || part == ".") return {base};
    dir /= part;
    dirs.push_back(dir);
  }
  std::error_code ec;
  if (!fs::is_directory(dirs.back(), ec)) return {base};
  return dirs;
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
  std::istringstream in(*cgroups);
  for (std::string line; std::getline(in, line);) {
    const auto c1 = line.find(':'), c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string id = line.substr(0, c1), controllers = line.substr(c1 + 1, c2 - c1 - 1), path = line.substr(c2 + 1);
    if (id == "0" && controllers.empty()) {
      for (const char* mount : {"sys/fs/cgroup", "sys/fs/cgroup/unified"}) {
        for (const auto& dir : cgroup_dirs(root / mount, path)) {
          const auto max = read_value(dir / "memory.max"), current = read_value(dir / "memory.current");
          if (max && current)
            consider(*max, *current, stat_value(dir / "memory.stat", "inactive_file"),
                     "cgroup v2 memory.max - memory.current of " + dir.string());
        }
      }
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      for (const auto& dir : cgroup_dirs(root / "sys/fs/cgroup/memory", path)) {
        const auto limit = read_value(dir / "memory.limit_in_bytes"), usage = read_value(dir / "memory.usage_in_bytes");
        if (limit && usage)
          consider(*limit, *usage, stat_value(dir / "memory.stat", "total_inactive_file"),
                   "cgroup v1 memory.limit_in_bytes - memory.usage_in_bytes of " + dir.string());
      }
    }
  }
  return best;
}

}  // namespace layerinit
