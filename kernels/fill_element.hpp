// The value of one element: the per-element code every fill loop shares (host loops, CUDA kernels and
// the simulated grid), written once for host and device. Private to kernels/ and the tests: it pulls in
// Philox (cuRAND or Random123) and inline PTX, which no consumer of the installed headers should need.
// The contract it computes is stated in kernels/fill.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include <layerinit/core/hd.hpp>
#include <layerinit/dtypes/convert.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/philox.hpp>
#include <layerinit/kernels/quantile.hpp>
#include <layerinit/kernels/transforms.hpp>

namespace layerinit {

// The tables the transforms read. The host passes its static arrays (host_fill_tables()); the CUDA
// kernels pass their shared-memory copies.
struct FillTables {
  // [node16_entries] The 16-bit quantile nodes from the middle up, one before and one after:
  // [-H0, H0, H1, ..., H32767, H32767] with Hm = quantile::normal_node16_table[m] = Phi^-1((32768.5 + m)
  // / 65536). Entry k + 1 is node 32768 + k; entry 0 (node 32767 = -H0) lets the segment across the
  // middle interpolate like the others, and the repeated last entry keeps the top segment in bounds.
  const float* node16 = nullptr;
  // [quantile::kCubicRowsPadded] quantile::normal_cubic_table and its padding row.
  const quantile::CubicRow* cubic = nullptr;
};
constexpr std::size_t node16_entries = 32770;
FillTables host_fill_tables();

// Elements per Philox block: 8 16-bit codes for fp16/bf16, 4 32-bit words for fp32.
LAYERINIT_HD constexpr unsigned elements_per_block(DType t) { return t == DType::f32 ? 4u : 8u; }

// The random input of element k (k < 8) of a block, for fp16/bf16: half-word k, low half first.
LAYERINIT_HD std::uint32_t code16(const rng::Block& b, unsigned k) {
  return (b.w[k >> 1] >> ((k & 1u) * 16u)) & 0xffffu;
}

// fp16/bf16 normal: node `code` (0..65535), Phi^-1((code + 1/2) / 65536), mirrored from the upper half.
LAYERINIT_HD float node16(const float* nodes, std::uint32_t code) {
  // Written without a branch on the sign (random: a host branch would mispredict half the time).
  const std::uint32_t down = (code >> 15) - 1u;                 // 0 for the upper half, all ones below
  const float h = nodes[((code - 32768u) ^ down) + 1u];         // code - 32767, or 32768 - code
  return transforms::as_float(transforms::as_bits(h) ^ (down & 0x80000000u));
}

// node16 of both codes of a random word w (code lo = w mod 2^16, code hi = w >> 16), for element `hi`
// (0: lo, 1: hi): the same value, with the mirror done once per word. A code's top bit t picks its
// half; t ? 0xffff : 0 for each half at once (one PRMT replicating bits 15 and 31 on the device) turns
// the word into both table offsets with one more logic op: code ^ 0x7fff ^ (t ? 0xffff : 0) is code -
// 32768 above the middle and 32767 - code below, node16's (code - 32768) ^ down. The sign (set below
// the middle) is bit 15 or 31 of ~w.
LAYERINIT_HD float node16_of_word(const float* nodes, std::uint32_t w, unsigned hi) {
#if defined(__CUDA_ARCH__)
  std::uint32_t t;  // bytes: sign(w byte 1) x2, sign(w byte 3) x2
  asm("prmt.b32 %0, %1, 0, 0xbb99;" : "=r"(t) : "r"(w));
#else
  const std::uint32_t t = ((w & 0x8000u) != 0 ? 0xffffu : 0u) | ((w & 0x80000000u) != 0 ? 0xffff0000u : 0u);
#endif
  const std::uint32_t r = w ^ t ^ 0x7fff7fffu;  // both halves' offsets from the middle
  const std::uint32_t off = hi != 0 ? r >> 16 : r & 0xffffu;
  const std::uint32_t sign = (hi != 0 ? ~w : ~w << 16) & 0x80000000u;
  return transforms::as_float(transforms::as_bits(nodes[off + 1u]) ^ sign);
}

// fp16/bf16 trunc_normal positions run over [0, 65535 * 2^16]: node j sits at j * 2^16.
constexpr std::uint32_t node16_last_position = 0xffff0000u;
constexpr std::uint32_t node16_middle_position = 0x7fff8000u;  // between nodes 32767 and 32768: z = 0

// fp16/bf16 trunc_normal: the standard normal value at a position, linear between nodes, computed on
// the upper half and mirrored (odd about the middle, where it is 0). Non-decreasing in the position.
// Written in d = position - node16_middle_position (two's complement, |d| <= 0x7fff8000): the upper
// half's position is middle + |d|, its node pair (b >> 16) - 1, b >> 16 and fraction b mod 2^16 with
// b = |d| + 2^15, and d's sign bit is z's. No predicate lives from the mirror to the sign.
LAYERINIT_HD float node16_at_centered(const float* nodes, std::uint32_t d) {
  const std::uint32_t sign = d & 0x80000000u;
#if defined(__CUDA_ARCH__)
  const std::uint32_t b = static_cast<std::uint32_t>(abs(static_cast<int>(d))) + 0x8000u;  // IABS
#else
  const std::uint32_t b = (sign != 0 ? 0u - d : d) + 0x8000u;
#endif
  const std::uint32_t k = b >> 16;  // 0 .. 32768: entries k, k + 1 are nodes 32767 + k, 32768 + k
  const float t0 = nodes[k], t1 = nodes[k + 1];
  const float z = transforms::fmaf_(static_cast<float>(b & 0xffffu) * 0x1p-16f, t1 - t0, t0);
  return transforms::as_float(transforms::as_bits(z) ^ sign);
}
LAYERINIT_HD float node16_at(const float* nodes, std::uint32_t pos) {
  return node16_at_centered(nodes, pos - node16_middle_position);
}

// fp16/bf16 trunc_normal: position of code (0..65535), the midpoint of its 1/65536 of the span:
// p_lo + floor(span * (code + 1/2) / 65536) = the high word of span * (code << 16) + position16_addend:
// the half (span * 2^15) and p_lo * 2^32 folded into one per-job 64-bit addend. No carry leaves the
// 64 bits: the sum is below (p_lo + span) 2^32 <= 2^64.
LAYERINIT_HD std::uint64_t position16_addend(const FillParams& p) {
  const auto span = static_cast<std::uint32_t>(p.span);
  return ((p.p_lo - node16_middle_position + (span >> 17)) << 32) + static_cast<std::uint32_t>(span << 15);
}
LAYERINIT_HD std::uint32_t position16(const FillParams& p, std::uint32_t code) {
  const auto span = static_cast<std::uint32_t>(p.span);
  const std::uint64_t c = position16_addend(p);
#if defined(__CUDA_ARCH__)
  // One IMAD.HI with a 64-bit addend: ptxas fuses this carry chain (it splits the plain C++ form).
  std::uint32_t hi;
  asm("{\n\t.reg .u32 lo, cl, ch;\n\tmov.b64 {cl, ch}, %3;\n\t"
      "mad.lo.cc.u32 lo, %1, %2, cl;\n\tmadc.hi.u32 %0, %1, %2, ch;\n\t}"
      : "=r"(hi) : "r"(span), "r"(code << 16), "l"(c));
  return hi;
#else
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(span) * (code << 16) + c) >> 32);
#endif
}

// fp32 trunc_normal: position of a 32-bit draw, the midpoint of its 1/2^32 of the span (64-bit
// probability units), minus 2^63: p_lo + floor(span (bits + 1/2) / 2^32) - 2^63, mod 2^64. The
// quotient is floor((span * bits + span / 2) / 2^32) (the dropped half of an odd span cannot cross an
// integer), taken in two 32 x 32 -> 64-bit products: span = sh 2^32 + sl, and sl * bits + (span / 2
// mod 2^32) < 2^64 carries only its high word up.
LAYERINIT_HD std::uint64_t position64_centered(const FillParams& p, std::uint32_t bits) {
  const auto sl = static_cast<std::uint32_t>(p.span), sh = static_cast<std::uint32_t>(p.span >> 32);
  const auto half_lo = static_cast<std::uint32_t>(p.span >> 1);
  const std::uint64_t base = p.p_lo - (std::uint64_t{1} << 63) + (p.span >> 33);  // per job
#if defined(__CUDA_ARCH__)
  // Four instructions: IMAD.HI (the low product's carry word), a 64-bit add, IMAD.WIDE.U32.
  std::uint64_t r;
  asm("{\n\t.reg .u32 t, th, bl, bh;\n\t"
      "mov.b64 {bl, bh}, %5;\n\t"
      "mad.lo.cc.u32 t, %1, %3, %4;\n\tmadc.hi.cc.u32 th, %1, %3, bl;\n\taddc.u32 bh, bh, 0;\n\t"
      "mov.b64 %0, {th, bh};\n\tmad.wide.u32 %0, %2, %3, %0;\n\t}"
      : "=l"(r) : "r"(sl), "r"(sh), "r"(bits), "r"(half_lo), "l"(base));
  return r;
#else
  const auto low = static_cast<std::uint32_t>((static_cast<std::uint64_t>(sl) * bits + half_lo) >> 32);
  return static_cast<std::uint64_t>(sh) * bits + base + low;
#endif
}

// Keeps a job's fill constants in registers through a store loop: without it the GPU compiler may
// reload them from the kernel parameter (one LDC each) and redo their per-job arithmetic every
// iteration. No instruction and no value change; nothing on the host.
LAYERINIT_HD void pin_in_registers(FillParams& p) {
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+f"(p.scale), "+f"(p.shift), "+f"(p.lo), "+f"(p.hi), "+l"(p.p_lo), "+l"(p.span));
#else
  (void)p;
#endif
}

// The float value of an fp16/bf16 element from its 16-bit code, before rounding to the dtype.
template <FillKind K> LAYERINIT_HD float half_value(const FillParams& p, std::uint32_t code, const float* node16) {
  if constexpr (K == FillKind::normal) {
    // The code's own quantile, Phi^-1((code + 1/2) / 65536): one table read.
    return transforms::fmaf_(p.scale, layerinit::node16(node16, code), p.shift);
  } else if constexpr (K == FillKind::trunc_normal) {
    // No clamp: the value is non-decreasing in the position and both ends of the span round inside.
    return transforms::fmaf_(p.scale, node16_at_centered(node16, position16(p, code)), p.shift);
  } else if constexpr (K == FillKind::uniform) {
    // (code + 1/2) / 65536, exact in float.
    const float u = transforms::fmaf_(static_cast<float>(code), 0x1p-16f, 0x1p-17f);
    return transforms::clamp(transforms::fmaf_(p.scale, u, p.shift), p.lo, p.hi);
  } else {
    return p.shift;
  }
}

// The value of an fp32 element from its 32 random bits.
template <FillKind K>
LAYERINIT_HD float f32_value(const FillParams& p, std::uint32_t bits, const quantile::CubicRow* cubic) {
  if constexpr (K == FillKind::normal) {
    return transforms::fmaf_(p.scale, quantile::normal_quantile32(cubic, bits), p.shift);
  } else if constexpr (K == FillKind::trunc_normal) {
    // No clamp: every position lies in the span prepare_fill found, whose values all lie in [a', b'].
    const float z = quantile::normal_quantile_centered(cubic, position64_centered(p, bits));
    return transforms::fmaf_(p.scale, z, p.shift);
  } else if constexpr (K == FillKind::uniform) {
    return transforms::clamp(transforms::fmaf_(p.scale, transforms::unit_01(bits), p.shift), p.lo, p.hi);
  } else {
    return p.shift;
  }
}

// Element k of a block (k < elements_per_block(T)) in storage bits.
template <DType T, FillKind K>
LAYERINIT_HD storage_t<T> block_element(const FillParams& p, const rng::Block& b, unsigned k, const FillTables& tab) {
  if constexpr (T == DType::f32) {
    return f32_value<K>(p, b.w[k], tab.cubic);
  } else {
    if constexpr (K == FillKind::normal)  // half_value<normal>, per word (node16_of_word)
      return to_storage<T>(transforms::fmaf_(p.scale, node16_of_word(tab.node16, b.w[k >> 1], k & 1u), p.shift));
    else
      return to_storage<T>(half_value<K>(p, code16(b, k), tab.node16));
  }
}

template <DType T>
LAYERINIT_HD storage_t<T> block_element(const FillParams& p, const rng::Block& b, unsigned k, const FillTables& tab) {
  switch (p.kind) {
    case FillKind::normal: return block_element<T, FillKind::normal>(p, b, k, tab);
    case FillKind::trunc_normal: return block_element<T, FillKind::trunc_normal>(p, b, k, tab);
    case FillKind::uniform: return block_element<T, FillKind::uniform>(p, b, k, tab);
    case FillKind::constant:
    default: return to_storage<T>(p.shift);
  }
}

// The contract for one element on its own: logical element i of the job's tensor, in storage bits.
// The reference the fast loops are tested against, and the path of heads, tails and odd shapes.
template <DType T>
LAYERINIT_HD storage_t<T> element_at(const FillJob& j, std::uint64_t i, const FillTables& tab) {
  if (j.params.kind == FillKind::constant) return to_storage<T>(j.params.shift);
  constexpr unsigned n = elements_per_block(T);
  const rng::Block b = rng::group_bits(j.key, i / n);
  return block_element<T>(j.params, b, static_cast<unsigned>(i % n), tab);
}

// A transposed job's memory elements [b, e) in the group of n memory rows from c0 (memory [cols, rows]):
// the logical rows [r0, r1) any of the group's rows needs: all of them, unless the group holds only
// the range's first (or last) memory row.
struct RowRange {
  std::uint64_t r0, r1;
};
inline RowRange group_rows(const FillJob& j, std::uint64_t n, std::uint64_t c0, std::uint64_t b, std::uint64_t e) {
  const std::uint64_t c_first = b / j.rows, c_last = (e - 1) / j.rows;
  const std::uint64_t ca = c0 > c_first ? c0 : c_first, cb = c0 + n - 1 < c_last ? c0 + n - 1 : c_last;
  return {ca == c_first && cb == c_first ? b % j.rows : 0, ca == c_last && cb == c_last ? (e - 1) % j.rows + 1 : j.rows};
}

// Logical index of memory element m.
LAYERINIT_HD std::uint64_t logical_index(const FillJob& j, std::uint64_t m) {
  return j.transposed ? (m % j.rows) * j.cols + m / j.rows : m;
}

}  // namespace layerinit
