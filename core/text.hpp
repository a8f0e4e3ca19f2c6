// Text rules shared by specs, recipes, overrides and messages.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>

namespace layerinit {

// Glob match on canonical names (fnmatch without special treatment of '.' or '/').
LAYERINIT_API bool name_matches(std::string_view pattern, std::string_view name);

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: shortest form, no surrogates, at most
// U+10FFFF), or 0 when s[i] does not start one. i < s.size().
LAYERINIT_API std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// User text made safe for a one-line message or a terminal: C0 controls, DEL, C1 controls (a raw byte
// or UTF-8 encoded, U+0080-U+009F) and bytes that are not UTF-8 become \xNN; other UTF-8 passes as
// it is. A backslash is kept, so escaping twice changes nothing. Past `max` bytes the text is cut
// and "..." appended.
LAYERINIT_API std::string printable(std::string_view s, std::size_t max = std::string_view::npos);

// The first `limit` items of a message's list, then how many more: "a, b, c and 4 more".
LAYERINIT_API std::string listed(const std::vector<std::string>& items, std::size_t limit = 5);

// Literal text as a name template (shard/composite.hpp: "{k}" is stack axis k's index): braces doubled.
LAYERINIT_API std::string escape_template(std::string_view name);

}  // namespace layerinit
