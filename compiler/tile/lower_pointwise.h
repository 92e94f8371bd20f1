#pragma once
// Plan kernel → Tile IR for the pointwise schedule.
#include "compiler/fusion/plan.h"
#include "compiler/tile/tile_ir.h"

namespace tilefuse {

TileProgram lower_pointwise(const Graph& g, const Kernel& k);

}  // namespace tilefuse
