#pragma once
// Tile parameters of a pointwise kernel: the schedule half of the algorithm/schedule split.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace tilefuse {

// A pointwise kernel iterates over its domain viewed as rows × cols (adjacent dimensions with
// the same broadcast pattern in every operand are collapsed; cols is the innermost). A block
// of thread_rows × threads_per_row threads covers a tile of tile_rows() × tile_cols(); each
// thread owns rows_per_thread rows × vec contiguous columns, so an operand broadcast along
// rows (a bias) is loaded once per thread and reused for all its rows.
struct PointwiseSchedule {
  Shape dims;              // collapsed domain; dims.back() is cols
  int64_t rows = 1, cols = 1;
  int vec = 1;             // elements per vector access along cols
  int threads_per_row = 1;
  int thread_rows = 1;
  int rows_per_thread = 1;

  int block_threads() const { return threads_per_row * thread_rows; }
  int64_t tile_rows() const { return int64_t{thread_rows} * rows_per_thread; }
  int64_t tile_cols() const { return int64_t{threads_per_row} * vec; }
  int64_t row_blocks() const { return (rows + tile_rows() - 1) / tile_rows(); }
  int64_t col_blocks() const { return (cols + tile_cols() - 1) / tile_cols(); }
  int64_t grid() const { return row_blocks() * col_blocks(); }
  int elems_per_thread() const { return rows_per_thread * vec; }
  bool exact() const { return rows % tile_rows() == 0 && cols % tile_cols() == 0; }
  std::string describe() const;
};

// Each operand's shape aligned to the schedule's dims: 1 where the operand is broadcast.
std::vector<Shape> operand_views(const PointwiseSchedule& s, const Shape& domain,
                                 const std::vector<Shape>& operands);

// Schedule overrides from the user (0: let tilefuse choose).
struct ScheduleHints {
  int block_threads = 0;    // power of two, 32..1024
  int rows_per_thread = 0;  // 1..16
};

// Chooses vector width and tile for `domain` given every tensor the kernel reads or writes.
PointwiseSchedule choose_pointwise_schedule(const Shape& domain, const std::vector<Shape>& operands,
                                            const std::vector<DType>& dtypes,
                                            const ScheduleHints& hints = {});

}  // namespace tilefuse
