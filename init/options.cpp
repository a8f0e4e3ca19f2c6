#include <layerinit/init/options.hpp>

#include <stdexcept>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/init/hf_spec.hpp>
#include <layerinit/init/spec.hpp>
#include <layerinit/init/spec_json.hpp>
#include <layerinit/kernels/fill.hpp>

namespace layerinit {
namespace {

struct Option {
  const char* cli;
  const char* python;
};
constexpr Option kDtype{"--dtype", "dtype"}, kDtypeOverride{"--dtype-override", "dtype_overrides"},
    kRecipe{"--recipe", "recipe"}, kInitOverride{"--init-override", "overrides"}, kLayout{"--layout", "layout"},
    kOrientation{"--orientation", "orientation"}, kExperts{"--experts", "experts"};

std::string name(Option o, OptionNames n) { return n == OptionNames::cli ? o.cli : o.python; }

// One override as its caller wrote it: the flag's PATTERN=VALUE, or the mapping's item by its key.
std::string name(Option o, OptionNames n, const std::pair<std::string, std::string>& item) {
  if (n == OptionNames::cli) return std::string(o.cli) + " " + quote(item.first + "=" + item.second);
  return std::string(o.python) + "[" + quote(item.first) + "]";
}

// f(), its bad input starting with the option's name: "--dtype: dtype 'fp8' is unknown (...)", the
// option its argument, the value and the problem still those of what was refused.
template <class F>
auto named(const std::string& option, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const bad_input& e) {
    throw bad_input(option, e.value(), e.problem(), option + ": " + e.what());
  }
}

bool is_role(std::string_view text) {
  try {
    parse_role(text);
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

void check_pattern(const std::string& option, const std::string& pattern) {
  if (pattern.empty()) bad_argument(option, ": the pattern is empty (it would match no tensor)");
}

}  // namespace

Recipe checked_recipe(const OptionsText& text, OptionNames names) {
  Recipe r = named(name(kRecipe, names), [&] { return make_recipe(text.recipe); });
  for (const auto& o : text.init_overrides) {
    const std::string option = name(kInitOverride, names, o);
    check_pattern(option, o.first);
    r.add_override(o.first, named(option, [&] {
                     if (is_role(o.second))  // "give it a role", read as an override
                       bad_argument("fill", o.second,
                                    "is a role, and an override is a fill (e.g. normal(0,0.02)); a role is given in a "
                                    "spec (docs/spec.md: \"role\"; layerinit.torch: spec=) or layerinit.jax's rules=");
                     FillSpec f = parse_fill(o.second);
                     validate_fill(f);  // now, with the fill's own message; each tensor's dtype when planned
                     return f;
                   }));
  }
  return r;
}

BuildOptions checked_build_options(const OptionsText& text, OptionNames names, const ModelSpec& spec) {
  BuildOptions o;
  if (text.dtype) {
    o.dtype = named(name(kDtype, names), [&] { return parse_dtype(*text.dtype); });
  } else {
    try {
      o.dtype = default_dtype(spec);
    } catch (const spec_error& e) {  // a config's dtype layerinit does not write: the option chooses one
      throw spec_error(e.source(), e.reason() + " (" + name(kDtype, names) + ")");
    }
  }
  for (const auto& d : text.dtype_overrides) {
    const std::string option = name(kDtypeOverride, names, d);
    check_pattern(option, d.first);
    o.dtype_overrides.push_back({d.first, named(option, [&] { return parse_dtype(d.second); })});
  }
  o.seed = text.seed;
  o.layout = named(name(kLayout, names), [&] { return parse_layout(text.layout); });
  o.orientation = named(name(kOrientation, names), [&] { return parse_orientation(text.orientation); });
  o.experts = named(name(kExperts, names), [&] { return parse_expert_layout(text.experts); });
  return o;
}

// Whether a glob matches a canonical name of the spec. Layer names are prefix + i + "." + relative;
// a pattern without digits or bracket sets cannot tell two indices of the same length apart (only
// '*' and '?' match a digit there), so it is tried on one index per length: 0, 10, 100, ... Other
// patterns go through the indices until one matches.
bool matches_some_tensor(const ModelSpec& spec, std::string_view pattern) {
  for (const auto* list : {&spec.pre, &spec.post})
    for (const auto& t : *list)
      if (name_matches(pattern, t.name)) return true;
  if (spec.layer.tensors.empty()) return false;
  auto layer_matches = [&](std::uint64_t i) {
    for (const auto& t : spec.layer.tensors)
      if (name_matches(pattern, spec.canonical_name(i, t))) return true;
    return false;
  };
  if (pattern.find_first_of("0123456789[") == std::string_view::npos) {
    // One block layer per length of its number first_layer + i: the first, then the first with one
    // more digit.
    for (std::uint64_t i = 0; i < spec.num_layers;) {
      if (layer_matches(i)) return true;
      const std::uint64_t a = spec.first_layer + i;
      if (a >= 10'000'000'000'000'000'000ULL) break;  // 20 digits: the last length
      std::uint64_t p = 10;
      while (p <= a) p *= 10;
      i = p - spec.first_layer;
    }
    return false;
  }
  for (std::uint64_t i = 0; i < spec.num_layers; ++i)
    if (layer_matches(i)) return true;
  return false;
}

}  // namespace layerinit
