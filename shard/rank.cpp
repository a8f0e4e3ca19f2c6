#include <layerinit/shard/rank.hpp>

#include <stdexcept>

#include <layerinit/shard/box_fill.hpp>

namespace layerinit {

RankPlan::RankPlan(const Builder& b, const ParallelPlan& plan, std::uint64_t rank) : b_(&b), plan_(&plan), rank_(rank) {
  if (rank >= plan.ranks())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is outside the mesh of " + std::to_string(plan.ranks()) +
                                " ranks (" + plan.mesh().describe() + ")");
  // A rank's stacked buffers are [L_stage, ...] per layer tensor; fused [L, E, ...] expert buffers are
  // not split across ranks yet.
  if (b.options().layout == Layout::stacked && !b.spec().layer.expert_prefix.empty() &&
      b.options().experts == ExpertLayout::stacked)
    throw std::invalid_argument("a sharded stacked build holds MoE experts per expert: use --experts per-expert");
  coords_ = plan.coords(rank);
  layers_ = plan.stage_layers(coords_.pp);
  if (layers_.size > 0) {
    // Which layer tensors are held depends on their names relative to the layer and their shapes,
    // never on the layer's index: layer `first` speaks for the stage.
    const auto planned = b.plan_layer(layers_.offset);
    const auto& specs = b.spec().layer.tensors;
    for (std::size_t j = 0; j < specs.size(); ++j)
      if (plan.holds(specs[j], {TensorPlace::Kind::layer, layers_.offset}, coords_) &&
          !plan.box(planned[j], specs[j], coords_).empty())
        held_.push_back(j);
  }
}

std::vector<ShardTensor> RankPlan::pieces(const std::vector<PlannedTensor>& planned, const std::vector<TensorSpec>& specs,
                                          TensorPlace where) const {
  std::vector<ShardTensor> out;
  for (std::size_t j = 0; j < planned.size(); ++j) {
    if (!plan_->holds(specs[j], where, coords_)) continue;
    Box box = plan_->box(planned[j], specs[j], coords_);
    if (!box.empty()) out.push_back({planned[j], std::move(box)});
  }
  return out;
}

std::vector<ShardTensor> RankPlan::pre() const { return pieces(b_->plan_pre(), b_->spec().pre, {TensorPlace::Kind::pre, 0}); }

std::vector<ShardTensor> RankPlan::post() const {
  return pieces(b_->plan_post(), b_->spec().post, {TensorPlace::Kind::post, 0});
}

std::vector<ShardTensor> RankPlan::layer(std::uint64_t i) const {
  if (i < layers_.offset || i - layers_.offset >= layers_.size)
    throw std::out_of_range("layer " + std::to_string(i) + " is not on rank " + std::to_string(rank_) + "'s stage");
  const auto planned = b_->plan_layer(i);
  const auto& specs = b_->spec().layer.tensors;
  std::vector<ShardTensor> out;
  for (std::size_t j : held_) out.push_back({planned[j], plan_->box(planned[j], specs[j], coords_)});
  return out;
}

std::uint64_t RankModel::bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.tensor.view.bytes();
  return n;
}

std::uint64_t RankPart::bytes() const {
  std::uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes();
  return n;
}

namespace {

// Allocates each piece at its local size and fills all of them with one fill call.
std::vector<LocalTensor> make_pieces(const std::vector<ShardTensor>& shards, const Builder& b) {
  std::vector<LocalTensor> out;
  std::vector<FillJob> jobs;
  out.reserve(shards.size());
  for (const auto& s : shards) {
    out.push_back({Tensor::allocate(b.memory(), s.tensor.name, s.box.shape, s.tensor.dtype), s.tensor.memory_shape,
                   s.box.offset, false});
    box_fill_jobs(s.tensor, s.box, out.back().tensor.view.data, b.options().seed, jobs);
  }
  b.target_backend().fill(jobs);
  return out;
}

Shape with_layers(std::uint64_t n, const Shape& s) {
  Shape out{n};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

}  // namespace

RankModel build_rank(const RankPlan& r) {
  const Builder& b = r.builder();
  const ModelSpec& spec = b.spec();
  RankModel m;
  m.layout = b.options().layout;
  m.rank = r.rank();
  m.layers = r.layers();
  auto append = [&](std::vector<LocalTensor>&& v) {
    for (auto& t : v) m.tensors.push_back(std::move(t));
  };
  append(make_pieces(r.pre(), b));
  const Range L = r.layers();
  if (m.layout == Layout::per_layer) {
    for (std::uint64_t i = L.offset; i < L.offset + L.size; ++i) append(make_pieces(r.layer(i), b));
  } else if (L.size > 0 && !r.layer_tensors().empty()) {
    // One [n, ...piece] allocation per held layer parameter; layer i's piece fills slice i - first.
    const std::vector<ShardTensor> first = r.layer(L.offset);
    const std::size_t base = m.tensors.size();
    for (std::size_t k = 0; k < first.size(); ++k) {
      const TensorSpec& t = spec.layer.tensors[r.layer_tensors()[k]];
      m.tensors.push_back({Tensor::allocate(b.memory(), stacked_name(spec, t), with_layers(L.size, first[k].box.shape),
                                            first[k].tensor.dtype),
                           stacked_shape(spec, first[k].tensor.memory_shape), with_layers(L.offset, first[k].box.offset),
                           true});
    }
    for (std::uint64_t i = L.offset; i < L.offset + L.size; ++i) {
      const std::vector<ShardTensor> shards = r.layer(i);
      std::vector<FillJob> jobs;
      for (std::size_t k = 0; k < shards.size(); ++k) {
        if (shards[k].tensor.dtype != first[k].tensor.dtype)
          throw std::invalid_argument("stacked layout needs one dtype per layer parameter, but " + shards[k].tensor.name + " is " +
                                      std::string(dtype_name(shards[k].tensor.dtype)) + " and " + first[k].tensor.name +
                                      " is " + std::string(dtype_name(first[k].tensor.dtype)));
        auto* slices = static_cast<unsigned char*>(m.tensors[base + k].tensor.view.data);
        box_fill_jobs(shards[k].tensor, shards[k].box, slices + (i - L.offset) * shards[k].bytes(), b.options().seed, jobs);
      }
      b.target_backend().fill(jobs);
    }
  }
  append(make_pieces(r.post(), b));
  b.target_backend().synchronize();
  return m;
}

void stream_rank(const RankPlan& r, const std::function<void(const RankPart&)>& sink) {
  const Builder& b = r.builder();
  auto emit = [&](Part::Kind kind, std::uint64_t layer, std::vector<ShardTensor> shards) {
    if (shards.empty()) return;
    std::vector<LocalTensor> pieces = make_pieces(shards, b);
    b.target_backend().synchronize();
    RankPart part{kind, layer, std::move(shards), {}};
    for (const auto& t : pieces) part.tensors.push_back(t.tensor.view);
    sink(part);
  };  // the pieces die here: a part is freed before the next one is made
  for (auto& s : r.pre()) emit(Part::Kind::pre, 0, {std::move(s)});
  const Range L = r.layers();
  for (std::uint64_t i = L.offset; i < L.offset + L.size; ++i) emit(Part::Kind::layer, i, r.layer(i));
  for (auto& s : r.post()) emit(Part::Kind::post, 0, {std::move(s)});
}

}  // namespace layerinit
