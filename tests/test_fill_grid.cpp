// The CUDA kernel's work split without a GPU: grid::fill_grid_simulated runs the kernel's own task
// functions (kernels/fill_grid.hpp) over a simulated grid on the CPU, and its bytes must be the host
// fill's for every path (vectors, tiles, scalars), start offset, grid shape and index range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <layerinit/core/errors.hpp>
#include <layerinit/dtypes/convert.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_element.hpp>
#include <layerinit/kernels/fill_grid.hpp>
#include <layerinit/kernels/fill_host.hpp>
#include <layerinit/kernels/fill_host_seams.hpp>
#include "test_util.hpp"

using namespace layerinit;

namespace {

using Bytes = std::vector<unsigned char>;

const FillSpec kSpecs[] = {
    FillSpec::constant(0.125),
    FillSpec::normal(0.0, 0.02),
    FillSpec::trunc_normal_std(0.0, 0.02, -2.0, 2.0),
    FillSpec::uniform(-0.05, 0.05),
};

struct Grid {
  unsigned blocks, threads;
};
const Grid kGrids[] = {{1, 32}, {3, 64}, {7, 512}, {2, 768}};  // 768: the kernels' block

// A buffer whose element 0 sits `offset` elements past a 64-byte boundary, so jobs start at every
// alignment; returns the pointer to element 0.
struct Buffer {
  Bytes storage;
  unsigned char* data;
  Buffer(std::uint64_t elements, std::uint64_t es, std::uint64_t offset) : storage((elements + offset) * es + 64) {
    const auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
    data = storage.data() + (64 - addr % 64) % 64 + offset * es;
  }
};

// Runs the jobs (their dst inside `buffers`) once with fill_host and once per grid with the
// simulation, comparing the whole buffers.
void expect_same_as_host(std::vector<FillJob> jobs, std::vector<Buffer*> buffers, const std::string& what) {
  for (Buffer* b : buffers) std::memset(b->storage.data(), 0xab, b->storage.size());
  fill_host(jobs, 1);
  std::vector<Bytes> want;
  for (Buffer* b : buffers) want.push_back(b->storage);
  for (const Grid& g : kGrids) {
    for (Buffer* b : buffers) std::memset(b->storage.data(), 0xab, b->storage.size());
    grid::fill_grid_simulated(jobs, g.blocks, g.threads);
    for (std::size_t k = 0; k < buffers.size(); ++k)
      ASSERT_TRUE(buffers[k]->storage == want[k]) << what << ", grid " << g.blocks << " x " << g.threads << ", buffer " << k;
  }
}

}  // namespace

// Vectors path: every start offset mod 8 of the memory address and of the element index, with heads,
// whole vectors (one or two blocks each) and tails.
TEST(FillGrid, VectorsMatchTheHostAtEveryOffset) {
  for (DType t : all_dtypes)
    for (const FillSpec& spec : kSpecs)
      for (std::uint64_t offset = 0; offset < 8; ++offset)
        for (std::uint64_t begin : {0ull, 3ull, 8ull}) {
          const std::uint64_t n = 3001;
          Buffer buf(n, dtype_size(t), offset);
          FillJob j = make_fill_job(buf.data, t, begin + n, 5, "model.embed_tokens.weight", spec);
          j.begin = begin;
          expect_same_as_host({j}, {&buf},
                              std::string(dtype_name(t)) + " " + spec.describe() + " offset " + std::to_string(offset) +
                                  " begin " + std::to_string(begin));
        }
}

// Element indices past 2^34 (a job over a small window of a huge tensor): the 64-bit counter reaches
// the Philox block's second counter word.
TEST(FillGrid, IndicesPastTwoToTheThirtyFour) {
  for (DType t : all_dtypes)
    for (const FillSpec& spec : kSpecs) {
      const std::uint64_t n = 2051, begin = (1ull << 34) + 5;
      Buffer buf(n, dtype_size(t), 3);
      FillJob j = make_fill_job(buf.data, t, begin + n, 6, "lm_head.weight", spec);
      j.begin = begin;
      expect_same_as_host({j}, {&buf}, std::string(dtype_name(t)) + " " + spec.describe());
      // And against the contract directly, element by element.
      const FillTables tab = host_fill_tables();
      for (std::uint64_t m = begin; m < begin + n; m += 97) {
        float got = 0, want = 0;
        if (t == DType::f32) {
          std::memcpy(&got, buf.data + (m - begin) * 4, 4);
          want = element_at<DType::f32>(j, m, tab);
          ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << m;
        } else {
          std::uint16_t g16 = 0;
          std::memcpy(&g16, buf.data + (m - begin) * 2, 2);
          ASSERT_EQ(g16, t == DType::f16 ? element_at<DType::f16>(j, m, tab) : element_at<DType::bf16>(j, m, tab)) << m;
        }
      }
    }
}

// Tiles path: a transposed tensor of whole groups, and a window of memory rows of a tensor with
// rows * cols >= 2^32; scalars path: odd shapes and partial rows.
TEST(FillGrid, TransposedTilesAndScalarsMatchTheHost) {
  for (DType t : all_dtypes)
    for (const FillSpec& spec : kSpecs) {
      const std::string what = std::string(dtype_name(t)) + " " + spec.describe();
      {  // whole tensor, logical [rows, cols] = [40, 24]: tiles
        Buffer buf(40 * 24, dtype_size(t), 0);
        FillJob j = make_fill_job(buf.data, t, 40 * 24, 7, "model.layers.0.mlp.up_proj.weight", spec);
        j.rows = 40;
        j.cols = 24;
        j.transposed = true;
        expect_same_as_host({j}, {&buf}, what + " tiles");
      }
      {  // memory rows [524288, 524296) of logical [8192, 524296]: 2^32 + 2^16 elements, tiles at 64-bit indices
        const std::uint64_t rows = 8192, cols = 524296, begin = 524288 * rows, end = 524296 * rows;
        Buffer buf(end - begin, dtype_size(t), 0);
        FillJob j = make_fill_job(buf.data, t, end, 8, "model.layers.1.mlp.down_proj.weight", spec);
        j.begin = begin;
        j.rows = rows;
        j.cols = cols;
        j.transposed = true;
        ASSERT_GE(rows * cols, 1ull << 32);
        expect_same_as_host({j}, {&buf}, what + " tiles past 2^32");
      }
      for (std::uint64_t offset : {0ull, 1ull, 5ull}) {  // odd shapes and partial ranges: scalars
        Buffer a(37 * 21, dtype_size(t), offset), b(48 * 24, dtype_size(t), offset);
        FillJob ja = make_fill_job(a.data, t, 37 * 21, 9, "model.layers.2.self_attn.o_proj.weight", spec);
        ja.rows = 37;
        ja.cols = 21;
        ja.transposed = true;
        FillJob jb = make_fill_job(b.data, t, 48 * 24 - 5, 9, "model.layers.2.self_attn.q_proj.weight", spec);
        jb.begin = 3;
        jb.rows = 48;
        jb.cols = 24;
        jb.transposed = true;
        expect_same_as_host({ja, jb}, {&a, &b}, what + " scalars offset " + std::to_string(offset));
      }
    }
}

// More jobs than one launch holds, and mixed dtypes: split into launches, same bytes.
TEST(FillGrid, SplitsBatchesIntoLaunches) {
  std::vector<Buffer> buffers;
  buffers.reserve(3 * grid::max_grid_jobs);
  std::vector<FillJob> jobs;
  for (int k = 0; k < 3 * grid::max_grid_jobs; ++k) {
    const DType t = all_dtypes[k % 3];
    const std::uint64_t n = 100 + 37 * k;
    buffers.emplace_back(n, dtype_size(t), k % 8);
    jobs.push_back(make_fill_job(buffers.back().data, t, n, 10, "t" + std::to_string(k), kSpecs[k % 4]));
  }
  std::vector<Buffer*> ptrs;
  for (Buffer& b : buffers) ptrs.push_back(&b);
  const auto launches = grid::plan_launches(jobs, 64);
  EXPECT_GE(launches.size(), jobs.size());  // dtypes alternate: one launch per job here
  std::size_t total = 0;
  for (const auto& L : launches) {
    EXPECT_LE(L.n_jobs, grid::max_grid_jobs);
    for (int i = 0; i < L.n_jobs; ++i) EXPECT_EQ(L.jobs[i].job.dtype, L.dtype);
    total += static_cast<std::size_t>(L.n_jobs);
  }
  EXPECT_EQ(total, jobs.size());
  expect_same_as_host(jobs, ptrs, "mixed batch");
  // One dtype: full launches of max_grid_jobs.
  std::vector<FillJob> same(jobs.begin(), jobs.end());
  for (auto& j : same) j.dtype = DType::f32;
  EXPECT_EQ(grid::plan_launches(same, 64).size(), 3u);
}

TEST(FillGrid, PlansThePathEachJobTakes) {
  alignas(16) static float buf[64 * 64];
  FillJob j = make_fill_job(buf, DType::f32, 64 * 64, 1, "t", FillSpec::normal(0, 1));
  auto path = [](const FillJob& job) { return grid::plan_launches({&job, 1}, 64).at(0).jobs[0].path; };
  EXPECT_EQ(path(j), grid::Path::vectors);
  j.transposed = true;
  j.rows = 64;
  j.cols = 64;
  EXPECT_EQ(path(j), grid::Path::tiles);
  j.cols = 63;
  j.end = 64 * 63;
  EXPECT_EQ(path(j), grid::Path::scalars);  // a block straddles logical rows
  j.cols = 64;
  j.end = 64 * 64;
  j.dst = buf + 1;
  EXPECT_EQ(path(j), grid::Path::scalars);  // memory rows not 16-byte aligned
  j.dst = buf;
  j.params = prepare_fill(FillSpec::constant(1), DType::f32);
  EXPECT_EQ(path(j), grid::Path::vectors);  // a constant does not care where elements sit
  // The head runs to the first 16-byte address; the job's first vector starts a block or not.
  FillJob k = make_fill_job(buf + 1, DType::f32, 100, 1, "t", FillSpec::normal(0, 1));
  const grid::Job g = grid::plan_launches({&k, 1}, 64).at(0).jobs[0];
  EXPECT_EQ(g.head, 3u);
  EXPECT_EQ(g.nvec, 24u);  // (100 - 3) / 4
  EXPECT_FALSE(g.aligned);  // element 3 is word 3 of block 0
}

TEST(FillGrid, RefusesBadJobsLikeTheKernel) {
  alignas(16) static float buf[16];
  FillJob j = make_fill_job(buf, DType::f32, 16, 1, "t", FillSpec::normal(0, 1));
  j.dst = nullptr;
  EXPECT_THROW(grid::fill_grid_simulated({&j, 1}, 1, 32), layerinit::logic_error);  // a bad job is misuse
  j.dst = reinterpret_cast<unsigned char*>(buf) + 2;
  EXPECT_THROW(grid::fill_grid_simulated({&j, 1}, 1, 32), layerinit::logic_error);
  j.dst = buf;
  j.transposed = true;
  j.rows = (1ull << 32) + 1;
  j.cols = 1ull << 32;
  EXPECT_THROW(grid::fill_grid_simulated({&j, 1}, 1, 32), layerinit::logic_error);
  EXPECT_THROW(grid::fill_grid_simulated({}, 0, 32), layerinit::logic_error);  // blocks 0: misuse
}

// Strided box jobs (FillJob::runs, stride): the dense bytes of every run, from fill_host at 1 and 3
// threads and from the simulated kernel on several grids, equal the runs filled as jobs of their own
// (run_job) and, where the tensor is small, the same elements sliced out of the whole tensor's fill.
namespace {

const Grid kRunGrids[] = {{1, 32}, {3, 64}, {7, 512}, {2, 5}};  // 5 threads: walks with a remainder

// The dense bytes of job j's runs, each filled as a job of one run (the contiguous paths).
Bytes per_run_bytes(FillJob j) {
  const std::uint64_t es = dtype_size(j.dtype);
  Buffer ref(job_elements(j), es, 0);
  j.dst = ref.data;
  std::vector<FillJob> runs;
  for (std::uint64_t r = 0; r < j.runs; ++r) runs.push_back(run_job(j, r));
  fill_host(runs, 1);
  return Bytes(ref.data, ref.data + job_elements(j) * es);
}

// Job j's elements cut out of the whole tensor's memory (numel elements), filled as one job.
Bytes sliced_bytes(const FillJob& j, std::uint64_t numel) {
  const std::uint64_t es = dtype_size(j.dtype), len = j.end - j.begin;
  Bytes whole(numel * es);
  FillJob w = j;
  w.dst = whole.data();
  w.begin = 0;
  w.end = numel;
  w.runs = 1;
  fill_host(std::span(&w, 1), 1);
  Bytes out;
  for (std::uint64_t r = 0; r < j.runs; ++r) {
    const unsigned char* run = whole.data() + (j.begin + r * j.stride) * es;
    out.insert(out.end(), run, run + len * es);
  }
  return out;
}

// j.dst is set here: `offset` elements past a 64-byte boundary. Checks every fill against `want` (the
// runs' bytes, dense), each run at its place (dst_pitch apart), and that nothing between the runs or
// past the last is written.
void expect_runs(FillJob j, const Bytes& want, std::uint64_t offset, const std::string& what) {
  const std::uint64_t es = dtype_size(j.dtype), len = j.end - j.begin, pitch = dst_pitch(j), span = dst_span(j);
  ASSERT_EQ(want.size(), job_elements(j) * es) << what;
  Buffer buf(span + 8, es, offset);
  j.dst = buf.data;
  auto check = [&](const std::string& how) {
    for (std::uint64_t r = 0; r < j.runs && len > 0; ++r) {
      ASSERT_EQ(std::memcmp(buf.data + r * pitch * es, want.data() + r * len * es, len * es), 0) << what << ", " << how << ": run " << r;
      const std::uint64_t gap_end = r + 1 < j.runs ? (r + 1) * pitch : span + 8;
      for (std::uint64_t k = (r * pitch + len) * es; k < gap_end * es; ++k)
        ASSERT_EQ(buf.data[k], 0xab) << what << ", " << how << ": wrote outside the runs at byte " << k;
    }
    if (j.runs == 0 || len == 0)
      for (std::uint64_t k = 0; k < 8 * es; ++k) ASSERT_EQ(buf.data[k], 0xab) << what << ", " << how << ": wrote with nothing to fill";
  };
  for (int threads : {1, 3}) {
    std::memset(buf.storage.data(), 0xab, buf.storage.size());
    fill_host(std::span(&j, 1), threads);
    check("fill_host, " + std::to_string(threads) + " threads");
  }
  for (const Grid& g : kRunGrids) {
    std::memset(buf.storage.data(), 0xab, buf.storage.size());
    grid::fill_grid_simulated(std::span(&j, 1), g.blocks, g.threads);
    check("grid " + std::to_string(g.blocks) + " x " + std::to_string(g.threads));
  }
}

grid::Path path_of(const FillJob& j) { return grid::plan_launches({&j, 1}, 64).at(0).jobs[0].path; }

}  // namespace

// Not transposed: run lengths and strides that are and are not multiples of 8, every first element
// mod 8, aligned and misaligned dst, 0 to 40 runs, every dtype and kind.
TEST(FillGrid, StridedJobsMatchPerRunJobsAndTheWholeFill) {
  struct Shape2 {
    std::uint64_t len, stride;
  };
  const Shape2 shapes[] = {{8, 24}, {16, 16}, {12, 20}, {5, 13}, {13, 16}, {64, 72}, {3, 8}};
  int run_vector_jobs = 0;
  for (DType t : all_dtypes)
    for (const FillSpec& spec : kSpecs)
      for (const Shape2& s : shapes)
        for (std::uint64_t begin = 0; begin < 8; ++begin)
          for (std::uint64_t runs : {0ull, 1ull, 2ull, 7ull, 40ull}) {
            const std::uint64_t numel = begin + 40 * s.stride;
            FillJob j = make_fill_job(nullptr, t, numel, 11, "model.layers.3.mlp.down_proj.weight", spec);
            j.begin = begin;
            j.end = begin + s.len;
            j.runs = runs;
            j.stride = s.stride;
            const std::string what = std::string(dtype_name(t)) + " " + spec.describe() + " len " + std::to_string(s.len) +
                                     " stride " + std::to_string(s.stride) + " begin " + std::to_string(begin) + " runs " +
                                     std::to_string(runs);
            const Bytes want = sliced_bytes(j, numel);
            ASSERT_TRUE(want == per_run_bytes(j)) << what;
            for (std::uint64_t offset : {0ull, 1ull}) expect_runs(j, want, offset, what + " offset " + std::to_string(offset));
            // The path the kernel takes (dst 16-byte aligned): run vectors exactly when runs are whole
            // vectors at one place in their blocks; runs that touch are one run.
            alignas(16) static unsigned char aligned[16];
            j.dst = aligned;
            if (runs == 0) {
              EXPECT_TRUE(grid::plan_launches({&j, 1}, 64).empty()) << what;
              continue;
            }
            const std::uint64_t n = elements_per_block(t);
            const grid::Job g = grid::plan_launches({&j, 1}, 64).at(0).jobs[0];
            if (runs == 1 || s.len == s.stride) {
              EXPECT_EQ(g.path, grid::Path::vectors) << what;
              EXPECT_EQ(g.job.end - g.job.begin, runs * s.len) << what;
            } else if (s.len % n == 0 && s.stride % n == 0) {
              EXPECT_EQ(g.path, grid::Path::run_vectors) << what;
              EXPECT_EQ(g.aligned, begin % n == 0) << what;
              EXPECT_EQ(g.nvec, runs * s.len / n) << what;
              ++run_vector_jobs;
            } else {
              EXPECT_EQ(g.path, grid::Path::scalars) << what;
            }
          }
  // halves: {8, 24} and {64, 72}; fp32 also {12, 20}; x 4 kinds x 8 first elements x 3 run counts.
  EXPECT_EQ(run_vector_jobs, (2 * 2 + 3) * 4 * 8 * 3);
}

// Runs longer than the host's chunks (cut at multiples of its chunk size) and many short runs (grouped
// into chunks), with threads; indices past 2^34, in a run's start and across runs.
TEST(FillGrid, StridedJobsOfLongAndShortRunsAndHugeIndices) {
  for (DType t : all_dtypes)
    for (const FillSpec& spec : {kSpecs[1], kSpecs[2]}) {
      const std::string what = std::string(dtype_name(t)) + " " + spec.describe();
      {  // 3 runs of 70000 (past 2^16) from 65530: host chunks split runs
        const std::uint64_t numel = 65530 + 2 * 140008 + 70000;
        FillJob j = make_fill_job(nullptr, t, numel, 12, "model.layers.0.self_attn.o_proj.weight", spec);
        j.begin = 65530;
        j.end = j.begin + 70000;
        j.runs = 3;
        j.stride = 140008;
        expect_runs(j, sliced_bytes(j, numel), 0, what + " long runs");
      }
      {  // 1500 runs of 104: several host chunks of whole runs
        const std::uint64_t numel = 1500 * 512;
        FillJob j = make_fill_job(nullptr, t, numel, 13, "model.layers.0.mlp.down_proj.weight", spec);
        j.begin = 256;
        j.end = 256 + 104;
        j.runs = 1500;
        j.stride = 512;
        expect_runs(j, sliced_bytes(j, numel), 0, what + " short runs");
      }
      {  // a window of a huge tensor: first element past 2^34, and every element checked against the contract
        FillJob j = make_fill_job(nullptr, t, 1ull << 40, 14, "lm_head.weight", spec);
        j.begin = (1ull << 34) + 3;
        j.end = j.begin + 40;
        j.runs = 5;
        j.stride = (1ull << 20) + 8;
        const Bytes want = per_run_bytes(j);
        const FillTables tab = host_fill_tables();
        const std::uint64_t es = dtype_size(t);
        for (std::uint64_t r = 0; r < j.runs; ++r)
          for (std::uint64_t i = 0; i < 40; ++i) {
            const std::uint64_t m = j.begin + r * j.stride + i;
            std::uint32_t x = 0;
            if (t == DType::f32) {
              const float v = element_at<DType::f32>(j, m, tab);
              std::memcpy(&x, &v, 4);
            } else {
              x = t == DType::f16 ? element_at<DType::f16>(j, m, tab) : element_at<DType::bf16>(j, m, tab);
            }
            ASSERT_EQ(std::memcmp(&want[(r * 40 + i) * es], &x, es), 0) << what << " run " << r << " element " << i;
          }
        expect_runs(j, want, 0, what + " past 2^34");
        j.begin = 5;  // runs 2^32 + 8 apart: the last starts past 2^34
        j.end = 5 + 24;
        j.runs = 6;
        j.stride = (1ull << 32) + 8;
        expect_runs(j, per_run_bytes(j), 0, what + " runs past 2^34");
        expect_runs(j, per_run_bytes(j), 3, what + " runs past 2^34, misaligned");
      }
    }
}

// Transposed (memory [cols, rows] of logical [rows, cols]): a window of memory rows x logical rows, as a
// column-parallel weight stored in-out is split. Tiles when the window is whole n-groups (n = 8 halves,
// 4 floats), else scalars; both equal the whole tensor's fill, sliced.
TEST(FillGrid, TransposedStridedJobsMatchTheWholeFill) {
  struct Window {
    std::uint64_t rows, cols, c_begin, runs, r_begin, len;
  };
  const Window windows[] = {
      {48, 24, 0, 24, 16, 16},  // tiles in every dtype
      {48, 24, 8, 8, 8, 24},    // tiles in every dtype, not at the start
      {48, 24, 4, 12, 4, 12},   // fp32 tiles; halves: scalars
      {48, 24, 2, 5, 3, 13},    // scalars
      {48, 24, 0, 24, 0, 48},   // runs that touch: one run of whole memory rows, tiles
      {37, 21, 3, 7, 5, 9},     // cols not whole blocks: scalars
      {40, 64, 16, 16, 0, 40},  // fp32 tiles (40 = 10 vectors); halves: 40 % 8 = 0, tiles too
      {48, 24, 0, 1, 8, 8},     // one run: a partial memory row, scalars
  };
  for (DType t : all_dtypes)
    for (const FillSpec& spec : kSpecs)
      for (const Window& w : windows) {
        const std::uint64_t numel = w.rows * w.cols, n = elements_per_block(t);
        FillJob j = make_fill_job(nullptr, t, numel, 15, "model.layers.4.self_attn.q_proj.weight", spec);
        j.transposed = true;
        j.rows = w.rows;
        j.cols = w.cols;
        j.begin = w.c_begin * w.rows + w.r_begin;
        j.end = j.begin + w.len;
        j.runs = w.runs;
        j.stride = w.rows;
        const std::string what = std::string(dtype_name(t)) + " " + spec.describe() + " [" + std::to_string(w.rows) + ", " +
                                 std::to_string(w.cols) + "] rows " + std::to_string(w.c_begin) + "+" + std::to_string(w.runs) +
                                 " x " + std::to_string(w.r_begin) + "+" + std::to_string(w.len);
        const Bytes want = sliced_bytes(j, numel);
        ASSERT_TRUE(want == per_run_bytes(j)) << what;
        for (std::uint64_t offset : {0ull, 3ull}) expect_runs(j, want, offset, what + " offset " + std::to_string(offset));
        alignas(16) static unsigned char aligned[16];
        j.dst = aligned;
        const bool whole_groups = w.cols % n == 0 && w.c_begin % n == 0 && w.runs % n == 0 && w.r_begin % n == 0 && w.len % n == 0;
        const grid::Path want_path = spec.kind == FillKind::constant ? (w.runs == 1 || w.len == w.rows ? grid::Path::vectors : grid::Path::run_vectors)
                                     : whole_groups                  ? grid::Path::tiles
                                                                     : grid::Path::scalars;
        if (spec.kind != FillKind::constant || w.len % n == 0 || w.runs == 1 || w.len == w.rows)
          EXPECT_EQ(path_of(j), want_path) << what;
      }
  // A window of memory rows [524288, 524296) x logical rows [4096, 4160) of logical [8192, 524296]
  // (2^32 + 2^16 elements): tiles at 64-bit indices.
  for (DType t : all_dtypes) {
    FillJob j = make_fill_job(nullptr, t, 8192ull * 524296, 16, "model.layers.1.mlp.down_proj.weight", kSpecs[2]);
    j.transposed = true;
    j.rows = 8192;
    j.cols = 524296;
    j.begin = 524288ull * 8192 + 4096;
    j.end = j.begin + 64;
    j.runs = 8;
    j.stride = 8192;
    alignas(16) static unsigned char aligned[16];
    FillJob probe = j;
    probe.dst = aligned;
    EXPECT_EQ(path_of(probe), grid::Path::tiles) << dtype_name(t);
    expect_runs(j, per_run_bytes(j), 0, std::string(dtype_name(t)) + " tiles past 2^32");
  }
  // Runs two memory rows apart: never tiles, the same bytes.
  for (DType t : all_dtypes) {
    FillJob j = make_fill_job(nullptr, t, 48 * 24, 17, "w", kSpecs[1]);
    j.transposed = true;
    j.rows = 48;
    j.cols = 24;
    j.begin = 8;
    j.end = 24;
    j.runs = 8;
    j.stride = 96;
    expect_runs(j, sliced_bytes(j, 48 * 24), 0, std::string(dtype_name(t)) + " every other memory row");
  }
}

// Runs dst_stride apart at dst (a layer's slice of a stack at axis 1): each run's bytes are the dense
// job's run, at dst + r * dst_stride, and nothing in the gaps is written, by fill_host and every grid,
// on each path (run vectors and tiles when the pitch is whole vectors, else scalars).
TEST(FillGrid, RunsDstStrideApartAreTheDenseRunsSpreadOut) {
  alignas(16) static unsigned char aligned[16];
  for (DType t : all_dtypes) {
    const std::uint64_t n = elements_per_block(t);
    for (const FillSpec& spec : kSpecs) {
      // Not transposed: rows [len] of a [40, stride] tensor, dst_stride from len (touching) up.
      struct Rows {
        std::uint64_t begin, len, stride;
      };
      for (const Rows& w : {Rows{0, 16, 24}, Rows{8, 8, 16}, Rows{3, 13, 16}, Rows{0, 24, 24}})
        for (std::uint64_t pitch : {w.len, w.len + 8, w.len + 3, 4 * w.len + 16}) {
          FillJob j = make_fill_job(nullptr, t, 40 * w.stride, 21, "decoder.layers.mlp.wi.kernel", spec);
          j.begin = w.begin;
          j.end = w.begin + w.len;
          j.runs = 9;
          j.stride = w.stride;
          const std::string what = std::string(dtype_name(t)) + " " + spec.describe() + " rows of " + std::to_string(w.len) +
                                   " from " + std::to_string(w.begin) + ", stride " + std::to_string(w.stride) + ", dst_stride " +
                                   std::to_string(pitch);
          const Bytes want = per_run_bytes(j);
          j.dst_stride = pitch;
          for (std::uint64_t offset : {0ull, 1ull}) expect_runs(j, want, offset, what + " offset " + std::to_string(offset));
          j.dst = aligned;
          const bool vectors = w.len % n == 0 && pitch % n == 0 && (spec.kind == FillKind::constant || w.stride % n == 0);
          const grid::Path want_path = w.len == w.stride && pitch == w.len ? grid::Path::vectors
                                       : vectors                        ? grid::Path::run_vectors
                                                                        : grid::Path::scalars;
          EXPECT_EQ(path_of(j), want_path) << what;
        }
      // Transposed [48, 24] (memory [24, 48]): memory rows 8..15 over logical rows 16..31, rows dst_stride
      // apart (a layer of a stack [in, L, out] at axis 1: dst_stride L * out).
      for (std::uint64_t pitch : {16ull, 48ull, 19ull, 160ull}) {
        FillJob j = make_fill_job(nullptr, t, 48 * 24, 22, "decoder.layers.mlp.wo.kernel", spec);
        j.transposed = true;
        j.rows = 48;
        j.cols = 24;
        j.begin = 8 * 48 + 16;
        j.end = j.begin + 16;
        j.runs = 8;
        j.stride = 48;
        const std::string what = std::string(dtype_name(t)) + " " + spec.describe() + " transposed, dst_stride " + std::to_string(pitch);
        const Bytes want = sliced_bytes(j, 48 * 24);
        j.dst_stride = pitch;
        for (std::uint64_t offset : {0ull, 3ull}) expect_runs(j, want, offset, what + " offset " + std::to_string(offset));
        j.dst = aligned;
        if (spec.kind != FillKind::constant)
          EXPECT_EQ(path_of(j), pitch % n == 0 && 8 % n == 0 ? grid::Path::tiles : grid::Path::scalars) << what;
      }
    }
  }
  // Bad dst strides are misuse, refused before anything is written.
  alignas(16) static float buf[64];
  FillJob j = make_fill_job(buf, DType::f32, 1000, 1, "t", FillSpec::normal(0, 1));
  j.end = 8;
  j.runs = 4;
  j.stride = 16;
  j.dst_stride = 7;
  EXPECT_THROW(fill_host(std::span(&j, 1), 1), layerinit::logic_error);
  EXPECT_THROW(grid::fill_grid_simulated(std::span(&j, 1), 1, 32), layerinit::logic_error);
  try {
    grid::check_grid_jobs(std::span(&j, 1));
  } catch (const layerinit::logic_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("fill: job of 4 runs of 8 elements with dst_stride 7: their places at dst overlap (dst_stride < run length)", 0), 0u) << e.what();
  }
  j.dst_stride = (1ull << 62) / 3;  // 3 * pitch + 8 elements of 4 bytes: past 2^64 bytes
  EXPECT_THROW(grid::check_grid_jobs(std::span(&j, 1)), layerinit::logic_error);
  EXPECT_EQ(buf[0], 0.f);
}

// Strided jobs beside jobs of one run in one launch: each finds its own tasks.
TEST(FillGrid, StridedJobsShareALaunch) {
  const DType t = DType::bf16;
  std::vector<Buffer> buffers;
  buffers.reserve(6);
  std::vector<FillJob> jobs;
  std::vector<Bytes> want;
  for (int k = 0; k < 6; ++k) {
    FillJob j = make_fill_job(nullptr, t, 64 * 200, 18, "t" + std::to_string(k), kSpecs[k % 4]);
    if (k % 2 == 1) {  // rows' columns [8 k, 8 k + 40) (run vectors) or [k, k + 37) (scalars)
      j.begin = k == 3 ? k : 8 * k;
      j.end = j.begin + (k == 3 ? 37 : 40);
      j.runs = 64;
      j.stride = 200;
    }
    want.push_back(per_run_bytes(j));
    buffers.emplace_back(job_elements(j), 2, 0);
    j.dst = buffers.back().data;
    jobs.push_back(j);
  }
  std::vector<Buffer*> ptrs;
  for (Buffer& b : buffers) ptrs.push_back(&b);
  ASSERT_EQ(grid::plan_launches(jobs, 64).size(), 1u);
  expect_same_as_host(jobs, ptrs, "strided and contiguous jobs");
  for (std::size_t k = 0; k < jobs.size(); ++k)
    ASSERT_EQ(std::memcmp(buffers[k].data, want[k].data(), want[k].size()), 0) << "job " << k;
}

// Bad strides are refused before anything is written, with one line that says why, by the kernel's
// checks and by fill_host alike; fill_host_range takes one run only. A bad job is misuse
// (layerinit::logic_error): the line goes on with the failed condition and its place, cut here.
TEST(FillGrid, RefusesBadStrides) {
  alignas(16) static float buf[64];
  auto message = [](const FillJob& j, bool host) {
    try {
      if (host) fill_host(std::span(&j, 1), 1);
      else grid::fill_grid_simulated(std::span(&j, 1), 1, 32);
    } catch (const layerinit::logic_error& e) {
      // Cut before the failed condition (those met here start with j. or !j.).
      const std::string m = e.what();
      return m.substr(0, std::min(m.find(" (j."), m.find(" (!j.")));
    }
    return std::string("accepted");
  };
  FillJob j = make_fill_job(buf, DType::f32, 1000, 1, "t", FillSpec::normal(0, 1));
  j.end = 8;
  j.runs = 4;
  j.stride = 7;  // < 8: runs overlap
  for (bool host : {false, true}) {
    const std::string who = host ? "fill_host: " : "fill: ";
    j.stride = 7;
    EXPECT_EQ(message(j, host), who + "job of 4 runs of 8 elements with stride 7: runs overlap (stride < run length)");
    j.stride = 1ull << 63;  // 3 * 2^63 + 8 > 2^64
    EXPECT_EQ(message(j, host), who + "job of 4 runs with stride 9223372036854775808 from element 0: its last run ends past 2^64");
    j.stride = (UINT64_MAX - 8) / 3;  // the last run ends exactly at the largest index: accepted by the check
    FillJob k = j;
    k.runs = 1ull << 60;  // runs that touch up to 2^63, but 2^65 bytes of output
    k.stride = 8;
    EXPECT_EQ(message(k, host), who + "job of 1152921504606846976 runs of 8 elements: more than 2^64 bytes");
    k = j;
    k.transposed = true;
    k.rows = 100;
    k.cols = 100;  // 10^4 < the last run's end
    EXPECT_EQ(message(k, host), who + "transposed job needs rows * cols >= end (without overflow)");
    k.runs = 0;  // nothing to fill: nothing checked, nothing written
    EXPECT_EQ(message(k, host), "accepted");
    j.stride = 8;
    EXPECT_EQ(message(j, host), "accepted");  // runs that touch
  }
  EXPECT_THROW(fill_host_range(j, 0, 8), layerinit::logic_error);
  try {
    fill_host_range(j, 0, 8);
  } catch (const layerinit::logic_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("fill_host_range: a job of 4 runs (fill one run: run_job) (j.runs == 1 at ", 0), 0u)
        << e.what();
  }
  j.runs = 1;
  EXPECT_NO_THROW(fill_host_range(j, 0, 8));
}

// run_job: run r's memory elements and dense destination.
TEST(FillGrid, RunJobIsOneRun) {
  alignas(16) static std::uint16_t buf[64];
  FillJob j = make_fill_job(buf, DType::bf16, 1000, 1, "t", FillSpec::normal(0, 1));
  j.begin = 3;
  j.end = 10;
  j.runs = 5;
  j.stride = 100;
  EXPECT_EQ(job_elements(j), 35u);
  const FillJob r = run_job(j, 4);
  EXPECT_EQ(r.runs, 1u);
  EXPECT_EQ(r.begin, 403u);
  EXPECT_EQ(r.end, 410u);
  EXPECT_EQ(r.dst, buf + 28);
  EXPECT_EQ(r.key, j.key);
  j.dst_stride = 16;  // runs 16 apart at dst
  EXPECT_EQ(run_job(j, 4).dst, buf + 64);
  EXPECT_EQ(run_job(j, 4).dst_stride, 0u);
  EXPECT_EQ(dst_span(j), 4 * 16 + 7u);
  j.runs = 0;
  EXPECT_EQ(job_elements(j), 0u);
}
