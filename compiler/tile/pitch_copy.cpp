#include "compiler/tile/pitch_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "compiler/fusion/cost_model.h"
#include "compiler/tile/ir_verify.h"

namespace tilefuse::tir {

namespace {
// A warp per row, 8 elements (one 16-byte store) per thread: tiles of 4 rows × 256 columns, so
// that a row's last, partly empty tile is a small share of its tiles.
constexpr int kVec = 8, kWarps = kPitchCopyThreads / 32;
constexpr int64_t kTileCols = kVec * 32;
int64_t col_blocks(int64_t pitch) { return (pitch + kTileCols - 1) / kTileCols; }
}  // namespace

int64_t pitch_copy_blocks(int64_t rows, int64_t pitch) { return (rows + kWarps - 1) / kWarps * col_blocks(pitch); }

// Block (row tile, column tile): the tile's elements loaded one at a time (the source's rows
// start anywhere), zero past the row's `run`, and stored whole into the padded rows.
Program pitch_copy_program(const std::string& name, DType dtype, int64_t rows, int64_t run, int64_t pitch) {
  Program p;
  p.name = name;
  p.layout = {{1, kVec}, {kWarps, 32}, {1, 1}};
  p.grid = {pitch_copy_blocks(rows, pitch)};
  p.wide_indices = rows * pitch > INT32_MAX;
  Param src, dst;
  src.name = "src";
  src.dtype = dtype;
  src.view = {rows, run};
  dst.name = "dst";
  dst.dtype = dtype;
  dst.view = {rows, pitch};
  dst.output = true;
  p.params = {src, dst};
  Builder b(p, p.body);
  const int pid = b.program_id(0);
  const int blocks = b.index(col_blocks(pitch));
  const int row0 = b.mul(b.div(pid, blocks), b.index(kWarps));
  const int col0 = b.mul(b.rem(pid, blocks), b.index(kTileCols));
  const Shape tile = {kWarps, kTileCols};
  const int x = b.load(0, {row0, col0}, tile, {true, true});
  const int inside = b.in_bounds(col0, b.index(run), 1, tile);
  b.store(1, {row0, col0}, b.compute(Op::Where, {inside, x, b.scalar(0, dtype)}, dtype), {true, true});
  verify_program(p);
  return p;
}

std::vector<OperandCopy> operand_copies(const Graph& g, const Kernel& k) {
  std::vector<OperandCopy> copies;
  if (k.library || !k.schedule.copies_operands()) return copies;
  const Node& mm = g.node(contraction(g, k));
  for (size_t i = 0; i < 2; ++i) {
    const int64_t pitch = k.schedule.operand_pitch[i];
    if (pitch == 0 || (i == 1 && mm.operands[1] == mm.operands[0])) continue;
    const Node& o = g.node(mm.operands[i]);
    OperandCopy c;
    c.input = static_cast<size_t>(std::find(k.inputs.begin(), k.inputs.end(), o.id) - k.inputs.begin());
    c.name = fmt::format("{}_copy_{}", k.name, i == 0 ? "a" : "b");
    c.dtype = o.dtype;
    c.run = o.shape.back();
    c.rows = num_elements(o.shape) / c.run;
    c.pitch = pitch;
    copies.push_back(std::move(c));
  }
  return copies;
}

}  // namespace tilefuse::tir
