// The process's cgroups as /proc/self/cgroup lists them, and the directories holding their limits: one
// walk for every limit read from them (the CPU quota, core/cpus.hpp; available memory, memory/available.hpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace layerinit {

// A file's whole text, or nullopt when it cannot be opened or read.
std::optional<std::string> read_text_file(const std::string& path);

// One line of /proc/self/cgroup: "hierarchy-id:controllers:path"; cgroup v2 is "0::path".
struct CgroupLine {
  std::string_view id, controllers, path;
  bool v2() const { return id == "0" && controllers.empty(); }
  // Whether the comma-separated controller list names `name` ("cpuset" is not "cpu").
  bool has_controller(std::string_view name) const;
};
// f(line) for each well-formed line of `proc_self_cgroup`'s text.
void for_each_cgroup(std::string_view proc_self_cgroup, const std::function<void(const CgroupLine&)>& f);

// `mount` and each directory of the cgroup path below it, outermost first; none for a path that
// climbs ("..": a cgroup outside the namespace's root, not one under this mount).
std::vector<std::string> cgroup_dirs(const std::string& mount, std::string_view path);

}  // namespace layerinit
