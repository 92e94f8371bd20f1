#include "compiler/graph/sign.h"

namespace tilefuse {

namespace {

// The facts look a few operations back: enough for −|x|, x − max x and their products, and
// cheap on any graph (each level visits at most three operands).
constexpr int kDepth = 6;

enum class Sign { NonPositive, NonNegative };
Sign flip(Sign s) { return s == Sign::NonPositive ? Sign::NonNegative : Sign::NonPositive; }

bool has(const Graph& g, NodeId n, Sign s, int depth);

// x − max x (keepdim, over any axes): each element at most the maximum of its group; also
// x − where(m > K, m, C) with m = max x and C ≥ K (a stable softmax that guards fully masked
// rows): where the condition fails, x ≤ m ≤ K ≤ C.
bool minus_its_max(const Graph& g, const Node& sub) {
  const NodeId x = sub.operands[0];
  auto max_of_x = [&](NodeId id) { return g.node(id).op == Op::ReduceMax && g.node(id).operands[0] == x; };
  const Node& c = g.node(sub.operands[1]);
  if (max_of_x(c.id)) return true;
  if (c.op != Op::Where || !max_of_x(c.operands[1])) return false;
  const Node& cond = g.node(c.operands[0]);
  const Node& fallback = g.node(c.operands[2]);
  if ((cond.op != Op::Gt && cond.op != Op::Ne) || cond.operands[0] != c.operands[1] || fallback.op != Op::Constant)
    return false;
  const Node& bound = g.node(cond.operands[1]);
  return bound.op == Op::Constant && fallback.value >= bound.value;
}

bool has(const Graph& g, NodeId n, Sign s, int depth) {
  if (depth == 0) return false;
  const Node& v = g.node(n);
  auto same = [&](size_t i) { return has(g, v.operands[i], s, depth - 1); };
  auto opposite = [&](size_t i) { return has(g, v.operands[i], flip(s), depth - 1); };
  auto nonnegative = [&](size_t i) { return has(g, v.operands[i], Sign::NonNegative, depth - 1); };
  const bool up = s == Sign::NonNegative;
  switch (v.op) {
    case Op::Constant:
      return up ? v.value >= 0 : v.value <= 0;
    case Op::Abs:
    case Op::Exp:
    case Op::Exp2:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Sigmoid:
    case Op::Relu:
      return up;
    case Op::Neg:
      return opposite(0);
    case Op::Sub:
      return (same(0) && opposite(1)) || (!up && minus_its_max(g, v));
    case Op::Add:
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::Cast:
      for (size_t i = 0; i < v.operands.size(); ++i)
        if (!same(i)) return false;
      return true;
    case Op::Mul:
      if (up && v.operands[0] == v.operands[1]) return true;  // x·x
      [[fallthrough]];
    case Op::Div:  // the sign of a product: one factor's sign, the other's never negative
      return (same(0) && nonnegative(1)) || (nonnegative(0) && same(1)) || (up && opposite(0) && opposite(1));
    case Op::Max:  // at least the larger operand: one operand of the sign suffices upwards
      return up ? same(0) || same(1) : same(0) && same(1);
    case Op::Min:
      return up ? same(0) && same(1) : same(0) || same(1);
    case Op::Where:
      return same(1) && same(2);
    default:
      return false;
  }
}

}  // namespace

bool never_positive(const Graph& g, NodeId n) { return has(g, n, Sign::NonPositive, kDepth); }
bool never_negative(const Graph& g, NodeId n) { return has(g, n, Sign::NonNegative, kDepth); }
bool exp_of_nonpositive(const Graph& g, const Node& n) { return n.op == Op::Exp && never_positive(g, n.operands[0]); }

}  // namespace tilefuse
