#include "compiler/fusion/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <set>

#include "compiler/fusion/attention_backward.h"
#include "compiler/fusion/contraction_chain.h"
#include "compiler/fusion/row_passes.h"
#include "compiler/fusion/write_at.h"
#include "compiler/graph/sign.h"

namespace tilefuse {

static int64_t tensor_bytes(const Node& n) {
  return num_elements(n.shape) * static_cast<int64_t>(dtype_size(n.dtype));
}

void count_tensor_bytes(const Graph& g, const Kernel& k, KernelCost* c) {
  for (NodeId t : k.inputs) c->bytes_read += tensor_bytes(g.node(t));
  for (NodeId o : k.outputs) c->bytes_written += tensor_bytes(g.node(o));
}

double instructions_per_element(const Graph& g, const Node& n) {
  bool half = n.dtype == DType::BF16 || n.dtype == DType::F16;
  switch (n.op) {
    case Op::Input:
    case Op::Constant:
      return 0;
    // Counted in SASS for sm_90 (ptxas, cuobjdump; bench/NOTES.md v12): issued per element.
    case Op::Exp:
      return half ? 2 : exp_of_nonpositive(g, n) ? 9 : 15;
    case Op::Exp2:
      return 1;
    case Op::Log:
      return 4;
    case Op::Sqrt:
    case Op::Rsqrt:
      return 3;
    case Op::Tanh:
      return half ? 1 : 25;
    case Op::Erf:  // (math::erf_bf16 for a bf16 result)
      return n.dtype == DType::BF16 ? 4 : 21;
    case Op::Sigmoid:
      return half ? 4 : 13;
    case Op::Gelu:  // (math::gelu_16bit: one fma fewer for bf16)
      return n.dtype == DType::BF16 ? 10 : half ? 11 : 25;
    case Op::GeluTanh:
      return half ? 10 : 19;
    case Op::Div:
      return 10;
    case Op::Pow:
      return 24;
    default:
      return 1;
  }
}

double mufu_per_element(const Node& n) {
  const bool half = n.dtype == DType::BF16 || n.dtype == DType::F16;
  switch (n.op) {
    case Op::Exp:
    case Op::Exp2:
    case Op::Log:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Erf:   // the large arguments' ex2, computed for every element (bf16: tanh.approx)
    case Op::Gelu:  // erf's, or the 16-bit fit's ex2
    case Op::Div:   // the reciprocal
      return 1;
    case Op::Tanh:
      return half ? 1 : 2;  // tanh.approx; or ex2 and a reciprocal
    case Op::Sigmoid:
    case Op::GeluTanh:
    case Op::Pow:
      return 2;
    default:
      return 0;
  }
}

Shape aligned_shape(const Graph& g, NodeId n, const Kernel& k) {
  const Node& node = g.node(n);
  Shape s = node.shape;
  if (k.split >= 0 && op_info(node.op).kind == OpKind::Reduce && !node.keepdim)
    s.insert(s.begin() + std::min<int64_t>(k.split, static_cast<int64_t>(s.size())), node.axes.size(), 1);
  s.insert(s.begin(), k.domain.size() - std::min(k.domain.size(), s.size()), 1);  // numpy's leading 1s
  return s;
}

Shape reduced_domain(const Kernel& k) {
  Shape s = k.domain;
  if (k.kind == ScheduleKind::Attention) {  // one value per query row (its max, its sum)
    s.back() = 1;
    return s;
  }
  for (int d = std::max(k.split, 0); k.split >= 0 && d < k.reduce_end; ++d) s[static_cast<size_t>(d)] = 1;
  return s;
}

int reduced_end(const Graph& g, const Node& r) {
  const Shape& in = g.node(r.operands[0]).shape;
  int end = r.axes.back() + 1;
  while (end < static_cast<int>(in.size()) && in[static_cast<size_t>(end)] == 1) ++end;
  return end;
}

// The domain of a set holding reductions: every reduction must reduce the same shape over the
// same block of axes (plan_fusion has checked that each reduces one contiguous block).
static bool reduction_domain(const Graph& g, const std::vector<NodeId>& nodes, Kernel* k, std::string* why) {
  const Node* first = nullptr;
  for (NodeId n : nodes) {
    const Node& r = g.node(n);
    if (op_info(r.op).kind != OpKind::Reduce) continue;
    const Shape& in = g.node(r.operands[0]).shape;
    const int end = reduced_end(g, r);
    if (!first) {
      first = &r;
      k->domain = in;
      k->split = r.axes.front();
      k->reduce_end = end;
    } else if (in != k->domain || r.axes.front() != k->split || end != k->reduce_end) {
      *why = fmt::format("%{} and %{} reduce different axes ({} over [{}], {} over [{}])", first->id, n,
                         shape_str(k->domain), fmt::join(first->axes, ", "), shape_str(in), fmt::join(r.axes, ", "));
      return false;
    }
  }
  return first != nullptr;
}

namespace {

bool is_member(const Kernel& k, NodeId n) { return std::binary_search(k.nodes.begin(), k.nodes.end(), n); }

// Node n's own legality in kernel k (whose domain is set): it broadcasts into the domain, and no
// operand of it in the kernel is a reduction that dropped its axes.
bool node_fits(const Graph& g, const Kernel& k, NodeId n, std::string* why) {
  if (g.node(n).op == Op::Iota && k.kind != ScheduleKind::Pointwise) {  // (attention kernels take theirs)
    *why = fmt::format("%{} iota is computed in pointwise and attention kernels only: a {} kernel reads it", n,
                       schedule_kind_name(k.kind));
    return false;
  }
  if (!broadcasts_to(aligned_shape(g, n, k), k.domain)) {
    *why = fmt::format("%{} {} does not broadcast into the kernel's domain {}", n, shape_str(g.node(n).shape),
                       shape_str(k.domain));
    return false;
  }
  for (NodeId o : g.node(n).operands) {
    const Node& on = g.node(o);
    Shape numpy(k.domain.size() - std::min(k.domain.size(), on.shape.size()), 1);  // how numpy aligns it
    numpy.insert(numpy.end(), on.shape.begin(), on.shape.end());  // (aligned_shape: where its axes were)
    if (op_info(on.op).kind == OpKind::Reduce && !on.keepdim && is_member(k, o) && numpy != aligned_shape(g, o, k)) {
      *why = fmt::format(
          "%{} {} drops its reduced axes, so numpy aligns it with the last axis, not "
          "the rows; reduce with keepdim to broadcast it back over the row",
          o, op_info(on.op).name);
      return false;
    }
  }
  return true;
}

void add_totals(const Graph& g, const Kernel& k, NodeTotals& t, NodeId n) {
  const Node& node = g.node(n);
  const double count = instructions_per_element(g, node);
  t.instructions_per_element += count;
  t.scratch_regs = std::max(t.scratch_regs, op_info(node.op).scratch_regs);
  t.reductions += op_info(node.op).kind == OpKind::Reduce;
  if (node.op == Op::Input || node.op == Op::Constant) return;
  const int64_t domain = num_elements(k.domain), elements = num_elements(aligned_shape(g, n, k));
  t.mufu_elements += mufu_per_element(node) * static_cast<double>(elements);
  if (op_info(node.op).kind == OpKind::Reduce) {
    t.element_instructions += 1;
  } else if (elements < domain) {
    t.small_instructions += count;
    t.spread_instructions += count * static_cast<double>(elements) / static_cast<double>(domain);
  } else if (node.op == Op::Div && num_elements(aligned_shape(g, node.operands[1], k)) < domain) {
    t.element_instructions += 1;
    t.small_instructions += count;
  } else {
    t.element_instructions += count;
  }
}

void analyze_passes(const Graph& g, Kernel& k) {
  RowPasses passes = analyze_row_passes(g, k.nodes, k.outputs, k.domain);
  k.passes = passes.passes;
  k.totals.online_sums = static_cast<int>(passes.online_with.size());
}

// A column reduction runs one loop over the reduced axis: what is computed inside it (every node
// not after a reduction) spans the domain, and what uses a reduction's result comes after it,
// one value per column — so no reduction may reduce another's result (that needs a second
// pass), and an input is read either inside the loop or after it, not both.
bool column_kernel_fits(const Graph& g, const Kernel& k, std::string* why) {
  const Shape per_column = reduced_domain(k);
  std::map<NodeId, bool> after;  // member → it uses a reduction's result
  std::set<NodeId> inside, outside;
  for (NodeId n : k.nodes) {
    const Node& node = g.node(n);
    bool uses_reduction = false;
    for (NodeId o : node.operands) uses_reduction |= after.count(o) && after.at(o);
    if (op_info(node.op).kind == OpKind::Reduce && uses_reduction) {
      *why = fmt::format("%{} reduces a value that needs %{}'s result: a column reduction takes one pass", n,
                         node.operands[0]);
      return false;
    }
    // Only the reductions' results cross from the loop to what follows it.
    if (uses_reduction && op_info(node.op).kind != OpKind::Reduce)
      for (NodeId o : node.operands)
        if (after.count(o) && !after.at(o)) {
          *why = fmt::format("%{} is computed inside the column reduction's loop and used after it by %{}", o, n);
          return false;
        }
    after[n] = uses_reduction || op_info(node.op).kind == OpKind::Reduce;
    if (uses_reduction && aligned_shape(g, n, k) != per_column) {
      *why = fmt::format("%{} {} uses a column reduction's result across the reduced axes: it needs a second pass",
                         n, shape_str(node.shape));
      return false;
    }
    for (NodeId o : node.operands)
      if (std::binary_search(k.inputs.begin(), k.inputs.end(), o)) (uses_reduction ? outside : inside).insert(o);
  }
  for (NodeId in : inside)
    if (outside.count(in)) {
      *why = fmt::format("%{} is read both inside a column reduction's loop and after it", in);
      return false;
    }
  return true;
}

// A matmul kernel computes its one contraction from operands in memory and a pointwise epilogue
// on the product's tiles: no reduction, no second contraction, no producer of an operand inside
// (their tiles would be computed once per block that reads them), 16-bit operands for mma.sync,
// and each operand's batch axes either the product's or all 1 (shared by every batch).
bool matmul_kernel_fits(const Graph& g, const Kernel& k, NodeId mm, std::string* why) {
  const Node& m = g.node(mm);
  for (NodeId n : k.nodes) {
    const Node& node = g.node(n);
    if (n != mm && node.op == Op::MatMul) {
      *why = fmt::format("%{} and %{} are two matmuls: a kernel computes one contraction", mm, n);
      return false;
    }
    if (op_info(node.op).kind == OpKind::Reduce) {
      *why = fmt::format("%{} {} reduces in a matmul's kernel, which takes a pointwise epilogue only", n,
                         op_info(node.op).name);
      return false;
    }
    if (n == mm) continue;
    for (NodeId o : node.operands)
      if (o == m.operands[0] || o == m.operands[1]) {
        *why = fmt::format("%{} {} reads the matmul %{}'s operand %{} elementwise: the kernel reads that tensor "
                           "only as the contraction's tiles",
                           n, op_info(node.op).name, mm, o);
        return false;
      }
  }
  for (NodeId o : m.operands)
    if (is_member(k, o)) {
      *why = fmt::format("%{} {} feeds the matmul %{}: its operands are read from memory (each block reads "
                         "its tiles, so a fused producer would be recomputed by every block that reads them)",
                         o, op_info(g.node(o).op).name, mm);
      return false;
    }
  const Node &a = g.node(m.operands[0]), &b = g.node(m.operands[1]);
  if (a.id == b.id && m.transpose_a != m.transpose_b) {
    *why = fmt::format("the matmul %{} reads %{} as both operands, one of them transposed: a kernel reads each "
                       "tensor in one layout (pass a copy of it as one operand)",
                       mm, a.id);
    return false;
  }
  if (a.dtype != DType::BF16 && a.dtype != DType::F16) {
    *why = fmt::format("the matmul %{} multiplies {} operands; tensor cores (mma.sync) take bf16 or f16: cast "
                       "its operands to bf16",
                       mm, dtype_name(a.dtype));
    return false;
  }
  return true;
}

// Outputs, schedule and cost of a kernel whose nodes, inputs, domain, totals and passes are set.
bool finish_kernel(const Graph& g, Kernel& k, const DeviceProfile& profile, const ScheduleHints& hints,
                   std::string* why) {
  if (k.outputs.empty()) {
    *why = "the kernel would write nothing";
    return false;
  }
  const bool reduces = k.kind != ScheduleKind::Pointwise;
  const Shape per_row = reduced_domain(k);  // one value per row (or column)
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (NodeId t : k.inputs) shapes.push_back(g.node(t).shape), dtypes.push_back(g.node(t).dtype);
  for (NodeId o : k.outputs) {
    Shape s = aligned_shape(g, o, k);
    if (s != k.domain && !(reduces && s == per_row)) {
      *why = fmt::format("its outputs have different shapes ({} for %{}, {} for %{})", shape_str(k.domain),
                         k.outputs[0], shape_str(g.node(o).shape), o);
      return false;
    }
    shapes.push_back(std::move(s));
    dtypes.push_back(g.node(o).dtype);
  }
  if (k.kind == ScheduleKind::MatMul) {
    const Node& m = g.node(contraction(g, k));
    const auto [rows, depth] = matmul_operand_dims(g.node(m.operands[0]).shape, m.transpose_a);
    const int64_t cols = m.shape.back();
    // An epilogue reading a whole tile of its own (a residual) holds it beside the accumulator.
    bool tile_operands = false;
    for (NodeId t : k.inputs) {
      const Shape v = aligned_shape(g, t, k);
      tile_operands |= t != m.operands[0] && t != m.operands[1] && view_spans_rows(v) && view_spans_cols(v);
    }
    const int64_t runs[2] = {m.transpose_a ? rows : depth, m.transpose_b ? depth : cols};
    // An operand's stored rows padded by a copy: row-major ones whatever their batches, transposed
    // ones only unbatched (the kernel reads a column-major operand's batches `run` rows apart).
    auto unbatched = [&](const Node& o) { return num_elements(o.shape) == o.shape.back() * o.shape[o.shape.size() - 2]; };
    const bool copyable[2] = {!m.transpose_a || unbatched(g.node(m.operands[0])),
                               !m.transpose_b || unbatched(g.node(m.operands[1]))};
    // TMA stores for one output of whole 16-byte rows (16- or 32-bit; build.cpp, stored_by_tma).
    const size_t out_size = dtype_size(g.node(k.outputs.at(0)).dtype);
    const bool tma_storable = k.outputs.size() == 1 && out_size >= 2 && cols * static_cast<int64_t>(out_size) % 16 == 0;
    // An epilogue that evaluates a transcendental function (a GELU's erf or exp).
    bool transcendental = false;
    for (NodeId n : k.nodes) transcendental |= n != m.id && mufu_per_element(g.node(n)) > 0;
    auto schedule = [&](ScheduleHints h) {
      if (m.transpose_b) h.gemm_cluster = 1;  // multicast shares out B's panels: B stored along N
      if (!tma_storable) h.gemm_tma_store = 0;
      TileSchedule s = choose_matmul_schedule(
          num_elements(m.shape) / (rows * cols), rows, cols, depth, runs, copyable,
          profile.wgmma && dtype_size(g.node(m.operands[0]).dtype) == 2, tile_operands, h, profile.sm_count);
      s.rolled_epilogue = s.tma_store && s.consumer_groups == 1 && s.k_splits <= 1 && k.nodes.size() > 1 &&
                          g.node(k.outputs.at(0)).dtype == m.dtype &&
                          (h.rolled_epilogue == 1 || (h.rolled_epilogue == -1 && transcendental));
      return s;
    };
    k.schedule = schedule(hints);
    if (k.schedule.copies_operands() && hints.pitch_copy == -1) {  // the copies against reading in place
      Kernel in_place = k;
      ScheduleHints h = hints;
      h.pitch_copy = 0;
      in_place.schedule = schedule(h);
      estimate_cost(g, k, profile);
      estimate_cost(g, in_place, profile);
      if (in_place.cost.predicted_s < k.cost.predicted_s) k.schedule = in_place.schedule;
    }
  } else if (k.kind == ScheduleKind::ColumnReduce) {
    // Fewer rows a loop step (8, 4, 2) where the chain's registers would keep the column kernel
    // from the four blocks an SM its loads need (a gradient's column sum fused with the chain that
    // computes it: mlp_train's GELU' and db1 took ~162 registers at 8).
    for (int rows = 8;; rows /= 2) {
      ScheduleHints h = hints;
      if (!h.rows_per_thread) h.rows_per_thread = rows;
      auto s = choose_column_schedule(k.domain, k.split, k.reduce_end, shapes, dtypes, k.inputs.size(), h,
                                      profile, why);
      if (!s) return false;
      k.schedule = *s;
      k.schedule.partial_sums = k.totals.reductions;
      if (hints.rows_per_thread || rows <= 2) break;
      estimate_cost(g, k, profile);
      if (k.cost.registers <= profile.registers_at_blocks(4, k.schedule.block_threads())) break;
    }
  } else if (reduces) {
    // A row's parts may meet once through global memory when its reductions all finish in its
    // first pass (one exchange a part) — at most two values a part, the workspace's 16 bytes a
    // task: a softmax's max and online sum, an RMSNorm's sum of squares — and every output is
    // whole rows (written by each part).
    bool splittable = k.passes == 2 && k.totals.reductions >= 1 && k.totals.reductions <= 2;
    for (NodeId t : k.outputs) splittable &= num_elements(g.node(t).shape) == num_elements(k.domain);
    // A long row's column tiles may be split into parts whose reductions meet in the workspace
    // when one pass over the row computes them all and every output is one value per row.
    bool per_row_outputs = k.passes == 1 && k.totals.online_sums == 0;
    const int64_t row = num_elements(Shape(k.domain.begin() + k.split, k.domain.end()));
    for (NodeId t : k.outputs) per_row_outputs &= num_elements(g.node(t).shape) * row <= num_elements(k.domain);
    const int part_sums = per_row_outputs ? k.totals.reductions : 0;
    const int held = row_tiles_held(g, k.nodes, k.outputs, k.domain);
    auto s = choose_row_schedule(k.domain, k.split, shapes, dtypes, k.inputs.size(), splittable, part_sums,
                                 held, k.totals.scratch_regs, hints, profile, why);
    if (!s) return false;
    k.schedule = *s;
  } else {
    k.schedule = choose_pointwise_schedule(k.domain, shapes, dtypes, hints);
  }
  if (k.schedule.grid() > INT32_MAX || k.schedule.col_iters > INT32_MAX) {
    *why = fmt::format("its domain {} needs {} blocks{}, more than a grid (2^31 − 1) or a loop holds",
                       shape_str(k.domain), k.schedule.grid(),
                       k.schedule.col_iters > 1 ? fmt::format(" of {} column tiles", k.schedule.col_iters) : "");
    return false;
  }
  estimate_cost(g, k, profile);
  return true;
}

}  // namespace

std::optional<Kernel> build_kernel(const Graph& g, const std::vector<NodeId>& nodes,
                                   const std::vector<NodeId>& outputs, const DeviceProfile& profile,
                                   const ScheduleHints& hints, std::string* why) {
  Kernel k;
  k.nodes = nodes;
  std::sort(k.nodes.begin(), k.nodes.end());
  k.outputs = outputs;
  std::sort(k.outputs.begin(), k.outputs.end());
  for (NodeId n : k.nodes)
    for (NodeId o : g.node(n).operands)
      if (!is_member(k, o) && g.node(o).op != Op::Constant) k.inputs.push_back(o);
  std::sort(k.inputs.begin(), k.inputs.end());
  k.inputs.erase(std::unique(k.inputs.begin(), k.inputs.end()), k.inputs.end());
  if (k.outputs.empty()) {
    *why = "the kernel would write nothing";
    return std::nullopt;
  }
  for (NodeId n : k.nodes)
    if (g.node(n).op == Op::WriteAt) {
      if (!write_kernel(g, k, profile, why)) return std::nullopt;
      return k;
    }
  NodeId mm = -1;
  int matmuls = 0;
  for (NodeId n : k.nodes)
    if (g.node(n).op == Op::MatMul && matmuls++ == 0) mm = n;
  if (matmuls > 1) {  // a contraction chain (attention), its backward, or nothing
    std::string backward_why;
    if (attention_backward_kernel(g, k, profile, hints, &backward_why)) return k;
    if (!attention_kernel(g, k, profile, hints, why)) {
      if (!backward_why.empty()) *why = backward_why;
      return std::nullopt;
    }
    return k;
  }
  if (mm >= 0) {
    if (!matmul_kernel_fits(g, k, mm, why)) return std::nullopt;
    k.kind = ScheduleKind::MatMul;
    k.domain = g.node(mm).shape;
  } else if (reduction_domain(g, k.nodes, &k, why)) {
    k.kind = k.reduce_end == static_cast<int>(k.domain.size()) ? ScheduleKind::RowReduce : ScheduleKind::ColumnReduce;
  } else {
    if (!why->empty()) return std::nullopt;
    k.domain = g.node(k.outputs[0]).shape;
  }
  for (NodeId n : k.nodes) {
    if (!node_fits(g, k, n, why)) return std::nullopt;
    add_totals(g, k, k.totals, n);
  }
  if (k.kind == ScheduleKind::RowReduce) analyze_passes(g, k);
  if (k.kind == ScheduleKind::ColumnReduce && !column_kernel_fits(g, k, why)) return std::nullopt;
  if (!finish_kernel(g, k, profile, hints, why)) return std::nullopt;
  return k;
}

std::optional<Kernel> extend_kernel(const Graph& g, const Kernel& base, NodeId p, const std::vector<NodeId>& users,
                                    const std::vector<NodeId>& outputs, const DeviceProfile& profile,
                                    const ScheduleHints& hints, std::string* why) {
  const Node& pn = g.node(p);
  const bool reduce = op_info(pn.op).kind == OpKind::Reduce;
  std::vector<NodeId> sorted_outputs = outputs;
  std::sort(sorted_outputs.begin(), sorted_outputs.end());
  // What changes the domain or the legality of the other nodes is built whole: the first
  // reduction, or a pointwise kernel whose first output (its domain) changes.
  const bool domain_moves =
      (base.kind == ScheduleKind::Pointwise &&
       (reduce || sorted_outputs.empty() || g.node(sorted_outputs[0]).shape != base.domain)) ||
      base.kind == ScheduleKind::ColumnReduce ||  // its few nodes are checked as a whole
      base.kind == ScheduleKind::MatMul || base.kind == ScheduleKind::Attention ||
      base.kind == ScheduleKind::AttentionBackward || base.kind == ScheduleKind::Write ||
      pn.op == Op::MatMul || pn.op == Op::WriteAt;
  if (domain_moves) {
    std::vector<NodeId> nodes = base.nodes;
    nodes.push_back(p);
    return build_kernel(g, nodes, outputs, profile, hints, why);
  }
  Kernel k;
  k.kind = base.kind;
  k.domain = base.domain;
  k.split = base.split;
  k.reduce_end = base.reduce_end;
  k.totals = base.totals;
  k.passes = base.passes;
  k.nodes = base.nodes;
  k.nodes.insert(std::upper_bound(k.nodes.begin(), k.nodes.end(), p), p);
  k.outputs = std::move(sorted_outputs);
  k.inputs = base.inputs;
  auto at = std::lower_bound(k.inputs.begin(), k.inputs.end(), p);
  if (at != k.inputs.end() && *at == p) k.inputs.erase(at);
  for (NodeId o : pn.operands) {
    if (is_member(k, o) || g.node(o).op == Op::Constant) continue;
    auto pos = std::lower_bound(k.inputs.begin(), k.inputs.end(), o);
    if (pos == k.inputs.end() || *pos != o) k.inputs.insert(pos, o);
  }
  if (reduce && (g.node(pn.operands[0]).shape != k.domain || pn.axes.front() != k.split ||
                 reduced_end(g, pn) != k.reduce_end || k.reduce_end < static_cast<int>(k.domain.size()))) {
    *why = fmt::format("%{} reduces a different row ({} over axes [{}]) than the kernel's ({} over axes {}..{})", p,
                       shape_str(g.node(pn.operands[0]).shape), fmt::join(pn.axes, ", "), shape_str(k.domain),
                       k.split, k.reduce_end - 1);
    return std::nullopt;
  }
  if (!node_fits(g, k, p, why)) return std::nullopt;
  if (reduce && !pn.keepdim)  // the producer as an operand of the kernel's nodes
    for (NodeId u : users)
      if (is_member(k, u) && !node_fits(g, k, u, why)) return std::nullopt;
  add_totals(g, k, k.totals, p);
  // Row passes depend on the reductions and on the per-row values and exps around them; a
  // producer over the whole domain that is neither an exp nor a subtraction leaves them as
  // they were (its depth is 0, and it is no part of an online sum's pattern).
  const bool passes_move = reduce || pn.op == Op::Exp || pn.op == Op::Sub ||
                           aligned_shape(g, p, k) != k.domain;
  if (k.kind == ScheduleKind::RowReduce && passes_move) analyze_passes(g, k);
  if (!finish_kernel(g, k, profile, hints, why)) return std::nullopt;
  return k;
}

bool rounds_where_computed(const Graph& g, const Kernel& k, NodeId n) {
  const DType dt = g.node(n).dtype;
  if ((dt != DType::BF16 && dt != DType::F16) || !std::binary_search(k.outputs.begin(), k.outputs.end(), n))
    return false;
  for (NodeId m : k.nodes)
    for (NodeId o : g.node(m).operands)
      if (o == n) return true;
  return false;
}

NodeId contraction(const Graph& g, const Kernel& k) {
  for (NodeId n : k.nodes)
    if (g.node(n).op == Op::MatMul) return n;
  return -1;
}

bool rounds_product(const Graph& g, const Kernel& k) {
  const NodeId mm = contraction(g, k);
  if (mm < 0 || dtype_size(g.node(mm).dtype) != 2) return false;
  return k.schedule.rolled_epilogue || std::binary_search(k.outputs.begin(), k.outputs.end(), mm);
}

// A wgmma GEMM's k step moves through shared memory its A and B tiles, written there (TMA or
// cp.async), and read by its warpgroups, each its 64 rows of A and the whole of B. At 128×256
// (two warpgroups) that is 128 KiB against 4.2 MFLOP, exactly shared memory's pace at the tensor
// cores' (DeviceProfile::smem_flops_per_byte); narrower tiles move more bytes a flop and run at
// that ratio: 128×128 at 0.8 (measured, cp.async schedule on the H200: 485 against 634 TFLOP/s;
// mlp_train's GELU' GEMM at 128×128 on an H100 1.92–1.96 ms, the plain GEMMs 1.46–1.58 at 128×256).
double smem_share(const TileSchedule& s, const DeviceProfile& p) {
  if (!s.wgmma || !s.contracts || s.attention || s.attention_backward != 0) return 1;
  const double bm = s.block_m, bn = s.block_n, bk = s.block_k, warpgroups = std::max(1, s.block_m / 64);
  const double bytes = 2 * bk * ((bm + bn) + bm + warpgroups * bn);
  return std::min(1.0, 2 * bm * bn * bk / (bytes * p.smem_flops_per_byte));
}

double matmul_flops_rate(const TileSchedule& s, const DeviceProfile& p) {
  if (s.wgmma) return (s.tma ? p.wgmma_tma_flops : p.wgmma_flops) * smem_share(s, p);
  return s.stages > 0 ? p.mma_sync_flops : p.mma_sync_direct_flops;
}

// A matmul kernel: its multiply-adds at its schedule's rate (wgmma, mma.sync staged or direct), or its bytes (each operand read once:
// the blocks that share a tile of it find it in L2), whichever is longer. Registers: the loop
// holds the accumulator's fragments (block_m·block_n / threads f32 a thread), one k step's A and
// B fragments and the addressing; the epilogue (after the loop, the operands' fragments dead)
// the accumulator, its operands' elements in the same layout, and its temporaries.
void estimate_matmul_cost(const Graph& g, Kernel& k, const DeviceProfile& p) {
  KernelCost& c = k.cost;
  const TileSchedule& s = k.schedule;
  const Node& mm = g.node(contraction(g, k));
  count_tensor_bytes(g, k, &c);
  // An operand copied into a padded pitch first: the copy reads it and writes the padded rows,
  // which the kernel then reads instead; each copy one more launch.
  for (int i = 0; i < 2; ++i) {
    if (s.operand_pitch[i] == 0) continue;
    const Node& o = g.node(mm.operands[static_cast<size_t>(i)]);
    const int64_t bytes = tensor_bytes(o), padded = bytes / o.shape.back() * s.operand_pitch[i];
    c.copy_bytes += bytes + padded;
    c.scratch_bytes += padded - bytes;
    c.copy_s += static_cast<double>(bytes + padded) / p.pitch_copy_bytes_per_s + p.launch_s;
  }
  // Split-K: each range's f32 partial product written, and read back by the tile's last block.
  if (s.k_splits > 1) {
    c.scratch_bytes += 2 * s.k_splits * s.batch * s.m * s.n * 4;
  }
  c.flops = 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.m) * static_cast<double>(s.n) *
            static_cast<double>(s.k);
  const double epilogue = k.totals.instructions_per_element - instructions_per_element(g, mm);
  c.instructions = epilogue * static_cast<double>(num_elements(k.domain));
  const int threads = s.block_threads();
  const int acc = s.block_m * s.block_n / threads;
  const int warp_m = s.block_m / s.warps_m, warp_n = s.block_n / s.warps_n;
  // A and B registers of one k step of 16 (none on wgmma, which reads both from shared memory)
  const int fragments = s.wgmma ? 0 : warp_m / 16 * 4 + warp_n / 8 * 2;
  int operands = 0;
  for (NodeId t : k.inputs) {
    if (t == mm.operands[0] || t == mm.operands[1]) continue;
    const Shape v = aligned_shape(g, t, k);
    const bool rows = num_elements(v) != v.back(), cols = v.back() != 1;
    operands += rows && cols ? acc : cols ? warp_n / 4 : rows ? warp_m / 8 : 1;
  }
  // Not capped at the device's limit: an estimate past it is an epilogue that would spill, which
  // the fusion pass's budget then refuses. Operands loaded before the k loop are held through it.
  const int held = s.loads_epilogue_early() ? operands : 0;
  c.registers = std::max(36 + acc + fragments + held, 24 + acc + operands + 4 * k.totals.scratch_regs);
  c.blocks_per_sm = std::max(1, std::min({p.max_threads_per_sm / threads, p.max_blocks_per_sm,
                                          p.blocks_by_registers(c.registers, threads)}));
  if (s.stages > 0)
    c.blocks_per_sm = std::max<int>(1, std::min<int64_t>(c.blocks_per_sm, p.shared_bytes_per_sm / s.dynamic_shared_bytes()));
  // A grid of fewer blocks than SMs draws on their share of the bandwidth only. (Work: the
  // tiles and their k ranges, whether a block each or looped over by a persistent grid.)
  const double work = static_cast<double>(s.tiles() * s.k_splits);
  c.busy_share = std::min(1.0, work / p.sm_count);
  c.memory_s =
      static_cast<double>(c.bytes_read + c.bytes_written + c.scratch_bytes) / (p.hbm_bytes_per_s * c.busy_share);
  // The tensor cores compute whole tiles: a product narrower than its tile pays for the padding.
  auto padded = [](int64_t x, int block) { return static_cast<double>((x + block - 1) / block * block); };
  const double tile_flops = 2.0 * static_cast<double>(s.batch) * padded(s.m, s.block_m) * padded(s.n, s.block_n) *
                            static_cast<double>(s.k);
  // Tiles run in waves of one per block slot: the last wave's empty slots are paid for.
  const double slots = static_cast<double>(p.sm_count) * c.blocks_per_sm;
  const double waves = std::ceil(work / slots);
  const double fill = work / (waves * slots);
  c.compute_s = tile_flops / (matmul_flops_rate(s, p) * fill) + c.instructions / p.instructions_per_s;
  // With one block per SM nothing runs beside a tile's epilogue: its stores follow its k loop
  // (bf16 16384×4096×1024 with bias and erf GELU fused: 0.320 ms, the GEMM alone 0.268; the
  // same with cuBLASLt and a GELU kernel 0.256; bench/NOTES.md, "Few rows") — unless TMA stores
  // them while the consumers go on to the next tile (0.244 → 0.186 ms; "TMA stores").
  if (c.blocks_per_sm == 1 && !s.tma_store) c.compute_s += static_cast<double>(c.bytes_written) / p.hbm_bytes_per_s;
  c.predicted_s = c.copy_s + std::max(c.memory_s, c.compute_s) + p.launch_s;
}

// Issue slots of a pointwise or row kernel: what its warps issue, each instruction for all 32
// lanes, so a tile's idle lanes count too (bench/NOTES.md, "Issue slots counted per thread",
// where each term was read off the SASS and checked against Nsight Compute's counts):
// - each element slot of the tile (a row kernel's rows × the columns its blocks span): its
//   nodes' instructions (a division by a divisor broadcast over it, a multiply), the unpacking
//   of each 16-bit element read and the packing of each pair written, and for each vector of a
//   tensor along the row a load or a store with its address (a weight shared by the rows: over
//   the thread's rows);
// - each thread of a row once: the per-row values (a norm's rsqrt, a division's reciprocal),
//   each reduction's shuffle tree and, over more than a warp, the block's exchange; and each
//   thread its indices;
// - a windowed row's two ends, whose element paths the warps there issue for all their lanes:
//   the masks of the reductions and the stores, and for each weight shared by the rows its two
//   shifted vectors read whole or as the tensor's tail.
static double issue_slots(const Graph& g, const Kernel& k, const std::vector<Shape>& views) {
  const TileSchedule& s = k.schedule;
  const double domain = static_cast<double>(num_elements(k.domain));
  const bool row_kernel = k.kind == ScheduleKind::RowReduce;
  const double slots = row_kernel ? std::max(domain, static_cast<double>(s.rows) *
                                                         static_cast<double>(s.col_blocks() * s.tile_cols()))
                                  : domain;
  const double threads = slots / s.elems_per_thread();
  const double thread_rows =
      row_kernel ? static_cast<double>(s.rows) * s.threads_per_row * static_cast<double>(s.col_blocks())
                 : threads;
  const NodeTotals& t = k.totals;
  double per_slot = t.element_instructions + (row_kernel ? 0 : t.spread_instructions);
  double per_thread_row =
      (row_kernel ? t.small_instructions : 0) + t.reductions * (10 + (s.threads_per_row > 32 ? 12 : 0));
  int shared_weights = 0;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const bool along_row = view_spans_cols(views[i]), whole = view_spans_rows(views[i]) && along_row;
    const double half = dtype_size(g.node(k.inputs[i]).dtype) == 2 ? 1 : 0;
    if (whole)
      per_slot += 2.0 / s.vec + half;
    else if (along_row)
      per_slot += (2.0 / s.vec + half) / s.rows_per_thread;
    shared_weights += along_row && !whole;
  }
  for (NodeId o : k.outputs)
    if (num_elements(aligned_shape(g, o, k)) == num_elements(k.domain))
      per_slot += 2.0 / s.vec + (dtype_size(g.node(o).dtype) == 2 ? 0.5 : 0);
  double ends = 0;
  if (s.window) ends = static_cast<double>(s.rows) * 2 * 32 * (30 + 35 * shared_weights);
  return per_slot * slots + per_thread_row * thread_rows + 20 * threads + ends;
}

void estimate_cost(const Graph& g, Kernel& k, const DeviceProfile& p) {
  KernelCost& c = k.cost;
  c = {};
  if (k.kind == ScheduleKind::MatMul) return estimate_matmul_cost(g, k, p);
  if (k.kind == ScheduleKind::Attention) return estimate_attention_cost(g, k, p);
  if (k.kind == ScheduleKind::AttentionBackward) return estimate_attention_backward_cost(g, k, p);
  const TileSchedule& s = k.schedule;
  int64_t domain_elems = num_elements(k.domain);
  // Per-thread elements an operand occupies: full tiles hold rows_per_thread × vec, a bias
  // (broadcast along rows) only vec, a column vector rows_per_thread, a scalar 1.
  std::vector<Shape> shapes;
  for (NodeId t : k.inputs) shapes.push_back(g.node(t).shape);
  std::vector<Shape> views = k.kind == ScheduleKind::ColumnReduce
                                 ? column_views(k.domain, k.split, k.reduce_end, shapes)
                                 : operand_views(s, k.domain, k.split, shapes);
  int loaded_regs = 0;
  double inflight_per_thread = 0;
  int64_t full_row_bytes = 0;  // per row, of the inputs that span the row
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const Node& n = g.node(k.inputs[i]);
    c.bytes_read += tensor_bytes(n);
    bool spans_rows = view_spans_rows(views[i]);
    bool spans_cols = view_spans_cols(views[i]);
    int elems = (spans_rows ? s.rows_per_thread : 1) * (spans_cols ? s.vec * s.chunks_per_thread : 1);
    int words = static_cast<int>((elems * dtype_size(n.dtype) + 3) / 4);
    // A row kernel loads a tensor shared by all rows where it is first used, so
    // it is not held through the reductions with the rows.
    if (k.kind != ScheduleKind::RowReduce || spans_rows) loaded_regs += words;
    if (spans_rows || (spans_cols && s.rows == 1) || s.dims.size() == 1) inflight_per_thread += elems * dtype_size(n.dtype);
    if (spans_rows && spans_cols) full_row_bytes += s.cols * static_cast<int64_t>(dtype_size(n.dtype));
  }
  for (NodeId o : k.outputs) c.bytes_written += tensor_bytes(g.node(o));
  if (s.reduces_columns && s.split_blocks > 1)  // each part's sums written to the workspace and read back
    c.reread_bytes = 2 * int64_t{s.partial_sums} * s.outer * s.split_blocks * s.cols * 4;
  const bool counted_per_thread = k.kind == ScheduleKind::Pointwise || k.kind == ScheduleKind::RowReduce;
  if (counted_per_thread) {
    c.instructions = issue_slots(g, k, views);
  } else {
    c.instructions = k.totals.instructions_per_element * static_cast<double>(domain_elems);
    // 16-bit tensors are unpacked on load and packed on store: about one instruction per element.
    for (NodeId t : k.inputs)
      if (dtype_size(g.node(t).dtype) == 2)
        c.instructions += static_cast<double>(num_elements(g.node(t).shape));
    for (NodeId t : k.outputs)
      if (dtype_size(g.node(t).dtype) == 2)
        c.instructions += static_cast<double>(num_elements(g.node(t).shape));
  }
  const int scratch = k.totals.scratch_regs;
  // A flat domain's broadcast operands are read an element at a time (emit.cpp, load_elements):
  // a load (and for 16 bits its unpacking) per element where the operand runs along the last
  // dimension; a choice between two rows' values where it is broadcast along it.
  if (!s.elem_dims.empty()) {
    const std::vector<Shape> along = element_views(s, k.domain, shapes);
    for (size_t i = 0; i < k.inputs.size(); ++i)
      if (num_elements(along[i]) != 1 && along[i] != s.elem_dims) {
        const bool half = dtype_size(g.node(k.inputs[i]).dtype) == 2;
        c.instructions += (along[i].back() == 1 ? 1.0 : half ? 3.0 : 2.0) * static_cast<double>(domain_elems);
      }
  }
  // Index and pointer arithmetic, every loaded operand held at once (loads are issued before
  // the first use), the thread's results, and the temporaries of a few elements in evaluation.
  c.registers = std::min(p.max_registers_per_thread, 12 + loaded_regs + s.elems_per_thread() + 4 * scratch +
                                                         2 * static_cast<int>(k.outputs.size()));
  int threads = s.block_threads();
  if (s.min_blocks_per_sm > 0)  // codegen caps the registers to fit that many blocks
    c.registers = std::min(c.registers, p.registers_at_blocks(s.min_blocks_per_sm, threads));
  c.blocks_per_sm = std::max(1, std::min({p.max_threads_per_sm / threads, p.max_blocks_per_sm,
                                          p.blocks_by_registers(c.registers, threads)}));
  if (s.stages > 0)  // its stages take the shared memory of the blocks the schedule planned per SM
    c.blocks_per_sm = std::min(c.blocks_per_sm, s.min_blocks_per_sm);
  int64_t resident_blocks = std::min<int64_t>(c.blocks_per_sm, (s.grid() + p.sm_count - 1) / p.sm_count);
  if (s.col_iters > 1 && k.passes > 1) {
    // Each later pass re-reads the rows; they come from L2 when the rows in flight fit in it.
    int64_t rereads = (k.passes - 1) * full_row_bytes * s.rows;
    double working = static_cast<double>(full_row_bytes) * s.tile_rows() * resident_blocks * p.sm_count;
    (working <= p.l2_bytes / 2 ? c.l2_reread_bytes : c.reread_bytes) = rereads;
  }
  c.bytes_in_flight_per_sm = inflight_per_thread * threads * static_cast<double>(resident_blocks);
  if (s.stages > 0) {
    // Bulk copies keep `stages` rows' parts in flight per block; the persistent grid's groups
    // (a cluster of a row's blocks each) take rows in rounds, and the last round may be partial.
    c.bytes_in_flight_per_sm = static_cast<double>(s.stages * s.stage_bytes) * c.blocks_per_sm;
    // Split rows: every block takes parts, so the rounds are rounds of parts.
    int64_t groups = std::max<int64_t>(1, int64_t{p.sm_count} * c.blocks_per_sm / s.cluster_blocks);
    int64_t tasks = s.row_blocks() * s.split_blocks;
    int64_t rounds = (tasks + groups - 1) / groups;
    c.busy_share = static_cast<double>(tasks) / static_cast<double>(groups * rounds);
    double step = s.split_blocks > 1 ? p.split_step_s
                                     : p.row_step_s + (s.cluster_blocks > 1 ? p.cluster_exchange_s : 0);
    c.row_steps_s = static_cast<double>(rounds) * step;
  } else if (s.grid() < p.sm_count) {
    // Fewer blocks than SMs: only their SMs draw on memory (a whole-tensor sum in one block:
    // that SM's bytes in flight alone).
    c.busy_share = static_cast<double>(s.grid()) / p.sm_count;
  }
  if (s.cluster_blocks > 1 && s.stages == 0) {
    // Rows held in a cluster's registers, not staged: the cluster's blocks load, reduce,
    // exchange and store each row in lockstep, and an SM's one or two blocks do not cover one
    // another's exchanges, so every round of blocks pays the staged rows' step and exchange
    // (the 50257 vocabularies ran 1.5 µs a round over their bytes' time; bench/NOTES.md,
    // "Long RMSNorm rows in one block").
    const int64_t slots = int64_t{p.sm_count} * c.blocks_per_sm;
    const int64_t rounds = (s.grid() + slots - 1) / slots;
    c.row_steps_s = static_cast<double>(rounds) * (p.row_step_s + p.cluster_exchange_s);
  }
  double needed = p.hbm_bytes_per_s * p.memory_latency_s / p.sm_count;
  // A kernel that loads no full tile only streams stores, which need no latency cover.
  double cover = inflight_per_thread == 0 ? 1.0 : std::min(1.0, c.bytes_in_flight_per_sm / needed);
  double bw = p.hbm_bytes_per_s * cover * c.busy_share;
  c.memory_s = static_cast<double>(c.bytes()) / bw;
  c.compute_s = c.instructions / p.instructions_per_s;
  if (counted_per_thread) {
    c.mufu_s = k.totals.mufu_elements / p.exp2_per_s;
    // Bytes flow only a DRAM latency after the first loads, and the last stores land about one
    // after the last are issued: time the streaming rate does not cover, which is 1–2% of the
    // benchmark shapes' and up to 10% of a kernel of 30–50 MB (the family's short bf16 graphs ran
    // 1.14–1.17× the prediction without it; bench/NOTES.md, "Fill and drain").
    c.fill_drain_s = 2 * p.memory_latency_s;
  }
  // Memory, issue and the MUFU pipe overlap, but not wholly where two are near their limits: the
  // family's rows and chains ran up to 1.3× the longest of the three and within 15% of this norm
  // of them (bench/NOTES.md, "Issue slots counted per thread"). A kernel far from all but one
  // limit takes that one's time.
  c.predicted_s = (counted_per_thread
                       ? std::cbrt(std::pow(c.memory_s, 3) + std::pow(c.compute_s, 3) + std::pow(c.mufu_s, 3))
                       : std::max(c.memory_s, c.compute_s)) +
                  c.row_steps_s + c.fill_drain_s + p.launch_s;
}

}  // namespace tilefuse
