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
    : bad_input(source, "", reason, source + ": " + reason) {}

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
  // A document built in code holds a non-negative integer as signed (nlohmann's int), parsed text as unsigned.
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
    const auto x = v.is_number_unsigned() ? v.get<std::uint64_t>() : static_cast<std::uint64_t>(v.get<std::int64_t>());
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

namespace {

// The SAX pass of JsonReader::parse: the first repeated key of an object, named by its path.
class DuplicateKeys : public nlohmann::json_sax<json> {
 public:
  explicit DuplicateKeys(const JsonReader& r) : r_(r) {}
  bool null() override { return element(); }
  bool boolean(bool) override { return element(); }
  bool number_integer(number_integer_t) override { return element(); }
  bool number_unsigned(number_unsigned_t) override { return element(); }
  bool number_float(number_float_t, const string_t&) override { return element(); }
  bool string(string_t&) override { return element(); }
  bool binary(binary_t&) override { return element(); }
  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& top = frames_.back();
    top.key = k;
    if (!top.keys.insert(k).second) r_.fail(join(path_of(frames_.size() - 1), printable(k, 64)), "duplicate key");
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Frame {
    bool object = false;
    std::set<std::string> keys;
    std::string key;
    std::size_t next = 0;  // arrays: index of the next element
  };
  // The path of frames_[n], as the enclosing frames name it.
  std::string path_of(std::size_t n) const {
    std::string path;
    for (std::size_t i = 0; i < n; ++i)
      path = frames_[i].object ? join(path, printable(frames_[i].key, 64)) : at(path, frames_[i].next - 1);
    return path;
  }
  bool element() {
    if (!frames_.empty() && !frames_.back().object && ++frames_.back().next > r_.max_elements())
      r_.fail(path_of(frames_.size() - 1), "has more than " + std::to_string(r_.max_elements()) + " elements");
    return true;
  }
  bool open(bool object) {
    element();
    frames_.push_back(Frame{object, {}, {}, 0});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  const JsonReader& r_;
  std::vector<Frame> frames_;
};

}  // namespace

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
  // Found by a SAX pass before the document is built: nlohmann's callback parser looks through the
  // whole enclosing array at every object's end (quadratic: 100,000 tensors took 5.6 s).
  // The document is then built without a callback (linear); a malformed one stopped the SAX pass
  // where this parse throws its error, with its position.
  DuplicateKeys dup(*this);
  json::sax_parse(text.begin(), text.end(), &dup);
  try {
    return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/false);
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

void JsonReader::check_limits(const json& doc) const {
  // Recursive, but never deeper than max_depth_ + 1 frames: deeper is refused before it is entered.
  auto walk = [this](const auto& self, const json& j, const std::string& path, std::size_t depth) -> void {
    if (!j.is_object() && !j.is_array()) return;
    if (depth > max_depth_) fail(path, "nesting deeper than " + std::to_string(max_depth_) + " levels");
    if (j.is_array() && j.size() > max_elements_)
      fail(path, "has more than " + std::to_string(max_elements_) + " elements");
    if (j.is_object())
      for (const auto& [key, v] : j.items()) self(self, v, join(path, printable(key, 64)), depth + 1);
    else
      for (std::size_t i = 0; i < j.size(); ++i) self(self, j[i], at(path, i), depth + 1);
  };
  walk(walk, doc, "", 1);
}

}  // namespace layerinit
