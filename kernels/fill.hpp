// Fills: what a tensor's values are, and jobs that write them into memory.
//
// The value contract: element i (row-major index over the tensor's logical shape) of a tensor named N,
// for a seed S, is value(params, bits) where bits = word (i mod 4) of Philox4x32-10 with counter
// (i / 4) and key philox_key(S, fnv1a64(N)), rounded to nearest in the target dtype. Nothing else
// (launch shape, threads, chunking, layout, other tensors) enters it.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/core/hd.hpp>
#include <layerinit/kernels/transforms.hpp>

namespace layerinit {

enum class FillKind : std::uint8_t { constant = 0, normal = 1, trunc_normal = 2, uniform = 3 };

std::string_view fill_kind_name(FillKind k);

// A fill as users write it, in double precision.
struct FillSpec {
  FillKind kind = FillKind::constant;
  double mean = 0.0;  // normal, trunc_normal
  double std = 1.0;   // normal, trunc_normal
  double a = -2.0;    // trunc_normal lower bound
  double b = 2.0;     // trunc_normal upper bound
  bool bounds_in_std = false;  // a, b in units of std around mean (JAX, torchtitan) or absolute (PyTorch)
  double lo = 0.0;    // uniform
  double hi = 1.0;    // uniform
  double value = 0.0; // constant

  static FillSpec constant(double v);
  static FillSpec normal(double mean, double std);
  // PyTorch's trunc_normal_: absolute bounds a, b.
  static FillSpec trunc_normal(double mean, double std, double a, double b);
  // JAX's truncated_normal / torchtitan's cutoff: bounds a*std, b*std around mean.
  static FillSpec trunc_normal_std(double mean, double std, double a_std, double b_std);
  static FillSpec uniform(double lo, double hi);

  std::string describe() const;  // e.g. "normal(0, 0.02)"
  bool operator==(const FillSpec&) const = default;
};

// The fills as users write them: one table for the CLI's text ("normal(0, 0.02)") and JSON specs
// ({"normal": {"std": 0.02}}). Each kind's name and its parameters in order, with the default a
// JSON spec may leave out (none: required); the text form gives every parameter.
struct FillParam {
  std::string_view name;
  std::optional<double> default_value;
};
struct FillSyntax {
  std::string_view name;
  std::vector<FillParam> params;
};
const std::vector<FillSyntax>& fill_syntax();  // constant, normal, trunc_normal, trunc_normal_std, uniform
std::string fill_names();                      // "constant, normal, trunc_normal, trunc_normal_std, uniform"
// The fill `name` from its parameters in table order, all given. Throws std::invalid_argument for an
// unknown name (listing the valid ones) or a wrong count. Values are validated by prepare_fill.
FillSpec make_fill(std::string_view name, std::span<const double> args);
// "normal(0, 0.02)": a kind and all its parameters as finite decimal numbers, in table order.
// Throws std::invalid_argument naming the text and the problem.
FillSpec parse_fill(std::string_view text);

// A fill prepared for one dtype: the float constants the per-element code uses. Trivially copyable.
struct FillParams {
  FillKind kind = FillKind::constant;
  float scale = 0.f;  // normal, trunc_normal: std * sqrt(2); uniform: hi - lo
  float shift = 0.f;  // normal, trunc_normal: mean; uniform: lo; constant: the value
  float half_width = 0.f;  // trunc_normal: (erf(b') - erf(a')) / 2 in the erf domain
  float center = 0.f;      // trunc_normal: (erf(b') + erf(a')) / 2
  float lo = 0.f;     // trunc_normal: a', clamp; uniform: unused
  float hi = 0.f;     // trunc_normal: b', clamp; uniform: hi, clamp
};

// Validates the spec (finite numbers, std > 0, a < b, lo < hi) and computes the constants for
// dtype t. trunc_normal's bounds are snapped inward to values of t (a' = smallest value >= a,
// b' = largest value <= b) so rounded outputs never leave [a, b]; the distribution sampled is the
// normal truncated to [a', b'], rounded to nearest. A random fill whose every value rounds to one
// value of t (or whose std * sqrt(2) is 0 in float) is refused (docs/spec.md). Throws
// std::invalid_argument naming the problem.
FillParams prepare_fill(const FillSpec& spec, DType t);

// One contiguous run of memory of one tensor to fill.
struct FillJob {
  void* dst = nullptr;        // memory element `begin` of the tensor
  std::uint64_t key = 0;      // philox_key(seed, tensor_key(name))
  std::uint64_t begin = 0;    // memory elements [begin, end) of the tensor
  std::uint64_t end = 0;
  std::uint64_t rows = 0;     // logical shape seen as [rows, cols] (cols = last dim)
  std::uint64_t cols = 0;
  FillParams params{};
  DType dtype = DType::f32;
  bool transposed = false;    // memory holds [cols, rows]: logical (r, c) sits at c * rows + r
};

// A job that fills a whole tensor of `numel` elements stored at dst.
FillJob make_fill_job(void* dst, DType t, std::uint64_t numel, std::uint64_t seed,
                      std::string_view canonical_name, const FillSpec& spec);

// The float value of an element from its 32 random bits (before rounding to the dtype), per kind.
template <FillKind K> LAYERINIT_HD float value_of(const FillParams& p, std::uint32_t bits) {
  if constexpr (K == FillKind::normal) {
    return transforms::fmaf_(p.scale, transforms::erfinv(transforms::unit_open(bits)), p.shift);
  } else if constexpr (K == FillKind::trunc_normal) {
    // Inverse CDF on the erf-domain interval of [a', b']: no rejection, one draw per value.
    const float t = transforms::fmaf_(p.half_width, transforms::unit_open(bits), p.center);
    return transforms::clamp(transforms::fmaf_(p.scale, transforms::erfinv(t), p.shift), p.lo, p.hi);
  } else if constexpr (K == FillKind::uniform) {
    return transforms::clamp(transforms::fmaf_(p.scale, transforms::unit_01(bits), p.shift), p.shift, p.hi);
  } else {
    return p.shift;
  }
}

LAYERINIT_HD float element_value(const FillParams& p, std::uint32_t bits) {
  switch (p.kind) {
    case FillKind::normal: return value_of<FillKind::normal>(p, bits);
    case FillKind::trunc_normal: return value_of<FillKind::trunc_normal>(p, bits);
    case FillKind::uniform: return value_of<FillKind::uniform>(p, bits);
    case FillKind::constant:
    default: return p.shift;
  }
}

// Logical index of memory element m.
LAYERINIT_HD std::uint64_t logical_index(const FillJob& j, std::uint64_t m) {
  return j.transposed ? (m % j.rows) * j.cols + m / j.rows : m;
}

}  // namespace layerinit
