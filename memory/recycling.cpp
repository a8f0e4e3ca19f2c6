#include <layerinit/memory/recycling.hpp>

namespace layerinit {

recycling_resource::recycling_resource(memory_resource& upstream) : upstream_(&upstream) {}

recycling_resource::~recycling_resource() {
  std::lock_guard lock(m_);
  hand_back_all();
}

std::size_t recycling_resource::kept_bytes() const {
  std::lock_guard lock(m_);
  return kept_bytes_;
}

std::size_t recycling_resource::reused() const {
  std::lock_guard lock(m_);
  return reused_;
}

void recycling_resource::hand_back_all() noexcept {
  for (const auto& [bytes, p] : kept_) upstream_->deallocate(p, bytes);
  kept_.clear();
  kept_bytes_ = 0;
}

void* recycling_resource::do_allocate(std::size_t bytes, const AllocTag& tag) {
  {
    std::lock_guard lock(m_);
    if (const auto it = kept_.find(bytes); it != kept_.end()) {
      void* p = it->second;
      kept_.erase(it);
      kept_bytes_ -= bytes;
      ++reused_;
      return p;
    }
    hand_back_all();  // before upstream takes anything new
  }
  return upstream_->allocate(bytes, tag);
}

void recycling_resource::do_deallocate(void* p, std::size_t bytes) noexcept {
  try {
    std::lock_guard lock(m_);
    kept_.emplace(bytes, p);
    kept_bytes_ += bytes;
    return;
  } catch (...) {  // no memory for the map's node: handed back instead
  }
  upstream_->deallocate(p, bytes);
}

}  // namespace layerinit
