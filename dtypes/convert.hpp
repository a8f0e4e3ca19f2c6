// Float to dtype storage bits, the same function on host and device.
// nvcc (both passes) converts with cuda_fp16 / cuda_bf16; a host compiler with Eigen::half /
// Eigen::bfloat16. Both round to nearest even, so the bits agree for every finite float
// (tests/test_dtypes.cpp checks Eigen against a bit-level reference).
#pragma once

#include <cstdint>

#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/core/hd.hpp>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace layerinit {

template <DType T> struct storage;
template <> struct storage<DType::f32> { using type = float; };
template <> struct storage<DType::f16> { using type = std::uint16_t; };
template <> struct storage<DType::bf16> { using type = std::uint16_t; };
template <DType T> using storage_t = typename storage<T>::type;

template <DType T> LAYERINIT_HD storage_t<T> to_storage(float v) {
  if constexpr (T == DType::f32) {
    return v;
  } else if constexpr (T == DType::f16) {
#if defined(__CUDACC__)
    return __half_as_ushort(__float2half_rn(v));
#else
    return float_to_f16_bits(v);
#endif
  } else {
#if defined(__CUDACC__)
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#else
    return float_to_bf16_bits(v);
#endif
  }
}

}  // namespace layerinit
