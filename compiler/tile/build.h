#pragma once
// Plan kernel → Tile IR v2: pointwise, column-reduction, matmul, attention and write kernels,
// and — under `--row-ir 2` (TileSchedule::ir_v2) — row kernels held in one block's registers.
// Other row-reduction kernels still take the first Tile IR (compiler/tile/tile_ir.h) until their
// schedules move to v2.
#include <optional>

#include "compiler/fusion/plan.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

// The program of kernel k of graph g, or nullopt for a kernel kind not yet on v2.
std::optional<Program> build_program(const Graph& g, const Kernel& k);

}  // namespace tilefuse::tir
