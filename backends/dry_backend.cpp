#include <sys/mman.h>

#include <layerinit/backends/backend.hpp>
#include <layerinit/core/errors.hpp>

namespace layerinit {

namespace {

// Hands out unbacked address space (PROT_NONE, MAP_NORESERVE): nothing is ever written, so a
// 141 GB model can be "built" for its allocation sequence on a small machine.
class dry_resource final : public memory_resource {
  void* do_allocate(std::size_t bytes, const AllocTag&) override { return map(bytes); }
  void do_deallocate(void* p, std::size_t bytes) noexcept override { munmap(p, bytes == 0 ? 1 : bytes); }
  MemoryKind do_kind() const noexcept override { return MemoryKind::host; }
  std::string do_name() const override { return "dry"; }
  bool do_supports_reserve() const noexcept override { return true; }
  void* do_reserve(std::size_t bytes, const AllocTag&) override { return map(bytes); }
  void do_commit(void*, std::size_t, std::size_t) override {}
  void do_release(void* p, std::size_t bytes) noexcept override { munmap(p, bytes == 0 ? 1 : bytes); }

  static void* map(std::size_t bytes) {
    void* p = mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw out_of_memory(bytes, 0, "dry (address space)");
    return p;
  }
};

class dry_backend final : public backend {
 public:
  BackendKind kind() const noexcept override { return BackendKind::dry; }
  std::string describe() const override { return "dry (no memory touched)"; }
  memory_resource& memory() noexcept override { return mr_; }
  void fill(std::span<const FillJob>) override {}
  void copy(void*, const void*, std::size_t) override {}
  void copy_to_host(void*, const void*, std::size_t) override {
    LAYERINIT_FAIL("the dry backend holds no bytes to copy");
  }
  void synchronize() override {}

 private:
  dry_resource mr_;
};

}  // namespace

std::unique_ptr<backend> make_dry_backend() { return std::make_unique<dry_backend>(); }

}  // namespace layerinit
