// The element types layerinit writes, as a runtime tag. Eigen (the host conversions) stays inside
// dtype.cpp and round.cpp, so including this pulls in no third-party header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <layerinit/core/api.hpp>

namespace layerinit {

// The tag's values are stable (they appear in files). fp8 (e4m3 = 3, e5m2 = 4) is reserved.
enum class DType : std::uint8_t { f32 = 0, f16 = 1, bf16 = 2 };

inline constexpr DType all_dtypes[] = {DType::f32, DType::f16, DType::bf16};

LAYERINIT_API std::string_view dtype_name(DType t);      // "fp32", "fp16", "bf16"
LAYERINIT_API std::size_t dtype_size(DType t);           // bytes per element
// Accepts fp32/float32/f32, fp16/float16/f16/half, bf16/bfloat16; throws bad_input
// "unknown dtype 'x' (valid: fp32, fp16, bf16)".
LAYERINIT_API DType parse_dtype(std::string_view s);
LAYERINIT_API std::string dtype_names();                 // "fp32, fp16, bf16"
// torch's names, as a Hugging Face config.json's "dtype"/"torch_dtype" gives them: "float32",
// "float16", "bfloat16"; the reverse is nullopt for any other name.
LAYERINIT_API std::string_view torch_dtype_name(DType t);
LAYERINIT_API std::optional<DType> dtype_from_torch_name(std::string_view s);

// Host conversions between float and the raw bits of the 16-bit types (Eigen's half and bfloat16:
// round to nearest even, NaN kept quiet). dtypes/round.hpp converts whole arrays the same way.
LAYERINIT_API std::uint16_t float_to_f16_bits(float x);
LAYERINIT_API std::uint16_t float_to_bf16_bits(float x);
LAYERINIT_API float f16_bits_to_float(std::uint16_t b);
LAYERINIT_API float bf16_bits_to_float(std::uint16_t b);

// Rounds x to the nearest value of dtype t and returns it as float.
LAYERINIT_API float round_to_dtype(float x, DType t);
// The largest value of dtype t that is <= x, and the smallest that is >= x (x finite, in range).
LAYERINIT_API float dtype_floor(float x, DType t);
LAYERINIT_API float dtype_ceil(float x, DType t);

}  // namespace layerinit
