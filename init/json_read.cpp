// The JSON reading rules the spec, config.json and composite readers share (json_read.hpp).
#include "json_read.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <layerinit/core/text.hpp>
#include <layerinit/init/spec_json.hpp>

namespace layerinit {

namespace {

constexpr std::size_t kMaxMessagePart = 200;  // longest quoted input in an error message

// Line and column (1-based) of byte offset `pos`.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t pos) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

// nlohmann's message without its "[json.exception...] parse error at line x, column y: " prefix.
std::string parse_reason(const char* what) {
  std::string s = what;
  const auto c = s.find("column ");
  if (c != std::string::npos) {
    const auto colon = s.find(": ", c);
    if (colon != std::string::npos) return s.substr(colon + 2);
  }
  const auto close = s.find("] ");
  return close == std::string::npos ? s : s.substr(close + 2);
}

}  // namespace

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string at(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

const json* find(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

spec_error::spec_error(std::string source, const std::string& reason)
    : std::invalid_argument(source + ": " + reason), source_(std::move(source)) {}

void JsonReader::fail(const std::string& path, const std::string& what) const {
  throw spec_error(source_, printable(path.empty() ? "top level" : path) + ": " + printable(what));
}

void JsonReader::malformed(std::string_view text, std::size_t pos, const std::string& why) const {
  const auto [line, col] = line_column(text, pos);
  throw spec_error(source_, "malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " +
                                printable(why, kMaxMessagePart));
}

void JsonReader::check_object(const json& j, const std::string& path, const std::vector<std::string>& valid) const {
  if (!j.is_object()) fail(path, "must be an object");
  for (const auto& [key, value] : j.items())
    if (std::find(valid.begin(), valid.end(), key) == valid.end()) {
      std::string names;
      for (const auto& v : valid) names += (names.empty() ? "" : ", ") + v;
      fail(join(path, printable(key, 64)), "unknown key (valid: " + names + ")");
    }
}
void JsonReader::check_object(const json& j, const std::string& path, std::initializer_list<const char*> valid) const {
  check_object(j, path, std::vector<std::string>(valid.begin(), valid.end()));
}

const json& JsonReader::require(const json& j, const std::string& path, const char* key) const {
  const json* v = find(j, key);
  if (!v) fail(path, std::string("missing key '") + key + "'");
  return *v;
}

std::uint64_t JsonReader::to_uint(const json& v, const std::string& path, bool positive) const {
  const char* what = positive ? "must be a positive integer" : "must be a non-negative integer";
  if (v.is_number_unsigned()) {
    const auto x = v.get<std::uint64_t>();
    if (positive && x == 0) fail(path, what);
    return x;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d >= 18446744073709551616.0 && d == std::floor(d))
      fail(path, std::string(what) + " below 2^64");
  }
  fail(path, what);
}

double JsonReader::to_double(const json& v, const std::string& path) const {
  if (!v.is_number()) fail(path, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(path, "must be a finite number");
  return d;
}

bool JsonReader::to_bool(const json& v, const std::string& path) const {
  if (!v.is_boolean()) fail(path, "must be true or false");
  return v.get<bool>();
}

std::string JsonReader::to_string(const json& v, const std::string& path, bool nonempty) const {
  if (!v.is_string() || (nonempty && v.get_ref<const std::string&>().empty()))
    fail(path, nonempty ? "must be a non-empty string" : "must be a string");
  return v.get<std::string>();
}

json JsonReader::parse(std::string_view text) const {
  // Nesting deeper than max_depth_ is refused before the parser builds anything.
  std::size_t depth = 0;
  bool in_string = false, escape = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth_) malformed(text, i, "nesting deeper than " + std::to_string(max_depth_) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  // Duplicate keys: nlohmann keeps the last silently; a repeated key is as likely a mistake as a typo.
  struct Frame {
    bool object = false;
    std::set<std::string> keys;
    std::string key;
    std::size_t next = 0;  // arrays: index of the next element
  };
  std::vector<Frame> frames;
  auto element_begins = [&] {
    if (!frames.empty() && !frames.back().object) ++frames.back().next;
  };
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        element_begins();
        frames.push_back(Frame{event == json::parse_event_t::object_start, {}, {}, 0});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        break;
      case json::parse_event_t::key: {
        if (frames.empty() || !parsed.is_string()) break;
        Frame& top = frames.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) {
          std::string path;
          for (std::size_t i = 0; i + 1 < frames.size(); ++i)
            path = frames[i].object ? join(path, printable(frames[i].key, 64)) : at(path, frames[i].next - 1);
          fail(join(path, printable(top.key, 64)), "duplicate key");
        }
        break;
      }
      case json::parse_event_t::value: element_begins(); break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    malformed(text, e.byte > 0 ? e.byte - 1 : 0, parse_reason(e.what()));
  } catch (const json::exception& e) {
    // out_of_range.406 "number overflow parsing '1e999'" carries no position: find the token.
    const std::string reason = parse_reason(e.what());
    const auto q = reason.find('\'');
    const auto q2 = q == std::string::npos ? q : reason.find('\'', q + 1);
    if (q2 != std::string::npos && q2 > q + 1) {
      const auto pos = text.find(reason.substr(q + 1, q2 - q - 1));
      if (pos != std::string_view::npos) malformed(text, pos, reason);
    }
    throw spec_error(source_, "malformed JSON: " + printable(reason, kMaxMessagePart));
  }
}

}  // namespace layerinit
