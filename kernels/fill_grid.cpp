#include <layerinit/kernels/fill_grid.hpp>

#include <climits>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit::grid {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }

// The job's path and its tasks for blocks of `threads` threads.
Job plan_job(const FillJob& job, unsigned threads, std::uint64_t& tasks) {
  Job g;
  FillJob j = job;
  if (j.runs > 1 && j.stride == j.end - j.begin && dst_pitch(j) == j.stride) {  // runs that touch, here and at dst: one run
    j.end = j.begin + j.runs * j.stride;
    j.runs = 1;
    j.dst_stride = 0;
  }
  const std::uint64_t es = dtype_size(j.dtype);
  const std::uint64_t n = elements_per_block(j.dtype);  // = elements per 16-byte vector
  const std::uint64_t len = j.end - j.begin;
  const std::uint64_t count = job_elements(j);
  const auto addr = reinterpret_cast<std::uintptr_t>(j.dst);
  g.job = j;
  const bool constant = j.params.kind == FillKind::constant;  // its values do not care where they sit
  if ((!j.transposed || constant) && j.runs == 1) {
    g.path = Path::vectors;
    g.head = static_cast<std::uint8_t>(std::min<std::uint64_t>(count, (vector_bytes - addr % vector_bytes) % vector_bytes / es));
    g.nvec = (count - g.head) / (vector_bytes / es);
    g.aligned = (j.begin + g.head) % n == 0;
    tasks = std::max<std::uint64_t>(1, ceil_div(g.nvec, vectors_per_thread * threads));
    return g;
  }
  if (!j.transposed || constant) {
    // Several runs, each whole vectors from a 16-byte address and at the same place in its block.
    if (addr % vector_bytes == 0 && len % n == 0 && dst_pitch(j) % n == 0 && (constant || j.stride % n == 0) &&
        len / n < max_run_vectors) {
      g.path = Path::run_vectors;
      g.run_vectors = static_cast<std::uint32_t>(len / n);
      g.nvec = j.runs * g.run_vectors;
      g.gap = (j.stride - len) / n;
      g.dst_gap = (dst_pitch(j) - len) / n;
      g.aligned = j.begin % n == 0;
      g.first_block = j.begin / n;
      tasks = ceil_div(g.nvec, vectors_per_thread * threads);
      return g;
    }
  } else {
    // Tiles need runs that each lie in one memory row, row after row: one run of whole memory rows is
    // such runs, one per row.
    FillJob rows = j;
    if (j.runs == 1 && j.begin % j.rows == 0 && j.end % j.rows == 0) {
      rows.runs = len / j.rows;
      rows.end = j.begin + j.rows;
      rows.stride = j.rows;
      rows.dst_stride = 0;  // dense, as the one run was
    }
    const std::uint64_t row_len = rows.end - rows.begin, r_first = rows.begin % j.rows;
    if (j.cols % n == 0 && rows.runs % n == 0 && rows.stride == j.rows && r_first + row_len <= j.rows &&
        (rows.begin / j.rows) % n == 0 && r_first % n == 0 && row_len % n == 0 && dst_pitch(rows) % n == 0 &&
        addr % vector_bytes == 0) {
      g.job = rows;
      g.path = Path::tiles;
      g.first_block = (r_first * j.cols + rows.begin / j.rows) / n;
      g.nvec = row_len / n;
      tasks = rows.runs / n * ceil_div(g.nvec, tiles_per_thread * threads);
      return g;
    }
  }
  g.path = Path::scalars;
  tasks = ceil_div(count, scalars_per_thread * threads);
  return g;
}

}  // namespace

void check_grid_jobs(std::span<const FillJob> jobs) {
  for (const FillJob& j : jobs) check_fill_job(j, "fill");
}

std::vector<Launch> plan_launches(std::span<const FillJob> jobs, unsigned threads) {
  std::vector<Launch> out;
  for (const FillJob& j : jobs) {
    if (job_elements(j) == 0) continue;
    if (out.empty() || out.back().n_jobs == max_grid_jobs || out.back().dtype != j.dtype) {
      out.emplace_back();
      out.back().dtype = j.dtype;
    }
    Launch& L = out.back();
    std::uint64_t tasks = 0;
    Job g = plan_job(j, threads, tasks);
    g.first_task = L.tasks;
    L.needs_table |= j.params.kind == FillKind::normal || j.params.kind == FillKind::trunc_normal;
    L.tasks += tasks;
    L.jobs[L.n_jobs++] = g;
  }
  return out;
}

void fill_grid_simulated(std::span<const FillJob> jobs, unsigned blocks, unsigned threads) {
  LAYERINIT_EXPECTS(blocks > 0 && threads > 0, "fill_grid_simulated: blocks and threads must be positive");
  check_grid_jobs(jobs);
  const FillTables tab = host_fill_tables();
  for (const Launch& L : plan_launches(jobs, threads)) {
    auto run = [&]<DType T>() {
      for (unsigned b = 0; b < blocks; ++b)
        for (std::uint64_t t = b; t < L.tasks; t += blocks)
          for (unsigned tid = 0; tid < threads; ++tid) run_task<T>(L, t, tid, threads, tab);
    };
    switch (L.dtype) {
      case DType::f32: run.operator()<DType::f32>(); break;
      case DType::f16: run.operator()<DType::f16>(); break;
      case DType::bf16: run.operator()<DType::bf16>(); break;
    }
  }
}

}  // namespace layerinit::grid
