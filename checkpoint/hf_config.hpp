// Hugging Face config.json for a model spec, so transformers loads an emitted directory as a model.
#pragma once

#include <string>

#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// config.json for the llama, mistral, mixtral, qwen2, gemma2 and gpt2 families (not deepseek_v3: its
// latent-attention and MoE numbers are not in Hyper) (from spec.family, spec.hyper and
// spec.num_layers). Throws std::invalid_argument for other families, naming the supported ones.
std::string config_json(const ModelSpec& spec, DType dtype);
// Whether config_json has a Hugging Face model_type for spec's family.
bool has_config_json(const ModelSpec& spec);

}  // namespace layerinit
