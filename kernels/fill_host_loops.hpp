// The host fill's inner loops, compiled once per instruction-set level (fill_host_isa_*.cpp) and
// picked at run time by fill_host.cpp. Private to kernels/: every name here has internal linkage, so
// the copies built with AVX2 or AVX-512 never stand in for the baseline ones. Values never depend on
// the level: contraction is off and every fma is explicit, which is exact on any ISA.
#pragma once

#include <algorithm>
#include <cstdint>

#include <layerinit/dtypes/convert.hpp>
#include <layerinit/dtypes/round.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/philox.hpp>

namespace layerinit {
namespace {

// Elements per batch: 8 Philox blocks of fp16/bf16 (16 of fp32). The loops over a batch have no
// branches the compiler cannot if-convert, so they vectorize; each element's value is still
// block_element() of its own block.
constexpr std::uint64_t batch = 64;

// Memory elements [b, e) of a non-transposed job, one whole block at a time outside the batches.
template <DType T, FillKind K>
inline void fill_contiguous(const FillJob& j, std::uint64_t b, std::uint64_t e, const FillTables& tab) {
  constexpr std::uint64_t n = elements_per_block(T);
  auto* out = static_cast<storage_t<T>*>(j.dst) - j.begin;  // out[m]: memory element m
  const FillParams p = j.params;
  const rng::KeySchedule ks = rng::key_schedule(j.key);
  // Elements [m, stop) that share one block (stop <= the block's end).
  auto part = [&](std::uint64_t m, std::uint64_t stop) {
    const rng::Block blk = rng::group_bits(ks, m / n);
    for (; m < stop; ++m) out[m] = block_element<T, K>(p, blk, static_cast<unsigned>(m % n), tab);
  };
  std::uint64_t m = b;
  for (; m < e && m % batch != 0; m = std::min(e, (m / n + 1) * n)) part(m, std::min(e, (m / n + 1) * n));
  for (; m + batch <= e; m += batch) {
    storage_t<T>* dst = out + m;
    if constexpr (T == DType::f32) {
      std::uint32_t bits[batch];
      for (std::uint64_t g = 0; g < batch / 4; ++g) {
        const rng::Block blk = rng::group_bits(ks, m / 4 + g);
        for (unsigned q = 0; q < 4; ++q) bits[4 * g + q] = blk.w[q];
      }
      for (std::uint64_t k = 0; k < batch; ++k) dst[k] = f32_value<K>(p, bits[k], tab.cubic);
    } else {
      std::uint32_t codes[batch];
      for (std::uint64_t g = 0; g < batch / 8; ++g) {
        const rng::Block blk = rng::group_bits(ks, m / 8 + g);
        for (unsigned q = 0; q < 4; ++q) {
          codes[8 * g + 2 * q] = blk.w[q] & 0xffffu;
          codes[8 * g + 2 * q + 1] = blk.w[q] >> 16;
        }
      }
      // Values first, then the whole batch rounded at once (to nearest even, as to_storage does).
      alignas(64) float values[batch];
      for (std::uint64_t k = 0; k < batch; ++k) values[k] = half_value<K>(p, codes[k], tab.node16);
      round_floats(T, values, dst, batch);
    }
  }
  while (m < e) {
    const std::uint64_t stop = std::min(e, (m / n + 1) * n);
    part(m, stop);
    m = stop;
  }
}

// Transposed job, memory [cols, rows]: the memory elements in [b, e) of memory rows c0 .. c0 + n - 1
// (c0 a multiple of n, cols a multiple of n), for logical rows r in [r0, r1). The block of logical
// (r, c0 .. c0 + n - 1) feeds one element of each of the n memory rows, so every block is drawn once.
template <DType T, FillKind K>
inline void fill_transposed_tile(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1,
                                 std::uint64_t b, std::uint64_t e, const FillTables& tab) {
  constexpr std::uint64_t n = elements_per_block(T);
  auto* out = static_cast<storage_t<T>*>(j.dst) - j.begin;
  const FillParams p = j.params;
  const rng::KeySchedule ks = rng::key_schedule(j.key);
  const std::uint64_t nc = std::min<std::uint64_t>(n, j.cols - c0);
  for (std::uint64_t r = r0; r < r1; ++r) {
    const rng::Block blk = rng::group_bits(ks, (r * j.cols + c0) / n);
    for (std::uint64_t q = 0; q < nc; ++q) {
      const std::uint64_t m = (c0 + q) * j.rows + r;
      if (m >= b && m < e) out[m] = block_element<T, K>(p, blk, static_cast<unsigned>(q), tab);
    }
  }
}

template <DType T, FillKind K>
inline void fill_span_kind(const FillJob& j, std::uint64_t b, std::uint64_t e, const FillTables& tab) {
  if (!j.transposed) return fill_contiguous<T, K>(j, b, e, tab);
  constexpr std::uint64_t n = elements_per_block(T);
  if (j.cols % n != 0) {
    // A block straddles logical rows: each element draws its own (odd shapes only).
    auto* out = static_cast<storage_t<T>*>(j.dst) - j.begin;
    for (std::uint64_t m = b; m < e; ++m) out[m] = element_at<T>(j, logical_index(j, m), tab);
    return;
  }
  // Memory rows b / rows .. (e - 1) / rows hold [b, e), drawn group of n rows by group.
  const std::uint64_t c_first = b / j.rows, c_last = (e - 1) / j.rows;
  for (std::uint64_t c0 = c_first - c_first % n; c0 <= c_last; c0 += n) {
    const RowRange rr = group_rows(j, n, c0, b, e);
    fill_transposed_tile<T, K>(j, c0, rr.r0, rr.r1, b, e, tab);
  }
}

template <DType T>
inline void fill_span(const FillJob& j, std::uint64_t b, std::uint64_t e) {
  const FillTables tab = host_fill_tables();
  switch (j.params.kind) {
    case FillKind::normal: fill_span_kind<T, FillKind::normal>(j, b, e, tab); break;
    case FillKind::trunc_normal: fill_span_kind<T, FillKind::trunc_normal>(j, b, e, tab); break;
    case FillKind::uniform: fill_span_kind<T, FillKind::uniform>(j, b, e, tab); break;
    default: break;
  }
}

template <DType T>
inline void fill_tile(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1) {
  const FillTables tab = host_fill_tables();
  switch (j.params.kind) {
    case FillKind::normal: fill_transposed_tile<T, FillKind::normal>(j, c0, r0, r1, j.begin, j.end, tab); break;
    case FillKind::trunc_normal:
      fill_transposed_tile<T, FillKind::trunc_normal>(j, c0, r0, r1, j.begin, j.end, tab);
      break;
    case FillKind::uniform: fill_transposed_tile<T, FillKind::uniform>(j, c0, r0, r1, j.begin, j.end, tab); break;
    default: break;
  }
}

// Memory elements [b, e) of a non-constant job.
inline void fill_range_loops(const FillJob& j, std::uint64_t b, std::uint64_t e) {
  switch (j.dtype) {
    case DType::f32: fill_span<DType::f32>(j, b, e); break;
    case DType::f16: fill_span<DType::f16>(j, b, e); break;
    case DType::bf16: fill_span<DType::bf16>(j, b, e); break;
  }
}

// The job's elements in memory rows c0 .. c0 + n - 1 and logical rows [r0, r1) of a non-constant
// transposed job whose cols are a multiple of n (fill_host's tiles).
inline void fill_tile_loops(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1) {
  switch (j.dtype) {
    case DType::f32: fill_tile<DType::f32>(j, c0, r0, r1); break;
    case DType::f16: fill_tile<DType::f16>(j, c0, r0, r1); break;
    case DType::bf16: fill_tile<DType::bf16>(j, c0, r0, r1); break;
  }
}

}  // namespace
}  // namespace layerinit
