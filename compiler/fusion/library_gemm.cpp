#include "compiler/fusion/library_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "compiler/fusion/cost_model.h"

namespace tilefuse {

namespace {

int64_t tensor_bytes(const Node& n) { return num_elements(n.shape) * static_cast<int64_t>(dtype_size(n.dtype)); }

// The library GEMM alone: its flops at the measured rate, stretched by the last wave's empty SMs
// (tiles of 128×256, the shape cuBLAS takes for large bf16 GEMMs on the H200), or its operands'
// and product's bytes at copy bandwidth; plus a launch.
double library_gemm_s(const Graph& g, const Node& mm, int64_t extra_bytes, const DeviceProfile& p) {
  const Shape& c = mm.shape;
  const int64_t m = c[c.size() - 2], n = c.back();
  const int64_t batch = num_elements(c) / (m * n);
  const Node& a = g.node(mm.operands[0]);
  const int64_t k = mm.transpose_a ? a.shape[a.shape.size() - 2] : a.shape.back();
  const double flops = 2.0 * static_cast<double>(batch * m * n) * static_cast<double>(k);
  const int64_t tiles = batch * ((m + 127) / 128) * ((n + 255) / 256);
  const int64_t waves = (tiles + p.sm_count - 1) / p.sm_count;
  const double fill = static_cast<double>(tiles) / static_cast<double>(waves * p.sm_count);
  const int64_t bytes = tensor_bytes(a) + tensor_bytes(g.node(mm.operands[1])) + tensor_bytes(mm) + extra_bytes;
  return std::max(flops / (p.bf16_matmul_flops * fill), static_cast<double>(bytes) / p.hbm_bytes_per_s) + p.launch_s;
}

// E as cuBLASLt can run it: optional casts around a bias add (a row vector over the product's
// columns), then optionally ReLU or tanh GELU, the last one written. Empty `why` when it fits;
// `bias_bytes` the bias it reads.
bool native_epilogue(const Graph& g, const Kernel& k, const Node& mm, int64_t* bias_bytes, std::string* why) {
  std::vector<NodeId> chain;
  for (NodeId n : k.nodes)
    if (n != mm.id && g.node(n).op != Op::Cast) chain.push_back(n);
  if (chain.empty()) {
    *why = "the kernel has no epilogue to fold in";
    return false;
  }
  for (NodeId o : k.outputs)
    if (o != chain.back() && !(g.node(o).op == Op::Cast && g.node(o).operands[0] == chain.back())) {
      *why = fmt::format("it also writes %{} (cuBLASLt's epilogue writes one result)", o);
      return false;
    }
  const Node& first = g.node(chain[0]);
  if (first.op != Op::Add || chain.size() > 2) {
    *why = "its epilogue is not a bias add with at most one activation after it";
    return false;
  }
  for (NodeId o : first.operands) {
    const Node& b = g.node(o);
    if (o == mm.id || (b.op == Op::Cast && b.operands[0] == mm.id)) continue;
    if (b.shape.empty() || num_elements(b.shape) != b.shape.back() || b.shape.back() != mm.shape.back()) {
      *why = fmt::format("its add's other operand {} is not a bias over the product's columns", shape_str(b.shape));
      return false;
    }
    *bias_bytes = tensor_bytes(b);
  }
  if (chain.size() == 2) {
    const Node& a = g.node(chain[1]);
    const NodeId in = a.operands[0];
    if (in != chain[0] && !(g.node(in).op == Op::Cast && g.node(in).operands[0] == chain[0])) {
      *why = "its epilogue is not one chain";
      return false;
    }
    const Op act = a.op;
    if (act == Op::Gelu) {
      *why = "its GELU is the erf form; cuBLASLt's GELU epilogue is the tanh approximation";
      return false;
    }
    if (act != Op::Relu && act != Op::GeluTanh) {
      *why = fmt::format("cuBLASLt has no {} epilogue", op_info(act).name);
      return false;
    }
  }
  return true;
}

// (i): the library writes the product; the rest of the kernel's nodes run as one kernel reading
// it (nullopt when they cannot: the reason in why).
std::optional<double> epilogue_kernel_s(const Plan& plan, const Kernel& k, const Node& mm, std::string* why) {
  const Graph& g = plan.graph;
  std::vector<NodeId> nodes;
  for (NodeId n : k.nodes)
    if (n != mm.id) nodes.push_back(n);
  if (nodes.empty()) return 0.0;
  std::vector<NodeId> outputs;
  for (NodeId o : k.outputs)
    if (o != mm.id) outputs.push_back(o);
  std::optional<Kernel> e = build_kernel(g, nodes, outputs, plan.options.profile, plan.options.schedule, why);
  if (!e) return std::nullopt;
  return e->cost.predicted_s;
}

}  // namespace

std::vector<GemmChoice> price_library_gemm(const Plan& plan) {
  const Graph& g = plan.graph;
  const DeviceProfile& p = plan.options.profile;
  std::vector<GemmChoice> out;
  for (const Kernel& k : plan.kernels) {
    if (k.kind != ScheduleKind::MatMul) continue;
    const Node& mm = g.node(contraction(g, k));
    GemmChoice c;
    c.kernel = k.name;
    c.matmul = mm.id;
    const bool epilogue = k.nodes.size() > 1;
    GemmOption lib;
    lib.name = epilogue ? "cuBLASLt GEMM, then the epilogue as its own kernel" : "cuBLASLt GEMM";
    std::string why;
    if (std::optional<double> e = epilogue_kernel_s(plan, k, mm, &why)) {
      lib.predicted_s = library_gemm_s(g, mm, 0, p) + *e;
    } else {
      lib.applies = false;
      lib.why_not = why;
    }
    GemmOption native;
    native.name = "cuBLASLt GEMM with its native epilogue";
    int64_t bias_bytes = 0;
    why.clear();
    if (native_epilogue(g, k, mm, &bias_bytes, &why)) {
      native.predicted_s = library_gemm_s(g, mm, bias_bytes, p);
    } else {
      native.applies = false;
      native.why_not = why;
    }
    GemmOption own;
    own.name = epilogue ? "tilefuse's GEMM with the epilogue fused" : "tilefuse's GEMM";
    own.predicted_s = k.cost.predicted_s;
    c.options = {lib, native, own};
    size_t fastest = 2;
    for (size_t i = 0; i < c.options.size(); ++i)
      if (c.options[i].applies && c.options[i].predicted_s < c.options[fastest].predicted_s) fastest = i;
    if (!kLibraryGemmRuns && fastest != 2) {
      c.chosen = 2;
      c.lost_s = own.predicted_s - c.options[fastest].predicted_s;
      c.note = "the runtime has no cuBLASLt path yet, so the plan keeps its own GEMM";
    } else {
      c.chosen = static_cast<int>(fastest);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace tilefuse
