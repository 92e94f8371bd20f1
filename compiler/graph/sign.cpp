#include "compiler/graph/sign.h"

namespace tilefuse {

namespace {

// The facts look a few operations back: enough for −|x|, x − max x and their products, and
// cheap on any graph (each level visits at most three operands).
constexpr int kDepth = 6;

bool nonnegative(const Graph& g, NodeId n, int depth);

bool nonpositive(const Graph& g, NodeId n, int depth) {
  if (depth == 0) return false;
  const Node& v = g.node(n);
  auto pos = [&](size_t i) { return nonnegative(g, v.operands[i], depth - 1); };
  auto neg = [&](size_t i) { return nonpositive(g, v.operands[i], depth - 1); };
  switch (v.op) {
    case Op::Constant:
      return v.value <= 0;
    case Op::Neg:
      return pos(0);
    case Op::Sub: {
      if (nonpositive(g, v.operands[0], depth - 1) && nonnegative(g, v.operands[1], depth - 1)) return true;
      // x − max x (keepdim, over any axes): each element at most the maximum of its group.
      const NodeId x = v.operands[0];
      auto max_of_x = [&](NodeId id) { return g.node(id).op == Op::ReduceMax && g.node(id).operands[0] == x; };
      const Node& c = g.node(v.operands[1]);
      if (max_of_x(c.id)) return true;
      // x − where(m > K, m, C) with m = max x and C ≥ K (a stable softmax that guards fully
      // masked rows): where the condition fails, x ≤ m ≤ K ≤ C.
      if (c.op != Op::Where || !max_of_x(c.operands[1])) return false;
      const Node& cond = g.node(c.operands[0]);
      const Node& fallback = g.node(c.operands[2]);
      if ((cond.op != Op::Gt && cond.op != Op::Ne) || cond.operands[0] != c.operands[1] ||
          fallback.op != Op::Constant)
        return false;
      const Node& bound = g.node(cond.operands[1]);
      return bound.op == Op::Constant && fallback.value >= bound.value;
    }
    case Op::Add:
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::Cast:
      for (size_t i = 0; i < v.operands.size(); ++i)
        if (!neg(i)) return false;
      return true;
    case Op::Mul:
      return (neg(0) && pos(1)) || (pos(0) && neg(1));
    case Op::Min:
      return neg(0) || neg(1);
    case Op::Max:
      return neg(0) && neg(1);
    case Op::Where:
      return neg(1) && neg(2);
    default:
      return false;
  }
}

bool nonnegative(const Graph& g, NodeId n, int depth) {
  if (depth == 0) return false;
  const Node& v = g.node(n);
  auto pos = [&](size_t i) { return nonnegative(g, v.operands[i], depth - 1); };
  auto neg = [&](size_t i) { return nonpositive(g, v.operands[i], depth - 1); };
  switch (v.op) {
    case Op::Constant:
      return v.value >= 0;
    case Op::Abs:
    case Op::Exp:
    case Op::Exp2:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Sigmoid:
    case Op::Relu:
      return true;
    case Op::Neg:
      return neg(0);
    case Op::Mul:
      return v.operands[0] == v.operands[1] || (pos(0) && pos(1)) || (neg(0) && neg(1));
    case Op::Div:
      return (pos(0) && pos(1)) || (neg(0) && neg(1));
    case Op::Add:
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::Cast:
      for (size_t i = 0; i < v.operands.size(); ++i)
        if (!pos(i)) return false;
      return true;
    case Op::Max:
      return pos(0) || pos(1);
    case Op::Min:
      return pos(0) && pos(1);
    case Op::Where:
      return pos(1) && pos(2);
    default:
      return false;
  }
}

}  // namespace

bool never_positive(const Graph& g, NodeId n) { return nonpositive(g, n, kDepth); }
bool never_negative(const Graph& g, NodeId n) { return nonnegative(g, n, kDepth); }

}  // namespace tilefuse
