#include "kernels/fill_host.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dtypes/convert.hpp"
#include "kernels/philox.hpp"

namespace layerinit {

namespace {

template <DType T>
void fill_span(const FillJob& j, std::uint64_t b, std::uint64_t e) {
  auto* out = static_cast<storage_t<T>*>(j.dst);
  const std::uint64_t base = j.begin;
  if (j.params.kind == FillKind::constant) {
    std::fill(out + (b - base), out + (e - base), to_storage<T>(j.params.shift));
    return;
  }
  if (!j.transposed) {
    std::uint64_t m = b;
    while (m < e) {
      const std::uint64_t g = m >> 2;
      const rng::Block blk = rng::group_bits(j.key, g);
      const std::uint64_t stop = std::min(e, (g + 1) * 4);
      for (; m < stop; ++m) out[m - base] = to_storage<T>(element_value(j.params, blk.w[m & 3]));
    }
    return;
  }
  // Transposed: neighbours in memory are `rows` apart logically, so each element draws its own block.
  for (std::uint64_t m = b; m < e; ++m) {
    const std::uint64_t i = logical_index(j, m);
    const rng::Block blk = rng::group_bits(j.key, i >> 2);
    out[m - base] = to_storage<T>(element_value(j.params, blk.w[i & 3]));
  }
}

constexpr std::uint64_t chunk_elements = 1u << 16;  // a multiple of 4: chunks hold whole groups

struct Chunk {
  std::size_t job;
  std::uint64_t b, e;
};

}  // namespace

int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void fill_host_range(const FillJob& j, std::uint64_t b, std::uint64_t e) {
  if (b < j.begin || e > j.end || b > e) throw std::invalid_argument("fill_host_range: range outside the job");
  if (j.transposed && (j.rows == 0 || j.cols == 0 || j.rows * j.cols < j.end))
    throw std::invalid_argument("fill_host_range: transposed job needs rows * cols >= end");
  switch (j.dtype) {
    case DType::f32: fill_span<DType::f32>(j, b, e); break;
    case DType::f16: fill_span<DType::f16>(j, b, e); break;
    case DType::bf16: fill_span<DType::bf16>(j, b, e); break;
  }
}

void fill_host(std::span<const FillJob> jobs, int threads) {
  if (threads <= 0) threads = default_thread_count();
  std::vector<Chunk> chunks;
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const FillJob& j = jobs[k];
    if (j.end < j.begin) throw std::invalid_argument("fill_host: job with end < begin");
    // Chunk edges on multiples of chunk_elements (memory indices), so a chunk never splits a group.
    std::uint64_t b = j.begin;
    while (b < j.end) {
      const std::uint64_t e = std::min(j.end, (b / chunk_elements + 1) * chunk_elements);
      chunks.push_back({k, b, e});
      b = e;
    }
    total += j.end - j.begin;
  }
  const std::size_t n_threads =
      std::min<std::size_t>(static_cast<std::size_t>(threads), std::max<std::size_t>(1, chunks.size()));
  if (n_threads <= 1 || total < chunk_elements) {
    for (const Chunk& c : chunks) fill_host_range(jobs[c.job], c.b, c.e);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (std::size_t i = next++; i < chunks.size() && !failed; i = next++) {
      try {
        fill_host_range(jobs[chunks[i].job], chunks[i].b, chunks[i].e);
      } catch (...) {
        if (!failed.exchange(true)) failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n_threads - 1);
  for (std::size_t t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace layerinit
