#pragma once
// The Tile IR program that copies a matmul operand into a padded pitch before its kernel
// (TileSchedule::operand_pitch): rows of `run` elements, 16-byte chunks out of reach where they
// lie, into rows of `pitch` (a multiple of 8) whose elements past `run` are zeros.
#include <cstdint>
#include <string>

#include "compiler/graph/dtype.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

// Parameters: the source ([rows, run], read an element at a time), then the destination ([rows,
// pitch], written in 16-byte vectors). Each block copies 256 columns of 4 rows, a warp a row.
Program pitch_copy_program(const std::string& name, DType dtype, int64_t rows, int64_t run, int64_t pitch);

// Its grid and threads per block.
int64_t pitch_copy_blocks(int64_t rows, int64_t pitch);
constexpr int kPitchCopyThreads = 128;

}  // namespace tilefuse::tir
