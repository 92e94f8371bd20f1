#include "compiler/fusion/attention_backward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "compiler/fusion/contraction_chain.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/support/error.h"

namespace tilefuse {

std::vector<NodeId> BackwardChain::shared() const {
  std::vector<NodeId> out = {scores, shifted, probs, dp};
  if (probs_cast >= 0) out.push_back(probs_cast);
  if (x_log2e >= 0) out.push_back(x_log2e);
  for (const std::vector<NodeId>* ops : {&score_ops, &index_ops, &ds_ops})
    out.insert(out.end(), ops->begin(), ops->end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<NodeId> BackwardChain::gradients(bool keys) const {
  std::vector<NodeId> out;
  for (NodeId n : keys ? std::vector<NodeId>{dk, dv} : std::vector<NodeId>{dq})
    if (n >= 0) out.push_back(n);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<NodeId> BackwardChain::part(bool keys) const {
  std::vector<NodeId> out = gradients(keys);
  for (NodeId n : {dk_product, dv_product})
    if (keys && n >= 0 && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// The constant operand of a binary node and its other operand, or false.
bool with_constant(const Graph& g, const Node& n, double* c, NodeId* other) {
  if (n.operands.size() != 2) return false;
  for (int i = 0; i < 2; ++i)
    if (g.node(n.operands[static_cast<size_t>(i)]).op == Op::Constant) {
      *c = g.node(n.operands[static_cast<size_t>(i)]).value;
      *other = n.operands[static_cast<size_t>(1 - i)];
      return true;
    }
  return false;
}
NodeId strip_cast(const Graph& g, NodeId id, std::vector<NodeId>* casts) {
  while (g.node(id).op == Op::Cast) {
    casts->push_back(id);
    id = g.node(id).operands[0];
  }
  return id;
}

// dS' from its last node down to the product P∘(dP − D): casts, a product by a constant (the
// scale) and where(m, ·, 0) (the mask's gradient), in any order. The product, or -1.
NodeId ds_product(const Graph& g, NodeId at, std::vector<NodeId>* ops, double* scale, NodeId* mask) {
  for (;;) {
    const Node& n = g.node(at);
    double c;
    NodeId other;
    if (n.op == Op::Cast) {
      ops->push_back(at);
      at = n.operands[0];
    } else if (n.op == Op::Mul && with_constant(g, n, &c, &other) && *scale == 1) {
      ops->push_back(at);
      *scale = c;
      at = other;
    } else if (n.op == Op::Where && is_constant_value(g, n.operands[2], 0) && *mask < 0) {
      ops->push_back(at);
      *mask = n.operands[0];
      at = n.operands[1];
    } else {
      return n.op == Op::Mul ? at : -1;
    }
  }
}

// X·log2 e: X and true, or false.
bool times_log2e(const Graph& g, NodeId id, NodeId* x) {
  double c;
  return g.node(id).op == Op::Mul && with_constant(g, g.node(id), &c, x) && std::fabs(c - M_LOG2E) <= 1e-12;
}
// Whether `id` is P: e^(X − L), or 2^(X·log2 e + M) with M = −L·log2 e (autodiff's form).
bool is_probs(const Graph& g, NodeId id) {
  const Node& p = g.node(id);
  if (p.op == Op::Exp) return g.node(p.operands[0]).op == Op::Sub;
  if (p.op != Op::Exp2) return false;
  const Node& sum = g.node(p.operands[0]);
  NodeId x;
  return sum.op == Op::Add && times_log2e(g, sum.operands[0], &x);
}
// Whether `id` is P∘(dP − D): a product of P (maybe cast) and a difference.
bool is_ds_product(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op != Op::Mul) return false;
  for (size_t i = 0; i < 2; ++i) {
    std::vector<NodeId> casts;
    if (is_probs(g, strip_cast(g, n.operands[i], &casts)) && g.node(n.operands[1 - i]).op == Op::Sub)
      return true;
  }
  return false;
}
// Such a product among the elementwise operands of `id`, `depth` levels down at most; -1 if none.
NodeId find_ds_product(const Graph& g, NodeId id, int depth) {
  if (is_ds_product(g, id)) return id;
  const OpKind kind = op_info(g.node(id).op).kind;
  if (depth == 0 || (kind != OpKind::Unary && kind != OpKind::Binary && kind != OpKind::Select)) return -1;
  for (NodeId o : g.node(id).operands)
    if (const NodeId found = find_ds_product(g, o, depth - 1); found >= 0) return found;
  return -1;
}

// P = e^(X − L) or 2^(X·log2 e + M) with X = f(S): the chain's forward half, or false (with
// `why` where P is such an exponential but its X is not S·scale with at most a causal mask).
bool match_probs(const Graph& g, NodeId p, BackwardChain* c, std::string* why) {
  if (!is_probs(g, p)) return false;
  const Node& shifted = g.node(g.node(p).operands[0]);
  c->probs = p;
  c->shifted = g.node(p).operands[0];
  c->lse = shifted.operands[1];
  NodeId at = shifted.operands[0], mask = -1;
  c->lse_scaled = shifted.op == Op::Add;
  if (c->lse_scaled) {
    c->x_log2e = at;
    times_log2e(g, c->x_log2e, &at);
  }
  // X = S·scale, where(causal, ·, −inf) around it or inside it.
  bool scaled = false;
  while (g.node(at).op != Op::MatMul) {
    const Node& n = g.node(at);
    double s;
    NodeId other;
    if (n.op == Op::Mul && !scaled && with_constant(g, n, &s, &other) && s > 0 && std::isfinite(s)) {
      scaled = true;
      c->scale = s;
      c->score_ops.push_back(at);
      at = other;
    } else if (n.op == Op::Where && mask < 0 && is_constant_value(g, n.operands[2], -INFINITY)) {
      mask = at;
      c->score_ops.push_back(at);
      at = n.operands[1];
    } else {
      *why = fmt::format(
          "the recomputed scores reach P through %{} {}: the fused backward takes S·scale with at most "
          "a causal mask",
          at, op_info(n.op).name);
      return false;
    }
  }
  std::reverse(c->score_ops.begin(), c->score_ops.end());
  c->scores = at;
  const Node& s = g.node(at);
  if (s.transpose_a || !s.transpose_b) {
    *why = fmt::format("the recomputed scores %{} are not Q·Kᵀ with K stored [.., keys, d]", at);
    return false;
  }
  if (mask >= 0) {
    const NodeId cond = g.node(mask).operands[0];
    std::set<NodeId> nodes, tensors;
    c->causal_offset = causal_mask_offset(g, cond, s.shape.back());
    if (!c->causal_offset || !index_only(g, cond, &nodes, &tensors) || !tensors.empty()) {
      *why = fmt::format("the recomputed scores' mask %{} is not causal (i_q + c ≥ i_k)", mask);
      return false;
    }
    c->index_ops.assign(nodes.begin(), nodes.end());
  }
  c->q = s.operands[0];
  c->k = s.operands[1];
  return true;
}

// The gradients' products: users of dS' (dQ = dS'·K, dK = dS'ᵀ·Q) and of P in its cast (dV =
// P'ᵀ·dO); dK and dV each summed over the query heads of a K/V head where they are shared (a
// reduction of its product over the broadcast axes, to K's shape).
void find_gradients(const Graph& g, BackwardChain* c) {
  const std::vector<std::vector<NodeId>> users = g.users();
  auto summed = [&](NodeId product) {
    if (c->group == 1) return product;
    for (NodeId u : users[static_cast<size_t>(product)])
      if (g.node(u).op == Op::ReduceSum && g.node(u).keepdim && g.node(u).shape == g.node(c->k).shape)
        return u;
    return NodeId{-1};
  };
  for (NodeId u : users[static_cast<size_t>(c->ds())]) {
    const Node& m = g.node(u);
    if (m.op != Op::MatMul || m.transpose_b || m.operands[0] != c->ds()) continue;
    if (!m.transpose_a && m.operands[1] == c->k) c->dq = u;
    if (m.transpose_a && m.operands[1] == c->q) c->dk_product = u;
  }
  const NodeId p = c->probs_cast >= 0 ? c->probs_cast : c->probs;
  for (NodeId u : users[static_cast<size_t>(p)]) {
    const Node& m = g.node(u);
    if (m.op == Op::MatMul && m.transpose_a && !m.transpose_b && m.operands[0] == p &&
        m.operands[1] == c->d_o)
      c->dv_product = u;
  }
  c->dk = c->dk_product >= 0 ? summed(c->dk_product) : -1;
  c->dv = c->dv_product >= 0 ? summed(c->dv_product) : -1;
  if (c->dk < 0) c->dk_product = -1;
  if (c->dv < 0) c->dv_product = -1;
}

// The gradients in the inputs' dtype (the kernels store them so).
bool gradients_fit(const Graph& g, const BackwardChain& c, std::string* why) {
  const DType dt = g.node(c.q).dtype;
  for (NodeId n : {c.dq, c.dk, c.dv})
    if (n >= 0 && g.node(n).dtype != dt) {
      *why = fmt::format("the gradient %{} is {}, not the inputs' {}", n, dtype_name(g.node(n).dtype),
                         dtype_name(dt));
      return false;
    }
  return true;
}

// Shapes and dtypes the kernels take: Q and dO [b…, n_q, d], K and V [b…, n_kv, d] with the same
// leading axes, L and D [b…, n_q, 1], the gradients their operands' shapes, all 16-bit but the
// row values.
bool fits_kernels(const Graph& g, BackwardChain* c, std::string* why) {
  const Shape &q = g.node(c->q).shape, &k = g.node(c->k).shape;
  bool heads_fit =
      q.size() >= 2 && k.size() == q.size() && g.node(c->v).shape == k && g.node(c->d_o).shape == q;
  if (heads_fit) {  // K's and V's heads Q's, or shared by a trailing run of Q's head axes
    const std::vector<int64_t> lead(q.begin(), q.end() - 2), kv_lead(k.begin(), k.end() - 2);
    c->group = trailing_broadcast_group(lead, kv_lead);
    heads_fit = num_elements(Shape(kv_lead.begin(), kv_lead.end())) * c->group ==
                num_elements(Shape(lead.begin(), lead.end()));
    for (size_t d = 0; heads_fit && d < lead.size(); ++d)
      heads_fit = kv_lead[d] == lead[d] || kv_lead[d] == 1;
  }
  if (!heads_fit) {
    *why = fmt::format(
        "Q {}, K {}, V {}, dO {}: the fused backward takes Q and dO of one shape and K and V of "
        "another whose heads are Q's or shared by a trailing run of Q's head axes",
        shape_str(q), shape_str(k), shape_str(g.node(c->v).shape), shape_str(g.node(c->d_o).shape));
    return false;
  }
  c->n_q = q[q.size() - 2];
  c->n_kv = k[k.size() - 2];
  c->d = q.back();
  c->batch = num_elements(Shape(q.begin(), q.end() - 2));
  if (c->d != 16 && c->d != 32 && c->d != 64 && c->d != 128) {
    *why = fmt::format("head dimension {}: the fused backward takes 16, 32, 64 or 128", c->d);
    return false;
  }
  const DType dt = g.node(c->q).dtype;
  Shape rows(q.begin(), q.end() - 1);
  rows.push_back(1);
  for (NodeId n : {c->k, c->v, c->d_o})
    if (g.node(n).dtype != dt || (dt != DType::BF16 && dt != DType::F16)) {
      *why = "the fused backward reads Q, K, V and dO of one 16-bit dtype (bf16 or f16)";
      return false;
    }
  for (NodeId n : {c->lse, c->delta})
    if (g.node(n).shape != rows || g.node(n).dtype != DType::F32) {
      *why = fmt::format("%{} {} is not one f32 value per query row {}", n, shape_str(g.node(n).shape),
                         shape_str(rows));
      return false;
    }
  std::vector<NodeId> reads = {c->q, c->k, c->v, c->d_o, c->lse, c->delta};
  std::sort(reads.begin(), reads.end());
  if (std::adjacent_find(reads.begin(), reads.end()) != reads.end()) {
    *why = "one tensor is two of Q, K, V, dO, the log-sum-exp and D (not yet)";
    return false;
  }
  const std::vector<NodeId> shared = c->shared();
  for (NodeId n : {c->q, c->k, c->v, c->d_o, c->lse, c->delta})
    if (std::binary_search(shared.begin(), shared.end(), n)) {
      *why = fmt::format("%{} is both read by the backward chain and computed in it", n);
      return false;
    }
  return true;
}

}  // namespace

namespace {

// The chain from a product that takes dS' as its left operand (dQ, dK): dS' down to P∘(dP − D),
// then P's and dP's halves; the gradients found among dS's and P's users.
std::optional<BackwardChain> match_from_ds(const Graph& g, NodeId user, std::string* why) {
  BackwardChain c;
  NodeId mask = -1;
  double ds_scale = 1;
  const NodeId product = ds_product(g, g.node(user).operands[0], &c.ds_ops, &ds_scale, &mask);
  if (product < 0) return std::nullopt;
  if (!is_ds_product(g, product)) {
    if (const NodeId deeper = find_ds_product(g, product, 8); deeper >= 0)
      *why = fmt::format(
          "dS reaches the gradient's product from P∘(dP − D) %{} through %{} {}: the fused backward "
          "takes f(S) = S·scale with at most a causal mask",
          deeper, product, op_info(g.node(product).op).name);
    return std::nullopt;
  }
  // P∘(dP − D): P through its casts (the one nearest P is P', dV's operand) on one side.
  const Node& pn = g.node(product);
  NodeId p = -1, diff = -1;
  for (size_t i = 0; i < 2 && diff < 0; ++i) {
    std::vector<NodeId> casts;
    const NodeId a = strip_cast(g, pn.operands[i], &casts);
    if (!is_probs(g, a) || g.node(pn.operands[1 - i]).op != Op::Sub) continue;
    p = a;
    diff = pn.operands[1 - i];
    if (!casts.empty()) {
      c.probs_cast = casts.back();
      casts.pop_back();
    }
    c.ds_ops.insert(c.ds_ops.end(), casts.begin(), casts.end());
  }
  if (diff < 0) return std::nullopt;
  c.ds_ops.push_back(product);
  c.ds_ops.push_back(diff);
  if (!match_probs(g, p, &c, why)) return std::nullopt;
  std::vector<NodeId> dp_casts;
  c.dp = strip_cast(g, g.node(diff).operands[0], &dp_casts);
  c.ds_ops.insert(c.ds_ops.end(), dp_casts.begin(), dp_casts.end());
  c.delta = g.node(diff).operands[1];
  const Node& dp = g.node(c.dp);
  if (dp.op != Op::MatMul || dp.transpose_a || !dp.transpose_b) {
    *why = fmt::format("dP %{} is not dO·Vᵀ", c.dp);
    return std::nullopt;
  }
  c.d_o = dp.operands[0];
  c.v = dp.operands[1];
  if (ds_scale != c.scale) {
    *why = fmt::format("dS is scaled by {}, the scores by {}", ds_scale, c.scale);
    return std::nullopt;
  }
  const std::vector<NodeId> masks = score_masks(g, c.score_ops.back(), c.score_ops);
  if (mask >= 0 && (masks.empty() || g.node(masks[0]).operands[0] != mask)) {
    *why = fmt::format("dS is masked by %{}, not by the scores' mask", mask);
    return std::nullopt;
  }
  std::sort(c.ds_ops.begin(), c.ds_ops.end());
  if (!fits_kernels(g, &c, why)) return std::nullopt;
  find_gradients(g, &c);
  if (!gradients_fit(g, c, why)) return std::nullopt;
  return c;
}

}  // namespace

std::optional<BackwardChain> match_attention_backward(const Graph& g, NodeId grad, std::string* why) {
  why->clear();
  const Node& m = g.node(grad);
  if (m.op != Op::MatMul || m.transpose_b) return std::nullopt;
  std::vector<NodeId> casts;
  const NodeId a = strip_cast(g, m.operands[0], &casts);
  if (g.node(a).op != Op::Div) {  // dQ or dK
    std::optional<BackwardChain> c = match_from_ds(g, grad, why);
    if (c && grad != c->dq && grad != c->dk_product) return std::nullopt;
    return c;
  }
  if (!m.transpose_a) return std::nullopt;  // P·V: a forward's product
  // dV = P'ᵀ·dO: the chain of a product that takes a dS' computed from this P.
  for (const Node& n : g.nodes()) {
    if (n.op != Op::MatMul || n.id == grad || n.transpose_b) continue;
    std::string w;
    std::optional<BackwardChain> c = match_from_ds(g, n.id, &w);
    if (c && c->probs == a && c->dv_product == grad) return c;
    if (!w.empty()) *why = w;
  }
  return std::nullopt;
}

BackwardChain backward_chain_of(const Graph& g, const Kernel& k, bool* keys) {
  for (NodeId n : k.nodes) {
    if (g.node(n).op != Op::MatMul) continue;
    std::string why;
    if (std::optional<BackwardChain> c = match_attention_backward(g, n, &why)) {
      *keys = k.schedule.attention_backward != 2;  // (dK and dV's blocks, with dQ's sums or without)
      return *c;
    }
  }
  throw CodegenError(fmt::format("kernel {}: no attention backward chain", k.name));
}

bool attention_backward_kernel(const Graph& g, Kernel& k, const DeviceProfile& p, const ScheduleHints& hints,
                               std::string* why) {
  std::optional<BackwardChain> c;
  bool keys = false;
  for (NodeId n : k.nodes)
    if (g.node(n).op == Op::MatMul && !c) {
      std::string w;
      c = match_attention_backward(g, n, &w);
      if (c) keys = n != c->dq;
    }
  if (!c) return false;
  // The keys' part, the queries', or both in one kernel (dQ summed across the key blocks).
  auto sorted_union = [](std::vector<NodeId> a, const std::vector<NodeId>& b) {
    a.insert(a.end(), b.begin(), b.end());
    std::sort(a.begin(), a.end());
    return a;
  };
  const std::vector<NodeId> want = sorted_union(c->shared(), c->part(keys));
  std::vector<NodeId> grads = c->gradients(keys), outputs = k.outputs;
  std::sort(outputs.begin(), outputs.end());
  const bool sums = !c->part(!keys).empty() && k.nodes == sorted_union(want, c->part(!keys)) &&
                    outputs == sorted_union(c->gradients(true), c->gradients(false));
  if (sums) {
    if (hints.attention_dq_sums == 0) {
      *why = "dQ summed across the key blocks is turned off (--attention-dq-sums 0)";
      return false;
    }
    if (!(hints.attention_wgmma == 1 && p.wgmma && (c->d == 64 || c->d == 128))) {
      *why = "dQ summed across the key blocks needs wgmma (sm_90a) and d 64 or 128";
      return false;
    }
    keys = true;
    grads = c->gradients(true);
  } else if (k.nodes != want) {
    *why = fmt::format("the kernel holds other nodes than the attention backward's {} part",
                       keys ? "keys'" : "queries'");
    return false;
  }
  if (!sums && k.outputs != grads) {
    *why = "a node of the attention backward is used outside it, so it would be written";
    return false;
  }
  k.kind = ScheduleKind::AttentionBackward;
  k.domain = g.node(grads[0]).shape;
  TileSchedule& s = k.schedule;
  s = {};
  s.contracts = true;
  s.attention_backward = sums ? 3 : keys ? 1 : 2;
  // (The keys kernel's block takes a K/V head's keys and loops over each of its query heads' queries.)
  s.batch = keys ? c->batch / c->group : c->batch;
  s.m = keys ? c->n_kv : c->n_q;
  s.n = keys ? c->n_q * c->group : c->n_kv;
  s.heads_per_block = c->group;
  s.k = c->d;
  s.wgmma = sums || (hints.attention_wgmma == 1 && p.wgmma && c->d >= 64);
  // dQ summed by TMA's reductions from staged panels, where asked for (`--attention-dq-tma 1`):
  // 128 keys a block (two warpgroups, each dQᵀ's 64 of d), d 128, queries in 16-byte rows of f32.
  const bool tma_sums = sums && hints.attention_dq_tma == 1 && hints.attention_backward_tma == 1 &&
                        c->d == 128 && c->n_q % 4 == 0;
  s.block_m = tma_sums || (keys && !sums && s.wgmma && hints.attention_backward_rows == 128) ? 128 : 64;
  s.block_n = !s.wgmma && keys && c->d > 64 ? 32 : 64;  // tir::attention_backward_block_cols
  s.warps_m = s.block_m / 16;
  s.warps_n = 1;
  s.threads_per_row = 2 * s.block_m;
  // Fed by TMA from a producer warpgroup: the consumers' copies and their addresses gone (dK/dV
  // 428 → 384 SASS instructions a step, dQ 291 → 240; at the power cap 3–8% faster, bench/NOTES.md).
  s.tma = s.wgmma && (!sums || tma_sums) && hints.attention_backward_tma == 1;
  s.causal_offset = c->causal_offset.value_or(-1);
  s.stages = 2;
  s.stage_bytes = 2 * int64_t{s.block_n} * s.k * static_cast<int64_t>(dtype_size(g.node(c->q).dtype));
  estimate_attention_backward_cost(g, k, p);
  return true;
}

void estimate_attention_backward_cost(const Graph& g, Kernel& k, const DeviceProfile& p) {
  const TileSchedule& s = k.schedule;
  KernelCost& c = k.cost;
  c = {};
  count_tensor_bytes(g, k, &c);
  // The tiles the loops visit: under a causal mask about half (each block's from or to the
  // diagonal).
  const double pairs = static_cast<double>(s.batch) * static_cast<double>(s.m) * static_cast<double>(s.n) *
                       (s.causal_offset >= 0 ? 0.5 : 1.0);
  const int products = s.attention_backward == 3 ? 5 : s.attention_backward == 1 ? 4 : 3;
  c.flops = 2.0 * products * pairs * static_cast<double>(s.k);
  // dQ's sums: each key block adds its [queries, d] f32 product for every query tile it visits.
  if (s.attention_backward == 3)
    c.reduce_s = static_cast<double>((s.m + s.block_m - 1) / s.block_m) * static_cast<double>(s.batch) *
                 static_cast<double>(s.n) * static_cast<double>(s.k) * 4 *
                 (s.causal_offset >= 0 ? 0.5 : 1.0) / p.l2_reduce_bytes_per_s;
  // Per score: P's fma and ex2 (MUFU), the mask's compare and select, dP − D and its product,
  // P's and dS's conversions — ~8 issued instructions beside one exponential.
  c.instructions = pairs * (s.causal_offset >= 0 ? 10 : 8);
  c.memory_s = static_cast<double>(c.bytes()) / p.hbm_bytes_per_s;
  c.tensor_s = c.flops / (s.wgmma ? p.wgmma_flops : p.mma_sync_flops);
  const double issue_s = c.instructions / p.instructions_per_s, exp_s = pairs / p.exp2_per_s;
  c.softmax_s = std::max(issue_s, exp_s);
  c.exp_bound = exp_s > issue_s;
  // ptxas on mma.sync: the keys' part at d 128 holds two accumulators of 64 registers a thread
  // and takes all 255; at d 64 ~250 (it has room); the queries' part ~210 at d 64, ~245 at d 128.
  // On wgmma (no A fragments in registers): ~205 and 120–160.
  c.registers = s.attention_backward == 3 ? 255
                : s.wgmma ? (s.attention_backward == 1 ? 210 : 100 + static_cast<int>(s.k / 2))
                          : (s.attention_backward == 1 ? 255 : 200 + static_cast<int>(s.k / 3));
  c.blocks_per_sm = std::max(
      1, std::min(p.blocks_by_registers(c.registers, s.block_threads()),
                  static_cast<int>(p.shared_bytes_per_sm / std::max<int64_t>(1, s.dynamic_shared_bytes()))));
  c.bytes_in_flight_per_sm = static_cast<double>(s.stage_bytes) * c.blocks_per_sm;
  // Blocks that share an SM run one another's per-score work under their products: of b blocks an
  // SM's, 1/b of it stays exposed. (Measured on an H100, attention_train, ms: dK/dV at 2 blocks
  // 6.80 against products 6.94 + per-score 1.03, which this puts at 7.45 and adding all at 7.97;
  // dQ at 3 blocks 5.11 against 5.20 + 1.03 → 5.55; causal 3.93–4.11 against 3.47 + 0.64 → 3.79,
  // and 2.75–2.83 against 2.60 + 0.64 → 2.81; bench/NOTES.md, 2026-12-07.)
  c.hidden_s = c.softmax_s * (1.0 - 1.0 / c.blocks_per_sm);
  // The sums by TMA run beside the math (its copies add from staged panels); by red.global they
  // are the math warps' own instructions, measured not to overlap.
  const double math_s = c.tensor_s + c.softmax_s - c.hidden_s;
  c.compute_s = s.attention_backward == 3 && s.tma ? std::max(math_s, c.reduce_s) : math_s + c.reduce_s;
  c.predicted_s = std::max(c.memory_s, c.compute_s) + p.launch_s;
}

}  // namespace tilefuse
