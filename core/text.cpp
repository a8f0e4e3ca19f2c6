#include <layerinit/core/text.hpp>

#include <fnmatch.h>

#include <algorithm>
#include <string>

namespace layerinit {

bool name_matches(std::string_view pattern, std::string_view name) {
  return fnmatch(std::string(pattern).c_str(), std::string(name).c_str(), 0) == 0;
}

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c == 0xe0) len = 3, lo = 0xa0;
  else if (c == 0xed) len = 3, hi = 0x9f;
  else if (c >= 0xe1 && c <= 0xef) len = 3;
  else if (c == 0xf0) len = 4, lo = 0x90;
  else if (c >= 0xf1 && c <= 0xf3) len = 4;
  else if (c == 0xf4) len = 4, hi = 0x8f;
  else return 0;
  if (i + len > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return len;
}

std::string printable(std::string_view s, std::size_t max) {
  static const char* hex = "0123456789abcdef";
  const std::size_t n = std::min(s.size(), max);
  std::string out;
  out.reserve(n);
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 15];
  };
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    const std::size_t len = utf8_sequence_length(s.substr(0, n), i);
    bool ok = len > 0;
    // U+0080-U+009F are the C1 controls (0x9b is CSI on some terminals).
    if (ok && c == 0xc2 && byte(i + 1) <= 0x9f) ok = false;
    if (!ok) {
      escape(c);
      ++i;
      continue;
    }
    out.append(s.data() + i, len);
    i += len;
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string listed(const std::vector<std::string>& items, std::size_t limit) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > limit) out += " and " + std::to_string(items.size() - limit) + " more";
  return out;
}

std::string escape_template(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    out += c;
    if (c == '{' || c == '}') out += c;
  }
  return out;
}

}  // namespace layerinit
