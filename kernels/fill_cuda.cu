// The CUDA fill: every job of a batch in as few launches as the batch has dtypes (more past
// grid::max_grid_jobs jobs), with the values of kernels/fill.hpp.
// The work split lives in kernels/fill_grid.hpp, shared with the host simulation the tests run; this
// file adds the device tables, the kernels and their launch.
// First: philox.hpp sets cuRAND's QUALIFIERS to __host__ __device__ before any cuRAND header.
#include <layerinit/kernels/philox.hpp>

#include <layerinit/kernels/fill_cuda.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include <layerinit/core/cuda_check.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/kernels/fill_element.hpp>
#include <layerinit/kernels/fill_grid.hpp>
#include <layerinit/kernels/quantile.hpp>

namespace layerinit {

namespace {

// One block per SM (the fp16/bf16 table is 131 KB of shared memory) of 768 threads: 80 registers each
// (__launch_bounds__(768, 1)), 24 warps per SM, without spilling. 1024 threads (64 registers) spill in
// the fp16/bf16 tiles loops; 512 (128 registers) ran 16 warps.
constexpr unsigned threads_per_block = 768;
constexpr std::size_t node16_padded = (node16_entries + 3) / 4 * 4;  // whole 16-byte copies
constexpr std::size_t cubic_rows = quantile::kCubicRowsPadded;  // host_fill_tables().cubic

// The transforms' tables in global memory, copied from the host's (host_fill_tables) once per device;
// each block copies the one its dtype reads into shared memory.
__device__ float g_node16[node16_padded];
__device__ quantile::CubicRow g_cubic[cubic_rows];

template <DType T> __host__ __device__ constexpr std::size_t table_bytes() {
  return T == DType::f32 ? sizeof(g_cubic) : sizeof(g_node16);
}

template <DType T>
__global__ void __launch_bounds__(threads_per_block, 1) fill_kernel(const __grid_constant__ grid::Launch L) {
  extern __shared__ uint4 table[];  // table_bytes<T>() when the launch reads it, else none
  FillTables tab;
  if (L.needs_table) {
    const uint4* src = T == DType::f32 ? reinterpret_cast<const uint4*>(g_cubic) : reinterpret_cast<const uint4*>(g_node16);
    for (unsigned i = threadIdx.x; i < table_bytes<T>() / 16; i += blockDim.x) table[i] = src[i];
    __syncthreads();
    if constexpr (T == DType::f32) tab.cubic = reinterpret_cast<const quantile::CubicRow*>(table);
    else tab.node16 = reinterpret_cast<const float*>(table);
  }
  for (std::uint64_t t = blockIdx.x; t < L.tasks; t += gridDim.x) grid::run_task<T>(L, t, threadIdx.x, blockDim.x, tab);
}

// What a device needs before its first launch, made once per device (fill_cuda_prepare): its tables and
// the launch shape of every (dtype, needs_table), so a launch neither copies nor queries.
struct DeviceShape {
  int sms = 0;
  int blocks_per_sm[3][2] = {};  // [dtype][needs_table], from the occupancy API
};
constexpr int max_cached_devices = 64;
std::mutex prepare_mu;
std::atomic<bool> prepared[max_cached_devices];  // set (release) after shapes[d] is written
DeviceShape shapes[max_cached_devices];


template <DType T> int blocks_per_sm(bool needs_table) {
  int n = 0;
  LAYERINIT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fill_kernel<T>, threads_per_block,
                                                                   needs_table ? table_bytes<T>() : 0));
  return std::max(n, 1);
}

// Uploads the tables to the current device `device`, lets the kernels use the shared memory their tables
// need and returns its launch shapes. Synchronous.
DeviceShape prepare_current(int device) {
  LAYERINIT_CUDA_TRY(cudaMemcpyToSymbol(g_node16, host_fill_tables().node16, node16_entries * sizeof(float)));
  LAYERINIT_CUDA_TRY(cudaMemcpyToSymbol(g_cubic, host_fill_tables().cubic, sizeof(g_cubic)));
  LAYERINIT_CUDA_TRY(cudaFuncSetAttribute(fill_kernel<DType::f32>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(table_bytes<DType::f32>())));
  LAYERINIT_CUDA_TRY(cudaFuncSetAttribute(fill_kernel<DType::f16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(table_bytes<DType::f16>())));
  LAYERINIT_CUDA_TRY(cudaFuncSetAttribute(fill_kernel<DType::bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(table_bytes<DType::bf16>())));
  DeviceShape d;
  LAYERINIT_CUDA_TRY(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
  d.sms = std::max(d.sms, 1);
  for (int t = 0; t < 2; ++t) {
    d.blocks_per_sm[static_cast<int>(DType::f32)][t] = blocks_per_sm<DType::f32>(t != 0);
    d.blocks_per_sm[static_cast<int>(DType::f16)][t] = blocks_per_sm<DType::f16>(t != 0);
    d.blocks_per_sm[static_cast<int>(DType::bf16)][t] = blocks_per_sm<DType::bf16>(t != 0);
  }
  return d;
}

// The current device's launch shapes, preparing it first if fill_cuda_prepare has not (callers without
// a backend, such as the JAX handler). A device past max_cached_devices is prepared at every fill.
DeviceShape current_shape() {
  int device = 0;
  LAYERINIT_CUDA_TRY(cudaGetDevice(&device));
  if (device < 0 || device >= max_cached_devices) return prepare_current(device);
  if (prepared[device].load(std::memory_order_acquire)) return shapes[device];
  fill_cuda_prepare(device);
  return shapes[device];
}

template <DType T> void launch(const grid::Launch& L, const DeviceShape& d, cudaStream_t stream) {
  const std::size_t smem = L.needs_table ? table_bytes<T>() : 0;
  // Enough blocks to fill the device once (each loops over tasks), fewer for small launches.
  const std::uint64_t resident = static_cast<std::uint64_t>(d.sms) *
                                 static_cast<std::uint64_t>(d.blocks_per_sm[static_cast<int>(T)][L.needs_table ? 1 : 0]);
  const auto blocks = static_cast<unsigned>(std::min<std::uint64_t>(L.tasks, resident));
  fill_kernel<T><<<blocks, threads_per_block, smem, stream>>>(L);
  LAYERINIT_CUDA_TRY(cudaGetLastError());
}

}  // namespace

void fill_cuda(std::span<const FillJob> jobs, cudaStream_t stream) {
  grid::check_grid_jobs(jobs);
  const std::vector<grid::Launch> launches = grid::plan_launches(jobs, threads_per_block);
  if (launches.empty()) return;
  const DeviceShape d = current_shape();
  for (const grid::Launch& L : launches) {
    switch (L.dtype) {
      case DType::f32: launch<DType::f32>(L, d, stream); break;
      case DType::f16: launch<DType::f16>(L, d, stream); break;
      case DType::bf16: launch<DType::bf16>(L, d, stream); break;
    }
  }
}

DeviceScope::DeviceScope(int device) noexcept {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    (void)cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ == device) return;
  status_ = cudaSetDevice(device);
  if (status_ != cudaSuccess) (void)cudaGetLastError();
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0 && status_ == cudaSuccess && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

void fill_cuda_prepare(int device) {
  LAYERINIT_EXPECTS(device >= 0, "fill_cuda_prepare: device must be >= 0");
  if (device < max_cached_devices && prepared[device].load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(prepare_mu);
  if (device < max_cached_devices && prepared[device].load(std::memory_order_relaxed)) return;
  const DeviceScope scope(device);
  LAYERINIT_CUDA_TRY(scope.status());  // the tables must reach `device`, not the caller's
  const DeviceShape d = prepare_current(device);
  if (device < max_cached_devices) {
    shapes[device] = d;
    prepared[device].store(true, std::memory_order_release);
  }
}

std::string fill_cuda_check_device() noexcept {
  try {
    cudaFuncAttributes attr{};
    const cudaError_t e = cudaFuncGetAttributes(&attr, fill_kernel<DType::bf16>);
    if (e == cudaSuccess) return {};
    (void)cudaGetLastError();
    return std::string("the fill kernel cannot run on this device: ") + cudaGetErrorString(e);
  } catch (...) {
    return "the fill kernel cannot run on this device";
  }
}

}  // namespace layerinit
