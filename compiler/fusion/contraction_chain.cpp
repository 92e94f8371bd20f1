#include "compiler/fusion/contraction_chain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "compiler/fusion/cost_model.h"

namespace tilefuse {

std::vector<NodeId> ContractionChain::nodes() const {
  std::vector<NodeId> out = {scores, row_max, shifted, exp, row_sum, probs, output};
  for (const std::vector<NodeId>* ops : {&score_ops, &index_ops, &shift_ops, &divisor_ops, &row_ops})
    out.insert(out.end(), ops->begin(), ops->end());
  if (cast >= 0) out.push_back(cast);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

bool is_constant(const Graph& g, NodeId id) { return g.node(id).op == Op::Constant; }

bool elementwise(const Node& n) {
  const OpKind k = op_info(n.op).kind;
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Compare || k == OpKind::Select ||
         k == OpKind::Ternary;
}

// A reduction `op` over the last axis, keeping it.
bool row_reduction(const Node& n, Op op, const Graph& g) {
  return n.op == op && n.keepdim && n.axes.size() == 1 &&
         n.axes[0] == static_cast<int>(g.node(n.operands[0]).shape.size()) - 1;
}

// Whether `shape` broadcasts into `scores` without widening it, and an iota among `masks` runs
// along a whole axis of the scores.
bool fits_scores(const Graph& g, NodeId id, const Shape& scores) {
  const Node& n = g.node(id);
  if (n.shape.size() > scores.size()) return false;
  const size_t off = scores.size() - n.shape.size();
  for (size_t d = 0; d < n.shape.size(); ++d)
    if (n.shape[d] != 1 && n.shape[d] != scores[off + d]) return false;
  if (n.op == Op::Iota && n.shape[static_cast<size_t>(n.axes.at(0))] != scores[off + static_cast<size_t>(n.axes.at(0))])
    return false;
  return true;
}

// A comparison `above` op `below` as `op` (≥ or >), whichever way round it is written (a ≥ b or
// b ≤ a): false where the node is neither.
bool ordered(const Node& cmp, Op op, NodeId* above, NodeId* below) {
  const Op mirror = op == Op::Ge ? Op::Le : Op::Lt;
  if (cmp.op != op && cmp.op != mirror) return false;
  const bool forward = cmp.op == op;
  *above = cmp.operands[forward ? 0 : 1];
  *below = cmp.operands[forward ? 1 : 0];
  return true;
}

// c where `id` is i_q + c (c a constant; 0 for the iota along the queries alone); nullopt where it
// is not.
std::optional<double> query_offset(const Graph& g, NodeId id) {
  if (iota_along(g, id, 2)) return 0.0;
  const Node& a = g.node(id);
  if (a.op != Op::Add) return std::nullopt;
  const int c = is_constant(g, a.operands[1]) ? 1 : is_constant(g, a.operands[0]) ? 0 : -1;
  if (c < 0 || !iota_along(g, a.operands[static_cast<size_t>(1 - c)], 2)) return std::nullopt;
  return g.node(a.operands[static_cast<size_t>(c)]).value;
}

}  // namespace

bool is_constant_value(const Graph& g, NodeId id, double v) {
  return g.node(id).op == Op::Constant && g.node(id).value == v;
}

// Whether `id` is computed without the scores: from iotas along its last two axes (queries,
// keys), constants and tensors computed outside (`leaves`, read from memory) — a mask or bias
// the kernel computes from its tiles' positions and tiles of those tensors; its nodes (not the
// constants, not the tensors) go into `nodes`. Nothing that reaches a matmul is a leaf (the
// scores are). (The shapes are checked against the scores' once those are known.)
bool index_only(const Graph& g, NodeId id, std::set<NodeId>* nodes, std::set<NodeId>* leaves) {
  const Node& n = g.node(id);
  if (n.op == Op::Constant) return true;
  if (n.op == Op::Input) {
    leaves->insert(id);
    return true;
  }
  if (n.op == Op::Iota) {
    const int from_end = static_cast<int>(n.shape.size()) - n.axes.at(0);
    if (from_end != 1 && from_end != 2) return false;
    nodes->insert(id);
    return true;
  }
  if (!elementwise(n)) return false;
  for (NodeId o : n.operands)
    if (!index_only(g, o, nodes, leaves)) return false;
  nodes->insert(id);
  return true;
}

std::optional<int64_t> causal_mask_offset(const Graph& g, NodeId condition, int64_t n_kv) {
  NodeId query, key;
  if (!ordered(g.node(condition), Op::Ge, &query, &key) || !iota_along(g, key, 1)) return std::nullopt;
  const std::optional<double> offset = query_offset(g, query);
  // (An offset past the last key hides nothing: no tile to skip.)
  if (!offset || !(*offset >= 0) || *offset != std::floor(*offset) || *offset >= static_cast<double>(n_kv))
    return std::nullopt;
  return static_cast<int64_t>(*offset);
}

namespace {

// A sliding window's mask condition (i_q + c) − i_k < W (or ≤ W, written either way round; c a
// constant or none, W a constant): query i sees no key before i + the offset returned.
std::optional<int64_t> window_offset_of(const Graph& g, NodeId condition) {
  NodeId limit, distance;
  const bool strict = ordered(g.node(condition), Op::Gt, &limit, &distance);
  if (!strict && !ordered(g.node(condition), Op::Ge, &limit, &distance)) return std::nullopt;
  const Node& sub = g.node(distance);
  if (!is_constant(g, limit) || sub.op != Op::Sub || !iota_along(g, sub.operands[1], 1)) return std::nullopt;
  const std::optional<double> c = query_offset(g, sub.operands[0]);
  const double w = g.node(limit).value;
  if (!c || !std::isfinite(w) || !std::isfinite(*c) || std::fabs(*c - w) > 0x1p52) return std::nullopt;
  // i_k > i_q + c − W: i_k ≥ i_q + ⌊c − W⌋ + 1;  i_k ≥ i_q + c − W: i_k ≥ i_q + ⌈c − W⌉.
  return static_cast<int64_t>(strict ? std::floor(*c - w) + 1 : std::ceil(*c - w));
}

// The first causal mask's offset, and the mask (its where) in *mask.
std::optional<int64_t> causal_offset(const Graph& g, NodeId x, const std::vector<NodeId>& score_ops, NodeId* mask) {
  for (NodeId m : score_masks(g, x, score_ops))
    if (std::optional<int64_t> c = causal_mask_offset(g, g.node(m).operands[0], g.node(x).shape.back())) {
      *mask = m;
      return c;
    }
  return std::nullopt;
}

// A mask condition i_k < T (or T > i_k) with T computed from `tensors` (at least one) and
// constants and broadcast along the queries and the keys: T, the nodes computing it and the
// tensors they read.
NodeId key_limit_of(const Graph& g, NodeId condition, const std::vector<NodeId>& index_ops,
                    const std::vector<NodeId>& tensors, std::vector<NodeId>* ops, std::vector<NodeId>* reads) {
  NodeId key, limit;
  if (!ordered(g.node(condition), Op::Gt, &limit, &key)) return -1;
  const Shape& t = g.node(limit).shape;
  if (!iota_along(g, key, 1) || (t.size() >= 1 && t.back() != 1) || (t.size() >= 2 && t[t.size() - 2] != 1))
    return -1;
  // T's nodes, depth first; every leaf a tensor or a constant, one tensor at least.
  std::set<NodeId> seen;
  std::vector<NodeId> stack = {limit};
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second || is_constant(g, n)) continue;
    if (std::count(tensors.begin(), tensors.end(), n)) {
      reads->push_back(n);
      continue;
    }
    if (!std::count(index_ops.begin(), index_ops.end(), n) || g.node(n).op == Op::Iota) return -1;
    ops->push_back(n);
    for (NodeId o : g.node(n).operands) stack.push_back(o);
  }
  if (reads->empty()) return -1;
  std::sort(ops->begin(), ops->end());
  return limit;
}

// The elementwise ops after chain c computed from its row values and constants alone, keeping a
// row value's shape (one value a query row), in order: what the kernel can compute after its loop.
// Only live ones: a node nothing needs is in no kernel.
std::vector<NodeId> row_ops_of(const Graph& g, const ContractionChain& c) {
  std::vector<NodeId> ops;
  const Shape& row = g.node(c.row_max).shape;
  const std::vector<bool> live = g.live();
  for (NodeId id = std::min(c.row_max, c.row_sum) + 1; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (!live[id] || !elementwise(n) || n.shape != row || c.row_value(id)) continue;
    bool from_rows = true, any = false;
    for (NodeId o : n.operands) {
      const bool value = c.row_value(o) || std::count(ops.begin(), ops.end(), o);
      from_rows &= value || is_constant(g, o);
      any |= value;
    }
    if (from_rows && any) ops.push_back(id);
  }
  return ops;
}

}  // namespace

bool iota_along(const Graph& g, NodeId id, int from_end) {
  const Node& n = g.node(id);
  return n.op == Op::Iota && static_cast<int>(n.shape.size()) - n.axes.at(0) == from_end;
}

// X's masks: X = where(m₁, where(m₂, …, −inf), −inf), outermost first, each where one of the
// score ops (the scores flow through its second operand; its condition is its first).
std::vector<NodeId> score_masks(const Graph& g, NodeId x, const std::vector<NodeId>& score_ops) {
  std::vector<NodeId> out;
  for (NodeId at = x; std::count(score_ops.begin(), score_ops.end(), at) && g.node(at).op == Op::Where &&
                      is_constant_value(g, g.node(at).operands[2], -INFINITY);
       at = g.node(at).operands[1])
    out.push_back(at);
  return out;
}

// P = E / h(Σ E), E = exp(X − c): a softmax's probabilities (else not an attention at all; `why`
// stays empty), the divisor's ops and the row sum.
static bool match_probabilities(const Graph& g, NodeId p, ContractionChain& c, std::string* why) {
  const Node& probs = g.node(p);
  if (probs.op != Op::Div || g.node(probs.operands[0]).op != Op::Exp) return false;
  c.probs = p;
  c.exp = probs.operands[0];
  c.shifted = g.node(c.exp).operands[0];
  const Node& sub = g.node(c.shifted);
  if (sub.op != Op::Sub) return false;
  std::vector<NodeId> divisor;
  NodeId sum = probs.operands[1];
  while (!row_reduction(g.node(sum), Op::ReduceSum, g)) {
    const Node& n = g.node(sum);
    std::vector<NodeId> vars;
    for (NodeId x : n.operands)
      if (!is_constant(g, x)) vars.push_back(x);
    if (!elementwise(n) || vars.size() != 1) {
      *why = fmt::format("the probabilities' divisor %{} is not a function of a row sum and constants", probs.operands[1]);
      return false;
    }
    divisor.push_back(sum);
    sum = vars[0];
  }
  std::reverse(divisor.begin(), divisor.end());
  c.divisor_ops = divisor;
  c.row_sum = sum;
  if (g.node(sum).operands[0] != c.exp) {
    *why = fmt::format("the row sum %{} is not of the exp %{} it divides", sum, c.exp);
    return false;
  }
  return true;
}

// The shift c subtracted before the exp: the row max of X, or where(max > −inf, max, 0).
static bool match_shift(const Graph& g, ContractionChain& c, std::string* why) {
  const Node& sub = g.node(c.shifted);
  const NodeId x = sub.operands[0];
  NodeId shift = sub.operands[1];
  if (!row_reduction(g.node(shift), Op::ReduceMax, g)) {
    const Node& w = g.node(shift);
    const bool guarded = w.op == Op::Where && w.operands.size() == 3 && is_constant_value(g, w.operands[2], 0) &&
                         row_reduction(g.node(w.operands[1]), Op::ReduceMax, g);
    const Node* cond = guarded ? &g.node(w.operands[0]) : nullptr;
    if (!cond || !(cond->op == Op::Gt || cond->op == Op::Ne) || cond->operands[0] != w.operands[1] ||
        !is_constant_value(g, cond->operands[1], -INFINITY)) {
      *why = fmt::format("the shift %{} subtracted before the exp is neither the row max nor where(max > -inf, max, 0)",
                         shift);
      return false;
    }
    c.shift_ops = {w.operands[0], shift};
    shift = w.operands[1];
  }
  c.row_max = shift;
  if (g.node(shift).operands[0] != x) {
    *why = fmt::format("the row max %{} is not of the value %{} it shifts", shift, x);
    return false;
  }
  return true;
}

// X = f(S), S = Q·Kᵀ: f elementwise, its other operands constants or masks and biases from iotas
// and inputs (the causal mask, a window, a key limit among them), each fitting the scores.
static bool match_scores(const Graph& g, ContractionChain& c, std::string* why) {
  const NodeId x = g.node(c.shifted).operands[0];
  NodeId s = x;
  std::set<NodeId> index_nodes, tensors;
  while (g.node(s).op != Op::MatMul) {
    const Node& n = g.node(s);
    NodeId next = -1;
    for (NodeId a : n.operands) {
      if (is_constant(g, a)) continue;
      std::set<NodeId> found, leaves;
      if (index_only(g, a, &found, &leaves)) {
        index_nodes.insert(found.begin(), found.end());
        tensors.insert(leaves.begin(), leaves.end());
        continue;
      }
      next = next < 0 ? a : -2;
    }
    if (!elementwise(n) || next < 0) {
      *why = fmt::format("the scores reach the softmax through %{} {}, which is not an elementwise op of the "
                         "scores and {}",
                         s, op_info(n.op).name,
                         next == -2 ? "masks or biases (two operands depend on the scores, or a mask is computed from "
                                      "something other than iotas, constants and inputs)"
                                    : "constants");
      return false;
    }
    c.score_ops.push_back(s);
    s = next;
  }
  std::reverse(c.score_ops.begin(), c.score_ops.end());
  c.index_ops.assign(index_nodes.begin(), index_nodes.end());
  c.tensors.assign(tensors.begin(), tensors.end());
  c.causal_offset = causal_offset(g, x, c.score_ops, &c.causal_mask);
  for (NodeId mask : score_masks(g, x, c.score_ops)) {
    const NodeId m = g.node(mask).operands[0];
    if (std::optional<int64_t> w = window_offset_of(g, m); w && c.window_mask < 0) {
      c.window_offset = w;
      c.window_mask = mask;
    }
    std::vector<NodeId> ops, reads;
    if (NodeId t = key_limit_of(g, m, c.index_ops, c.tensors, &ops, &reads); t >= 0 && c.key_limit < 0) {
      c.key_limit = t;
      c.key_limit_ops = std::move(ops);
      c.key_limit_tensors = std::move(reads);
    }
  }
  c.scores = s;
  const Node& sn = g.node(s);
  if (sn.transpose_a || !sn.transpose_b) {
    *why = fmt::format("the scores %{} are not Q·Kᵀ with K stored [.., keys, d] (transpose_b)", s);
    return false;
  }
  for (NodeId n : c.score_ops)
    if (g.node(n).shape != sn.shape) {
      *why = fmt::format("%{} {} has shape {}, the scores {}: f must keep the scores' shape", n,
                         op_info(g.node(n).op).name, shape_str(g.node(n).shape), shape_str(sn.shape));
      return false;
    }
  for (NodeId n : c.tensors)
    if (!fits_scores(g, n, sn.shape)) {
      *why = fmt::format("the tensor %{} {} that f reads does not broadcast into the scores {}", n,
                         shape_str(g.node(n).shape), shape_str(sn.shape));
      return false;
    }
  for (NodeId n : c.index_ops)
    if (!fits_scores(g, n, sn.shape)) {
      *why = fmt::format("the mask's %{} {}{} does not run along the scores {} (its queries and keys)", n,
                         op_info(g.node(n).op).name, shape_str(g.node(n).shape), shape_str(sn.shape));
      return false;
    }
  return true;
}

// Q, K and V: three tensors from outside the chain, K and V sharing their leading axes (each Q's
// or broadcast), O Q's rows by V's width.
static bool match_operands(const Graph& g, ContractionChain& c, std::string* why) {
  const Node& sn = g.node(c.scores);
  const Node& o = g.node(c.output);
  c.q = sn.operands[0];
  c.k = sn.operands[1];
  c.v = o.operands[1];
  if (c.q == c.k || c.q == c.v || c.k == c.v) {
    *why = "one tensor is two of Q, K and V (not yet)";
    return false;
  }
  const Shape &q = g.node(c.q).shape, &k = g.node(c.k).shape, &v = g.node(c.v).shape;
  // K and V share their leading axes, each Q's or broadcast (1): K/V heads shared by query heads.
  bool leads = q.size() >= 2 && k.size() == q.size() && v.size() == q.size() &&
               std::equal(k.begin(), k.end() - 2, v.begin());
  for (size_t d = 0; leads && d + 2 < q.size(); ++d) leads = k[d] == q[d] || k[d] == 1;
  if (!leads) {
    *why = fmt::format("Q {}, K {} and V {}: K and V must share their leading (batch, head) axes, each Q's or "
                       "broadcast (1)",
                       shape_str(q), shape_str(k), shape_str(v));
    return false;
  }
  c.lead.assign(q.begin(), q.end() - 2);
  c.kv_lead.assign(k.begin(), k.end() - 2);
  c.n_q = q[q.size() - 2];
  c.d = q.back();
  c.n_kv = k[k.size() - 2];
  c.batch = num_elements(Shape(q.begin(), q.end() - 2));
  Shape o_shape(q.begin(), q.end() - 1);
  o_shape.push_back(v.back());
  if (o.shape != o_shape) {
    *why = fmt::format("O {} is not Q's rows by V's width", shape_str(o.shape));
    return false;
  }
  if (v.back() != c.d) {
    *why = fmt::format("V's width {} differs from the head dimension {} (not yet)", v.back(), c.d);
    return false;
  }
  // Q, K and V come from outside the chain. (That nothing but O leaves it is the kernel's to
  // check: what a kernel writes is the fusion pass's, from the graph's live users.)
  const std::vector<NodeId> members = c.nodes();
  for (NodeId n : {c.q, c.k, c.v})
    if (std::binary_search(members.begin(), members.end(), n)) {
      *why = fmt::format("%{} is both an operand of the chain's products and computed in it", n);
      return false;
    }
  for (NodeId n : c.tensors)
    if (n == c.q || n == c.k || n == c.v) {
      *why = fmt::format("%{} is both an operand of the chain's products and a mask or bias (not yet)", n);
      return false;
    }
  return true;
}

std::optional<ContractionChain> match_contraction_chain(const Graph& g, NodeId out, std::string* why) {
  why->clear();
  ContractionChain c;
  c.output = out;
  const Node& o = g.node(out);
  if (o.op != Op::MatMul || o.transpose_a || o.transpose_b) return std::nullopt;
  NodeId p = o.operands[0];
  if (g.node(p).op == Op::Cast) {
    c.cast = p;
    p = g.node(p).operands[0];
  }
  if (!match_probabilities(g, p, c, why) || !match_shift(g, c, why) || !match_scores(g, c, why) ||
      !match_operands(g, c, why))
    return std::nullopt;
  c.row_ops = row_ops_of(g, c);
  return c;
}

NodeId attention_output(const Graph& g, const Kernel& k) {
  NodeId out = -1;
  for (NodeId n : k.nodes)
    if (g.node(n).op == Op::MatMul) out = n;  // nodes are in topological order
  return out;
}

bool absolute_error_suffices(const Graph& g, const ContractionChain& c, NodeId tanh) {
  const NodeId p = c.cast >= 0 ? c.cast : c.probs;
  if (g.node(tanh).op != Op::Tanh || g.node(tanh).dtype != DType::F32 || dtype_size(g.node(p).dtype) != 2)
    return false;
  double gain = 1;
  for (NodeId at = tanh; at != c.x();) {
    std::vector<NodeId> users;
    for (NodeId n : c.score_ops)
      for (NodeId o : g.node(n).operands)
        if (o == at) users.push_back(n);
    if (users.size() != 1) return false;
    const Node& u = g.node(users[0]);
    const NodeId other = u.operands.size() == 2 ? u.operands[u.operands[0] == at ? 1 : 0] : -1;
    if (u.op == Op::Mul && is_constant(g, other))
      gain *= std::fabs(g.node(other).value);
    else if (u.op == Op::Div && u.operands[0] == at && is_constant(g, other))
      gain /= std::fabs(g.node(other).value);
    else if (u.op == Op::Where ? u.operands[0] == at : u.op != Op::Add && u.op != Op::Sub && u.op != Op::Neg)
      return false;
    at = users[0];
  }
  return gain <= 256;
}

int64_t trailing_broadcast_group(const std::vector<int64_t>& lead, const std::vector<int64_t>& kv_lead) {
  if (lead.empty() || kv_lead.size() != lead.size()) return 1;
  size_t d = lead.size();
  int64_t group = 1;
  while (d > 0 && kv_lead[d - 1] == 1) group *= lead[--d];
  for (size_t e = 0; e < d; ++e)
    if (kv_lead[e] != lead[e]) return 1;
  return group;
}

int64_t heads_per_group(const Graph& g, const ContractionChain& c) {
  const int64_t group = c.n_q == 1 ? trailing_broadcast_group(c.lead, c.kv_lead) : 1;
  if (group == 1) return 1;
  size_t first = c.lead.size();  // the group's first axis
  for (int64_t run = 1; run < group;) run *= c.lead[--first];
  // The key limit is read once per block: its tensors must not vary along the group's axes.
  const size_t rank = g.node(c.scores).shape.size();
  for (NodeId t : c.key_limit_tensors) {
    const Shape& shape = g.node(t).shape;
    for (size_t d = first; d < c.lead.size(); ++d) {
      const size_t from_end = rank - d;  // the axis as counted from the scores' last
      if (shape.size() >= from_end && shape[shape.size() - from_end] != 1) return 1;
    }
  }
  return group;
}

// Split-KV for the device: the fewest splits whose blocks fill 90 % of the SMs' block slots (one
// wave), where the heads and query tiles alone leave them idle — decode's one query per head —
// with at least 8 key tiles per split so that the merge stays small beside the loop.
int64_t splits_for_device(const TileSchedule& s, int64_t tiles, const DeviceProfile& p) {
  const int64_t blocks = s.batch * s.m_blocks(), slots = int64_t{p.sm_count} * attention_blocks_per_sm(s.block_m);
  int64_t splits = 1;
  while (blocks * splits < slots * 9 / 10 && (splits + 1) * 8 <= tiles) ++splits;
  return splits;
}

// Whether f(S) combines S with a tile of its own across both the queries and the keys (ALiBi's
// slope·(i_k − i_q), a bias per query and key), not a mask's −inf: each thread holds that tile's
// elements beside S's.
static bool adds_a_score_tile(const Graph& g, const ContractionChain& c) {
  const std::vector<NodeId> wheres = score_masks(g, c.x(), c.score_ops);
  const int64_t n_q = g.node(c.scores).shape.end()[-2], n_kv = g.node(c.scores).shape.back();
  for (NodeId id : c.score_ops) {
    if (std::count(wheres.begin(), wheres.end(), id)) continue;
    for (NodeId o : g.node(id).operands) {
      const bool from_scores = o == c.scores || std::count(c.score_ops.begin(), c.score_ops.end(), o);
      const Shape& sh = g.node(o).shape;
      if (!from_scores && sh.size() >= 2 && n_q > 1 && sh.end()[-2] == n_q && sh.back() == n_kv) return true;
    }
  }
  return false;
}

// Where the products bound the kernel (prefill; not decode, whose cache's bytes do), by default
// FlashAttention-3's block (measured the fastest at B8 H32 N4096 d128: bench/NOTES.md): 128
// rows, two consumer warpgroups fed Q, K and V by TMA, 128 keys a step, the softmax overlapped
// with P·V within each warpgroup (the warpgroups taking turns only where asked for: not faster);
// past d 128 two stages of 64 keys, overlapped too (K_j and V_{j−1} in flight). Elsewhere
// every thread's cp.async over 64 rows and 64 keys (d 256: 32). Each hint forces its part.
static void set_attention_pipeline(TileSchedule& s, const ContractionChain& c, const Graph& g, DType dt,
                                   const ScheduleHints& hints, bool bound_by_products) {
  const int64_t d = padded_head_dim(c.d);
  s.tma = s.wgmma && hints.attention_tma != 0 && (hints.attention_tma == 1 || bound_by_products);
  s.block_m = s.wgmma && (hints.attention_block_m == 128 || s.tma) ? 128 : 64;
  // 128 keys a step on TMA, unless f(S) adds a tile of its own: beside S's that spilled (ALiBi
  // at d 128: 288 bytes at 128 keys, none at 64). ALiBi no longer holds a tile (its row part and
  // key offsets are apart) and fits 128 keys, but 64 keep its key offsets through the loop (no
  // conversion or product a score): 2.44 ms on an H100 against 2.63–2.67 at 128 keys.
  s.keys_for_score_tile = d <= 128 && !hints.attention_block_n && s.tma && adds_a_score_tile(g, c);
  s.block_n = d > 128                           ? (s.tma ? 64 : 32)
              : hints.attention_block_n         ? hints.attention_block_n
              : s.tma && !s.keys_for_score_tile ? 128
                                                : 64;
  // Keys of one step leave nothing to overlap: the overlapped loop's two score tiles only cost
  // registers there (16 keys at d 64: ptxas serialized the wgmmas). Past d 128 on TMA only: its
  // two stages hold K_j and V_{j−1} in flight, each with a wait of its own (every thread's
  // cp.async overlapped prefetches two tiles ahead: three stages, which d 256 has no room for);
  // ptxas keeps it without spills beside d 256's output, and on an H100 it ran d 256 12–14%
  // faster than the plain loop (bench/NOTES.md, 2026-12-08).
  const int64_t n_kv = g.node(c.scores).shape.back();
  s.overlap = s.wgmma && (d <= 128 || s.tma) &&
              (hints.attention_overlap == 1 ||
               (hints.attention_overlap != 0 && bound_by_products && n_kv > s.block_n));
  // Turns stop at d 128 (and the persistent grid, fit_attention_grid, unless asked for and not
  // overlapped): beside d 256's output accumulator their bookkeeping spilled (8 bytes).
  s.warpgroup_turns = s.tma && d <= 128 && hints.attention_pingpong == 1;
  // The running max raised lazily in TMA loops only, whose Q is read from shared memory: in every
  // thread's cp.async loop, with Q's fragments in registers, ptxas (13.0) put P's fragments into
  // Q's registers once the rescale's branch was there, as if Q were dead after the step's S, and
  // the next step's S read P (wrong outputs on the GPU; bench/NOTES.md, 2026-12-07). By default
  // not in the overlapped TMA loop with a run-time key limit, whose wgmmas ptxas then serialized
  // (C7511).
  s.lazy_rescale = s.tma && (hints.attention_lazy_rescale == 1 ||
                             (hints.attention_lazy_rescale < 0 && !(s.key_limit && s.overlap)));
  s.warps_m = static_cast<int>(s.block_m / 16);
  s.warps_n = 1;
  s.threads_per_row = 32 * s.warps_m;
  s.stages = (s.tma || s.overlap) && d <= 128 ? 3 : 2;
  // A K and a V tile, their rows padded to a power of two of 16-byte chunks (d 96 as 128).
  s.stage_bytes = 2 * s.block_n * d * static_cast<int64_t>(dtype_size(dt));
}

// The key tiles [first, end) that query tile mt of a head visits: all, or those the causal mask
// and a window leave (attention.cpp's key_range, without split keys).
static std::pair<int64_t, int64_t> key_tiles_of(const TileSchedule& s, int64_t mt) {
  const int64_t steps = (s.n + s.block_n - 1) / s.block_n;
  const int64_t query0 = s.heads_per_block > 1 ? 0 : mt * s.block_m, last = s.heads_per_block > 1 ? 0 : s.block_m - 1;
  const int64_t end =
      s.causal_offset < 0 ? steps : std::min(steps, (query0 + last + 1 + s.causal_offset + s.block_n - 1) / s.block_n);
  const int64_t first = s.window_offset ? std::min(end, std::max<int64_t>(0, query0 + *s.window_offset) / s.block_n) : 0;
  return {first, end};
}

// A query tile's start (its Q, the first step's products before any overlap, O's store) costs
// about three key steps: 4.6–5.5 µs a block against 1.73 µs a 128-key step at d 128, from
// shapes of equal FLOPs (bench/NOTES.md, "The attention family").
constexpr double kTileStartSteps = 3;

QueryTilePlace causal_tile_place(int64_t t, int64_t m_blocks, int64_t heads, int64_t blocks, bool window) {
  if (window) {  // groups of 8 heads, each longest first
    const int64_t g = std::min<int64_t>(8, heads), group = t / (g * m_blocks), within = t % (g * m_blocks);
    const int64_t in_group = std::min(g, heads - group * g);
    return {group * g + within % in_group, m_blocks - 1 - within / in_group};
  }
  const int64_t half = m_blocks / 2, pairs = heads * half;
  if (t >= 2 * pairs) return {t - 2 * pairs, half};  // an odd count's middle tiles
  const int64_t wave = t / (2 * blocks), r = t % (2 * blocks), first = wave * blocks;
  const int64_t n = std::min(blocks, pairs - first);
  const bool is_short = r >= n;
  const int64_t pair = first + (is_short ? r - n : r), j = pair % half;
  return {pair / half, is_short ? j : m_blocks - 1 - j};
}

// The persistent grid's static order (blocks take positions b, b + blocks, …; causal ones in
// causal_tile_place's pairs of a long and a short tile): the most loaded block's work
// against the mean.
static double persistent_balance(const TileSchedule& s, int64_t blocks) {
  const int64_t m_blocks = s.m_blocks(), heads = s.batch;
  std::vector<double> load(static_cast<size_t>(blocks), 0.0);
  double total = 0;
  for (int64_t t = 0; t < heads * m_blocks; ++t) {
    const int64_t mt = s.causal_offset >= 0
                           ? causal_tile_place(t, m_blocks, heads, blocks, s.window_offset.has_value()).tile
                           : t % m_blocks;
    const auto [first, end] = key_tiles_of(s, mt);
    const double work = static_cast<double>(end - first) + kTileStartSteps;
    load[static_cast<size_t>(t % blocks)] += work;
    total += work;
  }
  return *std::max_element(load.begin(), load.end()) / (total / static_cast<double>(blocks));
}

// The grid: split-KV where the blocks of heads and query tiles leave SMs idle. No more splits
// than key tiles, and none that the static count leaves always empty (5 tiles in 4 splits: 2, 2,
// 1 and none → 3 splits).
static void fit_attention_grid(TileSchedule& s, int64_t n_kv, const DeviceProfile& p, const ScheduleHints& hints) {
  const int64_t tiles = (n_kv + s.block_n - 1) / s.block_n;
  s.kv_splits = std::clamp<int64_t>(hints.kv_splits < 0 ? splits_for_device(s, tiles, p) : hints.kv_splits, 1, tiles);
  s.block_slots = hints.kv_splits < 0 ? int64_t{p.sm_count} * attention_blocks_per_sm(s.block_m) : 0;
  const int64_t per_split = (tiles + s.kv_splits - 1) / s.kv_splits;
  s.kv_splits = (tiles + per_split - 1) / per_split;
  // A persistent grid hides part of each tile's start under the previous tile (about 1.35 µs
  // of the ~5 measured: 2.4% at N 4096, 3.8% causal, 6% at d 64), where its static order keeps
  // the blocks' work within 2% of each other; each block takes a few tiles at least.
  const int64_t query_tiles = s.batch * s.m_blocks(), sms = p.sm_count, blocks = std::min(query_tiles, sms);
  // Past d 128 only where asked for (`--attention-persistent 1`: not yet timed there) and not
  // overlapped: with the overlap too, a causal chain with an offset spilled 8 bytes.
  const bool wide = padded_head_dim(s.k) > 128;
  const bool can =
      s.tma && (!wide || (hints.attention_persistent == 1 && !s.overlap)) && s.kv_splits == 1 && !s.key_limit;
  s.tile_balance = can && hints.attention_persistent != 0 ? persistent_balance(s, blocks) : 0;
  // A causal grid's odd count of query tiles a head leaves each head's middle tile to a round
  // after the pairs: at N 4097 that measured 3.5% slower (by minima) than a block a tile, though
  // the model counts it balanced (bench/NOTES.md, 2026-12-06); a block a tile there.
  const bool balanced =
      can && hints.attention_persistent < 0 && query_tiles >= 4 * sms && s.tile_balance <= 1.02;
  s.middle_tiles_declined = balanced && s.middle_tiles_last();
  const bool chosen = hints.attention_persistent == 1 || (balanced && !s.middle_tiles_declined);
  s.tile_blocks = can && chosen ? blocks : 0;
}

bool attention_kernel(const Graph& g, Kernel& k, const DeviceProfile& p, const ScheduleHints& hints,
                      std::string* why) {
  const NodeId out = attention_output(g, k);
  std::optional<ContractionChain> c = match_contraction_chain(g, out, why);
  if (!c) {
    if (why->empty()) *why = "two matmuls in one kernel that are not a contraction chain (attention)";
    return false;
  }
  if (k.nodes != c->nodes()) {
    *why = fmt::format("the kernel holds other nodes than the contraction chain ending at %{}", out);
    return false;
  }
  // O, and row values from the final max and sum (a log-sum-exp's parts). (A mask shared with
  // another chain is used outside too: it would have to be computed in both.)
  if (std::find(k.outputs.begin(), k.outputs.end(), out) == k.outputs.end()) {
    *why = fmt::format("the chain's output %{} is not written (nothing uses it)", out);
    return false;
  }
  for (NodeId o : k.outputs)
    if (o != out && !c->row_value(o)) {
      *why = fmt::format("%{} {} is also used outside the chain, so it would be written", o, op_info(g.node(o).op).name);
      return false;
    }
  const DType dt = g.node(c->q).dtype;
  if ((dt != DType::BF16 && dt != DType::F16) || g.node(c->k).dtype != dt || g.node(c->v).dtype != dt) {
    *why = "attention on tensor cores reads Q, K and V of one 16-bit dtype (bf16 or f16)";
    return false;
  }
  if (c->d < 16 || c->d > 256 || c->d % 16 != 0) {
    *why = fmt::format("head dimension {}: the attention schedule takes multiples of 16 up to 256", c->d);
    return false;
  }
  k.kind = ScheduleKind::Attention;
  k.domain = g.node(out).shape;
  TileSchedule& s = k.schedule;
  s = {};
  s.dims = {c->batch * c->n_q, c->d};
  s.contracts = s.attention = true;
  s.heads_per_block = hints.pack_heads == 1 ? heads_per_group(g, *c) : 1;
  s.batch = c->batch / s.heads_per_block;
  s.m = c->n_q * s.heads_per_block;
  s.n = c->n_kv;
  s.k = c->d;
  s.block_k = static_cast<int>(c->d);
  s.wgmma = hints.attention_wgmma == 1 && p.wgmma && padded_head_dim(c->d) >= 64;
  s.causal_offset = c->causal_offset.value_or(-1);
  s.window_offset = c->window_offset;
  s.key_limit = c->key_limit >= 0;
  k.totals = {};
  for (const std::vector<NodeId>* ops : {&c->score_ops, &c->index_ops})
    for (NodeId n : *ops) {
      const bool absolute = absolute_error_suffices(g, *c, n);
      k.totals.instructions_per_element +=
          absolute ? kTanhAbsoluteInstructions : instructions_per_element(g, g.node(n));
      k.totals.mufu_per_element += absolute ? 2 : mufu_per_element(g.node(n));
    }
  // First the schedule of every thread's cp.async, priced to learn what bounds the kernel; then
  // where the products do (prefill), FlashAttention-3's, unless the hints say otherwise.
  set_attention_pipeline(s, *c, g, dt, hints, false);
  fit_attention_grid(s, c->n_kv, p, hints);
  estimate_attention_cost(g, k, p);
  set_attention_pipeline(s, *c, g, dt, hints, k.cost.compute_s > k.cost.memory_s);
  fit_attention_grid(s, c->n_kv, p, hints);
  estimate_attention_cost(g, k, p);
  return true;
}

// Where the softmax clearly outweighs the products (a softcap's tanh), P·V's wait is pinned below
// it, so that the softmax runs under P·V in the SASS too (ptxas otherwise waits first, to write
// the next P where the product reads the last). The CTA fence that pins it cost 4.5% where the
// softmax is a third of the products (the headline) and 5% at two thirds (d 64); on the softcap's,
// at 1.4×, it gained 3% in one build and was level in another (bench/NOTES.md); 1.25× is between
// the measured points.
bool attention_pins_pv_wait(const Kernel& k) {
  return k.schedule.overlap && k.schedule.tma && k.cost.softmax_s > 1.25 * k.cost.tensor_s;
}

void estimate_attention_cost(const Graph& g, Kernel& k, const DeviceProfile& p) {
  const TileSchedule& s = k.schedule;
  KernelCost& c = k.cost;
  c = {};
  count_tensor_bytes(g, k, &c);
  // The scores of the key tiles the loops visit (all of them, unless a causal mask ends them or a
  // window starts them).
  double tiles = 0;
  for (int64_t mb = 0; mb < s.m_blocks(); ++mb) {
    const auto [first, end] = key_tiles_of(s, mb);
    tiles += static_cast<double>(end - first);
  }
  const double scores = static_cast<double>(s.batch) * tiles * s.block_m * s.block_n *
                        (static_cast<double>(s.m) / static_cast<double>(s.m_blocks() * s.block_m));
  c.flops = 4 * scores * static_cast<double>(s.k);
  // The softmax's own work per score beside the two products and f(S): the running max, the
  // shifted exponent and its ex2, the sum, the conversion to P's fragment (~6 issued
  // instructions) — or its one ex2 on the MUFU pipe, whichever takes longer. The products at
  // the schedule's GEMM rate. What of the softmax runs under the products, as measured
  // (bench/NOTES.md): overlapped within a warpgroup, 17% of it on cp.async (B4 H16 d128: 1.309
  // against 1.353 ms) and 23% on TMA at 128 keys a step (B8 H32 N4096 d128: 3.77 against 4.00
  // ms, the runs' cuDNN as the common scale); the warpgroups' turns add nothing measurable (1–2%
  // slower). In principle ping-pong could hide it all, up to the products' time: the schedules
  // do not get there yet.
  c.instructions = scores * (6 + k.totals.instructions_per_element);
  c.memory_s = static_cast<double>(c.bytes()) / p.hbm_bytes_per_s;
  c.tensor_s = c.flops / matmul_flops_rate(s, p);
  const double issue_s = c.instructions / p.instructions_per_s,
               exp_s = scores * (1 + k.totals.mufu_per_element) / p.exp2_per_s;
  c.softmax_s = std::max(issue_s, exp_s);
  c.exp_bound = exp_s > issue_s;
  c.hidden_s = s.overlap ? (s.tma ? 0.23 : 0.17) * std::min(c.softmax_s, c.tensor_s / 2) : 0;
  c.compute_s = c.tensor_s + c.softmax_s - c.hidden_s;
  // ptxas on mma.sync: 167 registers at d 64, 240 at d 128 (the output accumulator grows with
  // d); 243 at d 256, whose Q fragments stay in shared memory. On wgmma (no K or V fragments in
  // registers): 128 at d 64, 178 at d 128; the overlapped loop (3 stages) carries P: 197–205.
  const int64_t d = padded_head_dim(s.k);  // the output accumulator's width
  c.registers = d > 128  ? static_cast<int>(115 + d / 2)
                : s.wgmma ? static_cast<int>(64 + 0.9 * static_cast<double>(d)) + (s.overlap ? 20 : 0)
                          : static_cast<int>(94 + 1.14 * static_cast<double>(d));
  c.blocks_per_sm = std::max(
      1, std::min(p.blocks_by_registers(c.registers, s.block_threads()),
                  static_cast<int>(p.shared_bytes_per_sm / std::max<int64_t>(1, s.dynamic_shared_bytes()))));
  c.bytes_in_flight_per_sm = static_cast<double>(s.stage_bytes) * c.blocks_per_sm;  // the next key tile's copies
  c.predicted_s = std::max(c.memory_s, c.compute_s) + p.launch_s;
}

}  // namespace tilefuse
