// The JSON model spec (schema in docs/spec.md): parse with a path in every error, and write back.
//
// Parsing runs in three steps: nlohmann's parser (iterative, so deep nesting cannot overflow the
// stack; a callback rejects duplicate keys), a walk over the document that checks every field and
// names it by path, then ModelSpec::validate for what spans fields (collisions with layer names,
// totals overflowing 64 bits).
#include <layerinit/init/spec_json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace layerinit {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr std::size_t kMaxDepth = 64;        // objects and arrays nested deeper are refused
constexpr std::size_t kMaxMessagePart = 200;  // longest quoted input in an error message

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw spec_error("spec: " + printable(path.empty() ? "top level" : path) + ": " + printable(what));
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string at(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

// An object whose keys are all in `valid`.
void check_object(const json& j, const std::string& path, const std::vector<std::string>& valid) {
  if (!j.is_object()) fail(path, "must be an object");
  for (const auto& [key, value] : j.items())
    if (std::find(valid.begin(), valid.end(), key) == valid.end()) {
      std::string names;
      for (const auto& v : valid) names += (names.empty() ? "" : ", ") + v;
      fail(join(path, printable(key, 64)), "unknown key (valid: " + names + ")");
    }
}
void check_object(const json& j, const std::string& path, std::initializer_list<const char*> valid) {
  check_object(j, path, std::vector<std::string>(valid.begin(), valid.end()));
}
const json* find(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}
const json& require(const json& j, const std::string& path, const char* key) {
  const json* v = find(j, key);
  if (!v) fail(path, std::string("missing key '") + key + "'");
  return *v;
}

std::uint64_t to_uint(const json& v, const std::string& path, bool positive) {
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
double to_double(const json& v, const std::string& path) {
  if (!v.is_number()) fail(path, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(path, "must be a finite number");
  return d;
}
bool to_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, "must be true or false");
  return v.get<bool>();
}
std::string to_string(const json& v, const std::string& path, bool nonempty) {
  if (!v.is_string() || (nonempty && v.get_ref<const std::string&>().empty()))
    fail(path, nonempty ? "must be a non-empty string" : "must be a string");
  return v.get<std::string>();
}

// ---- fills ----

FillSpec parse_fill(const json& j, const std::string& path) {
  // The kinds and their parameters are the CLI's (kernels/fill.hpp, fill_syntax); JSON names them and
  // may leave out those with a default.
  std::vector<std::string> kinds;
  for (const auto& k : fill_syntax()) kinds.emplace_back(k.name);
  check_object(j, path, kinds);
  if (j.size() != 1) fail(path, "must hold exactly one of " + fill_names());
  const auto item = j.items().begin();
  const std::string kind = item.key();
  const json& body = item.value();
  const std::string p = join(path, kind);
  const auto& syntax = *std::find_if(fill_syntax().begin(), fill_syntax().end(), [&](const FillSyntax& k) { return k.name == kind; });
  std::vector<std::string> keys;
  for (const auto& param : syntax.params) keys.emplace_back(param.name);
  check_object(body, p, keys);
  std::vector<double> args;
  for (const auto& param : syntax.params) {
    const json* v = find(body, std::string(param.name).c_str());
    if (!v && !param.default_value) fail(p, "missing key '" + std::string(param.name) + "'");
    args.push_back(v ? to_double(*v, join(p, std::string(param.name))) : *param.default_value);
  }
  const FillSpec f = make_fill(kind, args);
  try {
    validate_fill(f);
  } catch (const std::invalid_argument& e) {
    fail(p, e.what());
  }
  return f;
}

ojson fill_to_json(const FillSpec& f) {
  ojson body = ojson::object();
  switch (f.kind) {
    case FillKind::constant: body["value"] = f.value; return {{"constant", body}};
    case FillKind::normal:
      body["mean"] = f.mean;
      body["std"] = f.std;
      return {{"normal", body}};
    case FillKind::trunc_normal:
      body["mean"] = f.mean;
      body["std"] = f.std;
      body["a"] = f.a;
      body["b"] = f.b;
      return {{f.bounds_in_std ? "trunc_normal_std" : "trunc_normal", body}};
    case FillKind::uniform:
      body["lo"] = f.lo;
      body["hi"] = f.hi;
      return {{"uniform", body}};
  }
  throw std::invalid_argument("spec_to_json: unknown fill kind");
}

// ---- tensors ----

TensorSpec parse_tensor(const json& j, const std::string& path) {
  check_object(j, path, {"name", "shape", "role", "fan_in", "fan_out", "transposable", "init"});
  TensorSpec t;
  t.name = to_string(require(j, path, "name"), join(path, "name"), true);
  const json& shape = require(j, path, "shape");
  const std::string sp = join(path, "shape");
  if (!shape.is_array() || shape.empty()) fail(sp, "must be a non-empty array of positive integers");
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::uint64_t d = to_uint(shape[i], at(sp, i), true);
    if (n > std::numeric_limits<std::uint64_t>::max() / d) fail(sp, "element count overflows 64 bits");
    n *= d;
    t.shape.push_back(d);
  }
  if (const json* v = find(j, "role")) {
    const std::string r = to_string(*v, join(path, "role"), false);
    try {
      t.role = parse_role(r);
    } catch (const std::invalid_argument& e) {
      fail(join(path, "role"), e.what());
    }
  }
  if (const json* v = find(j, "fan_in")) t.fan_in = to_uint(*v, join(path, "fan_in"), false);
  if (const json* v = find(j, "fan_out")) t.fan_out = to_uint(*v, join(path, "fan_out"), false);
  if (const json* v = find(j, "transposable")) {
    t.transposable = to_bool(*v, join(path, "transposable"));
    if (t.transposable && t.shape.size() != 2) fail(join(path, "transposable"), "requires a 2-D shape");
  }
  if (const json* v = find(j, "init")) t.init = parse_fill(*v, join(path, "init"));
  return t;
}

ojson tensor_to_json(const TensorSpec& t) {
  ojson j = ojson::object();
  j["name"] = t.name;
  j["shape"] = t.shape;
  j["role"] = std::string(role_name(t.role));
  j["fan_in"] = t.fan_in;
  j["fan_out"] = t.fan_out;
  j["transposable"] = t.transposable;
  if (t.init) j["init"] = fill_to_json(*t.init);
  return j;
}

std::vector<TensorSpec> parse_tensors(const json& j, const std::string& path) {
  if (!j.is_array()) fail(path, "must be an array of tensors");
  std::vector<TensorSpec> out;
  for (std::size_t i = 0; i < j.size(); ++i) out.push_back(parse_tensor(j[i], at(path, i)));
  return out;
}

// ---- hyper ----

Hyper parse_hyper(const json& j, const std::string& path) {
  check_object(j, path, {"vocab_size", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads", "head_dim",
                         "max_position_embeddings", "num_experts", "experts_per_token", "initializer_range",
                         "norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "bias"});
  Hyper h;
  auto u = [&](const char* key, std::uint64_t& dst) {
    if (const json* v = find(j, key)) dst = to_uint(*v, join(path, key), false);
  };
  auto d = [&](const char* key, double& dst) {
    if (const json* v = find(j, key)) {
      dst = to_double(*v, join(path, key));
      if (dst < 0) fail(join(path, key), "must not be negative");
    }
  };
  auto b = [&](const char* key, bool& dst) {
    if (const json* v = find(j, key)) dst = to_bool(*v, join(path, key));
  };
  u("vocab_size", h.vocab_size);
  u("hidden_size", h.hidden_size);
  u("intermediate_size", h.intermediate_size);
  u("num_heads", h.num_heads);
  u("num_kv_heads", h.num_kv_heads);
  u("head_dim", h.head_dim);
  u("max_position_embeddings", h.max_position_embeddings);
  u("num_experts", h.num_experts);
  u("experts_per_token", h.experts_per_token);
  d("initializer_range", h.initializer_range);
  d("norm_eps", h.norm_eps);
  d("rope_theta", h.rope_theta);
  if (const json* v = find(j, "rope_scaling")) {  // config.json's own object
    const std::string rp = join(path, "rope_scaling");
    check_object(*v, rp, {"rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
    const json& type = require(*v, rp, "rope_type");
    if (!type.is_string() || type.get_ref<const std::string&>() != "llama3")
      fail(join(rp, "rope_type"), "must be \"llama3\" (the only rope scaling layerinit carries)");
    RopeScaling& rs = h.rope_scaling;
    rs.factor = to_double(require(*v, rp, "factor"), join(rp, "factor"));
    rs.low_freq_factor = to_double(require(*v, rp, "low_freq_factor"), join(rp, "low_freq_factor"));
    rs.high_freq_factor = to_double(require(*v, rp, "high_freq_factor"), join(rp, "high_freq_factor"));
    rs.original_max_position_embeddings = to_uint(require(*v, rp, "original_max_position_embeddings"),
                                                  join(rp, "original_max_position_embeddings"), true);
  }
  b("tie_word_embeddings", h.tie_word_embeddings);
  b("bias", h.bias);
  if (const auto p = hyper_problem(h))
    fail(join(path, p->field), p->message + (p->field == "num_heads" ? " (set head_dim if that is intended)" : ""));
  return h;
}

// config.json's rope_scaling object, in the order Hugging Face's Llama 3.1 configs write it.
ojson rope_scaling_json(const RopeScaling& rs) {
  return {{"factor", rs.factor},
          {"low_freq_factor", rs.low_freq_factor},
          {"high_freq_factor", rs.high_freq_factor},
          {"original_max_position_embeddings", rs.original_max_position_embeddings},
          {"rope_type", "llama3"}};
}

ojson hyper_to_json(const Hyper& h) {
  ojson j = ojson::object();
  j["vocab_size"] = h.vocab_size;
  j["hidden_size"] = h.hidden_size;
  j["intermediate_size"] = h.intermediate_size;
  j["num_heads"] = h.num_heads;
  j["num_kv_heads"] = h.num_kv_heads;
  j["head_dim"] = h.head_dim;
  j["max_position_embeddings"] = h.max_position_embeddings;
  j["num_experts"] = h.num_experts;
  j["experts_per_token"] = h.experts_per_token;
  j["initializer_range"] = h.initializer_range;
  j["norm_eps"] = h.norm_eps;
  j["rope_theta"] = h.rope_theta;
  if (h.rope_scaling != RopeScaling{}) j["rope_scaling"] = rope_scaling_json(h.rope_scaling);  // absent: none
  j["tie_word_embeddings"] = h.tie_word_embeddings;
  j["bias"] = h.bias;
  return j;
}

// ---- reading the text ----

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

[[noreturn]] void malformed(std::string_view text, std::size_t pos, const std::string& why) {
  const auto [line, col] = line_column(text, pos);
  throw spec_error("spec: malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(col) + ": " +
                   printable(why, kMaxMessagePart));
}

// Refuses nesting deeper than kMaxDepth before the parser builds anything.
void check_depth(std::string_view text) {
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
      if (++depth > kMaxDepth) malformed(text, i, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
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

json parse_text(std::string_view text) {
  check_depth(text);
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
    throw spec_error("spec: malformed JSON: " + printable(reason, kMaxMessagePart));
  }
}

}  // namespace

ModelSpec spec_from_json(std::string_view text) {
  const json doc = parse_text(text);
  check_object(doc, "", {"name", "family", "hyper", "pre", "layer", "post"});
  ModelSpec m;
  m.name = to_string(require(doc, "", "name"), "name", true);
  m.family = "custom";
  if (const json* v = find(doc, "family")) m.family = to_string(*v, "family", false);
  if (const json* v = find(doc, "hyper")) m.hyper = parse_hyper(*v, "hyper");
  if (const json* v = find(doc, "pre")) m.pre = parse_tensors(*v, "pre");
  if (const json* v = find(doc, "layer")) {
    check_object(*v, "layer", {"prefix", "first", "count", "expert_prefix", "tensors"});
    if (const json* p = find(*v, "prefix")) m.layer_prefix = to_string(*p, "layer.prefix", true);
    if (const json* p = find(*v, "first")) m.first_layer = to_uint(*p, "layer.first", false);
    m.num_layers = to_uint(require(*v, "layer", "count"), "layer.count", false);
    if (const json* p = find(*v, "expert_prefix")) m.layer.expert_prefix = to_string(*p, "layer.expert_prefix", true);
    m.layer.tensors = parse_tensors(require(*v, "layer", "tensors"), "layer.tensors");
  }
  if (const json* v = find(doc, "post")) m.post = parse_tensors(*v, "post");

  // Unique names, by path: layer names among themselves, pre/post names among themselves.
  std::unordered_map<std::string, std::string> seen;
  for (std::size_t i = 0; i < m.layer.tensors.size(); ++i) {
    const std::string p = at("layer.tensors", i);
    auto [it, fresh] = seen.emplace(m.layer.tensors[i].name, p);
    if (!fresh) fail(join(p, "name"), "duplicate name '" + m.layer.tensors[i].name + "' (also " + it->second + ")");
  }
  seen.clear();
  for (auto [list, name] : {std::pair{&m.pre, "pre"}, std::pair{&m.post, "post"}}) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string p = at(name, i);
      auto [it, fresh] = seen.emplace((*list)[i].name, p);
      if (!fresh) fail(join(p, "name"), "duplicate name '" + (*list)[i].name + "' (also " + it->second + ")");
    }
  }
  try {
    m.validate();
  } catch (const std::invalid_argument& e) {
    throw spec_error("spec: " + printable(e.what()));
  } catch (const std::overflow_error& e) {
    throw spec_error("spec: " + printable(e.what()));
  }
  return m;
}

std::string spec_to_json(const ModelSpec& s) {
  ojson j = ojson::object();
  j["name"] = s.name;
  j["family"] = s.family;
  j["hyper"] = hyper_to_json(s.hyper);
  auto tensors = [](const std::vector<TensorSpec>& ts) {
    ojson a = ojson::array();
    for (const auto& t : ts) a.push_back(tensor_to_json(t));
    return a;
  };
  j["pre"] = tensors(s.pre);
  ojson layer = ojson::object();
  layer["prefix"] = s.layer_prefix;
  if (s.first_layer > 0) layer["first"] = s.first_layer;
  layer["count"] = s.num_layers;
  if (!s.layer.expert_prefix.empty()) layer["expert_prefix"] = s.layer.expert_prefix;
  layer["tensors"] = tensors(s.layer.tensors);
  j["layer"] = layer;
  j["post"] = tensors(s.post);
  // Invalid UTF-8 in a name (possible only from C++) is replaced rather than thrown.
  return j.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace layerinit
