// Python values as JSON documents and back, without JSON text: a dict the package hands the library
// (a spec, a model description, a recorded init) becomes the document its readers read
// (init/json_documents.hpp), and a document the library writes (a spec, a verify report, a
// composite's parts) becomes a dict.
#pragma once

#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nlohmann/json.hpp>

namespace layerinit::python {

// A str's UTF-8, or nullopt for a str that UTF-8 cannot encode (a lone surrogate).
std::optional<std::string> utf8_of(nanobind::handle str);

// `v` as a document: a Mapping with str keys, a list or a tuple, a str, a bool, an int, a float or
// None, nested at most JsonReader::kDefaultMaxDepth levels (a cycle is refused as too deep).
// bad_input naming `argument` and where in it (`model['pre'][0]`) for anything else.
nlohmann::json json_of(nanobind::handle v, const std::string& argument);

// A document as Python values: objects as dicts in the document's order, arrays as lists, strings
// as str (bytes that are not UTF-8 as U+FFFD, as the JSON text shows them).
nanobind::object python_of(const nlohmann::ordered_json& j);

}  // namespace layerinit::python
