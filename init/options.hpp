// A build's options as users write them, read and checked once for every interface: the CLI's flags
// and the Python package's arguments hand over their text, and a bad value is one
// bad_input line naming the option as that caller spells it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/init/builder.hpp>
#include <layerinit/init/recipes.hpp>

namespace layerinit {

// How messages name the options: the CLI's flags ("--dtype", "--dtype-override '*norm*=fp9'",
// "--init-override ...") or the Python package's arguments ("dtype", "dtype_overrides['*norm*']",
// "overrides[...]"). A prefix would not do: the two spell the overrides differently.
enum class OptionNames { cli, python };

// The options as given, each with its default. Overrides are (name glob, value) in the order given:
// the last match wins, so a Python dict passes its items in its own order.
struct OptionsText {
  std::optional<std::string> dtype;  // fp32, fp16, bf16 (parse_dtype's spellings); nullopt: the model's (default_dtype)
  std::vector<std::pair<std::string, std::string>> dtype_overrides;  // (glob, dtype)
  std::string recipe = "hf";                                         // NAME or NAME:KEY=VALUE,... (make_recipe)
  std::vector<std::pair<std::string, std::string>> init_overrides;   // (glob, fill in parse_fill's grammar)
  std::uint64_t seed = 0;                                            // any value (each caller reads its integer)
  std::string layout = "per-layer";                                  // per-layer, stacked
  std::string orientation = "out-in";                                // out-in, in-out
  std::string experts = "stacked";                                   // stacked, per-expert
};

// The recipe with its overrides, each fill parsed and validated (validate_fill; each tensor's dtype is
// checked when it is planned). An empty glob is refused: it matches no tensor.
LAYERINIT_API Recipe checked_recipe(const OptionsText& text, OptionNames names);

// dtype, dtype overrides, seed, layout, orientation and experts as BuildOptions for `spec`: without a
// dtype, default_dtype(spec) (init/hf_spec.hpp), its refusal of a config's dtype ending with the
// option to give instead. An empty glob is refused.
LAYERINIT_API BuildOptions checked_build_options(const OptionsText& text, OptionNames names, const ModelSpec& spec);

// Whether a name glob (an override's) matches a canonical tensor name of `spec`, the layers' included
// without listing every layer: what the CLI warns of (--strict: refuses) and the Python package too.
LAYERINIT_API bool matches_some_tensor(const ModelSpec& spec, std::string_view pattern);

}  // namespace layerinit
