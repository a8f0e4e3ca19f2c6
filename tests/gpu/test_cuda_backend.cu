// The CUDA backend: probe, copies, the pool resource under the tracker, reserve/commit/release through
// the virtual memory API, and out-of-memory errors. Skips without a usable GPU, except the probe test,
// which checks the reason given when there is none.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_compare.hpp"
#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/caller_queue.hpp>
#include <layerinit/backends/cuda_backend.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/memory/tracking.hpp>

using namespace layerinit;

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;

// Fills `n` bf16 elements at device address dst and checks them against the host fill.
void fill_and_check(backend& b, void* dst, std::uint64_t n, const std::string& name) {
  FillJob j = make_fill_job(dst, DType::bf16, n, 99, name, FillSpec::normal(0.0, 0.02));
  b.fill({&j, 1});
  std::vector<std::uint16_t> got(n), want(n);
  b.copy_to_host(got.data(), dst, n * 2);
  j.dst = want.data();
  fill_host({&j, 1}, 0);
  EXPECT_EQ(got, want) << name;
}
}  // namespace

// Runs on every machine: with a GPU the probe names it, without one it says why.
TEST(CudaProbe, NamesTheDeviceOrSaysWhyNot) {
  const CudaProbe p = cuda_probe();
  if (p.usable) {
    EXPECT_FALSE(p.device_name.empty());
    EXPECT_TRUE(p.why.empty());
    auto b = make_backend("cuda");
    EXPECT_EQ(b->kind(), BackendKind::cuda);
    EXPECT_EQ(b->describe().rfind("cuda:0 ", 0), 0u) << b->describe();
    EXPECT_EQ(b->memory().kind(), MemoryKind::device);
  } else {
    EXPECT_FALSE(p.why.empty());
    EXPECT_THROW(make_backend("cuda"), layerinit::error);
    EXPECT_THROW(make_cuda_backend(), layerinit::error);
    EXPECT_EQ(make_backend("auto")->kind(), BackendKind::host);
    std::cout << "no usable GPU: " << p.why << "\n";
  }
}

// Each device of the node by its index: cuda:0 named explicitly, every other index its own device
// (its own pool and stream, a fill there equal to the host's), and an index past the node refused
// before anything is made.
TEST(CudaBackend, EveryDeviceByIndexAndAMissingOneRefused) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  const int n = cuda_device_count();
  ASSERT_GE(n, 1);
  for (int d = 0; d < n; ++d) {
    auto b = make_backend("cuda:" + std::to_string(d));
    EXPECT_EQ(b->describe().rfind("cuda:" + std::to_string(d) + " ", 0), 0u) << b->describe();
    Storage s = Storage::allocate(b->memory(), 1001 * 2, {});
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, s.data()), cudaSuccess);
    EXPECT_EQ(attr.device, d);
    fill_and_check(*b, s.data(), 1001, "device.index");
  }
  try {
    (void)make_backend("cuda:" + std::to_string(n));
    ADD_FAILURE() << "cuda:" << n << " was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, CopyWithinDeviceAndToHost) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  const std::uint64_t n = 100003;
  Storage a = Storage::allocate(b->memory(), n * 2, {}), c = Storage::allocate(b->memory(), n * 2, {});
  fill_and_check(*b, a.data(), n, "copy.src");
  b->copy(c.data(), a.data(), n * 2);
  std::vector<std::uint16_t> from_a(n), from_c(n);
  b->copy_to_host(from_a.data(), a.data(), n * 2);
  b->copy_to_host(from_c.data(), c.data(), n * 2);
  EXPECT_EQ(from_a, from_c);
}

// The XLA handlers' backend: fills enqueued on the caller's stream, which outlives the backend.
TEST(CudaBackend, OnACallersStreamFillsThereAndLeavesTheStream) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::uint64_t n = 100003;
  void* dst = nullptr;
  ASSERT_EQ(cudaMalloc(&dst, n * 2), cudaSuccess);
  {
    auto b = make_cuda_backend_on_stream(0, stream);
    EXPECT_EQ(cuda_backend_stream(*b), stream);
    fill_and_check(*b, dst, n, "on.stream");
  }
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);  // still the caller's: not destroyed
  EXPECT_EQ(cudaFree(dst), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudaBackend, EmptyAllocationsAreDistinctAndFreeable) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  void* p = b->memory().allocate(0);
  void* q = b->memory().allocate(0);
  EXPECT_NE(p, nullptr);
  EXPECT_NE(p, q);
  b->memory().deallocate(p, 0);
  b->memory().deallocate(q, 0);
  b->synchronize();
}

// The tracker's peak (bytes asked) against the pool's own high-water mark (bytes handed out). Sizes are
// multiples of 2 MiB so the pool has nothing to round.
TEST(CudaBackend, TrackerPeakMatchesPoolHighWaterMark) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  tracking_resource tr(b->memory());
  b->synchronize();
  cuda_pool_reset_peak(b->memory());
  EXPECT_EQ(cuda_pool_stats(b->memory()).used_current, 0u);

  void* a = tr.allocate(64 * MiB);
  void* c = tr.allocate(32 * MiB);
  tr.deallocate(a, 64 * MiB);
  b->synchronize();
  void* d = tr.allocate(128 * MiB);  // 160 MiB in use
  void* e = tr.allocate(16 * MiB);   // 176 MiB: the peak
  fill_and_check(*b, d, 128 * MiB / 2, "peak.d");
  tr.deallocate(c, 32 * MiB);
  tr.deallocate(d, 128 * MiB);
  tr.deallocate(e, 16 * MiB);
  b->synchronize();

  const MemoryStats s = tr.stats();
  const CudaPoolStats pool = cuda_pool_stats(b->memory());
  EXPECT_EQ(s.peak_bytes, 176 * MiB);
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.total_count, 4u);
  // The fill's job table (a few hundred bytes) also came from the pool while d and e were live.
  EXPECT_GE(pool.used_high, s.peak_bytes);
  EXPECT_LE(pool.used_high, s.peak_bytes + 4 * MiB) << "pool high " << pool.used_high << ", tracker " << s.peak_bytes;
  EXPECT_EQ(pool.used_current, 0u);
  // Released threshold "never": the pool keeps the memory for the next layer.
  EXPECT_GE(pool.reserved_current, 128 * MiB);

  cuda_pool_reset_peak(b->memory());
  EXPECT_EQ(cuda_pool_stats(b->memory()).used_high, 0u);
  EXPECT_THROW(cuda_pool_stats(tr), layerinit::logic_error);  // the tracker is not the pool: misuse
}

TEST(CudaBackend, ReserveCommitRelease) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  ASSERT_TRUE(b->memory().supports_reserve());
  tracking_resource tr(b->memory());
  const std::size_t reserved = 100 * MiB + 3;
  auto* base = static_cast<char*>(tr.reserve(reserved, AllocTag{"stack", DType::bf16}));
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(tr.stats().current_bytes, 0u);

  // Ranges in any order, not granule-aligned, some sharing a granule with an earlier one.
  tr.commit(base, 50 * MiB + 6, 3 * MiB);
  tr.commit(base, 0, 1000);
  tr.commit(base, 1000, 2 * MiB);
  tr.commit(base, reserved - 11, 11);  // the last bytes, from an even offset (bf16 below)
  EXPECT_EQ(tr.stats().current_bytes, 5 * MiB + 1011);
  fill_and_check(*b, base + 50 * MiB + 6, 3 * MiB / 2, "commit.a");
  fill_and_check(*b, base, (2 * MiB + 1000) / 2, "commit.b");
  fill_and_check(*b, base + reserved - 11, 5, "commit.c");

  EXPECT_THROW(tr.commit(base, reserved - 11, 12), layerinit::logic_error);  // one byte past the end: misuse
  tr.release(base, reserved);
  EXPECT_EQ(tr.stats().current_bytes, 0u);
  EXPECT_EQ(tr.stats().current_count, 0u);

  // A reservation left to the backend's destructor is released there.
  void* left = b->memory().reserve(8 * MiB);
  b->memory().commit(left, 0, 8 * MiB);
  fill_and_check(*b, left, 4 * MiB, "commit.left");
}

TEST(CudaBackend, OutOfMemoryCarriesTheBytesAsked) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  Storage held = Storage::allocate(b->memory(), 3 * MiB, {});
  const std::size_t huge = std::size_t{1} << 50;  // 1 PiB
  try {
    (void)b->memory().allocate(huge);
    ADD_FAILURE() << "allocating 1 PiB succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), huge);
    EXPECT_EQ(e.in_use(), 3 * MiB);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  // Committing more than the device holds.
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  void* r = b->memory().reserve(2 * total_bytes);
  try {
    b->memory().commit(r, 0, 2 * total_bytes);
    ADD_FAILURE() << "committing twice the device succeeded";
  } catch (const out_of_memory& e) {
    EXPECT_EQ(e.requested(), 2 * total_bytes);
  }
  b->memory().release(r, 2 * total_bytes);
  // Still usable afterwards.
  Storage after = Storage::allocate(b->memory(), 1 * MiB, {});
  fill_and_check(*b, after.data(), 1 * MiB / 2, "after.oom");
}
