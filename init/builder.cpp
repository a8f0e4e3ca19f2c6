#include <layerinit/init/builder.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/memory/recycling.hpp>

namespace layerinit {

std::string_view layout_name(Layout l) { return l == Layout::per_layer ? "per-layer" : "stacked"; }

Layout parse_layout(std::string_view s) {
  if (s == "per-layer") return Layout::per_layer;
  if (s == "stacked") return Layout::stacked;
  bad_argument("layout", s, "is unknown (valid: per-layer, stacked)");
}

std::string_view orientation_name(Orientation o) { return o == Orientation::out_in ? "out-in" : "in-out"; }

Orientation parse_orientation(std::string_view s) {
  if (s == "out-in") return Orientation::out_in;
  if (s == "in-out") return Orientation::in_out;
  bad_argument("orientation", s, "is unknown (valid: out-in, in-out)");
}

std::uint64_t Layer::bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.view.bytes();
  return n;
}

std::uint64_t Part::bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes();
  return n;
}

std::uint64_t Model::bytes() const {
  std::uint64_t n = 0;
  for_each([&](const TensorView& v) { n += v.bytes(); });
  return n;
}

void Model::for_each(const std::function<void(const TensorView&)>& f) const {
  for (const auto& t : pre) f(t.view);
  for (const auto& l : layers)
    for (const auto& t : l.tensors) f(t.view);
  for (const auto& t : stacked) f(t.view);
  for (const auto& t : post) f(t.view);
}

struct Builder::PlanCache {
  static constexpr std::size_t kKeptLayers = 64;  // the run starts of a few rank windows; never one per layer
  std::mutex mu;
  Planned pre, post;
  std::map<std::uint64_t, Planned> layers;
  std::atomic<std::uint64_t> tensors_planned{0};
};

Builder::Builder(const ModelSpec& spec, const Recipe& recipe, BuildOptions opts, backend& be, memory_resource& memory)
    : spec_(spec), recipe_(recipe), opts_(std::move(opts)), be_(&be), mr_(&memory), cache_(std::make_shared<PlanCache>()) {
  spec_.validate();
  if (!opts_.layer_order.empty()) {
    std::vector<std::uint64_t> sorted = opts_.layer_order;
    std::sort(sorted.begin(), sorted.end());
    bool ok = sorted.size() == spec_.num_layers;
    for (std::uint64_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == i;
    if (!ok) bad_argument("layer_order", "must be a permutation of 0.." + std::to_string(spec_.num_layers) + "-1");
  }
}

PlannedTensor Builder::plan_one(const TensorSpec& t, std::optional<std::uint64_t> layer) const {
  cache_->tensors_planned.fetch_add(1, std::memory_order_relaxed);
  PlannedTensor p;
  p.name = layer ? spec_.canonical_name(*layer, t) : t.name;
  p.shape = t.shape;
  p.dtype = opts_.dtype;
  for (const auto& o : opts_.dtype_overrides)
    if (name_matches(o.pattern, p.name)) p.dtype = o.dtype;
  p.fill = recipe_.rule_for(tensor_context(spec_, t, layer));
  // The fill in this tensor's dtype (a std fp16 cannot hold, say): refused while planning, before
  // anything is allocated or written, with the tensor's name.
  try {
    p.params = prepare_fill(p.fill, p.dtype);
  } catch (const std::invalid_argument& e) {
    bad_argument("tensor", p.name, std::string(": ") + e.what());
  }
  // Its regions (an override replaced the fill above, not these), prepared the same way.
  for (std::size_t k = 0; k < t.regions.size(); ++k) {
    try {
      p.regions.push_back({t.regions[k], prepare_fill(t.regions[k].fill, p.dtype)});
    } catch (const std::invalid_argument& e) {
      bad_argument("tensor", p.name, ": " + region_label(k, t.regions[k]) + ": " + e.what());
    }
  }
  p.memory_shape = t.shape;
  if (opts_.orientation == Orientation::in_out && t.transposable && t.shape.size() == 2) {
    std::swap(p.memory_shape[0], p.memory_shape[1]);
    p.transposed = true;
  }
  return p;
}

Builder::Planned Builder::planned_ends(bool pre) const {
  PlanCache& c = *cache_;
  std::lock_guard lock(c.mu);  // planned under the lock: two threads never plan the same part twice
  Planned& kept = pre ? c.pre : c.post;
  if (!kept) {
    std::vector<PlannedTensor> out;
    for (const auto& t : pre ? spec_.pre : spec_.post) out.push_back(plan_one(t, std::nullopt));
    kept = std::make_shared<const std::vector<PlannedTensor>>(std::move(out));
  }
  return kept;
}

Builder::Planned Builder::planned_layer(std::uint64_t i, bool keep) const {
  if (i >= spec_.num_layers) throw std::out_of_range("layer " + std::to_string(i) + " of " + std::to_string(spec_.num_layers));
  PlanCache& c = *cache_;
  std::unique_lock lock(c.mu);
  if (const auto it = c.layers.find(i); it != c.layers.end()) return it->second;
  lock.unlock();
  std::vector<PlannedTensor> out;
  for (const auto& t : spec_.layer.tensors) out.push_back(plan_one(t, i));
  auto planned = std::make_shared<const std::vector<PlannedTensor>>(std::move(out));
  lock.lock();
  if (keep && uniform_layers() && c.layers.size() < PlanCache::kKeptLayers) c.layers.emplace(i, planned);
  return planned;
}

std::vector<PlannedTensor> Builder::plan_pre() const { return *planned_ends(true); }
std::vector<PlannedTensor> Builder::plan_layer(std::uint64_t i) const { return *planned_layer(i, false); }
std::vector<PlannedTensor> Builder::plan_post() const { return *planned_ends(false); }
std::uint64_t Builder::tensors_planned() const { return cache_->tensors_planned.load(std::memory_order_relaxed); }

bool Builder::uniform_layers() const {
  // Canonical names of two layers differ only in the index, a non-empty run of digits. A glob whose
  // only wildcard is '*' and whose literal characters are not digits matches both or neither: no
  // literal can land on a digit, so the index always lies within '*' spans.
  for (const auto& o : opts_.dtype_overrides)
    if (o.pattern.find_first_of("?[\\0123456789") != std::string::npos) return false;
  return true;
}

void Builder::for_each_layer_run(std::uint64_t first, std::uint64_t count, const LayerRunVisitor& f) const {
  if (count == 0) return;
  if (uniform_layers()) return f(first, count, *planned_layer(first, true));
  for (std::uint64_t i = first; i < first + count; ++i) f(i, 1, *planned_layer(i, false));
}

Engine Builder::engine(const std::function<void()>& also) const {
  Engine e{be_, mr_, opts_.seed, opts_.after_part};
  if (also) {
    if (e.after_part) e.after_part = [first = opts_.after_part, also] { first(), also(); };
    else e.after_part = also;
  }
  return e;
}

void check_stack_slot(const PlannedTensor& t, const StackSlot& slot);  // engine.cpp: bad_input for another dtype

void Builder::walk(const WalkOptions& w, const PlanVisitor& f) const {
  auto ends = [&](Part::Kind kind) {
    const Planned kept = planned_ends(kind == Part::Kind::pre);
    const std::span<const PlannedTensor> planned(*kept);
    if (w.whole_ends) return f({kind, 0, 1, 0, planned, nullptr, {}});
    for (std::size_t j = 0; j < planned.size(); ++j) f({kind, 0, 1, j, planned.subspan(j, 1), nullptr, {}});
  };
  ends(Part::Kind::pre);
  const std::uint64_t L = spec_.num_layers;
  const std::uint64_t first = w.layer_order ? 0 : std::min(w.first, L);
  const std::uint64_t count = w.layer_order ? L : std::min(w.count, L - first);
  // Stacked layout: a layer tensor is one slice of its buffer, whose dtype is layer 0's tensor's.
  std::optional<StackedLayout> sl;
  std::vector<StackedTensor> buffers;
  if (opts_.layout == Layout::stacked && count > 0) {
    sl = stacked_layout(spec_, opts_.experts);
    const Planned layer0_kept = planned_layer(0, true);
    const std::vector<PlannedTensor>& layer0 = *layer0_kept;
    for (std::size_t b = 0; b < sl->buffers.size(); ++b) {
      const PlannedTensor& p = layer0[sl->buffers[b].first];
      buffers.push_back({sl->buffers[b].name, sl->shape(spec_, b, p.memory_shape), p.dtype, p.numel()});
    }
  }
  auto layers = [&](std::uint64_t i, std::uint64_t n, const std::vector<PlannedTensor>& planned) {
    f({Part::Kind::layer, i, n, 0, planned, sl ? &*sl : nullptr, buffers});
  };
  if (w.mode == WalkMode::runs) {
    if (sl) {
      // Stored alike in the buffers, which hold one dtype: a layer the dtype overrides tell apart
      // from layer 0 is refused here, as the engine refuses its slice.
      if (!uniform_layers())
        for (std::uint64_t i = first; i < first + count; ++i) {
          const Planned layer = planned_layer(i, false);
          for (std::size_t j = 0; j < layer->size(); ++j) {
            const StackedTensor& buf = buffers[sl->buffer[j]];
            check_stack_slot((*layer)[j], StackSlot{buf.name, buf.dtype});
          }
        }
      if (count > 0) layers(first, count, *planned_layer(first, true));
    } else {
      for_each_layer_run(first, count, layers);
    }
  } else if (w.layer_order && !opts_.layer_order.empty()) {
    for (std::uint64_t i : opts_.layer_order) layers(i, 1, *planned_layer(i, false));
  } else {
    // Ascending without a list of every index: a stream's memory stays one part for any layer count.
    for (std::uint64_t i = first; i < first + count; ++i) layers(i, 1, *planned_layer(i, false));
  }
  ends(Part::Kind::post);
}

std::vector<PartTensor> whole_tensors(const PlanStep& s) {
  std::vector<PartTensor> part = whole_tensors(s.tensors);
  if (s.layout)
    for (std::size_t j = 0; j < part.size(); ++j) {
      const StackedTensor& buf = s.buffers[s.layout->buffer[j]];
      part[j].stack = StackSlot{buf.name, buf.dtype};
    }
  return part;
}

Model Builder::build(const std::function<void(std::uint64_t)>& on_layer) const {
  const Engine eng = engine();
  Model m;
  m.layout = opts_.layout;
  m.experts = opts_.experts;
  m.num_layers = spec_.num_layers;
  if (opts_.layout == Layout::per_layer) m.layers.resize(spec_.num_layers);
  walk({.whole_ends = true, .layer_order = true}, [&](const PlanStep& s) {
    std::vector<PartTensor> part = whole_tensors(s);
    if (s.kind != Part::Kind::layer) {
      (s.kind == Part::Kind::pre ? m.pre : m.post) = eng.fill_part(part);
      return;
    }
    if (s.layout) {
      // One [L, ...] (or [L, E, ...]) allocation per stacked buffer, made before the first layer;
      // layer i's tensors are filled straight into their slices.
      if (m.stacked.empty())
        for (const StackedTensor& b : s.buffers) m.stacked.push_back(Tensor::allocate(*mr_, std::string(b.name), b.shape, b.dtype));
      for (std::size_t j = 0; j < part.size(); ++j)
        part[j].dst = static_cast<unsigned char*>(m.stacked[s.layout->buffer[j]].view.data) +
                      s.layout->slice(j, s.layer) * s.tensors[j].bytes();
      eng.fill_part(part);
    } else {
      m.layers[s.layer].index = s.layer;
      m.layers[s.layer].tensors = eng.fill_part(part);
    }
    if (on_layer) on_layer(s.layer);
  });
  be_->synchronize();  // once per build: the GPU never idles between parts
  return m;
}

void Builder::stream(const std::function<void(const Part&)>& sink, const std::function<void()>& after_part) const {
  Engine eng = engine(after_part);
  // Host parts in the pages of the part before (layers alike: the same sizes), not in fresh ones.
  std::optional<recycling_resource> recycled;
  if (mr_->kind() == MemoryKind::host) eng.memory = &recycled.emplace(*mr_);
  walk({.layer_order = true}, [&](const PlanStep& s) {
    const std::vector<Tensor> tensors = eng.fill_part(whole_tensors(s));
    eng.be->synchronize();  // the sink reads the part
    Part p{s.kind, s.layer, {}};
    for (const auto& t : tensors) p.tensors.push_back(t.view);
    sink(p);
  });  // tensors die with each step: the part is freed before the next one is made
}

}  // namespace layerinit
