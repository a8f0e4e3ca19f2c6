// A model's parameters as its framework sees them (PyTorch modules, Equinox and Flax trees, C++
// model code), made into a spec by one set of rules: the role vocabulary, the layer index, the
// repeated block, ties and the Flax `kernel` convention (docs/spec.md, "Descriptions").
//
// Both Python adapters only collect a description from their framework and hand it over; the
// roles, layers and orientation they used to infer each by their own rules are decided here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// The kind of module that owns a parameter, where the framework knows it (nn.Linear, eqx.nn.Linear,
// nnx.Linear: linear; nn.Embedding, nnx.Embed: embedding; LayerNorm, RMSNorm, GroupNorm: norm).
enum class ModuleKind : std::uint8_t { unknown, linear, embedding, norm };
LAYERINIT_API std::string_view module_kind_name(ModuleKind k);
LAYERINIT_API ModuleKind parse_module_kind(std::string_view s);  // throws bad_input listing valid names

// How a 2-D weight is stored: [out, in] (PyTorch, Equinox) or [in, out] (Flax).
enum class WeightStorage : std::uint8_t { unknown, out_in, in_out };

struct ParameterDescription {
  std::string name;  // qualified, '.'-separated: "layers.3.attention.wo.weight"
  Shape shape;       // as stored
  ModuleKind module = ModuleKind::unknown;
  std::uint64_t fan_in = 0;  // the owning map's, where the framework or a rule says (0: unknown)
  std::uint64_t fan_out = 0;
  WeightStorage storage = WeightStorage::unknown;
  // The first name of the same storage when this parameter is tied to an earlier one (nanoGPT's
  // transformer.wte.weight = lm_head.weight): the group is one tensor under its first name.
  std::string tied_to;
  std::optional<TensorRole> role;  // a caller's rule decides the role
  std::optional<FillSpec> init;    // a caller's rule decides the fill
  bool buffer = false;
  bool tp_replicated = false;  // TensorSpec::tp_replicated: a fused map tensor parallelism keeps whole
  // Boxes with fills of their own (TensorSpec::regions), in the coordinates of the parameter as
  // stored: describe() transposes them with a 2-D weight stored [in, out]. A tied parameter's are its
  // group's first name's.
  std::vector<FillRegion> regions = {};
};

// Whose names a description's parameters carry, beyond the names every framework shares.
// haiku: DM-Haiku's `module/path.param` (hk.transform's params and state dicts: "mlp/~/linear_0.w"),
// read by Haiku's conventions (docs/spec.md, "Haiku's names").
enum class Naming : std::uint8_t { generic, haiku };
LAYERINIT_API std::string_view naming_name(Naming n);
LAYERINIT_API Naming parse_naming(std::string_view s);  // throws bad_input listing valid names

struct ModelDescription {
  std::string name = "model";
  std::string family = "custom";
  Naming naming = Naming::generic;
  Hyper hyper;                // what recipes read; hidden_size defaults to the token embedding's width
  bool hyper_hidden = false;  // hyper.hidden_size was given (else taken from the embedding)
  std::vector<ParameterDescription> parameters;
};

// What spec_from_description decided for one parameter (a tied one: its group's tensor).
struct DescribedParameter {
  std::string name;     // the parameter's own name
  std::string tensor;   // its canonical tensor name (the group's first name for a tied one)
  TensorRole role = TensorRole::other;
  bool role_known = true;                 // false: a linear map whose names do not tell its role
  std::optional<std::uint64_t> layer;     // its layer in the spec's layers, if any
  bool depth_known = true;                // false: numbered under a list that is not the layers
  Shape logical;                          // [out, in] for a map weight
  std::uint64_t fan_in = 0, fan_out = 0;  // as the spec holds them (0: from the shape)
  bool transposable = false;
  bool stored_in_out = false;  // a 2-D map weight stored [in, out] (its framework's or the kernel convention)
};

struct DescribedModel {
  ModelSpec spec;
  std::vector<DescribedParameter> parameters;  // in the description's order
};

// The spec of a description, with every rule in one place:
// - Roles: a caller's role; else by the module kind and the names the recipes' sources give their
//   maps (output projections wo, w2, o_proj, down_proj, c_proj, ...; heads lm_head, output outside
//   the layers; routers; position embeddings wpe, ...); a 2-D or larger leaf named `kernel` (Flax)
//   is a map weight, `embedding` of an unknown module an embedding.
// - Orientation: a caller's or the framework's storage; else a `kernel` is [in, out] (Flax stores
//   every kernel so: flax/linen/linear.py Dense, flax/nnx/nn/linear.py Linear), other weights
//   [out, in]. Every 2-D map weight is transposable; an n-D kernel's fans are Flax's
//   (flax/linen/initializers via jax.nn.initializers._compute_fans: in = prod(shape[:-1]),
//   out = shape[-1] * prod(shape[:-2])).
// - Haiku's names (naming haiku): module paths split at '/', Haiku's instance suffix `_N` dropped
//   where a module's kind is read; `w` a map weight [in, out] (Linear) or [..., in, out] (ConvND, in
//   a module named conv*), `b` its bias, `embeddings` an embedding, `scale`/`offset` a norm's,
//   MultiHeadAttention's `linear` (beside query, key, value) its output projection, a moving
//   average's `hidden` state zeros and its `average` refused (t.init fills it from the forward pass); modules repeated under Haiku's numbering (block, block_1, ...) have no known layer.
// - Layers: the first decimal component of a name numbers its layer; the prefix before it that
//   holds the most parameters, numbered 0..n-1, is the model's layers; the longest run of identical
//   last layers is the repeated block, earlier layers `pre` tensors under their names.
// - Ties: a group is one tensor under its first name; an embedding tied to a head is the embedding
//   with hyper.tie_word_embeddings, which every recipe fills with the head's rule (docs/recipes.md).
// With `recipe`, refuses (bad_input, one line listing them and what would tell it) the
// parameters whose fill under that recipe depends on a role or layer the description does not tell,
// or that the recipe has no rule for.
LAYERINIT_API DescribedModel describe(const ModelDescription& d, const Recipe* recipe = nullptr);

// A leaf of a framework's model tree (a JAX pytree: Equinox, Flax NNX, Haiku) that may hold its layers
// stacked on leading axes, as the JAX adapter reads it.
struct FrameworkLeaf {
  std::vector<std::string> parts;  // path components: blocks, attn, wq, weight
  std::vector<std::string> seps;   // between parts: "." where none is given (Haiku: "/" inside a module path)
  Shape shape;                     // as stored, stacked axes included
  std::optional<Shape> expected;   // one slice's shape as its module stores it, where a module says
  std::string owner;               // that module, for messages: "eqx.nn.Linear(8, 16)"
  struct Axis {
    std::size_t dim = 0;
    std::uint64_t size = 0;
    std::uint64_t group = 0;  // leaves of one transform (one vmap) share a group
  };
  std::vector<Axis> recorded;     // the layer axes the model's code put there (layerinit.jax.eval_shape)
  bool recorded_constant = false;  // the model's code makes it a constant
};

// Where a leaf's layers are: its stacked axes and the canonical name of each slice.
struct LeafSlices {
  std::vector<std::pair<std::size_t, std::uint64_t>> lead;  // per stacked axis: (path prefix length, size)
  std::vector<std::size_t> dims;                            // the dimension of each stacked axis
  Shape stored;                                             // one slice's shape: the leaf's without those
  std::vector<std::string> names;  // row-major: slice l of blocks.attn.wq.weight is blocks.{l}.attn.wq.weight
  std::string name_template;       // the same with "{a}" for axis a's index, braces of the path doubled
};

// Each leaf's stacked axes, by one rule for every JAX framework:
// - `stacked` given: every leaf under one of those path prefixes (split at '.', with Haiku naming at
//   '/' too) has one leading axis per prefix, one size under each prefix.
// - else, where the model's code was recorded (FrameworkLeaf::recorded): a transform's axis stacks its
//   leaves at their deepest common node (in a Haiku tree, the hk.layer_stack module above them); a
//   recorded constant under that node with that size at that dimension is one of its slices too.
// - else from the modules: a leaf with more leading dimensions than its module stores (filter_vmap,
//   nnx.vmap) is stacked at the highest node under which every such leaf has the same leading size,
//   and every leaf under that node has the axis too; in a Haiku tree every leaf under an unnamed
//   hk.layer_stack (a __layer_stack_* module: haiku/_src/layer_stack.py) has one.
// Throws bad_input ("stacked" or "tree") naming the leaf whose shape does not fit.
LAYERINIT_API std::vector<LeafSlices> leaf_slices(const std::vector<FrameworkLeaf>& leaves,
                                                  const std::optional<std::vector<std::string>>& stacked, Naming naming);

// A rule of the JAX adapter's `rules=` (layerinit.jax, docs/python.md): what the leaves and slices a
// path glob (core's name_matches) names are given. Rules apply in order: the last that matches wins.
struct LeafRule {
  std::string pattern;
  std::optional<TensorRole> role;
  std::optional<FillSpec> fill;
  std::optional<std::uint64_t> fan_in, fan_out;
  WeightStorage storage = WeightStorage::unknown;  // an orientation: one for every slice of a leaf
};

// A leaf as the rules see it: its name, its slices' canonical names (leaf_slices) and shapes.
struct RuledLeaf {
  std::string name;
  Shape shape;                      // as stored, stacked axes included (messages)
  Shape slice;                      // one slice's shape
  std::vector<std::string> slices;  // the slices' canonical names; none for an integer leaf
  WeightStorage storage = WeightStorage::unknown;  // what its module says
  std::string integer;  // an integer leaf's dtype ("int32"): made only as a rule's integer constant
};

// What the rules give one leaf: its storage, per slice the rules' role, fill and fans, and an integer
// leaf's constant.
struct RuledLeafOutcome {
  WeightStorage storage = WeightStorage::unknown;
  struct Slice {
    std::optional<TensorRole> role;
    std::optional<FillSpec> fill;
    std::optional<std::uint64_t> fan_in, fan_out;
  };
  std::vector<Slice> slices;
  std::optional<double> constant;
};

struct RulesOutcome {
  std::vector<RuledLeafOutcome> leaves;  // in the given order
  std::vector<std::string> unused;       // the patterns that matched nothing, in the rules' order
};

// The rules applied to a tree's leaves: a rule matches a leaf by the leaf's name or a slice's; an
// orientation applies to every slice of a leaf one of whose names it matches, a role, fill or fan to
// each slice it matches by the slice's name or the leaf's; an integer leaf takes the last matching
// rule's constant. Throws bad_input ("tree") naming an integer leaf whose matching rule is not an
// integer constant, or a leaf not stored 2-D that is given an orientation (by a rule or its module).
LAYERINIT_API RulesOutcome apply_rules(const std::vector<LeafRule>& rules, const std::vector<RuledLeaf>& leaves);

// A torchtitan model as its state-dict adapter loads a Hugging Face checkpoint into it
// (torchtitan/models/<package>/state_dict_adapter.py, from_hf): what the PyTorch adapter reads of it.
struct TorchtitanModel {
  std::string package;  // torchtitan.models.<package>, for messages
  std::string adapter;  // the adapter's class, for messages
  // The adapter's key patterns, torchtitan's -> Hugging Face's ("{}" where the layer, then the expert,
  // goes): from_hf_map reversed.
  std::vector<std::pair<std::string, std::string>> to_hf;
  bool rope_interleaved = false;  // its from_hf permutes q/k rows to interleaved RoPE (torchtitan_family)
  std::uint64_t heads = 0, kv_heads = 0;
  std::uint64_t width = 0;  // the model's dim: a router correction bias's fan_in
  struct FusedQkv {
    std::string module;  // a FusedQKVLinear's name ("layers.0.attention")
    std::uint64_t head_dim = 0, heads_per_kv = 0;
  };
  std::vector<FusedQkv> fused_qkv;
  std::vector<DescribedParameter> parameters;  // describe() of the model's own description
  std::vector<std::pair<std::string, Shape>> buffers;
};

// How one parameter (or buffer) is made of the spec's tensors: Plan::composite's arguments.
struct TorchtitanPart {
  std::string name;                    // the parameter's
  std::vector<std::string> templates;  // a composite's name templates; whole: the one tensor's name
  bool whole = false;                  // the tensor as it is
  std::vector<std::optional<std::string>> rows;  // a row permutation per template ("rope_interleave(64)")
  std::vector<std::uint64_t> stack;    // stacked experts [E, ...]: {E}
  std::uint64_t groups = 1;            // a fused wqkv: its kv heads (each group's q, then k, then v)
};

// The tensors of a torchtitan model under the Hugging Face names its adapter loads (appended to
// `d.parameters`, with the roles and fans the model's description gave), and how each parameter is
// made of them: a fused wqkv as q, k and v grouped by kv head (FusedQKVLinear._split_qkv_on_save),
// stacked experts [E, ...] as expert e's tensors, q/k rows interleaved where the adapter permutes them,
// DeepSeek-V3's router correction bias (a buffer) zeros (MoE._init_self_buffers). Throws bad_input
// ("module") naming the linear maps without a role or the parameters and buffers without a tensor.
LAYERINIT_API std::vector<TorchtitanPart> torchtitan_parameters(const TorchtitanModel& m, ModelDescription& d);

// What the PyTorch adapter read of a Megatron-core model's TransformerConfig
// (megatron/core/transformer/transformer_config.py).
struct MegatronConfig {
  struct Method {
    std::string field;            // "init_method", "output_layer_init_method", "embedding_init_method"
    std::optional<double> sigma;  // σ where the method is normal(0, σ) (utils.py's init_method_normal)
    std::string shown;            // the method as the config shows it, where `sigma` is none
  };
  std::vector<Method> methods;
  bool layernorm_zero_centered_gamma = false;
};

// Recipe megatron is TransformerConfig's default init (init_method_std for init_method and
// embedding_init_method, init_method_std / sqrt(2 L) for output_layer_init_method, norms ones):
// throws bad_input (argument "recipe", one line) listing the parameters `config` draws otherwise
// (megatron_init_field: embedding_init_method_std, an init method of the config's own, zero-centered
// norms), each with the config's fill and the recipe's (`recipe_fill` of its tensor), and up to two as
// the overrides that give the config's fills. Parameters tied to another, and those a glob of
// `overrides` names, are not checked.
LAYERINIT_API void check_megatron_config(const MegatronConfig& config, const std::vector<DescribedParameter>& described,
                                         const std::function<FillSpec(const std::string&)>& recipe_fill,
                                         const std::vector<std::string>& overrides);

// The value a framework always gives a leaf of this name, whatever the recipe (describe's `init` for
// it; the JAX adapter's value for an integer state leaf): with naming haiku, a moving average's
// `hidden` zeros (moving_averages.py) and the `counter` of hk.BatchNorm's `mean_ema` and `var_ema` 0
// (batch_norm.py makes them with warmup 0). Nothing for any other name.
LAYERINIT_API std::optional<FillSpec> framework_fill(std::string_view name, Naming naming);

}  // namespace layerinit
