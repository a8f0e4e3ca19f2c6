// The readers of spec_json.hpp and recorded.hpp for a document already built, not text: the Python
// binding converts a dict to a document (python/src/json_value.cpp) and hands it over without
// writing and parsing JSON text. Each applies what parsing a text applies first (nesting, array
// lengths: JsonReader::check_limits), then reads the document as the text reader does, with the same
// errors. Private: nlohmann's types stay out of the installed headers.
#pragma once

#include <nlohmann/json.hpp>

#include <layerinit/init/describe.hpp>
#include <layerinit/init/recorded.hpp>
#include <layerinit/init/spec.hpp>

namespace layerinit {

ModelSpec spec_from_document(const nlohmann::json& doc);
ModelDescription description_from_document(const nlohmann::json& doc);
RecordedInit recorded_init_from_document(const nlohmann::json& doc);
// spec_to_json's document: spec_from_document(spec_document(s)) == s, its keys in spec_to_json's order.
nlohmann::ordered_json spec_document(const ModelSpec& spec);

}  // namespace layerinit
