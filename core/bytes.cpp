#include <layerinit/core/bytes.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

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
  // A decimal number (digits, at most one '.', an optional exponent: 1.5, 1e3), then a unit. stod
  // alone also took hex ("0x10GiB" was 16 GiB), a sign, "inf" and "nan".
  std::size_t used = std::min(t.find_first_not_of("0123456789."), t.size());
  if (used > 0 && used < t.size() && (t[used] == 'e' || t[used] == 'E')) {
    std::size_t k = used + 1;
    if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
    const std::size_t digits_end = std::min(t.find_first_not_of("0123456789", k), t.size());
    if (digits_end > k) used = digits_end;
  }
  const std::string number = t.substr(0, used);
  double v = -1;
  if (number.find_first_of("0123456789") != std::string::npos && std::count(number.begin(), number.end(), '.') <= 1) {
    try {
      v = std::stod(number);
    } catch (const std::out_of_range&) {  // hundreds of digits: too large, refused below
      v = INFINITY;
    }
  }
  if (v < 0) bad_argument("byte size", text, "cannot be read (e.g. 80GiB, 500MB, 1048576)");
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
    bad_argument("byte size", text, "cannot be read (e.g. 80GiB, 500MB, 1048576)");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace layerinit
