// Kernels with known answers for `bench/sass/budget --selftest` (compiled for sm_90, never run): they
// check the loop finding, the store grouping, the path logic and the pipe model (a loop at the store
// floor, one bound by the ALU, two by shared-memory wavefronts), so a failing check on the library's
// kernels means the kernels, not the tool.
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

// The pipe model's known answers (bench/sass/budget's "The pipe model").
// Integer pipe: 64 dependent 32-bit rotate-and-xor steps per 16-byte store (funnel shift SHF + LOP3,
// both on the half-rate ALU), no multiply and no float: the loop is bound by the ALU pipe at 2 clocks
// per instruction, and its ALU clocks are 2 x its ALU instructions, at least 2 x 64.
extern "C" __global__ void selftest_alu(uint4* __restrict__ dst, std::uint64_t n, unsigned k) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned a = static_cast<unsigned>(i), b = a ^ k;
#pragma unroll
    for (int r = 0; r < 32; ++r) {
      a = __funnelshift_l(a, a, 7 + (r & 7)) ^ b;
      b = __funnelshift_l(b, b, 13 - (r & 7)) ^ a;
    }
    __stcs(dst + i, make_uint4(a, b, a ^ k, b ^ k));
  }
}

// Shared-memory wavefronts: 16 table loads per 16-byte store at indices from a multiplicative hash
// (random to the model): 16 x E[the fullest of 32 banks, 32 random words] = 16 x 3.53 wavefronts, 4
// SMSP clocks each (one wavefront per clock per SM), 226 clocks: above the store floor's 155, so the
// loop is bound by the LDS wavefronts.
extern "C" __global__ void selftest_lds(uint4* __restrict__ dst, std::uint64_t n) {
  __shared__ unsigned table[1024];
  for (unsigned j = threadIdx.x; j < 1024; j += blockDim.x) table[j] = j * 0x9E3779B9u;
  __syncthreads();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned h = static_cast<unsigned>(i) * 0x9E3779B1u, acc[4] = {0, 0, 0, 0};
#pragma unroll
    for (int r = 0; r < 16; ++r) acc[r & 3] += table[(h >> (r + 6)) & 1023];
    __stcs(dst + i, make_uint4(acc[0], acc[1], acc[2], acc[3]));
  }
}

// 128-bit table rows (the fp32 cubic's LDS.128): 4 loads per store, each 4 quarter-warps x E[the
// fullest of 8 four-bank groups, 8 random rows] = 10.39 wavefronts.
extern "C" __global__ void selftest_lds128(uint4* __restrict__ dst, std::uint64_t n) {
  __shared__ uint4 rows[256];
  for (unsigned j = threadIdx.x; j < 256; j += blockDim.x) rows[j] = make_uint4(j, j + 1, j + 2, j + 3);
  __syncthreads();
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const unsigned h = static_cast<unsigned>(i) * 0x9E3779B1u;
    uint4 v = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const uint4 w = rows[(h >> (8 * r)) & 255];
      v.x += w.x; v.y ^= w.y; v.z += w.z; v.w ^= w.w;
    }
    __stcs(dst + i, v);
  }
}
