#include "compiler/tile/tile_ir.h"

#include <fmt/format.h>

namespace tilefuse {

std::string tile_type_str(const TileType& t, const TileSchedule& s) {
  return fmt::format("tile<{}x{}x{}>", t.rows ? s.tile_rows() : 1, t.cols ? s.tile_cols() : 1,
                     dtype_name(t.dtype));
}

std::string print_tile_program(const TileProgram& p) {
  const TileSchedule& s = p.schedule;
  std::vector<std::string> params;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const TileParam& t = p.params[i];
    params.push_back(fmt::format("%arg{} \"{}\": {}{}{}", i, t.name, dtype_name(t.dtype), shape_str(t.view),
                                 t.output ? " out" : ""));
  }
  std::string out = fmt::format("tile.func @{}({})\n", p.name, fmt::join(params, ", "));
  out += fmt::format("  // domain {} as {} rows × {} cols; {}\n", shape_str(s.dims), s.rows, s.cols,
                     s.describe());
  out +=
      fmt::format("  // program id → (row block, col block) of {} × {}; {}\n", s.row_blocks(), s.col_blocks(),
                  s.exact() ? "tiles cover the domain exactly: no masks" : "edge tiles masked");
  if (s.cluster_blocks > 1)
    out += fmt::format(
        "  // the {} column blocks of a row form one thread-block cluster; every row reduction "
        "combines their partial results through distributed shared memory\n",
        s.cluster_blocks);
  if (s.split_blocks > 1)
    out += fmt::format(
        "  // the {} parts of a row are tasks of a persistent grid: each block publishes its part's "
        "(max, sum) in global memory and writes the part one task later, when every part of the row "
        "has published\n",
        s.split_blocks);
  if (s.col_iters > 1)
    out += fmt::format(
        "  // {} pass{} over each row, each a loop over {} column tiles of {} that re-loads what "
        "it needs; values of one pass reach the next only as per-row results\n",
        p.passes, p.passes == 1 ? "" : "es", s.col_iters, s.iter_cols());
  for (const TileInst& i : p.body) {
    std::string ty = tile_type_str(i.type, s);
    std::vector<std::string> args;
    for (int a : i.args) args.push_back(fmt::format("%{}", a));
    switch (i.opcode) {
      case TileOpcode::Load: {
        std::string note;
        if (!i.type.rows && i.type.cols)
          note = "  // broadcast over rows: read once per thread, reused for its rows";
        out += fmt::format("  %{} = tile.load %arg{} : {}{}\n", i.result, i.param, ty, note);
        break;
      }
      case TileOpcode::Constant:
        out += fmt::format("  %{} = tile.constant {} : {}\n", i.result, i.value, ty);
        break;
      case TileOpcode::Compute:
        out +=
            fmt::format("  %{} = tile.{} {} : {}\n", i.result, op_info(i.op).name, fmt::join(args, ", "), ty);
        break;
      case TileOpcode::Reduce: {
        std::string online = i.online_with >= 0
                                 ? fmt::format(
                                       ", online with %{}: the running sum is rescaled by exp(c(m) − c(m')) "
                                       "when the running max m grows to m'",
                                       i.online_with)
                                 : "";
        out += fmt::format("  %{} = tile.{} %{} along cols : {}  // pass {}{}; warp shuffles{}\n", i.result,
                           op_info(i.op).name, i.args[0], ty, i.pass, online,
                           s.threads_per_row > 32 ? ", then shared memory across warps" : "");
        break;
      }
      case TileOpcode::Store:
        out += fmt::format("  tile.store %arg{}, {} : {}\n", i.param, fmt::join(args, ", "), ty);
        break;
    }
  }
  return out;
}

}  // namespace tilefuse
