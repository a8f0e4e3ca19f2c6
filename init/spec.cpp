// Model specs: sizes, names and validation.
#include <layerinit/init/spec.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <layerinit/core/errors.hpp>
#include <layerinit/dtypes/dtype.hpp>

namespace layerinit {

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();


enum class Count { parameters, buffers, all };

std::uint64_t count(const std::vector<TensorSpec>& ts, Count which) {
  std::uint64_t n = 0;
  for (const auto& t : ts)
    if (which == Count::all || t.buffer == (which == Count::buffers)) n = checked_add(n, numel(t.shape), "parameter count");
  return n;
}

std::uint64_t model_count(const ModelSpec& m, Count which) {
  const std::uint64_t n = checked_add(count(m.pre, which), count(m.post, which), "parameter count");
  return checked_add(n, checked_mul(m.num_layers, count(m.layer.tensors, which), "parameter count"), "parameter count");
}

constexpr TensorRole kRoles[] = {
    TensorRole::embedding,   TensorRole::position_embedding, TensorRole::linear_weight, TensorRole::output_weight,
    TensorRole::linear_bias, TensorRole::norm_weight,        TensorRole::norm_bias,     TensorRole::router_weight,
    TensorRole::head_weight, TensorRole::other,
};

// Names go into JSON, file headers, tables and messages as they are: nothing printable() would
// escape. Returns what is wrong, or nullptr.
const char* name_problem(std::string_view s) {
  if (printable(s) == s) return nullptr;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    const bool c1 = c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f &&
                    static_cast<unsigned char>(s[i + 1]) >= 0x80;
    if (c < 0x20 || c == 0x7f || c1) return "name contains control characters";
  }
  return "name is not valid UTF-8";
}

}  // namespace

std::optional<LayerName> split_layer_name(std::string_view prefix, std::string_view name) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  const auto dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 19) return std::nullopt;  // 19 digits fit 64 bits
  const std::string_view digits = name.substr(0, dot);
  if ((digits.size() > 1 && digits[0] == '0') || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  return LayerName{std::stoull(std::string(digits)), name.substr(dot + 1)};
}

std::string stacked_name(const ModelSpec& spec, const TensorSpec& t) { return spec.layer_prefix + t.name; }

std::optional<LayerName> split_expert_name(const LayerSpec& layer, std::string_view name) {
  if (layer.expert_prefix.empty()) return std::nullopt;
  return split_layer_name(layer.expert_prefix, name);
}

std::uint64_t num_experts(const LayerSpec& layer) {
  std::uint64_t n = 0;
  for (const auto& t : layer.tensors)
    if (const auto e = split_expert_name(layer, t.name)) n = std::max(n, e->layer + 1);
  return n;
}

std::string_view expert_layout_name(ExpertLayout e) { return e == ExpertLayout::per_expert ? "per-expert" : "stacked"; }

ExpertLayout parse_expert_layout(std::string_view s) {
  if (s == "per-expert") return ExpertLayout::per_expert;
  if (s == "stacked") return ExpertLayout::stacked;
  bad_argument("expert layout", s, "is unknown (valid: per-expert, stacked)");
}

Shape StackedLayout::shape(const ModelSpec& spec, std::size_t b, const Shape& slice) const {
  Shape s{spec.num_layers};
  if (buffers[b].fused) s.push_back(buffers[b].experts);
  s.insert(s.end(), slice.begin(), slice.end());
  return s;
}

StackedLayout stacked_layout(const ModelSpec& spec, ExpertLayout experts) {
  const LayerSpec& l = spec.layer;
  StackedLayout out;
  out.buffer.resize(l.tensors.size());
  out.expert.resize(l.tensors.size());
  const std::uint64_t E = experts == ExpertLayout::stacked ? num_experts(l) : 0;
  std::unordered_map<std::string, std::size_t> fused;  // rest -> buffer
  for (std::size_t j = 0; j < l.tensors.size(); ++j) {
    const auto e = E > 0 ? split_expert_name(l, l.tensors[j].name) : std::nullopt;
    if (!e) {
      out.buffer[j] = out.buffers.size();
      out.buffers.push_back({stacked_name(spec, l.tensors[j]), j, 1, false});
      continue;
    }
    const std::string rest(e->relative);
    auto [it, fresh] = fused.emplace(rest, out.buffers.size());
    if (fresh) out.buffers.push_back({spec.layer_prefix + l.expert_prefix + rest, j, E, true});
    out.buffer[j] = it->second;
    out.expert[j] = e->layer;
    if (e->layer == 0) out.buffers[it->second].first = j;
  }
  return out;
}

Shape stacked_shape(const ModelSpec& spec, const Shape& slice) {
  Shape shape{spec.num_layers};
  shape.insert(shape.end(), slice.begin(), slice.end());
  return shape;
}

std::string_view role_name(TensorRole r) {
  switch (r) {
    case TensorRole::embedding: return "embedding";
    case TensorRole::position_embedding: return "position_embedding";
    case TensorRole::linear_weight: return "linear_weight";
    case TensorRole::output_weight: return "output_weight";
    case TensorRole::linear_bias: return "linear_bias";
    case TensorRole::norm_weight: return "norm_weight";
    case TensorRole::norm_bias: return "norm_bias";
    case TensorRole::router_weight: return "router_weight";
    case TensorRole::head_weight: return "head_weight";
    case TensorRole::other: return "other";
  }
  return "?";
}

namespace {

std::optional<TensorRole> find_role(std::string_view s) {
  for (auto r : kRoles)
    if (role_name(r) == s) return r;
  return std::nullopt;
}

std::string valid_roles() {
  std::string out = "valid: ";
  for (auto r : kRoles) out += (r == kRoles[0] ? "" : ", ") + std::string(role_name(r));
  return out;
}

}  // namespace

TensorRole parse_role(std::string_view s) {
  if (auto r = find_role(s)) return *r;
  bad_argument("tensor role", s, "is unknown (" + valid_roles() + ")");
}

std::vector<std::string> role_names() {
  std::vector<std::string> out;
  for (auto r : kRoles) out.emplace_back(role_name(r));
  return out;
}

std::variant<TensorRole, FillSpec> parse_role_or_fill(std::string_view text, std::string_view argument) {
  if (auto r = find_role(text)) return *r;
  try {
    FillSpec f = parse_fill(text);
    validate_fill(f);
    return f;
  } catch (const bad_input& e) {
    bad_argument(argument, text, "is neither a tensor role (" + valid_roles() + ") nor a fill: " + e.problem());
  }
}

std::string ModelSpec::canonical_name(std::uint64_t layer_index, const TensorSpec& t) const {
  return layer_prefix + std::to_string(first_layer + layer_index) + "." + t.name;
}

std::uint64_t ModelSpec::total_layers() const { return first_layer + num_layers; }

std::uint64_t ModelSpec::layer_parameter_count() const { return count(layer.tensors, Count::parameters); }
std::uint64_t ModelSpec::parameter_count() const { return model_count(*this, Count::parameters); }
std::uint64_t ModelSpec::buffer_count() const { return model_count(*this, Count::buffers); }
std::uint64_t ModelSpec::element_count() const { return model_count(*this, Count::all); }

// The fill's numbers must stay in the float range prepare_fill converts them to.
void validate_fill(const FillSpec& f) {
  constexpr double fmax = std::numeric_limits<float>::max();
  auto in_range = [&](double x) { return std::isfinite(x) && std::fabs(x) <= fmax; };
  bool ok = true;
  switch (f.kind) {
    case FillKind::constant: ok = in_range(f.value); break;
    case FillKind::normal: ok = in_range(f.mean) && in_range(f.std); break;
    case FillKind::trunc_normal:
      ok = in_range(f.mean) && in_range(f.std) && in_range(f.a) && in_range(f.b);
      if (ok && f.bounds_in_std) ok = in_range(f.mean + f.a * f.std) && in_range(f.mean + f.b * f.std);
      break;
    case FillKind::uniform: ok = in_range(f.lo) && in_range(f.hi) && in_range(f.hi - f.lo); break;
    default: LAYERINIT_FAIL("validate_fill: unknown fill kind " + std::to_string(static_cast<int>(f.kind)));
  }
  if (!ok) bad_argument("fill", f.describe(), "is invalid: numbers must be finite and within float range");
  prepare_fill(f, DType::f32);
}

std::optional<std::string> region_problem(const FillRegion& r, const Shape& shape) {
  const std::size_t n = shape.size();
  if (r.offset.size() != n || r.shape.size() != n)
    return "has rank " + std::to_string(std::max(r.offset.size(), r.shape.size())) + " for a tensor of rank " + std::to_string(n) +
           " " + shape_string(shape);
  for (std::size_t d = 0; d < n; ++d)
    if (r.offset[d] > shape[d] || r.shape[d] > shape[d] - r.offset[d]) return "lies outside " + shape_string(shape);
  return std::nullopt;
}

std::string region_label(std::size_t k, const FillRegion& r) {
  return "region " + std::to_string(k) + " at " + shape_string(r.offset) + " of " + shape_string(r.shape);
}

namespace {

// What is wrong with one tensor on its own, or nullopt.
std::optional<std::string> tensor_problem(const TensorSpec& t) {
  if (t.shape.empty()) return "shape is empty (scalars are written as [1])";
  // A zero dimension is allowed (a tensor of zero elements, as torch makes them), but the other
  // dimensions' product must fit as if it were not there: strides, slabs and stacked shapes use it.
  Shape nonzero;
  for (auto d : t.shape)
    if (d != 0) nonzero.push_back(d);
  std::uint64_t n = 0;
  try {
    n = numel(nonzero);
  } catch (const std::overflow_error&) {
    return "shape " + shape_string(t.shape) + ": element count overflows 64 bits";
  }
  if (n > kMax / sizeof(float)) return "shape " + shape_string(t.shape) + ": byte count overflows 64 bits";
  if (t.transposable && t.shape.size() != 2) return "transposable but shape " + shape_string(t.shape) + " is not 2-D";
  if (t.init) {
    try {
      validate_fill(*t.init);
    } catch (const std::invalid_argument& e) {
      return std::string("init: ") + e.what();
    }
  }
  for (std::size_t k = 0; k < t.regions.size(); ++k) {
    const FillRegion& r = t.regions[k];
    if (const auto why = region_problem(r, t.shape)) return region_label(k, r) + " " + *why;
    try {
      validate_fill(r.fill);
    } catch (const std::invalid_argument& e) {
      return region_label(k, r) + ": " + e.what();
    }
  }
  return std::nullopt;
}

}  // namespace

void ModelSpec::check_experts() const {
  const LayerSpec& l = layer;
  if (l.expert_prefix.empty()) return;
  auto fail = [&](const std::string& what) { bad_argument("model", name, ": " + what); };
  if (name_problem(l.expert_prefix)) fail("expert prefix contains control characters or is not UTF-8");
  const std::uint64_t E = num_experts(l);
  if (E == 0) fail("expert prefix " + quote(l.expert_prefix) + " matches no layer tensor");
  // Per rest: how many experts, and the tensor whose shape and role all must share.
  std::unordered_map<std::string, std::pair<std::uint64_t, const TensorSpec*>> rests;
  for (const auto& t : l.tensors) {
    const auto e = split_expert_name(l, t.name);
    if (!e) continue;
    auto& [count, first] = rests[std::string(e->relative)];
    // In expert order: a stacked [L, E, ...] buffer then receives its slices in order.
    if (e->layer != count)
      fail("expert tensor " + quote(t.name) + " is listed out of order (expected expert " + std::to_string(count) +
           " of " + quote(std::string(e->relative)) + ")");
    ++count;
    if (!first) first = &t;
    else if (t.shape != first->shape || t.role != first->role || t.transposable != first->transposable)
      fail("expert tensor " + quote(t.name) + " differs from " + quote(first->name) +
           " in shape, role or transposability (experts of one weight must match)");
  }
  for (const auto& [rest, cf] : rests)
    if (cf.first != E)
      fail("expert weight " + quote(l.expert_prefix + "*." + rest) + " has " + std::to_string(cf.first) + " of " +
           std::to_string(E) + " experts (every expert weight needs experts 0.." + std::to_string(E - 1) + ")");
}

void ModelSpec::validate() const {
  auto fail = [&](const std::string& what) { bad_argument("model", name, ": " + what); };
  if (name.empty()) bad_argument("model spec", ": name is empty");
  if (const char* why = name_problem(name)) fail(why);
  if (pre.empty() && post.empty() && (num_layers == 0 || layer.tensors.empty())) fail("has no tensors");
  if (const std::uint64_t listed = pre.size() + layer.tensors.size() + post.size(); listed > kMaxSpecTensors)
    fail("lists " + std::to_string(listed) + " tensors; a spec lists at most " + std::to_string(kMaxSpecTensors));
  if (num_layers > 0 && layer.tensors.empty())
    fail("num_layers is " + std::to_string(num_layers) + " but the layer has no tensors");
  if (num_layers > 0 && layer_prefix.empty()) fail("layer prefix is empty");
  if (name_problem(layer_prefix)) fail("layer prefix contains control characters or is not UTF-8");

  // Tensors one by one, and unique names: pre/post are canonical; layer names are relative, and
  // prefix + i + "." + rel determines i (the digits run up to the first '.'), so layer names collide
  // only with each other or with a pre/post name of that form.
  std::unordered_set<std::string> rel;
  for (std::size_t k = 0; k < layer.tensors.size(); ++k) {
    const auto& t = layer.tensors[k];
    const std::string where = "layer tensor " + std::to_string(k) + " " + quote(t.name);
    if (t.name.empty()) fail("layer tensor " + std::to_string(k) + ": name is empty");
    if (const char* why = name_problem(t.name)) fail(where + ": " + why);
    if (const auto why = tensor_problem(t)) fail(where + ": " + *why);
    if (!rel.insert(t.name).second) fail("duplicate layer tensor name " + quote(t.name));
  }
  if (first_layer > 0 && num_layers == 0) fail("first_layer is " + std::to_string(first_layer) + " but there is no repeated layer");
  if (first_layer > kMax - num_layers) fail("first_layer + num_layers overflows 64 bits");
  check_experts();
  std::unordered_map<std::string, std::string> seen;  // canonical name -> where
  auto check_outer = [&](const std::vector<TensorSpec>& ts, const char* list) {
    for (std::size_t k = 0; k < ts.size(); ++k) {
      const auto& t = ts[k];
      const std::string where = std::string(list) + " tensor " + std::to_string(k) + " " + quote(t.name);
      if (t.name.empty()) fail(std::string(list) + " tensor " + std::to_string(k) + ": name is empty");
      if (const char* why = name_problem(t.name)) fail(where + ": " + why);
      if (const auto why = tensor_problem(t)) fail(where + ": " + *why);
      auto [it, fresh] = seen.emplace(t.name, where);
      if (!fresh) fail("duplicate tensor name " + quote(t.name) + " (" + it->second + " and " + where + ")");
      const auto l = num_layers > 0 ? split_layer_name(layer_prefix, t.name) : std::nullopt;
      if (l && l->layer >= first_layer && l->layer - first_layer < num_layers && rel.count(std::string(l->relative)))
        fail("duplicate tensor name " + quote(t.name) + " (" + where + " and layer " + std::to_string(l->layer) + ")");
    }
  };
  check_outer(pre, "pre");
  check_outer(post, "post");

  // Totals: elements and bytes (at 4 bytes per element, the widest dtype) fit in 64 bits.
  std::uint64_t total = 0;
  try {
    total = element_count();
  } catch (const std::overflow_error&) {
    fail("parameter count overflows 64 bits");
  }
  if (total > kMax / sizeof(float)) fail("byte count of " + std::to_string(total) + " parameters overflows 64 bits");

  // Architecture numbers, where the spec carries them.
  if (const auto p = hyper_problem(hyper)) fail(p->field + " " + p->message);
}

std::optional<HyperProblem> hyper_problem(const Hyper& h) {
  auto n = [](std::uint64_t v) { return std::to_string(v); };
  if (h.num_heads > 0 && h.hidden_size > 0 && h.head_dim == 0 && h.hidden_size % h.num_heads != 0)
    return HyperProblem{"num_heads", n(h.num_heads) + " does not divide hidden_size " + n(h.hidden_size)};
  if (h.num_kv_heads > 0 && (h.num_heads == 0 || h.num_heads % h.num_kv_heads != 0))
    return HyperProblem{"num_kv_heads", n(h.num_kv_heads) + " does not divide num_heads " + n(h.num_heads)};
  if (h.experts_per_token > h.num_experts)
    return HyperProblem{"experts_per_token", n(h.experts_per_token) + " exceeds num_experts " + n(h.num_experts)};
  const std::pair<const char*, double> reals[] = {
      {"initializer_range", h.initializer_range}, {"norm_eps", h.norm_eps}, {"rope_theta", h.rope_theta}};
  for (const auto& [field, v] : reals)
    if (!std::isfinite(v) || v < 0) return HyperProblem{field, "must be finite and >= 0"};
  const RopeScaling& rs = h.rope_scaling;
  if (rs != RopeScaling{}) {  // HF's _validate_llama3_parameters, as errors
    if (!std::isfinite(rs.factor) || rs.factor < 1) return HyperProblem{"rope_scaling.factor", "must be finite and >= 1"};
    if (!std::isfinite(rs.low_freq_factor) || rs.low_freq_factor <= 0)
      return HyperProblem{"rope_scaling.low_freq_factor", "must be finite and > 0"};
    if (!std::isfinite(rs.high_freq_factor) || rs.high_freq_factor <= rs.low_freq_factor)
      return HyperProblem{"rope_scaling.high_freq_factor", "must be finite and above low_freq_factor"};
    if (rs.original_max_position_embeddings == 0 ||
        (h.max_position_embeddings > 0 && rs.original_max_position_embeddings > h.max_position_embeddings))
      return HyperProblem{"rope_scaling.original_max_position_embeddings",
                          "must be positive and at most max_position_embeddings " + n(h.max_position_embeddings)};
  }
  return std::nullopt;
}

}  // namespace layerinit
