#include "memory/errors.hpp"

#include <cstdio>

namespace layerinit {

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  else std::snprintf(buf, sizeof buf, "%.2f %s (%zu bytes)", v, units[u], bytes);
  return buf;
}

out_of_memory::out_of_memory(std::size_t requested, std::size_t in_use, const std::string& where)
    : error("out of memory on " + where + ": asked for " + format_bytes(requested) + " with " +
            format_bytes(in_use) + " in use"),
      requested_(requested),
      in_use_(in_use) {}

cuda_error::cuda_error(const std::string& call, const std::string& what, const char* file, int line)
    : error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + what), call_(call) {}

void throw_precondition(const char* expr, const std::string& msg, const char* file, int line) {
  throw std::invalid_argument(msg + " (" + expr + " at " + file + ":" + std::to_string(line) + ")");
}

}  // namespace layerinit
