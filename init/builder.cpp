#include <layerinit/init/builder.hpp>

#include <algorithm>
#include <stdexcept>

#include <layerinit/core/text.hpp>
#include <layerinit/init/engine.hpp>

namespace layerinit {

std::string_view layout_name(Layout l) { return l == Layout::per_layer ? "per-layer" : "stacked"; }

Layout parse_layout(std::string_view s) {
  if (s == "per-layer") return Layout::per_layer;
  if (s == "stacked") return Layout::stacked;
  throw std::invalid_argument("unknown layout '" + printable(s) + "' (valid: per-layer, stacked)");
}

std::string_view orientation_name(Orientation o) { return o == Orientation::out_in ? "out-in" : "in-out"; }

Orientation parse_orientation(std::string_view s) {
  if (s == "out-in") return Orientation::out_in;
  if (s == "in-out") return Orientation::in_out;
  throw std::invalid_argument("unknown orientation '" + printable(s) + "' (valid: out-in, in-out)");
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

FillJob fill_job_for(const PlannedTensor& p, void* dst, std::uint64_t seed) {
  FillJob j = make_fill_job(dst, p.dtype, p.numel(), seed, p.name, p.params ? *p.params : prepare_fill(p.fill, p.dtype));
  if (p.transposed) {
    j.rows = p.shape[0];
    j.cols = p.shape[1];
    j.transposed = true;
  }
  return j;
}

Builder::Builder(const ModelSpec& spec, const Recipe& recipe, BuildOptions opts, backend& be, memory_resource& memory)
    : spec_(spec), recipe_(recipe), opts_(std::move(opts)), be_(&be), mr_(&memory) {
  spec_.validate();
  if (!opts_.layer_order.empty()) {
    std::vector<std::uint64_t> sorted = opts_.layer_order;
    std::sort(sorted.begin(), sorted.end());
    bool ok = sorted.size() == spec_.num_layers;
    for (std::uint64_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == i;
    if (!ok) throw std::invalid_argument("layer_order must be a permutation of 0.." + std::to_string(spec_.num_layers) + "-1");
  }
}

PlannedTensor Builder::plan_one(const TensorSpec& t, std::optional<std::uint64_t> layer) const {
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
    throw std::invalid_argument("tensor '" + printable(p.name) + "': " + e.what());
  }
  p.memory_shape = t.shape;
  if (opts_.orientation == Orientation::in_out && t.transposable && t.shape.size() == 2) {
    std::swap(p.memory_shape[0], p.memory_shape[1]);
    p.transposed = true;
  }
  return p;
}

std::vector<PlannedTensor> Builder::plan_pre() const {
  std::vector<PlannedTensor> out;
  for (const auto& t : spec_.pre) out.push_back(plan_one(t, std::nullopt));
  return out;
}

std::vector<PlannedTensor> Builder::plan_layer(std::uint64_t i) const {
  if (i >= spec_.num_layers) throw std::out_of_range("layer " + std::to_string(i) + " of " + std::to_string(spec_.num_layers));
  std::vector<PlannedTensor> out;
  for (const auto& t : spec_.layer.tensors) out.push_back(plan_one(t, i));
  return out;
}

std::vector<PlannedTensor> Builder::plan_post() const {
  std::vector<PlannedTensor> out;
  for (const auto& t : spec_.post) out.push_back(plan_one(t, std::nullopt));
  return out;
}

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
  if (uniform_layers()) return f(first, count, plan_layer(first));
  for (std::uint64_t i = first; i < first + count; ++i) f(i, 1, plan_layer(i));
}

std::vector<std::uint64_t> Builder::layer_order() const {
  if (!opts_.layer_order.empty()) return opts_.layer_order;
  std::vector<std::uint64_t> order(spec_.num_layers);
  for (std::uint64_t i = 0; i < order.size(); ++i) order[i] = i;
  return order;
}

Engine Builder::engine(const std::function<void()>& also) const {
  Engine e{be_, mr_, opts_.seed, opts_.after_part};
  if (also) {
    if (e.after_part) e.after_part = [first = opts_.after_part, also] { first(), also(); };
    else e.after_part = also;
  }
  return e;
}

Model Builder::build(const std::function<void(std::uint64_t)>& on_layer) const {
  const Engine eng = engine();
  Model m;
  m.layout = opts_.layout;
  m.experts = opts_.experts;
  m.num_layers = spec_.num_layers;
  m.pre = eng.fill_part(whole_tensors(plan_pre()));

  if (opts_.layout == Layout::per_layer) {
    m.layers.resize(spec_.num_layers);
    for (std::uint64_t i : layer_order()) {
      const std::vector<PlannedTensor> plans = plan_layer(i);
      m.layers[i].index = i;
      m.layers[i].tensors = eng.fill_part(whole_tensors(plans));
      if (on_layer) on_layer(i);
    }
  } else if (spec_.num_layers > 0) {
    // One [L, ...] (or [L, E, ...]) allocation per stacked buffer; layer i's tensors are filled
    // straight into their slices.
    const StackedLayout sl = stacked_layout(spec_, opts_.experts);
    const std::vector<PlannedTensor> first = plan_layer(0);
    for (std::size_t b = 0; b < sl.buffers.size(); ++b) {
      const PlannedTensor& f = first[sl.buffers[b].first];
      m.stacked.push_back(Tensor::allocate(*mr_, sl.buffers[b].name, sl.shape(spec_, b, f.memory_shape), f.dtype));
    }
    for (std::uint64_t i : layer_order()) {
      const std::vector<PlannedTensor> plans = plan_layer(i);
      std::vector<PartTensor> part;
      for (std::size_t j = 0; j < plans.size(); ++j) {
        const TensorView& buf = m.stacked[sl.buffer[j]].view;
        part.push_back({&plans[j], plans[j].memory_shape,
                        static_cast<unsigned char*>(buf.data) + sl.slice(j, i) * plans[j].bytes(), StackSlot{buf.name, buf.dtype}});
      }
      eng.fill_part(part);
      if (on_layer) on_layer(i);
    }
  }
  m.post = eng.fill_part(whole_tensors(plan_post()));
  return m;
}

void Builder::stream(const std::function<void(const Part&)>& sink, const std::function<void()>& after_part) const {
  const Engine eng = engine(after_part);
  // Stacked layout: a layer tensor is one slice of its buffer, whose dtype is layer 0's tensor's.
  std::optional<StackedLayout> sl;
  std::vector<PlannedTensor> first;
  if (opts_.layout == Layout::stacked && spec_.num_layers > 0) {
    sl = stacked_layout(spec_, opts_.experts);
    first = plan_layer(0);
  }
  auto emit = [&](Part::Kind kind, std::uint64_t layer, const std::vector<PlannedTensor>& plans) {
    std::vector<PartTensor> part = whole_tensors(plans);
    if (kind == Part::Kind::layer && sl)
      for (std::size_t j = 0; j < part.size(); ++j) {
        const StackedBuffer& buf = sl->buffers[sl->buffer[j]];
        part[j].stack = StackSlot{buf.name, first[buf.first].dtype};
      }
    const std::vector<Tensor> tensors = eng.fill_part(part);
    Part p{kind, layer, {}};
    for (const auto& t : tensors) p.tensors.push_back(t.view);
    sink(p);
  };  // tensors die here: the part is freed before the next one is made
  for (const auto& p : plan_pre()) emit(Part::Kind::pre, 0, {p});
  // Ascending without a list of every index: memory stays one part for any layer count.
  if (opts_.layer_order.empty())
    for (std::uint64_t i = 0; i < spec_.num_layers; ++i) emit(Part::Kind::layer, i, plan_layer(i));
  else
    for (std::uint64_t i : opts_.layer_order) emit(Part::Kind::layer, i, plan_layer(i));
  for (const auto& p : plan_post()) emit(Part::Kind::post, 0, {p});
}

}  // namespace layerinit
