// The CUDA fill's work split, in code the host runs too: the kernel in fill_cuda.cu calls run_task for
// each of its blocks' tasks, and fill_grid_simulated runs the very same functions over a simulated grid
// on the CPU, so CI checks the kernel's index logic against fill_host without a GPU.
//
// A launch holds up to max_grid_jobs jobs (passed by value as a __grid_constant__ kernel parameter:
// no allocation and no copy per fill). A job is a 2-level box (FillJob: `runs` runs of memory, dense
// at dst or dst_stride apart), so a shard split in a non-leading dimension, or a layer's slice of a
// stack at axis 1, is one job, not one per row. Each job is cut
// into tasks, one block's work at a time, along one of four paths:
// - vectors (not transposed, one run): scalar head elements up to the first 16-byte aligned address,
//   16-byte vectors (8 fp16/bf16 or 4 fp32 elements: one Philox block each when the job's first vector
//   starts a block, else two), scalar tail elements. A task is `vectors_per_thread` vectors per thread.
// - run vectors (not transposed, several runs of whole vectors: dst 16-byte aligned, run length,
//   stride and dst pitch multiples of the vector's elements): the same store loops over the runs'
//   vectors; each thread finds its run once per task (one division) and walks runs forward by
//   adding, in memory and at dst, so no run needs a head or a tail and no index is divided per
//   vector. A run that starts a block takes the aligned loop.
// - tiles (transposed, memory [cols, rows]: whole groups of n = elements_per_block memory rows, each
//   row's window of logical rows starting at a multiple of n and n-vectors long, dst 16-byte aligned
//   and its pitch whole vectors; one run of whole memory rows counts as runs of rows): a thread takes n memory rows x n logical
//   rows, draws the n blocks of logical (r, c0 .. c0 + n - 1) once and stores n vectors, so no element
//   draws a block of its own and no index is divided per element.
// - scalars (anything else: odd shapes, partial rows of a transposed range, runs that break vectors):
//   element_at per element, runs walked forward by adding.
// The split changes which thread writes an element, never its value.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include <layerinit/core/hd.hpp>
#include <layerinit/dtypes/convert.hpp>
#include <layerinit/kernels/fill_element.hpp>

namespace layerinit::grid {

constexpr int max_grid_jobs = 24;          // keeps the launch parameter under the classic 4 KB
constexpr std::uint64_t vector_bytes = 16;
constexpr std::uint64_t vectors_per_thread = 4;
constexpr std::uint64_t scalars_per_thread = 4;
constexpr std::uint64_t tiles_per_thread = 1;

enum class Path : std::uint8_t { vectors, run_vectors, tiles, scalars };

// Runs of more vectors than this take the scalars path, so the run-vector loops count within a run
// in 32 bits (a run of 2^34 elements with a stride: no model has one).
constexpr std::uint64_t max_run_vectors = 1ull << 31;

// A job as the kernel sees it: what its task functions need, computed once on the host (no division
// by a job's sizes per thread where avoidable). Kept small: max_grid_jobs of them are one parameter.
struct Job {
  FillJob job;                   // tiles: one run of whole memory rows as runs of one row each
  std::uint64_t first_task = 0;  // tasks of the launch's earlier jobs
  std::uint64_t nvec = 0;        // (run) vectors: 16-byte vectors after the head; tiles: logical-row tiles per group
  std::uint64_t gap = 0;         // run vectors: blocks between one run's end and the next's start
  std::uint64_t dst_gap = 0;     // run vectors: vectors at dst between one run's end and the next's start
  std::uint64_t first_block = 0; // run vectors, tiles: the Philox block of the job's first element
  std::uint32_t run_vectors = 0; // run vectors: vectors per run (< max_run_vectors)
  Path path = Path::scalars;
  bool aligned = false;          // (run) vectors: the first vector starts a Philox block
  std::uint8_t head = 0;         // vectors: scalar elements before the first vector (< 16 / element size)
};

// One kernel launch: jobs of one dtype.
struct Launch {
  Job jobs[max_grid_jobs];
  int n_jobs = 0;
  DType dtype = DType::f32;
  bool needs_table = false;  // a job reads the dtype's quantile table (normal or trunc_normal)
  std::uint64_t tasks = 0;
};
// A kernel parameter: within the 4 KB every driver takes (CUDA 12.1+ allows 32 KB on Volta and newer).
static_assert(sizeof(Launch) <= 4096, "grid::Launch must fit a kernel's parameter space");

// The launches for a batch of jobs, for blocks of `threads` threads: the non-empty jobs in order, at
// most max_grid_jobs per launch, one dtype per launch. Checks nothing: callers validate the jobs first
// (check_grid_jobs).
std::vector<Launch> plan_launches(std::span<const FillJob> jobs, unsigned threads);

// 16 bytes as four little-endian words, the lower address first.
struct alignas(16) Vec16 {
  std::uint32_t w[4];
};

// 16 bytes at p (16-byte aligned): one streaming store on the device (STG.E.EF.128: evict-first, the
// bytes are not read again soon), a copy on the host.
LAYERINIT_HD void store16(void* p, const Vec16& v) {
#if defined(__CUDA_ARCH__)
  __stcs(static_cast<uint4*>(p), make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]));
#else
  std::memcpy(p, v.w, 16);
#endif
}

// 8 bytes at p (8-byte aligned), words lo then hi: one streaming store on the device (STG.E.EF.64).
LAYERINIT_HD void store8(void* p, std::uint32_t lo, std::uint32_t hi) {
#if defined(__CUDA_ARCH__)
  __stcs(static_cast<uint2*>(p), make_uint2(lo, hi));
#else
  const std::uint32_t w[2] = {lo, hi};
  std::memcpy(p, w, 8);
#endif
}

template <DType T>
LAYERINIT_HD storage_t<T>* at(const FillJob& j, std::uint64_t m) {
  return static_cast<storage_t<T>*>(j.dst) + (m - j.begin);
}

// Puts storage value x as element k (k < 16 / sizeof) of a 16-byte vector.
template <DType T> LAYERINIT_HD void put(Vec16& v, unsigned k, storage_t<T> x) {
  if constexpr (T == DType::f32) v.w[k] = transforms::as_bits(x);
  else v.w[k >> 1] |= static_cast<std::uint32_t>(x) << ((k & 1u) * 16u);
}

// The random inputs of a straddling vector, elements s .. s + n - 1 of blocks b0 then b1, as one
// block whose element k is the vector's element k (s < n, the same for every vector of a job). Words
// are picked by two levels of selects on s (uniform across the job, so no divergence) and, for 16-bit
// elements, shifted by a half word: selecting the inputs first lets each element be transformed once.
template <DType T>
LAYERINIT_HD rng::Block straddle_window(const rng::Block& b0, const rng::Block& b1, unsigned s) {
  const std::uint32_t seq[8] = {b0.w[0], b0.w[1], b0.w[2], b0.w[3], b1.w[0], b1.w[1], b1.w[2], b1.w[3]};
  const unsigned h = T == DType::f32 ? s : s >> 1;  // whole words to skip, 0..3
  std::uint32_t u[6], v[5];
  LAYERINIT_UNROLL
  for (int i = 0; i < 6; ++i) u[i] = (h & 2u) != 0 ? seq[i + 2] : seq[i];
  LAYERINIT_UNROLL
  for (int i = 0; i < 5; ++i) v[i] = (h & 1u) != 0 ? u[i + 1] : u[i];
  rng::Block w;
  LAYERINIT_UNROLL
  for (int i = 0; i < 4; ++i) {
    if constexpr (T == DType::f32) {
      w.w[i] = v[i];
    } else {  // an odd s starts at the high half of a word
#if defined(__CUDA_ARCH__)
      w.w[i] = __funnelshift_r(v[i], v[i + 1], (s & 1u) * 16u);
#else
      w.w[i] = static_cast<std::uint32_t>(((static_cast<std::uint64_t>(v[i + 1]) << 32) | v[i]) >> ((s & 1u) * 16u));
#endif
    }
  }
  return w;
}

// The 16 bytes of elements [g * n, g * n + n) when they start a block (Aligned: block g), else of
// elements [g * n + s, g * n + s + n), which straddle blocks g and g + 1 (s = the job's first vector's
// offset in its block, the same for every vector of the job). Key and parameters arrive in registers.
template <DType T, FillKind K, bool Aligned>
LAYERINIT_HD void write_vector(const rng::KeySchedule& key, const FillParams& p, std::uint64_t g, unsigned s,
                               storage_t<T>* dst, const FillTables& tab) {
  constexpr unsigned n = elements_per_block(T);
  Vec16 v{};
  const rng::Block b0 = rng::group_bits(key, g);
  if constexpr (Aligned) {
    LAYERINIT_UNROLL
    for (unsigned k = 0; k < n; ++k) put<T>(v, k, block_element<T, K>(p, b0, k, tab));
  } else {
    const rng::Block w = straddle_window<T>(b0, rng::group_bits(key, g + 1), s);
    LAYERINIT_UNROLL
    for (unsigned k = 0; k < n; ++k) put<T>(v, k, block_element<T, K>(p, w, k, tab));
  }
  store16(dst, v);
}

template <DType T, FillKind K>
LAYERINIT_HD void vectors_task(const Job& g, std::uint64_t t, unsigned tid, unsigned threads, const FillTables& tab) {
  constexpr unsigned n = elements_per_block(T);  // = elements per 16-byte vector
  const FillJob& j = g.job;
  // The store loops read only registers: copy what they need out of the job table first.
  rng::KeySchedule key = rng::key_schedule(j.key);
  rng::pin_in_registers(key);
  FillParams p = j.params;
  pin_in_registers(p);
  const std::uint64_t per_task = vectors_per_thread * threads;
  const std::uint64_t v_end = (t + 1) * per_task < g.nvec ? (t + 1) * per_task : g.nvec;
  const std::uint64_t first = j.begin + g.head;  // memory element of vector 0
  const unsigned s = static_cast<unsigned>(first % n);
  const std::uint64_t g0 = first / n;            // block of vector 0's first element
  storage_t<T>* const out = at<T>(j, first);     // vector 0
  std::uint64_t v = t * per_task + tid;
  if (g.aligned) {
    for (; v < v_end; v += threads) write_vector<T, K, true>(key, p, g0 + v, 0, out + v * n, tab);
  } else {
    for (; v < v_end; v += threads) write_vector<T, K, false>(key, p, g0 + v, s, out + v * n, tab);
  }
  if (t == 0) {  // the head and tail scalars, outside the store loops
    const std::uint64_t tail_begin = first + g.nvec * n;
    const std::uint64_t tail = j.end - tail_begin;
    for (std::uint64_t k = tid; k < g.head + tail; k += threads) {
      const std::uint64_t m = k < g.head ? j.begin + k : tail_begin + (k - g.head);
      *at<T>(j, m) = element_at<T>(j, m, tab);
    }
  }
}

// Vectors of a job of several runs, each run_vectors whole vectors: vector v is vector i = v mod
// run_vectors of run r = v / run_vectors, block g0 + r * stride / n + i = g0 + v + r * gap, at dst
// vector v + r * dst_gap. A thread divides once per task, then steps `threads` vectors: q whole runs
// and rem vectors.
template <DType T, FillKind K>
LAYERINIT_HD void run_vectors_task(const Job& g, std::uint64_t t, unsigned tid, unsigned threads, const FillTables& tab) {
  constexpr unsigned n = elements_per_block(T);
  const FillJob& j = g.job;
  rng::KeySchedule key = rng::key_schedule(j.key);
  rng::pin_in_registers(key);
  FillParams p = j.params;
  pin_in_registers(p);
  const std::uint64_t per_task = vectors_per_thread * threads;
  const std::uint64_t v_end = (t + 1) * per_task < g.nvec ? (t + 1) * per_task : g.nvec;
  std::uint64_t v = t * per_task + tid;
  if (v >= v_end) return;
  const unsigned s = static_cast<unsigned>(j.begin % n);
  // The dst pointer walks in bytes (no scaling in the loop): dst_jump bytes between runs.
  std::uint64_t gap = g.gap, dst_jump = g.dst_gap * vector_bytes;
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+l"(gap), "+l"(dst_jump));  // in registers through the loop, as p and key
#endif
  const std::uint32_t per_run = g.run_vectors;
  const std::uint64_t r = v / per_run;
  std::uint32_t i = static_cast<std::uint32_t>(v - r * per_run);  // i + rem < 2^32: both below 2^31
  const std::uint32_t q = threads / per_run, rem = threads - q * per_run;
  const std::uint64_t step = threads + q * gap, dst_step = std::uint64_t{threads} * vector_bytes + q * dst_jump;
  std::uint64_t blk = g.first_block + v + r * gap;
  unsigned char* out = static_cast<unsigned char*>(j.dst) + v * vector_bytes + r * dst_jump;
  // The vectors left in the task, under vectors_per_thread * threads: counted in 32 bits, which pays
  // for the dst pointer's walk.
  const auto left = static_cast<std::uint32_t>(v_end - v);
  // One store loop per alignment (the branch stays outside the loop).
  auto walk = [&](auto aligned) {
    for (std::uint32_t k = 0; k < left; k += threads) {
      write_vector<T, K, decltype(aligned)::value>(key, p, blk, s, reinterpret_cast<storage_t<T>*>(out), tab);
      blk += step;
      out += dst_step;
      i += rem;
      if (i >= per_run) {
        i -= per_run;
        blk += gap;
        out += dst_jump;
      }
    }
  };
  if (g.aligned) walk(std::true_type{});
  else walk(std::false_type{});
}

template <DType T, FillKind K>
LAYERINIT_HD void tiles_task(const Job& g, std::uint64_t t, unsigned tid, unsigned threads, const FillTables& tab) {
  constexpr unsigned n = elements_per_block(T);
  const FillJob& j = g.job;
  rng::KeySchedule key = rng::key_schedule(j.key);
  rng::pin_in_registers(key);
  const FillParams p = j.params;
  // Run c of the job is memory row c_first + c over logical rows [r_first, r_first + len), at dst + c *
  // pitch; a group is n runs.
  const std::uint64_t pitch = dst_pitch(j);
  const std::uint64_t per_task = tiles_per_thread * threads;       // logical-row tiles per task
  const std::uint64_t tasks_per_group = (g.nvec + per_task - 1) / per_task;
  const std::uint64_t group = t / tasks_per_group;
  const std::uint64_t rt_begin = (t % tasks_per_group) * per_task;
  const std::uint64_t rt_end = rt_begin + per_task < g.nvec ? rt_begin + per_task : g.nvec;
  // Logical (r_first + r, c) is element (r_first + r) * cols + c: block r * (cols / n) + the block of
  // (r_first, c), and c = c_first + group * n adds group to the job's first block.
  const std::uint64_t blocks_per_row = j.cols / n, block0 = g.first_block + group;
  storage_t<T>* const row0 = static_cast<storage_t<T>*>(j.dst) + group * n * pitch;  // memory row c0
  // Tile rt: logical rows r_first + rt * n .. + n - 1 (memory columns), memory rows c0 .. c0 + n - 1
  // (c0 = c_first + group * n); its first block and its place in memory row c0, stepped per tile.
  std::uint64_t rt = rt_begin + tid;
  storage_t<T>* out = row0 + rt * n;
  // The tile's blocks and its rows at dst are walked by adding (bpr blocks, pitch elements apart), both
  // steps opaque to the device compiler, which would otherwise hold n precomputed 64-bit offsets through
  // the loop. And a tile is made in two halves: blocks (logical rows) h n/2 .. h n/2 + n/2 - 1 make bytes
  // 8h .. 8h + 7 of each of its n vectors, stored as they are done, so a thread holds 2n words, not 4n.
  // Both keep the loop in the 80 registers of a 768-thread block (kernels/fill_cuda.cu) without spilling
  // (the whole tile spilled there; at 64 registers, 1024 threads, fp16/bf16 halves still spill a word).
  std::uint64_t bpr = blocks_per_row, row_step = pitch;
#if defined(__CUDA_ARCH__)
  asm volatile("" : "+l"(bpr), "+l"(row_step));
#endif
  std::uint64_t blk = rt * n * bpr + block0;
  if (rt >= rt_end) return;
  // The tiles left in the task (fewer than tiles_per_thread * threads): counted in 32 bits.
  const auto left = static_cast<std::uint32_t>(rt_end - rt);
  for (std::uint32_t i = 0; i < left; i += threads, out += std::uint64_t{threads} * n, blk += std::uint64_t{threads} * n * bpr) {
    std::uint64_t b_k = blk;
    LAYERINIT_UNROLL
    for (unsigned h = 0; h < 2; ++h) {
      Vec16 v[n] = {};  // v[q]: memory row c0 + q (words 2h, 2h + 1)
      LAYERINIT_UNROLL
      for (unsigned k = h * n / 2; k < (h + 1) * n / 2; ++k, b_k += bpr) {
        const rng::Block b = rng::group_bits(key, b_k);
        LAYERINIT_UNROLL
        for (unsigned q = 0; q < n; ++q) put<T>(v[q], k, block_element<T, K>(p, b, q, tab));
      }
      storage_t<T>* row = out + h * n / 2;
      LAYERINIT_UNROLL
      for (unsigned q = 0; q < n; ++q, row += row_step) store8(row, v[q].w[2 * h], v[q].w[2 * h + 1]);
    }
  }
}

template <DType T>
LAYERINIT_HD void scalars_task(const Job& g, std::uint64_t t, unsigned tid, unsigned threads, const FillTables& tab) {
  const FillJob& j = g.job;
  const std::uint64_t per_task = scalars_per_thread * threads;
  if (j.runs == 1) {
    const std::uint64_t m_end = j.begin + ((t + 1) * per_task < j.end - j.begin ? (t + 1) * per_task : j.end - j.begin);
    for (std::uint64_t m = j.begin + t * per_task + tid; m < m_end; m += threads)
      *at<T>(j, m) = element_at<T>(j, logical_index(j, m), tab);
    return;
  }
  // Element k of the runs is element i = k mod len of run r = k / len, memory element begin + r *
  // stride + i, dst element r * pitch + i: divided once per task, then walked forward `threads`
  // elements at a time (q runs and rem).
  const std::uint64_t len = j.end - j.begin, count = job_elements(j);
  const std::uint64_t k_end = (t + 1) * per_task < count ? (t + 1) * per_task : count;
  std::uint64_t k = t * per_task + tid;
  if (k >= k_end) return;
  const std::uint64_t r = k / len, jump = j.stride - len, dst_jump = dst_pitch(j) - len;
  std::uint64_t i = k - r * len, m = j.begin + r * j.stride + i;
  const std::uint64_t q = threads / len, rem = threads - q * len, step = threads + q * jump, dst_step = threads + q * dst_jump;
  storage_t<T>* out = static_cast<storage_t<T>*>(j.dst) + r * dst_pitch(j) + i;
  for (; k < k_end; k += threads) {
    *out = element_at<T>(j, logical_index(j, m), tab);
    m += step;
    out += dst_step;
    i += rem;
    if (i >= len) {
      i -= len;
      m += jump;
      out += dst_jump;
    }
  }
}

template <DType T, FillKind K>
LAYERINIT_HD void run_task_kind(const Job& g, std::uint64_t t, unsigned tid, unsigned threads, const FillTables& tab) {
  switch (g.path) {
    case Path::vectors: vectors_task<T, K>(g, t, tid, threads, tab); break;
    case Path::run_vectors: run_vectors_task<T, K>(g, t, tid, threads, tab); break;
    case Path::tiles: tiles_task<T, K>(g, t, tid, threads, tab); break;
    default: scalars_task<T>(g, t, tid, threads, tab); break;
  }
}

// Task t of the launch, as thread tid of `threads`. The job search and the kind switch are uniform
// across the block and happen once per task, outside the store loops.
template <DType T>
LAYERINIT_HD void run_task(const Launch& L, std::uint64_t t, unsigned tid, unsigned threads, const FillTables& tab) {
  int lo = 0, hi = L.n_jobs - 1;  // the last job with first_task <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (L.jobs[mid].first_task <= t) lo = mid;
    else hi = mid - 1;
  }
  const Job& g = L.jobs[lo];
  const std::uint64_t r = t - g.first_task;
  switch (g.job.params.kind) {
    case FillKind::normal: run_task_kind<T, FillKind::normal>(g, r, tid, threads, tab); break;
    case FillKind::trunc_normal: run_task_kind<T, FillKind::trunc_normal>(g, r, tid, threads, tab); break;
    case FillKind::uniform: run_task_kind<T, FillKind::uniform>(g, r, tid, threads, tab); break;
    default: run_task_kind<T, FillKind::constant>(g, r, tid, threads, tab); break;
  }
}

// Runs every launch of plan_launches(jobs, threads) on the host as a grid of `blocks` blocks of
// `threads` threads would (each block's tasks in grid-stride order; threads one after another), with
// the host's tables. Validates the jobs like fill_cuda. The bytes equal fill_host's for any blocks and
// threads; the tests use it to check the kernel's index logic without a GPU.
void fill_grid_simulated(std::span<const FillJob> jobs, unsigned blocks, unsigned threads);

// fill_cuda's and fill_grid_simulated's checks of a batch (check_fill_job): layerinit::logic_error.
void check_grid_jobs(std::span<const FillJob> jobs);

}  // namespace layerinit::grid
