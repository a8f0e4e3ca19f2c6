#include <layerinit/kernels/fill_host.hpp>

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <thread>
#include <vector>

#include <layerinit/core/cpus.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/dtypes/convert.hpp>
#include <layerinit/kernels/fill_element.hpp>
#include <layerinit/kernels/fill_host_seams.hpp>

namespace layerinit {

namespace detail {
void fill_range_baseline(const FillJob& j, std::uint64_t b, std::uint64_t e);
void fill_tile_baseline(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1);
#if LAYERINIT_HOST_ISA_X86_64
void fill_range_x86_64_v3(const FillJob& j, std::uint64_t b, std::uint64_t e);
void fill_range_x86_64_v4(const FillJob& j, std::uint64_t b, std::uint64_t e);
void fill_tile_x86_64_v3(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1);
void fill_tile_x86_64_v4(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1);
#endif
}  // namespace detail

namespace {

using range_fn = void (*)(const FillJob&, std::uint64_t, std::uint64_t);
using tile_fn = void (*)(const FillJob&, std::uint64_t, std::uint64_t, std::uint64_t);

range_fn range_for(HostIsa isa) {
  switch (isa) {
#if LAYERINIT_HOST_ISA_X86_64
    case HostIsa::x86_64_v3: return detail::fill_range_x86_64_v3;
    case HostIsa::x86_64_v4: return detail::fill_range_x86_64_v4;
#endif
    default: return detail::fill_range_baseline;
  }
}

tile_fn tile_for(HostIsa isa) {
  switch (isa) {
#if LAYERINIT_HOST_ISA_X86_64
    case HostIsa::x86_64_v3: return detail::fill_tile_x86_64_v3;
    case HostIsa::x86_64_v4: return detail::fill_tile_x86_64_v4;
#endif
    default: return detail::fill_tile_baseline;
  }
}

constexpr std::uint64_t chunk_elements = 1u << 16;  // a multiple of 8: chunks hold whole blocks

fill_thread_start_hook g_thread_start_hook = nullptr;

// A chunk of one job: memory elements [b, e) of each of the job's runs [r0, r1) (offsets from the
// run's start), or for a transposed job a tile: memory rows c0 .. c0+n-1 (n elements per block) over
// logical rows [b, e).
struct Chunk {
  std::size_t job;
  std::uint64_t b, e;
  std::uint64_t r0 = 0, r1 = 1;
  bool tile = false;
  std::uint64_t c0 = 0;
};

// Whether fill_host cuts a job into tiles: transposed with whole blocks along each logical row, and
// either one run or runs that each lie in one memory row, row after row (a window of memory [cols, rows]).
bool tiled(const FillJob& j) {
  return j.transposed && j.params.kind != FillKind::constant && j.cols % elements_per_block(j.dtype) == 0 &&
         (j.runs == 1 || (j.stride == j.rows && j.begin % j.rows + (j.end - j.begin) <= j.rows));
}

// The job the tile loops see for a tiled job. One run: the job itself. Runs of memory rows
// c_begin .. c_begin + runs - 1, each over logical rows [r_begin, r_begin + len) and `pitch` =
// dst_pitch apart at dst: a job whose memory rows are `pitch` long (rows = pitch) from element
// c_begin * pitch + r_begin. The tile loops place logical (r, c) at memory element c * rows + r and
// draw its block from r * cols + c, which cols alone decides; so with rows = pitch, element (r, c) of
// the window lands at dst + (c - c_begin) * pitch + (r - r_begin), with the same values. add_tiles
// gives them only the window's logical rows, and since pitch >= len, memory rows outside the window
// fail their [begin, end) test: nothing lands in the gaps between runs.
FillJob tile_job(const FillJob& j) {
  if (j.runs == 1) return j;
  const std::uint64_t pitch = dst_pitch(j), c_begin = j.begin / j.rows, r_begin = j.begin % j.rows;
  FillJob v = j;
  v.runs = 1;
  v.dst_stride = 0;
  v.rows = pitch;
  v.begin = c_begin * pitch + r_begin;
  v.end = v.begin + dst_span(j);
  return v;
}

// The tiles of a tiled job: per group of n memory rows, the logical rows it needs, cut into chunks of
// about chunk_elements elements. One run: group_rows; runs of memory rows: the same window of
// logical rows in every group.
void add_tiles(std::vector<Chunk>& chunks, std::size_t k, const FillJob& j) {
  const std::uint64_t n = elements_per_block(j.dtype);
  const std::uint64_t c_first = j.begin / j.rows;
  const std::uint64_t c_last = j.runs == 1 ? (j.end - 1) / j.rows : c_first + j.runs - 1;
  const std::uint64_t rows_per_chunk = chunk_elements / n;
  for (std::uint64_t c0 = c_first - c_first % n; c0 <= c_last; c0 += n) {
    const RowRange rr = j.runs == 1 ? group_rows(j, n, c0, j.begin, j.end) : RowRange{j.begin % j.rows, j.begin % j.rows + (j.end - j.begin)};
    for (std::uint64_t r = rr.r0; r < rr.r1; r += std::min(rows_per_chunk, rr.r1 - r))
      chunks.push_back({k, r, std::min(rr.r1, r + rows_per_chunk), 0, 1, true, c0});
  }
}

// The chunks of a job that is not tiled. Runs of at least chunk_elements: each cut at multiples of
// chunk_elements of the tensor's memory index, so a chunk never splits a block that the next one
// needs; shorter runs: whole runs, about chunk_elements elements per chunk, so a shard of many short
// rows costs one chunk per chunk_elements, not one per row.
void add_runs(std::vector<Chunk>& chunks, std::size_t k, const FillJob& j) {
  const std::uint64_t len = j.end - j.begin;
  if (j.runs > 1 && len < chunk_elements) {
    const std::uint64_t per = chunk_elements / len;
    for (std::uint64_t r = 0; r < j.runs; r += std::min(per, j.runs - r))
      chunks.push_back({k, 0, len, r, r + std::min(per, j.runs - r)});
    return;
  }
  for (std::uint64_t r = 0; r < j.runs; ++r) {
    const std::uint64_t start = j.begin + r * j.stride, stop = start + len;
    for (std::uint64_t b = start; b < stop;) {
      const std::uint64_t e = std::min(stop, (b / chunk_elements + 1) * chunk_elements);
      chunks.push_back({k, b - start, e - start, r, r + 1});
      b = e;
    }
  }
}

}  // namespace

std::string_view host_isa_name(HostIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case HostIsa::baseline: return "x86-64";
#elif defined(__aarch64__)
    case HostIsa::baseline: return "aarch64";  // armv8-a: NEON, the one level built there
#else
    case HostIsa::baseline: return "baseline";
#endif
    case HostIsa::x86_64_v3: return "x86-64-v3";
    case HostIsa::x86_64_v4: return "x86-64-v4";
  }
  return "?";
}

std::vector<HostIsa> supported_host_isas() {
  std::vector<HostIsa> out{HostIsa::baseline};
#if LAYERINIT_HOST_ISA_X86_64
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
                  __builtin_cpu_supports("bmi2");
  if (v3) out.push_back(HostIsa::x86_64_v3);
  if (v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    out.push_back(HostIsa::x86_64_v4);
#endif
  return out;
}

HostIsa best_host_isa() {
  static const HostIsa best = supported_host_isas().back();
  return best;
}

void set_fill_thread_start_hook(fill_thread_start_hook hook) noexcept { g_thread_start_hook = hook; }

int default_thread_count() { return usable_cpu_count(); }

void fill_host_range(const FillJob& j, std::uint64_t b, std::uint64_t e) { fill_host_range(j, b, e, best_host_isa()); }

namespace {
// Memory elements [b, e) of a one-run job, checked by the caller.
void fill_checked_range(const FillJob& j, std::uint64_t b, std::uint64_t e, HostIsa isa) {
  if (j.params.kind == FillKind::constant) {
    auto fill_constant = [&]<DType T>() {
      auto* out = static_cast<storage_t<T>*>(j.dst);
      std::fill(out + (b - j.begin), out + (e - j.begin), to_storage<T>(j.params.shift));
    };
    switch (j.dtype) {
      case DType::f32: fill_constant.operator()<DType::f32>(); break;
      case DType::f16: fill_constant.operator()<DType::f16>(); break;
      case DType::bf16: fill_constant.operator()<DType::bf16>(); break;
    }
    return;
  }
  range_for(isa)(j, b, e);
}
}  // namespace

void fill_host_range(const FillJob& j, std::uint64_t b, std::uint64_t e, HostIsa isa) {
  LAYERINIT_EXPECTS(j.runs == 1, "fill_host_range: a job of " + std::to_string(j.runs) + " runs (fill one run: run_job)");
  LAYERINIT_EXPECTS(b >= j.begin && e <= j.end && b <= e, "fill_host_range: range outside the job");
  // The same preconditions as fill_cuda: rows * cols checked without wrapping around 2^64, and a dst
  // to write through whenever there is something to write.
  LAYERINIT_EXPECTS(!j.transposed || (j.rows != 0 && j.cols != 0 && j.rows <= UINT64_MAX / j.cols && j.rows * j.cols >= j.end),
                    "fill_host_range: transposed job needs rows * cols >= end (without overflow)");
  if (b == e) return;
  LAYERINIT_EXPECTS(j.dst != nullptr, "fill_host_range: job with a null dst");
  LAYERINIT_EXPECTS(reinterpret_cast<std::uintptr_t>(j.dst) % dtype_size(j.dtype) == 0,
                    "fill_host_range: dst is not aligned to its element size");
  static const std::vector<HostIsa> supported = supported_host_isas();
  LAYERINIT_EXPECTS(std::find(supported.begin(), supported.end(), isa) != supported.end(),
                    "fill_host_range: this CPU cannot run " + std::string(host_isa_name(isa)) + " code");
  fill_checked_range(j, b, e, isa);
}

namespace {
// A chunk of a job fill_host has checked (check_fill_job).
void run_chunk(const FillJob& j, const Chunk& c) {
  const HostIsa isa = best_host_isa();
  if (c.tile) return tile_for(isa)(tile_job(j), c.c0, c.b, c.e);
  for (std::uint64_t r = c.r0; r < c.r1; ++r) {
    const FillJob run = j.runs == 1 ? j : run_job(j, r);
    fill_checked_range(run, run.begin + c.b, run.begin + c.e, isa);
  }
}
}  // namespace

void fill_host(std::span<const FillJob> jobs, int threads) {
  if (threads <= 0) threads = default_thread_count();
  std::vector<Chunk> chunks;
  std::uint64_t total = 0;
  for (const FillJob& j : jobs) check_fill_job(j, "fill_host");  // before anything is written
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const FillJob& j = jobs[k];
    if (job_elements(j) == 0) continue;
    if (tiled(j)) add_tiles(chunks, k, j);
    else add_runs(chunks, k, j);
    total += job_elements(j);
  }
  const std::size_t n_threads =
      std::min<std::size_t>(static_cast<std::size_t>(threads), std::max<std::size_t>(1, chunks.size()));
  if (n_threads <= 1 || total < chunk_elements) {
    for (const Chunk& c : chunks) run_chunk(jobs[c.job], c);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (std::size_t i = next++; i < chunks.size() && !failed; i = next++) {
      try {
        run_chunk(jobs[chunks[i].job], chunks[i]);
      } catch (...) {
        if (!failed.exchange(true)) failure = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n_threads - 1);
  for (std::size_t t = 1; t < n_threads; ++t) {
    // A thread that cannot start (EAGAIN under a pids limit, no memory for its stack) must not
    // unwind past the joinable threads already running (std::terminate): go on with those. The
    // calling thread always works, and the bytes do not depend on the thread count.
    try {
      if (g_thread_start_hook) g_thread_start_hook(t);
      pool.emplace_back(worker);
    } catch (...) {
      break;
    }
  }
  worker();
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace layerinit
