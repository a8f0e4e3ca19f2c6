// Reading a JSON document field by field, every error one line naming the field by its path: the
// rules the JSON spec (spec_json.cpp), a Hugging Face config.json (hf_spec.cpp) and a composite's
// text (shard/composite.cpp) share.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace layerinit {

using json = nlohmann::json;

std::string join(const std::string& path, std::string_view key);  // "hyper" + "vocab_size"
std::string at(const std::string& path, std::size_t i);            // "pre" + 2 -> "pre[2]"
const json* find(const json& j, const char* key);                  // nullptr when absent

// Errors are spec_error(<source>, "<path>: <what>"), the source being "spec", "config.json" or
// "composite".
class JsonReader {
 public:
  static constexpr std::size_t kDefaultMaxDepth = 64;
  // `max_depth`: objects and arrays nested deeper are refused (a format that nests less says so);
  // `max_elements`: so are arrays longer, before the document is built (the spec's tensor cap).
  explicit JsonReader(std::string source, std::size_t max_depth = kDefaultMaxDepth,
                      std::uint64_t max_elements = UINT64_MAX)
      : source_(std::move(source)), max_depth_(max_depth), max_elements_(max_elements) {}
  std::uint64_t max_elements() const noexcept { return max_elements_; }

  [[noreturn]] void fail(const std::string& path, const std::string& what) const;
  // nlohmann's parser with nesting deeper than max_depth levels, arrays longer than max_elements and
  // repeated keys refused, and positions as line and column.
  json parse(std::string_view text) const;
  // What parse refuses in a text (nesting deeper than max_depth levels, arrays longer than
  // max_elements), refused in a document built otherwise; the first found, named by its path.
  void check_limits(const json& doc) const;

  // An object whose keys are all in `valid`.
  void check_object(const json& j, const std::string& path, const std::vector<std::string>& valid) const;
  void check_object(const json& j, const std::string& path, std::initializer_list<const char*> valid) const;
  const json& require(const json& j, const std::string& path, const char* key) const;

  // An integer (no fraction, no sign, below 2^64); positive: also not zero.
  std::uint64_t to_uint(const json& v, const std::string& path, bool positive) const;
  double to_double(const json& v, const std::string& path) const;  // finite
  bool to_bool(const json& v, const std::string& path) const;
  std::string to_string(const json& v, const std::string& path, bool nonempty) const;

  // A string field read by `parse` (a role, a dtype, a fill, a row permutation): parse's
  // std::invalid_argument becomes this reader's error after the field's path.
  template <class Parse>
  auto parsed(const json& v, const std::string& path, Parse parse) const {
    const std::string text = to_string(v, path, false);
    try {
      return parse(text);
    } catch (const std::invalid_argument& e) {
      fail(path, e.what());
    }
  }

 private:
  [[noreturn]] void malformed(std::string_view text, std::size_t pos, const std::string& why) const;
  std::string source_;
  std::size_t max_depth_;
  std::uint64_t max_elements_;
};

}  // namespace layerinit
