#include <layerinit/plan/plan.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

std::string_view naive_name(NaiveStrategy s) {
  switch (s) {
    case NaiveStrategy::all_fp32_then_cast: return "all-fp32-then-cast";
    case NaiveStrategy::fp32_then_cast_per_layer: return "fp32-then-cast-per-layer";
    case NaiveStrategy::list_then_stack: return "list-then-stack";
  }
  return "?";
}

namespace {

std::string record_shape(const Shape& s) {
  std::string out = "[";
  for (std::size_t d = 0; d < s.size(); ++d) out += (d ? "," : "") + std::to_string(s[d]);
  return out + "]";
}

std::string record_regions(const PlannedTensor& t) {
  if (t.regions.empty()) return "-";
  std::string out;
  for (const PlannedRegion& r : t.regions)
    out += (out.empty() ? "" : ";") + record_shape(r.region.offset) + "+" + record_shape(r.region.shape) + "=" +
           r.region.fill.text();
  return out;
}

}  // namespace

std::uint64_t listed_tensor_count(const ModelSpec& spec) {
  return saturating_add(saturating_add(spec.pre.size(), spec.post.size()), saturating_mul(spec.num_layers, spec.layer.tensors.size()));
}

std::string plan_record(const Builder& b) {
  std::string out = "layerinit plan record 1\nseed " + std::to_string(b.options().seed) + "\nlayout " +
                    std::string(layout_name(b.options().layout)) + "\n";
  b.walk({.whole_ends = true}, [&](const PlanStep& s) {
    for (std::size_t j = 0; j < s.tensors.size(); ++j) {
      const PlannedTensor& t = s.tensors[j];
      std::string where = s.kind == Part::Kind::pre ? "pre" : s.kind == Part::Kind::post ? "post" : "layer " + std::to_string(b.spec().first_layer + s.layer);
      if (s.layout != nullptr)
        where += " " + std::string(s.buffers[s.layout->buffer[j]].name) + "[" + std::to_string(s.layout->slice(j, s.layer)) + "]";
      out += t.name + "\t" + record_shape(t.shape) + "\t" + record_shape(t.memory_shape) + "\t" +
             std::string(dtype_name(t.dtype)) + "\t" + t.fill.text() + "\t" + record_regions(t) + "\t" + where + "\n";
    }
  });
  return out;
}

MemoryPlan make_memory_plan(const Builder& b) {
  const ModelSpec& spec = b.spec();
  MemoryPlan p;
  p.parameters = spec.parameter_count();
  p.buffer_elements = spec.buffer_count();
  p.bytes_fp32 = checked_mul(spec.element_count(), 4, "fp32 bytes");
  p.bytes_fp16 = p.bytes_bf16 = checked_mul(spec.element_count(), 2, "16-bit bytes");
  auto see = [&](const PlannedTensor& t) {
    if (t.bytes() > p.largest_tensor_bytes) p.largest_tensor_bytes = t.bytes(), p.largest_tensor = t.name;
    return t.bytes();
  };
  // Naive per-part strategy: after each part, every target-dtype part so far plus that part in fp32.
  std::uint64_t so_far = 0, per_part_peak = 0, largest_outside = 0;
  auto part = [&](std::uint64_t bytes, std::uint64_t fp32_bytes) {
    so_far += bytes;
    per_part_peak = std::max(per_part_peak, so_far + fp32_bytes);
  };
  std::uint64_t pre_fp32 = 0, post_fp32 = 0, layers_fp32 = 0;
  std::uint64_t layers = 0;
  auto add_run = [&](std::uint64_t first, std::uint64_t count, std::uint64_t bytes) {
    if (!p.layer_runs.empty() && p.layer_runs.back().bytes == bytes) p.layer_runs.back().count += count;
    else p.layer_runs.push_back({first, count, bytes});
    layers += count * bytes;  // within the spec's validated byte count
  };
  // Runs of layers stored alike: one layer's plan for any number of layers.
  b.walk({.mode = WalkMode::runs, .whole_ends = true}, [&](const PlanStep& s) {
    if (s.kind != Part::Kind::layer) {
      const bool pre = s.kind == Part::Kind::pre;
      std::uint64_t& bytes = pre ? p.pre_bytes : p.post_bytes;
      std::uint64_t& fp32 = pre ? pre_fp32 : post_fp32;
      for (const auto& t : s.tensors) {
        bytes += see(t);
        fp32 += t.numel() * 4;
        largest_outside = std::max(largest_outside, t.bytes());
      }
      part(bytes, fp32);
      return;
    }
    // Layer `s.layer` stands for its run: the largest tensor keeps the first name, and the naive
    // per-part peak grows with every layer, so it is reached after the run's last one.
    std::uint64_t layer = 0, layer_fp32 = 0;
    for (const auto& t : s.tensors) layer += see(t), layer_fp32 += t.numel() * 4;
    add_run(s.layer, s.count, layer);
    p.largest_layer_bytes = std::max(p.largest_layer_bytes, layer);
    layers_fp32 += s.count * layer_fp32;
    so_far += s.count * layer;
    per_part_peak = std::max(per_part_peak, so_far + layer_fp32);
  });
  p.weight_bytes = p.pre_bytes + layers + p.post_bytes;

  p.peak_stacked = p.weight_bytes;
  p.peak_per_layer = p.weight_bytes;
  p.peak_restack = p.weight_bytes + p.largest_layer_bytes;
  p.peak_streamed = std::max(p.largest_layer_bytes, largest_outside);
  p.peak_naive[0] = pre_fp32 + layers_fp32 + post_fp32 + p.weight_bytes;  // fp32 tree + cast tree
  p.peak_naive[1] = per_part_peak;
  p.peak_naive[2] = p.weight_bytes + layers;  // the list and the stack
  return p;
}

std::uint64_t MemoryPlan::layer_bytes(std::uint64_t i) const {
  const auto it = std::upper_bound(layer_runs.begin(), layer_runs.end(), i,
                                   [](std::uint64_t x, const LayerRun& r) { return x < r.first; });
  if (it == layer_runs.begin() || i - std::prev(it)->first >= std::prev(it)->count)
    throw std::out_of_range("layer " + std::to_string(i) + " is not in the plan");
  return std::prev(it)->bytes;
}

std::string_view training_setup_name(TrainingSetup s) {
  switch (s) {
    case TrainingSetup::mixed: return "mixed";
    case TrainingSetup::fp32: return "fp32";
    case TrainingSetup::pure_bf16: return "pure-bf16";
  }
  return "?";
}

TrainingSetup parse_training_setup(std::string_view s) {
  if (s == "mixed") return TrainingSetup::mixed;
  if (s == "fp32") return TrainingSetup::fp32;
  if (s == "pure-bf16") return TrainingSetup::pure_bf16;
  bad_argument("training precision", s, "is unknown (valid: mixed, fp32, pure-bf16)");
}

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}

namespace {
// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. (1)
// and section 5: bytes of 16-bit activations of one transformer layer.
std::optional<std::uint64_t> activation_bytes(const ModelSpec& spec, std::uint64_t b, std::uint64_t s, Recompute r) {
  const Hyper& h = spec.hyper;
  if (h.num_heads == 0 || h.hidden_size == 0) return std::nullopt;
  const double sbh = static_cast<double>(s) * static_cast<double>(b) * static_cast<double>(h.hidden_size);
  double bytes = 0;
  switch (r) {
    case Recompute::none:
      bytes = sbh * (34.0 + 5.0 * static_cast<double>(h.num_heads) * static_cast<double>(s) / static_cast<double>(h.hidden_size));
      break;
    case Recompute::selective: bytes = 34.0 * sbh; break;
    case Recompute::full: bytes = 2.0 * sbh; break;
  }
  if (!(bytes < 1.8e19)) throw std::overflow_error("activation bytes overflow 64 bits");
  return static_cast<std::uint64_t>(std::llround(bytes));
}
}  // namespace

TrainingEstimate training_states(std::uint64_t n, TrainingSetup setup) {
  TrainingEstimate e;
  switch (setup) {
    case TrainingSetup::mixed:
      e.weights = checked_mul(n, 2, "weights"), e.gradients = checked_mul(n, 2, "gradients");
      e.optimizer = checked_mul(n, 8, "optimizer"), e.master = checked_mul(n, 4, "master weights");
      break;
    case TrainingSetup::fp32:
      e.weights = checked_mul(n, 4, "weights"), e.gradients = checked_mul(n, 4, "gradients");
      e.optimizer = checked_mul(n, 8, "optimizer");
      break;
    case TrainingSetup::pure_bf16:
      e.weights = checked_mul(n, 2, "weights"), e.gradients = checked_mul(n, 2, "gradients");
      e.optimizer = checked_mul(n, 4, "optimizer");
      break;
  }
  return e;
}

TrainingEstimate estimate_training(const ModelSpec& spec, TrainingSetup setup, std::uint64_t batch, std::uint64_t seq) {
  TrainingEstimate e = training_states(spec.parameter_count(), setup);
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
    const auto per = activation_bytes(spec, batch, seq, r);
    e.activation_per_layer[static_cast<int>(r)] = per;
    // Every layer of the model, those before the repeated block included.
    if (per) e.activation_total[static_cast<int>(r)] = checked_mul(*per, spec.total_layers(), "activation bytes");
  }
  return e;
}

std::uint64_t largest_batch(const ModelSpec& spec, TrainingSetup setup, std::uint64_t seq, Recompute r, std::uint64_t memory) {
  const TrainingEstimate one = estimate_training(spec, setup, 1, seq);
  const auto act = one.activation_total[static_cast<int>(r)];
  if (!act || *act == 0 || one.states() >= memory) return 0;
  // Activations are linear in the batch.
  return (memory - one.states()) / *act;
}

RankMemoryPlan plan_rank(const RankPlan& r, TrainingSetup setup) {
  RankMemoryPlan m;
  m.rank = r.rank();
  m.coords = r.coords();
  m.layers = r.layers();
  auto outside = [&](const std::vector<ShardTensor>& pieces) {
    for (const auto& s : pieces) {
      ++m.tensors;
      m.parameters += s.numel();
      m.weight_bytes += s.bytes();
      m.peak_streamed = std::max(m.peak_streamed, s.bytes());
    }
  };
  // Runs of layers stored alike, each step's tensors as the rank's pieces: one layer's plan for any
  // number of layers.
  r.walk({.mode = WalkMode::runs, .whole_ends = true}, [&](const RankStep& s) {
    if (s.kind != Part::Kind::layer) return outside(s.shards);
    std::uint64_t n = 0, bytes = 0;
    for (const auto& piece : s.shards) n += piece.numel(), bytes += piece.bytes();
    m.tensors += s.count * r.layer_tensors().size();
    m.parameters += s.count * n;
    m.weight_bytes += s.count * bytes;
    m.peak_streamed = std::max(m.peak_streamed, bytes);
  });
  m.states = training_states(m.parameters, setup);
  return m;
}

std::vector<RankMemoryPlan> plan_ranks(const Builder& b, const ParallelPlan& plan, TrainingSetup setup) {
  std::vector<RankMemoryPlan> out;
  out.reserve(plan.ranks());
  for (std::uint64_t r = 0; r < plan.ranks(); ++r) out.push_back(plan_rank(RankPlan(b, plan, r), setup));
  return out;
}

RankBalance rank_balance(const std::vector<RankMemoryPlan>& ranks) {
  RankBalance out;
  if (ranks.empty()) return out;
  std::size_t best = 0;
  double total = 0;
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    total += static_cast<double>(ranks[k].weight_bytes);
    if (ranks[k].weight_bytes > ranks[best].weight_bytes) best = k;
  }
  out.largest_rank = ranks[best].rank;
  if (total > 0) out.imbalance = static_cast<double>(ranks[best].weight_bytes) / (total / static_cast<double>(ranks.size()));
  return out;
}

}  // namespace layerinit
