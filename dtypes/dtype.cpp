#include <layerinit/dtypes/dtype.hpp>

#include <cmath>

#include <Eigen/Core>

#include <layerinit/core/errors.hpp>

namespace layerinit {

std::uint16_t float_to_f16_bits(float x) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x)); }
std::uint16_t float_to_bf16_bits(float x) { return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(x)); }
float f16_bits_to_float(std::uint16_t b) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(b)); }
float bf16_bits_to_float(std::uint16_t b) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(b)); }

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::f16: return "fp16";
    case DType::bf16: return "bf16";
  }
  LAYERINIT_FAIL("dtype_name: invalid DType tag " + std::to_string(static_cast<int>(t)));
}

std::string_view torch_dtype_name(DType t) {
  return t == DType::bf16 ? "bfloat16" : t == DType::f16 ? "float16" : "float32";
}

std::optional<DType> dtype_from_torch_name(std::string_view s) {
  for (DType t : all_dtypes)
    if (torch_dtype_name(t) == s) return t;
  return std::nullopt;
}

std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

std::string dtype_names() { return "fp32, fp16, bf16"; }

DType parse_dtype(std::string_view s) {
  if (s == "fp32" || s == "float32" || s == "f32") return DType::f32;
  if (s == "fp16" || s == "float16" || s == "f16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  bad_argument("dtype", s, "is unknown (valid: " + dtype_names() + ")");
}

float round_to_dtype(float x, DType t) {
  switch (t) {
    case DType::f32: return x;
    case DType::f16: return f16_bits_to_float(float_to_f16_bits(x));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(x));
  }
  return x;
}

float dtype_floor(float x, DType t) {
  if (t == DType::f32) return x;
  const bool half = t == DType::f16;
  std::uint16_t b = half ? float_to_f16_bits(x) : float_to_bf16_bits(x);
  auto value = [&](std::uint16_t bits) { return half ? f16_bits_to_float(bits) : bf16_bits_to_float(bits); };
  if (value(b) <= x) return value(b);
  // Rounding went up: step one representable value down. Sign-magnitude bits: for a positive value
  // the pattern below is b - 1; from zero it is the smallest negative subnormal; for a negative, b + 1.
  const float r = value(b);
  if (r > 0) b = static_cast<std::uint16_t>(b - 1);
  else if (r == 0) b = 0x8001;
  else b = static_cast<std::uint16_t>(b + 1);
  return value(b);
}

float dtype_ceil(float x, DType t) { return -dtype_floor(-x, t); }

}  // namespace layerinit
