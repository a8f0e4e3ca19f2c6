#include <layerinit/core/shape.hpp>

#include <limits>
#include <stdexcept>

namespace layerinit {

std::uint64_t numel(const Shape& s) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t n = 1;
  for (auto d : s) {
    if (d != 0 && n > kMax / d) throw std::overflow_error("element count of shape " + shape_string(s) + " overflows 64 bits");
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

}  // namespace layerinit
