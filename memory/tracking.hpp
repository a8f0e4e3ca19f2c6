// Tracking and limiting adaptors: every byte counted, peaks proven.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/memory/resource.hpp>

namespace layerinit {

struct MemoryStats {
  std::size_t current_bytes = 0;  // in use now (allocations plus committed reserved ranges)
  std::size_t peak_bytes = 0;     // the most in use at any moment
  std::size_t total_bytes = 0;    // allocated (or committed) in all, never decreases
  std::size_t current_count = 0;  // live allocations and reservations
  std::size_t peak_count = 0;
  std::size_t total_count = 0;
};

struct AllocationRecord {
  const void* ptr = nullptr;
  std::size_t bytes = 0;  // for a reservation: bytes committed so far
  AllocTag tag;
  bool reservation = false;
};

// One change of the bytes in use, for traces of memory over time.
struct MemoryEvent {
  enum class Kind { allocate, deallocate, commit, release } kind;
  std::size_t bytes = 0;          // size of this change
  std::size_t current_bytes = 0;  // in use after it
  double seconds = 0;             // since the tracker was made
  const AllocTag* tag = nullptr;  // valid during the callback only
};

// Wraps any upstream resource and counts what passes through it. Thread-safe.
class LAYERINIT_API tracking_resource final : public memory_resource {
 public:
  struct options {
    bool live_list = false;  // keep the live allocations (live())
    bool history = false;    // keep every allocation ever made (history())
  };
  explicit tracking_resource(memory_resource& upstream) : tracking_resource(upstream, options{}) {}
  tracking_resource(memory_resource& upstream, options opts);

  MemoryStats stats() const;
  // Scopes: push starts a phase; pop returns the phase's stats (current at pop, peak during the phase,
  // bytes and counts allocated in it). Scopes nest; the global stats are unaffected.
  void push_scope();
  MemoryStats pop_scope();
  // Resets the global peak to the current bytes.
  void reset_peak();

  std::vector<AllocationRecord> live() const;     // needs options.live_list
  std::vector<AllocationRecord> history() const;  // needs options.history
  // Called after every change, under the tracker's lock: keep it short.
  void set_listener(std::function<void(const MemoryEvent&)> f);


 private:
  void* do_allocate(std::size_t bytes, const AllocTag& tag) override;
  void do_deallocate(void* p, std::size_t bytes) noexcept override;
  MemoryKind do_kind() const noexcept override { return upstream_->kind(); }
  std::string do_name() const override { return upstream_->name(); }
  bool do_supports_reserve() const noexcept override { return upstream_->supports_reserve(); }
  void* do_reserve(std::size_t bytes, const AllocTag& tag) override;
  void do_commit(void* base, std::size_t offset, std::size_t bytes) override;
  void do_release(void* base, std::size_t reserved_bytes) noexcept override;

  void grow(std::size_t bytes, bool new_allocation);
  void shrink(std::size_t bytes, bool end_allocation);
  void notify(MemoryEvent::Kind k, std::size_t bytes, const AllocTag* tag);

  memory_resource* upstream_;
  options opts_;
  mutable std::mutex mu_;
  MemoryStats global_;
  std::vector<MemoryStats> scopes_;
  std::unordered_map<const void*, AllocationRecord> live_;  // always kept for reservations
  std::vector<AllocationRecord> history_;
  std::function<void(const MemoryEvent&)> listener_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Refuses any allocation or commit that would take the bytes in use past `limit`, with
// out_of_memory carrying the bytes asked and in use. For tests and for budgets.
class LAYERINIT_API limiting_resource final : public memory_resource {
 public:
  limiting_resource(memory_resource& upstream, std::size_t limit) : upstream_(&upstream), limit_(limit) {}
  std::size_t in_use() const;
  std::size_t limit() const noexcept { return limit_; }

 private:
  void* do_allocate(std::size_t bytes, const AllocTag& tag) override;
  void do_deallocate(void* p, std::size_t bytes) noexcept override;
  MemoryKind do_kind() const noexcept override { return upstream_->kind(); }
  std::string do_name() const override { return upstream_->name() + " (limit " + std::to_string(limit_) + " bytes)"; }
  bool do_supports_reserve() const noexcept override { return upstream_->supports_reserve(); }
  void* do_reserve(std::size_t bytes, const AllocTag& tag) override;
  void do_commit(void* base, std::size_t offset, std::size_t bytes) override;
  void do_release(void* base, std::size_t reserved_bytes) noexcept override;

  memory_resource* upstream_;
  std::size_t limit_;
  mutable std::mutex mu_;
  std::size_t in_use_ = 0;
  std::unordered_map<const void*, std::size_t> committed_;
};

}  // namespace layerinit
