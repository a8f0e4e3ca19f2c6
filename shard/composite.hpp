// Composite parameters: a framework's parameter as canonical tensors, stacked and concatenated.
//
// A framework often stores several of layerinit's tensors in one array: a stacked [L, ...] leaf of
// filter_vmap or nnx.vmap (slice l is layer l's tensor), fused experts [E, 2F, H] (gate and up of
// each expert, concatenated), a fused QKV [(H + 2 K) hd, D], and rows in another order than the
// canonical tensor's (torchtitan's interleaved RoPE layout of q and k). A Composite says which
// tensor every element of such a parameter is, and composite_fill_jobs writes any box of it
// straight into a (possibly strided) region with the values the unsharded per-tensor fill gives,
// on any backend: no temporary, no cost per element beyond the fill.
//
// Shape: K stack axes, each index a tensor of its own (its name a template of the indices), and a
// slice tiled exactly by parts. The stack axes lead ([s_0, ..., s_{K-1}, slice...]) unless an axis
// says at which dimension it sits: any distinct dimensions, the slice being the other dimensions in
// order (Flax linen's nn.scan with variable_axes={"params": 1}, MaxText's param_scan_axis=1: a kernel
// [embed, L, mlp] whose [:, l, :] is layer l's [embed, mlp]). A part is a box of one tensor as stored
// (orientation, then an optional named row permutation), placed at an offset in the slice. Its
// description is versioned text (composite_to_text) whose size grows with the parts, never with the
// stack: an FFI attribute for a stacked leaf of any depth.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/box_fill.hpp>
#include <layerinit/shard/mesh.hpp>

namespace layerinit {

// A reordering of a stored tensor's rows that a library names: stored row r holds row
// source_row(r) of the tensor as oriented.
struct LAYERINIT_API RowPermutation {
  enum class Kind : std::uint8_t {
    none,
    // torchtitan's interleaved RoPE layout of a Hugging Face (rotate-half) q or k weight: in each
    // head of `group` rows, row 2i + j holds row j * group / 2 + i, as torchtitan's Llama3
    // state-dict adapter's _reverse_permute (from_hf) arranges it.
    rope_interleave,
  };
  Kind kind = Kind::none;
  std::uint64_t group = 0;  // rope_interleave: rows per head (head_dim), even
  std::uint64_t source_row(std::uint64_t row) const;
  std::string describe() const;  // "none", "rope_interleave(128)"
  bool operator==(const RowPermutation&) const = default;
  static RowPermutation rope_interleave(std::uint64_t head_dim) { return {Kind::rope_interleave, head_dim}; }
};
// "none" or "rope_interleave(N)"; throws bad_input naming the valid forms.
LAYERINIT_API RowPermutation parse_row_permutation(std::string_view text);

// `count` consecutive stack indices with one fill.
struct FillRun {
  std::uint64_t count = 0;
  FillSpec fill;
  bool operator==(const FillRun&) const = default;
};

// One canonical tensor pattern placed in every slice of a composite.
struct LAYERINIT_API CompositePart {
  // The tensor's canonical name; with stack axes a template: "{k}" is axis k's index (its first +
  // the position along it), "{{" and "}}" are literal braces. Each axis appears at least once.
  std::string name;
  Shape shape;                   // logical, the tensor's own
  DType dtype = DType::f32;
  bool transposed = false;       // stored [shape[1], shape[0]] (in-out orientation; 2-D only)
  std::vector<FillRun> fills;    // by stack index (row-major over the axes), covering every slice
  RowPermutation rows;           // of the stored tensor; not with transposed
  Box source;                    // the box of the stored, row-permuted tensor this part places
  // Its offset in a slice, one entry per slice dimension. A part of lower rank than the slice sits
  // in its last dimensions, the leading ones of extent 1 ([F, H] in [2, F, H] fused gate-up).
  Shape at;
  // The tensor's regions (TensorSpec::regions), in its logical coordinates, at every stack position:
  // an element keeps its index in its tensor wherever the part places it (transposed, row-permuted).
  std::vector<FillRegion> regions = {};

  Shape stored_shape() const;    // shape, transposed when stored so
  bool operator==(const CompositePart&) const = default;
};

struct StackAxis {
  std::uint64_t size = 0;
  std::uint64_t first = 0;  // the index the names give position 0 (a model's first layer in the stack)
  // Its dimension in Composite::shape; none: the leading layout's, axis k at dimension k (the same
  // composite as an explicit k: Composite's == compares where the axes sit).
  std::optional<std::size_t> dim = std::nullopt;
  bool operator==(const StackAxis&) const = default;
};

struct LAYERINIT_API Composite {
  DType dtype = DType::f32;
  Shape shape;                     // the slice's dimensions with each stack axis's size at its dim
  std::vector<StackAxis> stack;    // in the order of their indices (names, fill runs)
  std::vector<CompositePart> parts;

  std::size_t stack_dim(std::size_t k) const;  // where axis k sits: its dim, else k (std::out_of_range past the axes)
  bool leading() const;            // every axis k at dimension k (the text then has no "dim")
  Shape slice_shape() const;       // shape without the stack axes' dimensions, in order
  std::uint64_t slices() const;    // stack positions (1 without stack axes)
  // The tensor part `p` stands for at stack position `index` (one entry per axis, 0-based). Throws
  // std::out_of_range for a part or an index past its axis, bad_input for a count of
  // indices other than the axes'.
  PlannedTensor tensor(std::size_t p, std::span<const std::uint64_t> index) const;
  // The canonical tensors its parts stand for over the stack, part by part (positions row-major), each once.
  std::vector<std::string> tensor_names() const;
  // One tensor whole and as stored: one part, no stack axis, not transposed or row-permuted, its whole box.
  bool whole() const;
  // Throws spec_error (init/spec_json.hpp, a bad_input) with source "composite" and one
  // line naming the first problem: a stack axis whose dimension is outside the shape or another
  // axis's, a shape whose size at an axis's dimension is not the axis's, parts that do not tile the
  // slice exactly (a gap, an overlap, a part outside it), a dtype other than the composite's, a
  // source box outside its tensor, fills that do not cover the stack or are invalid for the dtype, a
  // region outside its tensor or with a fill invalid for the dtype, a name template that misses an
  // axis or has a stray brace, a permutation whose group does not divide the rows or meets a
  // transposed part.
  void validate() const;
  // Field by field, but an axis's dim by where it sits (stack_dim): none and k are one layout.
  bool operator==(const Composite&) const;
};

// One tensor as a whole, stored as planned.
LAYERINIT_API Composite whole_tensor(const PlannedTensor& p);
// A part that places the whole stored tensor `p` (its name escaped: a name, not a template) at `at`.
LAYERINIT_API CompositePart whole_part(const PlannedTensor& p, Shape at, RowPermutation rows = {});
// Parts concatenated along dimension `dim` of their stored boxes (source.shape), in order, in the slice
// under `stack` axes: sets each part's `at`; the shape is the boxes' common shape with dimension `dim`
// summed, each axis's size inserted at its dimension (leading: the stack sizes, then the slice).
// torchtitan's fused wqkv is [q; k; v] along 0, q and k rope_interleave; a stacked leaf of it adds
// an axis [L]. `groups` > 1 splits each box into that many equal slabs along `dim` and places slab 0
// of every part, then slab 1 of every part, ...: torchtitan's GQA-grouped wqkv
// [n_kv * (q heads per kv + 2) * hd, D] is q, k, v in groups = n_kv. Validated; bad_input
// naming a part that does not fit, a box that does not split evenly or stack axes at dimensions
// outside the shape or shared.
LAYERINIT_API Composite concatenate(std::vector<CompositePart> parts, std::size_t dim, std::vector<StackAxis> stack = {},
                      std::uint64_t groups = 1);
// Whole tensors concatenated so, each with its row permutation (`rows` empty: none; else one each).
LAYERINIT_API Composite concatenate(std::span<const PlannedTensor> tensors, std::size_t dim, std::span<const RowPermutation> rows = {});
// Literal text as a name template: escape_template (core/text.hpp).
// A name template with axis k's index `index[k]` (first included) written in decimal.
LAYERINIT_API std::string expand_template(std::string_view name, std::span<const std::uint64_t> index);

// Appends the jobs that write `box` of composite `c` (coordinates of c.shape) into `dst`, with the
// values each element has in its own tensor: the same bits as the tensor filled whole, for any box,
// placement of the stack axes, layout of parts, orientation and permutation. A stack axis is a
// dimension whose index picks the slice: each position's part boxes are written through the
// region's own strides, the stack dimensions skipped (a stack axis in the last dimension leaves the
// slice's last dimension strided: one job per element of it). Rows of a permuted part are grouped
// into runs whose source rows are evenly spaced (rope_interleave: two rows per job when the part's
// rows are whole in the box and the region's rows adjacent; else one row per job). `c` must be valid (validate()).
// Throws bad_input for a box outside c.shape or a region as region_fill_jobs does.
LAYERINIT_API void composite_fill_jobs(const Composite& c, const Box& box, const Region& dst, std::uint64_t seed,
                                       std::vector<FillJob>& out);

// The composite as compact, versioned JSON text, and back: {"layerinit_composite": 1, "dtype",
// "shape", "stack": [{"size", "first", and "dim" only where axis k is not at dimension k}], "parts":
// [{"name", "shape", "at", "fill": text or [[count, text], ...], and when not the default
// "transposed", "rows", "from", "size", "regions": [{"offset", "shape", "fill": text}, ...]}]}
// (docs/python.md). A leading composite's text is what it was before "dim" existed; a reader that
// predates "dim" refuses a text with one as an unknown key (stack[k].dim), never misreads it.
// Fills print exactly (shortest round-trip decimals), so parse(print(c)) == c. Parsing throws
// spec_error with source "composite", one line, read by the spec's rules (init/json_read.hpp): the
// field's path, then the problem ("composite: parts[1].fill: duplicate key"; malformed JSON or
// nesting deeper than the format's 8 levels at a line and column, an unknown key, a wrong type,
// another version), then validate()'s.
LAYERINIT_API std::string composite_to_text(const Composite& c);
LAYERINIT_API Composite composite_from_text(std::string_view text);

}  // namespace layerinit
