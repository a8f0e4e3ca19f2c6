// Helpers of the GPU tests: skip without a usable GPU, and compare GPU fills with the host fill byte for
// byte, guard bytes around every job included.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/cuda_backend.hpp>

#define LAYERINIT_SKIP_WITHOUT_GPU()                                    \
  do {                                                                  \
    const ::layerinit::CudaProbe layerinit_probe_ = ::layerinit::cuda_probe(); \
    if (!layerinit_probe_.usable) GTEST_SKIP() << layerinit_probe_.why; \
  } while (0)

namespace layerinit::testing {

constexpr unsigned char guard_byte = 0xA5;
constexpr std::size_t guard_bytes = 64;

// Where a job's memory sits in the test buffer: `byte_offset` bytes after a 256-byte aligned slot start
// (so the 16-byte alignment of dst is chosen by the test), surrounded by guard bytes.
struct Placed {
  FillJob job;                  // dst ignored
  std::size_t byte_offset = 0;  // within its slot, a multiple of the element size
};

struct BufferLayout {
  std::vector<std::size_t> pos;  // byte position of each job's dst in the buffer
  std::size_t bytes = 0;
};

inline std::size_t job_bytes(const FillJob& j) { return job_elements(j) * dtype_size(j.dtype); }

inline BufferLayout layout_of(const std::vector<Placed>& jobs) {
  BufferLayout l;
  std::size_t p = 0;
  for (const Placed& pj : jobs) {
    p += guard_bytes;
    p = (p + 255) / 256 * 256;
    l.pos.push_back(p + pj.byte_offset);
    p += pj.byte_offset + job_bytes(pj.job) + guard_bytes;
  }
  l.bytes = p + guard_bytes;
  return l;
}

// Fills `gpu_jobs` on the GPU and `host_jobs` on the host, each into a buffer of `bytes` pre-filled with
// guard bytes, at the byte positions given, and returns the number of differing bytes (printing the
// first few). The two job lists may differ (e.g. one job on the host, its pieces on the GPU).
inline std::size_t compare_buffers(backend& b, std::size_t bytes, const std::vector<FillJob>& gpu_jobs,
                                   const std::vector<std::size_t>& gpu_pos, const std::vector<FillJob>& host_jobs,
                                   const std::vector<std::size_t>& host_pos) {
  std::vector<unsigned char> expect(bytes, guard_byte);
  std::vector<FillJob> h = host_jobs;
  for (std::size_t k = 0; k < h.size(); ++k) h[k].dst = expect.data() + host_pos[k];
  fill_host(h, 0);

  Storage dev = Storage::allocate(b.memory(), bytes, {});
  b.synchronize();  // the allocation is stream-ordered: let it complete before another stream writes
  EXPECT_EQ(cudaMemset(dev.data(), guard_byte, bytes), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // cudaMemset runs on the legacy stream
  std::vector<FillJob> g = gpu_jobs;
  for (std::size_t k = 0; k < g.size(); ++k) g[k].dst = static_cast<unsigned char*>(dev.data()) + gpu_pos[k];
  b.fill(g);
  std::vector<unsigned char> got(bytes, 0);
  b.copy_to_host(got.data(), dev.data(), bytes);

  std::size_t bad = 0;
  for (std::size_t i = 0; i < bytes; ++i) {
    if (got[i] == expect[i]) continue;
    if (bad < 8) ADD_FAILURE() << "byte " << i << ": gpu 0x" << std::hex << int(got[i]) << " host 0x" << int(expect[i]) << std::dec;
    ++bad;
  }
  return bad;
}

// Each job at its own placement; the same jobs on both sides.
inline std::size_t compare_with_host(backend& b, const std::vector<Placed>& jobs) {
  const BufferLayout l = layout_of(jobs);
  std::vector<FillJob> js;
  for (const Placed& p : jobs) js.push_back(p.job);
  return compare_buffers(b, l.bytes, js, l.pos, js, l.pos);
}

}  // namespace layerinit::testing
