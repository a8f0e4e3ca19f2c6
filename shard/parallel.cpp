#include <layerinit/shard/parallel.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

std::string_view tp_rule_name(TpRule r) {
  switch (r) {
    case TpRule::replicate: return "replicate";
    case TpRule::column: return "column";
    case TpRule::row: return "row";
    case TpRule::vocab: return "vocab";
  }
  return "?";
}

namespace {

// The module a parameter belongs to: "self_attn.q_proj.weight" is q_proj's; gpt-oss's
// "mlp.experts.down_proj" is a parameter of mlp.experts itself.
std::string_view owner(std::string_view name) {
  const auto dot = name.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(0, dot);
}

// Megatron's ColumnParallelLinear / RowParallelLinear / VocabParallelEmbedding and torchtitan's
// ColwiseParallel / RowwiseParallel / NoParallel plans, read from roles and the modules' nesting,
// never from names (docs/sharding.md):
// - A block of maps (the maps whose modules share a parent: self_attn, mlp, one expert) is split
//   when it has a row-parallel partner: its output_weight maps are row-parallel and its other maps
//   column-parallel, except those marked tp_replicated (DeepSeek-V3's q_a_proj, torchtitan's
//   NoParallel). A block whose maps would all stay whole (GPT-2's attention, whose fused c_attn is
//   [q | k | v] side by side, so a contiguous piece is not whole heads) or that holds a map of rank
//   above 2 (gpt-oss's [E, in, out] experts) is replicated, its output map with it: that map has no
//   split input to pair with. A block without an output map (a plain MLP stack) is replicated.
// - A bias is column-parallel when every map of its module is (q_proj.bias; with mlp_bias, gate and
//   up biases), else replicated (o_proj.bias is added after the row-parallel reduction).
// - A token embedding is vocab-parallel, and so is the head of a model that has one (lm_head); an
//   MLP's output layer is not a vocabulary.
// - Everything else (norms, routers, position embeddings, buffers) is replicated.
void rules_of(std::span<const TensorSpec> ts, bool language_model, std::vector<TpRule>& out) {
  out.assign(ts.size(), TpRule::replicate);
  const auto is_map = [](const TensorSpec& t) {
    return t.role == TensorRole::linear_weight || t.role == TensorRole::output_weight;
  };
  std::map<std::string_view, std::vector<std::size_t>> blocks;  // parent module -> its maps
  for (std::size_t j = 0; j < ts.size(); ++j) {
    const TensorSpec& t = ts[j];
    if (is_map(t)) blocks[owner(owner(t.name))].push_back(j);
    else if (t.shape.size() == 2 && (t.role == TensorRole::embedding || (t.role == TensorRole::head_weight && language_model)))
      out[j] = TpRule::vocab;
  }
  for (const auto& [parent, maps] : blocks) {
    bool rows = false, columns = false, splits = true;
    for (const std::size_t j : maps) {
      const bool flat = ts[j].shape.size() == 2;
      if (ts[j].role == TensorRole::output_weight) {
        rows = true;
        splits = splits && flat && !ts[j].tp_replicated;
      } else if (!ts[j].tp_replicated) {
        columns = columns || flat;
        splits = splits && flat;
      }
    }
    if (!(rows && columns && splits)) continue;
    for (const std::size_t j : maps)
      out[j] = ts[j].role == TensorRole::output_weight ? TpRule::row : ts[j].tp_replicated ? TpRule::replicate : TpRule::column;
  }
  std::map<std::string_view, std::pair<std::size_t, std::size_t>> by_module;  // module -> maps, column-parallel maps
  for (std::size_t j = 0; j < ts.size(); ++j) {
    if (!is_map(ts[j])) continue;
    auto& [maps, columns] = by_module[owner(ts[j].name)];
    ++maps;
    columns += out[j] == TpRule::column;
  }
  for (std::size_t j = 0; j < ts.size(); ++j) {
    if (ts[j].role != TensorRole::linear_bias || ts[j].shape.size() != 1) continue;
    const auto it = by_module.find(owner(ts[j].name));
    if (it != by_module.end() && it->second.first == it->second.second) out[j] = TpRule::column;
  }
}

// The logical dimension a rule splits: a Linear weight is [out, in], GPT-2's Conv1D weight (2-D,
// not transposable) [in, out], an embedding [vocab, hidden], a bias [out].
std::size_t logical_dim(TpRule r, const TensorSpec& t) {
  if (t.shape.size() == 1) return 0;
  const bool conv1d = !t.transposable && t.role != TensorRole::embedding && t.role != TensorRole::position_embedding;
  const std::size_t out = conv1d ? 1 : 0;
  return r == TpRule::row ? 1 - out : out;  // vocab: dimension 0 of the embedding and of lm_head [vocab, hidden]
}

}  // namespace

TpRules tp_rules(const ModelSpec& spec) {
  bool language_model = false;
  for (const auto* list : {&spec.pre, &spec.post})
    for (const TensorSpec& t : *list) language_model = language_model || t.role == TensorRole::embedding;
  TpRules r;
  rules_of(spec.pre, language_model, r.pre);
  rules_of(spec.layer.tensors, language_model, r.layer);
  rules_of(spec.post, language_model, r.post);
  return r;
}

ParallelDegrees parallel_degrees(std::span<const std::pair<std::string, std::uint64_t>> named) {
  ParallelDegrees d;
  std::vector<std::string_view> seen;
  for (const auto& [k, v] : named) {
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) bad_argument("mesh dimension", k, "appears twice");
    seen.push_back(k);
    if (k == "tp") d.tp = v;
    else if (k == "pp") d.pp = v;
    else if (k == "ep") d.ep = v;
    else if (k == "fsdp") d.fsdp = v;
    else bad_argument("mesh dimension", k, "is unknown (valid: tp, pp, ep, fsdp)");
  }
  return d;
}

ParallelPlan ParallelPlan::checked(const ModelSpec& spec, ParallelDegrees degrees, std::optional<std::uint64_t> rank,
                                   std::string_view flag) {
  const std::string f(flag);
  std::optional<ParallelPlan> plan;
  try {
    plan.emplace(spec, degrees);
  } catch (const std::overflow_error&) {
    bad_argument(f + "tp x " + f + "pp x " + f + "ep x " + f + "fsdp", "overflows 64 bits");
  }
  if (rank && *rank >= plan->ranks())
    bad_argument(f + "rank", *rank,
                 "is outside the mesh of " + std::to_string(plan->ranks()) + (plan->ranks() == 1 ? " rank" : " ranks") + " (" +
                     plan->mesh().describe() + ": ranks 0-" + std::to_string(plan->ranks() - 1) + ")");
  return std::move(*plan);
}

ParallelPlan::ParallelPlan(const ModelSpec& spec, ParallelDegrees d) : d_(d) {
  for (auto [name, v] : {std::pair{"tp", d.tp}, {"pp", d.pp}, {"ep", d.ep}, {"fsdp", d.fsdp}})
    if (v == 0) bad_argument(name, v, "must be at least 1");
  mesh_ = Mesh({{"pp", d.pp}, {"fsdp", d.fsdp}, {"ep", d.ep}, {"tp", d.tp}});
  num_layers_ = spec.num_layers;
  // Experts are the layer tensors under the spec's expert prefix (split_expert_name), never guessed
  // from names.
  expert_prefix_ = spec.layer.expert_prefix;
  num_experts_ = num_experts(spec.layer);
  tied_ = spec.hyper.tie_word_embeddings;
  const std::string model = quote(spec.name);

  // Stages split the repeated block; layers before it (DeepSeek-V3's dense ones) go with stage 0.
  if (d.pp > 1 && d.pp > spec.num_layers)
    bad_argument("pp", d.pp,
                 "needs at least " + std::to_string(d.pp) + " layers" + (spec.first_layer ? " in the repeated block" : "") +
                     "; " + model + " has " + std::to_string(spec.num_layers) +
                     (spec.first_layer ? " there (layers " + std::to_string(spec.first_layer) + "-" +
                                             std::to_string(spec.first_layer + spec.num_layers - 1) + "; the " +
                                             std::to_string(spec.first_layer) + " before it go with stage 0)"
                                       : ""));
  if (d.ep > 1) {
    if (num_experts_ == 0 && spec.hyper.num_experts == 0) bad_argument("ep", d.ep, ": " + model + " has no experts");
    if (num_experts_ == 0)
      bad_argument("ep", d.ep, ": the " + std::to_string(spec.hyper.num_experts) + " experts of " + model +
                                   " are not tensors of their own (no layer.expert_prefix; gpt-oss keeps them in one [E, ...] tensor)");
    if (num_experts_ % d.ep != 0)
      bad_argument("ep", d.ep, "does not divide the " + std::to_string(num_experts_) + " experts of " + model);
  }
  const TpRules rules = tp_rules(spec);
  const std::span<const TensorSpec> lists[3] = {spec.pre, spec.layer.tensors, spec.post};
  const std::vector<TpRule>* by_kind[3] = {&rules.pre, &rules.layer, &rules.post};
  // Heads stay whole (Megatron): a column-parallel map as wide as the query or key/value heads needs
  // tp to divide them.
  const Hyper& h = spec.hyper;
  const std::uint64_t head_dim = h.head_dim ? h.head_dim : h.num_heads ? h.hidden_size / h.num_heads : 0;
  bool any = false, heads = false;
  for (std::size_t k = 0; k < 3; ++k)
    for (std::size_t j = 0; j < lists[k].size(); ++j) {
      const TpRule r = (*by_kind[k])[j];
      if (r == TpRule::replicate) continue;
      any = true;
      split_[k].emplace(lists[k][j].name, r);
      if (r != TpRule::column || head_dim == 0) continue;
      const std::uint64_t out = lists[k][j].shape[logical_dim(r, lists[k][j])];
      heads = heads || out == h.num_heads * head_dim || out == h.num_kv_heads * head_dim;
    }
  if (d.tp > 1) {
    if (!any) bad_argument("tp", d.tp, ": no tensor of " + model + " has a tensor-parallel rule (docs/sharding.md lists the rules)");
    if (heads && (h.num_heads == 0 || h.num_heads % d.tp != 0))
      bad_argument("tp", d.tp, "does not divide the " + std::to_string(h.num_heads) + " attention heads of " + model);
    if (heads && (h.num_kv_heads == 0 || h.num_kv_heads % d.tp != 0))
      bad_argument("tp", d.tp,
                   "does not divide the " + std::to_string(h.num_kv_heads) + " key/value heads of " + model +
                       " (each rank needs whole heads)");
  }
}

TpRule ParallelPlan::tp_rule(const TensorSpec& t, TensorPlace where) const {
  const auto& split = split_[static_cast<std::size_t>(where.kind)];
  const auto it = split.find(t.name);
  return it == split.end() ? TpRule::replicate : it->second;
}

ParallelPlan::Coords ParallelPlan::coords(std::uint64_t rank) const {
  const auto c = mesh_.coords(rank);
  return {c[0], c[1], c[2], c[3]};
}

std::uint64_t ParallelPlan::rank(const Coords& c) const {
  const std::uint64_t v[4] = {c.pp, c.fsdp, c.ep, c.tp};
  return mesh_.rank(v);
}

Range ParallelPlan::stage_layers(std::uint64_t stage) const {
  if (stage >= d_.pp) throw std::out_of_range("stage " + std::to_string(stage) + " of " + std::to_string(d_.pp));
  const std::uint64_t q = num_layers_ / d_.pp, r = num_layers_ % d_.pp;
  return {stage * q + std::min(stage, r), q + (stage < r ? 1 : 0)};
}

std::uint64_t ParallelPlan::stage_of_layer(std::uint64_t layer) const {
  if (layer >= num_layers_) throw std::out_of_range("layer " + std::to_string(layer) + " of " + std::to_string(num_layers_));
  const std::uint64_t q = num_layers_ / d_.pp, r = num_layers_ % d_.pp;
  const std::uint64_t long_part = r * (q + 1);  // layers of the stages that hold one more
  return layer < long_part ? layer / (q + 1) : r + (layer - long_part) / q;
}

bool ParallelPlan::holds(const TensorSpec& t, TensorPlace where, const Coords& c) const {
  switch (where.kind) {
    case TensorPlace::Kind::pre:
      return c.pp == 0 || (tied_ && c.pp == d_.pp - 1 && t.role == TensorRole::embedding);
    case TensorPlace::Kind::post:
      return c.pp == d_.pp - 1;
    case TensorPlace::Kind::layer: {
      if (stage_of_layer(where.layer) != c.pp) return false;
      if (d_.ep == 1 || expert_prefix_.empty()) return true;
      const auto e = split_layer_name(expert_prefix_, t.name);
      if (!e) return true;  // shared by all experts: the router, shared experts
      const Range mine = chunk(num_experts_, d_.ep, c.ep);
      return e->layer >= mine.offset && e->layer < mine.offset + mine.size;
    }
  }
  return false;
}

Box ParallelPlan::box(const PlannedTensor& p, const TensorSpec& t, TensorPlace where, const Coords& c) const {
  Box b = whole_box(p.memory_shape);
  if (d_.tp > 1) {
    const TpRule r = tp_rule(t, where);
    if (r != TpRule::replicate) {
      std::size_t dim = logical_dim(r, t);
      if (p.transposed) dim = 1 - dim;  // memory holds [in, out]
      b = split_box(b, dim, d_.tp, c.tp);
    }
  }
  if (d_.fsdp > 1) b = split_box(b, 0, d_.fsdp, c.fsdp);
  return b;
}

std::string ParallelPlan::describe() const {
  return mesh_.describe() + " = " + std::to_string(mesh_.size()) + (mesh_.size() == 1 ? " rank" : " ranks");
}

}  // namespace layerinit
