// The host fill's inner loops, compiled once per instruction-set level (fill_host_isa_*.cpp) and
// picked at run time by fill_host.cpp. Private to kernels/: every name here has internal linkage, so
// the copies built with AVX2 or AVX-512 never stand in for the baseline ones. Values never depend on
// the level: contraction is off and every fma is explicit, which is exact on any ISA.
#pragma once

#include <algorithm>
#include <cstdint>

#include <layerinit/dtypes/convert.hpp>
#include <layerinit/dtypes/round.hpp>
#include <layerinit/kernels/fill_element.hpp>
#include <layerinit/kernels/philox.hpp>

namespace layerinit {
namespace {

// Blocks per batch: one AVX-512 lane (of 32-bit words) each. A batch is 128 fp16/bf16 or 64 fp32
// elements.
constexpr unsigned batch_blocks = 16;

// Word q of the batch's block i at w[q][i]: Philox in structure-of-arrays form.
struct BatchWords {
  alignas(64) std::uint32_t w[4][batch_blocks];
};

// Philox4x32-10 of the blocks with counters g[0..15] (high counter words 0), the rounds of
// rng::group_bits written out over lanes so they vectorize: one 32x32 -> 64 bit product per
// multiplier and lane, the key schedule hoisted. Bit for bit the library's blocks (tests/test_fill.cpp).
inline void philox_batch(const rng::KeySchedule& ks, const std::uint64_t (&g)[batch_blocks], BatchWords& out) {
  for (unsigned i = 0; i < batch_blocks; ++i) {
    std::uint32_t c0 = static_cast<std::uint32_t>(g[i]), c1 = static_cast<std::uint32_t>(g[i] >> 32), c2 = 0, c3 = 0;
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      const std::uint64_t p0 = std::uint64_t{c0} * 0xD2511F53u;  // PHILOX_M4x32_0
      const std::uint64_t p1 = std::uint64_t{c2} * 0xCD9E8D57u;  // PHILOX_M4x32_1
      c0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ ks.k0[r];
      c2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ ks.k1[r];
      c1 = static_cast<std::uint32_t>(p1);
      c3 = static_cast<std::uint32_t>(p0);
    }
    out.w[0][i] = c0;
    out.w[1][i] = c1;
    out.w[2][i] = c2;
    out.w[3][i] = c3;
  }
}

// The portable batches: memory elements [m, e) of a non-transposed job, m and e multiples of the
// batch (batch_blocks * n elements), out[m]: memory element m.
template <DType T, FillKind K>
inline void contiguous_batches_portable(const FillParams& p, const FillTables& tab, const rng::KeySchedule& ks,
                                        storage_t<T>* out, std::uint64_t m, std::uint64_t e) {
  constexpr std::uint64_t n = elements_per_block(T), per_batch = batch_blocks * n;
  for (; m < e; m += per_batch) {
    std::uint64_t g[batch_blocks];
    for (unsigned i = 0; i < batch_blocks; ++i) g[i] = m / n + i;
    BatchWords bw;
    philox_batch(ks, g, bw);
    storage_t<T>* dst = out + m;
    // The words in memory order first, so the transform below is one loop over contiguous inputs.
    std::uint32_t bits[4 * batch_blocks];
    for (unsigned i = 0; i < batch_blocks; ++i)
      for (unsigned q = 0; q < 4; ++q) bits[4 * i + q] = bw.w[q][i];
    if constexpr (T == DType::f32) {
      for (unsigned k = 0; k < per_batch; ++k) dst[k] = f32_value<K>(p, bits[k], tab.cubic);
    } else {
      // Values first, then the whole batch rounded at once (to nearest even, as to_storage does).
      std::uint32_t codes[per_batch];
      for (unsigned k = 0; k < 4 * batch_blocks; ++k) {
        codes[2 * k] = bits[k] & 0xffffu;
        codes[2 * k + 1] = bits[k] >> 16;
      }
      alignas(64) float values[per_batch];
      for (unsigned k = 0; k < per_batch; ++k) values[k] = half_value<K>(p, codes[k], tab.node16);
      round_floats(T, values, dst, per_batch);
    }
  }
}

// Memory elements [b, e) of a non-transposed job, one whole block at a time outside the batches.
template <DType T, FillKind K>
inline void fill_contiguous(const FillJob& j, std::uint64_t b, std::uint64_t e, const FillTables& tab) {
  constexpr std::uint64_t n = elements_per_block(T), per_batch = batch_blocks * n;
  auto* out = static_cast<storage_t<T>*>(j.dst) - j.begin;  // out[m]: memory element m
  const FillParams p = j.params;
  const rng::KeySchedule ks = rng::key_schedule(j.key);
  // Elements [m, stop) that share one block (stop <= the block's end).
  auto part = [&](std::uint64_t m, std::uint64_t stop) {
    const rng::Block blk = rng::group_bits(ks, m / n);
    for (; m < stop; ++m) out[m] = block_element<T, K>(p, blk, static_cast<unsigned>(m % n), tab);
  };
  std::uint64_t m = b;
  for (; m < e && m % per_batch != 0; m = std::min(e, (m / n + 1) * n)) part(m, std::min(e, (m / n + 1) * n));
  const std::uint64_t batches_end = m < e ? m + (e - m) / per_batch * per_batch : m;
  if (batches_end > m) {
#if defined(LAYERINIT_FILL_HOST_AVX512)
    avx512::contiguous_batches<T, K>(p, tab, ks, out, m, batches_end);
#else
    contiguous_batches_portable<T, K>(p, tab, ks, out, m, batches_end);
#endif
    m = batches_end;
  }
  while (m < e) {
    const std::uint64_t stop = std::min(e, (m / n + 1) * n);
    part(m, stop);
    m = stop;
  }
}

// The value of element k of batch block i, before rounding for fp16/bf16.
template <DType T, FillKind K>
inline float batch_value(const FillParams& p, const FillTables& tab, const BatchWords& bw, unsigned k, unsigned i) {
  if constexpr (T == DType::f32) {
    return f32_value<K>(p, bw.w[k][i], tab.cubic);
  } else {
    return half_value<K>(p, (bw.w[k / 2][i] >> (16 * (k % 2))) & 0xffffu, tab.node16);
  }
}

// The portable tile rows: logical rows [r, r + count) (count <= batch_blocks) of a transposed tile,
// one block per row; element q of row r + i goes to memory element (c0 + q) * rows + r + i, written
// where it lies in [b, e).
template <DType T, FillKind K>
inline void tile_rows_portable(const FillJob& j, const FillTables& tab, const rng::KeySchedule& ks, std::uint64_t c0,
                               std::uint64_t r, unsigned count, std::uint64_t b, std::uint64_t e) {
  constexpr unsigned n = elements_per_block(T);
  auto* out = static_cast<storage_t<T>*>(j.dst) - j.begin;
  std::uint64_t g[batch_blocks];
  for (unsigned i = 0; i < batch_blocks; ++i) g[i] = ((r + std::min(i, count - 1)) * j.cols + c0) / n;
  BatchWords bw;
  philox_batch(ks, g, bw);
  for (unsigned q = 0; q < n; ++q) {
    const std::uint64_t m0 = (c0 + q) * j.rows + r;  // memory element of row r + 0
    if (m0 >= e || m0 + count <= b) continue;
    alignas(64) float values[batch_blocks];
    for (unsigned i = 0; i < count; ++i) values[i] = batch_value<T, K>(j.params, tab, bw, q, i);
    storage_t<T> rounded[batch_blocks];
    round_floats(T, values, rounded, count);
    for (unsigned i = 0; i < count; ++i)
      if (m0 + i >= b && m0 + i < e) out[m0 + i] = rounded[i];
  }
}

// Transposed job, memory [cols, rows]: the memory elements in [b, e) of memory rows c0 .. c0 + n - 1
// (c0 a multiple of n, cols a multiple of n), for logical rows r in [r0, r1). The block of logical
// (r, c0 .. c0 + n - 1) feeds one element of each of the n memory rows, so every block is drawn once;
// batch_blocks logical rows at a time, so each memory row gets a run of consecutive elements.
template <DType T, FillKind K>
inline void fill_transposed_tile(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1,
                                 std::uint64_t b, std::uint64_t e, const FillTables& tab) {
  const rng::KeySchedule ks = rng::key_schedule(j.key);
#if defined(LAYERINIT_FILL_HOST_AVX512)
  avx512::tile_rows<T, K>(j, tab, ks, c0, r0, r1, b, e);
#else
  for (std::uint64_t r = r0; r < r1; r += batch_blocks)
    tile_rows_portable<T, K>(j, tab, ks, c0, r, static_cast<unsigned>(std::min<std::uint64_t>(batch_blocks, r1 - r)), b, e);
#endif
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
