// emit_parallel's ranks as threads of one process: a Collective over a mutex (test_emit_parallel.cpp,
// test_checkpoint_reader.cpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <layerinit/checkpoint/parallel.hpp>

namespace layerinit::testing {

// Ranks as threads: every collective is one exchange, where each rank leaves its text and waits
// until all have. leave() breaks the group, as a rank that died: waits throw, as MpiJob's do when
// the launcher tears the job down.
class ThreadGroup {
 public:
  explicit ThreadGroup(std::uint64_t n) : n_(n), slots_(n) {}
  std::vector<std::string> exchange(std::uint64_t rank, const std::string& mine) {
    std::unique_lock lk(m_);
    if (broken_) throw error("interrupted");
    const std::uint64_t gen = generation_;
    slots_[rank] = mine;
    if (++arrived_ == n_) {
      result_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return generation_ != gen || broken_; });
      if (generation_ == gen) throw error("interrupted");
    }
    return result_;
  }
  void leave() {
    std::lock_guard lk(m_);
    broken_ = true;
    cv_.notify_all();
  }
  // Runs in rank 0 as it gathers the ranks' reports: after every rank wrote and agreed, before rank 0
  // publishes.
  std::function<void()> before_gather;
  std::uint64_t size() const { return n_; }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t n_, arrived_ = 0, generation_ = 0;
  bool broken_ = false;
  std::vector<std::string> slots_, result_;
};

class ThreadCollective final : public Collective {
 public:
  ThreadCollective(ThreadGroup& g, std::uint64_t rank) : g_(g), rank_(rank) {}
  std::uint64_t rank() const override { return rank_; }
  std::uint64_t size() const override { return g_.size(); }
  std::optional<std::uint64_t> first_failure(bool ok) override {
    const auto all = g_.exchange(rank_, ok ? "" : "failed");
    for (std::uint64_t r = 0; r < all.size(); ++r)
      if (!all[r].empty()) return r;
    return std::nullopt;
  }
  std::string broadcast(const std::string& text, std::uint64_t root) override { return g_.exchange(rank_, text).at(root); }
  std::vector<std::string> gather(const std::string& text, std::uint64_t root) override {
    if (rank_ == 0 && g_.before_gather) g_.before_gather();
    auto all = g_.exchange(rank_, text);
    return rank_ == root ? all : std::vector<std::string>{};
  }

 private:
  ThreadGroup& g_;
  std::uint64_t rank_;
};

}  // namespace layerinit::testing
