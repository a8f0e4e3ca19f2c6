// Model specs: which tensors a model has, their logical shapes and what recipes need to know.
//
// A model is `pre` tensors (embeddings), then num_layers copies of one LayerSpec whose names are
// relative ("self_attn.q_proj.weight" -> "model.layers.3.self_attn.q_proj.weight"), then `post`
// tensors (final norm, head). Shapes are the reference implementation's (Hugging Face), so a
// Linear weight is [out, in] and GPT-2's Conv1D weight is [in, out]; the element index that fixes a
// value is the row-major index over this logical shape.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/core/shape.hpp>
#include <layerinit/core/text.hpp>  // printable(): specs' names in messages
#include <layerinit/kernels/fill.hpp>

namespace layerinit {

// Checks a fill's numbers are finite and within float range and that prepare_fill accepts it; throws
// bad_input naming the problem.
LAYERINIT_API void validate_fill(const FillSpec& f);

// What a tensor is, for recipes.
enum class TensorRole : std::uint8_t {
  embedding,           // token embedding [vocab, hidden]
  position_embedding,  // learned positions [positions, hidden]
  linear_weight,       // a projection inside a block
  output_weight,       // a projection that writes into the residual stream (o_proj, down_proj, c_proj)
  linear_bias,
  norm_weight,         // RMSNorm / LayerNorm scale
  norm_bias,
  router_weight,       // MoE router [experts, hidden]
  head_weight,         // final projection to the vocabulary or the MLP's output layer
  other,
};
LAYERINIT_API std::string_view role_name(TensorRole r);
LAYERINIT_API TensorRole parse_role(std::string_view s);  // throws bad_input listing valid names
LAYERINIT_API std::vector<std::string> role_names();       // every role's name, in declaration order
// A rule's text that may name either (layerinit.jax's rules={glob: "head_weight" | "normal(0, 0.02)"}):
// the role of that name, else the fill parse_fill reads (validated); bad_input "<argument> '<text>' is
// neither a tensor role (valid: ...) nor a fill: <why not a fill>".
LAYERINIT_API std::variant<TensorRole, FillSpec> parse_role_or_fill(std::string_view text, std::string_view argument);

// A box of a tensor's logical shape that its framework gives a fill of its own: the padding row of an
// embedding (nn.Embedding's padding_idx, transformers' _init_weights), a slice a model's init writes
// apart. Its elements keep their index in the whole tensor, so outside every region the values are the
// tensor's fill exactly as without regions.
struct FillRegion {
  Shape offset;  // one per logical dimension
  Shape shape;
  FillSpec fill;
  bool operator==(const FillRegion&) const = default;
};

// What is wrong with region `r`'s box in a tensor of logical shape `shape`: a rank other than the
// shape's, or a box outside it ("lies outside [512, 64]"); nothing when it fits. Its fill is checked
// apart (validate_fill, and prepare_fill for a dtype).
LAYERINIT_API std::optional<std::string> region_problem(const FillRegion& r, const Shape& shape);
// Region k as messages name it: "region 1 at [3, 0] of [1, 64]".
LAYERINIT_API std::string region_label(std::size_t k, const FillRegion& r);

struct TensorSpec {
  std::string name;   // relative inside a LayerSpec, canonical in pre/post
  Shape shape;        // logical shape
  TensorRole role = TensorRole::other;
  std::uint64_t fan_in = 0;   // inputs of the linear map this tensor belongs to (0 = not a map)
  std::uint64_t fan_out = 0;
  // A 2-D weight stored [out, in] in the reference: orientation in-out stores it as [in, out].
  // false for GPT-2's Conv1D weights, which are [in, out] in both PyTorch and Flax.
  bool transposable = false;
  std::optional<FillSpec> init;  // an explicit rule; else the recipe decides
  // A buffer of the reference module (DeepSeek-V3's router correction bias): in its state_dict and
  // checkpoints like a parameter, but not trained, so counted apart (ModelSpec::buffer_count).
  bool buffer = false;
  // Tensor parallelism keeps this map whole on every rank, where its role alone would split it: it
  // fuses maps along its output (GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj), or a norm reads
  // its output whole (DeepSeek-V3's q_a_proj, kv_a_proj_with_mqa). docs/sharding.md has the rules.
  bool tp_replicated = false;
  // Boxes with fills of their own, applied over the tensor's fill in order (a later one wins where
  // they overlap); each lies inside the shape. An override (--init-override, Recipe::add_override)
  // replaces the tensor's own fill only: the regions stay.
  std::vector<FillRegion> regions = {};
  bool operator==(const TensorSpec&) const = default;
};

struct LayerSpec {
  std::vector<TensorSpec> tensors;
  // MoE experts: a tensor named expert_prefix + e + "." + rest ("block_sparse_moe.experts.3.w1.weight"
  // with prefix "block_sparse_moe.experts.") is expert e's copy of `rest`, read as split_layer_name
  // reads layer indices. Every rest has experts 0..E-1, all of one shape, role and orientation; the
  // stacked layout may then hold them as one [L, E, ...] buffer (stacked_layout). Empty: no experts.
  std::string expert_prefix;
  bool operator==(const LayerSpec&) const = default;
};

// Llama 3.1's rotary frequency scaling, config.json's rope_scaling with rope_type "llama3". Only
// config.json reads it (no tensor depends on it); factor 0: none.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 0;
  double high_freq_factor = 0;
  std::uint64_t original_max_position_embeddings = 0;
  bool operator==(const RopeScaling&) const = default;
};

// Architecture numbers: for recipes (initializer_range, depth scaling) and for config.json.
struct Hyper {
  std::uint64_t vocab_size = 0;
  std::uint64_t hidden_size = 0;
  std::uint64_t intermediate_size = 0;
  std::uint64_t num_heads = 0;
  std::uint64_t num_kv_heads = 0;
  std::uint64_t head_dim = 0;
  std::uint64_t max_position_embeddings = 0;
  std::uint64_t num_experts = 0;
  std::uint64_t experts_per_token = 0;
  double initializer_range = 0.02;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool bias = false;
  bool operator==(const Hyper&) const = default;
};

// The first inconsistency among a Hyper's numbers: the field and what is wrong with it ("num_kv_heads",
// "3 does not divide num_heads 4"), or nothing. Presets, ModelSpec::validate and JSON specs all ask it.
struct HyperProblem {
  std::string field;
  std::string message;
};
LAYERINIT_API std::optional<HyperProblem> hyper_problem(const Hyper& h);

// The most tensors a spec lists (pre, one repeated layer and post; the repeats are not listed). Kimi
// K2 lists about 1,200 a layer (384 experts of three); a config whose counts would list more (2^40
// experts) is refused from the counts, before its tensors are made (decoder_size_problem).
inline constexpr std::uint64_t kMaxSpecTensors = 1u << 18;

struct LAYERINIT_API ModelSpec {
  std::string name;     // preset name or the spec's own
  std::string family;   // "mlp", "custom", or the Hugging Face model_type of the family (hf_model_types())
  Hyper hyper;
  std::vector<TensorSpec> pre;
  LayerSpec layer;
  std::string layer_prefix = "model.layers.";  // canonical = layer_prefix + (first_layer + i) + "." + relative name
  std::uint64_t num_layers = 0;                 // copies of `layer`
  // The model's index of the repeated block's first layer. Layers before it have other tensors
  // (DeepSeek-V3's dense layers before its MoE layers) and are listed in `pre` under their canonical
  // names, as layers 0..first_layer-1.
  std::uint64_t first_layer = 0;
  std::vector<TensorSpec> post;
  // The Hugging Face config.json this spec was read from (spec_from_hf_config), byte for byte: the
  // config.json written beside safetensors weights. Empty: config_json generates one from family
  // and hyper.
  std::string hf_config;

  // Layer i of the repeated block (0-based in the block) is layer first_layer + i of the model.
  std::string canonical_name(std::uint64_t layer_index, const TensorSpec& t) const;
  // first_layer + num_layers: the model's depth (recipes' L, config.json's num_hidden_layers).
  std::uint64_t total_layers() const;
  std::uint64_t parameter_count() const;        // elements of every tensor but the buffers
  std::uint64_t buffer_count() const;           // elements of the buffers
  std::uint64_t element_count() const;          // both: what the weights' bytes count
  std::uint64_t layer_parameter_count() const;  // one repeated layer's, buffers aside
  // Throws bad_input naming the problem: empty or zero dims, duplicate names, overflow.
  void validate() const;
  bool operator==(const ModelSpec&) const = default;

 private:
  void check_experts() const;  // validate()'s checks of layer.expert_prefix
};

// A canonical layer tensor name split at its layer: "model.layers.3.mlp.up_proj.weight" with prefix
// "model.layers." is layer 3, "mlp.up_proj.weight". Nothing for names outside the layers (and for a
// stacked name, which has no index); the index is decimal without a leading zero, as
// ModelSpec::canonical_name writes it.
struct LayerName {
  std::uint64_t layer = 0;
  std::string_view relative;
};
LAYERINIT_API std::optional<LayerName> split_layer_name(std::string_view layer_prefix, std::string_view name);

// Expert e of `rest` for a layer tensor inside the LayerSpec's experts (see LayerSpec); nothing for
// the others and when the LayerSpec has no expert prefix.
LAYERINIT_API std::optional<LayerName> split_expert_name(const LayerSpec& layer, std::string_view name);
// The number of experts E of a LayerSpec (0 without experts).
LAYERINIT_API std::uint64_t num_experts(const LayerSpec& layer);

// The stacked layout's names and shapes (stacking/, the builder and emit share them):
// "model.layers." + "mlp.up_proj.weight" -> "model.layers.mlp.up_proj.weight".
LAYERINIT_API std::string stacked_name(const ModelSpec& spec, const TensorSpec& t);
// [L, ...slice]: the shape of a stacked layer parameter whose layer slices have `slice` shape.
LAYERINIT_API Shape stacked_shape(const ModelSpec& spec, const Shape& slice);

// How the stacked layout holds MoE experts: one [L, ...] buffer per expert tensor, or one
// [L, E, ...] buffer per expert weight ("model.layers.block_sparse_moe.experts.w1.weight"), the layout
// JAX scan code and transformers 5's fused experts expect. Either way an element's value is that of
// the per-expert tensor it stands for.
enum class ExpertLayout { per_expert, stacked };
LAYERINIT_API std::string_view expert_layout_name(ExpertLayout e);  // "per-expert", "stacked"
LAYERINIT_API ExpertLayout parse_expert_layout(std::string_view s);  // throws listing valid names

// Where each layer tensor goes in the stacked layout. Buffer b holds L * experts slices of one
// layer tensor's shape; layer tensor j of layer i (0-based in the block) is slice
// i * experts + expert of its buffer.
struct StackedBuffer {
  std::string name;           // stacked_name, with the expert index dropped for a fused buffer
  std::size_t first = 0;      // the LayerSpec index of its first tensor (expert 0 for a fused buffer)
  std::uint64_t experts = 1;  // slices per layer: E for a fused expert buffer, else 1
  bool fused = false;         // [L, E, ...] rather than [L, ...]
};
struct LAYERINIT_API StackedLayout {
  std::vector<StackedBuffer> buffers;  // in LayerSpec order of their first tensor
  std::vector<std::size_t> buffer;     // per layer tensor: its buffer
  std::vector<std::uint64_t> expert;   // per layer tensor: its slice within a layer (0 unless fused)
  std::uint64_t slice(std::size_t j, std::uint64_t layer) const { return layer * buffers[buffer[j]].experts + expert[j]; }
  // The buffer's shape for slices of `slice` shape: [L, ...] or [L, E, ...].
  Shape shape(const ModelSpec& spec, std::size_t b, const Shape& slice) const;
};
LAYERINIT_API StackedLayout stacked_layout(const ModelSpec& spec, ExpertLayout experts);

}  // namespace layerinit
