// Byte counts as people write and read them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <layerinit/core/api.hpp>

namespace layerinit {

// For messages: "1.50 GiB (1610612736 bytes)"; below 1 KiB "512 bytes".
LAYERINIT_API std::string format_bytes(std::size_t bytes);
// For tables: "1.50 GiB", "512 B".
LAYERINIT_API std::string format_bytes_short(std::uint64_t bytes);
// "80GiB", "80GB", "1.5 TiB", "123456" (bytes). Throws bad_input naming the text.
LAYERINIT_API std::uint64_t parse_byte_size(std::string_view text);

}  // namespace layerinit
