#include "naive.hpp"

#include <stdexcept>

#include <layerinit/dtypes/round.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/stacking/stack.hpp>

namespace layerinit {

namespace {

struct Staged {
  PlannedTensor plan;
  Tensor f32;
};

// fp32 copies of the planned tensors, filled with one call.
std::vector<Staged> make_fp32(const std::vector<PlannedTensor>& plans, backend& be, memory_resource& mr, std::uint64_t seed) {
  std::vector<Staged> out;
  std::vector<FillJob> jobs;
  for (const auto& p : plans) {
    PlannedTensor f = p;
    f.dtype = DType::f32;
    Staged s{p, Tensor::allocate(mr, p.name + " (fp32 staging)", p.memory_shape, DType::f32)};
    tensor_fill_jobs(f, s.f32.view.data, seed, jobs);
    out.push_back(std::move(s));
  }
  be.fill(jobs);
  be.synchronize();
  return out;
}

// The target-dtype tensor cast from an fp32 one (round to nearest even, as frameworks cast).
Tensor cast(const Staged& s, backend& be, memory_resource& mr) {
  Tensor t = Tensor::allocate(mr, s.plan.name, s.plan.memory_shape, s.plan.dtype);
  if (be.kind() == BackendKind::dry) return t;
  round_floats(s.plan.dtype, static_cast<const float*>(s.f32.view.data), t.view.data, s.plan.numel());
  return t;
}

std::vector<Tensor> cast_all(const std::vector<Staged>& staged, backend& be, memory_resource& mr) {
  std::vector<Tensor> out;
  for (const auto& s : staged) out.push_back(cast(s, be, mr));
  return out;
}

}  // namespace

Model run_naive(NaiveStrategy strategy, const Builder& b, backend& be, memory_resource& mr) {
  if (be.kind() == BackendKind::cuda) throw std::invalid_argument("naive strategies run on the host or dry backend");
  const ModelSpec& spec = b.spec();
  const std::uint64_t seed = b.options().seed;
  Model m;
  m.layout = Layout::per_layer;
  m.num_layers = spec.num_layers;
  m.layers.resize(spec.num_layers);

  if (strategy == NaiveStrategy::all_fp32_then_cast) {
    // Everything in fp32 first, then every cast while the fp32 tree is still alive.
    std::vector<Staged> pre = make_fp32(b.plan_pre(), be, mr, seed);
    std::vector<std::vector<Staged>> layers;
    for (std::uint64_t i = 0; i < spec.num_layers; ++i) layers.push_back(make_fp32(b.plan_layer(i), be, mr, seed));
    std::vector<Staged> post = make_fp32(b.plan_post(), be, mr, seed);
    m.pre = cast_all(pre, be, mr);
    for (std::uint64_t i = 0; i < spec.num_layers; ++i) {
      m.layers[i].index = i;
      m.layers[i].tensors = cast_all(layers[i], be, mr);
    }
    m.post = cast_all(post, be, mr);
    return m;  // the fp32 tree dies here, after the peak
  }

  // Per part: fp32, cast, free the fp32.
  auto part = [&](const std::vector<PlannedTensor>& plans) {
    std::vector<Staged> staged = make_fp32(plans, be, mr, seed);
    return cast_all(staged, be, mr);
  };
  m.pre = part(b.plan_pre());
  for (std::uint64_t i = 0; i < spec.num_layers; ++i) {
    m.layers[i].index = i;
    m.layers[i].tensors = part(b.plan_layer(i));
  }
  m.post = part(b.plan_post());
  if (strategy == NaiveStrategy::fp32_then_cast_per_layer) return m;

  // list_then_stack: the list of layers in the target dtype already exists (built part by part
  // above); now a full [L, ...] buffer per parameter, every layer copied, and only then the list freed.
  Model s;
  s.layout = Layout::stacked;
  s.num_layers = spec.num_layers;
  s.pre = std::move(m.pre);
  s.post = std::move(m.post);
  for (std::size_t j = 0; j < spec.layer.tensors.size() && spec.num_layers > 0; ++j) {
    const TensorView& v0 = m.layers[0].tensors[j].view;
    Tensor t = Tensor::allocate(mr, stacked_name(spec, spec.layer.tensors[j]), stacked_shape(spec, v0.shape), v0.dtype);
    for (std::uint64_t i = 0; i < spec.num_layers; ++i)
      be.copy(static_cast<unsigned char*>(t.view.data) + i * v0.bytes(), m.layers[i].tensors[j].view.data, v0.bytes());
    s.stacked.push_back(std::move(t));
  }
  be.synchronize();
  return s;  // the list dies here
}

}  // namespace layerinit
