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

#include <layerinit/core/errors.hpp>
#include <layerinit/core/input_file.hpp>

#include "json_documents.hpp"
#include "json_read.hpp"

namespace layerinit {

namespace {

using ojson = nlohmann::ordered_json;

// No array of a spec holds more than a spec's tensors: a longer one is refused while it is read, before
// anything is built (300,000 tensors took 30 s to reach the cap's check).
const JsonReader r("spec", JsonReader::kDefaultMaxDepth, kMaxSpecTensors);

// ---- fills ----

FillSpec parse_fill(const json& j, const std::string& path) {
  // The kinds and their parameters are the CLI's (kernels/fill.hpp, fill_syntax); JSON names them and
  // may leave out those with a default.
  std::vector<std::string> kinds;
  for (const auto& k : fill_syntax()) kinds.emplace_back(k.name);
  r.check_object(j, path, kinds);
  if (j.size() != 1) r.fail(path, "must hold exactly one of " + fill_names());
  const auto item = j.items().begin();
  const std::string kind = item.key();
  const json& body = item.value();
  const std::string p = join(path, kind);
  const auto& syntax = *std::find_if(fill_syntax().begin(), fill_syntax().end(), [&](const FillSyntax& k) { return k.name == kind; });
  std::vector<std::string> keys;
  for (const auto& param : syntax.params) keys.emplace_back(param.name);
  r.check_object(body, p, keys);
  std::vector<double> args;
  for (const auto& param : syntax.params) {
    const json* v = find(body, std::string(param.name).c_str());
    if (!v && !param.default_value) r.fail(p, "missing key '" + std::string(param.name) + "'");
    args.push_back(v ? r.to_double(*v, join(p, std::string(param.name))) : *param.default_value);
  }
  const FillSpec f = make_fill(kind, args);
  try {
    validate_fill(f);
  } catch (const std::invalid_argument& e) {
    r.fail(p, e.what());
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
  LAYERINIT_FAIL("spec_to_json: unknown fill kind " + std::to_string(static_cast<int>(f.kind)));
}

// ---- tensors ----

// A non-empty array of non-negative integers whose product (zeros aside) fits 64 bits. A dimension may be zero, as
// in torch: transformers makes such tensors (DeepseekV3MoE's shared experts at n_shared_experts 0).
Shape parse_shape(const json& j, const std::string& path) {
  const json& shape = j;
  if (!shape.is_array() || shape.empty()) r.fail(path, "must be a non-empty array of non-negative integers");
  Shape out;
  std::uint64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::uint64_t d = r.to_uint(shape[i], at(path, i), false);
    if (d != 0) {  // zero dimensions aside, as ModelSpec::validate counts
      if (n > std::numeric_limits<std::uint64_t>::max() / d) r.fail(path, "element count overflows 64 bits");
      n *= d;
    }
    out.push_back(d);
  }
  return out;
}

TensorRole parse_role_at(const json& v, const std::string& path) {
  return r.parsed(v, path, [](const std::string& t) { return parse_role(t); });
}

// An array of non-negative integers: a region's offset or extent (zeros allowed).
Shape parse_dims(const json& j, const std::string& path) {
  if (!j.is_array()) r.fail(path, "must be an array of non-negative integers");
  Shape out;
  for (std::size_t i = 0; i < j.size(); ++i) out.push_back(r.to_uint(j[i], at(path, i), false));
  return out;
}

// A tensor's (or a described parameter's) "regions": [{"offset", "shape", "init"}], each inside
// `shape` (the tensor's logical shape, or the parameter's as stored).
std::vector<FillRegion> parse_regions(const json& j, const std::string& path, const Shape& shape) {
  if (!j.is_array()) r.fail(path, "must be an array of {\"offset\", \"shape\", \"init\"} objects");
  std::vector<FillRegion> out;
  for (std::size_t k = 0; k < j.size(); ++k) {
    const std::string p = at(path, k);
    r.check_object(j[k], p, {"offset", "shape", "init"});
    FillRegion region;
    region.offset = parse_dims(r.require(j[k], p, "offset"), join(p, "offset"));
    region.shape = parse_dims(r.require(j[k], p, "shape"), join(p, "shape"));
    region.fill = parse_fill(r.require(j[k], p, "init"), join(p, "init"));
    if (const auto why = region_problem(region, shape))
      r.fail(p, "at " + shape_string(region.offset) + " of " + shape_string(region.shape) + " " + *why);
    out.push_back(std::move(region));
  }
  return out;
}

ojson regions_to_json(const std::vector<FillRegion>& regions) {
  ojson a = ojson::array();
  for (const FillRegion& g : regions) a.push_back({{"offset", g.offset}, {"shape", g.shape}, {"init", fill_to_json(g.fill)}});
  return a;
}

TensorSpec parse_tensor(const json& j, const std::string& path) {
  r.check_object(j, path, {"name", "shape", "role", "fan_in", "fan_out", "transposable", "init", "buffer", "tp_replicated", "regions"});
  TensorSpec t;
  t.name = r.to_string(r.require(j, path, "name"), join(path, "name"), true);
  t.shape = parse_shape(r.require(j, path, "shape"), join(path, "shape"));
  if (const json* v = find(j, "role")) t.role = parse_role_at(*v, join(path, "role"));
  if (const json* v = find(j, "fan_in")) t.fan_in = r.to_uint(*v, join(path, "fan_in"), false);
  if (const json* v = find(j, "fan_out")) t.fan_out = r.to_uint(*v, join(path, "fan_out"), false);
  if (const json* v = find(j, "transposable")) {
    t.transposable = r.to_bool(*v, join(path, "transposable"));
    if (t.transposable && t.shape.size() != 2) r.fail(join(path, "transposable"), "requires a 2-D shape");
  }
  if (const json* v = find(j, "init")) t.init = parse_fill(*v, join(path, "init"));
  if (const json* v = find(j, "buffer")) t.buffer = r.to_bool(*v, join(path, "buffer"));
  if (const json* v = find(j, "tp_replicated")) t.tp_replicated = r.to_bool(*v, join(path, "tp_replicated"));
  if (const json* v = find(j, "regions")) t.regions = parse_regions(*v, join(path, "regions"), t.shape);
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
  if (t.buffer) j["buffer"] = true;  // absent: a parameter
  if (t.tp_replicated) j["tp_replicated"] = true;
  if (!t.regions.empty()) j["regions"] = regions_to_json(t.regions);
  return j;
}

std::vector<TensorSpec> parse_tensors(const json& j, const std::string& path) {
  if (!j.is_array()) r.fail(path, "must be an array of tensors");
  std::vector<TensorSpec> out;
  for (std::size_t i = 0; i < j.size(); ++i) out.push_back(parse_tensor(j[i], at(path, i)));
  return out;
}

// ---- hyper ----

Hyper parse_hyper(const json& j, const std::string& path) {
  r.check_object(j, path, {"vocab_size", "hidden_size", "intermediate_size", "num_heads", "num_kv_heads", "head_dim",
                         "max_position_embeddings", "num_experts", "experts_per_token", "initializer_range",
                         "norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings", "bias"});
  Hyper h;
  auto u = [&](const char* key, std::uint64_t& dst) {
    if (const json* v = find(j, key)) dst = r.to_uint(*v, join(path, key), false);
  };
  auto d = [&](const char* key, double& dst) {
    if (const json* v = find(j, key)) {
      dst = r.to_double(*v, join(path, key));
      if (dst < 0) r.fail(join(path, key), "must not be negative");
    }
  };
  auto b = [&](const char* key, bool& dst) {
    if (const json* v = find(j, key)) dst = r.to_bool(*v, join(path, key));
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
    r.check_object(*v, rp, {"rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
    const json& type = r.require(*v, rp, "rope_type");
    if (!type.is_string() || type.get_ref<const std::string&>() != "llama3")
      r.fail(join(rp, "rope_type"), "must be \"llama3\" (the only rope scaling layerinit carries)");
    RopeScaling& rs = h.rope_scaling;
    rs.factor = r.to_double(r.require(*v, rp, "factor"), join(rp, "factor"));
    rs.low_freq_factor = r.to_double(r.require(*v, rp, "low_freq_factor"), join(rp, "low_freq_factor"));
    rs.high_freq_factor = r.to_double(r.require(*v, rp, "high_freq_factor"), join(rp, "high_freq_factor"));
    rs.original_max_position_embeddings = r.to_uint(r.require(*v, rp, "original_max_position_embeddings"),
                                                  join(rp, "original_max_position_embeddings"), true);
  }
  b("tie_word_embeddings", h.tie_word_embeddings);
  b("bias", h.bias);
  if (const auto p = hyper_problem(h))
    r.fail(join(path, p->field), p->message + (p->field == "num_heads" ? " (set head_dim if that is intended)" : ""));
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

}  // namespace

namespace {

ModelSpec spec_read(const json& doc) {
  r.check_object(doc, "", {"name", "family", "hyper", "pre", "layer", "post", "hf_config"});
  ModelSpec m;
  m.name = r.to_string(r.require(doc, "", "name"), "name", true);
  m.family = "custom";
  if (const json* v = find(doc, "family")) m.family = r.to_string(*v, "family", false);
  if (const json* v = find(doc, "hyper")) m.hyper = parse_hyper(*v, "hyper");
  if (const json* v = find(doc, "pre")) m.pre = parse_tensors(*v, "pre");
  if (const json* v = find(doc, "layer")) {
    r.check_object(*v, "layer", {"prefix", "first", "count", "expert_prefix", "tensors"});
    if (const json* p = find(*v, "prefix")) m.layer_prefix = r.to_string(*p, "layer.prefix", true);
    if (const json* p = find(*v, "first")) m.first_layer = r.to_uint(*p, "layer.first", false);
    m.num_layers = r.to_uint(r.require(*v, "layer", "count"), "layer.count", false);
    if (const json* p = find(*v, "expert_prefix")) m.layer.expert_prefix = r.to_string(*p, "layer.expert_prefix", true);
    m.layer.tensors = parse_tensors(r.require(*v, "layer", "tensors"), "layer.tensors");
  }
  if (const json* v = find(doc, "post")) m.post = parse_tensors(*v, "post");
  // The text as it was read, so config.json is written byte for byte (spec.hpp).
  if (const json* v = find(doc, "hf_config")) m.hf_config = r.to_string(*v, "hf_config", true);

  // Unique names, by path: layer names among themselves, pre/post names among themselves.
  std::unordered_map<std::string, std::string> seen;
  for (std::size_t i = 0; i < m.layer.tensors.size(); ++i) {
    const std::string p = at("layer.tensors", i);
    auto [it, fresh] = seen.emplace(m.layer.tensors[i].name, p);
    if (!fresh) r.fail(join(p, "name"), "duplicate name '" + m.layer.tensors[i].name + "' (also " + it->second + ")");
  }
  seen.clear();
  for (auto [list, name] : {std::pair{&m.pre, "pre"}, std::pair{&m.post, "post"}}) {
    for (std::size_t i = 0; i < list->size(); ++i) {
      const std::string p = at(name, i);
      auto [it, fresh] = seen.emplace((*list)[i].name, p);
      if (!fresh) r.fail(join(p, "name"), "duplicate name '" + (*list)[i].name + "' (also " + it->second + ")");
    }
  }
  try {
    m.validate();
  } catch (const std::invalid_argument& e) {
    throw spec_error("spec", printable(e.what()));
  } catch (const std::overflow_error& e) {
    throw spec_error("spec", printable(e.what()));
  }
  return m;
}

}  // namespace

ModelSpec spec_from_json(std::string_view text) { return spec_read(r.parse(text)); }

ModelSpec spec_from_document(const json& doc) {
  r.check_limits(doc);
  return spec_read(doc);
}

namespace {

ModelDescription description_read(const json& doc) {
  r.check_object(doc, "", {"name", "family", "naming", "hyper", "parameters"});
  ModelDescription d;
  if (const json* v = find(doc, "name")) d.name = r.to_string(*v, "name", true);
  if (const json* v = find(doc, "naming"))
    d.naming = r.parsed(*v, "naming", [](const std::string& t) { return parse_naming(t); });
  if (const json* v = find(doc, "family")) d.family = r.to_string(*v, "family", true);
  if (const json* v = find(doc, "hyper")) {
    d.hyper = parse_hyper(*v, "hyper");
    d.hyper_hidden = find(*v, "hidden_size") != nullptr;
  }
  const json& ps = r.require(doc, "", "parameters");
  if (!ps.is_array()) r.fail("parameters", "must be an array of parameters");
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const std::string path = at("parameters", i);
    const json& j = ps[i];
    r.check_object(j, path, {"name", "shape", "module", "fan_in", "fan_out", "storage", "tied_to", "role", "init", "buffer",
                                 "tp_replicated", "regions"});
    ParameterDescription p;
    p.name = r.to_string(r.require(j, path, "name"), join(path, "name"), true);
    p.shape = parse_shape(r.require(j, path, "shape"), join(path, "shape"));
    if (const json* v = find(j, "module"))
      p.module = r.parsed(*v, join(path, "module"), [](const std::string& t) { return parse_module_kind(t); });
    if (const json* v = find(j, "fan_in")) p.fan_in = r.to_uint(*v, join(path, "fan_in"), false);
    if (const json* v = find(j, "fan_out")) p.fan_out = r.to_uint(*v, join(path, "fan_out"), false);
    if (const json* v = find(j, "storage")) {
      const std::string s = r.to_string(*v, join(path, "storage"), false);
      if (s != "out-in" && s != "in-out") r.fail(join(path, "storage"), "must be \"out-in\" or \"in-out\"");
      if (p.shape.size() != 2) r.fail(join(path, "storage"), "applies to a 2-D weight");
      p.storage = s == "out-in" ? WeightStorage::out_in : WeightStorage::in_out;
    }
    if (const json* v = find(j, "tied_to")) p.tied_to = r.to_string(*v, join(path, "tied_to"), true);
    if (const json* v = find(j, "role")) p.role = parse_role_at(*v, join(path, "role"));
    if (const json* v = find(j, "init")) {
      // Also the CLI's grammar, exactly ("normal(0, 0.123456789)"): what a caller's Fill.text writes.
      if (v->is_string()) {
        p.init = r.parsed(*v, join(path, "init"), [](const std::string& t) {
          FillSpec f = ::layerinit::parse_fill(t);
          validate_fill(f);
          return f;
        });
      } else {
        p.init = parse_fill(*v, join(path, "init"));
      }
    }
    if (const json* v = find(j, "buffer")) p.buffer = r.to_bool(*v, join(path, "buffer"));
    if (const json* v = find(j, "tp_replicated")) p.tp_replicated = r.to_bool(*v, join(path, "tp_replicated"));
    if (const json* v = find(j, "regions")) p.regions = parse_regions(*v, join(path, "regions"), p.shape);
    d.parameters.push_back(std::move(p));
  }
  return d;
}

}  // namespace

// The text's limits are parse's; a document's, check_limits's: one pass over either.
ModelDescription description_from_json(std::string_view text) { return description_read(r.parse(text)); }

ModelDescription description_from_document(const json& doc) {
  r.check_limits(doc);
  return description_read(doc);
}

ModelSpec load_spec_file(const std::string& path) { return spec_from_json(read_input_file(path, "spec file")); }

ojson spec_document(const ModelSpec& s) {
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
  if (!s.hf_config.empty()) j["hf_config"] = s.hf_config;
  return j;
}

std::string spec_to_json(const ModelSpec& s) {
  // Invalid UTF-8 in a name (possible only from C++) is replaced rather than thrown.
  return spec_document(s).dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace layerinit
