#include <layerinit/memory/resource.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

void* memory_resource::do_reserve(std::size_t, const AllocTag&) {
  LAYERINIT_FAIL("memory resource '" + name() + "' cannot reserve address space (ask supports_reserve() first)");
}
void memory_resource::do_commit(void*, std::size_t, std::size_t) {
  LAYERINIT_FAIL("memory resource '" + name() + "' cannot commit reserved memory (ask supports_reserve() first)");
}
void memory_resource::do_release(void*, std::size_t) noexcept {}

void* host_resource::do_allocate(std::size_t bytes, const AllocTag&) {
  void* p = nullptr;
  if (bytes >= mmap_threshold) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // page aligned
    if (p == MAP_FAILED) p = nullptr;
  } else {
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  }
  if (!p) throw out_of_memory(bytes, in_use_.load(), "host");
  in_use_ += bytes;
  return p;
}

void host_resource::do_deallocate(void* p, std::size_t bytes) noexcept {
  if (bytes >= mmap_threshold) munmap(p, bytes);
  else std::free(p);
  in_use_ -= bytes;
}

namespace {
std::size_t page_size() {
  static const std::size_t ps = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return ps;
}
}  // namespace

void* host_resource::do_reserve(std::size_t bytes, const AllocTag&) {
  void* p = mmap(nullptr, bytes == 0 ? 1 : bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw out_of_memory(bytes, in_use_.load(), "host (address reservation)");
  return p;
}

void host_resource::do_commit(void* base, std::size_t offset, std::size_t bytes) {
  if (bytes == 0) return;
  const std::size_t ps = page_size();
  const std::size_t first = offset / ps * ps;
  const std::size_t last = (offset + bytes + ps - 1) / ps * ps;
  if (mprotect(static_cast<char*>(base) + first, last - first, PROT_READ | PROT_WRITE) != 0)
    throw out_of_memory(bytes, in_use_.load(), std::string("host (commit: ") + std::strerror(errno) + ")");
}

void host_resource::do_release(void* base, std::size_t reserved_bytes) noexcept {
  if (base) munmap(base, reserved_bytes == 0 ? 1 : reserved_bytes);
}

}  // namespace layerinit
