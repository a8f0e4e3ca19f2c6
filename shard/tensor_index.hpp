// A build's tensors by name: what each name a plan lists (a canonical tensor, or a stacked buffer of
// the stacked layout) is, as a PlannedTensor or a Composite, and the jobs that fill any box of it in
// memory layerinit does not own (the Python binding's fills, XLA's buffers).
//
// Memory is O(pre + post + tensors per layer), never O(layers): a layer tensor's name is read with
// split_layer_name and planned on demand, so a spec of 2^40 layers is looked up as fast as one of 2.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/shard/composite.hpp>

namespace layerinit {

// The most tensors a listing of a plan holds (the CLI's `plan --json` and Python's Plan.tensors()):
// past it a listing would take hours and gigabytes (a spec of 2^40 layers).
inline constexpr std::uint64_t max_listed_tensors = std::uint64_t{1} << 20;

class LAYERINIT_API TensorIndex {
 public:
  // Indexes `builder`'s plan (its spec and options); keeps a reference to it.
  explicit TensorIndex(const Builder& builder);

  // Tensors a listing of the plan has: pre + layers (each layer's tensors, or the stacked buffers) +
  // post, saturating at 2^64 - 1.
  std::uint64_t tensor_count() const;
  const StackedLayout& stacked_layout() const noexcept { return stacked_; }

  // The planned tensor of a canonical name (before, in or after the layers), in either layout.
  std::optional<PlannedTensor> planned(std::string_view name) const;
  // The stacked buffer a name is (stacked layout only).
  std::optional<std::size_t> stacked_buffer(std::string_view name) const;
  // Stacked buffer `b` ([L, ...] or fused experts [L, E, ...]) of layers first .. first + count - 1
  // (0-based in the repeated block), each slice its own tensor with its own fill, as a composite
  // whose stack axes are [count] or [count, E]. Throws bad_input when the buffer's
  // tensors do not share one dtype, naming two that differ; a buffer or layers past the plan's are
  // misuse (layerinit::logic_error).
  Composite stacked(std::size_t b, std::uint64_t first, std::uint64_t count) const;
  // Tensors named by `templates` ("{k}": stack axis k's index, as CompositePart::name has it) at every
  // position of `stack`, concatenated along dimension `dim` of their stored shapes, each with its row
  // permutation (`rows` empty: none), each stack axis at its dimension (StackAxis::dim; leading by
  // default): a stacked leaf [L, ...] is one template on one axis ([E, L, M] with the axis at 1), a
  // fused QKV three templates on none, a stacked fused QKV both. Each template's tensors share a stored
  // shape, all one dtype; `groups` interleaves them as concatenate() does (torchtitan's GQA wqkv).
  // Throws bad_input naming the first problem (an unknown name with not_found()'s
  // suggestions); `what` starts the messages about dtypes and shapes.
  Composite assemble(std::span<const std::string> templates, std::span<const StackAxis> stack, std::size_t dim = 0,
                     std::span<const RowPermutation> rows = {}, std::uint64_t groups = 1,
                     std::string_view what = "composite") const;
  // What `name` is as a composite: a canonical tensor whole, or a whole stacked buffer. Throws
  // bad_input for an unknown name (not_found()).
  Composite composite(std::string_view name) const;

  // Appends the jobs that fill `box` of `name` (memory coordinates; a stacked buffer's in the
  // stacked layout) into `dst`, whose elements are `have`: only the layers the box holds are
  // planned. Throws bad_input for an unknown name, a dtype other than the planned one, a
  // box outside the tensor, or a region region_fill_jobs refuses.
  void fill_jobs(std::string_view name, const Box& box, const Region& dst, DType have, std::vector<FillJob>& out) const;

  // transformers 5's fused experts: "<p>.mlp.experts.gate_up_proj" [E, 2F, H] is gate and up of each
  // expert concatenated along dimension 1, "<p>.mlp.experts.down_proj" [E, H, F] each expert's down,
  // where the spec names experts "<p>.(mlp|block_sparse_moe).experts.<e>.(gate_proj|w1)..." (Mixtral's
  // w1/w3/w2, or Llama's gate/up/down). Nothing for other names; bad_input when `shape`
  // is not the experts' [E, 2F, H] or [E, H, F].
  std::optional<Composite> hf_fused_experts(std::string_view name, const Shape& shape) const;

  // "tensor 'x' is not in <spec> (tensors such as a, b, c)": the names sharing its last component.
  std::string not_found(std::string_view name) const;
  [[noreturn]] void refuse_unknown(std::string_view name) const;  // bad_argument: not_found()'s line

 private:
  std::string not_in(std::string_view name) const;  // not_found()'s line after the name
  const Builder& builder_;
  StackedLayout stacked_;
  std::unordered_map<std::string, std::size_t> pre_, post_, layer_, buffers_;  // name -> index
  // The last layer planned: lookups of one layer's tensors in a row (a stack's positions) plan it once.
  mutable std::mutex mu_;
  mutable std::optional<std::uint64_t> cached_layer_;
  mutable std::vector<PlannedTensor> cached_;
};

}  // namespace layerinit
