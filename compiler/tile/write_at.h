#pragma once
// The Tile IR program of a Write kernel (compiler/fusion/write_at.h): each block loads a piece
// of one of the value's slices and stores it at the cache row its position gives.
#include "compiler/fusion/plan.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

Program write_at_program(const Graph& g, const Kernel& k);

}  // namespace tilefuse::tir
