// Recipe megatron against a Megatron-core model's own TransformerConfig (init/describe.hpp,
// check_megatron_config).
#include <charconv>
#include <string>
#include <vector>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>
#include <layerinit/init/describe.hpp>

namespace layerinit {
namespace {

// normal(0, σ) as its shortest round-trip text, Python's repr of a float.
std::string normal_text(double sigma) {
  char buf[32];
  return "normal(0, " + std::string(buf, std::to_chars(buf, buf + sizeof buf, sigma).ptr) + ")";
}

}  // namespace

void check_megatron_config(const MegatronConfig& config, const std::vector<DescribedParameter>& described,
                           const std::function<FillSpec(const std::string&)>& recipe_fill,
                           const std::vector<std::string>& overrides) {
  std::vector<std::string> wrong, suggested;
  for (const DescribedParameter& p : described) {
    const std::string_view field = megatron_init_field(p.role, p.tensor);
    if (p.tensor != p.name || field.empty()) continue;
    bool named = false;
    for (const std::string& pattern : overrides) named = named || name_matches(pattern, p.tensor);
    if (named) continue;
    std::optional<FillSpec> fill;  // the config's, where layerinit reads it
    std::string shown;             // as the message shows it
    if (field == "layernorm_zero_centered_gamma") {
      fill = FillSpec::constant(config.layernorm_zero_centered_gamma ? 0.0 : 1.0);
      shown = fill->describe();
    } else {
      const MegatronConfig::Method* m = nullptr;
      for (const auto& method : config.methods)
        if (method.field == field) m = &method;
      if (m == nullptr) continue;
      if (m->sigma) fill = FillSpec::normal(0.0, *m->sigma), shown = normal_text(*m->sigma);
      else shown = m->shown + ", which layerinit does not read";
    }
    const FillSpec have = recipe_fill(p.tensor);
    if (fill == have) continue;
    wrong.push_back(p.tensor + " (config." + std::string(field) + ": " + shown + "; the recipe's " + have.describe() + ")");
    if (fill && suggested.size() < 2) suggested.push_back(quote(p.tensor) + ": " + quote(shown));  // read as a Python dict
  }
  if (wrong.empty()) return;
  std::string example;
  for (const std::string& s : suggested) example += (example.empty() ? " such as {" : ", ") + s;
  if (!example.empty()) example += "}";
  bad_argument("recipe", "'megatron' is Megatron-core's default init, and this model's TransformerConfig draws " +
                             std::to_string(wrong.size()) + " parameter(s) otherwise: " + listed(wrong) +
                             "; give them the config's fills with overrides= (a name glob -> fill)" + example);
}

}  // namespace layerinit
