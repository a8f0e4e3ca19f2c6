// The CUDA fill: every job of a batch in one launch, with the values of kernels/fill.hpp.
// Work split. Each job's memory is cut into units: a non-transposed job into scalar head elements up
// to the first 16-byte aligned address, then 16-byte vectors (8 fp16/bf16 or 4 fp32 elements), then
// scalar tail elements; a transposed job into one scalar unit per element (memory neighbours are `rows`
// apart logically, so they share no Philox block). The units of all jobs are numbered one after the
// other; a grid-stride loop walks them and finds each unit's job in a prefix table of unit counts.
//
// Values. Element i of a job takes word (i mod 4) of group_bits(key, i / 4) through element_value and
// to_storage, as fill_host does; no other arithmetic touches it, so the bytes are the host's bytes.
// A vector starting at memory (= logical) index m0 needs the blocks of groups m0/4 .. (m0+n-1)/4: two
// for 8 elements (one for 4) when m0 is a multiple of 4, else one more. m0 mod 4 is the same for every
// vector of a job, so the extra block is a uniform branch within a job.
// First: philox.hpp sets cuRAND's QUALIFIERS to __host__ __device__ before any cuRAND header.
#include <layerinit/kernels/philox.hpp>

#include <layerinit/kernels/fill_cuda.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

#include <layerinit/dtypes/convert.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/core/cuda_check.hpp>
#include <layerinit/core/errors.hpp>

namespace layerinit {

namespace {

constexpr int threads_per_block = 256;
constexpr std::uint64_t vector_bytes = 16;

// One job as the kernel sees it, with its split into units (non-transposed jobs):
// units = head + nvec + tail, tail = (end - begin) - head - nvec * elements_per_vector.
struct JobSlot {
  FillJob job;
  std::uint64_t head = 0;  // scalar elements before the first 16-byte aligned address
  std::uint64_t nvec = 0;  // 16-byte vectors after them
};

// ----------------------------------------------------------------------------------------------------
// Kernels

__device__ __forceinline__ std::uint32_t pick_word(const rng::Block& b, std::uint64_t k) {
  // Selects instead of b.w[k & 3]: a dynamic index would put the block in local memory.
  const unsigned s = static_cast<unsigned>(k & 3);
  return s == 0 ? b.w[0] : (s == 1 ? b.w[1] : (s == 2 ? b.w[2] : b.w[3]));
}

// Memory element m of job j, on its own.
template <DType T>
__device__ __forceinline__ void write_scalar(const FillJob& j, std::uint64_t m) {
  std::uint32_t bits = 0;  // element_value ignores the bits of a constant
  if (j.params.kind != FillKind::constant) {
    const std::uint64_t i = logical_index(j, m);
    bits = pick_word(rng::group_bits(j.key, i >> 2), i);
  }
  static_cast<storage_t<T>*>(j.dst)[m - j.begin] = to_storage<T>(element_value(j.params, bits));
}

// The 16 bytes of memory elements [m0, m0 + n) of a non-transposed job j; their address is 16-byte
// aligned.
template <DType T>
__device__ __forceinline__ void write_vector(const FillJob& j, std::uint64_t m0) {
  constexpr int n = static_cast<int>(vector_bytes / sizeof(storage_t<T>));  // 4 (fp32) or 8
  constexpr int nb = n / 4;                                                  // blocks when m0 % 4 == 0
  storage_t<T> v[n];
  if (j.params.kind == FillKind::constant) {
    const storage_t<T> c = to_storage<T>(j.params.shift);
#pragma unroll
    for (int k = 0; k < n; ++k) v[k] = c;
  } else {
    const std::uint64_t g0 = m0 >> 2;
    const unsigned s = static_cast<unsigned>(m0 & 3);  // element m0 + k is word s + k of w
    std::uint32_t w[n + 4];
#pragma unroll
    for (int b = 0; b < nb; ++b) {
      const rng::Block blk = rng::group_bits(j.key, g0 + b);
#pragma unroll
      for (int q = 0; q < 4; ++q) w[4 * b + q] = blk.w[q];
    }
    if (s != 0) {
      const rng::Block blk = rng::group_bits(j.key, g0 + nb);
#pragma unroll
      for (int q = 0; q < 4; ++q) w[4 * nb + q] = blk.w[q];
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) w[4 * nb + q] = 0u;
    }
#pragma unroll
    for (int k = 0; k < n; ++k) {
      const std::uint32_t bits = s == 0 ? w[k] : (s == 1 ? w[k + 1] : (s == 2 ? w[k + 2] : w[k + 3]));
      v[k] = to_storage<T>(element_value(j.params, bits));
    }
  }
  uint4 out;
  if constexpr (T == DType::f32) {
    out = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  } else {
    // Little-endian: the element at the lower address is the low half of each word.
    auto pair = [&](int k) { return static_cast<std::uint32_t>(v[k]) | (static_cast<std::uint32_t>(v[k + 1]) << 16); };
    out = make_uint4(pair(0), pair(2), pair(4), pair(6));
  }
  *reinterpret_cast<uint4*>(static_cast<storage_t<T>*>(j.dst) + (m0 - j.begin)) = out;
}

// Unit r (counted from the job's first unit) of one job.
template <DType T>
__device__ __forceinline__ void write_unit(const JobSlot& s, std::uint64_t r) {
  constexpr std::uint64_t n = vector_bytes / sizeof(storage_t<T>);
  const FillJob& j = s.job;
  if (j.transposed || r < s.head) {
    write_scalar<T>(j, j.begin + r);
  } else if (r - s.head < s.nvec) {
    write_vector<T>(j, j.begin + s.head + (r - s.head) * n);
  } else {
    write_scalar<T>(j, j.begin + s.head + s.nvec * n + (r - s.head - s.nvec));
  }
}

// unit_end[k]: units of jobs 0..k together (strictly increasing: empty jobs are left out).
__global__ void __launch_bounds__(threads_per_block)
    fill_batch_kernel(const JobSlot* __restrict__ slots, const std::uint64_t* __restrict__ unit_end, int n_jobs,
                      std::uint64_t total_units) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  int k = 0;  // the job of this thread's previous unit; units only grow, so the search starts there
  for (std::uint64_t u = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < total_units;
       u += stride) {
    if (u >= unit_end[k]) {  // the job is in (k, n_jobs): the first with unit_end > u
      int lo = k + 1, hi = n_jobs - 1;
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (unit_end[mid] > u) hi = mid;
        else lo = mid + 1;
      }
      k = lo;
    }
    const std::uint64_t r = u - (k == 0 ? 0 : unit_end[k - 1]);
    const JobSlot& s = slots[k];
    switch (s.job.dtype) {
      case DType::f32: write_unit<DType::f32>(s, r); break;
      case DType::f16: write_unit<DType::f16>(s, r); break;
      case DType::bf16: write_unit<DType::bf16>(s, r); break;
    }
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------------
// Launchers

void fill_cuda(std::span<const FillJob> jobs, cudaStream_t stream) {
  // Preconditions, and each job's units.
  std::vector<JobSlot> slots;
  std::vector<std::uint64_t> unit_end;
  std::uint64_t total_units = 0;
  for (const FillJob& j : jobs) {
    LAYERINIT_EXPECTS(j.end >= j.begin, "fill_cuda: job with end < begin");
    if (j.end == j.begin) continue;
    LAYERINIT_EXPECTS(j.dtype == DType::f32 || j.dtype == DType::f16 || j.dtype == DType::bf16,
                      "fill_cuda: unknown dtype");
    LAYERINIT_EXPECTS(j.dst != nullptr, "fill_cuda: job with a null dst");
    const std::uint64_t es = dtype_size(j.dtype);
    const auto addr = reinterpret_cast<std::uintptr_t>(j.dst);
    LAYERINIT_EXPECTS(addr % es == 0, "fill_cuda: dst is not aligned to its element size");
    if (j.transposed)
      LAYERINIT_EXPECTS(j.rows > 0 && j.cols > 0 && j.rows <= UINT64_MAX / j.cols && j.rows * j.cols >= j.end,
                        "fill_cuda: transposed job needs rows * cols >= end");
    const std::uint64_t n = j.end - j.begin;
    JobSlot s;
    s.job = j;
    std::uint64_t units = n;
    if (!j.transposed) {
      const std::uint64_t per_vector = vector_bytes / es;
      const std::uint64_t head_bytes = (vector_bytes - addr % vector_bytes) % vector_bytes;  // multiple of es
      s.head = std::min<std::uint64_t>(n, head_bytes / es);
      s.nvec = (n - s.head) / per_vector;
      units = n - s.nvec * (per_vector - 1);
    }
    slots.push_back(s);
    total_units += units;
    unit_end.push_back(total_units);
  }
  if (slots.empty()) return;
  LAYERINIT_EXPECTS(slots.size() <= static_cast<std::size_t>(INT_MAX), "fill_cuda: too many jobs in one batch");

  // The job table: slots, then unit_end, in the device's default stream-ordered pool (kernels/ sits
  // below memory/, so it takes no resource). cudaMemcpyAsync from pageable memory returns once the
  // source is staged, so the host vector may die right after; the table is freed in stream order.
  const std::size_t slot_bytes = slots.size() * sizeof(JobSlot);
  const std::size_t table_bytes = slot_bytes + unit_end.size() * sizeof(std::uint64_t);
  std::vector<unsigned char> host_table(table_bytes);
  std::memcpy(host_table.data(), slots.data(), slot_bytes);
  std::memcpy(host_table.data() + slot_bytes, unit_end.data(), unit_end.size() * sizeof(std::uint64_t));
  void* table = nullptr;
  LAYERINIT_CUDA_TRY(cudaMallocAsync(&table, table_bytes, stream));
  struct FreeTable {
    void* p;
    cudaStream_t s;
    ~FreeTable() { LAYERINIT_CUDA_TRY_NOTHROW(cudaFreeAsync(p, s)); }
  } free_table{table, stream};
  LAYERINIT_CUDA_TRY(cudaMemcpyAsync(table, host_table.data(), table_bytes, cudaMemcpyHostToDevice, stream));
  const auto* d_slots = static_cast<const JobSlot*>(table);
  const auto* d_unit_end = reinterpret_cast<const std::uint64_t*>(static_cast<const unsigned char*>(table) + slot_bytes);

  // Grid: enough blocks to fill the device once (grid-stride beyond), fewer for small batches.
  int device = 0, sms = 0, blocks_per_sm = 0;
  LAYERINIT_CUDA_TRY(cudaGetDevice(&device));
  LAYERINIT_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  LAYERINIT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, fill_batch_kernel, threads_per_block, 0));
  const std::uint64_t resident = static_cast<std::uint64_t>(std::max(sms, 1)) * static_cast<std::uint64_t>(std::max(blocks_per_sm, 1));
  const std::uint64_t needed = (total_units + threads_per_block - 1) / threads_per_block;
  const auto blocks = static_cast<unsigned>(std::min(needed, resident));

  fill_batch_kernel<<<blocks, threads_per_block, 0, stream>>>(d_slots, d_unit_end, static_cast<int>(slots.size()),
                                                              total_units);
  LAYERINIT_CUDA_TRY(cudaGetLastError());
}

std::string fill_cuda_check_device() noexcept {
  try {
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, fill_batch_kernel);
    if (e == cudaSuccess) return {};
    (void)cudaGetLastError();
    return std::string("the fill kernel cannot run on this device: ") + cudaGetErrorString(e);
  } catch (...) {
    return "the fill kernel cannot run on this device";
  }
}

}  // namespace layerinit
