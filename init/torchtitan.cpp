// A torchtitan model's parameters as the Hugging Face tensors its state-dict adapter loads
// (init/describe.hpp, torchtitan_parameters): names, fused and stacked parameters, q/k row order.
#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/describe.hpp>

namespace layerinit {
namespace {

// A refusal in the adapter's words, no one value in it: the line is the problem.
[[noreturn]] void refused(const std::string& argument, const std::string& line) { throw bad_input(argument, "", line, line); }

std::string replaced_once(std::string s, std::string_view what, std::string_view with) {
  if (const std::size_t at = s.find(what); at != std::string::npos) s.replace(at, what.size(), with);
  return s;
}

// A Hugging Face name as a composite's name template: braces doubled, then each "{}" left in it (the
// expert index) stack axis k's "{k}".
std::string name_template(const std::string& name, std::size_t axes = 0) {
  std::string out;
  std::size_t k = 0, from = 0;
  for (std::size_t at; (at = name.find("{}", from)) != std::string::npos; from = at + 2)
    out += escape_template(name.substr(from, at - from)) + "{" + std::to_string(k++) + "}";
  out += escape_template(name.substr(from));
  if (k != axes) refused("name_map", name + ": " + std::to_string(k) + " '{}' for " + std::to_string(axes) + " stack axes");
  return out;
}

// A dotted name without its last component ("" for one component).
std::string head(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

struct HfName {
  std::string name;     // empty: the adapter names none
  std::string pattern;  // the adapter's, "{}" unfilled
};

// A key's Hugging Face name, as the adapters' to_hf finds it: the key's first integer is the layer.
HfName hf_name(const TorchtitanModel& m, const std::string& key) {
  const std::size_t start = std::find_if(key.begin(), key.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) - key.begin();
  std::size_t end = start;
  while (end < key.size() && std::isdigit(static_cast<unsigned char>(key[end]))) ++end;
  const std::string layer = key.substr(start, end - start);
  const std::string abstract = start == key.size() ? key : key.substr(0, start) + "{}" + key.substr(end);
  std::optional<std::string> pattern;
  for (const auto& [titan, hf] : m.to_hf)  // the last of equal keys, as a dict built from the map keeps it
    if (titan == abstract) pattern = hf;
  if (!pattern) return {};
  return {layer.empty() ? *pattern : replaced_once(*pattern, "{}", layer), *pattern};
}

// torchtitan's interleaved q/k rows against Hugging Face's rotate-half ones (llama3's from_hf:
// _reverse_permute, [heads, 2, hd/2] -> [heads, hd/2, 2]), or none.
std::optional<std::string> rows_of(const TorchtitanModel& m, const std::string& name, std::uint64_t heads, std::uint64_t rows) {
  if (!m.rope_interleaved || !(name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight"))) return std::nullopt;
  if (heads == 0) refused("module", "torchtitan " + m.package + ": " + name + " has no heads to interleave its rows by");
  return "rope_interleave(" + std::to_string(rows / heads) + ")";
}

ParameterDescription tensor(const DescribedParameter& e, std::string name, Shape shape) {
  ParameterDescription p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.role = e.role;
  p.fan_in = e.fan_in;
  p.fan_out = e.fan_out;
  return p;
}

// A fused wqkv [n_kv * (heads per kv + 2) * hd, ...]: each kv group's q heads, then its k, then its v.
void fused_qkv(const TorchtitanModel& m, const TorchtitanModel::FusedQkv& f, const DescribedParameter& e,
               ModelDescription& d, std::vector<TorchtitanPart>& parts, std::vector<std::string>& missing) {
  const std::string owner = head(e.name);
  const std::string base = owner.substr(0, owner.size() - 4), attr = e.name.substr(e.name.rfind('.') + 1);
  const Shape tail(e.logical.begin() + 1, e.logical.end());
  TorchtitanPart part{e.name, {}, false, {}, {}, m.kv_heads};
  const std::pair<const char*, std::uint64_t> pieces[] = {{"wq", m.kv_heads * f.heads_per_kv * f.head_dim},
                                                          {"wk", m.kv_heads * f.head_dim},
                                                          {"wv", m.kv_heads * f.head_dim}};
  for (const auto& [w, rows] : pieces) {
    const std::string key = base + w + "." + attr;
    const HfName hf = hf_name(m, key);
    if (hf.name.empty()) {
      missing.push_back(key);
      continue;
    }
    part.templates.push_back(name_template(hf.name));
    part.rows.push_back(rows_of(m, hf.name, f.head_dim ? rows / f.head_dim : 0, rows));
    Shape shape{rows};
    shape.insert(shape.end(), tail.begin(), tail.end());
    ParameterDescription p = tensor(e, hf.name, shape);
    p.role = tail.empty() ? TensorRole::linear_bias : TensorRole::linear_weight;
    p.fan_out = rows;
    d.parameters.push_back(std::move(p));
  }
  if (part.templates.size() == 3) parts.push_back(std::move(part));
}

}  // namespace

std::vector<TorchtitanPart> torchtitan_parameters(const TorchtitanModel& m, ModelDescription& d) {
  std::vector<std::string> unnamed, missing;
  for (const auto& e : m.parameters)
    if (e.tensor == e.name && !e.role_known) unnamed.push_back(e.name);
  if (!unnamed.empty())
    refused("module", "torchtitan " + m.package + ": no role for " + std::to_string(unnamed.size()) + " linear map(s): " +
                          listed(unnamed) + "; pass spec= and name_map=");
  std::vector<TorchtitanPart> parts;
  for (const auto& e : m.parameters) {
    if (e.tensor != e.name) continue;  // a tied parameter under its first name
    const std::string owner = head(e.name), parent = head(owner);
    const auto f = std::find_if(m.fused_qkv.begin(), m.fused_qkv.end(), [&](const auto& q) { return q.module == parent; });
    if (f != m.fused_qkv.end() && owner.ends_with(".wqkv")) {
      fused_qkv(m, *f, e, d, parts, missing);
      continue;
    }
    const HfName hf = hf_name(m, e.name);
    if (hf.name.empty()) {
      missing.push_back(e.name);
      continue;
    }
    const Shape& shape = e.logical;
    std::size_t holes = 0;
    for (std::size_t at = hf.pattern.find("{}"); at != std::string::npos; at = hf.pattern.find("{}", at + 2)) ++holes;
    if (holes == 2 && !shape.empty()) {  // stacked experts [E, ...]: expert x is the Hugging Face tensor of expert x
      const Shape per(shape.begin() + 1, shape.end());
      for (std::uint64_t x = 0; x < shape[0]; ++x)
        d.parameters.push_back(tensor(e, replaced_once(hf.name, "{}", std::to_string(x)), per));
      parts.push_back({e.name, {name_template(hf.name, 1)}, false, {std::nullopt}, {shape[0]}, 1});
      continue;
    }
    d.parameters.push_back(tensor(e, hf.name, shape));
    const auto perm = rows_of(m, hf.name, hf.name.ends_with("q_proj.weight") ? m.heads : m.kv_heads, shape[0]);
    if (perm) parts.push_back({e.name, {name_template(hf.name)}, false, {perm}, {}, 1});
    else parts.push_back({e.name, {hf.name}, true, {}, {}, 1});
  }
  // Buffers a checkpoint holds: DeepSeek-V3's router correction bias, zero at the start (torchtitan's
  // MoE._init_self_buffers, layerinit's deepseek_v3 family); any other is not known.
  for (const auto& [name, shape] : m.buffers) {
    const HfName hf = hf_name(m, name);
    if (hf.name.empty()) continue;
    if (!hf.name.ends_with(".e_score_correction_bias")) {
      missing.push_back(name + " (a buffer, " + hf.name + ")");
      continue;
    }
    ParameterDescription p;
    p.name = hf.name;
    p.shape = shape;
    p.role = TensorRole::linear_bias;
    p.fan_in = m.width;
    p.fan_out = shape.empty() ? 0 : shape[0];
    p.init = FillSpec::constant(0);
    d.parameters.push_back(std::move(p));
    parts.push_back({name, {hf.name}, true, {}, {}, 1});
  }
  if (!missing.empty())
    refused("module", "torchtitan's " + m.adapter + " names no Hugging Face tensor for " + std::to_string(missing.size()) +
                          " parameter(s): " + listed(missing));
  return parts;
}

}  // namespace layerinit
