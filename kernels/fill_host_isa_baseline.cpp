// The host fill loops for the target's baseline: x86-64 (SSE2, any 64-bit x86 CPU) or, on aarch64,
// armv8-a (NEON), the only level built there.
#include "fill_host_loops.hpp"

namespace layerinit::detail {

void fill_range_baseline(const FillJob& j, std::uint64_t b, std::uint64_t e) { fill_range_loops(j, b, e); }
void fill_tile_baseline(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1) {
  fill_tile_loops(j, c0, r0, r1);
}

}  // namespace layerinit::detail
