// One record per Hugging Face model family: its model_type and class, how its config.json is read into
// a spec and how one is written for a spec made without it. Private to the library: every family is a
// file of its own (init/families/<model_type>.cpp) that uses the helpers declared here, hf_spec.cpp
// reads through the records and checkpoint/hf_config.cpp writes through them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <layerinit/init/families.hpp>
#include <layerinit/init/spec.hpp>

#include "json_read.hpp"

namespace layerinit::hf {

// The numbers every decoder config has, as its config class defaults them. nullopt: the class
// default is None, which the model derives (kv heads = heads, head_dim = hidden / heads).
struct Defaults {
  std::uint64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  std::optional<std::uint64_t> num_key_value_heads;
  std::optional<std::uint64_t> head_dim;
  std::uint64_t max_position_embeddings;
  double rms_norm_eps;
  bool tie_word_embeddings;
  double rope_theta;  // the default rope_parameters' (full attention's, for Gemma 3)
  std::optional<std::int64_t> pad_token_id;  // nullopt: the class default is None
};

// What a family's config class validates of the attention numbers (transformers 5.24,
// models/<type>/configuration_<type>.py): a checkpoint of numbers it refuses would not load.
struct AttentionChecks {
  // The config class whose validate_architecture raises when num_attention_heads does not divide
  // hidden_size, whatever head_dim is (LlamaConfig, Gemma2Config, Gemma3TextConfig); nullptr: none.
  const char* heads_divide_hidden = nullptr;
  // head_dim: null is hidden_size // num_attention_heads: the class declares `head_dim: int | None`
  // and derives it (Llama, Mistral, Mixtral) or sets it itself (DeepseekV3Config.__post_init__).
  // Elsewhere null fails @strict's `head_dim: int` (Gemma 2 and 3, Qwen3, gpt-oss), or is kept as
  // an attribute the attention's getattr(config, "head_dim", ...) reads as None (the rest).
  bool null_head_dim = false;
};

// A config.json object read field by field; every problem is spec_error("config.json", "<key>: <what>").
// Aliases are transformers' attribute_map: a config may give "num_experts" for Mixtral's num_local_experts.
class Config {
 public:
  Config(const json& doc, std::string model_type, std::vector<std::pair<std::string, std::string>> aliases,
         AttentionChecks checks)
      : doc_(doc), model_type_(std::move(model_type)), aliases_(std::move(aliases)), checks_(checks) {}

  const std::string& model_type() const { return model_type_; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

  // The value of `key` (or of an alias of it), nullptr when absent.
  const json* get(const char* key) const;
  // The key a config gives `key` under: an alias of it when the config uses that, for messages.
  std::string given(const char* key) const;
  // A positive integer; absent: `def`.
  std::uint64_t count(const char* key, std::uint64_t def) const;
  // A non-negative integer (a count that may be zero); absent: `def`.
  std::uint64_t count0(const char* key, std::uint64_t def) const;
  // A positive integer that null (or an absent key whose class default is None) leaves to the
  // model: 0 stands for that.
  std::uint64_t derived(const char* key, std::optional<std::uint64_t> def) const;
  bool flag(const char* key, bool def) const;
  // A finite number >= 0; absent: `def`.
  double real(const char* key, double def) const;
  // initializer_range as _init_weights reads it: `self.config.initializer_range or 0.02`.
  double initializer_range() const;
  // The common numbers of a decoder: Hyper, with rope_theta from rope_parameters (transformers 5)
  // or rope_theta (older configs), and Llama 3.1's rope scaling.
  Hyper hyper(const Defaults& d) const;
  std::uint64_t layers(const Defaults& d) const { return count("num_hidden_layers", d.num_hidden_layers); }
  // rope_theta from rope_parameters, else the top-level rope_theta / rope_scaling, else `default_theta`.
  void read_rope(Hyper& h, double default_theta) const;

 private:
  const json& doc_;
  std::string model_type_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // alias, canonical
  AttentionChecks checks_;
};

// The tensors a family's layout is made of, with the roles and fans recipes read (init/families.cpp).
TensorSpec linear_tensor(std::string name, std::uint64_t in, std::uint64_t out, TensorRole role = TensorRole::linear_weight);
TensorSpec bias_tensor(std::string name, std::uint64_t in, std::uint64_t out);
TensorSpec norm_tensor(std::string name, std::uint64_t d, TensorRole role = TensorRole::norm_weight);
TensorSpec embedding_tensor(std::string name, std::uint64_t rows, std::uint64_t d, TensorRole role = TensorRole::embedding);

// A config's spec: `name` is the spec's name.
using Reader = ModelSpec (*)(const Config&, const Defaults&, std::string name);
// The keys of a config.json for a spec of the family made without one (a preset, a JSON spec), after
// the "architectures" and "model_type" config_json writes from the record and before its "torch_dtype".
using Writer = void (*)(const ModelSpec&, nlohmann::ordered_json&);

// What a family's PreTrainedModel._init_weights (transformers' modeling_<type>.py) does beyond the base
// class's rules, for the hf recipe (recipes.cpp).
struct HfInitQuirks {
  // GPT2PreTrainedModel: every output projection (c_proj.weight) normal(0, initializer_range / sqrt(2 n_layer)).
  bool depth_scaled_outputs = false;
  // GptOssPreTrainedModel: the attention sinks and the router's bias drawn normal(0, initializer_range) like weights.
  bool sinks_and_router_bias_drawn = false;
};

struct FamilyRecord {
  const char* model_type;
  const char* causal_lm;  // the class that builds these tensors, as `architectures` names it
  Defaults defaults;
  std::vector<std::pair<std::string, std::string>> aliases;  // attribute_map: alias, canonical
  Reader read;
  AttentionChecks checks = {};
  // The model makes its token embedding nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id),
  // whose row transformers' _init_weights zeroes (not GPT-2's wte, not GPT-NeoX's embed_in).
  bool padding_idx = true;
  // nullptr: layerinit reads this family's config.json but writes none of its own.
  Writer write = nullptr;
  HfInitQuirks hf_init = {};
  // transformers' module names that differ from the checkpoint's (its conversion_mapping.py renames a
  // checkpoint's key to them when it loads): module name -> tensor name. A framework adapter maps a
  // model's parameters through it (layerinit.torch.init_ on GPTNeoXForCausalLM's lm_head).
  std::vector<std::pair<std::string, std::string>> module_names = {};
  // torchtitan's model package whose state-dict adapter (its from_hf) loads this family's checkpoints,
  // nullptr for none (torchtitan/models/<package>/__init__.py and state_dict_adapter.py).
  struct Torchtitan {
    const char* package = nullptr;
    std::optional<bool> moe;        // the family of the package's models with MoE layers (true) or without; none: either
    bool rope_interleaved = false;  // its adapter permutes q/k rows to interleaved RoPE (llama3's _reverse_permute)
  } torchtitan = {};
};

// Every family, by model_type (their files' order), the order config_json's messages list the ones it writes.
const std::vector<FamilyRecord>& family_records();
// The record of `model_type`, nullptr for none.
const FamilyRecord* find_family(std::string_view model_type);

// The records, init/families/<name>.cpp each defining `FamilyRecord <name>_record()`, by file name: the
// list is generated from the folder (init/CMakeLists.txt), family_records() returns it.
std::vector<FamilyRecord> family_file_records();

// ---- what several families share (init/families_common.cpp) ----

// The experts of an MoE config: `key` (its count, default E) and num_experts_per_tok (default k).
void read_experts(const Config& c, Hyper& h, const char* key, std::uint64_t E, std::uint64_t k);
// DeepSeek-V3's MoE layers (GLM-4.5's too): first_k_dense_replace dense layers, then routed experts of
// moe_intermediate_size, a sigmoid router with its correction-bias buffer, n_shared_experts shared ones.
void deepseek_moe(const Config& c, const Defaults& d, DecoderLayout& l, std::uint64_t width, std::uint64_t dense);
// decoder_spec of the config's layers, once `h` and `l` are checked (hyper_problem, decoder_size_problem).
// `experts` and `dense` name the config's fields that set Hyper.num_experts and the dense layers, for
// a refusal of their counts: they are checked before any tensor is made (2^40 experts would fill the
// memory with tensor records).
ModelSpec decoder(const Config& c, const Defaults& d, std::string name, Hyper h, const DecoderLayout& l,
                  const char* experts = "num_experts", const char* dense = "first_k_dense_replace");

// The readers of more than one family.
// Llama, SmolLM3: attention_bias on q, k, v and o; mlp_bias on gate, up and down.
ModelSpec read_llama(const Config& c, const Defaults& d, std::string name);
// Gemma 2 and 3: four norms a layer, all stored as offsets from one; Gemma 3 adds q/k norms.
ModelSpec read_gemma(const Config& c, const Defaults& d, std::string name);
// DeepSeek-V3 (and Kimi K2, which is one): multi-head latent attention; attention_bias on q_a_proj,
// kv_a_proj_with_mqa and o_proj. The multi-token-prediction layers (num_nextn_predict_layers) are
// not built by transformers and not here.
ModelSpec read_deepseek_v3(const Config& c, const Defaults& d, std::string name);

// The sizes every config.json has first, under transformers' common names: vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads.
void write_sizes(const ModelSpec& spec, nlohmann::ordered_json& j);
// The keys of transformers' decoder configs, from the spec's numbers; `act` is the MLP's activation
// key and value (Gemma 2's hidden_activation, the others' hidden_act). transformers 5 reads
// rope_parameters, older releases rope_theta and rope_scaling: both are written.
void write_decoder(const ModelSpec& spec, nlohmann::ordered_json& j, const char* act_key = "hidden_act",
                   const char* act = "silu");
// Mistral's config.json (Mixtral's adds its experts).
void write_mistral(const ModelSpec& spec, nlohmann::ordered_json& j);

}  // namespace layerinit::hf
