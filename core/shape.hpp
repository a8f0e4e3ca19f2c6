// Tensor shapes as every layer of the library passes them: row-major dimensions, outermost first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace layerinit {

using Shape = std::vector<std::uint64_t>;
std::uint64_t numel(const Shape& s);       // throws std::overflow_error past 2^64
std::string shape_string(const Shape& s);  // "[4096, 4096]"

}  // namespace layerinit
