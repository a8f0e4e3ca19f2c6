#include <layerinit/dtypes/round.hpp>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <Eigen/Core>

namespace layerinit {

namespace {

#if defined(__x86_64__)
// Eigen 3.4 converts float to half one element at a time with integer bit tricks; the F16C
// instruction does 8 at once with the same rounding (tests/test_dtypes.cpp compares both paths on
// every half pattern's neighbourhood).
__attribute__((target("avx,f16c"))) void f16_f16c(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; k < n; ++k) out[k] = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(in[k]));
}
#endif

void f16_eigen(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) out[k] = Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(in[k]));
}

// Eigen's bfloat16 rounding is integer arithmetic that GCC vectorizes; on x86-64 the AVX2 clone does 8
// at once. Elsewhere (aarch64: NEON is in the baseline) the one portable loop, the same integer steps.
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
void bf16_eigen(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) out[k] = Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(in[k]));
}

using f16_fn = void (*)(const float*, std::uint16_t*, std::size_t);
f16_fn f16_path() {
#if defined(__x86_64__)
  static const f16_fn path = [] {
    __builtin_cpu_init();  // may run before the constructors that would initialize the CPU model
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c") ? f16_f16c : f16_eigen;
  }();
  return path;
#else
  // Eigen's integer rounding: without -march flags that add FP16 arithmetic (armv8.2-a+fp16) Eigen
  // uses no __fp16 on aarch64, so this is the same code and the same bits as on x86-64 without F16C.
  return f16_eigen;
#endif
}

}  // namespace

void round_floats(DType t, const float* in, void* out, std::size_t n) {
  switch (t) {
    case DType::f32: std::memcpy(out, in, n * sizeof(float)); break;
    case DType::f16: f16_path()(in, static_cast<std::uint16_t*>(out), n); break;
    case DType::bf16: bf16_eigen(in, static_cast<std::uint16_t*>(out), n); break;
  }
}

}  // namespace layerinit
