#include <layerinit/kernels/fill_grid.hpp>

#include <climits>
#include <stdexcept>

#include <layerinit/core/errors.hpp>

namespace layerinit::grid {

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }

Job plan_job(const FillJob& j, unsigned threads) {
  Job g;
  g.job = j;
  const std::uint64_t es = dtype_size(j.dtype);
  const std::uint64_t n = elements_per_block(j.dtype);
  const std::uint64_t count = j.end - j.begin;
  const auto addr = reinterpret_cast<std::uintptr_t>(j.dst);
  if (!j.transposed || j.params.kind == FillKind::constant) {  // a constant's values do not care where they sit
    g.path = Path::vectors;
    g.head = std::min<std::uint64_t>(count, (vector_bytes - addr % vector_bytes) % vector_bytes / es);
    g.nvec = (count - g.head) / (vector_bytes / es);
    g.aligned = (j.begin + g.head) % n == 0;
    g.tasks = std::max<std::uint64_t>(1, ceil_div(g.nvec, vectors_per_thread * threads));
    return g;
  }
  // Memory element 0 of the tensor sits begin elements before dst (mod 16 is all that matters).
  const std::uint64_t base = static_cast<std::uint64_t>(addr) - j.begin * es;
  const std::uint64_t group = j.rows * n;  // elements of n memory rows; rows * n <= rows * cols
  if (j.cols % n == 0 && j.rows % n == 0 && base % vector_bytes == 0 && j.begin % group == 0 && j.end % group == 0) {
    g.path = Path::tiles;
    g.nvec = j.rows / n;
    g.groups = count / group;
    g.tasks = g.groups * ceil_div(g.nvec, tiles_per_thread * threads);
    return g;
  }
  g.path = Path::scalars;
  g.tasks = ceil_div(count, scalars_per_thread * threads);
  return g;
}

}  // namespace

void check_grid_jobs(std::span<const FillJob> jobs) {
  for (const FillJob& j : jobs) {
    LAYERINIT_EXPECTS(j.end >= j.begin, "fill: job with end < begin");
    if (j.end == j.begin) continue;
    LAYERINIT_EXPECTS(j.dtype == DType::f32 || j.dtype == DType::f16 || j.dtype == DType::bf16, "fill: unknown dtype");
    LAYERINIT_EXPECTS(j.dst != nullptr, "fill: job with a null dst");
    LAYERINIT_EXPECTS(reinterpret_cast<std::uintptr_t>(j.dst) % dtype_size(j.dtype) == 0,
                      "fill: dst is not aligned to its element size");
    if (j.transposed)
      LAYERINIT_EXPECTS(j.rows > 0 && j.cols > 0 && j.rows <= UINT64_MAX / j.cols && j.rows * j.cols >= j.end,
                        "fill: transposed job needs rows * cols >= end");
  }
}

std::vector<Launch> plan_launches(std::span<const FillJob> jobs, unsigned threads) {
  std::vector<Launch> out;
  for (const FillJob& j : jobs) {
    if (j.end == j.begin) continue;
    if (out.empty() || out.back().n_jobs == max_grid_jobs || out.back().dtype != j.dtype) {
      out.emplace_back();
      out.back().dtype = j.dtype;
    }
    Launch& L = out.back();
    Job g = plan_job(j, threads);
    g.first_task = L.tasks;
    L.needs_table |= j.params.kind == FillKind::normal || j.params.kind == FillKind::trunc_normal;
    L.tasks += g.tasks;
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
