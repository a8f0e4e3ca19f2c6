#include <layerinit/shard/rank.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include <layerinit/core/errors.hpp>
#include <layerinit/init/engine.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/memory/recycling.hpp>

namespace layerinit {

RankPlan::RankPlan(const Builder& b, const ParallelPlan& plan, std::uint64_t rank) : b_(&b), plan_(&plan), rank_(rank) {
  if (rank >= plan.ranks())
    bad_argument("rank", rank,
                 "is outside the mesh of " + std::to_string(plan.ranks()) + (plan.ranks() == 1 ? " rank" : " ranks") + " (" +
                     plan.mesh().describe() + ")");
  coords_ = plan.coords(rank);
  layers_ = plan.stage_layers(coords_.pp);
  if (layers_.size > 0) {
    // Which layer tensors are held depends on their names relative to the layer and their shapes,
    // never on the layer's index: layer `first` speaks for the stage.
    const auto planned = b.plan_layer(layers_.offset);
    const auto& specs = b.spec().layer.tensors;
    const TensorPlace where{TensorPlace::Kind::layer, layers_.offset};
    for (std::size_t j = 0; j < specs.size(); ++j)
      if (plan.holds(specs[j], where, coords_) && !plan.box(planned[j], specs[j], where, coords_).empty())
        held_.push_back(j);
    if (b.options().layout == Layout::stacked) plan_stacked(planned);
  }
}

void RankPlan::plan_stacked(const std::vector<PlannedTensor>& planned) {
  const ModelSpec& spec = b_->spec();
  const StackedLayout sl = stacked_layout(spec, b_->options().experts);
  const auto& specs = spec.layer.tensors;
  // Held tensors of a fused buffer are the experts of one ep block, each with the same piece: the
  // buffer's piece is [n, ne, ...piece] at [first layer, first expert, ...].
  struct Seen {
    std::size_t piece;
    std::uint64_t lo, hi, count;
  };
  std::map<std::size_t, Seen> by_buffer;  // stacked_layout's buffer -> what this rank holds of it
  for (std::size_t k = 0; k < held_.size(); ++k) {
    const std::size_t j = held_[k], buf = sl.buffer[j];
    const Box box = plan_->box(planned[j], specs[j], {TensorPlace::Kind::layer, layers_.offset}, coords_);
    const std::uint64_t e = sl.expert[j];
    auto [it, fresh] = by_buffer.try_emplace(buf, Seen{stacked_.size(), e, e, 0});
    Seen& seen = it->second;
    if (fresh) {
      const StackedBuffer& sb = sl.buffers[buf];
      stacked_.push_back({sb.name, sl.shape(spec, buf, planned[sl.buffers[buf].first].memory_shape),
                          {{layers_.offset}, {layers_.size}}, planned[j].dtype, 1, sb.fused});
      if (sb.fused) {
        stacked_.back().box.offset.push_back(0);  // the experts: set below
        stacked_.back().box.shape.push_back(0);
      }
      for (std::size_t d = 0; d < box.shape.size(); ++d) {
        stacked_.back().box.offset.push_back(box.offset[d]);
        stacked_.back().box.shape.push_back(box.shape[d]);
      }
    } else {
      const StackedPiece& p = stacked_[seen.piece];
      const std::size_t skip = p.fused ? 2 : 1;
      // The plan gives every expert of a block one box: else the plan is wrong (a bug, not input).
      LAYERINIT_EXPECTS(std::equal(box.shape.begin(), box.shape.end(), p.box.shape.begin() + skip) &&
                            std::equal(box.offset.begin(), box.offset.end(), p.box.offset.begin() + skip),
                        "rank " + std::to_string(rank_) + " holds unequal pieces of the experts of " + p.name);
    }
    seen.lo = std::min(seen.lo, e);
    seen.hi = std::max(seen.hi, e);
    ++seen.count;
    piece_of_.push_back(seen.piece);
    slice_of_.push_back(e);  // made relative to the block's first expert below
  }
  for (const auto& [buf, seen] : by_buffer) {
    StackedPiece& p = stacked_[seen.piece];
    if (!p.fused) continue;
    LAYERINIT_EXPECTS(seen.hi - seen.lo + 1 == seen.count,
                      "rank " + std::to_string(rank_) + " holds experts of " + p.name + " that are not one block");
    p.experts = seen.count;
    p.box.offset[1] = seen.lo;
    p.box.shape[1] = seen.count;
  }
  for (std::size_t k = 0; k < held_.size(); ++k) {
    const StackedPiece& p = stacked_[piece_of_[k]];
    slice_of_[k] = p.fused ? slice_of_[k] - p.box.offset[1] : 0;
  }
  // In stacked_layout order (the unsharded file's), not the order of first sight.
  std::vector<std::size_t> order;  // new index -> old
  for (const auto& [buf, seen] : by_buffer) order.push_back(seen.piece);
  std::vector<std::size_t> renumber(order.size());
  std::vector<StackedPiece> sorted;
  for (std::size_t n = 0; n < order.size(); ++n) {
    renumber[order[n]] = n;
    sorted.push_back(std::move(stacked_[order[n]]));
  }
  stacked_ = std::move(sorted);
  for (auto& k : piece_of_) k = renumber[k];
}

std::uint64_t StackedPiece::slice_numel() const {
  std::uint64_t n = 1;
  for (std::size_t d = fused ? 2 : 1; d < box.shape.size(); ++d) n *= box.shape[d];
  return n;
}

std::vector<ShardTensor> RankPlan::pieces(std::span<const PlannedTensor> planned, std::span<const TensorSpec> specs,
                                          TensorPlace where) const {
  std::vector<ShardTensor> out;
  for (std::size_t j = 0; j < planned.size(); ++j) {
    if (!plan_->holds(specs[j], where, coords_)) continue;
    Box box = plan_->box(planned[j], specs[j], where, coords_);
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
  return layer(i, b_->plan_layer(i));
}

std::vector<ShardTensor> RankPlan::layer(std::uint64_t i, const std::vector<PlannedTensor>& planned) const {
  if (i < layers_.offset || i - layers_.offset >= layers_.size)
    throw std::out_of_range("layer " + std::to_string(i) + " is not on rank " + std::to_string(rank_) + "'s stage");
  return held(planned);
}

std::vector<ShardTensor> RankPlan::held(std::span<const PlannedTensor> planned) const {
  const auto& specs = b_->spec().layer.tensors;
  std::vector<ShardTensor> out;
  const TensorPlace where{TensorPlace::Kind::layer, layers_.offset};
  for (std::size_t j : held_) out.push_back({planned[j], plan_->box(planned[j], specs[j], where, coords_)});
  return out;
}

void RankPlan::walk(const WalkOptions& w, const std::function<void(const RankStep&)>& f) const {
  WalkOptions stage = w;
  stage.first = layers_.offset;
  stage.count = layers_.size;
  stage.layer_order = false;
  const ModelSpec& spec = b_->spec();
  b_->walk(stage, [&](const PlanStep& s) {
    RankStep r{s.kind, s.layer, s.count, {}, s.layout != nullptr};
    if (s.kind == Part::Kind::layer) r.shards = held(s.tensors);
    else r.shards = pieces(s.tensors, std::span(s.kind == Part::Kind::pre ? spec.pre : spec.post).subspan(s.index, s.tensors.size()),
                           {s.kind == Part::Kind::pre ? TensorPlace::Kind::pre : TensorPlace::Kind::post, 0});
    f(r);
  });
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

// The parts of the rank's pieces: each at its local size, filled with its box's jobs.
std::vector<PartTensor> piece_part(const std::vector<ShardTensor>& shards) {
  std::vector<PartTensor> part;
  for (const auto& s : shards) part.push_back({&s.tensor, s.box.shape, nullptr, std::nullopt});
  return part;
}

PartJobs box_jobs(const std::vector<ShardTensor>& shards, std::uint64_t seed) {
  return [&shards, seed](std::size_t k, void* dst, std::vector<FillJob>& out) {
    box_fill_jobs(shards[k].tensor, shards[k].box, dst, seed, out);
  };
}

}  // namespace

RankModel build_rank(const RankPlan& r) {
  const Builder& b = r.builder();
  const Engine eng = b.engine();
  const std::uint64_t seed = b.options().seed;
  RankModel m;
  m.layout = b.options().layout;
  m.rank = r.rank();
  m.layers = r.layers();
  std::size_t base = 0;  // of the stacked pieces in m.tensors
  r.walk({.whole_ends = true}, [&](const RankStep& s) {
    std::vector<PartTensor> part = piece_part(s.shards);
    if (!s.stacked) {
      std::vector<Tensor> made = eng.fill_part(part, box_jobs(s.shards, seed));
      for (std::size_t k = 0; k < made.size(); ++k)
        m.tensors.push_back({std::move(made[k]), s.shards[k].tensor.memory_shape, s.shards[k].box.offset, false});
      return;
    }
    if (s.shards.empty()) return;  // a stage whose layers hold nothing of this rank's
    // One allocation per stacked piece, made before the first layer; layer i's piece of a layer
    // tensor fills its slice.
    if (s.layer == r.layers().offset) {
      base = m.tensors.size();
      for (const StackedPiece& p : r.stacked())
        m.tensors.push_back({Tensor::allocate(b.memory(), p.name, p.box.shape, p.dtype), p.global_shape, p.box.offset, true,
                             p.experts});
    }
    for (std::size_t k = 0; k < s.shards.size(); ++k) {
      const StackedPiece& p = r.stacked()[r.stacked_piece(k)];
      auto* slices = static_cast<unsigned char*>(m.tensors[base + r.stacked_piece(k)].tensor.view.data);
      part[k].dst = slices + r.stacked_slice(k, s.layer) * s.shards[k].bytes();
      part[k].stack = StackSlot{p.name, p.dtype};
    }
    eng.fill_part(part, box_jobs(s.shards, seed));
  });
  eng.be->synchronize();  // once per build
  return m;
}

void stream_rank(const RankPlan& r, const std::function<void(const RankPart&)>& sink,
                 const std::function<void()>& after_part) {
  const Builder& b = r.builder();
  Engine eng = b.engine(after_part);
  // Host parts in the pages of the part before, as Builder::stream.
  std::optional<recycling_resource> recycled;
  if (eng.memory->kind() == MemoryKind::host) eng.memory = &recycled.emplace(*eng.memory);
  r.walk({}, [&](const RankStep& s) {
    if (s.shards.empty()) return;
    std::vector<PartTensor> part = piece_part(s.shards);
    if (s.stacked)
      for (std::size_t k = 0; k < part.size(); ++k) {
        const StackedPiece& p = r.stacked()[r.stacked_piece(k)];
        part[k].stack = StackSlot{p.name, p.dtype};
      }
    const std::vector<Tensor> pieces = eng.fill_part(part, box_jobs(s.shards, b.options().seed));
    eng.be->synchronize();  // the sink reads the part
    RankPart rp{s.kind, s.layer, s.shards, {}};
    for (const auto& t : pieces) rp.tensors.push_back(t.view);
    sink(rp);
  });  // the pieces die with each step: a part is freed before the next one is made
}

}  // namespace layerinit
