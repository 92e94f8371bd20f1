#include "compiler/fusion/row_passes.h"

#include <algorithm>
#include <functional>
#include <set>

namespace tilefuse {

RowPasses analyze_row_passes(const Graph& g, const std::vector<NodeId>& nodes,
                             const std::vector<NodeId>& outputs, const Shape& domain) {
  RowPasses rp;
  std::set<NodeId> members(nodes.begin(), nodes.end());
  std::map<NodeId, int> depth;  // reductions completed before the node can be evaluated
  auto depth_of = [&](NodeId n) { return depth.count(n) ? depth[n] : 0; };

  // The max reduction that per-row expression `c` depends on, if it depends on exactly one
  // and otherwise only on constants and per-row arithmetic.
  auto single_max_of = [&](NodeId c) -> NodeId {
    NodeId found = -1;
    bool ok = true;
    std::function<void(NodeId)> walk = [&](NodeId n) {
      const Node& node = g.node(n);
      if (!ok || node.op == Op::Constant) return;
      if (!members.count(n) || node.shape == domain) {
        ok = false;
        return;
      }
      if (node.op == Op::ReduceMax && depth_of(n) == 1 && node.keepdim) {
        if (found >= 0 && found != n) ok = false;
        found = n;
        return;
      }
      if (op_info(node.op).kind == OpKind::Reduce) {
        ok = false;
        return;
      }
      for (NodeId o : node.operands) walk(o);
    };
    walk(c);
    return ok ? found : -1;
  };

  for (NodeId n : nodes) {
    const Node& node = g.node(n);
    int d = 0;
    for (NodeId o : node.operands)
      if (members.count(o)) d = std::max(d, depth_of(o));
    if (op_info(node.op).kind == OpKind::Reduce) {
      d += 1;
      const Node& arg = g.node(node.operands[0]);
      if (node.op == Op::ReduceSum && d == 2 && members.count(arg.id) && arg.op == Op::Exp) {
        const Node& diff = g.node(arg.operands[0]);
        if (members.count(diff.id) && diff.op == Op::Sub && depth_of(diff.operands[0]) == 0) {
          NodeId m = single_max_of(diff.operands[1]);
          if (m >= 0) {
            d = 1;
            rp.online_with[n] = m;
            rp.shift_of[n] = diff.operands[1];
          }
        }
      }
      rp.pass_of[n] = d;
      rp.passes = std::max(rp.passes, d);
    }
    depth[n] = d;
  }
  for (NodeId o : outputs)
    if (g.node(o).shape == domain) rp.passes = std::max(rp.passes, depth_of(o) + 1);
  return rp;
}

int row_tiles_held(const Graph& g, const std::vector<NodeId>& nodes, const std::vector<NodeId>& outputs,
                   const Shape& domain) {
  const std::set<NodeId> members(nodes.begin(), nodes.end());
  const int64_t row_elements = num_elements(domain);
  auto row_sized = [&](NodeId n) { return num_elements(g.node(n).shape) == row_elements; };
  std::map<NodeId, std::set<NodeId>> after;  // the kernel's reductions each node depends on
  for (NodeId n : nodes) {
    std::set<NodeId>& a = after[n];
    for (NodeId o : g.node(n).operands)
      if (members.count(o)) a.insert(after[o].begin(), after[o].end());
    if (op_info(g.node(n).op).kind == OpKind::Reduce) a.insert(n);
  }
  auto depends = [&](NodeId n, NodeId r) { return members.count(n) && after[n].count(r); };
  // The row-sized inputs of n's cone within the kernel.
  std::function<void(NodeId, std::set<NodeId>&, std::set<NodeId>&)> inputs_of =
      [&](NodeId n, std::set<NodeId>& seen, std::set<NodeId>& out) {
        if (!seen.insert(n).second) return;
        if (!members.count(n)) {
          if (row_sized(n)) out.insert(n);
          return;
        }
        for (NodeId o : g.node(n).operands) inputs_of(o, seen, out);
      };
  int most = 0;
  for (NodeId r : nodes) {
    if (op_info(g.node(r).op).kind != OpKind::Reduce) continue;
    std::set<NodeId> held;
    for (NodeId u : nodes)
      if (u != r && depends(u, r))
        for (NodeId o : g.node(u).operands)
          if (row_sized(o) && !depends(o, r)) held.insert(o);
    for (NodeId o : outputs)
      if (members.count(o) && row_sized(o) && !depends(o, r)) {
        std::set<NodeId> seen;
        inputs_of(o, seen, held);
      }
    most = std::max(most, static_cast<int>(held.size()));
  }
  return most;
}

}  // namespace tilefuse
