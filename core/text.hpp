// Text rules shared by specs, recipes, overrides and messages.
#pragma once

#include <string_view>

namespace layerinit {

// Glob match on canonical names (fnmatch without special treatment of '.' or '/').
bool name_matches(std::string_view pattern, std::string_view name);

}  // namespace layerinit
