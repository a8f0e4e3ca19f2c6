// The host fill's batches in AVX-512 (x86-64-v4: F, BW, CD, DQ, VL), included only by
// fill_host_isa_x86_64_v4.cpp. The portable batches in fill_host_loops.hpp are the reference: these
// compute the same values with the same operations, lane by lane (tests/test_fill.cpp compares both
// with element_at bitwise). Intrinsics, because GCC vectorizes the portable Philox with 64-bit
// multiplies (vpmullq, three uops) and emits no gathers for the table reads.
//
// A batch is 16 Philox blocks, block i in lane i:
// - Philox keeps each 32-bit word in a 64-bit lane (blocks 0-7 in one register, 8-15 in another),
//   so one vpmuludq gives both halves of a product; the upper halves of lanes carry garbage that
//   vpmuludq ignores and the final vpermt2d drops.
// - The transform runs on 16 lanes of one word (fp32) or one half-word (fp16/bf16) of every block:
//   structure of arrays, so a gather reads the table for 16 elements.
// - Contiguous memory wants the blocks one after the other: packed half-words, then a 4 x 16
//   transpose of 32-bit words (eight vpermt2d). A transposed tile's memory rows want the lanes as they are.
#pragma once

// GCC 12 warns that the intrinsics' own _mm512_undefined_* pass-through operands may be used
// uninitialized (GCC bug 105593, fixed in 13); the warning takes the state at the intrinsic's line.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cstdint>

#include <layerinit/dtypes/convert.hpp>
#include <layerinit/kernels/fill_element.hpp>
#include <layerinit/kernels/philox.hpp>
#include <layerinit/kernels/quantile.hpp>

#define LAYERINIT_FILL_HOST_AVX512 1

namespace layerinit {
namespace {
namespace avx512 {

constexpr unsigned lanes = 16;

inline __m512i u32(std::uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }

// Philox4x32-10 of the blocks with 64-bit counters ga (lanes 0-7: blocks 0-7) and gb (blocks 8-15):
// w[q] lane i = word q of block i. The rounds of rng::group_bits: hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0.
inline void philox16(const rng::KeySchedule& ks, __m512i ga, __m512i gb, __m512i (&w)[4]) {
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
  __m512i a0 = ga, a1 = _mm512_srli_epi64(ga, 32), a2 = _mm512_setzero_si512(), a3 = a2;
  __m512i b0 = gb, b1 = _mm512_srli_epi64(gb, 32), b2 = a2, b3 = a2;
#pragma GCC unroll 10
  for (int r = 0; r < 10; ++r) {
    // Bitwise ops do not care about lane width: 32-bit broadcasts of the round keys let the compiler
    // read them from memory instead of holding 20 registers.
    const __m512i k0 = u32(ks.k0[r]), k1 = u32(ks.k1[r]);
    const __m512i pa0 = _mm512_mul_epu32(a0, m0), pa1 = _mm512_mul_epu32(a2, m1);
    const __m512i pb0 = _mm512_mul_epu32(b0, m0), pb1 = _mm512_mul_epu32(b2, m1);
    a0 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(pa1, 32), a1, k0, 0x96);  // xor of three
    a2 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(pa0, 32), a3, k1, 0x96);
    b0 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(pb1, 32), b1, k0, 0x96);
    b2 = _mm512_ternarylogic_epi32(_mm512_srli_epi64(pb0, 32), b3, k1, 0x96);
    a1 = pa1;
    a3 = pa0;
    b1 = pb1;
    b3 = pb0;
  }
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  w[0] = _mm512_permutex2var_epi32(a0, even, b0);
  w[1] = _mm512_permutex2var_epi32(a1, even, b1);
  w[2] = _mm512_permutex2var_epi32(a2, even, b2);
  w[3] = _mm512_permutex2var_epi32(a3, even, b3);
}

// A fill's constants in registers.
struct Consts {
  __m512 scale, shift, lo, hi;
  __m512i p_lo, span;  // span: its low word in 64-bit lanes
  // fp32 trunc_normal's position64_centered, in 64-bit lanes: the span's high word, its half's low
  // word and the per-job addend.
  __m512i span_hi, half_lo, base;
  const float* node16;
  const quantile::CubicRow* cubic;
};

inline Consts consts(const FillParams& p, const FillTables& tab) {
  const auto q = [](std::uint64_t x) { return _mm512_set1_epi64(static_cast<long long>(x)); };
  return {_mm512_set1_ps(p.scale), _mm512_set1_ps(p.shift), _mm512_set1_ps(p.lo), _mm512_set1_ps(p.hi),
          u32(static_cast<std::uint32_t>(p.p_lo)), q(static_cast<std::uint32_t>(p.span)),
          q(p.span >> 32), q(static_cast<std::uint32_t>(p.span >> 1)),
          q(p.p_lo - (std::uint64_t{1} << 63) + (p.span >> 33)),
          tab.node16, tab.cubic};
}

inline __m512 gather(const float* base, __m512i index) { return _mm512_i32gather_ps(index, base, 4); }

// transforms::clamp: hi < x ? hi : x, then x < lo ? lo : x (vminps/vmaxps return their second
// operand unless the comparison holds, which keeps the order of equal zeros).
inline __m512 clamp(__m512 x, __m512 lo, __m512 hi) { return _mm512_max_ps(lo, _mm512_min_ps(hi, x)); }

// half_value<K> of the 16 codes in one half of each word: the low halves (High false) or the high.
template <FillKind K, bool High>
inline __m512 half_values(const Consts& c, __m512i word) {
  const __m512i sign = u32(0x80000000u);
  if constexpr (K == FillKind::normal) {
    // node16(nodes, code) is quantile::normal_node16(nodes + 1, code): the upper half (bit 15 set)
    // reads entry (code & 0x7fff) + 1, the lower half entry 32768 - code negated, and 32767 - code is
    // the low 15 bits flipped. up: all ones for the upper half, from bit 15 of the code.
    const __m512i up = _mm512_srai_epi32(High ? word : _mm512_slli_epi32(word, 16), 31);
    const __m512i bits = High ? _mm512_srli_epi32(word, 16) : word;
    const __m512i index = _mm512_ternarylogic_epi32(bits, up, u32(0x7fff), 0x82);  // ~(bits ^ up) & 0x7fff
    const __m512i h = _mm512_castps_si512(gather(c.node16 + 1, index));
    const __m512 z = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(h, up, sign, 0xd2));  // h ^ (~up & sign)
    return _mm512_fmadd_ps(c.scale, z, c.shift);
  } else if constexpr (K == FillKind::trunc_normal) {
    const __m512i code = High ? _mm512_srli_epi32(word, 16) : _mm512_and_si512(word, u32(0xffff));
    // position16(): p_lo + the high half of span * ((code << 16) | 0x8000), even and odd lanes apart.
    const __m512i x = _mm512_or_si512(_mm512_slli_epi32(code, 16), u32(0x8000));
    const __m512i even = _mm512_mul_epu32(x, c.span), odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), c.span);
    const __m512i pos = _mm512_add_epi32(c.p_lo, _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd));
    // node16_at(): the upper half as it is, the lower mirrored; linear between nodes k - 1 and k.
    const __mmask16 up = _mm512_cmpge_epu32_mask(pos, u32(node16_middle_position));
    const __m512i q = _mm512_mask_blend_epi32(up, _mm512_sub_epi32(u32(node16_last_position), pos), pos);
    const __m512i k = _mm512_sub_epi32(_mm512_srli_epi32(q, 16), u32(32767));
    const __m512 t0 = gather(c.node16, k), t1 = gather(c.node16 + 1, k);
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, u32(0xffff))), _mm512_set1_ps(0x1p-16f));
    const __m512i zb = _mm512_castps_si512(_mm512_fmadd_ps(f, _mm512_sub_ps(t1, t0), t0));
    const __m512 z = _mm512_castsi512_ps(_mm512_mask_xor_epi32(zb, static_cast<__mmask16>(~up), zb, sign));
    return _mm512_fmadd_ps(c.scale, z, c.shift);
  } else {
    static_assert(K == FillKind::uniform);
    const __m512i code = High ? _mm512_srli_epi32(word, 16) : _mm512_and_si512(word, u32(0xffff));
    const __m512 u = _mm512_fmadd_ps(_mm512_cvtepi32_ps(code), _mm512_set1_ps(0x1p-16f), _mm512_set1_ps(0x1p-17f));
    return clamp(_mm512_fmadd_ps(c.scale, u, c.shift), c.lo, c.hi);
  }
}

// The cubic's row and t's 23 bits (16 lanes) of fp32 trunc_normal's positions for 8 draws in 64-bit
// lanes, and each position's sign bit (bit 31): position64_centered, then normal_quantile_centered's
// fold, octave (vplzcntq) and segment, lane by lane in the scalar code's integer operations.
struct CenteredRows {
  __m256i row, t_bits, sign;
};
inline CenteredRows centered_rows(const Consts& c, __m512i bits) {
  const __m512i low = _mm512_srli_epi64(_mm512_add_epi64(_mm512_mul_epu32(bits, c.span), c.half_lo), 32);
  const __m512i pos = _mm512_add_epi64(_mm512_add_epi64(_mm512_mul_epu32(bits, c.span_hi), c.base), low);
  const __m512i hi = _mm512_srli_epi64(pos, 32);
  const __m512i u = _mm512_and_si512(_mm512_add_epi64(hi, _mm512_set1_epi64(0x40000000)), _mm512_set1_epi64(0xffffffff));
  // nn: all ones where bit 31 of hi ^ u is set (x = -c), else 0.
  const __m512i nn = _mm512_srai_epi64(_mm512_slli_epi64(_mm512_xor_si512(hi, u), 32), 63);
  const __m512i x = _mm512_and_si512(_mm512_xor_si512(_mm512_add_epi64(pos, nn), nn), _mm512_set1_epi64(0x7fffffffffffffff));
  const __mmask8 tail = _mm512_test_epi64_mask(u, _mm512_set1_epi64(0x80000000));
  const __m512i base = _mm512_mask_blend_epi64(tail, _mm512_set1_epi64(quantile::kCenterPointRow), _mm512_set1_epi64(quantile::kCubicRows));
  const __m512i lz = _mm512_lzcnt_epi64(x);
  const __m512i xn = _mm512_sllv_epi64(x, _mm512_and_si512(lz, _mm512_set1_epi64(63)));
  const __m512i row = _mm512_add_epi64(_mm512_sub_epi64(base, _mm512_slli_epi64(lz, 4)), _mm512_srli_epi64(xn, 59));
  const __m512i t_bits = _mm512_and_si512(_mm512_srli_epi64(xn, 36), _mm512_set1_epi64(0x7fffff));
  return {_mm512_cvtepi64_epi32(row), _mm512_cvtepi64_epi32(t_bits),
          _mm512_cvtepi64_epi32(_mm512_and_si512(hi, _mm512_set1_epi64(0x80000000)))};
}

// The cubic of rows `row` at t = t_bits / 2^23 (16 lanes): quantile::cubic of local_t.
inline __m512 cubic16(const Consts& c, __m512i row, __m512i t_bits) {
  const __m512 t = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_or_si512(t_bits, u32(0x3f800000))), _mm512_set1_ps(1.0f));
  const __m512i at = _mm512_slli_epi32(row, 2);  // rows are 4 floats
  const float* C = &c.cubic[0].c0;
  const __m512 c0 = gather(C, at), c1 = gather(C + 1, at), c2 = gather(C + 2, at), c3 = gather(C + 3, at);
  return _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_fmadd_ps(c3, t, c2), t, c1), t, c0);
}

// f32_value<K> of 16 draws.
template <FillKind K>
inline __m512 f32_values(const Consts& c, __m512i bits) {
  if constexpr (K == FillKind::normal) {
    // quantile::normal_quantile32, lane by lane: vplzcntd for the octave, four gathers for the row.
    const __m512i upper = _mm512_srai_epi32(bits, 31);
    const __m512i h2 = _mm512_slli_epi32(_mm512_xor_si512(bits, upper), 1);
    const __mmask16 center = _mm512_movepi32_mask(h2);
    const __m512i x = _mm512_ternarylogic_epi32(h2, _mm512_srai_epi32(h2, 31), u32(1), 0xbe);  // (h2 ^ center) | 1
    const __m512i lz = _mm512_lzcnt_epi32(x);
    const __m512i xn = _mm512_sllv_epi32(x, lz);
    const __m512i base = _mm512_mask_blend_epi32(center, u32(quantile::kCubicRows - 16), u32(quantile::kCenterPointRow - 16));
    const __m512i row = _mm512_add_epi32(_mm512_sub_epi32(base, _mm512_slli_epi32(lz, 4)), _mm512_srli_epi32(xn, 27));
    const __m512 m = cubic16(c, row, _mm512_and_si512(_mm512_srli_epi32(xn, 4), u32(0x7fffff)));
    const __m512 z = _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(m), _mm512_andnot_si512(upper, u32(0x80000000u))));
    return _mm512_fmadd_ps(c.scale, z, c.shift);
  } else if constexpr (K == FillKind::uniform) {
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(bits, 8)), _mm512_set1_ps(0x1p-24f));
    return clamp(_mm512_fmadd_ps(c.scale, u, c.shift), c.lo, c.hi);
  } else {
    static_assert(K == FillKind::trunc_normal);
    // 64-bit positions: draws 0-7 and 8-15 in 64-bit lanes, then the cubic over all 16.
    const CenteredRows a = centered_rows(c, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(bits)));
    const CenteredRows b = centered_rows(c, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(bits, 1)));
    const auto join = [](__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); };
    const __m512 m = cubic16(c, join(a.row, b.row), join(a.t_bits, b.t_bits));
    const __m512 z = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(m), join(a.sign, b.sign)));
    return _mm512_fmadd_ps(c.scale, z, c.shift);
  }
}

// bf16 rounding as Eigen's float_to_bfloat16_rtne: u + 0x7fff + bit 16 of u, the result in the
// upper half. Its NaN case is left out: the values are fmas of finite fill constants and finite
// table entries (at worst an infinity), never NaN.
inline __m512i bf16_upper(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  return _mm512_add_epi32(_mm512_add_epi32(u, u32(0x7fff)), _mm512_and_si512(_mm512_srli_epi32(u, 16), u32(1)));
}

// 16 values rounded to nearest even in T, as 16-bit patterns.
template <DType T>
inline __m256i round16(__m512 v) {
  if constexpr (T == DType::f16) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_upper(v), 16));
  }
}

// Two sets of 16 values rounded in T and packed: lane i = lo[i] | hi[i] << 16.
template <DType T>
inline __m512i round_pair(__m512 lo, __m512 hi) {
  if constexpr (T == DType::f16) {
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(round16<T>(lo)), round16<T>(hi), 1);
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                                21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(interleave, both);
  } else {
    return _mm512_ternarylogic_epi32(bf16_upper(hi), u32(0xffff0000u), _mm512_srli_epi32(bf16_upper(lo), 16), 0xea);
  }
}

// Element k (< elements_per_block(T)) of the 16 blocks, as floats (fp16/bf16: before rounding).
template <DType T, FillKind K>
inline __m512 element_values(const Consts& c, const __m512i (&w)[4], unsigned k) {
  if constexpr (T == DType::f32) {
    return f32_values<K>(c, w[k]);
  } else {
    return k % 2 ? half_values<K, true>(c, w[k / 2]) : half_values<K, false>(c, w[k / 2]);
  }
}

// Stores p[q] lane i at dst[4 i + q] (64 words): blocks one after the other. Two rounds of
// two-source permutes: words 0 and 1 of blocks 0-7 and 8-15 interleaved, likewise words 2 and 3, then
// four blocks' pairs from each.
inline void store_transposed(void* dst, const __m512i (&p)[4]) {
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512i a0 = _mm512_permutex2var_epi32(p[0], lo, p[1]), a1 = _mm512_permutex2var_epi32(p[0], hi, p[1]);
  const __m512i b0 = _mm512_permutex2var_epi32(p[2], lo, p[3]), b1 = _mm512_permutex2var_epi32(p[2], hi, p[3]);
  // Block t of a register pair: words 2t, 2t + 1 of a, then of b.
  const __m512i first = _mm512_set_epi32(23, 22, 7, 6, 21, 20, 5, 4, 19, 18, 3, 2, 17, 16, 1, 0);
  const __m512i second = _mm512_set_epi32(31, 30, 15, 14, 29, 28, 13, 12, 27, 26, 11, 10, 25, 24, 9, 8);
  auto* out = static_cast<__m512i*>(dst);
  _mm512_storeu_si512(out + 0, _mm512_permutex2var_epi32(a0, first, b0));
  _mm512_storeu_si512(out + 1, _mm512_permutex2var_epi32(a0, second, b0));
  _mm512_storeu_si512(out + 2, _mm512_permutex2var_epi32(a1, first, b1));
  _mm512_storeu_si512(out + 3, _mm512_permutex2var_epi32(a1, second, b1));
}

// As contiguous_batches_portable: memory elements [m, e), both multiples of 16 blocks.
template <DType T, FillKind K>
inline void contiguous_batches(const FillParams& p, const FillTables& tab, const rng::KeySchedule& ks, storage_t<T>* out,
                               std::uint64_t m, std::uint64_t e) {
  constexpr std::uint64_t n = elements_per_block(T), per_batch = lanes * n;
  const Consts c = consts(p, tab);
  const __m512i step = _mm512_set1_epi64(lanes);
  __m512i ga = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(m / n)), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
  __m512i gb = _mm512_add_epi64(ga, _mm512_set1_epi64(8));
  for (; m < e; m += per_batch, ga = _mm512_add_epi64(ga, step), gb = _mm512_add_epi64(gb, step)) {
    __m512i w[4];
    philox16(ks, ga, gb, w);
    __m512i words[4];  // word q of each block's output
    for (unsigned q = 0; q < 4; ++q) {
      if constexpr (T == DType::f32) {
        words[q] = _mm512_castps_si512(f32_values<K>(c, w[q]));
      } else {
        words[q] = round_pair<T>(half_values<K, false>(c, w[q]), half_values<K, true>(c, w[q]));
      }
    }
    store_transposed(out + m, words);
  }
}

// As tile_rows_portable over logical rows [r0, r1), 16 at a time: element q of the 16 rows' blocks
// is a run of memory row c0 + q, stored under a mask of the lanes in [b, e).
template <DType T, FillKind K>
inline void tile_rows(const FillJob& j, const FillTables& tab, const rng::KeySchedule& ks, std::uint64_t c0,
                      std::uint64_t r0, std::uint64_t r1, std::uint64_t b, std::uint64_t e) {
  constexpr unsigned n = elements_per_block(T);
  auto* out = static_cast<storage_t<T>*>(j.dst) - j.begin;
  const Consts c = consts(j.params, tab);
  const auto per_row = static_cast<long long>(j.cols / n);  // blocks per logical row
  const __m512i stride_a = _mm512_mullo_epi64(_mm512_set1_epi64(per_row), _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
  const __m512i stride_b = _mm512_add_epi64(stride_a, _mm512_set1_epi64(8 * per_row));
  for (std::uint64_t r = r0; r < r1; r += lanes) {
    const std::uint64_t count = std::min<std::uint64_t>(lanes, r1 - r);
    const __m512i g = _mm512_set1_epi64(static_cast<long long>(r * j.cols / n + c0 / n));
    __m512i w[4];
    philox16(ks, _mm512_add_epi64(g, stride_a), _mm512_add_epi64(g, stride_b), w);
    for (unsigned q = 0; q < n; ++q) {
      const std::uint64_t m0 = (c0 + q) * j.rows + r;  // memory element of row r
      const std::uint64_t lo = b > m0 ? std::min<std::uint64_t>(b - m0, lanes) : 0;
      const std::uint64_t hi = std::min(count, e > m0 ? e - m0 : 0);
      if (lo >= hi) continue;
      const auto mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
      const __m512 v = element_values<T, K>(c, w, q);
      if constexpr (T == DType::f32) {
        _mm512_mask_storeu_ps(out + m0, mask, v);
      } else {
        _mm256_mask_storeu_epi16(out + m0, mask, round16<T>(v));
      }
    }
  }
}

}  // namespace avx512
}  // namespace
}  // namespace layerinit
