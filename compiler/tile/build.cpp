#include "compiler/tile/build.h"

#include <fmt/format.h>

#include <map>

#include "compiler/fusion/cost_model.h"
#include "compiler/support/error.h"
#include "compiler/tile/ir_verify.h"

namespace tilefuse::tir {

namespace {

// The kernel's schedule as a layout: each thread holds rows_per_thread rows thread_rows apart
// and, in each, chunks of vec contiguous columns threads_per_row·vec apart.
Layout layout_of(const TileSchedule& s) {
  return {{1, s.vec}, {s.thread_rows, s.threads_per_row}, {s.rows_per_thread, s.chunks_per_thread}};
}

// A parameter seen through the schedule's [rows, cols] view: its extents along the collapsed
// domain (view_of), merged to two axes; split along the row dimensions where it is broadcast
// along some of them but not others.
Param param_of(const Graph& g, NodeId id, bool output, const Shape& view, const TileSchedule& s) {
  Param p;
  const Node& n = g.node(id);
  p.name = n.op == Op::Input ? n.name : fmt::format("%{}", id);
  if (output)
    for (const GraphOutput& o : g.outputs())
      if (o.node == id) p.name = o.name;
  p.dtype = n.dtype;
  p.output = output;
  const Shape rows(view.begin(), view.end() - 1), domain_rows(s.dims.begin(), s.dims.end() - 1);
  p.view = {num_elements(rows), view.back()};
  if (rows != domain_rows && num_elements(rows) != 1) {
    p.row_dims = domain_rows;
    p.row_view = rows;
  }
  return p;
}

Program pointwise(const Graph& g, const Kernel& k) {
  const TileSchedule& s = k.schedule;
  Program p;
  p.name = k.name;
  p.layout = layout_of(s);
  p.grid = {s.grid()};
  p.wide_indices = s.wide_indices();
  std::vector<Shape> shapes;
  for (NodeId id : k.inputs) shapes.push_back(g.node(id).shape);
  for (NodeId id : k.outputs) shapes.push_back(g.node(id).shape);
  std::vector<Shape> views = operand_views(s, k.domain, k.split, shapes);
  for (size_t i = 0; i < k.inputs.size(); ++i) p.params.push_back(param_of(g, k.inputs[i], false, views[i], s));
  for (size_t i = 0; i < k.outputs.size(); ++i)
    p.params.push_back(param_of(g, k.outputs[i], true, views[k.inputs.size() + i], s));

  Builder b(p, p.body);
  // Program id → (row block, column block); the tile's first element.
  const int pid = b.program_id(0);
  const int col_blocks = b.index(s.col_blocks());
  const int row0 = b.mul(b.div(pid, col_blocks), b.index(s.tile_rows()));
  const int col0 = b.mul(b.rem(pid, col_blocks), b.index(s.tile_cols()));
  const std::vector<bool> masked = {s.rows % s.tile_rows() != 0, s.cols % s.tile_cols() != 0};
  auto tile_shape = [&](const Param& prm) {
    return Shape{prm.view[0] == 1 ? 1 : s.tile_rows(), prm.view[1] == 1 ? 1 : s.tile_cols()};
  };
  const int zero = b.index(0);
  auto offsets = [&](const Param& prm) {
    return std::vector<int>{prm.view[0] == 1 ? zero : row0, prm.view[1] == 1 ? zero : col0};
  };
  auto masks = [&](const Param& prm) {
    return std::vector<bool>{masked[0] && prm.view[0] != 1, masked[1] && prm.view[1] != 1};
  };
  // Every input is loaded first, so that all its bytes are in flight at once.
  std::map<NodeId, int> value_of;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const Param& prm = p.params[i];
    value_of[k.inputs[i]] = b.load(static_cast<int>(i), offsets(prm), tile_shape(prm), masks(prm));
  }
  for (NodeId id : k.nodes) {
    const Node& n = g.node(id);
    std::vector<int> args;
    for (NodeId o : n.operands) {
      if (!value_of.count(o)) value_of[o] = b.scalar(g.node(o).value, g.node(o).dtype);  // constants
      args.push_back(value_of.at(o));
    }
    value_of[id] = b.compute(n.op, args, n.dtype);
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const size_t param = k.inputs.size() + i;
    const Param& prm = p.params[param];
    int v = value_of.at(k.outputs[i]);
    if (!p.types[static_cast<size_t>(v)].is_tile()) v = b.splat(v, tile_shape(prm));  // computed from constants
    if (p.types[static_cast<size_t>(v)].shape != tile_shape(prm))
      throw CodegenError(fmt::format("kernel {}: output %{} is not a tile of its view", k.name, k.outputs[i]));
    b.store(static_cast<int>(param), offsets(prm), v, masks(prm));
  }
  verify_program(p);
  return p;
}

}  // namespace

std::optional<Program> build_program(const Graph& g, const Kernel& k) {
  if (k.kind == ScheduleKind::Pointwise) return pointwise(g, k);
  return std::nullopt;
}

}  // namespace tilefuse::tir
