// A composite as the document its versioned text is (private): the binding hands its parts to Python
// from this document, not by parsing composite_to_text's text again.
#pragma once

#include <nlohmann/json.hpp>

#include <layerinit/shard/composite.hpp>

namespace layerinit {

// composite_to_text's object, {"layerinit_composite", "dtype", "shape", "stack", "parts"}; part names
// as the composite holds them (composite_to_text refuses one that is not UTF-8).
nlohmann::ordered_json composite_document(const Composite& c);

}  // namespace layerinit
