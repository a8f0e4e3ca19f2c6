// A Hugging Face config.json as a model spec: the tensors transformers' *ForCausalLM builds from it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// The spec of a config.json (its text). `model_type` picks the family; the fields the family's
// modeling code reads fill the spec, each missing one taking the default of transformers' config
// class, so the spec has the names, shapes and parameter count of the model transformers builds.
// The spec's hf_config is the text as given (emit writes it as config.json), its name `name`, else
// the config's _name_or_path, else its model_type. Throws spec_error ("config.json: <field>: <what>")
// for malformed JSON, a field of the wrong type or out of range, an unknown model_type (listing
// hf_model_types()), and a field the family does not support (naming it). The token embedding of
// every family with a padding_idx (all but gpt2 and gpt_neox) has its pad_token_id row (the config's, else the
// class default's) as a region of zeros, as transformers' _init_weights leaves it (docs/spec.md).
LAYERINIT_API ModelSpec spec_from_hf_config(std::string_view config_json, std::string name = "");

// The config.json at `path`, or in the directory `path`, as spec_from_hf_config reads it; the spec is
// named after the file ("qwen3-8b.json" -> "qwen3-8b"), or after its directory when the file is
// config.json. Reads it with read_input_file (core/input_file.hpp): bad_input
// "Hugging Face config '<file>' ..." for a file that cannot be read (the OS's reason), is not a
// regular file or is above 16 MiB.
LAYERINIT_API ModelSpec load_hf_config(const std::string& path);

// The dtype the spec's config.json declares, as transformers reads it (PreTrainedConfig.__init__ in
// configuration_utils.py: "dtype", else the older "torch_dtype"; null is absent): float32, float16
// and bfloat16 are fp32, fp16 and bf16. nullopt for a spec without a config.json or a config that
// declares none. Throws spec_error naming the field for any other value (float64, int8, ...):
// layerinit writes none of them, so a build must be given its dtype.
LAYERINIT_API std::optional<DType> hf_config_dtype(const ModelSpec& spec);

// The dtype a build of `spec` takes when it is given none (the CLI without --dtype, Python's
// dtype=None): its config's (hf_config_dtype), else bf16.
LAYERINIT_API DType default_dtype(const ModelSpec& spec);

// The model_types spec_from_hf_config reads, sorted.
LAYERINIT_API std::vector<std::string> hf_model_types();
// The transformers module names of `model_type`'s parameters that differ from the names its spec
// (and checkpoints) give them, as (module name, tensor name); empty for none or an unknown type.
LAYERINIT_API std::vector<std::pair<std::string, std::string>> hf_module_names(std::string_view model_type);

// The family whose checkpoints torchtitan's model package `package` (torchtitan.models.<package>) loads
// through its state-dict adapter, for a model of it with MoE layers or without (`moe`); nullopt for a
// package no family record names.
struct TorchtitanFamily {
  std::string model_type;
  bool rope_interleaved = false;  // the adapter permutes q/k rows between rotate-half and interleaved RoPE
};
LAYERINIT_API std::optional<TorchtitanFamily> torchtitan_family(std::string_view package, bool moe);
// The torchtitan packages the family records name, in the records' order, each once.
LAYERINIT_API std::vector<std::string> torchtitan_packages();

}  // namespace layerinit
