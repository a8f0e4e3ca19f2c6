// Tensors the builder makes: owned storage plus a view that kernels and writers take.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <layerinit/core/api.hpp>
#include <layerinit/core/shape.hpp>
#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/memory/resource.hpp>

namespace layerinit {

// Where a tensor's bytes are: trivially copyable apart from the strings.
struct TensorView {
  std::string name;   // canonical name ("model.layers.3.mlp.up_proj.weight"); stacked: "model.layers.mlp.up_proj.weight"
  Shape shape;        // memory shape: the logical shape, with [out, in] swapped under in-out orientation; stacked: [L, ...]
  DType dtype = DType::f32;
  void* data = nullptr;
  MemoryKind where = MemoryKind::host;
  std::uint64_t bytes() const { return numel(shape) * dtype_size(dtype); }
};

// Owned memory: a plain allocation or a reservation whose ranges are committed on demand.
class LAYERINIT_API Storage {
 public:
  Storage() = default;
  static Storage allocate(memory_resource& mr, std::size_t bytes, const AllocTag& tag);
  static Storage reserve(memory_resource& mr, std::size_t bytes, const AllocTag& tag);
  Storage(Storage&& o) noexcept { *this = std::move(o); }
  Storage& operator=(Storage&& o) noexcept;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() { reset(); }

  void commit(std::size_t offset, std::size_t bytes);  // reservations only
  void reset() noexcept;
  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }

 private:
  memory_resource* mr_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  bool reserved_ = false;
};

struct LAYERINIT_API Tensor {
  TensorView view;
  Storage storage;  // empty for views into another tensor's storage

  // A tensor owning numel(shape) elements of dtype from `mr`, its allocation tagged with name and dtype.
  static Tensor allocate(memory_resource& mr, std::string name, Shape shape, DType dtype);
  // The same with its bytes only reserved: commit ranges before writing them.
  static Tensor reserve(memory_resource& mr, std::string name, Shape shape, DType dtype);
};

}  // namespace layerinit
