#include "compiler/tile/build_support.h"

#include <algorithm>
#include <cmath>

#include "compiler/fusion/cost_model.h"
#include "compiler/graph/sign.h"

namespace tilefuse::tir {

Layout layout_of(const TileSchedule& s) {
  return {{1, s.vec}, {s.thread_rows, s.threads_per_row}, {s.rows_per_thread, s.chunks_per_thread}};
}

Param param_of(const Graph& g, NodeId id, bool output, const Shape& view, const TileSchedule& s) {
  Param p;
  const Node& n = g.node(id);
  p.name = tensor_name(n);
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

Program program_of(const Kernel& k) {
  Program p;
  p.name = k.name;
  p.layout = layout_of(k.schedule);
  p.grid = {k.schedule.grid()};
  p.wide_indices = k.schedule.wide_indices();
  return p;
}

int as_used(Builder& b, const Graph& g, const Kernel& k, NodeId id, int v) {
  return rounds_where_computed(g, k, id) ? b.compute(Op::Cast, {v}, g.node(id).dtype) : v;
}

int as_f32(Builder& b, int x) {
  return b.program().types[static_cast<size_t>(x)].dtype == DType::F32 ? x : b.compute(Op::Cast, {x}, DType::F32);
}

int compute_node(Builder& b, const Graph& g, const Kernel& k, NodeId id, const std::vector<int>& args) {
  const Node& n = g.node(id);
  return as_used(b, g, k, id, b.compute(n.op, args, n.dtype, exp_of_nonpositive(g, n)));
}

const Node* shifted_exp_arg(const Graph& g, const Kernel& k, const Node& n,
                            const std::function<bool(NodeId)>& spans_row) {
  if (n.op != Op::Exp || dtype_size(n.dtype) != 2 ||
      std::find(k.nodes.begin(), k.nodes.end(), n.operands[0]) == k.nodes.end())
    return nullptr;
  const Node& d = g.node(n.operands[0]);
  return d.op == Op::Sub && spans_row(d.operands[0]) && !spans_row(d.operands[1]) ? &d : nullptr;
}

constexpr double kLog2e = 1.4426950408889634;

int minus_log2e_times(Builder& b, int c) {
  return b.compute(Op::Mul, {c, b.scalar(-kLog2e, DType::F32)}, DType::F32);
}

int exp2_fma(Builder& b, int x, int k_log2e, int minus_c2) {
  return b.softmax_exp2(b.compute(Op::Fma, {x, k_log2e, minus_c2}, DType::F32));
}

int shifted_exp2(Builder& b, int u, int c) {
  return exp2_fma(b, as_f32(b, u), b.scalar(kLog2e, DType::F32), minus_log2e_times(b, as_f32(b, c)));
}

int shift_factor(Builder& b, int c_from, int c_to, bool fast) {
  const int d = b.compute(Op::Sub, {as_f32(b, c_from), as_f32(b, c_to)}, DType::F32);
  if (!fast) return b.compute(Op::Exp, {d}, DType::F32);
  return b.softmax_exp2(b.compute(Op::Mul, {d, b.scalar(kLog2e, DType::F32)}, DType::F32));
}

int rescaled(Builder& b, int s, int c_from, int c_to, bool fast) {
  const int factor = shift_factor(b, c_from, c_to, fast);
  const int zero = b.scalar(0.0, DType::F32);
  return b.compute(Op::Where, {b.compute(Op::Ne, {s, zero}, DType::Bool), b.compute(Op::Mul, {s, factor}, DType::F32), zero},
                   DType::F32);
}

int times_width(Builder& b, int x, int64_t cols, DType dtype) {
  return b.compute(Op::Mul, {x, b.scalar(static_cast<double>(cols), DType::F32)}, dtype);
}

int iota_of(Builder& b, const Kernel& k, const Node& n, int row0, int col0, int window) {
  const TileSchedule& s = k.schedule;
  const size_t axis = static_cast<size_t>(n.axes.at(0));
  if (n.shape[axis] == 1) return b.scalar(0, n.dtype);
  const size_t domain_axis = axis + k.domain.size() - n.shape.size();
  int64_t below = 1;  // the domain's elements per step along the axis
  for (size_t d = domain_axis + 1; d < k.domain.size(); ++d) below *= k.domain[d];
  const int v = b.linear_iota(row0, col0, s.cols, below, k.domain[domain_axis], {s.tile_rows(), s.tile_cols()}, window);
  return n.dtype == DType::F32 ? v : b.compute(Op::Cast, {v}, n.dtype);
}

}  // namespace tilefuse::tir
