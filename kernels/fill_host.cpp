#include "kernels/fill_host.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <thread>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "dtypes/convert.hpp"
#include "kernels/philox.hpp"

namespace layerinit {

namespace {

// Elements per batch: 16 Philox groups. The loops over a batch have no branches the compiler cannot
// if-convert, so they vectorize; each element's value is still element_value() of its own bits.
constexpr std::uint64_t batch = 64;

template <DType T, FillKind K>
inline void fill_contiguous(const FillJob& j, storage_t<T>* out, std::uint64_t b, std::uint64_t e) {
  const FillParams p = j.params;
  std::uint64_t m = b;
  auto one = [&](std::uint64_t idx) {
    const rng::Block blk = rng::group_bits(j.key, idx >> 2);
    out[idx - j.begin] = to_storage<T>(value_of<K>(p, blk.w[idx & 3]));
  };
  for (; m < e && m % batch != 0; ++m) one(m);
  for (; m + batch <= e; m += batch) {
    std::uint32_t bits[batch];
    const std::uint64_t g0 = m / 4;
    for (std::uint64_t g = 0; g < batch / 4; ++g) {
      const rng::Block blk = rng::group_bits(j.key, g0 + g);
      bits[4 * g + 0] = blk.w[0];
      bits[4 * g + 1] = blk.w[1];
      bits[4 * g + 2] = blk.w[2];
      bits[4 * g + 3] = blk.w[3];
    }
    storage_t<T>* dst = out + (m - j.begin);
    if constexpr (T == DType::f32) {
      for (std::uint64_t k = 0; k < batch; ++k) dst[k] = value_of<K>(p, bits[k]);
    } else {
      // Values first, then the whole batch converted at once, rounding to nearest even.
      alignas(64) float values[batch];
      for (std::uint64_t k = 0; k < batch; ++k) values[k] = value_of<K>(p, bits[k]);
#if defined(__F16C__)
      if constexpr (T == DType::f16) {
        // Eigen 3.4 converts a float array to half one element at a time with integer bit tricks;
        // the F16C instruction does 8 per instruction with the same rounding (the golden hashes pass
        // in builds with and without it).
        for (std::uint64_t k = 0; k < batch; k += 8)
          _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k),
                           _mm256_cvtps_ph(_mm256_load_ps(values + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        continue;
      }
#endif
      using H = typename dtype_traits<T>::host_type;
      static_assert(sizeof(H) == sizeof(storage_t<T>));
      Eigen::Map<Eigen::Array<H, batch, 1>>(reinterpret_cast<H*>(dst)) =
          Eigen::Map<const Eigen::Array<float, batch, 1>, Eigen::Aligned64>(values).template cast<H>();
    }
  }
  for (; m < e; ++m) one(m);
}

template <DType T>
void fill_span(const FillJob& j, std::uint64_t b, std::uint64_t e) {
  auto* out = static_cast<storage_t<T>*>(j.dst);
  const std::uint64_t base = j.begin;
  if (j.params.kind == FillKind::constant) {
    std::fill(out + (b - base), out + (e - base), to_storage<T>(j.params.shift));
    return;
  }
  if (!j.transposed) {
    switch (j.params.kind) {
      case FillKind::normal: fill_contiguous<T, FillKind::normal>(j, out, b, e); break;
      case FillKind::trunc_normal: fill_contiguous<T, FillKind::trunc_normal>(j, out, b, e); break;
      case FillKind::uniform: fill_contiguous<T, FillKind::uniform>(j, out, b, e); break;
      default: break;
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
  // The same preconditions as fill_cuda: rows * cols checked without wrapping around 2^64, and a dst
  // to write through whenever there is something to write.
  if (j.transposed && (j.rows == 0 || j.cols == 0 || j.rows > UINT64_MAX / j.cols || j.rows * j.cols < j.end))
    throw std::invalid_argument("fill_host_range: transposed job needs rows * cols >= end (without overflow)");
  if (b == e) return;
  if (j.dst == nullptr) throw std::invalid_argument("fill_host_range: job with a null dst");
  if (reinterpret_cast<std::uintptr_t>(j.dst) % dtype_size(j.dtype) != 0)
    throw std::invalid_argument("fill_host_range: dst is not aligned to its element size");
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
