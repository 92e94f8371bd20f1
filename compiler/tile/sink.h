#pragma once
// Sinking: a Tile IR v2 pass that moves each pure elementwise or index instruction down to just
// before the first instruction of its region that uses its value (directly or inside a nested
// region), so that a value is computed where it is first needed and holds no registers over
// what lies between — log_softmax's x − max, built before the row's sum, is computed after the
// sum's exchange, where its one use is. Such an instruction that nothing uses is dropped (a
// difference u − c whose only use became a shifted exp).
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

void sink_to_uses(Program& p);

}  // namespace tilefuse::tir
