// The host's one bulk rounding routine: float arrays to the raw values of a dtype.
#pragma once

#include <cstddef>

#include <layerinit/dtypes/dtype.hpp>

namespace layerinit {

// Rounds in[0, n) to nearest even in dtype t and stores the raw values at out (fp32: copied; fp16,
// bf16: 16-bit patterns). Bitwise what float_to_f16_bits / float_to_bf16_bits give element by
// element; the path is picked at run time (on x86-64, F16C converts 8 floats per instruction where
// the CPU has it) and never changes a value.
void round_floats(DType t, const float* in, void* out, std::size_t n);

}  // namespace layerinit
