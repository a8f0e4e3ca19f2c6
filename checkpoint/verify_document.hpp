// The verify report as the document its JSON is (private): the CLI's --report json and layerinit.verify
// read this document, so neither parses the library's own text back.
#pragma once

#include <nlohmann/json.hpp>

#include <layerinit/checkpoint/verify.hpp>

namespace layerinit {

// verify_report_json's object. Strings are as the report holds them (a stored name may not be UTF-8:
// its reader says how to show it).
nlohmann::ordered_json verify_report_document(const VerifyReport& report);

}  // namespace layerinit
