#include "xla_piece.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <utility>

#include <layerinit/core/errors.hpp>
#include <layerinit/shard/composite.hpp>

namespace layerinit::jax {

namespace {
std::mutex writes_mu;
bool writes_on = false;
std::vector<Written> writes;
std::atomic<bool> cancelled{false};
std::atomic<std::int64_t> interrupt_countdown{-1};
std::atomic<bool> interrupted{false};  // the hook raised its SIGINT
std::atomic<std::uint64_t> parsed{0};

void wait_for_cancel() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!cancelled.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
}  // namespace

void cancel_fills(bool on) {
  if (!on) interrupted.store(false);
  cancelled.store(on);
}

bool fills_cancelled() {
  if (interrupted.load()) wait_for_cancel();  // the hook's: no fill starts after its signal
  return cancelled.load();
}

void interrupt_after(std::int64_t n) {
  interrupted.store(false);
  interrupt_countdown.store(n);
}

void after_fill() {
  if (interrupt_countdown.load() < 0 || interrupt_countdown.fetch_sub(1) != 1) return;
  interrupted.store(true);
  std::raise(SIGINT);
  wait_for_cancel();
}

void record_writes(bool on) {
  std::lock_guard lock(writes_mu);
  writes_on = on;
  writes.clear();
}

std::vector<Written> take_writes() {
  std::lock_guard lock(writes_mu);
  return std::exchange(writes, {});
}

Composite parse_param(std::string_view text) {
  parsed.fetch_add(1);
  return composite_from_text(text);
}

std::uint64_t params_parsed() { return parsed.load(); }

std::vector<FillJob> piece_jobs(const PieceCall& c) {
  const Composite& p = *c.param;
  const std::string& name = p.parts.front().name;
  const std::size_t n = p.shape.size();
  if (c.dtype != p.dtype)
    bad_argument("tensor", name,
                 "is " + std::string(dtype_name(p.dtype)) + " but the output buffer is " + std::string(dtype_name(c.dtype)));
  if (c.dims.size() != n)
    bad_argument("tensor", name, ": an output of rank " + std::to_string(c.dims.size()) + " for " + shape_string(p.shape));
  Box box{Shape(n, 0), Shape(n, 0)};
  for (std::size_t d = 0; d < n; ++d) box.shape[d] = static_cast<std::uint64_t>(c.dims[d]);
  if (!c.table.empty()) {
    if (c.table.size() % (n + 1) != 0)
      bad_argument("tensor", name,
                   ": a device table of " + std::to_string(c.table.size()) + " numbers for rank " + std::to_string(n));
    bool found = false;
    for (std::size_t r = 0; r < c.table.size() && !found; r += n + 1) {
      if (c.table[r] != c.ordinal) continue;
      for (std::size_t d = 0; d < n; ++d) box.offset[d] = static_cast<std::uint64_t>(c.table[r + 1 + d]);
      found = true;
    }
    if (!found) bad_argument("tensor", name, ": device " + std::to_string(c.ordinal) + " holds no piece");
  }
  std::vector<FillJob> jobs;
  composite_fill_jobs(p, box, Region{c.dst, {}}, c.seed, jobs);
  std::lock_guard lock(writes_mu);
  if (writes_on) writes.push_back({name, reinterpret_cast<std::uintptr_t>(c.dst), box.numel() * dtype_size(p.dtype)});
  return jobs;
}

}  // namespace layerinit::jax
