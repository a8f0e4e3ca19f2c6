// A model description made into a spec: every rule the adapters used to infer on their own, in one
// place, with their sources (init/describe.hpp).
#include <layerinit/init/describe.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/core/text.hpp>

#include "haiku_names.hpp"

namespace layerinit {

namespace {

// ---- The role vocabulary: the names the recipes' sources give their linear maps ----
// torchtitan 0.3.0 (models/llama3, qwen3, deepseek_v3: wq, wk, wv, wqkv, wo, w1, w2, w3, output,
// router.gate, the experts' stacked w1_EFD, w2_EDF, w3_EFD; MLA's wq_a, wq_b, wkv_a, wkv_b),
// transformers (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, gate_up_proj,
// qkv_proj; GPT-2's c_attn, c_fc, c_proj; lm_head, embed_out; DeepSeek's q_a_proj, q_b_proj,
// kv_a_proj_with_mqa, kv_b_proj; mlp.gate beside mlp.experts), Megatron-core 0.16 (linear_qkv,
// linear_proj, linear_fc1, linear_fc2; multi_latent_attention.py's linear_q_proj, linear_q_down_proj,
// linear_q_up_proj, linear_kv_down_proj, linear_kv_up_proj; models/gpt/gpt_model.py's output_layer,
// the head), GPT-NeoX (query_key_value, dense_h_to_4h, dense_4h_to_h), torch's
// nn.MultiheadAttention (in_proj, out_proj), Equinox's eqx.nn.MultiheadAttention (query_proj,
// key_proj, value_proj, output_proj), BERT-like query, key, value, fc1, fc2.
constexpr std::string_view kHeadNames[] = {"lm_head", "output", "head", "embed_out", "output_layer"};
constexpr std::string_view kOutputNames[] = {"wo", "w2", "w2_EDF", "o_proj", "down_proj", "c_proj", "out_proj",
                                             "output_proj", "dense_4h_to_h", "fc2", "linear_proj", "linear_fc2"};
constexpr std::string_view kInputNames[] = {
    "wq", "wk", "wv", "wqkv", "w1", "w3", "w1_EFD", "w3_EFD", "q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj",
    "up_proj", "gate_up_proj", "c_attn", "c_fc", "fc1", "query", "key", "value", "query_proj", "key_proj",
    "value_proj", "in_proj", "query_key_value", "dense_h_to_4h", "linear_qkv", "linear_fc1", "wq_a", "wq_b", "wkv_a",
    "wkv_b", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "linear_q_proj", "linear_q_down_proj",
    "linear_q_up_proj", "linear_kv_down_proj", "linear_kv_up_proj"};
// Learned positions: GPT-2's wpe, BERT's position_embeddings, ViT's pos_embed, OPT's embed_positions.
constexpr std::string_view kPositionNames[] = {"wpe", "position_embeddings", "pos_embed", "pos_embedding",
                                               "embed_positions"};

template <std::size_t N>
bool in(const std::string_view (&names)[N], std::string_view s) {
  return std::find(std::begin(names), std::end(names), s) != std::end(names);
}

bool is_map_role(TensorRole r) {
  return r == TensorRole::linear_weight || r == TensorRole::output_weight || r == TensorRole::head_weight ||
         r == TensorRole::router_weight;
}

std::vector<std::string_view> split_dots(std::string_view name) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0;;) {
    const std::size_t dot = name.find('.', start);
    out.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return out;
    start = dot + 1;
  }
}

// The layer a name numbers: its first decimal component (not the last, no leading zero, as
// ModelSpec::canonical_name writes it), with the prefix before it ("layers.3.mlp.w1.weight" ->
// ("layers.", 3)); experts numbered inside a layer keep their layer's number.
std::optional<std::pair<std::string, std::uint64_t>> layer_of(std::string_view name) {
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) return std::nullopt;  // the last component names the parameter
    if (const auto l = split_layer_name(name.substr(0, start), name)) return std::pair{std::string(name.substr(0, start)), l->layer};
    start = dot + 1;
  }
}

// What one parameter's own module and names say.
struct Reading {
  TensorRole role = TensorRole::other;
  bool role_known = true;
  bool stored_in_out = false;
  Shape logical;
  std::uint64_t fan_in = 0, fan_out = 0;
  bool transposable = false;
  std::optional<FillSpec> init;  // what the framework always makes it (Haiku's moving-average state)
  bool buffer = false;
  std::string unknown_because;  // why no recipe can tell its values, where the framework says
};

class Reader {
 public:
  explicit Reader(const ModelDescription& d) : haiku_(d.naming == Naming::haiku) {
    for (const auto& p : d.parameters) {
      const auto parts = split_dots(p.name);
      const std::string owner = parts.size() > 1 ? std::string(p.name.substr(0, p.name.size() - parts.back().size() - 1)) : "";
      attrs_[owner].insert(std::string(parts.back()));
      for (std::size_t k = 1; k < parts.size(); ++k)
        if (parts[k] == "experts") with_experts_.insert(join_parts(parts, k));
    }
  }

  // The role a map's own name gives it (its module's last name `short_name`, the module above
  // `parent`); nothing when the name says nothing.
  std::optional<TensorRole> map_role(std::string_view short_name, std::string_view parent_path, bool in_layer) const {
    if (in(kHeadNames, short_name) && !in_layer) return TensorRole::head_weight;
    if (in(kOutputNames, short_name)) return TensorRole::output_weight;
    const std::string_view parent_short = parent_path.substr(parent_path.rfind('.') == std::string_view::npos ? 0 : parent_path.rfind('.') + 1);
    if (short_name == "router" || (short_name == "gate" && (parent_short == "router" || with_experts_.count(std::string(parent_path)))))
      return TensorRole::router_weight;
    if (in(kInputNames, short_name)) return TensorRole::linear_weight;
    return std::nullopt;
  }

  Reading read(const ParameterDescription& p, bool in_layer) const {
    const auto parts = split_dots(p.name);
    const std::string_view attr = parts.back();
    std::string_view owner_short = parts.size() > 1 ? parts[parts.size() - 2] : std::string_view{};
    std::string parent = parts.size() > 2 ? join_parts(parts, parts.size() - 2) : "";
    const std::string owner = parts.size() > 1 ? join_parts(parts, parts.size() - 1) : "";
    if (haiku_) {  // "block/multi_head_attention/query.w": module query, parent multi_head_attention
      const auto modules = haiku::modules(owner);
      owner_short = modules.empty() ? std::string_view{} : modules.back();
      parent = modules.size() > 1 ? std::string(modules[modules.size() - 2]) : "";
    }
    const auto owner_has = [&](const char* a) { return has_attr(owner, a); };
    Reading r;
    r.logical = p.shape;
    r.fan_in = p.fan_in;
    r.fan_out = p.fan_out;
    ModuleKind kind = p.module;
    // Flax's names (flax/linen/linear.py Dense, DenseGeneral and Conv: "kernel", "bias"; Embed:
    // "embedding"; normalization.py LayerNorm, RMSNorm, GroupNorm: "scale", "bias") where no module
    // says more: a linen tree is plain dicts.
    const bool kernel = attr == "kernel" && p.shape.size() >= 2;
    bool haiku_w = false;
    if (haiku_ && kind == ModuleKind::unknown) kind = haiku_kind(p, attr, owner_short, owner, r, haiku_w);
    if (kind == ModuleKind::unknown) {
      const std::string lower = ascii_lower(owner_short);
      if (kernel || (attr == "bias" && owner_has("kernel"))) kind = ModuleKind::linear;
      else if (attr == "embedding") kind = ModuleKind::embedding;
      else if (p.shape.size() == 1 && (lower.find("norm") != std::string::npos || lower.starts_with("ln")) &&
               (attr == "weight" || attr == "scale" || attr == "bias" || attr == "offset"))
        kind = ModuleKind::norm;
    }
    const bool bias = attr == "bias" || attr == "offset" || (haiku_ && attr == "b");
    switch (kind) {
      case ModuleKind::linear:
        if (bias) {
          r.role = TensorRole::linear_bias;
        } else if (haiku_ && owner_short == "linear" &&
                   haiku::is_mha_linear(owner, [&](const std::string& m) { return attrs_.count(m) > 0; })) {
          r.role = TensorRole::output_weight;  // attention.py: the final projection is hk.Linear(name="linear")
        } else if (const auto role = map_role(owner_short, parent, in_layer)) {
          r.role = *role;
        } else {
          r.role = TensorRole::linear_weight;
          r.role_known = false;
        }
        break;
      case ModuleKind::embedding: r.role = in(kPositionNames, owner_short) ? TensorRole::position_embedding : TensorRole::embedding; break;
      case ModuleKind::norm: r.role = bias ? TensorRole::norm_bias : TensorRole::norm_weight; break;
      case ModuleKind::unknown:
        // A raw weight named as a map (torchtitan's stacked experts w1_EFD [E, F, D]): its fans are
        // its last two dimensions'.
        if (p.shape.size() >= 2) {
          if (const auto role = map_role(attr, owner, in_layer)) {
            r.role = *role;
            if (r.fan_in == 0) r.fan_in = p.shape[p.shape.size() - 1];
            if (r.fan_out == 0) r.fan_out = p.shape[p.shape.size() - 2];
          }
        }
        break;
    }
    if (p.role) {  // a caller's rule
      r.role = *p.role;
      r.role_known = true;
    }
    if (is_map_role(r.role) && p.shape.size() == 2) {
      const WeightStorage s = p.storage != WeightStorage::unknown ? p.storage
                              : kernel || haiku_w                  ? WeightStorage::in_out
                                                                   : WeightStorage::out_in;
      r.stored_in_out = s == WeightStorage::in_out;
      if (r.stored_in_out) r.logical = Shape{p.shape[1], p.shape[0]};
      r.transposable = true;
    } else if (kernel && !haiku_ && p.shape.size() > 2 && !p.init && r.fan_in == 0 && r.fan_out == 0 &&
               ascii_lower(owner_short).find("conv") == std::string::npos) {
      // A kernel of more dimensions outside a Conv: a DenseGeneral's or an attention's [in, heads, head_dim],
      // or one a transform stacked (nn.scan): which axes are its fans, which its layers, is in the
      // initializer's arguments and the transform, not in the name.
      bad_argument("parameter", p.name,
                   "is " + shape_string(p.shape) + ": a Flax kernel of more than 2 dimensions outside a Conv module "
                   "(DenseGeneral, MultiHeadDotProductAttention, or stacked by nn.scan) has fans and layer axes its "
                   "name does not tell: make the tree with layerinit.jax.eval_shape (its initializer is read), or "
                   "give stacked= for a stack, or a rule with fan_in and fan_out");
    } else if (is_map_role(r.role) && (kernel || haiku_w) && p.shape.size() > 2) {
      // An n-D kernel [..., in, out] (Conv): jax.nn.initializers' _compute_fans with in_axis -2,
      // out_axis -1, as Flax's variance_scaling reads it; Haiku's ConvND draws with fan_in
      // prod(w_shape[:-1]) (conv.py), the same number.
      std::uint64_t window = 1;
      for (std::size_t i = 0; i + 2 < p.shape.size(); ++i) window *= p.shape[i];
      if (r.fan_in == 0) r.fan_in = window * p.shape[p.shape.size() - 2];
      if (r.fan_out == 0) r.fan_out = window * p.shape.back();
    }
    return r;
  }

 private:
  // The kind of module Haiku's names give (haiku/_src/basic.py Linear: w [in, out], b; conv.py ConvND:
  // w [..., in, out], b; embed.py Embed: embeddings; layer_norm.py, rms_norm.py, batch_norm.py,
  // group_norm.py: scale, offset, which no other Haiku module has; moving_averages.py: hidden made
  // zeros, average below); `haiku_w` when it is a Linear's or ConvND's w.
  ModuleKind haiku_kind(const ParameterDescription& p, std::string_view attr, std::string_view owner_short,
                        const std::string& owner, Reading& r, bool& haiku_w) const {
    const std::string_view base = haiku::base(owner_short);
    if (attr == "w" && p.shape.size() >= 2) {
      if (p.shape.size() == 2 || base.find("conv") != std::string_view::npos) {
        haiku_w = true;
        return ModuleKind::linear;
      }
      if (!p.role && !p.init)
        bad_argument("parameter", p.name,
                     "is " + shape_string(p.shape) + ": a Haiku w is a Linear's [in, out] or, in a module named conv*, a "
                     "ConvND's [..., in, out]; a leading layer axis (hk.layer_stack) is read from a __layer_stack_* "
                     "module or given as stacked=, else describe it with a role and fans");
      return ModuleKind::unknown;
    }
    if (attr == "b" && has_attr(owner, "w")) return ModuleKind::linear;
    if (attr == "embeddings") return ModuleKind::embedding;
    if (attr == "scale" || attr == "offset") return ModuleKind::norm;
    if ((attr == "hidden" || attr == "average") && (base.ends_with("_ema") || base == "exponential_moving_average")) {
      r.buffer = true;
      if (attr == "hidden") {
        r.init = framework_fill(p.name, Naming::haiku);
      } else {
        // hk.BatchNorm reads it before the EMA's initialize() runs, so t.init stores the example
        // batch's statistics in it: values of the forward pass, which is not run here.
        r.unknown_because = "Haiku's t.init stores the example input's statistics in a moving average's average, from "
                            "the forward pass: say where it starts, e.g. constant(0) for a mean, constant(1) for a "
                            "variance";
      }
    }
    return ModuleKind::unknown;
  }

  bool has_attr(const std::string& owner, const char* attr) const {
    const auto it = attrs_.find(owner);
    return it != attrs_.end() && it->second.count(attr);
  }

  static std::string join_parts(const std::vector<std::string_view>& parts, std::size_t n) {
    std::string out;
    for (std::size_t i = 0; i < n; ++i) (out += i ? "." : "") += parts[i];
    return out;
  }
  static std::string ascii_lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return out;
  }
  bool haiku_ = false;
  std::map<std::string, std::set<std::string>, std::less<>> attrs_;  // module path -> its parameters' names
  std::set<std::string> with_experts_;                               // module paths with an "experts" child
};

// The fill `recipe` gives tensor t in context, or the reason it gives none (a differing outcome).
std::string outcome(const Recipe& recipe, const TensorContext& c) {
  try {
    return recipe.rule_for(c).text();
  } catch (const std::invalid_argument& e) {
    return std::string("error: ") + e.what();
  }
}

// A parameter's regions (stored coordinates) in its tensor's logical ones: a 2-D weight stored
// [in, out] is [out, in] in the spec, its boxes transposed with it.
std::vector<FillRegion> logical_regions(std::vector<FillRegion> regions, bool stored_in_out) {
  if (stored_in_out)
    for (FillRegion& r : regions)
      if (r.offset.size() == 2 && r.shape.size() == 2) {
        std::swap(r.offset[0], r.offset[1]);
        std::swap(r.shape[0], r.shape[1]);
      }
  return regions;
}

}  // namespace

std::string_view module_kind_name(ModuleKind k) {
  switch (k) {
    case ModuleKind::linear: return "linear";
    case ModuleKind::embedding: return "embedding";
    case ModuleKind::norm: return "norm";
    case ModuleKind::unknown: break;
  }
  return "unknown";
}

std::optional<FillSpec> framework_fill(std::string_view name, Naming naming) {
  const std::size_t dot = name.rfind('.');
  if (naming != Naming::haiku || dot == std::string_view::npos) return std::nullopt;
  const std::string_view attr = name.substr(dot + 1);
  const auto modules = haiku::modules(name.substr(0, dot));
  if (modules.empty()) return std::nullopt;
  const std::string_view base = haiku::base(modules.back());
  if (attr == "hidden" && (base.ends_with("_ema") || base == "exponential_moving_average")) return FillSpec::constant(0.0);
  if (attr == "counter" && (modules.back() == "mean_ema" || modules.back() == "var_ema")) return FillSpec::constant(0.0);
  return std::nullopt;
}

std::string_view naming_name(Naming n) { return n == Naming::haiku ? "haiku" : "generic"; }

Naming parse_naming(std::string_view s) {
  for (auto n : {Naming::generic, Naming::haiku})
    if (s == naming_name(n)) return n;
  bad_argument("naming", s, "is unknown (valid: generic, haiku)");
}

ModuleKind parse_module_kind(std::string_view s) {
  for (auto k : {ModuleKind::unknown, ModuleKind::linear, ModuleKind::embedding, ModuleKind::norm})
    if (s == module_kind_name(k)) return k;
  bad_argument("module kind", s, "is unknown (valid: unknown, linear, embedding, norm)");
}

namespace {

// describe() in its steps, each reading what the ones before found.
class Describer {
 public:
  explicit Describer(const ModelDescription& d) : d(d) {}

  DescribedModel run(const Recipe* recipe) {
    check_names();
    find_layers();
    read_parameters();
    make_tensors();
    make_spec();
    list_parameters();
    if (recipe) refuse_what_is_unknown(*recipe);
    return std::move(out);
  }

 private:
  // The first parameter of i's tie group.
  std::size_t group_of(std::size_t i) const {
    while (!d.parameters[i].tied_to.empty()) i = index.at(d.parameters[i].tied_to);
    return i;
  }

  // Names: unique; a tie names an earlier parameter of the same shape.
  void check_names() {
    for (std::size_t i = 0; i < d.parameters.size(); ++i) {
      const auto& p = d.parameters[i];
      if (!index.emplace(p.name, i).second) bad_argument("parameter", p.name, "is described twice");
      if (!p.tied_to.empty()) {
        const auto it = index.find(p.tied_to);
        if (it == index.end() || it->second == i)
          bad_argument("parameter", p.name, "is tied to " + quote(p.tied_to) + ", which is not an earlier parameter");
        if (d.parameters[it->second].shape != p.shape)
          bad_argument("parameter", p.name,
                       shape_string(p.shape) + " is tied to " + quote(p.tied_to) + " " + shape_string(d.parameters[it->second].shape));
      }
    }
  }

  // The layers: the prefix before a number holding the most tensors, numbered 0..n-1.
  void find_layers() {
    where.resize(d.parameters.size());
    std::map<std::string, std::set<std::uint64_t>> numbered;
    std::map<std::string, std::size_t> counts;
    std::vector<std::string> order;  // prefixes as first met: the first of equal counts wins
    for (std::size_t i = 0; i < d.parameters.size(); ++i) {
      if (group_of(i) != i) continue;
      where[i] = layer_of(d.parameters[i].name);
      if (!where[i] || where[i]->first.empty()) continue;
      if (!counts.count(where[i]->first)) order.push_back(where[i]->first);
      ++counts[where[i]->first];
      numbered[where[i]->first].insert(where[i]->second);
    }
    // Haiku numbers a module made again in the same scope (block, block_1, ...; layer_norm, layer_norm_1
    // twice per block): a loop's layers, or not, and in what order, the names do not tell.
    repeated.assign(d.parameters.size(), false);
    if (d.naming == Naming::haiku) {
      std::map<std::string, std::vector<std::size_t>> by_name;
      for (std::size_t i = 0; i < d.parameters.size(); ++i)
        if (group_of(i) == i && !where[i]) by_name[haiku::unnumbered(d.parameters[i].name)].push_back(i);
      for (const auto& [_, is] : by_name)
        if (is.size() > 1)
          for (const std::size_t i : is) repeated[i] = true;
    }
    for (const auto& p : order)
      if (!prefix || counts[p] > counts[*prefix]) prefix = p;
    if (prefix) {
      const auto& ls = numbered[*prefix];
      if (*ls.rbegin() + 1 != ls.size()) prefix.reset();  // not a list of layers 0..n-1: no depth known
    }
  }

  // Each parameter as its module and names say, then its tie group's tensor.
  void read_parameters() {
    const Reader reader(d);
    for (std::size_t i = 0; i < d.parameters.size(); ++i) {
      const std::size_t g = group_of(i);
      const auto& w = where[g];
      readings.push_back(reader.read(d.parameters[i], w && prefix && w->first == *prefix));
    }
    // A bias no module gave fans has those of the map weight beside it (Haiku's w, Flax's kernel): the
    // recipes that draw biases (PyTorch's and Equinox's 1/sqrt(fan_in)) read its map's fan_in.
    std::unordered_map<std::string, std::size_t> map_weight;  // module path -> its weight's reading
    auto owner_of = [&](std::size_t i) {
      const std::string& n = d.parameters[i].name;
      const std::size_t dot = n.rfind('.');
      return std::pair{dot == std::string::npos ? std::string() : n.substr(0, dot), dot == std::string::npos ? n : n.substr(dot + 1)};
    };
    for (std::size_t i = 0; i < readings.size(); ++i)
      if (const auto [owner, attr] = owner_of(i); is_map_role(readings[i].role) && (attr == "w" || attr == "kernel" || attr == "weight"))
        map_weight.emplace(owner, i);
    for (std::size_t i = 0; i < readings.size(); ++i) {
      Reading& r = readings[i];
      const auto it = map_weight.find(owner_of(i).first);
      if (r.role != TensorRole::linear_bias || r.fan_in != 0 || it == map_weight.end()) continue;
      const Reading& m = readings[it->second];
      r.fan_in = m.fan_in ? m.fan_in : m.logical.size() >= 2 ? numel(Shape(m.logical.begin() + 1, m.logical.end())) : 0;
      r.fan_out = m.fan_out ? m.fan_out : m.logical.empty() ? 0 : m.logical[0];
    }
  }

  // A tensor per tie group; a tie of an embedding and a map makes the embedding the head too.
  void make_tensors() {
    tensor_of.resize(d.parameters.size());
    for (std::size_t i = 0; i < d.parameters.size(); ++i) {
      const std::size_t g = group_of(i);
      const auto& p = d.parameters[i];
      const Reading& r = readings[i];
      if (g == i) {
        TensorSpec t;
        t.name = p.name;
        t.shape = r.logical;
        t.role = r.role;
        t.fan_in = r.fan_in;
        t.fan_out = r.fan_out;
        t.transposable = r.transposable;
        t.init = p.init ? p.init : r.init;
        t.buffer = p.buffer || r.buffer;
        t.tp_replicated = p.tp_replicated;
        t.regions = logical_regions(p.regions, r.stored_in_out);
        tensor_of[i] = tensors.size();
        tensor_index[p.name] = tensors.size();
        first_param.push_back(i);
        tensors.push_back(std::move(t));
        continue;
      }
      // A tie: one storage, one fill. An embedding tied to a map is the model's head as well
      // (nanoGPT's wte = lm_head, transformers' tie_word_embeddings): every recipe gives it the head's
      // rule (Recipe::rule_for). Other ties must agree on the role.
      tensor_of[i] = tensor_of[g];
      TensorSpec& t = tensors[tensor_of[g]];
      Reading& first = readings[g];
      const bool emb_map = (t.role == TensorRole::embedding && is_map_role(r.role)) ||
                           (r.role == TensorRole::embedding && is_map_role(t.role));
      if (emb_map) {
        t.role = TensorRole::embedding;
        t.shape = d.parameters[g].shape;  // [vocab, hidden] as the embedding stores it
        t.regions = d.parameters[g].regions;
        t.fan_in = t.fan_out = 0;
        t.transposable = false;
        first.role = TensorRole::embedding;
        first.role_known = true;
        tied_embedding = true;
      } else if (!r.role_known || (r.role == TensorRole::other && r.logical == t.shape)) {
        continue;  // the group's other names tell its role (a raw parameter's name tells none)
      } else if (t.role == TensorRole::other && r.logical == t.shape) {
        t.role = r.role;  // a raw parameter tied to a map's: the map's
        t.fan_in = r.fan_in;
        t.fan_out = r.fan_out;
        t.transposable = r.transposable;
        first.role = r.role;
        first.role_known = true;
      } else if (!first.role_known && is_map_role(r.role) && r.logical == t.shape) {
        t.role = r.role;
        first.role = r.role;
        first.role_known = true;
      } else if (r.role != t.role || r.logical != t.shape) {
        bad_argument("parameters", d.parameters[g].name,
                     "(" + std::string(role_name(t.role)) + ") and " + quote(p.name) + " (" + std::string(role_name(r.role)) +
                         ") share one storage but not a role: describe them with one role");
      }
      if (p.init) t.init = p.init;
    }
  }

  void make_spec() {
    ModelSpec& m = out.spec;
    m.name = d.name;
    m.family = d.family;
    m.hyper = d.hyper;
    if (tied_embedding) m.hyper.tie_word_embeddings = true;
    if (!d.hyper_hidden)
      for (const auto& t : tensors)
        if (t.role == TensorRole::embedding) {
          m.hyper.hidden_size = t.shape.back();
          break;
        }

    // pre / layers / post: the longest run of identical last layers is the repeated block; layers
    // before it are pre tensors under their names (docs/spec.md, layer.first).
    std::map<std::uint64_t, std::vector<std::size_t>> layers;
    std::vector<std::size_t> pre, post;
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const auto& w = where[first_param[k]];
      if (prefix && w && w->first == *prefix) layers[w->second].push_back(k);
      else (layers.empty() ? pre : post).push_back(k);
    }
    auto relative = [&](std::uint64_t l) {
      std::vector<TensorSpec> ts;
      const std::size_t cut = prefix->size() + std::to_string(l).size() + 1;
      for (const std::size_t k : layers[l]) {
        TensorSpec t = tensors[k];
        t.name = t.name.substr(cut);
        ts.push_back(std::move(t));
      }
      return ts;
    };
    for (const std::size_t k : pre) m.pre.push_back(tensors[k]);
    if (layers.empty()) {
      for (const std::size_t k : post) m.pre.push_back(tensors[k]);
    } else {
      const std::uint64_t last = layers.rbegin()->first;
      std::uint64_t first = last;
      const auto block = relative(last);
      while (first > 0 && relative(first - 1) == block) --first;
      for (std::uint64_t l = 0; l < first; ++l)
        for (const std::size_t k : layers[l]) m.pre.push_back(tensors[k]);
      m.layer.tensors = block;
      m.layer_prefix = *prefix;
      m.first_layer = first;
      m.num_layers = last - first + 1;
      for (const std::size_t k : post) m.post.push_back(tensors[k]);
    }
    m.validate();
  }

  // What each parameter became.
  void list_parameters() {
    for (std::size_t i = 0; i < d.parameters.size(); ++i) {
      const TensorSpec& t = tensors[tensor_of[i]];
      const Reading& r = readings[group_of(i)];
      DescribedParameter dp;
      dp.name = d.parameters[i].name;
      dp.tensor = t.name;
      dp.role = t.role;
      dp.role_known = r.role_known;
      const auto& w = where[group_of(i)];
      if (w && prefix && w->first == *prefix) dp.layer = w->second;
      // A top-level number ("0.weight") too is no layer.
      dp.depth_known = (!w && !repeated[group_of(i)]) || (prefix && w && w->first == *prefix);
      dp.logical = t.shape;
      dp.fan_in = t.fan_in;
      dp.fan_out = t.fan_out;
      dp.transposable = t.transposable;
      dp.stored_in_out = readings[i].stored_in_out;
      out.parameters.push_back(std::move(dp));
    }
  }

  // The refusal: each tensor whose fill under the recipe depends on what the description does not
  // tell, found by asking the recipe with each possibility.
  void refuse_what_is_unknown(const Recipe& recipe) {
    const ModelSpec& m = out.spec;
    std::vector<std::string> lacking, roles, depths, repeats;
    std::string lacking_why;  // the recipe's own words for the first it has no rule for
    std::set<std::string> asked;
    auto context = [&](const TensorSpec& t, const std::string& name, std::optional<std::uint64_t> layer) {
      return TensorContext{m, t, layer, name};
    };
    for (const auto& dp : out.parameters) {
      if (!asked.insert(dp.tensor).second) continue;
      const TensorSpec& t = tensors[tensor_index.at(dp.tensor)];
      const std::optional<std::uint64_t> layer = dp.layer;
      const std::string base = outcome(recipe, context(t, dp.tensor, layer));
      if (base.starts_with("error: ")) {
        lacking.push_back(dp.tensor + " (role " + std::string(role_name(t.role)) + ")");
        // Why, where the framework or the recipe says (no_rule's reason, between the role and "; give
        // it ..."), is quoted.
        const std::string marker = "(role " + std::string(role_name(t.role)) + "): ";
        const std::string& because = readings[group_of(index.at(dp.name))].unknown_because;
        if (const std::size_t at = base.find(marker); lacking_why.empty())
          lacking_why = !because.empty()        ? because
                        : at != std::string::npos ? base.substr(at + marker.size(), base.rfind("; give it") - at - marker.size())
                                                  : "";
        continue;
      }
      if (!dp.role_known) {
        for (const auto role : {TensorRole::linear_weight, TensorRole::output_weight, TensorRole::head_weight, TensorRole::router_weight}) {
          TensorSpec v = t;
          v.role = role;
          if (outcome(recipe, context(v, dp.tensor, layer)) != base) {
            roles.push_back(dp.tensor);
            break;
          }
        }
      }
      if (!dp.depth_known && outcome(recipe, context(t, dp.tensor, 0)) != outcome(recipe, context(t, dp.tensor, 1)))
        (repeated[group_of(index.at(dp.name))] ? repeats : depths).push_back(dp.tensor);
    }
    if (lacking.empty() && roles.empty() && depths.empty() && repeats.empty()) return;
    std::string why;
    auto add = [&](const std::vector<std::string>& names, const std::string& what) {
      if (!names.empty()) why += (why.empty() ? "" : "; ") + what + ": " + listed(names);
    };
    add(lacking, "no rule for");
    if (!lacking_why.empty()) why += " (" + lacking_why + ")";
    add(roles, "linear maps whose names do not say input, output projection, head or router");
    add(depths, "numbered outside the model's layers (" + (prefix ? *prefix : std::string("none found")) +
                    "), so their layer is unknown");
    add(repeats, "modules Haiku numbers as repeats (block, block_1, ...) outside a layer stack, so their layer is unknown");
    // What would tell it, for the causes found only: a fill always; a role where roles are missing; the
    // layers where the layer is.
    std::string advice = "; tell it per name: a fill (layerinit.torch: overrides=, a name glob -> fill such as "
                         "normal(0, 0.02); layerinit.jax: rules=, which also take a role)";
    if (!roles.empty())
      advice += ", or a role in a spec (layerinit.torch: spec=, module_spec(module) with each tensor's \"role\" set), "
                "or name the maps as the recipe's sources do (output projections wo, w2, o_proj, down_proj, c_proj, "
                "linear_proj, linear_fc2; the head lm_head, output, output_layer)";
    if (!depths.empty())
      advice += ", or put them in the model's numbered layers (layerinit.jax: stacked= for a stacked axis)";
    if (!repeats.empty()) advice += ", or make the layers with hk.layer_stack";
    bad_argument("recipe", recipe.name(),
                 "cannot tell the fill of " + std::to_string(lacking.size() + roles.size() + depths.size() + repeats.size()) +
                     " parameter(s): " + why + advice);
  }

  const ModelDescription& d;
  std::unordered_map<std::string, std::size_t> index;  // parameter name -> its index
  // Per parameter: its layer prefix and number, when its name has one.
  std::vector<std::optional<std::pair<std::string, std::uint64_t>>> where;
  std::vector<bool> repeated;            // per parameter: a module Haiku numbers as a repeat
  std::optional<std::string> prefix;     // the layers' prefix
  std::vector<Reading> readings;         // per parameter
  std::vector<TensorSpec> tensors;       // per tie group
  std::vector<std::size_t> tensor_of;    // per parameter: its tensor
  std::vector<std::size_t> first_param;  // per tensor: its tie group's first parameter
  std::unordered_map<std::string, std::size_t> tensor_index;
  bool tied_embedding = false;
  DescribedModel out;
};

}  // namespace

DescribedModel describe(const ModelDescription& d, const Recipe* recipe) { return Describer(d).run(recipe); }

}  // namespace layerinit
