#include <layerinit/core/bytes.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace layerinit {

namespace {
const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
// bytes as v * 1024^u with v < 1024 (or u = 4).
int scaled(std::uint64_t bytes, double& v) {
  v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u;
}
}  // namespace

std::string format_bytes(std::size_t bytes) {
  double v = 0;
  const int u = scaled(bytes, v);
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  else std::snprintf(buf, sizeof buf, "%.2f %s (%zu bytes)", v, units[u], bytes);
  return buf;
}

std::string format_bytes_short(std::uint64_t bytes) {
  double v = 0;
  const int u = scaled(bytes, v);
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::uint64_t parse_byte_size(std::string_view text) {
  std::string t(text);
  t.erase(std::remove_if(t.begin(), t.end(), [](unsigned char c) { return std::isspace(c); }), t.end());
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(t, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("cannot read byte size '" + std::string(text) + "' (e.g. 80GiB, 500MB, 1048576)");
  }
  std::string unit = t.substr(used);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = v * scale;
  if (scale == 0 || !std::isfinite(bytes) || bytes < 0 || bytes >= 1.8e19)
    throw std::invalid_argument("cannot read byte size '" + std::string(text) + "' (e.g. 80GiB, 500MB, 1048576)");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace layerinit
