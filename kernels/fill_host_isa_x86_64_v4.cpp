// The host fill loops for x86-64-v4: AVX-512 F/BW/DQ/VL (Skylake-SP, Zen 4 and later).
#include "fill_host_avx512.hpp"
#include "fill_host_loops.hpp"

namespace layerinit::detail {

void fill_range_x86_64_v4(const FillJob& j, std::uint64_t b, std::uint64_t e) { fill_range_loops(j, b, e); }
void fill_tile_x86_64_v4(const FillJob& j, std::uint64_t c0, std::uint64_t r0, std::uint64_t r1) {
  fill_tile_loops(j, c0, r0, r1);
}

}  // namespace layerinit::detail
