#include <layerinit/memory/tracking.hpp>

#include <algorithm>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit {

tracking_resource::tracking_resource(memory_resource& upstream, options opts) : upstream_(&upstream), opts_(opts) {}

void tracking_resource::grow(std::size_t bytes, bool new_allocation) {
  auto apply = [&](MemoryStats& s) {
    s.current_bytes += bytes;
    s.total_bytes += bytes;
    s.peak_bytes = std::max(s.peak_bytes, s.current_bytes);
    if (new_allocation) {
      ++s.current_count;
      ++s.total_count;
      s.peak_count = std::max(s.peak_count, s.current_count);
    }
  };
  apply(global_);
  for (auto& s : scopes_) apply(s);
}

void tracking_resource::shrink(std::size_t bytes, bool end_allocation) {
  auto apply = [&](MemoryStats& s) {
    s.current_bytes -= std::min(bytes, s.current_bytes);
    if (end_allocation && s.current_count > 0) --s.current_count;
  };
  apply(global_);
  for (auto& s : scopes_) apply(s);
}

void tracking_resource::notify(MemoryEvent::Kind k, std::size_t bytes, const AllocTag* tag) {
  if (!listener_) return;
  MemoryEvent e{k, bytes, global_.current_bytes,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), tag};
  listener_(e);
}

void* tracking_resource::do_allocate(std::size_t bytes, const AllocTag& tag) {
  void* p = upstream_->allocate(bytes, tag);
  std::lock_guard lock(mu_);
  grow(bytes, true);
  if (opts_.live_list) live_[p] = AllocationRecord{p, bytes, tag, false};
  if (opts_.history) history_.push_back(AllocationRecord{p, bytes, tag, false});
  notify(MemoryEvent::Kind::allocate, bytes, &tag);
  return p;
}

void tracking_resource::do_deallocate(void* p, std::size_t bytes) noexcept {
  upstream_->deallocate(p, bytes);
  std::lock_guard lock(mu_);
  shrink(bytes, true);
  AllocTag tag;
  if (auto it = live_.find(p); it != live_.end()) {
    tag = std::move(it->second.tag);
    live_.erase(it);
  }
  notify(MemoryEvent::Kind::deallocate, bytes, &tag);
}

void* tracking_resource::do_reserve(std::size_t bytes, const AllocTag& tag) {
  void* p = upstream_->reserve(bytes, tag);
  std::lock_guard lock(mu_);
  grow(0, true);
  live_[p] = AllocationRecord{p, 0, tag, true};
  if (opts_.history) history_.push_back(AllocationRecord{p, 0, tag, true});
  return p;
}

void tracking_resource::do_commit(void* base, std::size_t offset, std::size_t bytes) {
  upstream_->commit(base, offset, bytes);
  std::lock_guard lock(mu_);
  grow(bytes, false);
  auto it = live_.find(base);
  if (it != live_.end()) it->second.bytes += bytes;
  // Only the newest record at this address: an older, released reservation may have had the same one.
  if (opts_.history && it != live_.end())
    for (auto r = history_.rbegin(); r != history_.rend(); ++r)
      if (r->reservation && r->ptr == base) {
        r->bytes = it->second.bytes;
        break;
      }
  notify(MemoryEvent::Kind::commit, bytes, it != live_.end() ? &it->second.tag : nullptr);
}

void tracking_resource::do_release(void* base, std::size_t reserved_bytes) noexcept {
  upstream_->release(base, reserved_bytes);
  std::lock_guard lock(mu_);
  std::size_t committed = 0;
  AllocTag tag;
  if (auto it = live_.find(base); it != live_.end()) {
    committed = it->second.bytes;
    tag = std::move(it->second.tag);
    live_.erase(it);
  }
  shrink(committed, true);
  notify(MemoryEvent::Kind::release, committed, &tag);
}

MemoryStats tracking_resource::stats() const {
  std::lock_guard lock(mu_);
  return global_;
}

void tracking_resource::push_scope() {
  std::lock_guard lock(mu_);
  MemoryStats s;
  s.current_bytes = global_.current_bytes;
  s.peak_bytes = global_.current_bytes;
  s.current_count = global_.current_count;
  s.peak_count = global_.current_count;
  scopes_.push_back(s);
}

MemoryStats tracking_resource::pop_scope() {
  std::lock_guard lock(mu_);
  LAYERINIT_EXPECTS(!scopes_.empty(), "tracking_resource::pop_scope without push_scope");
  MemoryStats s = scopes_.back();
  scopes_.pop_back();
  return s;
}

void tracking_resource::reset_peak() {
  std::lock_guard lock(mu_);
  global_.peak_bytes = global_.current_bytes;
  global_.peak_count = global_.current_count;
}

std::vector<AllocationRecord> tracking_resource::live() const {
  std::lock_guard lock(mu_);
  std::vector<AllocationRecord> out;
  for (const auto& [p, r] : live_)
    if (opts_.live_list || r.reservation) out.push_back(r);
  return out;
}

std::vector<AllocationRecord> tracking_resource::history() const {
  std::lock_guard lock(mu_);
  return history_;
}

void tracking_resource::set_listener(std::function<void(const MemoryEvent&)> f) {
  std::lock_guard lock(mu_);
  listener_ = std::move(f);
}

std::size_t limiting_resource::in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

void* limiting_resource::do_allocate(std::size_t bytes, const AllocTag& tag) {
  {
    std::lock_guard lock(mu_);
    if (bytes > limit_ - std::min(limit_, in_use_)) throw out_of_memory(bytes, in_use_, do_name());
    in_use_ += bytes;
  }
  try {
    return upstream_->allocate(bytes, tag);
  } catch (...) {
    std::lock_guard lock(mu_);
    in_use_ -= bytes;
    throw;
  }
}

void limiting_resource::do_deallocate(void* p, std::size_t bytes) noexcept {
  upstream_->deallocate(p, bytes);
  std::lock_guard lock(mu_);
  in_use_ -= bytes;
}

void* limiting_resource::do_reserve(std::size_t bytes, const AllocTag& tag) {
  void* p = upstream_->reserve(bytes, tag);
  std::lock_guard lock(mu_);
  committed_[p] = 0;
  return p;
}

void limiting_resource::do_commit(void* base, std::size_t offset, std::size_t bytes) {
  {
    std::lock_guard lock(mu_);
    if (bytes > limit_ - std::min(limit_, in_use_)) throw out_of_memory(bytes, in_use_, do_name());
    in_use_ += bytes;
    committed_[base] += bytes;
  }
  try {
    upstream_->commit(base, offset, bytes);
  } catch (...) {
    std::lock_guard lock(mu_);
    in_use_ -= bytes;
    committed_[base] -= bytes;
    throw;
  }
}

void limiting_resource::do_release(void* base, std::size_t reserved_bytes) noexcept {
  upstream_->release(base, reserved_bytes);
  std::lock_guard lock(mu_);
  if (auto it = committed_.find(base); it != committed_.end()) {
    in_use_ -= it->second;
    committed_.erase(it);
  }
}

}  // namespace layerinit
