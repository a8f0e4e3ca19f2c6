// Named parallel plans: tensor (tp), pipeline (pp), expert (ep) and fully sharded data parallel
// (fsdp), and their composition on one mesh (docs/sharding.md has the rules and where they come from).
//
// The mesh is ("pp", "fsdp", "ep", "tp"), slowest first: rank = ((pp * F + fsdp) * E + ep) * T + tp,
// with tp fastest and pp slowest, Megatron's default order (tp-cp-ep-dp-pp, fastest first).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>
#include <string>
#include <string_view>
#include <unordered_map>

#include <layerinit/core/api.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/spec.hpp>
#include <layerinit/shard/mesh.hpp>

namespace layerinit {

struct ParallelDegrees {
  std::uint64_t tp = 1, pp = 1, ep = 1, fsdp = 1;
  bool operator==(const ParallelDegrees&) const = default;
};

// Degrees by dimension name ({"tp", 2}, {"fsdp", 4}), the others 1: Python's mesh={"tp": 2}. Throws
// bad_input naming an unknown or repeated dimension (listing tp, pp, ep, fsdp).
LAYERINIT_API ParallelDegrees parallel_degrees(std::span<const std::pair<std::string, std::uint64_t>> named);

// What tensor parallelism does to one tensor, in the Megatron / torchtitan convention.
enum class TpRule : std::uint8_t {
  replicate,  // norms, routers, row-parallel biases, position embeddings, GPT-2's attention
  column,     // column-parallel: the output dimension is split (q, k, v, gate, up, experts' w1 and w3)
  row,        // row-parallel: the input dimension is split (o, down, experts' w2)
  vocab,      // vocab-parallel: the vocabulary dimension is split (token embedding, lm_head)
};
LAYERINIT_API std::string_view tp_rule_name(TpRule r);  // "replicate", "column", "row", "vocab"

// Where a tensor of a model sits: before the layers, in layer `layer`, or after them.
struct TensorPlace {
  enum class Kind : std::uint8_t { pre, layer, post } kind = Kind::pre;
  std::uint64_t layer = 0;
};

// The rule of each tensor of a model, in the order of spec.pre, spec.layer.tensors and spec.post:
// from roles, TensorSpec::tp_replicated and the nesting of modules, never from names (the rules and
// their sources: docs/sharding.md).
struct TpRules {
  std::vector<TpRule> pre, layer, post;
};
LAYERINIT_API TpRules tp_rules(const ModelSpec& spec);

class LAYERINIT_API ParallelPlan {
 public:
  // Checks the degrees against the model; throws bad_input with one line naming the
  // problem: a degree of 0; tp > 1 on a model no rule applies to, or a tp that does not divide the
  // attention or key/value heads; ep > 1 on a model without experts, or one that does not divide
  // them; pp larger than the number of layers (every stage holds at least one layer).
  // std::overflow_error when the ranks overflow 64 bits.
  ParallelPlan(const ModelSpec& spec, ParallelDegrees degrees);

  const ParallelDegrees& degrees() const noexcept { return d_; }
  const Mesh& mesh() const noexcept { return mesh_; }
  std::uint64_t ranks() const noexcept { return mesh_.size(); }

  struct Coords {
    std::uint64_t pp = 0, fsdp = 0, ep = 0, tp = 0;
    bool operator==(const Coords&) const = default;
  };
  Coords coords(std::uint64_t rank) const;  // throws std::out_of_range past ranks()
  std::uint64_t rank(const Coords& c) const;

  // Pipeline stage s holds layers [offset, offset + size): the L layers in pp contiguous ranges, the
  // first L mod pp stages one layer more (numpy.array_split).
  Range stage_layers(std::uint64_t stage) const;
  std::uint64_t stage_of_layer(std::uint64_t layer) const;

  // Whether the rank at `c` holds (a piece of) tensor `t` at `where`: the first stage holds the
  // tensors before the layers, the last stage those after them (and, for a model with tied
  // embeddings and pp > 1, a replica of the token embedding, its output layer, as Megatron keeps
  // it); a layer's tensors live on its stage, and an expert's only on the ep coordinate that owns it
  // (experts split in ep contiguous blocks).
  bool holds(const TensorSpec& t, TensorPlace where, const Coords& c) const;

  // Tensor t's rule (tp_rules) at `where`: replicate for a tensor the model does not split.
  TpRule tp_rule(const TensorSpec& t, TensorPlace where) const;

  // The piece of tensor `p` (whose spec is `t`, at `where`) the rank at `c` holds, in the coordinates
  // of p.memory_shape: the tensor-parallel split of its dimension per tp_rule (the output, input or
  // vocabulary dimension, wherever the orientation stores it), then FSDP's split of dimension 0 of
  // that piece (FSDP2 shards the tensor-parallel local tensor). May be empty (more ranks than rows).
  // Does not ask holds().
  Box box(const PlannedTensor& p, const TensorSpec& t, TensorPlace where, const Coords& c) const;

  std::string describe() const;  // "pp 2 x fsdp 1 x ep 1 x tp 4 = 8 ranks"

  // The plan of `degrees` for `spec` with `rank` (when given) one of its ranks: every bad mesh is one
  // bad_input line, the degrees' product overflowing 64 bits included. `flag` starts the
  // names in messages: "--" gives the CLI's "--rank 4 is outside the mesh of 4 ranks (...)", "" the
  // Python argument's "rank 4 ...".
  static ParallelPlan checked(const ModelSpec& spec, ParallelDegrees degrees, std::optional<std::uint64_t> rank,
                              std::string_view flag);

 private:
  ParallelDegrees d_;
  std::uint64_t num_layers_ = 0, num_experts_ = 0;
  std::string expert_prefix_;  // ModelSpec::layer.expert_prefix
  bool tied_ = false;  // the token embedding is also the output layer
  Mesh mesh_;
  std::unordered_map<std::string, TpRule> split_[3];  // by TensorPlace::Kind: the tensors tp splits, by name
};

}  // namespace layerinit
