#include <layerinit/memory/tensor.hpp>

#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

Storage Storage::allocate(memory_resource& mr, std::size_t bytes, const AllocTag& tag) {
  Storage s;
  s.mr_ = &mr;
  s.data_ = mr.allocate(bytes, tag);
  s.bytes_ = bytes;
  return s;
}

Storage Storage::reserve(memory_resource& mr, std::size_t bytes, const AllocTag& tag) {
  Storage s;
  s.mr_ = &mr;
  s.data_ = mr.reserve(bytes, tag);
  s.bytes_ = bytes;
  s.reserved_ = true;
  return s;
}

Storage& Storage::operator=(Storage&& o) noexcept {
  if (this != &o) {
    reset();
    mr_ = std::exchange(o.mr_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    reserved_ = std::exchange(o.reserved_, false);
  }
  return *this;
}

void Storage::commit(std::size_t offset, std::size_t bytes) {
  LAYERINIT_EXPECTS(reserved_, "Storage::commit on a plain allocation");
  if (offset > bytes_ || bytes > bytes_ - offset) throw std::out_of_range("Storage::commit past the reservation");
  mr_->commit(data_, offset, bytes);
}

void Storage::reset() noexcept {
  if (data_) {
    if (reserved_) mr_->release(data_, bytes_);
    else mr_->deallocate(data_, bytes_);
  }
  data_ = nullptr;
  bytes_ = 0;
  reserved_ = false;
}

namespace {
Tensor make(memory_resource& mr, std::string name, Shape shape, DType dtype, bool reserved) {
  Tensor t;
  const std::size_t bytes = numel(shape) * dtype_size(dtype);
  const AllocTag tag{name, dtype};
  t.storage = reserved ? Storage::reserve(mr, bytes, tag) : Storage::allocate(mr, bytes, tag);
  t.view = TensorView{std::move(name), std::move(shape), dtype, t.storage.data(), mr.kind()};
  return t;
}
}  // namespace

Tensor Tensor::allocate(memory_resource& mr, std::string name, Shape shape, DType dtype) {
  return make(mr, std::move(name), std::move(shape), dtype, false);
}

Tensor Tensor::reserve(memory_resource& mr, std::string name, Shape shape, DType dtype) {
  return make(mr, std::move(name), std::move(shape), dtype, true);
}

}  // namespace layerinit
