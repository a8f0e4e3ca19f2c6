// One rank's share of a build: which pieces of which tensors it holds (RankPlan), and a build or a
// stream of only those pieces, each allocated at its local size and filled in place with the bytes
// the unsharded build puts there. Everything here is per rank and needs no other rank: a launcher
// (a loop over ranks, MPI, a SLURM array) runs it once per rank with no communication.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/shard/mesh.hpp>
#include <layerinit/shard/parallel.hpp>

namespace layerinit {

// A piece of one tensor as a rank holds it.
struct ShardTensor {
  PlannedTensor tensor;  // the whole tensor, as the unsharded build plans it
  Box box;               // the rank's piece, in the coordinates of tensor.memory_shape; never empty
  std::uint64_t numel() const { return box.numel(); }
  std::uint64_t bytes() const { return box.numel() * dtype_size(tensor.dtype); }
};

// A rank's piece of one buffer of the stacked layout (stacked_layout): the stack of its pieces of the
// buffer's layer tensors over the stage's layers. [L, ...] buffer: [n, ...piece]. Fused expert
// buffer [L, E, ...]: [n, ne, ...piece], the ne experts the rank holds (a contiguous block: ep splits
// experts in blocks), each slice the piece the per-expert layout gives that expert's tensor.
struct LAYERINIT_API StackedPiece {
  std::string name;     // the buffer's (stacked) name
  Shape global_shape;   // [L, ...] or [L, E, ...], the slices in their memory shape
  Box box;              // in global_shape: offset [first layer, (first expert,) ...], shape [n, (ne,) ...]
  DType dtype = DType::f32;
  std::uint64_t experts = 1;  // slices per layer: ne for a fused buffer, else 1
  bool fused = false;
  std::uint64_t slice_numel() const;  // elements of one (layer, expert) slice
  std::uint64_t bytes() const { return box.numel() * dtype_size(dtype); }
};

// One step of RankPlan::walk: the rank's pieces of a step of the builder's walk (Builder::walk), in
// file order. A step may hold no piece (a tensor or layer the rank does not hold).
struct RankStep {
  Part::Kind kind = Part::Kind::pre;
  std::uint64_t layer = 0, count = 1;  // as PlanStep's
  // Kind::layer: the held layer tensors' pieces, in layer_tensors() order (a run: its first layer's;
  // the other layers' pieces have the same boxes).
  std::vector<ShardTensor> shards;
  // Kind::layer in the stacked layout: piece k of layer i is slice stacked_slice(k, i) of
  // stacked()[stacked_piece(k)].
  bool stacked = false;
};

// What rank `rank` of `plan` holds of the builder's model. Keeps references to both: they must
// outlive it. Tensors whose piece on this rank is empty (more ranks than rows) are not held.
class LAYERINIT_API RankPlan {
 public:
  // Throws bad_input for a rank outside the plan's mesh.
  RankPlan(const Builder& b, const ParallelPlan& plan, std::uint64_t rank);

  const Builder& builder() const noexcept { return *b_; }
  const ParallelPlan& plan() const noexcept { return *plan_; }
  std::uint64_t rank() const noexcept { return rank_; }
  const ParallelPlan::Coords& coords() const noexcept { return coords_; }
  Range layers() const noexcept { return layers_; }  // the stage's layers

  std::vector<ShardTensor> pre() const;
  // The pieces of layer i (in layers()), in LayerSpec order; from its plan when the caller has it
  // (builder().plan_layer(i)).
  std::vector<ShardTensor> layer(std::uint64_t i) const;
  std::vector<ShardTensor> layer(std::uint64_t i, const std::vector<PlannedTensor>& planned) const;
  std::vector<ShardTensor> post() const;
  // Indices into the LayerSpec of the layer tensors this rank holds: the same in every layer of its
  // stage (pieces depend on names and shapes, and layers differ only in their index).
  const std::vector<std::size_t>& layer_tensors() const noexcept { return held_; }

  // Stacked layout: the rank's pieces of the stacked buffers it holds, in stacked_layout order (empty
  // for the per-layer layout and for a rank without layers). Held layer tensor k (layer_tensors()[k])
  // of layer i goes to stacked()[stacked_piece(k)], slice (i - layers().offset) * experts +
  // expert_slice(k).
  const std::vector<StackedPiece>& stacked() const noexcept { return stacked_; }
  std::size_t stacked_piece(std::size_t k) const { return piece_of_.at(k); }
  std::uint64_t expert_slice(std::size_t k) const { return slice_of_.at(k); }
  std::uint64_t stacked_slice(std::size_t k, std::uint64_t layer) const {
    return (layer - layers_.offset) * stacked_.at(piece_of_.at(k)).experts + slice_of_.at(k);
  }

  // The builder's walk over the stage's layers (w.first, w.count and w.layer_order are the rank's:
  // its stage, ascending), each step's tensors as this rank's pieces.
  void walk(const WalkOptions& w, const std::function<void(const RankStep&)>& f) const;

 private:
  std::vector<ShardTensor> pieces(std::span<const PlannedTensor> planned, std::span<const TensorSpec> specs,
                                  TensorPlace where) const;
  std::vector<ShardTensor> held(std::span<const PlannedTensor> planned) const;
  void plan_stacked(const std::vector<PlannedTensor>& planned);  // stacked_, piece_of_, slice_of_ from held_

  const Builder* b_;
  const ParallelPlan* plan_;
  std::uint64_t rank_;
  ParallelPlan::Coords coords_;
  Range layers_;
  std::vector<std::size_t> held_;
  std::vector<StackedPiece> stacked_;
  std::vector<std::size_t> piece_of_;      // per held layer tensor: its index in stacked_
  std::vector<std::uint64_t> slice_of_;    // per held layer tensor: its expert's slice in the piece (0 unless fused)
};

// A built piece: its bytes, and where it sits in the whole tensor.
struct LocalTensor {
  Tensor tensor;       // view.name the tensor's global (canonical or stacked) name, view.shape the piece's
  Shape global_shape;  // the whole tensor as stored: its memory shape; stacked: [L, ...]
  Shape offset;        // of the piece in global_shape
  bool stacked = false;  // a stacked layout's [n, ...] piece of one layer parameter, n layers of the stage
  std::uint64_t experts = 1;  // stacked: slices per layer, ne for a fused [n, ne, ...] expert piece
};

struct LAYERINIT_API RankModel {
  Layout layout = Layout::per_layer;
  std::uint64_t rank = 0;
  Range layers;  // the stage's layers
  // In file order: the pieces before the layers; then per-layer layout layer by layer, stacked
  // layout RankPlan::stacked(): one [n, ...] piece per held layer parameter (layers layers.offset ..
  // + n - 1, offset [layers.offset, ...]) or [n, ne, ...] per fused expert weight; then the pieces
  // after the layers.
  std::vector<LocalTensor> tensors;
  std::uint64_t bytes() const;
};

// Allocates (through the builder's memory resource) and fills only the rank's pieces: the tracked
// peak is their bytes, in either layout and orientation. Each piece's bytes equal that box of the
// unsharded build's tensor. Layers are made in ascending order (BuildOptions::layer_order is not
// used; values never depend on the order).
LAYERINIT_API RankModel build_rank(const RankPlan& r);

// One finished piece of a streamed rank build: the rank's pieces of one tensor outside the layers,
// or of one layer.
struct LAYERINIT_API RankPart {
  Part::Kind kind = Part::Kind::pre;
  std::uint64_t layer = 0;                // Kind::layer
  std::vector<ShardTensor> shards;        // what each view holds
  std::vector<TensorView> tensors;        // the bytes, view.shape = the piece's shape
  std::uint64_t bytes() const;
};

// Builds the rank's pieces part by part, hands each to `sink` after its fill has completed, then
// frees it: the tracked peak is the rank's largest part. `after_part` runs after the builder's
// options().after_part between parts (emit's cancellation).
LAYERINIT_API void stream_rank(const RankPlan& r, const std::function<void(const RankPart&)>& sink,
                               const std::function<void()>& after_part = {});

}  // namespace layerinit
