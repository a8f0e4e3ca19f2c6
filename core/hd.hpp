// LAYERINIT_HD marks code compiled for both the host and the device: the one definition of every value.
#pragma once
#if defined(__CUDACC__)
#define LAYERINIT_HD __host__ __device__ __forceinline__
#else
// Forced inline on the host too: the host fill loops only vectorize when the whole per-element
// chain (Philox, transform, clamp) is inlined into them.
#define LAYERINIT_HD inline __attribute__((always_inline))
#endif

// Unrolls the loop that follows on the device (nvcc's #pragma unroll); the host compiler decides alone.
#if defined(__CUDACC__)
#define LAYERINIT_UNROLL _Pragma("unroll")
#else
#define LAYERINIT_UNROLL
#endif
