#include "runtime/host_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "compiler/graph/reference.h"
#include "compiler/support/error.h"
#include "compiler/tile/build.h"
#include "compiler/tile/interpret.h"
#include "compiler/tile/pitch_copy.h"
#include "runtime/executable.h"

namespace tilefuse {
namespace {

// Kernel k's program, or why it has none the interpreter runs (a cuBLASLt kernel has none, and
// needs none: library_kernel).
std::optional<tir::Program> program_of(const Graph& g, const Kernel& k, std::string* why) {
  tir::Program p = tir::build_program(g, k);
  if (std::string op = tir::not_interpretable(p); !op.empty()) {
    *why = fmt::format("kernel {} has {}", k.name, op);
    return std::nullopt;
  }
  return p;
}

tir::HostArg arg_of(TensorData& t) { return {t.bytes.data(), t.bytes.size()}; }

// A cuBLASLt kernel (not tilefuse's code) stood in for by the float64 reference of its nodes
// over the inputs it reads, each node rounded to its dtype: the rest of the plan is then checked
// on what the library's math gives.
void library_kernel(const Graph& g, const Kernel& k, std::map<NodeId, TensorData>& memory) {
  Graph sub(k.name);
  TensorMap inputs;
  std::map<NodeId, NodeId> local;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    Node in = g.node(k.inputs[i]);
    in.op = Op::Input;
    in.operands.clear();
    in.name = fmt::format("in{}", i);
    local[k.inputs[i]] = sub.append(in);
    inputs[in.name] = memory.at(storage_of(g, k.inputs[i]));
  }
  for (NodeId id : k.nodes) {
    Node n = g.node(id);
    for (NodeId& o : n.operands) {
      if (!local.count(o)) local[o] = sub.append(g.node(o));  // (a constant)
      o = local.at(o);
    }
    local[id] = sub.append(n);
  }
  for (size_t j = 0; j < k.outputs.size(); ++j) sub.add_output(fmt::format("out{}", j), local.at(k.outputs[j]));
  const std::map<std::string, std::vector<double>> out = reference_run(sub, inputs);
  for (size_t j = 0; j < k.outputs.size(); ++j) {
    const Node& o = g.node(k.outputs[j]);
    memory.at(storage_of(g, o.id)) = TensorData::from_doubles(o.dtype, o.shape, out.at(fmt::format("out{}", j)));
  }
}

// An operand copied into its padded pitch, as the runtime's copy kernel does before each launch.
TensorData padded_operand(const tir::OperandCopy& c, TensorData& operand) {
  TensorData copy = TensorData::zeros(c.dtype, {c.rows, c.pitch});
  std::fill(copy.bytes.begin(), copy.bytes.end(), kPoisonByte);
  tir::interpret(c.program(), {arg_of(operand), arg_of(copy)});
  return copy;
}

}  // namespace

std::string host_run_refusal(const Plan& plan) {
  for (const Kernel& k : plan.kernels) {
    std::string why;
    if (!k.library && !program_of(plan.graph, k, &why)) return why;
  }
  return "";
}

TensorMap run_on_host(const Plan& plan, const TensorMap& inputs, const HostRunOptions& options) {
  const Graph& g = plan.graph;
  check_inputs(g, inputs);
  std::map<NodeId, TensorData> memory;  // graph inputs and kernel outputs, each at its storage
  for (NodeId id : g.inputs()) memory[id] = inputs.at(g.node(id).name);
  for (const Kernel& k : plan.kernels)
    for (NodeId o : k.outputs)
      if (storage_of(g, o) == o) {
        TensorData t = TensorData::zeros(g.node(o).dtype, g.node(o).shape);
        std::fill(t.bytes.begin(), t.bytes.end(), kPoisonByte);
        memory[o] = std::move(t);
      }
  for (const Kernel& k : plan.kernels) {
    if (k.library) {
      library_kernel(g, k, memory);
      continue;
    }
    std::string why;
    std::optional<tir::Program> p = program_of(g, k, &why);
    if (!p) throw UnsupportedError(fmt::format("the plan cannot run on the host: {}", why));
    std::vector<tir::HostArg> args;
    for (NodeId i : k.inputs) args.push_back(arg_of(memory.at(storage_of(g, i))));
    const std::vector<tir::OperandCopy> operand_copies = tir::operand_copies(g, k);
    std::vector<TensorData> copies;  // (reserved: args point into them)
    copies.reserve(operand_copies.size());
    for (const tir::OperandCopy& c : operand_copies) {
      copies.push_back(padded_operand(c, memory.at(storage_of(g, k.inputs[c.input]))));
      args[c.input] = arg_of(copies.back());
    }
    for (NodeId o : k.outputs) args.push_back(arg_of(memory.at(storage_of(g, o))));
    std::vector<uint8_t> workspace(static_cast<size_t>(k.schedule.workspace_bytes()), 0);  // zero at the first launch
    if (p->params.size() > args.size()) args.push_back({workspace.data(), workspace.size()});
    int64_t blocks = p->grid.at(0);
    if (k.schedule.stages > 0 && !k.schedule.contracts) {
      const int64_t cluster = p->cluster_blocks;
      blocks = std::min(blocks, std::max(options.persistent_blocks / cluster, int64_t{1}) * cluster);
      // (A split row's parts wait for each other: a row's parts on blocks of their own.)
      if (k.schedule.split_blocks > 1) blocks = std::min(p->grid.at(0), std::max<int64_t>(blocks, k.schedule.split_blocks));
    }
    tir::interpret(*p, args, blocks);
  }
  TensorMap out;
  for (const GraphOutput& o : g.outputs()) {
    const Node& n = g.node(o.node);
    if (n.op == Op::Input)
      out[o.name] = inputs.at(n.name);
    else if (n.op == Op::Constant)
      out[o.name] = TensorData::from_doubles(n.dtype, n.shape, std::vector<double>(num_elements(n.shape), n.value));
    else
      out[o.name] = memory.at(storage_of(g, o.node));
  }
  return out;
}

}  // namespace tilefuse
