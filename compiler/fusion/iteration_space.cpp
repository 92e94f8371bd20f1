#include "compiler/fusion/iteration_space.h"

#include <fmt/format.h>

#include "compiler/fusion/attention_backward.h"
#include "compiler/fusion/contraction_chain.h"
#include "compiler/fusion/cost_model.h"

namespace tilefuse {

namespace {

std::string operand_name(const Graph& g, NodeId id, bool output) {
  if (output)
    for (const GraphOutput& o : g.outputs())
      if (o.node == id) return o.name;
  return tensor_name(g.node(id));
}

// Dimensions right-aligned to `axes` (numpy): each along its axis, a size-1 one along none.
std::vector<int> aligned_map(const Shape& shape, const std::vector<int>& axes) {
  std::vector<int> dims(shape.size(), -1);
  const size_t off = axes.size() - std::min(axes.size(), shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1 && off + d < axes.size()) dims[d] = axes[off + d];
  return dims;
}

// What an output stores: as the kernel aligns it (a reduction's with its reduced dimensions), or a
// write's value slices (at the positions along the cache's axis).
Shape written_shape(const Graph& g, const Kernel& k, NodeId o) {
  const Node& n = g.node(o);
  return n.op == Op::WriteAt ? g.node(n.operands[1]).shape : aligned_shape(g, o, k);
}

// The operand's shape as the space maps it: its own, or what an output stores.
Shape mapped_shape(const Graph& g, const Kernel& k, const OperandMap& m) {
  return m.output ? written_shape(g, k, m.node) : g.node(m.node).shape;
}

IterationSpace matmul_space(const Graph& g, const Kernel& k) {
  IterationSpace s;
  const Node& mm = g.node(contraction(g, k));
  const size_t batch = mm.shape.size() - 2;
  std::vector<int> product;  // b…, m, n
  for (size_t d = 0; d < batch; ++d) {
    product.push_back(static_cast<int>(s.axes.size()));
    s.axes.push_back({batch == 1 ? "b" : fmt::format("b{}", d), mm.shape[d], false});
  }
  const int m = static_cast<int>(s.axes.size()), n = m + 1, kk = m + 2;
  s.axes.push_back({"m", mm.shape[batch], false});
  s.axes.push_back({"n", mm.shape[batch + 1], false});
  s.axes.push_back({"k", matmul_operand_dims(g.node(mm.operands[0]).shape, mm.transpose_a).second, true});
  product.push_back(m);
  product.push_back(n);
  auto operand = [&](NodeId id, int rows, int cols, bool transposed) {
    const Shape& sh = g.node(id).shape;
    std::vector<int> axes(product.begin(), product.end() - 2);
    axes.push_back(transposed ? cols : rows);
    axes.push_back(transposed ? rows : cols);
    return aligned_map(sh, axes);
  };
  for (NodeId id : k.inputs) {
    OperandMap om{id, false, {}};
    if (id == mm.operands[0])
      om.dims = operand(id, m, kk, mm.transpose_a);
    else if (id == mm.operands[1])
      om.dims = operand(id, kk, n, mm.transpose_b);
    else
      om.dims = aligned_map(g.node(id).shape, product);
    s.operands.push_back(om);
  }
  for (NodeId id : k.outputs) s.operands.push_back({id, true, aligned_map(g.node(id).shape, product)});
  return s;
}

// O[b…, m, e] = Σ_n softmax_n(f(Σ_d Q[b…, m, d] · K[b…, n, d])) · V[b…, n, e]: parallel
// {b…, m, e}, reduced {n, d}.
IterationSpace attention_space(const Graph& g, const Kernel& k) {
  IterationSpace s;
  const Node& o = g.node(attention_output(g, k));
  const Node& scores = g.node(contraction(g, k));
  const size_t batch = o.shape.size() - 2;
  std::vector<int> lead;
  for (size_t d = 0; d < batch; ++d) {
    lead.push_back(static_cast<int>(s.axes.size()));
    s.axes.push_back({batch == 1 ? "b" : fmt::format("b{}", d), o.shape[d], false});
  }
  const int m = static_cast<int>(s.axes.size()), e = m + 1, n = m + 2, d = m + 3;
  s.axes.push_back({"m", o.shape[batch], false});
  s.axes.push_back({"e", o.shape[batch + 1], false});
  s.axes.push_back({"n", scores.shape.back(), true});
  s.axes.push_back({"d", g.node(scores.operands[0]).shape.back(), true});
  auto along = [&](int rows, int cols) {
    std::vector<int> axes = lead;
    axes.push_back(rows);
    axes.push_back(cols);
    return axes;
  };
  const NodeId q = scores.operands[0], kk = scores.operands[1], v = o.operands[1];
  // (K's and V's heads may be broadcast over query heads: GQA, MQA.)
  for (NodeId id : k.inputs)
    s.operands.push_back({id, false, id == q    ? along(m, d)
                                     : id == kk ? aligned_map(g.node(id).shape, along(n, d))
                                     : id == v  ? aligned_map(g.node(id).shape, along(n, e))
                                                : aligned_map(g.node(id).shape, along(m, n))});  // f's masks, biases
  for (NodeId id : k.outputs)  // O, and row values (one per query: [b…, m, 1])
    s.operands.push_back({id, true, id == o.id ? along(m, e) : aligned_map(g.node(id).shape, along(m, e))});
  return s;
}

// dK, dV[b…, n, e] = Σ_m … (keys' part; Q, dO [b…, m, e]) or dQ[b…, m, e] = Σ_n … (queries'):
// parallel {b…, the part's rows, e}, reduced along the other side. (d, contracted in the scores,
// is e: Q's and K's columns are both.)
IterationSpace attention_backward_space(const Graph& g, const Kernel& k) {
  IterationSpace s;
  bool keys = false;
  const BackwardChain c = backward_chain_of(g, k, &keys);
  const Shape& q = g.node(c.q).shape;
  const size_t batch = q.size() - 2;
  std::vector<int> lead;
  const Shape& kv = g.node(c.k).shape;
  // (The keys' part sums over query heads sharing a K/V head; with dQ summed in its kernel, dQ
  // runs along them: then, as the queries' axis below, not reduced for every output.)
  const bool dq_summed = k.schedule.attention_backward == 3;
  for (size_t d = 0; d < batch; ++d) {
    lead.push_back(static_cast<int>(s.axes.size()));
    s.axes.push_back(
        {batch == 1 ? "b" : fmt::format("b{}", d), q[d], keys && !dq_summed && kv[d] == 1 && q[d] > 1});
  }
  const int rows = static_cast<int>(s.axes.size()), e = rows + 1, cols = rows + 2;
  s.axes.push_back({keys ? "n" : "m", keys ? c.n_kv : c.n_q, false});
  s.axes.push_back({"e", c.d, false});
  // (With dQ summed in the keys' kernel, dQ runs along the queries dK and dV are summed over, and
  // is summed over the keys they run along: neither axis is reduced for every output.)
  s.axes.push_back({keys ? "m" : "n", keys ? c.n_q : c.n_kv, !dq_summed});
  const int m = keys ? cols : rows, n = keys ? rows : cols;
  auto along = [&](int r, int col) {
    std::vector<int> axes = lead;
    axes.push_back(r);
    axes.push_back(col);
    return axes;
  };
  // (K, V, dK and dV shared by query heads: 1 along the head axes they are broadcast on.)
  for (NodeId id : k.inputs)
    s.operands.push_back(
        {id, false, aligned_map(g.node(id).shape, id == c.k || id == c.v ? along(n, e) : along(m, e))});
  // (dQ, summed in the keys' kernel: along the queries its blocks reduce over.)
  for (NodeId id : k.outputs)
    s.operands.push_back({id, true, aligned_map(g.node(id).shape, along(keys && id != c.dq ? n : m, e))});
  return s;
}

}  // namespace

IterationSpace iteration_space(const Graph& g, const Kernel& k) {
  if (k.kind == ScheduleKind::MatMul) return matmul_space(g, k);
  if (k.kind == ScheduleKind::Attention) return attention_space(g, k);
  if (k.kind == ScheduleKind::AttentionBackward) return attention_backward_space(g, k);
  IterationSpace s;
  std::vector<int> all;
  for (size_t d = 0; d < k.domain.size(); ++d) {
    const bool reduced = k.split >= 0 && static_cast<int>(d) >= k.split && static_cast<int>(d) < k.reduce_end;
    all.push_back(static_cast<int>(d));
    s.axes.push_back({fmt::format("{}{}", reduced ? "r" : "d", d), k.domain[d], reduced});
  }
  for (NodeId id : k.inputs) s.operands.push_back({id, false, aligned_map(g.node(id).shape, all)});
  for (NodeId id : k.outputs) s.operands.push_back({id, true, aligned_map(written_shape(g, k, id), all)});
  return s;
}

std::string IterationSpace::str(const Graph& g) const {
  std::vector<std::string> axes_text, ins, outs;
  for (const IterAxis& a : axes) axes_text.push_back(fmt::format("{} {}{}", a.name, a.extent, a.reduced ? " reduced" : ""));
  for (const OperandMap& m : operands) {
    std::vector<std::string> dims;
    for (int a : m.dims) dims.push_back(a < 0 ? "1" : axes[static_cast<size_t>(a)].name);
    (m.output ? outs : ins).push_back(fmt::format("{}[{}]", operand_name(g, m.node, m.output), fmt::join(dims, ", ")));
  }
  return fmt::format("[{}]; {} → {}", fmt::join(axes_text, ", "), ins.empty() ? "nothing" : fmt::format("{}", fmt::join(ins, ", ")),
                     fmt::join(outs, ", "));
}

std::vector<std::string> space_problems(const Graph& g, const Kernel& k, const IterationSpace& s) {
  std::vector<std::string> out;
  std::vector<bool> used(s.axes.size(), false);
  for (const OperandMap& m : s.operands) {
    const Shape shape = mapped_shape(g, k, m);
    if (shape.size() != m.dims.size()) {
      out.push_back(fmt::format("%{} has {} dimensions, its map {}", m.node, shape.size(), m.dims.size()));
      continue;
    }
    for (size_t d = 0; d < shape.size(); ++d) {
      const int a = m.dims[d];
      if (a < 0) {
        if (shape[d] != 1) out.push_back(fmt::format("%{} dimension {} ({}) runs along no axis", m.node, d, shape[d]));
        continue;
      }
      const IterAxis& axis = s.axes.at(static_cast<size_t>(a));
      used[static_cast<size_t>(a)] = true;
      if (axis.extent != shape[d])
        out.push_back(fmt::format("%{} dimension {} ({}) runs along {} of {}", m.node, d, shape[d], axis.name, axis.extent));
      if (m.output && axis.reduced && k.schedule.contracts)
        out.push_back(fmt::format("output %{} runs along the contracted axis {}", m.node, axis.name));
    }
  }
  for (size_t a = 0; a < s.axes.size(); ++a)
    if (!used[a] && s.axes[a].extent != 1) out.push_back(fmt::format("no operand runs along {}", s.axes[a].name));
  return out;
}

}  // namespace tilefuse
