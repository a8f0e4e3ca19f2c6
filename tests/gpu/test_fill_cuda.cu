// The CUDA fill against the host fill: the same bytes for every kind, dtype, size, alignment, range and
// layout, and nothing written outside a job (guard bytes). Skips without a usable GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_compare.hpp"
#include <layerinit/core/errors.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_cuda.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/backends/cuda_backend.hpp>

using namespace layerinit;
using layerinit::testing::compare_buffers;
using layerinit::testing::compare_with_host;
using layerinit::testing::Placed;

namespace {

std::vector<FillSpec> all_specs() {
  return {
      FillSpec::normal(0.0, 0.02),
      FillSpec::normal(-1.5, 3.0),
      FillSpec::trunc_normal(0.0, 1.0, -2.0, 2.0),      // PyTorch's default, absolute bounds
      FillSpec::trunc_normal(0.1, 0.02, -0.03, 0.05),   // absolute bounds off-centre
      FillSpec::trunc_normal_std(0.0, 0.02, -3.0, 3.0), // torchtitan's output layer
      FillSpec::trunc_normal_std(0.0, 1.0, -2.0, 2.0),  // JAX / Flax lecun_normal
      FillSpec::uniform(-0.1, 0.1),
      FillSpec::uniform(0.0, 1.0),
      FillSpec::constant(0.0),
      FillSpec::constant(1.0),
      FillSpec::constant(0.3),
  };
}

FillJob job(DType t, std::uint64_t numel, const std::string& name, const FillSpec& spec, std::uint64_t seed = 1234) {
  return make_fill_job(nullptr, t, numel, seed, name, spec);
}

std::string label(const FillSpec& s, DType t) { return s.describe() + " " + std::string(dtype_name(t)); }

}  // namespace

// Sizes around every vector and group boundary, at every element offset from a 16-byte boundary.
TEST(FillCuda, EveryKindAndDtypeMatchesHostAtOddSizesAndOffsets) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  const std::uint64_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 31, 33, 1000, 4097, 65539};
  for (const FillSpec& spec : all_specs()) {
    for (DType t : all_dtypes) {
      std::vector<Placed> jobs;
      const std::size_t per_vector = 16 / dtype_size(t);
      for (std::uint64_t n : sizes)
        for (std::size_t off = 0; off < per_vector; ++off)
          jobs.push_back({job(t, n, "w." + std::to_string(n) + "." + std::to_string(off), spec), off * dtype_size(t)});
      EXPECT_EQ(compare_with_host(*b, jobs), 0u) << label(spec, t);
    }
  }
}

// More units than threads in the grid: the grid-stride loop wraps several times.
TEST(FillCuda, LargeTensorsMatchHost) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  const std::uint64_t n = (1ull << 24) + 3;
  for (DType t : all_dtypes) {
    for (const FillSpec& spec : {FillSpec::normal(0.0, 0.02), FillSpec::trunc_normal_std(0.0, 0.02, -2.0, 2.0)}) {
      std::vector<Placed> jobs = {{job(t, n, "big.a", spec), 0}, {job(t, n, "big.b", spec), dtype_size(t)}};
      EXPECT_EQ(compare_with_host(*b, jobs), 0u) << label(spec, t);
    }
  }
}

// Jobs covering [begin, end) of a tensor: the same bytes as the host writes for that range, and the
// pieces of a tensor filled as separate jobs equal the whole tensor filled as one.
TEST(FillCuda, SubRangesMatchHostAndTileTheWholeTensor) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  const std::uint64_t n = 10007;
  const std::pair<std::uint64_t, std::uint64_t> ranges[] = {{0, n}, {1, 2}, {3, 4099}, {5, n}, {4096, 8192}, {7, 7}, {9998, n}};
  for (DType t : all_dtypes) {
    for (const FillSpec& spec : {FillSpec::normal(0.5, 2.0), FillSpec::trunc_normal(0.0, 0.02, -0.04, 0.04),
                                 FillSpec::uniform(-1.0, 1.0), FillSpec::constant(-2.0)}) {
      std::vector<Placed> jobs;
      for (auto [lo, hi] : ranges)
        for (std::size_t off : {std::size_t{0}, dtype_size(t)}) {
          FillJob j = job(t, n, "ranges", spec);
          j.begin = lo;
          j.end = hi;
          jobs.push_back({j, off});
        }
      EXPECT_EQ(compare_with_host(*b, jobs), 0u) << label(spec, t);

      // Pieces [0, 3), [3, 5000), [5000, n) laid end to end, against the whole tensor on the host.
      const FillJob whole = job(t, n, "tiled", spec);
      const std::size_t es = dtype_size(t);
      const std::size_t start = 64 + es;  // not 16-byte aligned
      std::vector<FillJob> pieces;
      std::vector<std::size_t> pos;
      for (auto [lo, hi] : {std::pair<std::uint64_t, std::uint64_t>{0, 3}, {3, 5000}, {5000, n}}) {
        FillJob p = whole;
        p.begin = lo;
        p.end = hi;
        pieces.push_back(p);
        pos.push_back(start + lo * es);
      }
      EXPECT_EQ(compare_buffers(*b, start + n * es + 64, pieces, pos, {whole}, {start}), 0u) << label(spec, t);
    }
  }
}

// Memory holding [cols, rows] for a logical [rows, cols] tensor, whole and in ranges.
TEST(FillCuda, TransposedJobsMatchHost) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  const std::pair<std::uint64_t, std::uint64_t> shapes[] = {{37, 53}, {1, 17}, {17, 1}, {64, 128}, {3, 5}, {1000, 33}};
  for (DType t : all_dtypes) {
    for (const FillSpec& spec : {FillSpec::normal(0.0, 1.0), FillSpec::trunc_normal_std(0.0, 0.02, -3.0, 3.0),
                                 FillSpec::uniform(-0.5, 0.5), FillSpec::constant(4.0)}) {
      std::vector<Placed> jobs;
      for (auto [rows, cols] : shapes) {
        FillJob j = job(t, rows * cols, "t." + std::to_string(rows) + "x" + std::to_string(cols), spec);
        j.rows = rows;
        j.cols = cols;
        j.transposed = true;
        jobs.push_back({j, 0});
        jobs.push_back({j, dtype_size(t)});
        FillJob part = j;
        part.begin = rows * cols / 3;
        part.end = rows * cols - rows * cols / 5;
        jobs.push_back({part, 3 * dtype_size(t)});
      }
      EXPECT_EQ(compare_with_host(*b, jobs), 0u) << label(spec, t);
    }
  }
}

// Strided box jobs (runs of memory, dense at dst): row-parallel shards, stacked ones, windows of
// transposed tensors, run lengths and strides off multiples of 8, aligned and not; the GPU's bytes
// equal the host's for the strided job and for its runs filled one job each.
TEST(FillCuda, StridedJobsMatchHostAndTheirRuns) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  struct Case {
    std::uint64_t numel, begin, len, runs, stride, rows, cols;
    bool transposed;
  };
  const Case cases[] = {
      {4096 * 1024, 512, 512, 4096, 1024, 1, 1, false},       // row-parallel [4096, 1024 / 2], rank 1: run vectors
      {4 * 64 * 768, 3, 96, 4 * 64, 768, 1, 1, false},        // stacked [4, 64, 768 / 8] from element 3: unaligned run vectors
      {1000 * 100, 7, 13, 1000, 100, 1, 1, false},            // runs of 13: scalars
      {1ull << 36, (1ull << 34) + 8, 64, 1000, 4096, 1, 1, false},  // indices past 2^34: aligned run vectors
      {512 * 384, 128 * 512 + 64, 128, 64, 512, 512, 384, true},  // window of memory [384, 512]: tiles
      {37 * 53, 3 * 37 + 2, 20, 30, 37, 37, 53, true},        // odd window: scalars
  };
  for (DType t : all_dtypes)
    for (const FillSpec& spec : {FillSpec::normal(0.0, 0.02), FillSpec::trunc_normal_std(0.0, 0.02, -2.0, 2.0),
                                 FillSpec::uniform(-0.1, 0.1), FillSpec::constant(0.5)}) {
      std::vector<Placed> jobs;
      for (const Case& c : cases) {
        FillJob j = job(t, c.numel, "model.layers.0.self_attn.o_proj.weight", spec);
        j.begin = c.begin;
        j.end = c.begin + c.len;
        j.runs = c.runs;
        j.stride = c.stride;
        j.transposed = c.transposed;
        if (c.transposed) {
          j.rows = c.rows;
          j.cols = c.cols;
        }
        jobs.push_back({j, 0});
        jobs.push_back({j, dtype_size(t)});
      }
      EXPECT_EQ(compare_with_host(*b, jobs), 0u) << label(spec, t);
      // The same bytes as the runs one job each, on the host.
      const layerinit::testing::BufferLayout l = layerinit::testing::layout_of(jobs);
      std::vector<FillJob> gpu, host;
      std::vector<std::size_t> host_pos;
      for (std::size_t k = 0; k < jobs.size(); ++k) {
        gpu.push_back(jobs[k].job);
        for (std::uint64_t r = 0; r < jobs[k].job.runs; ++r) {
          FillJob run = jobs[k].job;  // run_job's, with dst left to compare_buffers
          run.runs = 1;
          run.begin += r * run.stride;
          run.end += r * run.stride;
          host.push_back(run);
          host_pos.push_back(l.pos[k] + r * (run.end - run.begin) * dtype_size(t));
        }
      }
      EXPECT_EQ(compare_buffers(*b, l.bytes, gpu, l.pos, host, host_pos), 0u) << label(spec, t) << " per run";
    }
  // Overlapping runs are refused before the launch.
  FillJob bad = job(DType::bf16, 1000, "bad", FillSpec::normal(0, 1));
  Storage dev = Storage::allocate(b->memory(), 1024, {});
  bad.dst = dev.data();
  bad.end = 16;
  bad.runs = 4;
  bad.stride = 8;
  EXPECT_THROW(b->fill(std::span(&bad, 1)), layerinit::logic_error);  // a bad job is misuse
}

// A model's worth of tensors in one call: 300 jobs of mixed sizes, dtypes, kinds and layouts, packed
// with no gaps (so most start off a 16-byte boundary).
TEST(FillCuda, BatchOf300MixedJobsInOneCall) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  const std::vector<FillSpec> specs = all_specs();
  std::uint64_t lcg = 0x9e3779b97f4a7c15ull;
  auto next = [&](std::uint64_t m) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (lcg >> 33) % m;
  };
  std::vector<FillJob> jobs;
  std::vector<std::size_t> pos;
  std::size_t p = 0;
  for (int k = 0; k < 300; ++k) {
    const DType t = all_dtypes[k % 3];
    std::uint64_t n = k % 10 == 0 ? 1 + next(300000) : next(5000);  // a few large, some empty
    FillJob j = job(t, n, "model.layers." + std::to_string(k) + ".weight", specs[k % specs.size()], 7);
    if (k % 7 == 3 && n > 0) {  // transposed [rows, cols]
      j.rows = 1 + next(50);
      j.cols = (n + j.rows - 1) / j.rows;
      j.end = j.rows * j.cols;
      n = j.end;
    }
    if (k % 11 == 5 && n > 10) j.begin = n / 3;  // a sub-range
    const std::size_t es = dtype_size(t);
    p = (p + es - 1) / es * es;
    pos.push_back(p);
    jobs.push_back(j);
    p += (j.end - j.begin) * es;
  }
  EXPECT_EQ(compare_buffers(*b, p + 64, jobs, pos, jobs, pos), 0u);
}

TEST(FillCuda, EmptyBatchAndEmptyJobsWriteNothing) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  b->fill({});
  std::vector<Placed> jobs = {{job(DType::bf16, 0, "empty", FillSpec::normal(0, 1)), 0},
                              {job(DType::f32, 0, "empty2", FillSpec::constant(1)), 4}};
  EXPECT_EQ(compare_with_host(*b, jobs), 0u);
  b->synchronize();
}

TEST(FillCuda, RejectsBadJobsBeforeLaunching) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  Storage dev = Storage::allocate(b->memory(), 4096, {});
  FillJob j = job(DType::f32, 100, "bad", FillSpec::normal(0, 1));
  j.dst = static_cast<char*>(dev.data()) + 2;  // not 4-byte aligned
  EXPECT_THROW(b->fill({&j, 1}), layerinit::logic_error);
  j.dst = dev.data();
  j.begin = 10;
  j.end = 5;
  EXPECT_THROW(b->fill({&j, 1}), layerinit::logic_error);
  j.begin = 0;
  j.end = 100;
  j.transposed = true;
  j.rows = 9;
  j.cols = 9;  // 81 < 100
  EXPECT_THROW(b->fill({&j, 1}), layerinit::logic_error);
  j.rows = 10;
  j.cols = 10;
  EXPECT_NO_THROW(b->fill({&j, 1}));
  EXPECT_NO_THROW(b->synchronize());
}

// fill_cuda on the backend's own stream, as other components call it.
TEST(FillCuda, DirectCallOnTheBackendStream) {
  LAYERINIT_SKIP_WITHOUT_GPU();
  auto b = make_cuda_backend();
  const std::uint64_t n = 4099;
  Storage dev = Storage::allocate(b->memory(), n * 2, {});
  FillJob j = job(DType::f16, n, "direct", FillSpec::normal(0, 0.02));
  j.dst = dev.data();
  fill_cuda({&j, 1}, cuda_backend_stream(*b));
  std::vector<std::uint16_t> got(n), want(n);
  b->copy_to_host(got.data(), dev.data(), n * 2);
  FillJob h = j;
  h.dst = want.data();
  fill_host({&h, 1}, 1);
  EXPECT_EQ(got, want);
}
