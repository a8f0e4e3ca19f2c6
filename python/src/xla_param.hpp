// One framework parameter as the XLA FFI fill handlers receive it: a static attribute in a small text
// form, the same on every device, and the jobs that fill one device's piece of it.
//
// A parameter is one array of `shape` (as stored), whose leading `lead` dimensions index canonical
// tensors (slices, row-major: a filter_vmap-stacked [L, ...] leaf is L tensors) and whose remaining
// dimensions are each slice's memory shape (its logical shape, or the transpose of a 2-D one).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/init/builder.hpp>
#include <layerinit/shard/mesh.hpp>

namespace layerinit::jax {

struct Slice {
  std::string name;  // canonical tensor name
  FillSpec fill;
};

struct Param {
  DType dtype = DType::f32;
  Shape shape;               // as stored: lead dimensions, then each slice's memory shape
  std::size_t lead = 0;      // leading dimensions that index slices
  bool transposed = false;   // each slice is a 2-D tensor stored [in, out]
  std::vector<Slice> slices; // prod(shape[0..lead)) of them, row-major

  Shape slice_shape() const;  // shape[lead..]: a slice's memory shape
  // The planned tensor of slice i (its logical shape is the memory shape, transposed back if so).
  PlannedTensor planned(std::size_t i) const;
};

// The attribute text of a parameter: exact (every fill number round-trips), one slice per line.
// Throws std::invalid_argument for a parameter that is not consistent (slice count, a name with a
// line break, a transposed slice that is not 2-D).
std::string param_text(const Param& p);
// Reads param_text's form back and checks it the same way; throws std::invalid_argument naming the
// problem.
Param parse_param(std::string_view text);

// Checks every slice's fill against the parameter's dtype (prepare_fill), so a bad fill is refused
// before anything is built. Throws std::invalid_argument naming the slice.
void check_fills(const Param& p);

// The jobs that fill `box` (in the coordinates of p.shape) of the parameter into a dense row-major
// buffer of box.shape at dst: box_fill_jobs per slice the box covers.
void param_jobs(const Param& p, const Box& box, void* dst, std::uint64_t seed, std::vector<FillJob>& out);

// What one handler call knows: the attributes, the device it runs on and its output buffer.
struct PieceCall {
  std::string_view param;                 // param_text
  std::uint64_t seed = 0;
  // Per device of this process that holds a piece: its ordinal, then the piece's offset in every
  // dimension of the stored shape (rank + 1 numbers a row). Empty: every device holds the whole.
  std::span<const std::int64_t> table;
  std::int64_t ordinal = 0;               // the device this call runs on
  std::span<const std::int64_t> dims;     // the output buffer's (the piece's) shape
  DType dtype = DType::f32;               // the output buffer's
  void* dst = nullptr;
};

// The jobs that fill this call's piece into its output buffer. Throws std::invalid_argument when the
// output is not a piece of the parameter (rank, dtype, a box outside the stored shape) or the device
// has no row in the table.
std::vector<FillJob> piece_jobs(const PieceCall& c);

// Test hook: while on, piece_jobs records every output buffer it is given (the first slice's name,
// the address, the bytes), so a test can check that the handler wrote XLA's own output buffer.
struct Written {
  std::string name;
  std::uintptr_t address = 0;
  std::uint64_t bytes = 0;
};
void record_writes(bool on);
std::vector<Written> take_writes();  // what was recorded since the last call

}  // namespace layerinit::jax
