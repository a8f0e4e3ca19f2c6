// Named presets: the models of the families (families.hpp) people know by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/families.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// mlp-deep, gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3-8b, llama-3-70b, llama-3.1-405b,
// mistral-7b, mixtral-8x7b, qwen2.5-7b, gemma-2-9b, deepseek-v3, llama-tiny, gpt2-tiny,
// mixtral-tiny, qwen2.5-tiny, gemma-2-tiny, deepseek-v3-tiny. Throws bad_input
// "unknown preset 'x' (valid: ...)".
LAYERINIT_API ModelSpec make_preset(std::string_view name);
LAYERINIT_API std::vector<std::string> preset_names();

}  // namespace layerinit
