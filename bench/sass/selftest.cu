// Kernels with known answers for `bench/sass/budget --selftest` (compiled for sm_90, never run): they
// check the loop finding, the store grouping, the path logic and that --check passes a loop that is
// within the budget, so a failing check on the library's kernels means the kernels, not the tool.
#include <cstdint>

// The store floor: one 16-byte streaming store per iteration, a few instructions of loop overhead.
extern "C" __global__ void selftest_store_floor(uint4* __restrict__ dst, std::uint64_t n, uint4 v) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    __stcs(dst + i, v);
}

// One 16-byte vector written as four 32-bit stores.
extern "C" __global__ void selftest_split(std::uint32_t* __restrict__ dst, std::uint64_t n, std::uint32_t v) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    volatile std::uint32_t* p = dst + 4 * i;
    p[0] = v;
    p[1] = v ^ 1u;
    p[2] = v ^ 2u;
    p[3] = v ^ 3u;
  }
}

// Each iteration stores either 16 bytes or 2 bytes, never both: bytes per iteration is 16, not 18.
extern "C" __global__ void selftest_two_paths(uint4* __restrict__ vec, std::uint16_t* __restrict__ scalar,
                                              const std::uint8_t* __restrict__ which, std::uint64_t n, uint4 v) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (which[i]) {
      __stcs(vec + i, v);
    } else {
      scalar[i] = static_cast<std::uint16_t>(v.x);
    }
  }
}

// No loop: one store per thread; the whole function counts as one iteration.
extern "C" __global__ void selftest_no_loop(uint4* __restrict__ dst, std::uint64_t n, uint4 v) {
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) __stcs(dst + i, v);
}

// A run-time switch on a byte at offset 0x30 of a job (where JobSlot keeps the fill kind): under the
// assumption kind = 1 the paths through the store are the long ones, under kind = 3 the short ones.
struct SelftestJob {
  unsigned char pad[0x30];
  unsigned char kind;
};
extern "C" __global__ void selftest_switch(const SelftestJob* __restrict__ job, uint4* __restrict__ dst, std::uint64_t n,
                                           float x) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float y = x + static_cast<float>(i);
    if (job->kind == 1) {
#pragma unroll
      for (int k = 0; k < 24; ++k) y = __fmaf_rn(y, y, 0.25f * k);
    } else if (job->kind == 3) {
      y = y * 3.0f;
    }
    const unsigned u = __float_as_uint(y);
    __stcs(dst + i, make_uint4(u, u + 1, u + 2, u + 3));
  }
}
