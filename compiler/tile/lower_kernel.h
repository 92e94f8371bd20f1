#pragma once
// Plan kernel → Tile IR, for the pointwise and row-reduction schedules.
#include "compiler/fusion/plan.h"
#include "compiler/tile/tile_ir.h"

namespace tilefuse {

TileProgram lower_kernel(const Graph& g, const Kernel& k);

}  // namespace tilefuse
