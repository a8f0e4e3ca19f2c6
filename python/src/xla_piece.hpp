// One device's piece of a parameter, as an XLA FFI fill handler call sees it: the parameter is a
// composite (shard/composite.hpp: canonical tensors stacked along axes at any dimensions; its
// versioned text form is the attribute, the same on every device, parsed once per instance of the XLA
// program) and the piece is the box of it this device holds.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/kernels/fill.hpp>
#include <layerinit/shard/composite.hpp>

namespace layerinit::jax {

// What one handler call knows: the attributes, the device it runs on and its output buffer.
struct PieceCall {
  const Composite* param = nullptr;       // the parameter (parse_param of its text)
  std::uint64_t seed = 0;
  // Per device of this process that holds a piece: its ordinal, then the piece's offset in every
  // dimension of the parameter (rank + 1 numbers a row). Empty: every device holds the whole.
  std::span<const std::int64_t> table;
  std::int64_t ordinal = 0;               // the device this call runs on
  std::span<const std::int64_t> dims;     // the output buffer's (the piece's) shape
  DType dtype = DType::f32;               // the output buffer's
  void* dst = nullptr;
};

// The parameter of a `param` attribute (composite_from_text): what the handlers' instantiate stage
// keeps for every call of one instance of the program. Throws std::invalid_argument for a malformed
// text.
Composite parse_param(std::string_view text);
// Test hook: how many texts parse_param has parsed in this process.
std::uint64_t params_parsed();

// The jobs that fill this call's piece densely into its output buffer (composite_fill_jobs). Throws
// std::invalid_argument when the output is not a piece of the parameter (rank, dtype, a box outside
// its shape) or the device has no row in the table.
std::vector<FillJob> piece_jobs(const PieceCall& c);

// Test hook: while on, piece_jobs records every output buffer it is given (the first tensor's name
// template, the address, the bytes), so a test can check that the handler wrote XLA's own buffers.
struct Written {
  std::string name;
  std::uintptr_t address = 0;
  std::uint64_t bytes = 0;
};
void record_writes(bool on);
std::vector<Written> take_writes();  // what was recorded since the last call

// Cancellation (layerinit.jax's Ctrl-C): while set, every handler call fails at once with
// "interrupted", so an eager init stops after the array being filled. Process-wide: a Ctrl-C stops
// every layerinit fill in flight.
void cancel_fills(bool on);
bool fills_cancelled();

// Test hook: after `n` more filled arrays, the handler raises SIGINT and then it and every handler
// call after it wait (at most 30 s) until the fills are cancelled, so a test interrupts an init
// after a known number of arrays (plus those XLA was filling beside it). n < 0: off.
void interrupt_after(std::int64_t n);
void after_fill();  // the handler's call after each filled array

}  // namespace layerinit::jax
