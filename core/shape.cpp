#include <layerinit/core/shape.hpp>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

namespace layerinit {

std::uint64_t numel(const Shape& s) {
  std::uint64_t n = 1;
  for (auto d : s) {
    if (d != 0 && n > UINT64_MAX / d) throw std::overflow_error("element count of shape " + shape_string(s) + " overflows 64 bits");
    n *= d;
  }
  return n;
}

std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const char* what) {
  if (b > UINT64_MAX - a) throw std::overflow_error(std::string(what) + " overflows 64 bits");
  return a + b;
}
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const char* what) {
  if (a != 0 && b > UINT64_MAX / a) throw std::overflow_error(std::string(what) + " overflows 64 bits");
  return a * b;
}
std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) { return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b; }

bool Box::empty() const {
  return std::any_of(shape.begin(), shape.end(), [](std::uint64_t d) { return d == 0; });
}

Box whole_box(const Shape& global) { return {Shape(global.size(), 0), global}; }

bool next_index(Shape& index, const Shape& extent) {
  for (std::size_t d = index.size(); d-- > 0;) {
    if (++index[d] < extent[d]) return true;
    index[d] = 0;
  }
  return false;
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  Box out = a;
  for (std::size_t d = 0; d < a.shape.size(); ++d) {
    const std::uint64_t lo = std::max(a.offset[d], b.offset[d]);
    const std::uint64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (lo >= hi) return std::nullopt;
    out.offset[d] = lo;
    out.shape[d] = hi - lo;
  }
  return out;
}

std::vector<Box> subtract(const Box& a, const Box& b) {
  const auto in = intersect(a, b);
  if (!in) return {a};
  std::vector<Box> out;
  Box rest = a;
  for (std::size_t d = 0; d < a.shape.size(); ++d) {
    const std::uint64_t lo = in->offset[d], hi = lo + in->shape[d], end = rest.offset[d] + rest.shape[d];
    if (rest.offset[d] < lo) {
      Box below = rest;
      below.shape[d] = lo - rest.offset[d];
      out.push_back(below);
    }
    if (hi < end) {
      Box above = rest;
      above.offset[d] = hi;
      above.shape[d] = end - hi;
      out.push_back(above);
    }
    rest.offset[d] = lo;
    rest.shape[d] = in->shape[d];
  }
  return out;
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
