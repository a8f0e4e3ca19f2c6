// Device meshes, placements and boxes: which piece of a tensor a rank holds, described the way
// torch.distributed's DeviceMesh and DTensor describe it (docs/sharding.md).
//
// A tensor's local piece is a box: an offset and a local shape inside its global shape. Boxes are in
// the coordinates of the tensor as stored (its memory shape: [in, out] for a transposed weight,
// [L, ...] for a stacked one), since that is the tensor a framework shards.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/core/shape.hpp>

namespace layerinit {

struct MeshDim {
  std::string name;
  std::uint64_t size = 1;
  bool operator==(const MeshDim&) const = default;
};

// A device mesh: named dimensions, slowest first. A rank is the row-major index of its coordinates
// (the last dimension fastest), as DeviceMesh numbers ranks: on a ("dp", "tp") mesh of 2 x 2, rank
// = dp * 2 + tp.
class LAYERINIT_API Mesh {
 public:
  Mesh() = default;  // one rank, no dimensions
  // A size of 0, an empty or repeated name is misuse (layerinit::logic_error); std::overflow_error when
  // the number of ranks exceeds 2^64 - 1.
  explicit Mesh(std::vector<MeshDim> dims);

  const std::vector<MeshDim>& dims() const noexcept { return dims_; }
  std::uint64_t size() const noexcept { return size_; }  // ranks
  // Coordinates of `rank`, one per dimension; throws std::out_of_range for rank >= size().
  std::vector<std::uint64_t> coords(std::uint64_t rank) const;
  // The rank at `coords`; throws std::out_of_range for a coordinate past its size (a wrong count is
  // misuse: layerinit::logic_error).
  std::uint64_t rank(std::span<const std::uint64_t> coords) const;
  // Index of the dimension called `name`; throws bad_input listing the names.
  std::size_t dim_index(std::string_view name) const;
  std::string describe() const;  // "pp 2 x fsdp 1 x ep 1 x tp 4"
  bool operator==(const Mesh&) const = default;

 private:
  std::vector<MeshDim> dims_;
  std::uint64_t size_ = 1;
};

// What one mesh dimension does to a tensor: splits its dimension `dim` (Shard(dim)) or leaves it whole
// on every coordinate (Replicate()).
struct LAYERINIT_API Placement {
  enum class Kind : std::uint8_t { replicate, shard };
  Kind kind = Kind::replicate;
  std::size_t dim = 0;  // Kind::shard
  static Placement replicate() { return {}; }
  static Placement shard(std::size_t dim) { return {Kind::shard, dim}; }
  std::string describe() const;  // "Replicate()", "Shard(1)"
  bool operator==(const Placement&) const = default;
};

// Piece `index` of `parts` of n elements, as torch.chunk and DTensor's Shard split a dimension: every
// piece holds ceil(n / parts) elements but the trailing ones, which hold fewer or none. An empty piece
// sits at offset n (DTensor's _local_shard_size_and_offset): n = 10 over 4 is 3, 3, 3, 1 at 0, 3, 6,
// 9; n = 3 over 4 is 1, 1, 1, 0 at 0, 1, 2, 3. parts == 0 or index >= parts is misuse
// (layerinit::logic_error).
struct Range {
  std::uint64_t offset = 0, size = 0;
  bool operator==(const Range&) const = default;
};
LAYERINIT_API Range chunk(std::uint64_t n, std::uint64_t parts, std::uint64_t index);

// `box` with its dimension `dim` split into `parts` pieces and piece `index` kept (chunk() of the
// box's extent, offset from the box's own offset): DTensor's Shard(dim) applied to a local tensor.
// A dim past the box's rank is misuse (layerinit::logic_error).
LAYERINIT_API Box split_box(const Box& box, std::size_t dim, std::uint64_t parts, std::uint64_t index);

// The piece `rank` holds of a tensor of shape `global` with one placement per mesh dimension, split
// in mesh order (DTensor's compute_local_shape_and_global_offset): with [Shard(0), Shard(0)] the first
// mesh dimension splits dimension 0, the second splits that piece again. A wrong number of placements
// or a Shard past the tensor's rank is misuse (layerinit::logic_error); a rank outside the mesh throws
// std::out_of_range.
LAYERINIT_API Box local_box(const Shape& global, const Mesh& mesh, std::span<const Placement> placements, std::uint64_t rank);

// Where a local shard sits in its tensor: the tensor's shape, and the boxes of it the shard holds side
// by side, each (its box in the local tensor, its box in the tensor).
struct ShardPlace {
  Shape global;
  std::vector<std::pair<Box, Box>> boxes;
};

// A local shard of a tensor that names only its splits, each dimension `dim` cut into `parts` pieces
// of which it holds piece `index`, as torch.chunk cuts (torchtitan's spmd_types PartitionSpec: a
// dimension's mesh axes in turn, each as (axis size, rank in its group)): one box, in a tensor whose
// shape is the local one times every split's parts. Such a shard does not carry its tensor's shape:
// splits that are not even (10 rows over 4: 3, 3, 3, 1) cannot be told from one rank.
struct AxisSplit {
  std::size_t dim = 0;
  std::uint64_t parts = 1, index = 0;
};
LAYERINIT_API ShardPlace chunked_shard(const Shape& local, std::span<const AxisSplit> splits);

// A local shard of a tensor split as Megatron-core's _initialize_affine_weight_cpu cuts a master
// weight (megatron/core/tensor_parallel/layers.py), on rank `rank` of `size`: dimension `dim` is
// `size` times the local length, cut into chunks of local length / `stride`
// (per_partition_per_stride_size), of which the rank holds chunks rank, rank + size, rank + 2 size,
// ... (weight_list[rank::world_size]) side by side. Throws bad_input (argument "module") for a
// dimension past the shard's rank, a stride under 1 or one that does not divide the local length.
LAYERINIT_API ShardPlace strided_shard(const Shape& local, std::int64_t dim, std::int64_t stride, std::uint64_t rank,
                                         std::uint64_t size);

}  // namespace layerinit
