// Per-(dtype, kind) probes of today's generic fill loop, for bench/sass/budget (never linked, never run).
//
// kernels/fill_cuda.cu has one kernel, fill_batch_kernel, whose grid-stride loop serves every dtype and
// fill kind through run-time switches. Each probe below is that same loop with the dtype and the kind
// fixed at compile time (the job slot is copied and its kind overwritten with a constant, so
// element_value's switch folds). Its SASS shows what one (dtype, kind) costs along the code the generic
// loop runs for it, without the other cases: a lower bound for that case inside the generic loop, and
// what specializing alone (with no other change) would give.
//
// This file includes kernels/fill_cuda.cu itself, so it follows the library's code as it changes; once
// the kernel has one store loop per (dtype, kind) the probes are not needed, and when fill_cuda.cu no
// longer has JobSlot / write_unit this file stops compiling and bench/sass/budget says so and goes on.
#include "../../kernels/fill_cuda.cu"

#include <cstddef>

namespace layerinit {
namespace {

// The byte offsets of the fields fill_batch_kernel switches on, as bench/sass/budget's JOBSLOT_FIELDS
// assumes them when it follows one (dtype, kind) through the generic loop. If the layout changes, this
// file stops compiling and the script skips that analysis instead of misreading the SASS.
static_assert(offsetof(JobSlot, job) + offsetof(FillJob, params) + offsetof(FillParams, kind) == 0x30);
static_assert(offsetof(JobSlot, job) + offsetof(FillJob, dtype) == 0x4c);
static_assert(offsetof(JobSlot, job) + offsetof(FillJob, transposed) == 0x4d);
static_assert(sizeof(FillKind) == 1 && sizeof(DType) == 1 && sizeof(bool) == 1);

template <DType T, FillKind K>
__device__ __forceinline__ void sass_probe_loop(const JobSlot* __restrict__ slots,
                                                const std::uint64_t* __restrict__ unit_end, int n_jobs,
                                                std::uint64_t total_units) {
  // fill_batch_kernel's loop, with T and K constants.
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  int k = 0;
  for (std::uint64_t u = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < total_units;
       u += stride) {
    if (u >= unit_end[k]) {
      int lo = k + 1, hi = n_jobs - 1;
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (unit_end[mid] > u) hi = mid;
        else lo = mid + 1;
      }
      k = lo;
    }
    const std::uint64_t r = u - (k == 0 ? 0 : unit_end[k - 1]);
    JobSlot s = slots[k];
    s.job.params.kind = K;
    write_unit<T>(s, r);
  }
}

}  // namespace
}  // namespace layerinit

// extern "C": bench/sass/budget reads dtype and kind off these names (sass_probe_<dtype>_<kind>).
#define LAYERINIT_SASS_PROBE(dt, kd)                                                                          \
  extern "C" __global__ void __launch_bounds__(layerinit::threads_per_block) sass_probe_##dt##_##kd(          \
      const layerinit::JobSlot* __restrict__ slots, const std::uint64_t* __restrict__ unit_end, int n_jobs, \
      std::uint64_t total_units) {                                                                          \
    layerinit::sass_probe_loop<layerinit::DType::dt, layerinit::FillKind::kd>(slots, unit_end, n_jobs,       \
                                                                              total_units);                 \
  }

LAYERINIT_SASS_PROBE(bf16, normal)
LAYERINIT_SASS_PROBE(bf16, trunc_normal)
LAYERINIT_SASS_PROBE(bf16, uniform)
LAYERINIT_SASS_PROBE(f16, normal)
LAYERINIT_SASS_PROBE(f16, trunc_normal)
LAYERINIT_SASS_PROBE(f16, uniform)
LAYERINIT_SASS_PROBE(f32, normal)
LAYERINIT_SASS_PROBE(f32, trunc_normal)
LAYERINIT_SASS_PROBE(f32, uniform)
