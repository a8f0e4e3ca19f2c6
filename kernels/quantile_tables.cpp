// The host's copy of the quantile tables (kernels/quantile.hpp); the device defines its own from the
// same generated file.
#include <layerinit/kernels/quantile.hpp>

namespace layerinit::quantile {

#define LAYERINIT_QUANTILE_TABLE
#include "quantile_tables.inc"
#undef LAYERINIT_QUANTILE_TABLE

static_assert(sizeof(CubicRow) == 16 && alignof(CubicRow) == 16);
static_assert(sizeof(normal_cubic_table) <= 32 * 1024, "the cubic table must fit 32 KB of shared memory");

}  // namespace layerinit::quantile
