#include "compiler/dsl/autodiff.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "compiler/fusion/contraction_chain.h"
#include "compiler/support/error.h"

namespace tilefuse::dsl {

namespace {


// v broadcast to `like`'s shape: a where whose two branches are v (the condition only lends its
// shape; finite whatever like holds — v + 0·like would not be).
Tensor broadcast_like(const Tensor& v, const Tensor& like) { return where(eq(like, like), v, v); }

// t (which broadcasts to the node's shape) summed down to `to`: over t's leading axes past `to`'s
// rank, and over the axes where `to` is 1 and t is not. The result broadcasts to `to`.
Tensor unbroadcast(Tensor t, const Shape to) {  // (by value: a node's shape moves as nodes are appended)
  const Shape ts = t.shape();
  const size_t lead = ts.size() > to.size() ? ts.size() - to.size() : 0;
  if (lead > 0) {
    std::vector<int> axes;
    for (size_t d = 0; d < lead; ++d) axes.push_back(static_cast<int>(d));
    t = sum(t, axes, false);
  }
  const Shape now = t.shape();
  std::vector<int> ones;
  for (size_t d = 0; d < now.size(); ++d) {
    const size_t in_to = to.size() - now.size() + d;
    if (now[d] != 1 && to[in_to] == 1) ones.push_back(static_cast<int>(d));
  }
  return ones.empty() ? t : sum(t, ones, true);
}

// A reduction's result as it broadcasts back over its operand: kept axes broadcast; without
// keepdim only leading (or all) reduced axes line up.
void check_broadcasts_back(const Node& n, const Shape& operand) {
  if (n.keepdim || n.shape.empty()) return;
  for (size_t i = 0; i < n.axes.size(); ++i)
    if (n.axes[i] != static_cast<int>(i))
      throw UnsupportedError(fmt::format(
          "grad: %{} {} over axes [{}] of {} without keepdim: its gradient would need a reshape, which the graph "
          "does not have (reduce with keepdim, or over leading axes)",
          n.id, op_info(n.op).name, fmt::join(n.axes, ", "), shape_str(operand)));
}

class Backward {
 public:
  explicit Backward(Graph& g) : g_(g), users_(g.users()) {}

  void seed(const Tensor& out, const Tensor& out_grad) {
    if (!broadcasts_to(out_grad.shape(), out.shape()))
      throw ShapeError(fmt::format("grad: an output gradient {} does not broadcast to its output {}",
                                   shape_str(out_grad.shape()), shape_str(out.shape())));
    accumulate(out.id(), out_grad);
  }

  // Every node before `end` (the forward graph), last first.
  void run(NodeId end) {
    for (NodeId id = end - 1; id >= 0; --id)
      if (adj_.count(id)) node(g_.node(id), adj_.at(id));
  }

  Tensor result(const Tensor& x) {
    const Shape shape = x.shape();
    const DType dtype = x.dtype();
    if (!adj_.count(x.id())) return where(eq(x, x), 0.0, 0.0, dtype);  // L does not depend on x
    Tensor a = adj_.at(x.id());
    if (a.shape() != shape) a = broadcast_like(a, x);
    return cast(a, dtype);
  }

 private:
  Tensor t(NodeId id) { return Tensor(&g_, id); }

  void accumulate(NodeId id, Tensor c) {
    const DType dt = g_.node(id).dtype;
    if (!is_float(dt)) return;
    c = cast(c, dt);
    auto it = adj_.find(id);
    if (it == adj_.end()) adj_.emplace(id, c);
    else it->second = it->second + c;
  }
  void to_operand(NodeId id, const Tensor& c) { accumulate(id, unbroadcast(c, g_.node(id).shape)); }

  // Whether z = x − c(max(x)) reaches the graph only through expressions its shift cancels out
  // of: softmax's exp(z) / h(Σ exp z) and log_softmax's z − log Σ exp z (the DSL's composites).
  bool shift_cancels(NodeId z) const {
    const Node& sub = g_.node(z);
    const Node& shift = g_.node(sub.operands[1]);
    NodeId max = shift.op == Op::ReduceMax ? shift.id : -1;
    if (shift.op == Op::Where)
      for (NodeId o : {shift.operands[1], shift.operands[2]})
        if (g_.node(o).op == Op::ReduceMax) max = o;
    if (max < 0 || g_.node(max).operands[0] != sub.operands[0] || !g_.node(max).keepdim || g_.is_output(z) ||
        users_[static_cast<size_t>(z)].empty())
      return false;
    // The shift cancels only if nothing else reads it (a log-sum-exp c + log Σ e^(x − c) reads c
    // twice: its gradient through c is 0 only with both reads differentiated).
    if (g_.is_output(shift.id) ||
        std::any_of(users_[static_cast<size_t>(shift.id)].begin(), users_[static_cast<size_t>(shift.id)].end(),
                    [&](NodeId u) { return u != z; }))
      return false;
    const std::vector<int>& axes = g_.node(max).axes;
    auto is_sum_of = [&](NodeId r, NodeId e) {
      const Node& n = g_.node(r);
      return n.op == Op::ReduceSum && n.operands[0] == e && n.axes == axes && n.keepdim;
    };
    for (NodeId u : users_[static_cast<size_t>(z)]) {
      const Node& un = g_.node(u);
      if (un.op == Op::Sub && un.operands[0] == z) {  // log_softmax: z − log Σ exp z
        const Node& lg = g_.node(un.operands[1]);
        if (lg.op != Op::Log) return false;
        const Node& r = g_.node(lg.operands[0]);
        if (g_.is_output(r.id) || users_[static_cast<size_t>(r.id)].size() != 1) return false;
        const Node& e = g_.node(r.operands[0]);
        if (e.op != Op::Exp || e.operands[0] != z || !is_sum_of(r.id, e.id)) return false;
        continue;
      }
      if (un.op != Op::Exp || g_.is_output(u)) return false;
      for (NodeId v : users_[static_cast<size_t>(u)]) {  // softmax: exp z / h(Σ exp z)
        const Node& vn = g_.node(v);
        if (is_sum_of(v, u)) {
          if (g_.is_output(v)) return false;
          for (NodeId w : users_[static_cast<size_t>(v)]) {
            const Node& wn = g_.node(w);
            const bool divisor = (wn.op == Op::Div && wn.operands[0] == u) ||
                                 (wn.op == Op::Max && g_.node(wn.operands[1]).op == Op::Constant && !g_.is_output(w) &&
                                  std::all_of(users_[static_cast<size_t>(w)].begin(), users_[static_cast<size_t>(w)].end(),
                                              [&](NodeId x) {
                                                const Node& xn = g_.node(x);
                                                return xn.op == Op::Div && xn.operands[0] == u;
                                              }));
            const bool logsum = wn.op == Op::Log;  // (checked from the Sub above)
            if (!divisor && !logsum) return false;
          }
        } else if (!(vn.op == Op::Div && vn.operands[0] == u)) {
          return false;
        }
      }
    }
    return true;
  }

  void node(const Node n, const Tensor gy) {  // (by value: appending invalidates references)
    if (n.op == Op::Input || n.op == Op::Constant || n.op == Op::Iota) return;
    if (n.op == Op::MatMul && attention_grads(n, gy)) return;
    const Tensor y = t(n.id);
    auto x = [&](size_t i) { return t(n.operands.at(i)); };
    switch (n.op) {
      case Op::Neg:
        return to_operand(n.operands[0], -gy);
      case Op::Abs:
        return to_operand(n.operands[0], where(x(0) > 0.0, gy, where(x(0) < 0.0, -gy, 0.0)));
      case Op::Exp:
        return to_operand(n.operands[0], gy * y);
      case Op::Exp2:
        return to_operand(n.operands[0], gy * y * M_LN2);
      case Op::Log:
        return to_operand(n.operands[0], gy / x(0));
      case Op::Sqrt:
        return to_operand(n.operands[0], gy * 0.5 / y);
      case Op::Rsqrt:
        return to_operand(n.operands[0], gy * -0.5 * y * y * y);
      case Op::Tanh:
        return to_operand(n.operands[0], gy * (1.0 - y * y));
      case Op::Erf:
        return to_operand(n.operands[0], gy * (2.0 / std::sqrt(M_PI)) * exp(-(x(0) * x(0))));
      case Op::Sigmoid:
        return to_operand(n.operands[0], gy * y * (1.0 - y));
      case Op::Relu:
        return to_operand(n.operands[0], where(x(0) > 0.0, gy, 0.0));
      case Op::Gelu: {  // Φ(x) + x·φ(x)
        const Tensor v = x(0);
        const Tensor cdf = (erf(v * M_SQRT1_2) + 1.0) * 0.5;
        const Tensor pdf = exp(v * v * -0.5) * (1.0 / std::sqrt(2 * M_PI));
        return to_operand(n.operands[0], gy * (cdf + v * pdf));
      }
      case Op::GeluTanh: {  // ½(1 + t) + ½x(1 − t²)·k(1 + 3·0.044715x²), t = tanh(k(x + 0.044715x³))
        const Tensor v = x(0);
        const double k = std::sqrt(2 / M_PI);
        const Tensor th = tanh((v + v * v * v * 0.044715) * k);
        const Tensor d = (th + 1.0) * 0.5 + v * 0.5 * (1.0 - th * th) * ((v * v * (3 * 0.044715) + 1.0) * k);
        return to_operand(n.operands[0], gy * d);
      }
      case Op::Cast:
        return to_operand(n.operands[0], gy);
      case Op::Add:
        to_operand(n.operands[0], gy);
        return to_operand(n.operands[1], gy);
      case Op::Sub:
        to_operand(n.operands[0], gy);
        if (!shift_cancels(n.id)) to_operand(n.operands[1], -gy);
        return;
      case Op::Mul:
        to_operand(n.operands[0], gy * x(1));
        return to_operand(n.operands[1], gy * x(0));
      case Op::Div:
        to_operand(n.operands[0], gy / x(1));
        return to_operand(n.operands[1], -(gy * y) / x(1));
      case Op::Max:
      case Op::Min: {  // ties to the first
        const Tensor first = n.op == Op::Max ? x(0) >= x(1) : x(0) <= x(1);
        to_operand(n.operands[0], where(first, gy, 0.0));
        return to_operand(n.operands[1], where(first, 0.0, gy));
      }
      case Op::Pow:
        to_operand(n.operands[0], gy * x(1) * pow(x(0), x(1) - 1.0));
        if (g_.node(n.operands[1]).op != Op::Constant) to_operand(n.operands[1], gy * y * log(x(0)));
        return;
      case Op::Fma:
        to_operand(n.operands[0], gy * x(1));
        to_operand(n.operands[1], gy * x(0));
        return to_operand(n.operands[2], gy);
      case Op::Where:
        to_operand(n.operands[1], where(x(0), gy, 0.0));
        return to_operand(n.operands[2], where(x(0), 0.0, gy));
      case Op::ReduceSum:
        check_broadcasts_back(n, g_.node(n.operands[0]).shape);
        return accumulate(n.operands[0], gy);
      case Op::ReduceMax:
      case Op::ReduceMin: {  // the extremes share the gradient
        check_broadcasts_back(n, g_.node(n.operands[0]).shape);
        const Tensor hit = cast(eq(x(0), y), n.dtype);
        return accumulate(n.operands[0], gy * hit / sum(hit, n.axes, true));
      }
      case Op::MatMul:
        matmul_grads(n, gy);
        return;
      case Op::WriteAt:  // a cache written in place is state, not a differentiable value
        throw GraphError(fmt::format("grad: %{} write_at writes its cache in place and has no gradient; "
                                     "differentiate the attention over a cache that is an input",
                                     n.id));
      default:
        return;  // comparisons: no gradient
    }
  }

  // O = softmax(f(Q·Kᵀ))·V found as the forward's attention rule finds it (a contraction chain,
  // compiler/fusion/contraction_chain.h), differentiated in FlashAttention-2's form, so that the
  // backward reads nothing of the forward's N×N values and the forward stays one kernel:
  //   P' = 2^(f(Q·Kᵀ)'·log2 e + M)    recomputed from a copy of the scores' chain: e^(X − L)
  //                                   with each row's log-sum-exp L = c + ln h(Σ), from the shift
  //                                   c and divisor h(Σ), given as M = −L·log2 e — a row op the
  //                                   forward kernel computes after its loop and writes beside O
  //                                   (one value a row for the backward's kernels to read,
  //                                   the exponent's shift in base 2: no multiply a column), M
  //                                   and P' in f32
  //   dV = P'ᵀ·dO,  dP = dO·Vᵀ         (the matmul rule on O' = P'·V; dP in P's dtype)
  //   D = rowsum(dO∘O)                 = rowsum(P∘dP), since O = P·V
  //   dX = P'∘(dP − D)                 softmax's backward (P' as O's product read it: in V's
  //                                    dtype), then f's and Q·Kᵀ's rules on the copy.
  // False (the ordinary rules then apply) where O is no such chain, or where something else
  // already takes a gradient from the chain's inner values (a log-sum-exp output).
  bool attention_grads(const Node& o, Tensor go) {
    std::string why;
    const std::optional<ContractionChain> c = match_contraction_chain(g_, o.id, &why);
    if (!c) return false;
    for (NodeId inner : c->nodes())
      if (inner != o.id && adj_.count(inner)) return false;
    // The scores' chain again from Q and K: S', the masks' and biases' index ops, X' = f(S').
    std::vector<NodeId> chain = c->index_ops;
    chain.push_back(c->scores);
    chain.insert(chain.end(), c->score_ops.begin(), c->score_ops.end());
    std::sort(chain.begin(), chain.end());
    std::map<NodeId, NodeId> copy;
    for (NodeId id : chain) {
      Node n = g_.node(id);
      for (NodeId& operand : n.operands)
        if (copy.count(operand)) operand = copy.at(operand);
      copy[id] = g_.append(std::move(n));
    }
    const DType probs_dtype = g_.node(c->probs).dtype;  // (appending nodes moves the graph's)
    const NodeId shift = c->shift_ops.empty() ? c->row_max : c->shift_ops.back();
    const NodeId divisor = c->divisor_ops.empty() ? c->row_sum : c->divisor_ops.back();
    // L in f32 whatever the scores' dtype (as FlashAttention keeps it): in bf16 it would round by
    // up to 2^-9·|L|, e.g. 0.016 at |L| ≈ 8, and every P' of its row by as much (fuzz seed 201).
    // For f32 scores the casts are none.
    const Tensor x = t(copy.at(c->x()));
    const Tensor lse = cast(t(shift), DType::F32) + log(cast(t(divisor), DType::F32));
    const Tensor p = cast(exp2(cast(x, DType::F32) * M_LOG2E + lse * -M_LOG2E), x.dtype());
    const Tensor pv = c->cast >= 0 ? cast(p, g_.node(c->cast).dtype) : p;
    // O' = P'·V with O's options: its matmul rule gives dV (to V) and dP (to P', taken back here).
    // (dO broadcast against O first: against O' it would make O' a value the graph computes.)
    if (go.shape() != o.shape) go = broadcast_like(go, t(o.id));
    // dP in the probabilities' dtype (f32 unless they are rounded), as FlashAttention keeps it:
    // rounded to V's dtype it would cancel against D to that rounding where a row sees one key
    // (dP − D = 0 in exact arithmetic), and the fused backward never rounds it.
    const Tensor o_again = matmul(pv, t(c->v), {o.transpose_a, o.transpose_b, o.dtype});
    const Tensor dp = *matmul_grads(g_.node(o_again.id()), go, probs_dtype);
    const Tensor d = sum(cast(go, DType::F32) * cast(t(o.id), DType::F32), {-1}, true);
    // dS from P' as O's product read it (in V's dtype where it was cast), so that P' is computed
    // once, in the scores' kernel, and the dP kernel's epilogue reads one tile of it.
    const Tensor p_read = c->cast >= 0 ? cast(pv, probs_dtype) : p;
    accumulate(x.id(), p_read * (dp - cast(d, probs_dtype)));
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)  // f's rules, then Q·Kᵀ's, on the copy
      if (adj_.count(copy.at(*it))) node(g_.node(copy.at(*it)), adj_.at(copy.at(*it)));
    return true;
  }

  // C = op(a)·op(b): dA = dC·op(b)ᵀ, dB = op(a)ᵀ·dC (transposed back where an operand is stored
  // transposed), in the operands' dtype, summed over broadcast batch axes. Given `ga_dtype`, dA's
  // product is in it and returned rather than added to a's gradient.
  std::optional<Tensor> matmul_grads(const Node n, Tensor gc,  // (n by value: appending invalidates
                                     std::optional<DType> ga_dtype = std::nullopt) {  // references)
    const NodeId a = n.operands[0], b = n.operands[1];
    const DType dt = g_.node(a).dtype, adt = ga_dtype.value_or(dt);
    if (gc.shape() != n.shape) gc = broadcast_like(gc, t(n.id));
    gc = cast(gc, dt);
    const bool ta = n.transpose_a, tb = n.transpose_b;
    const Tensor ga = !ta ? matmul(gc, t(b), {false, !tb, adt}) : matmul(t(b), gc, {tb, true, adt});
    const Tensor gb = !tb ? matmul(t(a), gc, {!ta, false, dt}) : matmul(gc, t(a), {true, ta, dt});
    to_operand(b, gb);
    if (ga_dtype) return unbroadcast(ga, g_.node(a).shape);
    to_operand(a, ga);
    return std::nullopt;
  }

  Graph& g_;
  const std::vector<std::vector<NodeId>> users_;
  std::map<NodeId, Tensor> adj_;
};

}  // namespace

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& output_grads,
                         const std::vector<Tensor>& wrt) {
  if (outputs.empty() || outputs.size() != output_grads.size())
    throw ShapeError(fmt::format("grad: {} outputs and {} output gradients", outputs.size(), output_grads.size()));
  Graph& g = outputs[0].graph();
  const NodeId end = static_cast<NodeId>(g.nodes().size());
  Backward back(g);
  for (size_t i = 0; i < outputs.size(); ++i) back.seed(outputs[i], output_grads[i]);
  back.run(end);
  std::vector<Tensor> out;
  for (const Tensor& x : wrt) out.push_back(back.result(x));
  return out;
}

}  // namespace tilefuse::dsl
