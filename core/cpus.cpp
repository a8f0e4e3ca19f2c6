#include <layerinit/core/cpus.hpp>

#include <layerinit/core/cgroups.hpp>

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <thread>
#include <vector>

namespace layerinit {

namespace {

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

std::optional<long long> parse_integer(std::string_view s) {
  s = trimmed(s);
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> quota_over_period(std::optional<long long> quota, std::optional<long long> period) {
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

}  // namespace

std::optional<double> parse_cgroup_cpu_max(std::string_view cpu_max) {
  const std::string_view s = trimmed(cpu_max);
  const std::size_t sp = s.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;  // a period is always written
  if (s.substr(0, sp) == "max") return std::nullopt;
  return quota_over_period(parse_integer(s.substr(0, sp)), parse_integer(s.substr(sp + 1)));
}

std::optional<double> parse_cgroup_cfs_quota(std::string_view quota_us, std::string_view period_us) {
  return quota_over_period(parse_integer(quota_us), parse_integer(period_us));
}

std::optional<double> cgroup_cpu_quota(std::string_view proc_self_cgroup, const text_file_reader& read) {
  std::optional<double> best;
  auto consider = [&](std::optional<double> cpus) {
    if (cpus && (!best || *cpus < *best)) best = cpus;
  };
  for_each_cgroup(proc_self_cgroup, [&](const CgroupLine& line) {
    if (line.v2()) {
      for (const auto& dir : cgroup_dirs("/sys/fs/cgroup", line.path))
        if (const auto text = read(dir + "/cpu.max")) consider(parse_cgroup_cpu_max(*text));
      return;
    }
    if (!line.has_controller("cpu")) return;
    // v1 mounts the cpu controller at cpu,cpuacct (with a cpu symlink) or at cpu alone.
    std::vector<std::string> mounts{"/sys/fs/cgroup/cpu"};
    if (line.controllers != "cpu") mounts.push_back("/sys/fs/cgroup/" + std::string(line.controllers));
    for (const auto& mount : mounts)
      for (const auto& dir : cgroup_dirs(mount, line.path)) {
        const auto quota = read(dir + "/cpu.cfs_quota_us"), period = read(dir + "/cpu.cfs_period_us");
        if (quota && period) consider(parse_cgroup_cfs_quota(*quota, *period));
      }
  });
  return best;
}

std::optional<int> affinity_cpu_count() {
  // cpu_set_t holds 1024 CPUs; a larger machine answers EINVAL to a set that small.
  for (int n = 1024; n <= (1 << 20); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (!set) return std::nullopt;
    const std::size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set);
    const int rc = sched_getaffinity(0, size, set);
    const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (rc == 0) return count > 0 ? std::optional<int>(count) : std::nullopt;
    if (errno != EINVAL) return std::nullopt;
  }
  return std::nullopt;
}

int usable_cpu_count() {
  std::optional<int> n = affinity_cpu_count();
  if (const auto cgroups = read_text_file("/proc/self/cgroup"))
    if (const auto quota = cgroup_cpu_quota(*cgroups, read_text_file)) {
      // Rounded up: a quota of 1.5 CPUs keeps two threads busy part of the time, not one all of it.
      const double q = std::ceil(*quota - 1e-9);
      const int cpus = q >= 1 << 20 ? 1 << 20 : std::max(1, static_cast<int>(q));
      n = n ? std::min(*n, cpus) : cpus;
    }
  if (!n) {
    const unsigned hw = std::thread::hardware_concurrency();
    n = hw == 0 ? 1 : static_cast<int>(std::min(hw, 1u << 20));
  }
  return std::max(1, *n);
}

}  // namespace layerinit
