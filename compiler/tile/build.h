#pragma once
// Plan kernel → Tile IR v2: pointwise, row-reduction (held in registers, looped, staged, claimed,
// split, in clusters, windowed), column-reduction, matmul, attention and write kernels.

#include "compiler/fusion/plan.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

// The program of kernel k of graph g (not of a cuBLASLt kernel: it has none).
Program build_program(const Graph& g, const Kernel& k);

}  // namespace tilefuse::tir
