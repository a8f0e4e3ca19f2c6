#include <layerinit/shard/mesh.hpp>

#include <algorithm>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

Mesh::Mesh(std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    const MeshDim& d = dims_[i];
    // A mesh is a program's (ParallelPlan's, from degrees it checked): a bad one is misuse.
    LAYERINIT_EXPECTS(!d.name.empty(), "mesh: a dimension has an empty name");
    LAYERINIT_EXPECTS(d.size > 0, "mesh: dimension " + quote(d.name) + " has size 0");
    for (std::size_t k = 0; k < i; ++k)
      LAYERINIT_EXPECTS(dims_[k].name != d.name, "mesh: dimension " + quote(d.name) + " appears twice");
    size_ = checked_mul(size_, d.size, "mesh size");
  }
}

std::vector<std::uint64_t> Mesh::coords(std::uint64_t rank) const {
  if (rank >= size_)
    throw std::out_of_range("rank " + std::to_string(rank) + " is outside the mesh of " + std::to_string(size_) + " ranks");
  std::vector<std::uint64_t> c(dims_.size());
  for (std::size_t i = dims_.size(); i-- > 0;) {
    c[i] = rank % dims_[i].size;
    rank /= dims_[i].size;
  }
  return c;
}

std::uint64_t Mesh::rank(std::span<const std::uint64_t> coords) const {
  LAYERINIT_EXPECTS(coords.size() == dims_.size(),
                    "mesh: " + std::to_string(coords.size()) + " coordinates for " + std::to_string(dims_.size()) + " dimensions");
  std::uint64_t r = 0;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (coords[i] >= dims_[i].size)
      throw std::out_of_range("mesh: coordinate " + std::to_string(coords[i]) + " of " + quote(dims_[i].name) + " (size " +
                              std::to_string(dims_[i].size) + ")");
    r = r * dims_[i].size + coords[i];
  }
  return r;
}

std::size_t Mesh::dim_index(std::string_view name) const {
  std::string names;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i].name == name) return i;
    names += (names.empty() ? "" : ", ") + dims_[i].name;
  }
  bad_argument("mesh dimension", name, "is unknown (dimensions: " + names + ")");
}

std::string Mesh::describe() const {
  std::string s;
  for (const auto& d : dims_) s += (s.empty() ? "" : " x ") + d.name + " " + std::to_string(d.size);
  return s.empty() ? "1 rank" : s;
}

std::string Placement::describe() const {
  return kind == Kind::shard ? "Shard(" + std::to_string(dim) + ")" : "Replicate()";
}

Range chunk(std::uint64_t n, std::uint64_t parts, std::uint64_t index) {
  LAYERINIT_EXPECTS(parts > 0, "chunk: 0 parts");
  LAYERINIT_EXPECTS(index < parts, "chunk: piece " + std::to_string(index) + " of " + std::to_string(parts));
  const std::uint64_t each = n / parts + (n % parts != 0);  // ceil without overflow
  // index * each may pass n (an empty piece) but never 2^64: index < parts and each <= n / parts + 1.
  const std::uint64_t begin = index * each;
  if (begin >= n) return {n, 0};
  return {begin, std::min(each, n - begin)};
}

Box split_box(const Box& box, std::size_t dim, std::uint64_t parts, std::uint64_t index) {
  LAYERINIT_EXPECTS(dim < box.shape.size(),
                    "Shard(" + std::to_string(dim) + ") of a tensor of rank " + std::to_string(box.shape.size()));
  const Range r = chunk(box.shape[dim], parts, index);
  Box out = box;
  out.offset[dim] += r.offset;
  out.shape[dim] = r.size;
  return out;
}

Box local_box(const Shape& global, const Mesh& mesh, std::span<const Placement> placements, std::uint64_t rank) {
  LAYERINIT_EXPECTS(placements.size() == mesh.dims().size(), std::to_string(placements.size()) + " placements for a mesh of " +
                                                                 std::to_string(mesh.dims().size()) + " dimensions");
  const std::vector<std::uint64_t> c = mesh.coords(rank);
  Box b = whole_box(global);
  for (std::size_t i = 0; i < placements.size(); ++i)
    if (placements[i].kind == Placement::Kind::shard) b = split_box(b, placements[i].dim, mesh.dims()[i].size, c[i]);
  return b;
}

ShardPlace chunked_shard(const Shape& local, std::span<const AxisSplit> splits) {
  Shape global = local;
  for (const AxisSplit& s : splits) {
    LAYERINIT_EXPECTS(s.dim < local.size() && s.parts > 0 && s.index < s.parts, "chunked_shard: a split outside the shard");
    global[s.dim] = checked_mul(global[s.dim], s.parts, "a shard's global shape");
  }
  Box b = whole_box(global);
  for (const AxisSplit& s : splits) b = split_box(b, s.dim, s.parts, s.index);  // `local`: each split is even
  return {global, {{whole_box(local), b}}};
}

ShardPlace strided_shard(const Shape& local, std::int64_t dim, std::int64_t stride, std::uint64_t rank, std::uint64_t size) {
  LAYERINIT_EXPECTS(size > 0 && rank < size, "strided_shard: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (dim < 0 || static_cast<std::uint64_t>(dim) >= local.size() || stride < 1 ||
      local[static_cast<std::size_t>(dim)] % static_cast<std::uint64_t>(stride) != 0) {
    const std::string line = "a Megatron-core shard of " + shape_string(local) + " with partition_dim " + std::to_string(dim) +
                             " and partition_stride " + std::to_string(stride) + ": not a split layerinit knows";
    throw bad_input("module", "", line, line);
  }
  const auto d = static_cast<std::size_t>(dim);
  ShardPlace out{local, {}};
  out.global[d] = checked_mul(local[d], size, "a shard's global shape");
  const std::uint64_t chunks = size > 1 ? static_cast<std::uint64_t>(stride) : 1;  // one rank holds every chunk, in order
  const std::uint64_t chunk = local[d] / chunks;
  for (std::uint64_t k = 0; k < chunks; ++k) {
    Box in_local = whole_box(local), in_tensor = whole_box(local);
    in_local.shape[d] = in_tensor.shape[d] = chunk;
    in_local.offset[d] = k * chunk;
    in_tensor.offset[d] = (k * size + rank) * chunk;
    out.boxes.emplace_back(in_local, in_tensor);
  }
  return out;
}

}  // namespace layerinit
