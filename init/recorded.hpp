// A framework's own init, recorded while its code ran on tensors without memory, replayed into fills.
//
// layerinit.torch runs a model's own init code (each module's reset_parameters, transformers'
// _init_weights, torchtitan's init_states, a constructor) on meta tensors under a recorder and hands
// over what the code did: the tensors it wrote (parameters, and the temporaries it made them from)
// and, in order, every write into a box of one. replay_init decides here, in one vocabulary with
// torch's exact semantics, what each parameter holds at the end: a fill, boxes with fills of their
// own (a padding row), equal values to another parameter, or why no fill says it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/core/shape.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// One tensor the recorded code wrote: a parameter (its qualified name) or a temporary (no name).
struct RecordedTensor {
  std::string name;
  Shape shape;
};

// One write into a box of a recorded tensor (an empty offset and shape: the whole tensor). The ops,
// each with torch's semantics (torch/nn/init.py, Tensor's in-place methods):
//   normal(mean, std)            Tensor.normal_, nn.init.normal_
//   uniform(from, to)            Tensor.uniform_, nn.init.uniform_ (kaiming_uniform_ and xavier_uniform_
//                                reduce to it with the bound torch computed)
//   fill(value)                  fill_, zero_, nn.init.constant_ / ones_ / zeros_
//   trunc_normal(mean, std, a, b) nn.init.trunc_normal_: normal(mean, std) cut to the absolute [a, b]
//   mul(c), div(c), add(c), neg  in-place scalar arithmetic (add_(c, alpha=k) is add(c * k))
//   erfinv                       Tensor.erfinv_
//   clamp(lo, hi)                Tensor.clamp_ (an absent bound is -inf or +inf)
//   copy                         copy_ (and what a cast, clone, cat or index_copy makes) from box
//                                from_offset/from_shape of tensor `from`, element for element in
//                                row-major order of the two boxes
//   data(id)                     values the code computed without drawing random numbers (Whisper's
//                                sinusoidal positions): element i of the box is element i of the
//                                adapter's data `id`, which the adapter keeps and writes itself
// Any other op (orthogonal_, sparse_, eye_, dirac_, random_, bernoulli_, an aten op with no fill)
// leaves its box with values no fill gives: its name is kept for the refusal.
struct RecordedWrite {
  std::size_t tensor = 0;  // index into RecordedInit::tensors
  Shape offset, shape;
  std::string op;
  std::vector<double> args;
  std::size_t from = 0;    // copy
  Shape from_offset, from_shape;
  std::string where;       // the code that wrote it, for messages ("modeling_t5.py:830 in _init_weights")
};

struct RecordedInit {
  std::vector<RecordedTensor> tensors;
  std::vector<RecordedWrite> writes;  // in the order the code made them
};

// What a recorded tensor holds when the code is done.
struct ReplayedTensor {
  // The fill of most of its elements, and boxes (disjoint, logical coordinates) whose elements have
  // another fill; both absent when it has none (refusal says why) or is a copy.
  std::optional<FillSpec> fill;
  std::vector<FillRegion> regions;
  // It holds the same values as tensor copy_of, whole (a tie made by copy_).
  std::optional<std::size_t> copy_of;
  // It holds the adapter's data `data` whole (a data write of its shape, or copies of one).
  std::optional<std::size_t> data;
  std::string refusal;  // why no fill gives its values (never written, an op with no fill, ...)
};

// Replays the writes in order. Each tensor starts unwritten; a random write draws values of its own
// (a temporary's values copied into a parameter keep their distribution, and layerinit draws them at
// the parameter's own element indices); elementwise ops transform a box's distribution (normal times
// c is normal(m c, s |c|); torch's old trunc_normal_ sequence uniform, erfinv, mul, add, clamp is the
// truncated normal it samples). Refused with the reason, per tensor: a box never written, an op with
// no fill, a clamp_ that piles values at its bounds, the same random values copied into two places
// (what the code meant as equal values, layerinit would draw apart), a partial copy of another
// parameter. Throws bad_input (bad_argument) for malformed input: an index past the
// tensors, a box outside its tensor, a copy whose boxes differ in element count, a wrong argument count.
LAYERINIT_API std::vector<ReplayedTensor> replay_init(const RecordedInit& r);

// A tensor's init as its framework's code gives it: a fill, and boxes with fills of their own.
struct TensorInit {
  FillSpec fill;
  std::vector<FillRegion> regions;
  bool operator==(const TensorInit&) const = default;
};

// `spec` with each named tensor's init (by canonical name): a pre or post tensor takes its own; a
// layer tensor's init goes on the block when every layer has the same one, else the block's layers
// are listed one by one as pre tensors under their canonical names (names, shapes and values do not
// change; a recipe still sees each in its layer). Tensors not named keep theirs. Throws
// bad_input naming a name the spec does not have, and as ModelSpec::validate does.
LAYERINIT_API ModelSpec spec_with_inits(const ModelSpec& spec, const std::map<std::string, TensorInit, std::less<>>& inits);

// The recording as JSON: {"tensors": [{"name", "shape"}], "writes": [{"tensor", "op", "args",
// "offset", "shape", "from", "from_offset", "from_shape", "where"}]}; an argument may be null for an
// absent clamp bound. Errors spec_error (source "recording") naming the field.
LAYERINIT_API RecordedInit recorded_init_from_json(std::string_view text);

}  // namespace layerinit
