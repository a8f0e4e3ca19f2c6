// The host fill's inner loops, compiled once per instruction-set level (fill_host_isa_*.cpp) and
// picked at run time by fill_host.cpp. Private to kernels/: every name here has internal linkage, so
// the copies built with AVX2 or AVX-512 never stand in for the baseline ones. Values never depend on
// the level: contraction is off and every fma is explicit, which is exact on any ISA.
#pragma once

#include <cstdint>

#include <layerinit/dtypes/convert.hpp>
#include <layerinit/dtypes/round.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/philox.hpp>

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
      // Values first, then the whole batch rounded at once (to nearest even, as to_storage does).
      alignas(64) float values[batch];
      for (std::uint64_t k = 0; k < batch; ++k) values[k] = value_of<K>(p, bits[k]);
      round_floats(T, values, dst, batch);
    }
  }
  for (; m < e; ++m) one(m);
}

template <DType T>
inline void fill_span(const FillJob& j, std::uint64_t b, std::uint64_t e) {
  auto* out = static_cast<storage_t<T>*>(j.dst);
  const std::uint64_t base = j.begin;
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

// Memory elements [b, e) of a non-constant job.
inline void fill_range_loops(const FillJob& j, std::uint64_t b, std::uint64_t e) {
  switch (j.dtype) {
    case DType::f32: fill_span<DType::f32>(j, b, e); break;
    case DType::f16: fill_span<DType::f16>(j, b, e); break;
    case DType::bf16: fill_span<DType::bf16>(j, b, e); break;
  }
}

}  // namespace
}  // namespace layerinit
