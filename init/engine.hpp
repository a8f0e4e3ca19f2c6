// The step every build repeats: allocate a part (a layer, or one tensor outside the layers), make its
// fill jobs, fill, synchronize, then let the caller stop. Builder::build and stream, shard/'s
// build_rank and stream_rank and checkpoint/'s parallel emit all make their parts here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/backends/backend.hpp>
#include <layerinit/core/api.hpp>
#include <layerinit/init/spec.hpp>
#include <layerinit/kernels/fill.hpp>
#include <layerinit/memory/tensor.hpp>

namespace layerinit {

// A region of a planned tensor (TensorSpec::regions): its box in logical coordinates and its fill,
// prepared for the tensor's dtype as the tensor's own fill is.
struct PlannedRegion {
  FillRegion region;
  std::optional<FillParams> params;  // prepare_fill(region.fill, dtype); none: prepared when jobs are made
};

// A tensor as the builder will make it: everything but the memory.
struct LAYERINIT_API PlannedTensor {
  std::string name;     // canonical
  Shape shape;          // logical
  Shape memory_shape;   // after orientation
  DType dtype = DType::f32;
  FillSpec fill;        // the recipe's rule, `init` or an override: everywhere outside the regions
  // prepare_fill(fill, dtype), made once when the builder plans the tensor; a tensor planned by hand
  // without it has its fill prepared by fill_job_for.
  std::optional<FillParams> params;
  // Boxes with fills of their own over `fill`, in order, a later one winning where they overlap
  // (init/box_fill.hpp cuts a tensor's jobs along them). Element i keeps its index, so its random
  // bits are the tensor's: only the transform differs.
  std::vector<PlannedRegion> regions = {};
  bool transposed = false;  // memory_shape is the transpose of shape
  std::uint64_t numel() const { return layerinit::numel(shape); }
  std::uint64_t bytes() const { return numel() * dtype_size(dtype); }
  // Drops the prepared params of the fill and the regions: for the same tensor in another dtype.
  void unprepare();
};

// The job of the tensor's own fill over the whole tensor, whose memory element 0 is at dst, its
// regions aside: the template every job of the tensor is cut from. The jobs that honor the regions
// are init/box_fill.hpp's (tensor_fill_jobs for a whole tensor).
LAYERINIT_API FillJob fill_job_for(const PlannedTensor& p, void* dst, std::uint64_t seed);

// The stacked buffer (or dataset) a layer tensor is one slice of: it holds one dtype.
struct StackSlot {
  std::string_view name;
  DType dtype = DType::f32;
};

// One tensor of a part: planned tensor `tensor`'s values (all of them, or a piece) written densely
// as `shape` at `dst`, a slice of a buffer made earlier; with a null dst, into a new allocation.
struct PartTensor {
  const PlannedTensor* tensor = nullptr;
  Shape shape;  // tensor->memory_shape, or the piece's
  void* dst = nullptr;
  std::optional<StackSlot> stack;
};
// The whole tensors of a list, each into a new allocation.
LAYERINIT_API std::vector<PartTensor> whole_tensors(std::span<const PlannedTensor> planned);

// Appends to `out` the jobs that write part tensor k at dst.
using PartJobs = std::function<void(std::size_t k, void* dst, std::vector<FillJob>& out)>;

// Where a build's parts are made: the backend that fills, the memory new tensors come from, the
// seed, and the cancellation point between parts.
struct Engine {
  backend* be = nullptr;
  memory_resource* memory = nullptr;
  std::uint64_t seed = 0;
  std::function<void()> after_part;  // runs after each part is filled; may throw to stop the build

  // Refuses a stacked tensor whose dtype is not its buffer's (bad_input naming both)
  // before anything is allocated, allocates the tensors without a dst (named as their planned
  // tensor), appends each tensor's jobs (`jobs`; none given: the whole tensor, tensor_fill_jobs), fills
  // them in one call and runs after_part. Returns the new allocations in part order. Does not wait for
  // the fill (a CUDA backend's work is ordered on its stream): whoever reads the part outside the
  // backend synchronizes first, and a whole build synchronizes once, at its end.
  std::vector<Tensor> fill_part(std::span<const PartTensor> part, const PartJobs& jobs = {}) const;
};

}  // namespace layerinit
