// The JSON model spec: model code declares its own layer types without C++ (docs/spec.md).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <layerinit/core/api.hpp>
#include <layerinit/core/errors.hpp>
#include <layerinit/init/describe.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

// A malformed or invalid spec; what() is "<source>: <reason>", the source "spec" (a JSON spec),
// "config.json" (a Hugging Face config) or "composite" (a composite parameter's description,
// shard/composite.hpp), the reason naming the field: "spec: layer.tensors[2].shape[1]: must be a
// positive integer". Callers that say where the text came from their own way (the Python
// package) take source() and reason() apart instead of editing what(). As bad_input: the source is
// its argument, the reason its problem.
class LAYERINIT_API spec_error : public bad_input {
 public:
  spec_error(std::string source, const std::string& reason);
  const std::string& source() const noexcept { return argument(); }
  const std::string& reason() const noexcept { return problem(); }
};

LAYERINIT_API ModelSpec spec_from_json(std::string_view text);
// The spec file at `path` (read_input_file, core/input_file.hpp: a regular file of at most 16 MiB):
// bad_input "spec file '<path>' ..." when it cannot be read, else spec_from_json's errors.
LAYERINIT_API ModelSpec load_spec_file(const std::string& path);
LAYERINIT_API std::string spec_to_json(const ModelSpec& spec);  // spec_from_json(spec_to_json(s)) == s

// A model description (init/describe.hpp) from JSON (docs/spec.md, "Descriptions"): {"name",
// "family", "hyper", "parameters": [{"name", "shape", "module", "fan_in", "fan_out", "storage",
// "tied_to", "role", "init", "buffer"}]}; errors as spec_from_json's.
LAYERINIT_API ModelDescription description_from_json(std::string_view text);

}  // namespace layerinit
