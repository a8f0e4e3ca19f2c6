#include <layerinit/shard/tensor_index.hpp>

#include <regex>
#include <stdexcept>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

namespace layerinit {

namespace {
constexpr std::size_t kMaxNameInMessage = 200;  // an unknown name in not_found()'s line

bool same_regions(const PlannedTensor& p, const std::vector<FillRegion>& regions) {
  if (p.regions.size() != regions.size()) return false;
  for (std::size_t k = 0; k < regions.size(); ++k)
    if (!(p.regions[k].region == regions[k])) return false;
  return true;
}
}  // namespace

TensorIndex::TensorIndex(const Builder& builder) : builder_(builder) {
  const ModelSpec& s = builder.spec();
  for (std::size_t i = 0; i < s.pre.size(); ++i) pre_.emplace(s.pre[i].name, i);
  for (std::size_t i = 0; i < s.post.size(); ++i) post_.emplace(s.post[i].name, i);
  for (std::size_t j = 0; j < s.layer.tensors.size(); ++j) layer_.emplace(s.layer.tensors[j].name, j);
  if (builder.options().layout == Layout::stacked && s.num_layers > 0) {
    stacked_ = layerinit::stacked_layout(s, builder.options().experts);
    for (std::size_t b = 0; b < stacked_.buffers.size(); ++b) buffers_.emplace(stacked_.buffers[b].name, b);
  }
}

std::uint64_t TensorIndex::tensor_count() const {
  const ModelSpec& s = builder_.spec();
  const std::uint64_t layers = builder_.options().layout == Layout::stacked
                                   ? (s.num_layers > 0 ? stacked_.buffers.size() : 0)
                                   : saturating_mul(s.num_layers, s.layer.tensors.size());
  return saturating_add(saturating_add(s.pre.size(), s.post.size()), layers);
}

std::optional<PlannedTensor> TensorIndex::planned(std::string_view name) const {
  const std::string key(name);
  if (const auto it = pre_.find(key); it != pre_.end()) return builder_.plan_pre()[it->second];
  if (const auto it = post_.find(key); it != post_.end()) return builder_.plan_post()[it->second];
  const ModelSpec& s = builder_.spec();
  const auto l = split_layer_name(s.layer_prefix, name);
  if (!l || l->layer < s.first_layer || l->layer - s.first_layer >= s.num_layers) return std::nullopt;
  const auto it = layer_.find(std::string(l->relative));
  if (it == layer_.end()) return std::nullopt;
  const std::uint64_t i = l->layer - s.first_layer;
  std::lock_guard lock(mu_);
  if (cached_layer_ != i) {
    cached_ = builder_.plan_layer(i);
    cached_layer_ = i;
  }
  return cached_[it->second];
}

std::optional<std::size_t> TensorIndex::stacked_buffer(std::string_view name) const {
  const auto it = buffers_.find(std::string(name));
  if (it == buffers_.end()) return std::nullopt;
  return it->second;
}

Composite TensorIndex::assemble(std::span<const std::string> templates, std::span<const StackAxis> stack, std::size_t dim,
                                std::span<const RowPermutation> rows, std::uint64_t groups, std::string_view what) const {
  if (templates.empty()) bad_argument(what, ": no tensors");
  // The Python binding checks the two counts against each other first: a C++ caller's mismatch is misuse.
  LAYERINIT_EXPECTS(rows.empty() || rows.size() == templates.size(),
                    std::string(what) + ": " + std::to_string(rows.size()) + " row permutations for " +
                        std::to_string(templates.size()) + " tensors");
  std::uint64_t positions = 1;
  Shape sizes;
  for (const StackAxis& a : stack) {
    positions = checked_mul(positions, a.size, "stack positions");
    sizes.push_back(a.size);
  }
  std::vector<CompositePart> parts(templates.size());
  std::vector<std::string> first_names(templates.size());  // each template's at position 0
  std::optional<PlannedTensor> first;  // the first tensor: every other has its dtype
  Shape pos(stack.size(), 0), names(stack.size());
  for (std::uint64_t flat = 0; flat < positions; ++flat) {
    for (std::size_t k = 0; k < stack.size(); ++k) names[k] = stack[k].first + pos[k];
    for (std::size_t i = 0; i < templates.size(); ++i) {
      const std::string name = expand_template(templates[i], names);
      const std::optional<PlannedTensor> p = planned(name);
      if (!p) refuse_unknown(name);
      CompositePart& part = parts[i];
      if (!first) first = p;
      if (p->dtype != first->dtype)
        bad_argument(what, "needs one dtype: " + quote(first->name) + " is " + std::string(dtype_name(first->dtype)) + ", " +
                               quote(p->name) + " " + std::string(dtype_name(p->dtype)));
      if (flat == 0) {
        part.name = templates[i];
        part.shape = p->shape;
        part.dtype = p->dtype;
        part.transposed = p->transposed;
        part.source = whole_box(p->memory_shape);
        if (!rows.empty()) part.rows = rows[i];
        for (const PlannedRegion& r : p->regions) part.regions.push_back(r.region);
        first_names[i] = name;
      } else if (p->shape != part.shape || p->transposed != part.transposed) {
        bad_argument(what, ": " + quote(p->name) + " is " + shape_string(p->shape) + (p->transposed ? " (stored transposed)" : "") +
                               ", its position 0 " + shape_string(part.shape) + (part.transposed ? " (stored transposed)" : ""));
      } else if (!same_regions(*p, part.regions)) {
        // A part has one list of regions for all its positions (a layer tensor's are every layer's).
        bad_argument(what, ": " + quote(p->name) + " has other regions than its position 0 " + quote(first_names[i]) +
                               " (one array holds tensors of one list of regions)");
      }
      if (!part.fills.empty() && part.fills.back().fill == p->fill) {
        ++part.fills.back().count;
      } else {
        part.fills.push_back({1, p->fill});
      }
    }
    next_index(pos, sizes);
  }
  return concatenate(std::move(parts), dim, std::vector<StackAxis>(stack.begin(), stack.end()), groups);
}

Composite TensorIndex::stacked(std::size_t b, std::uint64_t first, std::uint64_t count) const {
  const ModelSpec& s = builder_.spec();
  // composite() and fill_jobs() ask only for buffers and layers there are (fill_jobs checks the box first).
  LAYERINIT_EXPECTS(b < stacked_.buffers.size(), "stacked buffer " + std::to_string(b) + " of " + std::to_string(stacked_.buffers.size()));
  LAYERINIT_EXPECTS(first <= s.num_layers && count <= s.num_layers - first && count > 0,
                    "layers " + std::to_string(first) + " .. " + std::to_string(first + count) + " of " + std::to_string(s.num_layers));
  const StackedBuffer& buf = stacked_.buffers[b];
  const TensorSpec& t0 = s.layer.tensors[buf.first];
  std::string name = escape_template(s.layer_prefix) + "{0}.";
  std::vector<StackAxis> axes{{count, s.first_layer + first}};
  if (buf.fused) {
    const auto e = split_expert_name(s.layer, t0.name);
    name += escape_template(s.layer.expert_prefix) + "{1}." + escape_template(e->relative);
    axes.push_back({buf.experts, 0});
  } else {
    name += escape_template(t0.name);
  }
  return assemble(std::vector<std::string>{name}, axes, 0, {}, 1, "stacked tensor " + quote(buf.name));
}

Composite TensorIndex::composite(std::string_view name) const {
  if (const auto b = stacked_buffer(name)) return stacked(*b, 0, builder_.spec().num_layers);
  if (const auto p = planned(name)) return whole_tensor(*p);
  refuse_unknown(name);
}

void TensorIndex::fill_jobs(std::string_view name, const Box& box, const Region& dst, DType have,
                            std::vector<FillJob>& out) const {
  auto check_dtype = [&](const std::string& what, DType planned) {
    if (planned != have)
      bad_argument("tensor", what, "is planned as " + std::string(dtype_name(planned)) + " but the array is " + std::string(dtype_name(have)));
  };
  if (const auto b = stacked_buffer(name)) {
    // Only the layers in the box: [count, ...] from its first layer, the box moved to match.
    const ModelSpec& s = builder_.spec();
    const Shape global = stacked_.shape(s, *b, builder_.plan_layer(0)[stacked_.buffers[*b].first].memory_shape);
    bool inside = box.offset.size() == global.size() && box.shape.size() == global.size();
    for (std::size_t d = 0; inside && d < global.size(); ++d)
      inside = box.offset[d] <= global[d] && box.shape[d] <= global[d] - box.offset[d];
    if (!inside)
      bad_argument("tensor", name,
                   ": a piece of shape " + shape_string(box.shape) + " at " + shape_string(box.offset) +
                       " does not lie inside its shape " + shape_string(global));
    if (box.empty()) {
      check_dtype(std::string(name), builder_.plan_layer(0)[stacked_.buffers[*b].first].dtype);
      return;
    }
    const Composite c = stacked(*b, box.offset[0], box.shape[0]);
    check_dtype(std::string(name), c.dtype);
    Box moved = box;
    moved.offset[0] = 0;
    composite_fill_jobs(c, moved, dst, builder_.options().seed, out);
    return;
  }
  const auto p = planned(name);
  if (!p) refuse_unknown(name);
  check_dtype(p->name, p->dtype);
  region_fill_jobs(*p, box, dst, builder_.options().seed, out);
}

std::optional<Composite> TensorIndex::hf_fused_experts(std::string_view name, const Shape& shape) const {
  static const std::regex fused(R"(^(.*\.)(mlp|block_sparse_moe)\.experts\.(gate_up_proj|down_proj)$)");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_match(name.begin(), name.end(), m, fused) || shape.size() != 3) return std::nullopt;
  const std::string base = m[1].str();
  const bool gate_up = m[3].str() == "gate_up_proj";
  const std::string what = "parameter " + quote(name) + " of shape " + shape_string(shape);
  struct Names {
    const char *gate, *up, *down;
  };
  for (const char* moe : {"block_sparse_moe", "mlp"})
    for (const Names& n : {Names{"w1", "w3", "w2"}, Names{"gate_proj", "up_proj", "down_proj"}}) {
      const std::string experts = base + moe + ".experts.";
      const std::vector<std::string> kinds = gate_up ? std::vector<std::string>{n.gate, n.up} : std::vector<std::string>{n.down};
      if (!planned(experts + "0." + kinds[0] + ".weight")) continue;
      std::vector<std::string> templates;
      for (const std::string& kind : kinds) templates.push_back(escape_template(experts) + "{0}." + escape_template(kind + ".weight"));
      Composite c;
      try {
        c = assemble(templates, std::vector<StackAxis>{{shape[0], 0}}, 0, {}, 1, what);
      } catch (const std::invalid_argument& e) {
        if (std::string_view(e.what()).starts_with(what)) throw;
        bad_argument(what, std::string(": ") + e.what());
      }
      if (c.shape != shape)
        bad_argument(what, ": its experts' " + (gate_up ? kinds[0] + " and " + kinds[1] : kinds[0]) + " make " + shape_string(c.shape));
      return c;
    }
  return std::nullopt;
}

std::string TensorIndex::not_found(std::string_view name) const {
  return "tensor " + quote(name, kMaxNameInMessage) + " " + not_in(name);
}

void TensorIndex::refuse_unknown(std::string_view name) const {
  bad_argument("tensor", printable(name, kMaxNameInMessage), not_in(name));  // not_found()'s line
}

std::string TensorIndex::not_in(std::string_view name) const {
  const ModelSpec& s = builder_.spec();
  const auto dot = name.rfind('.');
  const std::string_view tail = dot == std::string_view::npos ? name : name.substr(dot);
  std::string out;
  int n = 0;
  auto consider = [&](const std::string& k) {
    if (n < 3 && k.size() >= tail.size() && k.compare(k.size() - tail.size(), tail.size(), tail) == 0)
      out += (n++ ? ", " : "") + printable(k, 120);
  };
  // In file order, layer 0 for the layers (after the stacked buffers holding them).
  builder_.walk({.mode = WalkMode::runs, .whole_ends = true, .count = 1}, [&](const PlanStep& step) {
    for (const auto& buf : step.buffers) consider(std::string(buf.name));
    for (const auto& t : step.tensors) consider(t.name);
  });
  return "is not in " + printable(s.name) + (out.empty() ? "" : " (tensors such as " + out + ")");
}

}  // namespace layerinit
