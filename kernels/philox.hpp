// Philox4x32-10 for host and device from one header, and the key/counter layout of layerinit.
//
// Where CUDA is available, host code includes cuRAND's own curand_philox4x32_x.h with QUALIFIERS
// widened to __host__ __device__ (its mulhilo32 has a host branch), so host and device run the same
// rounds. Without the toolkit, Random123's philox4x32_R(10, ...) is used: cuRAND's generator is that
// algorithm, and both pass the Random123 known-answer vectors (tests/test_philox.cpp).
// Include this header before any other cuRAND header in a translation unit.
#pragma once

#include <cstdint>
#include <string_view>

#include <layerinit/core/hd.hpp>
#include <layerinit/config.hpp>

#if defined(LAYERINIT_PHILOX_CURAND)
#include <vector_types.h>
#if !defined(QUALIFIERS)
#if defined(__CUDACC__)
#define QUALIFIERS static __forceinline__ __host__ __device__
#else
#define QUALIFIERS static inline
#endif
#define LAYERINIT_DEFINED_QUALIFIERS
#endif
#include <curand_philox4x32_x.h>
#if defined(LAYERINIT_DEFINED_QUALIFIERS)
#undef QUALIFIERS
#undef LAYERINIT_DEFINED_QUALIFIERS
#endif
#else
#include <Random123/philox.h>
#endif

namespace layerinit::rng {

struct Block {
  std::uint32_t w[4];
};

// One Philox4x32-10 block: counter words (c0..c3), key words (k0, k1).
LAYERINIT_HD Block philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                          std::uint32_t k0, std::uint32_t k1) {
#if defined(LAYERINIT_PHILOX_CURAND)
  uint4 c;
  c.x = c0; c.y = c1; c.z = c2; c.w = c3;
  uint2 k;
  k.x = k0; k.y = k1;
  uint4 r = curand_Philox4x32_10(c, k);
  return Block{{r.x, r.y, r.z, r.w}};
#else
  r123::Philox4x32::ctr_type c = {{c0, c1, c2, c3}};
  r123::Philox4x32::key_type k = {{k0, k1}};
  auto r = philox4x32_R(10, c, k);
  return Block{{r.v[0], r.v[1], r.v[2], r.v[3]}};
#endif
}

// The bits for group g (elements 4g..4g+3) of the tensor whose Philox key is `key`.
LAYERINIT_HD Block group_bits(std::uint64_t key, std::uint64_t g) {
  return philox4x32_10(static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32), 0u, 0u,
                       static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
}

// The round keys of a Philox4x32-10 key: the key, bumped by the Weyl constants before each later
// round. Computed once per tensor, so store loops hold them in registers instead of re-adding the
// constants in every block (18 of the ~60 instructions of a block).
struct KeySchedule {
  std::uint32_t k0[10];
  std::uint32_t k1[10];
};

LAYERINIT_HD KeySchedule key_schedule(std::uint64_t key) {
  KeySchedule ks;
  std::uint32_t a = static_cast<std::uint32_t>(key), b = static_cast<std::uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    ks.k0[r] = a;
    ks.k1[r] = b;
    a += 0x9E3779B9u;  // PHILOX_W32_0, PHILOX_W32_1 in both cuRAND and Random123
    b += 0xBB67AE85u;
  }
  return ks;
}

// Makes the schedule's words opaque to the device compiler, so a store loop holds all twenty in
// registers instead of re-deriving each from the key in every block (nvcc rematerializes key + c).
// No effect on values, and none on the host.
LAYERINIT_HD void pin_in_registers(KeySchedule& ks) {
#if defined(__CUDA_ARCH__)
  for (int r = 0; r < 10; ++r) {
    asm volatile("" : "+r"(ks.k0[r]));
    asm volatile("" : "+r"(ks.k1[r]));
  }
#else
  (void)ks;
#endif
}

// group_bits(key, g) from the key's schedule: the same ten rounds (the library's own round function),
// bit for bit.
LAYERINIT_HD Block group_bits(const KeySchedule& ks, std::uint64_t g) {
#if defined(LAYERINIT_PHILOX_CURAND)
  uint4 c;
  c.x = static_cast<std::uint32_t>(g); c.y = static_cast<std::uint32_t>(g >> 32); c.z = 0u; c.w = 0u;
  LAYERINIT_UNROLL
  for (int r = 0; r < 10; ++r) {
    uint2 k;
    k.x = ks.k0[r]; k.y = ks.k1[r];
    c = _philox4x32round(c, k);
  }
  return Block{{c.x, c.y, c.z, c.w}};
#else
  r123array4x32 c = {{static_cast<std::uint32_t>(g), static_cast<std::uint32_t>(g >> 32), 0u, 0u}};
  LAYERINIT_UNROLL
  for (int r = 0; r < 10; ++r) {
    const r123array2x32 k = {{ks.k0[r], ks.k1[r]}};
    c = _philox4x32round(c, k);
  }
  return Block{{c.v[0], c.v[1], c.v[2], c.v[3]}};
#endif
}

// SplitMix64's finalizer: a bijection on 64 bits with full avalanche.
LAYERINIT_HD std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Philox key of a tensor: key = mix64(seed ^ mix64(tensor_key + golden)). Part of the value contract.
LAYERINIT_HD std::uint64_t philox_key(std::uint64_t seed, std::uint64_t tensor_key) {
  return mix64(seed ^ mix64(tensor_key + 0x9e3779b97f4a7c15ull));
}

// FNV-1a 64 of raw bytes: the name hash below. (Reports hash tensor contents with XXH3-64,
// backends/content_hash.hpp.)
constexpr std::uint64_t fnv1a64_init = 0xcbf29ce484222325ull;
inline std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = fnv1a64_init) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// The tensor key: FNV-1a 64 of the canonical name, e.g. "model.layers.3.self_attn.q_proj.weight".
inline std::uint64_t tensor_key(std::string_view canonical_name) {
  return fnv1a64(canonical_name.data(), canonical_name.size());
}

}  // namespace layerinit::rng
