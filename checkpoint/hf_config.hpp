// Hugging Face config.json for a model spec, so transformers loads an emitted directory as a model.
#pragma once

#include <string>

#include <layerinit/core/api.hpp>
#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// Whether config_json has a config.json for `spec`: one it was read from (spec.hf_config), or a
// family whose record (init/family_record.hpp) writes one (llama, mistral, mixtral, qwen2, gemma2,
// gpt2). MLPs and other specs have none: their checkpoints hold weights only.
LAYERINIT_API bool has_config_json(const ModelSpec& spec);

// The spec's config.json: spec.hf_config as it is (the config the user described, byte for byte;
// when it declares a "dtype" or "torch_dtype" other than `dtype`, re-serialized with those keys
// saying `dtype`, the file's, since transformers loads the weights as that),
// else one its family record writes from spec.hyper and the layer count, with transformers 5's
// rope_parameters and the rope_theta / rope_scaling older releases read. Throws
// bad_input for a spec without one (naming the supported families) and for a
// config.json with a quantization_config (emit writes unquantized weights, which transformers would
// load as quantized ones).
LAYERINIT_API std::string config_json(const ModelSpec& spec, DType dtype);

}  // namespace layerinit
