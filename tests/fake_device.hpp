// A backend whose memory says "device" but is host memory underneath: it drives the code paths that
// read device memory through a host staging buffer (hash_bytes, read_on_host, emit) on a machine
// without a GPU. Fills and copies are the host backend's; copy_to_host records every size it copied.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <layerinit/backends/backend.hpp>

namespace layerinit::testing {

class fake_device_resource final : public memory_resource {
 public:
  explicit fake_device_resource(memory_resource& host) : host_(host) {}

 private:
  void* do_allocate(std::size_t bytes, const AllocTag& tag) override { return host_.allocate(bytes, tag); }
  void do_deallocate(void* p, std::size_t bytes) noexcept override { host_.deallocate(p, bytes); }
  MemoryKind do_kind() const noexcept override { return MemoryKind::device; }
  std::string do_name() const override { return "fake device"; }

  memory_resource& host_;
};

class fake_device_backend final : public backend {
 public:
  fake_device_backend() : host_(make_host_backend(2)), mr_(host_->memory()) {}
  BackendKind kind() const noexcept override { return BackendKind::cuda; }
  std::string describe() const override { return "fake device (host memory)"; }
  memory_resource& memory() noexcept override { return mr_; }
  void fill(std::span<const FillJob> jobs) override { host_->fill(jobs); }
  void copy(void* dst, const void* src, std::size_t bytes) override { host_->copy(dst, src, bytes); }
  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    copies.push_back(bytes);
    host_->copy(host_dst, src, bytes);
  }
  void synchronize() override {}

  std::vector<std::uint64_t> copies;  // the size of every copy_to_host, in order

 private:
  std::unique_ptr<backend> host_;
  fake_device_resource mr_;
};

}  // namespace layerinit::testing
