#pragma once
// Folding row factors: a Tile IR v2 pass that rewrites (t · spread(f)) / s — t a tile along the
// row, f a value per warp or per thread spread over its elements (an online sum's factor to the
// row's max), both f32, s a value per row (one column) or a scalar, the product f32 and used by
// the quotient alone (the quotient may be 16-bit: rounded where it is stored) — into
// t · spread(f · (1/s)): one multiply an element where there were two, and one reciprocal a row
// as before (a softmax's quotient over an online sum). The product and the spread, where nothing
// else uses them, are dropped.
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

void fold_row_factors(Program& p);

}  // namespace tilefuse::tir
