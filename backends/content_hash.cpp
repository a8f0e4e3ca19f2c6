#include <layerinit/backends/content_hash.hpp>

#include <new>

// Header-only (backends/CMakeLists.txt): no libxxhash at run time.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace layerinit {

std::uint64_t content_hash(const void* host_data, std::size_t bytes) { return XXH3_64bits(host_data, bytes); }

struct ContentHash::State {
  XXH3_state_t* s = XXH3_createState();
  State() {
    if (s == nullptr) throw std::bad_alloc();
    XXH3_64bits_reset(s);
  }
  ~State() { XXH3_freeState(s); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

ContentHash::ContentHash() : state_(std::make_unique<State>()) {}
ContentHash::~ContentHash() = default;
ContentHash::ContentHash(ContentHash&&) noexcept = default;
ContentHash& ContentHash::operator=(ContentHash&&) noexcept = default;

ContentHash ContentHash::copy() const {
  ContentHash c;
  XXH3_copyState(c.state_->s, state_->s);
  return c;
}

void ContentHash::update(const void* host_data, std::size_t bytes) { XXH3_64bits_update(state_->s, host_data, bytes); }

std::uint64_t ContentHash::digest() const { return XXH3_64bits_digest(state_->s); }

}  // namespace layerinit
