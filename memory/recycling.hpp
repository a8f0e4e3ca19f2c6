// A recycling adaptor: freed blocks kept for the next allocation of their exact size.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include <layerinit/core/api.hpp>
#include <layerinit/memory/resource.hpp>

namespace layerinit {

// Wraps an upstream resource for a stream of parts alike (Builder::stream: every layer's tensors
// have the sizes of the layer before): a freed block is kept, and the next allocation of its exact
// size gets it back, its pages already there (no fresh page, no fault, no zeroing: an emit of
// gpt2-large faulted once per 4 KiB of its weights). An allocation no kept block fits first hands
// every kept block back upstream, so upstream never holds more than the previous part or the current
// one, whichever is larger (the stream's peak stays its largest part's): until that first miss every
// allocation was a kept block, and after it nothing is kept. A reused block holds the bytes its last
// user left (upstream's allocate promises nothing either). Thread-safe. Reservations pass through.
class LAYERINIT_API recycling_resource final : public memory_resource {
 public:
  explicit recycling_resource(memory_resource& upstream);
  ~recycling_resource() override;  // kept blocks back upstream
  recycling_resource(const recycling_resource&) = delete;
  recycling_resource& operator=(const recycling_resource&) = delete;

  std::size_t kept_bytes() const;  // freed and kept, not yet reused or handed back
  std::size_t reused() const;      // allocations served from a kept block, so far

 private:
  void* do_allocate(std::size_t bytes, const AllocTag& tag) override;
  void do_deallocate(void* p, std::size_t bytes) noexcept override;
  MemoryKind do_kind() const noexcept override { return upstream_->kind(); }
  std::string do_name() const override { return upstream_->name(); }
  bool do_supports_reserve() const noexcept override { return upstream_->supports_reserve(); }
  void* do_reserve(std::size_t bytes, const AllocTag& tag) override { return upstream_->reserve(bytes, tag); }
  void do_commit(void* base, std::size_t offset, std::size_t bytes) override { upstream_->commit(base, offset, bytes); }
  void do_release(void* base, std::size_t reserved_bytes) noexcept override { upstream_->release(base, reserved_bytes); }

  void hand_back_all() noexcept;  // under the lock

  memory_resource* upstream_;
  mutable std::mutex m_;
  std::multimap<std::size_t, void*> kept_;  // size -> block
  std::size_t kept_bytes_ = 0, reused_ = 0;
};

}  // namespace layerinit
