// The CUDA kernel's work split without a GPU: grid::fill_grid_simulated runs the kernel's own task
// functions (kernels/fill_grid.hpp) over a simulated grid on the CPU, and its bytes must be the host
// fill's for every path (vectors, tiles, scalars), start offset, grid shape and index range.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <layerinit/dtypes/convert.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/kernels/fill_grid.hpp>
#include <layerinit/kernels/fill_host.hpp>
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
const Grid kGrids[] = {{1, 32}, {3, 64}, {7, 512}};

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
  EXPECT_THROW(grid::fill_grid_simulated({&j, 1}, 1, 32), std::invalid_argument);
  j.dst = reinterpret_cast<unsigned char*>(buf) + 2;
  EXPECT_THROW(grid::fill_grid_simulated({&j, 1}, 1, 32), std::invalid_argument);
  j.dst = buf;
  j.transposed = true;
  j.rows = (1ull << 32) + 1;
  j.cols = 1ull << 32;
  EXPECT_THROW(grid::fill_grid_simulated({&j, 1}, 1, 32), std::invalid_argument);
  EXPECT_THROW(grid::fill_grid_simulated({}, 0, 32), std::invalid_argument);
}
