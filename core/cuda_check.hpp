// Checking CUDA runtime calls (CUDA-only header: include it from .cu files only).
//
// LAYERINIT_CUDA_TRY(call) throws layerinit::cuda_error carrying the call's text, file and line.
// LAYERINIT_CUDA_TRY_NOTHROW(call) is the form for destructors and noexcept paths: it reports the
// failure on stderr and goes on. Neither ever exits or aborts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include <layerinit/core/errors.hpp>

namespace layerinit::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so a later launch check does not report it again
  throw cuda_error(call, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e), file, line);
}

inline void report_cuda_error(cudaError_t e, const char* call, const char* file, int line) noexcept {
  (void)cudaGetLastError();
  std::fprintf(stderr, "layerinit: %s:%d: %s failed: %s (ignored in a path that cannot throw)\n", file, line, call,
               cudaGetErrorString(e));
}

}  // namespace layerinit::detail

#define LAYERINIT_CUDA_TRY(call)                                                                 \
  do {                                                                                           \
    const cudaError_t layerinit_err_ = (call);                                                   \
    if (layerinit_err_ != cudaSuccess)                                                           \
      ::layerinit::detail::throw_cuda_error(layerinit_err_, #call, __FILE__, __LINE__);          \
  } while (0)

#define LAYERINIT_CUDA_TRY_NOTHROW(call)                                                         \
  do {                                                                                           \
    const cudaError_t layerinit_err_ = (call);                                                   \
    if (layerinit_err_ != cudaSuccess)                                                           \
      ::layerinit::detail::report_cuda_error(layerinit_err_, #call, __FILE__, __LINE__);         \
  } while (0)
