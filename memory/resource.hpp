// Memory resources: where every byte layerinit allocates comes from.
//
// Public allocate/deallocate call private virtual hooks (the pattern of std::pmr and RMM). The
// reserve/commit slot is optional: a resource that cannot reserve address space says so through
// supports_reserve() (default false) and its reserve() throws.
#pragma once

#include <atomic>
#include <cstddef>
#include <optional>
#include <string>

#include <layerinit/core/api.hpp>
#include <layerinit/dtypes/dtype.hpp>

namespace layerinit {

enum class MemoryKind { host, device };

// What an allocation is for; kept in the tracker's allocation lists.
struct AllocTag {
  std::string label;            // e.g. the tensor's canonical name
  std::optional<DType> dtype;   // element type, when the allocation holds one tensor type
};

class LAYERINIT_API memory_resource {
 public:
  virtual ~memory_resource() = default;

  void* allocate(std::size_t bytes, const AllocTag& tag = {}) { return do_allocate(bytes, tag); }
  void deallocate(void* p, std::size_t bytes) noexcept { do_deallocate(p, bytes); }
  MemoryKind kind() const noexcept { return do_kind(); }
  std::string name() const { return do_name(); }

  // Optional: reserve address space for `bytes` without backing it, then back ranges on demand.
  // Only committed bytes count as used. Default: unsupported.
  bool supports_reserve() const noexcept { return do_supports_reserve(); }
  void* reserve(std::size_t bytes, const AllocTag& tag = {}) { return do_reserve(bytes, tag); }
  // Makes [offset, offset + bytes) of a reservation usable. Ranges may be committed in any order,
  // each byte at most once.
  void commit(void* base, std::size_t offset, std::size_t bytes) { do_commit(base, offset, bytes); }
  // Frees a reservation and everything committed in it.
  void release(void* base, std::size_t reserved_bytes) noexcept { do_release(base, reserved_bytes); }

 private:
  virtual void* do_allocate(std::size_t bytes, const AllocTag& tag) = 0;
  virtual void do_deallocate(void* p, std::size_t bytes) noexcept = 0;
  virtual MemoryKind do_kind() const noexcept = 0;
  virtual std::string do_name() const = 0;
  virtual bool do_supports_reserve() const noexcept { return false; }
  virtual void* do_reserve(std::size_t bytes, const AllocTag& tag);
  virtual void do_commit(void* base, std::size_t offset, std::size_t bytes);
  virtual void do_release(void* base, std::size_t reserved_bytes) noexcept;
};

// Host memory: 64-byte aligned allocations; reservations through mmap (PROT_NONE, then mprotect).
// Allocations of mmap_threshold bytes or more are mapped on their own and unmapped when freed, so a
// freed layer leaves the process at once (malloc would keep it in its heap after raising its own
// dynamic threshold, and resident memory would drift above one layer while streaming).
class LAYERINIT_API host_resource final : public memory_resource {
 public:
  static constexpr std::size_t alignment = 64;
  static constexpr std::size_t mmap_threshold = 1u << 20;
  std::size_t in_use() const noexcept { return in_use_.load(); }

 private:
  void* do_allocate(std::size_t bytes, const AllocTag& tag) override;
  void do_deallocate(void* p, std::size_t bytes) noexcept override;
  MemoryKind do_kind() const noexcept override { return MemoryKind::host; }
  std::string do_name() const override { return "host"; }
  bool do_supports_reserve() const noexcept override { return true; }
  void* do_reserve(std::size_t bytes, const AllocTag& tag) override;
  void do_commit(void* base, std::size_t offset, std::size_t bytes) override;
  void do_release(void* base, std::size_t reserved_bytes) noexcept override;

  std::atomic<std::size_t> in_use_{0};
};

}  // namespace layerinit
