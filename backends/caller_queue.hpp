// Backends that fill into memory their caller owns, on the caller's own queue of work: a framework's
// call into layerinit from inside its runtime (the XLA FFI fill handlers, python/src/xla_handlers.*)
// writes the buffers the framework allocated, through backend::fill like every other consumer.
#pragma once

#include <memory>

#include <layerinit/core/api.hpp>
#include <layerinit/backends/backend.hpp>

namespace layerinit {

// The CUDA backend of device `device` whose work is ordered on `stream` (a cudaStream_t of the
// caller's, such as the one XLA hands a custom call) instead of a stream of its own: fill enqueues
// on it and returns; the backend never synchronizes on destruction nor destroys the stream. Its
// memory() is a pool of its own ordered on that stream. layerinit::error where CUDA is unusable
// (cuda_probe's reason), also in a build without CUDA.
LAYERINIT_API std::unique_ptr<backend> make_cuda_backend_on_stream(int device, void* stream);

// The simulated node's stand-in for CUDA device `device` (backend.hpp): host memory, fills over the
// CUDA kernel's work split on a simulated grid, recorded for `device` when the node is simulated. Made
// whether or not LAYERINIT_TEST_SIMULATED_CUDA_DEVICES is set, so a handler on the host can run the
// CUDA path's work split (the JAX grid handler).
LAYERINIT_API std::unique_ptr<backend> make_simulated_cuda_backend(int device);

}  // namespace layerinit
