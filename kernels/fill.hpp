// Fills: what a tensor's values are, and jobs that write them into memory.
//
// The value contract (docs/design.md, "The value of an element"). Element i (row-major index over the
// tensor's logical shape) of a tensor named N, for a seed S, in dtype T:
// - fp16, bf16: 16 random bits each, eight elements per Philox call. code = half-word (i mod 8) of the
//   Philox4x32-10 block with counter i / 8 and key philox_key(S, fnv1a64(N)) (word (i mod 8) / 2, its
//   low half for even i); value = half_value<kind>(params, code), rounded to nearest in T.
// - fp32: 32 random bits each: bits = word (i mod 4) of the block with counter i / 4, same key;
//   value = f32_value<kind>(params, bits).
// Nothing else (launch shape, threads, chunking, layout, other tensors) enters it. The per-element
// code that computes it lives in kernels/fill_element.hpp (not installed: it needs Philox and PTX).
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <layerinit/core/api.hpp>
#include <layerinit/core/hd.hpp>
#include <layerinit/dtypes/dtype.hpp>

namespace layerinit {

enum class FillKind : std::uint8_t { constant = 0, normal = 1, trunc_normal = 2, uniform = 3 };

LAYERINIT_API std::string_view fill_kind_name(FillKind k);

// A fill as users write it, in double precision.
struct LAYERINIT_API FillSpec {
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

  std::string describe() const;  // e.g. "normal(0, 0.02)": for people, rounded to 6 digits
  // Exactly, in parse_fill's grammar: the shortest decimals that read back to the same doubles, no
  // spaces ("normal(0,0.02)"), so parse_fill(f.text()) == f. The form fills travel in as text.
  std::string text() const;
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
LAYERINIT_API const std::vector<FillSyntax>& fill_syntax();  // constant, normal, trunc_normal, trunc_normal_std, uniform
LAYERINIT_API std::string fill_names();                      // "constant, normal, trunc_normal, trunc_normal_std, uniform"
// The fill `name` from its parameters in table order, all given. Throws bad_input
// (bad_argument) for an unknown name (listing the valid ones) or a wrong count. Values are validated by prepare_fill.
LAYERINIT_API FillSpec make_fill(std::string_view name, std::span<const double> args);
// "normal(0, 0.02)": a kind and all its parameters as finite decimal numbers, in table order.
// Throws bad_input naming the text and the problem.
LAYERINIT_API FillSpec parse_fill(std::string_view text);

// A fill prepared for one dtype: the constants the per-element code uses. Trivially copyable.
struct FillParams {
  FillKind kind = FillKind::constant;
  float scale = 0.f;  // normal, trunc_normal: std; uniform: hi - lo
  float shift = 0.f;  // normal, trunc_normal: mean; uniform: lo; constant: the value
  // uniform: [lo, hi] clamps the value before rounding. trunc_normal: the bounds snapped to the dtype,
  // a' and b' (a clamp in fp32; in fp16/bf16 the span alone keeps values inside).
  float lo = 0.f;
  float hi = 0.f;
  // trunc_normal: positions drawn uniformly from [p_lo, p_lo + span). fp16/bf16: positions on the
  // 16-bit quantile nodes (node j at j * 2^16, linear between nodes; span < 2^32); fp32: probabilities
  // times 2^64.
  std::uint64_t p_lo = 0;
  std::uint64_t span = 0;
};

// Validates the spec (finite numbers, std > 0, a < b, lo < hi) and computes the constants for
// dtype t. trunc_normal's bounds are snapped inward to values of t (a' = smallest value >= a,
// b' = largest value <= b) and the positions whose value before rounding lies in [a', b'] are found by bisection
// over the same arithmetic the fill runs, so no value leaves [a, b] and no library erf enters the
// contract. When every value the normal of the same mean and std produces lies within [a', b'], the
// prepared fill is that normal (kind normal). A random fill whose every value rounds to one value of t (or whose constants overflow) is
// refused (docs/spec.md). Throws bad_input naming the problem.
LAYERINIT_API FillParams prepare_fill(const FillSpec& spec, DType t);

// A 2-level box of one tensor's memory to fill: `runs` runs of memory elements, run r covering the
// tensor's memory elements [begin + r * stride, end + r * stride), written at dst + r * dst_pitch(job)
// elements: densely one after another (dst_stride 0, the default), or dst_stride apart, so a piece of a
// wider array (a layer's slice of a stack at axis 1: [in, L, out]) is one job too. runs = 1 (the
// default) is one contiguous run and ignores both strides; a shard split in a non-leading dimension
// ([out, in / T], [L, out, in / T]) is one job of many runs. Valid when runs <= 1 or stride and
// dst_stride (when set) are >= end - begin, and the last run ends below 2^64 (check_fill_job).
struct FillJob {
  void* dst = nullptr;        // memory element `begin` of the tensor
  std::uint64_t key = 0;      // philox_key(seed, tensor_key(name))
  std::uint64_t begin = 0;    // run 0: memory elements [begin, end) of the tensor
  std::uint64_t end = 0;
  std::uint64_t runs = 1;     // runs of end - begin elements (0: nothing to fill)
  std::uint64_t stride = 0;   // memory elements from one run's start to the next (runs > 1)
  std::uint64_t dst_stride = 0;  // elements of dst from one run's start to the next (runs > 1); 0: dense
  std::uint64_t rows = 0;     // logical shape seen as [rows, cols] (cols = last dim)
  std::uint64_t cols = 0;
  FillParams params{};
  DType dtype = DType::f32;
  bool transposed = false;    // memory holds [cols, rows]: logical (r, c) sits at c * rows + r
};

// A job that fills a whole tensor of `numel` elements stored at dst.
LAYERINIT_API FillJob make_fill_job(void* dst, DType t, std::uint64_t numel, std::uint64_t seed,
                                    std::string_view canonical_name, const FillSpec& spec);
// The same with the fill already prepared for t (prepare_fill(spec, t)).
LAYERINIT_API FillJob make_fill_job(void* dst, DType t, std::uint64_t numel, std::uint64_t seed,
                                    std::string_view canonical_name, const FillParams& params);

// Elements a job writes: runs * (end - begin) (valid jobs only: end >= begin).
LAYERINIT_HD constexpr std::uint64_t job_elements(const FillJob& j) { return j.runs * (j.end - j.begin); }

// Elements of dst from one run's start to the next: dst_stride, or end - begin when it is 0 (dense).
LAYERINIT_HD constexpr std::uint64_t dst_pitch(const FillJob& j) { return j.dst_stride != 0 ? j.dst_stride : j.end - j.begin; }

// Elements of dst from the first run's start to the last run's end: job_elements for a dense job.
LAYERINIT_HD constexpr std::uint64_t dst_span(const FillJob& j) {
  return j.runs == 0 ? 0 : (j.runs - 1) * dst_pitch(j) + (j.end - j.begin);
}

// Run r of a job (r < runs) as a job of its own: runs = 1, its memory elements and its dst.
LAYERINIT_API FillJob run_job(const FillJob& j, std::uint64_t r);

// The checks every fill (host, CUDA, simulated) makes of a job before it writes: end >= begin,
// runs > 1 only with stride >= end - begin, dst_stride 0 or >= end - begin, a last run that ends
// below 2^64 and an output (dst_span) that fits 2^64 bytes, a known dtype, a non-null dst aligned to its element size, and for a
// transposed job rows * cols >= the last run's end. `who` starts the message ("fill"). A bad job is
// misuse (the library or a C++ caller built it): layerinit::logic_error (LAYERINIT_EXPECTS).
LAYERINIT_API void check_fill_job(const FillJob& j, std::string_view who);

}  // namespace layerinit
