// The JSON model spec: model code declares its own layer types without C++ (docs/spec.md).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <layerinit/init/describe.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// A malformed or invalid spec; what() names the field: "spec: layer.tensors[2].shape[1]: must be a
// positive integer".
class spec_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

ModelSpec spec_from_json(std::string_view text);
std::string spec_to_json(const ModelSpec& spec);  // spec_from_json(spec_to_json(s)) == s

// A model description (init/describe.hpp) from JSON (docs/spec.md, "Descriptions"): {"name",
// "family", "hyper", "parameters": [{"name", "shape", "module", "fan_in", "fan_out", "storage",
// "tied_to", "role", "init", "buffer"}]}; errors as spec_from_json's.
ModelDescription description_from_json(std::string_view text);

}  // namespace layerinit
