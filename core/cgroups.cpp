#include <layerinit/core/cgroups.hpp>

#include <fstream>
#include <sstream>

namespace layerinit {

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

bool CgroupLine::has_controller(std::string_view name) const {
  for (std::size_t p = 0; p <= controllers.size();) {
    std::size_t e = controllers.find(',', p);
    if (e == std::string_view::npos) e = controllers.size();
    if (controllers.substr(p, e - p) == name) return true;
    p = e + 1;
  }
  return false;
}

void for_each_cgroup(std::string_view text, const std::function<void(const CgroupLine&)>& f) {
  for (std::size_t p = 0; p < text.size();) {
    std::size_t e = text.find('\n', p);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view line = text.substr(p, e - p);
    p = e + 1;
    const std::size_t c1 = line.find(':'), c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    f({line.substr(0, c1), line.substr(c1 + 1, c2 - c1 - 1), line.substr(c2 + 1)});
  }
}

std::vector<std::string> cgroup_dirs(const std::string& mount, std::string_view path) {
  std::vector<std::string> dirs{mount};
  std::string dir = mount;
  for (std::size_t p = 0; p < path.size();) {
    std::size_t e = path.find('/', p);
    if (e == std::string_view::npos) e = path.size();
    const std::string_view part = path.substr(p, e - p);
    p = e + 1;
    if (part.empty()) continue;
    if (part == "." || part == "..") return {};
    dir += "/";
    dir += part;
    dirs.push_back(dir);
  }
  return dirs;
}

}  // namespace layerinit
