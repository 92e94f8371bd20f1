#include "compiler/fusion/plan_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/iteration_space.h"

namespace tilefuse {

namespace {

int64_t tensor_bytes(const Graph& g, NodeId n) {
  return num_elements(g.node(n).shape) * static_cast<int64_t>(dtype_size(g.node(n).dtype));
}

// The bytes a kernel writes for output n: a write_at's are its value's (the rest of the cache
// stays where it is).
int64_t written_bytes(const Graph& g, NodeId n) {
  return tensor_bytes(g, g.node(n).op == Op::WriteAt ? g.node(n).operands[1] : n);
}

// A kernel's own consistency: what it reads, computes and writes.
void check_kernel(const Graph& g, const Kernel& k, const std::set<NodeId>& available,
                  std::vector<std::string>* out) {
  auto problem = [&](std::string s) { out->push_back(fmt::format("{}: {}", k.name, s)); };
  std::set<NodeId> members(k.nodes.begin(), k.nodes.end());
  for (NodeId in : k.inputs) {
    if (!available.count(in)) problem(fmt::format("reads %{} before any kernel writes it", in));
    if (members.count(in)) problem(fmt::format("reads %{}, which it computes", in));
  }
  for (NodeId n : k.nodes)
    for (NodeId o : g.node(n).operands)
      if (!members.count(o) && g.node(o).op != Op::Constant && o != storage_of(g, n) &&
          std::find(k.inputs.begin(), k.inputs.end(), o) == k.inputs.end())
        problem(fmt::format("operand %{} of %{} is neither computed nor read", o, n));
  if (k.kind == ScheduleKind::RowReduce || k.kind == ScheduleKind::ColumnReduce)
    for (NodeId n : k.nodes) {
      const Node& r = g.node(n);
      if (op_info(r.op).kind == OpKind::Reduce &&
          (g.node(r.operands[0]).shape != k.domain || r.axes.front() != k.split || reduced_end(g, r) != k.reduce_end))
        problem(fmt::format("%{} reduces axes [{}] of {}; the kernel reduces axes {}..{} of {}", n,
                            fmt::join(r.axes, ", "), shape_str(g.node(r.operands[0]).shape), k.split,
                            k.reduce_end - 1, shape_str(k.domain)));
    }
  const Shape per_row = reduced_domain(k);
  for (NodeId o : k.outputs) {
    if (!members.count(o)) problem(fmt::format("writes %{}, which it does not compute", o));
    Shape s = aligned_shape(g, o, k);
    // (An attention backward kernel's outputs are checked by their maps in its iteration space
    // below: dQ, summed in the keys' kernel, has Q's shape, not the domain's, K's.)
    bool fits = s == k.domain || (k.kind != ScheduleKind::Pointwise && s == per_row) ||
                (k.kind == ScheduleKind::Write && g.node(o).op == Op::WriteAt) ||
                k.kind == ScheduleKind::AttentionBackward;
    if (!fits)
      problem(fmt::format("writes %{} of shape {} in a domain {}", o, shape_str(s), shape_str(k.domain)));
  }
  for (const std::string& s : space_problems(g, k, iteration_space(g, k))) problem("iteration space: " + s);
  if (k.schedule.block_threads() > 1024)
    problem(fmt::format("its blocks of {} threads pass a block's 1024", k.schedule.block_threads()));
  int64_t read = 0, written = 0;
  for (NodeId in : k.inputs) read += tensor_bytes(g, in);
  for (NodeId o : k.outputs) written += written_bytes(g, o);
  if (read != k.cost.bytes_read) problem(fmt::format("counts {} bytes read, its inputs have {}", k.cost.bytes_read, read));
  if (written != k.cost.bytes_written)
    problem(fmt::format("counts {} bytes written, its outputs have {}", k.cost.bytes_written, written));
}

}  // namespace

std::vector<std::string> plan_problems(const Plan& p) {
  std::vector<std::string> out;
  const Graph& g = p.graph;
  std::map<NodeId, int> computed_in;
  std::set<NodeId> available, written;
  for (NodeId id : g.inputs()) available.insert(id);
  int64_t bytes = 0;
  for (const Kernel& k : p.kernels) {
    check_kernel(g, k, available, &out);
    for (NodeId n : k.nodes) computed_in[n]++;
    for (NodeId o : k.outputs) {
      if (!written.insert(o).second) out.push_back(fmt::format("%{} is written by two kernels", o));
      available.insert(o);
    }
    bytes += k.cost.bytes();
  }
  if (bytes != p.fused.bytes)
    out.push_back(fmt::format("the plan's total of {} bytes is not its kernels' {}", p.fused.bytes, bytes));
  if (static_cast<int>(p.kernels.size()) != p.fused.kernels)
    out.push_back(fmt::format("the plan counts {} kernels and has {}", p.fused.kernels, p.kernels.size()));
  std::set<NodeId> dead(p.dead.begin(), p.dead.end());
  for (const Node& n : g.nodes()) {
    if (n.op == Op::Input || n.op == Op::Constant) continue;
    int copies = computed_in.count(n.id) ? computed_in.at(n.id) : 0;
    if (dead.count(n.id)) {
      if (copies > 0) out.push_back(fmt::format("dead %{} is computed", n.id));
    } else if (copies == 0) {
      out.push_back(fmt::format("%{} is computed by no kernel", n.id));
    } else if (copies > 1 && written.count(n.id)) {
      out.push_back(fmt::format("%{} is computed by {} kernels and also written", n.id, copies));
    }
  }
  for (const GraphOutput& o : g.outputs()) {
    const Op op = g.node(o.node).op;
    if (op != Op::Input && op != Op::Constant && !written.count(o.node))
      out.push_back(fmt::format("output '{}' (%{}) is never written", o.name, o.node));
  }
  return out;
}

}  // namespace tilefuse
