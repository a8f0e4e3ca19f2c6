// The JSON model spec: model code declares its own layer types without C++ (docs/spec.md).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <layerinit/core/api.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// A malformed or invalid spec; what() names the field: "spec: layer.tensors[2].shape[1]: must be a
// positive integer".
class LAYERINIT_API spec_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

LAYERINIT_API ModelSpec spec_from_json(std::string_view text);
LAYERINIT_API std::string spec_to_json(const ModelSpec& spec);  // spec_from_json(spec_to_json(s)) == s

}  // namespace layerinit
