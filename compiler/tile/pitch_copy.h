#pragma once
// The Tile IR program that copies a matmul operand into a padded pitch before its kernel
// (TileSchedule::operand_pitch): rows of `run` elements, 16-byte chunks out of reach where they
// lie, into rows of `pitch` (a multiple of 8) whose elements past `run` are zeros.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"
#include "compiler/graph/dtype.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

// Parameters: the source ([rows, run], read an element at a time), then the destination ([rows,
// pitch], written in 16-byte vectors). Each block copies 256 columns of 4 rows, a warp a row.
Program pitch_copy_program(const std::string& name, DType dtype, int64_t rows, int64_t run, int64_t pitch);

// Its grid and threads per block.
int64_t pitch_copy_blocks(int64_t rows, int64_t pitch);
constexpr int kPitchCopyThreads = 128;

// One matmul operand of a kernel copied into its padded pitch before each launch: the input it
// replaces (an index into Kernel::inputs), the copy's name, and its [rows, run] -> [rows, pitch].
struct OperandCopy {
  size_t input = 0;
  std::string name;
  DType dtype = DType::F32;
  int64_t rows = 0, run = 0, pitch = 0;
  Program program() const { return pitch_copy_program(name, dtype, rows, run, pitch); }
};

// Kernel k's operand copies (TileSchedule::operand_pitch); none for a library kernel or one
// that reads its operands in place. An operand that is both A and B is copied once, as A.
std::vector<OperandCopy> operand_copies(const Graph& g, const Kernel& k);

}  // namespace tilefuse::tir
