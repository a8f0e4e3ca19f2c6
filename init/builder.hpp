// The builder: a model created one layer at a time, directly in its final dtype.
//
// No fp32 buffer exists for a half model: every tensor is allocated in its target dtype and filled
// in place from registers (kernels/). Peak memory of a build, through the tracking resource:
//   stacked:   final weights (one [L, ...] allocation per layer parameter, layer i filled in slice i)
//   per-layer: final weights (one allocation per tensor)
//   streamed:  the largest part (one layer, or one tensor outside the layers), released after use
// and stack() of an existing per-layer model: final weights + the largest layer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/engine.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec.hpp>
#include <layerinit/memory/tensor.hpp>
#include <layerinit/backends/backend.hpp>
#include <layerinit/memory/tracking.hpp>

namespace layerinit {

enum class Layout { per_layer, stacked };
enum class Orientation { out_in, in_out };
LAYERINIT_API std::string_view layout_name(Layout l);              // "per-layer", "stacked"
LAYERINIT_API Layout parse_layout(std::string_view s);             // throws listing valid names
LAYERINIT_API std::string_view orientation_name(Orientation o);    // "out-in", "in-out"
LAYERINIT_API Orientation parse_orientation(std::string_view s);

struct DTypeOverride {
  std::string pattern;  // glob on canonical names, e.g. "*norm*"
  DType dtype;
};

struct BuildOptions {
  DType dtype = DType::bf16;
  std::vector<DTypeOverride> dtype_overrides;  // last match wins
  std::uint64_t seed = 0;
  Layout layout = Layout::per_layer;
  Orientation orientation = Orientation::out_in;
  // Stacked layout only: MoE experts as one [L, E, ...] buffer per expert weight, or one [L, ...]
  // buffer per expert tensor.
  ExpertLayout experts = ExpertLayout::stacked;
  // The order layers are created in (a permutation of 0..L-1); empty = ascending. Values never
  // depend on it.
  std::vector<std::uint64_t> layer_order;
  // Runs after each part (a layer, or a tensor outside the layers) is filled, in every build and
  // stream: a cancellation point (throw to stop; what was made so far is freed).
  std::function<void()> after_part;
};

struct LAYERINIT_API Layer {
  std::uint64_t index = 0;
  std::vector<Tensor> tensors;  // in LayerSpec order
  std::uint64_t bytes() const;
};

// A built model in one of two layouts.
struct LAYERINIT_API Model {
  Layout layout = Layout::per_layer;
  ExpertLayout experts = ExpertLayout::stacked;  // how the stacked layout holds experts
  std::uint64_t num_layers = 0;
  std::vector<Tensor> pre;
  std::vector<Layer> layers;       // per-layer layout: layers[i].index == i
  // stacked layout: the buffers of stacked_layout(spec, experts) in order, [L, ...] per layer
  // parameter or [L, E, ...] per expert weight
  std::vector<Tensor> stacked;
  std::vector<Tensor> post;

  std::uint64_t bytes() const;
  // Every tensor in file order: pre, then layers (per-layer) or stacked tensors, then post.
  void for_each(const std::function<void(const TensorView&)>& f) const;
};

// One finished piece of a streamed build: a layer, or one tensor outside the layers.
struct LAYERINIT_API Part {
  enum class Kind { pre, layer, post } kind = Kind::pre;
  std::uint64_t layer = 0;               // Kind::layer
  std::vector<TensorView> tensors;
  std::uint64_t bytes() const;
};

// A buffer of the stacked layout as stored: [L, ...] per layer parameter or [L, E, ...] per expert
// weight, in the dtype of layer 0's tensor (a buffer holds one dtype; a layer that differs is refused
// when it is made, Engine::fill_part).
struct StackedTensor {
  std::string_view name;
  Shape shape;
  DType dtype = DType::f32;
  std::uint64_t slice_numel = 0;  // elements of one (layer, expert) slice
};

// How Builder::walk visits the layers.
enum class WalkMode {
  parts,  // each layer planned, one step per layer: what a build or a stream makes
  runs,   // runs of layers stored alike, each planned once (one run when uniform_layers(), else one per
          // layer; the stacked layout's layers are one run, stored in its buffers): lists and sizes,
          // for any number of layers
};

struct WalkOptions {
  WalkMode mode = WalkMode::parts;
  // The tensors before (after) the layers as one step, as a whole build fills them; else one step per
  // tensor, as a stream hands them on.
  bool whole_ends = false;
  // The layers [first, first + count) (count clamped to the model's), ascending; or, with
  // layer_order, all of them in options().layer_order (WalkMode::parts only).
  std::uint64_t first = 0, count = ~std::uint64_t{0};
  bool layer_order = false;
};

// One step of Builder::walk: tensors before the layers, a layer (or a run of layers), or tensors after
// them.
struct PlanStep {
  Part::Kind kind = Part::Kind::pre;
  std::uint64_t layer = 0;  // Kind::layer: the first of `count` layers (WalkMode::runs), else the layer
  std::uint64_t count = 1;
  std::size_t index = 0;    // Kind::pre and post: the spec().pre / post index of tensors[0]
  std::span<const PlannedTensor> tensors;  // Kind::layer: in LayerSpec order (a run: its first layer's)
  // Kind::layer in the stacked layout: layer tensor j of layer i is slice layout->slice(j, i) of
  // buffers[layout->buffer[j]]; else null and empty.
  const StackedLayout* layout = nullptr;
  std::span<const StackedTensor> buffers;
};

class LAYERINIT_API Builder {
 public:
  // `memory` is where tensors come from (normally a tracking_resource wrapping be.memory()).
  Builder(const ModelSpec& spec, const Recipe& recipe, BuildOptions opts, backend& be, memory_resource& memory);

  const ModelSpec& spec() const noexcept { return spec_; }
  const Recipe& recipe() const noexcept { return recipe_; }
  const BuildOptions& options() const noexcept { return opts_; }
  // Where tensors are made and filled (shard/ builds a rank's pieces with the same two).
  backend& target_backend() const noexcept { return *be_; }
  memory_resource& memory() const noexcept { return *mr_; }

  // What will be made, without allocating: one part, looked up (to go over the parts, walk).
  std::vector<PlannedTensor> plan_pre() const;
  std::vector<PlannedTensor> plan_layer(std::uint64_t i) const;
  std::vector<PlannedTensor> plan_post() const;
  // True when every layer has the same memory shapes and dtypes as layer 0 (only names and fills
  // differ), so sizes of all layers follow from plan_layer(0) in O(1): no dtype override can tell
  // layer indices apart. False when an override pattern may (it has '?', '[', '\\' or a digit).
  bool uniform_layers() const;
  // Tensors planned so far (a fill chosen by the recipe and prepared in its dtype), by this builder
  // and its copies. Each part is planned once however often the model is walked: the tensors before
  // and after the layers, and the layers a walk of runs plans when the layers are uniform (any
  // others), are kept and handed to every later walk, so an emit's memory plan, checkpoint size,
  // dataset list and stream share one plan; a walk of parts plans the layers it meets that were not
  // kept, one at a time (a stream's memory stays one part).
  std::uint64_t tensors_planned() const;

  // The one traversal of the model's parts, in file order: the tensors before the layers, the layers,
  // the tensors after them. Build, stream, the rank builds (shard/ walk_rank), the emits and the
  // dataset lists all walk here, so they cannot disagree on the order or the stacked slices.
  using PlanVisitor = std::function<void(const PlanStep&)>;
  void walk(const WalkOptions& w, const PlanVisitor& f) const;

  // The whole model in options().layout, written when it returns (one synchronize, at the end). on_layer
  // (optional) runs after each layer's fill is enqueued.
  Model build(const std::function<void(std::uint64_t layer)>& on_layer = {}) const;
  // Builds part by part, hands each to `sink` (after the fill has completed), then frees it.
  // `after_part` runs after options().after_part between parts (emit's cancellation).
  void stream(const std::function<void(const Part&)>& sink, const std::function<void()>& after_part = {}) const;

  // The engine its parts are filled with (target_backend(), memory(), the seed, options().after_part
  // then `also`).
  Engine engine(const std::function<void()>& also = {}) const;

 private:
  PlannedTensor plan_one(const TensorSpec& t, std::optional<std::uint64_t> layer) const;
  using Planned = std::shared_ptr<const std::vector<PlannedTensor>>;
  // The kept plan of the tensors before (after) the layers, and of layer i: kept when `keep` and
  // the layers are uniform (at most kKeptLayers of them), else planned for this call.
  Planned planned_ends(bool pre) const;
  Planned planned_layer(std::uint64_t i, bool keep) const;
  // Layers [first, first + count) as runs of layers stored alike (the same memory shapes and dtypes;
  // names and fills differ): f(run_first, run_count, plan_layer(run_first)) in order. One run when
  // uniform_layers(), so a plan of 10^9 layers costs one layer's; else one run per layer. Callers
  // outside walk use walk's WalkMode::runs.
  using LayerRunVisitor = std::function<void(std::uint64_t first, std::uint64_t count, const std::vector<PlannedTensor>&)>;
  void for_each_layer_run(std::uint64_t first, std::uint64_t count, const LayerRunVisitor& f) const;

  ModelSpec spec_;
  Recipe recipe_;
  BuildOptions opts_;
  backend* be_;
  memory_resource* mr_;
  struct PlanCache;
  std::shared_ptr<PlanCache> cache_;  // shared by copies: their spec, recipe and options are the same
};

// The step's tensors, whole, each into a new allocation; a stacked layer's with the buffer it is a
// slice of (Engine::fill_part refuses a dtype that is not the buffer's).
LAYERINIT_API std::vector<PartTensor> whole_tensors(const PlanStep& s);

}  // namespace layerinit
