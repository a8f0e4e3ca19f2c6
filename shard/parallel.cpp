#include <layerinit/shard/parallel.hpp>

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include <layerinit/core/text.hpp>

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

// Megatron's ColumnParallelLinear / RowParallelLinear / VocabParallelEmbedding and torchtitan's
// ColwiseParallel / RowwiseParallel plans, on the Hugging Face names of the presets' families.
// Experts are MLPs: Mixtral's w1 (gate) and w3 (up) and DeepSeek-V3's gate_proj and up_proj are
// column-parallel, w2 and down_proj row-parallel, in routed and shared experts alike (Megatron's
// MoE layer splits both with tp).
// GPT-2's attention stays whole: its c_attn holds [q | k | v] side by side in one [in, 3 * hidden]
// weight, so a contiguous piece of the output dimension is not whole heads of q, k and v (tp 2: rank
// 0 would get all of q and half of k), and attn.c_proj then has no column-parallel input to pair with.
struct Rule {
  const char* pattern;
  TpRule rule;
};
constexpr Rule kTpRules[] = {
    {"*.self_attn.q_proj.weight", TpRule::column}, {"*.self_attn.k_proj.weight", TpRule::column},
    {"*.self_attn.v_proj.weight", TpRule::column}, {"*.self_attn.q_proj.bias", TpRule::column},
    {"*.self_attn.k_proj.bias", TpRule::column},   {"*.self_attn.v_proj.bias", TpRule::column},
    {"*.mlp.gate_proj.weight", TpRule::column},    {"*.mlp.up_proj.weight", TpRule::column},
    {"*.experts.*.w1.weight", TpRule::column},     {"*.experts.*.w3.weight", TpRule::column},
    {"*.experts.*.gate_proj.weight", TpRule::column}, {"*.experts.*.up_proj.weight", TpRule::column},
    {"*.shared_experts.gate_proj.weight", TpRule::column}, {"*.shared_experts.up_proj.weight", TpRule::column},
    {"*.mlp.c_fc.weight", TpRule::column},         {"*.mlp.c_fc.bias", TpRule::column},
    {"*.self_attn.o_proj.weight", TpRule::row},    {"*.mlp.down_proj.weight", TpRule::row},
    {"*.experts.*.w2.weight", TpRule::row},        {"*.mlp.c_proj.weight", TpRule::row},
    {"*.experts.*.down_proj.weight", TpRule::row}, {"*.shared_experts.down_proj.weight", TpRule::row},
    {"model.embed_tokens.weight", TpRule::vocab},  {"lm_head.weight", TpRule::vocab},
    {"transformer.wte.weight", TpRule::vocab},
};

// q, k and v split by heads: tp must divide the heads, as Megatron requires.
bool splits_heads(std::string_view name) {
  for (const char* p : {"*.self_attn.q_proj.*", "*.self_attn.k_proj.*", "*.self_attn.v_proj.*"})
    if (name_matches(p, name)) return true;
  return false;
}

// The logical dimension a rule splits: a Linear weight is [out, in], GPT-2's Conv1D weight (2-D,
// not transposable) [in, out], an embedding [vocab, hidden], a bias [out].
std::size_t logical_dim(TpRule r, const TensorSpec& t) {
  if (t.shape.size() == 1) return 0;
  if (t.shape.size() != 2)
    throw std::invalid_argument("tp: tensor '" + printable(t.name) + "' has rank " + std::to_string(t.shape.size()) +
                                "; the " + std::string(tp_rule_name(r)) + "-parallel rule needs rank 1 or 2");
  const bool conv1d = !t.transposable && t.role != TensorRole::embedding && t.role != TensorRole::position_embedding;
  const std::size_t out = conv1d ? 1 : 0;
  return r == TpRule::row ? 1 - out : out;  // vocab: dimension 0 of the embedding and of lm_head [vocab, hidden]
}

}  // namespace

TpRule tp_rule(std::string_view canonical_name) {
  for (const Rule& r : kTpRules)
    if (name_matches(r.pattern, canonical_name)) return r.rule;
  return TpRule::replicate;
}

std::optional<std::uint64_t> expert_of(std::string_view relative_name) {
  constexpr std::string_view key = "experts.";
  for (std::size_t at = relative_name.find(key); at != std::string_view::npos; at = relative_name.find(key, at + 1)) {
    if (at != 0 && relative_name[at - 1] != '.') continue;
    const char* b = relative_name.data() + at + key.size();
    const char* e = relative_name.data() + relative_name.size();
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(b, e, v);
    if (ec == std::errc() && p != b && (p == e || *p == '.')) return v;
  }
  return std::nullopt;
}

ParallelDegrees parallel_degrees(std::span<const std::pair<std::string, std::uint64_t>> named) {
  ParallelDegrees d;
  std::vector<std::string_view> seen;
  for (const auto& [k, v] : named) {
    if (std::find(seen.begin(), seen.end(), k) != seen.end())
      throw std::invalid_argument("mesh dimension '" + printable(k) + "' appears twice");
    seen.push_back(k);
    if (k == "tp") d.tp = v;
    else if (k == "pp") d.pp = v;
    else if (k == "ep") d.ep = v;
    else if (k == "fsdp") d.fsdp = v;
    else throw std::invalid_argument("unknown mesh dimension '" + printable(k) + "' (valid: tp, pp, ep, fsdp)");
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
    throw std::invalid_argument(f + "tp x " + f + "pp x " + f + "ep x " + f + "fsdp overflows 64 bits");
  }
  if (rank && *rank >= plan->ranks())
    throw std::invalid_argument(f + "rank " + std::to_string(*rank) + " is outside the mesh of " + std::to_string(plan->ranks()) +
                                (plan->ranks() == 1 ? " rank" : " ranks") + " (" + plan->mesh().describe() + ": ranks 0-" +
                                std::to_string(plan->ranks() - 1) + ")");
  return std::move(*plan);
}

ParallelPlan::ParallelPlan(const ModelSpec& spec, ParallelDegrees d) : d_(d) {
  for (auto [name, v] : {std::pair{"tp", d.tp}, {"pp", d.pp}, {"ep", d.ep}, {"fsdp", d.fsdp}})
    if (v == 0) throw std::invalid_argument(std::string(name) + " must be at least 1");
  mesh_ = Mesh({{"pp", d.pp}, {"fsdp", d.fsdp}, {"ep", d.ep}, {"tp", d.tp}});
  num_layers_ = spec.num_layers;
  num_experts_ = spec.hyper.num_experts;
  tied_ = spec.hyper.tie_word_embeddings;
  std::string model = "'";  // (not "'" + string: GCC 12 warns -Wrestrict falsely)
  model += printable(spec.name);
  model += "'";

  // Stages split the repeated block; layers before it (DeepSeek-V3's dense ones) go with stage 0.
  if (d.pp > 1 && d.pp > spec.num_layers)
    throw std::invalid_argument(
        "pp " + std::to_string(d.pp) + " needs at least " + std::to_string(d.pp) + " layers" +
        (spec.first_layer ? " in the repeated block" : "") + "; " + model + " has " + std::to_string(spec.num_layers) +
        (spec.first_layer ? " there (layers " + std::to_string(spec.first_layer) + "-" +
                                std::to_string(spec.first_layer + spec.num_layers - 1) + "; the " +
                                std::to_string(spec.first_layer) + " before it go with stage 0)"
                          : ""));
  if (d.ep > 1) {
    if (num_experts_ == 0) throw std::invalid_argument("ep " + std::to_string(d.ep) + ": " + model + " has no experts");
    if (num_experts_ % d.ep != 0)
      throw std::invalid_argument("ep " + std::to_string(d.ep) + " does not divide the " + std::to_string(num_experts_) +
                                  " experts of " + model);
  }
  if (d.tp > 1) {
    bool any = false, heads = false;
    auto see = [&](const std::string& name) {
      any = any || tp_rule(name) != TpRule::replicate;
      heads = heads || (tp_rule(name) == TpRule::column && splits_heads(name));
    };
    for (const auto& t : spec.pre) see(t.name);
    for (const auto& t : spec.post) see(t.name);
    if (spec.num_layers > 0)
      for (const auto& t : spec.layer.tensors) see(spec.canonical_name(0, t));
    if (!any)
      throw std::invalid_argument("tp " + std::to_string(d.tp) + ": no tensor of " + model +
                                  " has a tensor-parallel rule (docs/sharding.md lists the names)");
    const Hyper& h = spec.hyper;
    if (heads && (h.num_heads == 0 || h.num_heads % d.tp != 0))
      throw std::invalid_argument("tp " + std::to_string(d.tp) + " does not divide the " + std::to_string(h.num_heads) +
                                  " attention heads of " + model);
    if (heads && (h.num_kv_heads == 0 || h.num_kv_heads % d.tp != 0))
      throw std::invalid_argument("tp " + std::to_string(d.tp) + " does not divide the " + std::to_string(h.num_kv_heads) +
                                  " key/value heads of " + model + " (each rank needs whole heads)");
  }
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
      const auto e = expert_of(t.name);
      if (!e || d_.ep == 1) return true;
      const Range mine = chunk(num_experts_, d_.ep, c.ep);
      return *e >= mine.offset && *e < mine.offset + mine.size;
    }
  }
  return false;
}

Box ParallelPlan::box(const PlannedTensor& p, const TensorSpec& t, const Coords& c) const {
  Box b = whole_box(p.memory_shape);
  if (d_.tp > 1) {
    const TpRule r = tp_rule(p.name);
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
