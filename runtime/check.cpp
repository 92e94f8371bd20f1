#include "runtime/check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "compiler/codegen/accuracy.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/graph/reference.h"
#include "runtime/executable.h"

namespace tilefuse {

// f32 operations are correctly rounded (½ ulp) or approximations within 3.5 ulp (GpuMath); the
// noise is 2^-21 (4 ulp) per operation — more for an op whose 16-bit result codegen takes from a
// short form (codegen/accuracy.h: tanh.approx's 2^-11) — and the check allows 16 times what it
// moves an output.
// Beyond `kJudgeable` that allowance says nothing about correctness.
static constexpr double kNoise = 0x1.0p-21;
static constexpr double kSensitivityFactor = 16;
static constexpr double kJudgeable = 0.1;
static constexpr int64_t kSmallGraph = int64_t{1} << 18;  // elements of its largest tensor
static constexpr int64_t kSmallOutput = 4096;             // elements of an output

// Where the plan rounds a 16-bit value: where a kernel writes it (and then for every use, in its
// own kernel too: cost_model.h, rounds_where_computed), at casts, at a matmul's product where its
// kernel rounds it before the epilogue (cost_model.h, rounds_product; an attention kernel rounds
// its products) and at a column reduction's result (its f32 sums become the node's dtype).
static std::vector<bool> plan_rounding(const Plan& plan) {
  const Graph& g = plan.graph;
  std::vector<bool> rounded(g.nodes().size(), false);
  for (const Node& n : g.nodes()) rounded[n.id] =
        n.op == Op::Cast || n.op == Op::Constant || n.op == Op::Input || n.op == Op::MatMul;
  for (const Kernel& k : plan.kernels) {
    if (k.kind == ScheduleKind::MatMul)
      if (const NodeId mm = contraction(g, k); mm >= 0 && dtype_size(g.node(mm).dtype) == 2)
        rounded[mm] = rounds_product(g, k);
    for (NodeId o : k.outputs) rounded[o] = true;
    if (k.kind == ScheduleKind::ColumnReduce)
      for (NodeId n : k.nodes) rounded[n] = rounded[n] || op_info(g.node(n).op).kind == OpKind::Reduce;
  }
  for (const GraphOutput& o : g.outputs()) rounded[o.node] = true;
  return rounded;
}

// The graph as the plan computes it: every kernel's nodes again, in kernel order, so that a node
// that several kernels recompute is several nodes, each with noise of its own (their f32 results
// need not agree to the last bit: x − max x over a size-1 axis, with x and the max from two
// kernels, is not exactly 0). Inputs and constants appear once; an operand a kernel reads from
// memory is the copy the kernel that wrote it computed. `rounded` follows the copies.
static Graph plan_shaped(const Plan& plan, const std::vector<bool>& rounded, std::vector<bool>* shaped_rounded) {
  const Graph& g = plan.graph;
  Graph out(g.name());
  std::map<NodeId, NodeId> shared, written;
  auto add = [&](Node n, NodeId original) {
    shaped_rounded->push_back(rounded[static_cast<size_t>(original)]);
    return out.append(std::move(n));
  };
  for (const Node& n : g.nodes())
    if (n.op == Op::Input || n.op == Op::Constant) shared[n.id] = add(n, n.id);
  for (const Kernel& k : plan.kernels) {
    std::map<NodeId, NodeId> local;
    for (NodeId id : k.nodes) {
      Node n = g.node(id);
      for (NodeId& o : n.operands) o = local.count(o) ? local.at(o) : shared.count(o) ? shared.at(o) : written.at(o);
      local[id] = add(std::move(n), id);
    }
    for (NodeId o : k.outputs) written[o] = local.at(o);
  }
  for (const GraphOutput& o : g.outputs())
    out.add_output(o.name, shared.count(o.node) ? shared.at(o.node) : written.at(o.node));
  return out;
}

// Values of an f32 or bf16 output below the smallest normal f32 compared as 0: the kernels'
// f32 arithmetic flushes subnormals to zero (`.ftz`), so where float64 gives 3.7e-44 for
// sigmoid(−100) a kernel gives 0 (fuzz seed 15869: a relative error of 1 on a value no f32
// kernel keeps). f16's own subnormals stay: its conversions keep them.
static std::vector<double> flushed(std::vector<double> v, DType dt) {
  if (dt != DType::F32 && dt != DType::BF16) return v;
  for (double& x : v)
    if (std::fabs(x) < std::numeric_limits<float>::min()) x = std::copysign(0.0, x);
  return v;
}

// The element farthest from the reference (a NaN farthest of all) and the count of elements
// off by more than `allowed` of the reference's root mean square.
static void locate_errors(const std::vector<double>& got, const std::vector<double>& want, const Shape& shape,
                          OutputCheck* c) {
  double sum_sq = 0;
  for (double w : want) sum_sq += w * w;
  const double bound = c->allowed * std::sqrt(sum_sq / static_cast<double>(std::max<size_t>(1, want.size())));
  size_t worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - want[i]);
    c->off += !(err <= bound);
    if (err > worst_err) worst = i, worst_err = err;
  }
  if (got.empty()) return;
  c->worst_got = got[worst];
  c->worst_want = want[worst];
  c->worst_at.assign(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    c->worst_at[d] = static_cast<int64_t>(worst) % shape[d];
    worst /= static_cast<size_t>(shape[d]);
  }
}

CheckReport check_against_reference(const Plan& plan, const TensorMap& inputs, const TensorMap& outputs) {
  const Graph& g = plan.graph;
  CheckReport r;
  ReferenceOptions exact;
  exact.rounded = plan_rounding(plan);
  auto ref = reference_run(g, inputs, exact);
  // An output of few elements may sit where one draw of the noise happens to move it little
  // (a min of a few values, a rare 16-bit rounding flip, a sum over a long row of terms scaled by
  // a few per-row values — fuzz seed 12042: a 262144-long row's sum, its one draw 16 times under
  // what f32 moved it): small graphs, and graphs with an output of few elements, take the largest
  // movement of several draws; a large output averages over its elements in one.
  int64_t largest = 0, smallest_output = std::numeric_limits<int64_t>::max();
  for (const Node& n : g.nodes()) largest = std::max(largest, num_elements(n.shape));
  for (const GraphOutput& o : g.outputs()) smallest_output = std::min(smallest_output, num_elements(g.node(o.node).shape));
  const int draws = largest <= kSmallGraph || smallest_output <= kSmallOutput ? 4 : 1;
  std::map<std::string, double> sensitivity;
  ReferenceOptions noisy;
  const Graph shaped = plan_shaped(plan, exact.rounded, &noisy.rounded);
  noisy.noise = kNoise;
  for (const Node& n : shaped.nodes()) noisy.node_noise.push_back(short_form_error(n.op, n.dtype));
  for (int d = 0; d < draws; ++d) {
    noisy.noise_seed = 0x7e57 + static_cast<uint64_t>(d);
    auto moved = reference_run(shaped, inputs, noisy);
    for (const GraphOutput& o : g.outputs()) {
      const DType dt = g.node(o.node).dtype;
      sensitivity[o.name] = std::max(sensitivity[o.name], relative_error(flushed(moved.at(o.name), dt),
                                                                         flushed(ref.at(o.name), dt)));
    }
  }
  for (const GraphOutput& o : g.outputs()) {
    const TensorData& t = outputs.at(o.name);
    OutputCheck c;
    c.name = o.name;
    c.dtype = t.dtype;
    c.unwritten = count_unwritten(t);
    const std::vector<double> got = flushed(t.to_doubles(), t.dtype), want = flushed(ref.at(o.name), t.dtype);
    c.rel_err = relative_error(got, want);
    c.sensitivity = sensitivity.at(o.name);
    // A bool output may flip where an f32 and a float64 value straddle a threshold.
    c.tolerance = t.dtype == DType::F32 ? 1e-6 : 1e-2;
    c.allowed = std::max(c.tolerance, kSensitivityFactor * c.sensitivity);
    locate_errors(got, want, g.node(o.node).shape, &c);
    c.ill_conditioned = !(c.allowed <= kJudgeable);
    // Unjudged, an output still fails for a NaN or inf that the noisy reference does not give.
    bool judged_ok = c.ill_conditioned ? std::isfinite(c.rel_err) || !std::isfinite(c.sensitivity)
                                       : c.rel_err <= c.allowed;
    c.ok = c.unwritten == 0 && judged_ok;
    r.max_rel_err = std::max(r.max_rel_err, c.rel_err);
    r.unwritten += c.unwritten;
    r.ok &= c.ok;
    r.ill_conditioned |= c.ill_conditioned;
    r.outputs.push_back(c);
  }
  return r;
}

std::string CheckReport::text() const {
  std::string s;
  for (const OutputCheck& c : outputs) {
    s += fmt::format("  output {}: relative error {:.3e} (tolerance {:.0e}", c.name, c.rel_err, c.tolerance);
    if (c.allowed > c.tolerance)
      s += fmt::format("; f32 arithmetic moves it {:.3e}, so {:.3e} is allowed", c.sensitivity, c.allowed);
    s += ")";
    if (c.ill_conditioned) s += " — ill-conditioned: f32 arithmetic alone moves it too far to judge";
    if (c.unwritten) s += fmt::format(" — {} elements never written", c.unwritten);
    if (!c.ok) s += " FAILED";
    s += "\n";
    if (!c.ok && !c.worst_at.empty())
      s += fmt::format("    {} elements off by more than {:.0e} of the reference's rms; the worst at [{}]: {:.6g} against {:.6g}\n",
                       c.off, c.allowed, fmt::join(c.worst_at, ", "), c.worst_got, c.worst_want);
  }
  return s;
}

}  // namespace tilefuse
