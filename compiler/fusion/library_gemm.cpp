#include "compiler/fusion/library_gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "compiler/fusion/cost_model.h"

namespace tilefuse {

namespace {

int64_t tensor_bytes(const Node& n) { return num_elements(n.shape) * static_cast<int64_t>(dtype_size(n.dtype)); }

}  // namespace

double library_flops_rate(const Graph& g, const Kernel& k, const DeviceProfile& p) {
  const Node& mm = g.node(contraction(g, k));
  const TileSchedule& s = k.schedule;
  const int64_t runs[3] = {mm.transpose_a ? s.m : s.k, mm.transpose_b ? s.k : s.n, s.n};
  for (int64_t r : runs)
    if (r % 8 != 0) return p.bf16_matmul_unaligned_flops;
  return p.bf16_matmul_flops;
}

std::string LibraryGemmShape::key() const {
  return fmt::format("{} {}x{}x{}x{} {}{}{}{}", dtype_name(dtype), batch, m, n, k, transpose_a ? "t" : "n",
                     shared_a ? "s" : "", transpose_b ? "t" : "n", shared_b ? "s" : "");
}

LibraryGemmShape library_gemm_shape(const Graph& g, const Node& mm) {
  const Node &a = g.node(mm.operands[0]), &b = g.node(mm.operands[1]);
  LibraryGemmShape s;
  std::tie(s.m, s.k) = matmul_operand_dims(a.shape, mm.transpose_a);
  s.n = mm.shape.back();
  s.batch = num_elements(mm.shape) / (s.m * s.n);
  s.transpose_a = mm.transpose_a;
  s.transpose_b = mm.transpose_b;
  auto batches = [](const Node& o) { return num_elements(o.shape) / (o.shape[o.shape.size() - 2] * o.shape.back()); };
  s.shared_a = s.batch > 1 && batches(a) == 1;
  s.shared_b = s.batch > 1 && batches(b) == 1;
  s.dtype = mm.dtype;
  return s;
}

namespace {

// A library kernel's cost: its flops at the rate measured for its shape on this device, or at
// the profile's rate stretched by the last wave's empty SMs (tiles of 128×256, the shape cuBLAS
// takes for large bf16 GEMMs on the H200); or the bytes of what it reads and writes at copy
// bandwidth; plus a launch.
KernelCost library_cost(const Graph& g, const Kernel& l, const DeviceProfile& p) {
  const TileSchedule& s = l.schedule;
  const int64_t tiles = s.batch * ((s.m + 127) / 128) * ((s.n + 255) / 256);
  const int64_t waves = (tiles + p.sm_count - 1) / p.sm_count;
  const double fill = static_cast<double>(tiles) / static_cast<double>(waves * p.sm_count);
  KernelCost c;
  for (NodeId i : l.inputs) c.bytes_read += tensor_bytes(g.node(i));
  for (NodeId o : l.outputs) c.bytes_written += tensor_bytes(g.node(o));
  c.flops = 2.0 * static_cast<double>(s.batch * s.m * s.n) * static_cast<double>(s.k);
  c.memory_s = static_cast<double>(c.bytes()) / p.hbm_bytes_per_s;
  const auto measured = p.library_gemm_flops.find(library_gemm_shape(g, g.node(contraction(g, l))).key());
  c.compute_s = measured != p.library_gemm_flops.end() ? c.flops / measured->second
                                                       : c.flops / (library_flops_rate(g, l, p) * fill);
  c.predicted_s = std::max(c.memory_s, c.compute_s) + p.launch_s;
  c.blocks_per_sm = 1;
  return c;
}

// E as cuBLASLt can run it: a bias add (a row vector over the product's columns, of its dtype),
// then optionally ReLU or tanh GELU, the last one written, nothing changing the dtype. `kind`
// when it fits, else `why`.
bool native_epilogue(const Graph& g, const Kernel& k, const Node& mm, LibraryEpilogue* kind, std::string* why) {
  std::vector<NodeId> chain;
  for (NodeId n : k.nodes) {
    if (n == mm.id) continue;
    if (g.node(n).op == Op::Cast || g.node(n).dtype != mm.dtype) {
      *why = fmt::format("its epilogue changes the dtype (%{}); cuBLASLt's writes the product's", n);
      return false;
    }
    chain.push_back(n);
  }
  if (chain.empty()) {
    *why = "the kernel has no epilogue to fold in";
    return false;
  }
  for (NodeId o : k.outputs)
    if (o != chain.back()) {
      *why = fmt::format("it also writes %{} (cuBLASLt's epilogue writes one result)", o);
      return false;
    }
  const Node& first = g.node(chain[0]);
  if (first.op != Op::Add || chain.size() > 2) {
    *why = "its epilogue is not a bias add with at most one activation after it";
    return false;
  }
  if (first.operands[0] != mm.id && first.operands[1] != mm.id) {
    *why = "its add does not take the product";
    return false;
  }
  for (NodeId o : first.operands) {
    const Node& b = g.node(o);
    if (o == mm.id) continue;
    if (b.op == Op::Constant || b.shape.empty() || num_elements(b.shape) != b.shape.back() ||
        b.shape.back() != mm.shape.back() || b.dtype != mm.dtype) {
      *why = fmt::format("its add's other operand {} is not a bias over the product's columns", shape_str(b.shape));
      return false;
    }
  }
  *kind = LibraryEpilogue::Bias;
  if (chain.size() == 2) {
    const Node& a = g.node(chain[1]);
    if (a.operands[0] != chain[0]) {
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
    *kind = act == Op::Relu ? LibraryEpilogue::BiasRelu : LibraryEpilogue::BiasGeluTanh;
  }
  return true;
}

// (i): the library writes the product; the rest of the kernel's nodes run as one kernel reading
// it. Nullopt when they cannot (the reason in why) or when there is no rest (no reason).
std::optional<Kernel> epilogue_kernel(const Plan& plan, const Kernel& k, const Node& mm, std::string* why) {
  const Graph& g = plan.graph;
  std::vector<NodeId> nodes;
  for (NodeId n : k.nodes)
    if (n != mm.id) nodes.push_back(n);
  if (nodes.empty()) return std::nullopt;
  std::vector<NodeId> outputs;
  for (NodeId o : k.outputs)
    if (o != mm.id) outputs.push_back(o);
  return build_kernel(g, nodes, outputs, plan.options.profile, plan.options.schedule, why);
}

// Why the library cannot read matmul mm's operands: one is broadcast along some of the product's
// batch axes but not others (grouped-query attention's K and V); empty where it can.
std::string partial_broadcast(const Graph& g, const Node& mm) {
  const Shape batch(mm.shape.begin(), mm.shape.end() - 2);
  for (NodeId o : mm.operands) {
    const Shape& sh = g.node(o).shape;
    const int64_t own = num_elements(Shape(sh.begin(), sh.end() - 2));
    if (own != 1 && own != num_elements(batch))
      return fmt::format("its operand %{} {} is broadcast along some of the batch axes {} but not others: cuBLASLt's "
                         "strided batches read an operand per batch or shared by all",
                         o, shape_str(sh), shape_str(batch));
  }
  return "";
}

// Why the library is not asked for matmul mm's dtypes: runtime/cublaslt.h runs bf16 or f16
// operands into a product of the same dtype; empty where it is.
std::string library_dtypes(const Graph& g, const Node& mm) {
  const DType a = g.node(mm.operands[0]).dtype, b = g.node(mm.operands[1]).dtype;
  if ((a == DType::BF16 || a == DType::F16) && b == a && mm.dtype == a) return "";
  return fmt::format("it multiplies {} by {} into {}: tilefuse asks cuBLASLt for bf16 or f16 operands and a product "
                     "of that dtype",
                     dtype_name(a), dtype_name(b), dtype_name(mm.dtype));
}

// The library kernel computing matmul `mm` (and, with a native epilogue, the rest of k).
Kernel library_kernel(const Graph& g, const Kernel& k, const Node& mm, std::optional<LibraryEpilogue> native,
                      const DeviceProfile& p) {
  Kernel l = k;
  l.library = native ? *native : LibraryEpilogue::None;
  if (!native) {  // the product alone; the epilogue kernel reads it
    l.nodes = {mm.id};
    l.inputs.clear();
    for (NodeId o : mm.operands)
      if (std::find(l.inputs.begin(), l.inputs.end(), o) == l.inputs.end()) l.inputs.push_back(o);
    std::sort(l.inputs.begin(), l.inputs.end());
    l.outputs = {mm.id};
  }
  l.cost = library_cost(g, l, p);
  return l;
}

// The three options for matmul kernel k, with the kernels options (i) and (ii) would run where
// they apply: the library's and the epilogue's, and the library's with its native epilogue.
GemmChoice price(const Plan& plan, const Kernel& k, std::vector<Kernel>* with_epilogue, Kernel* native_kernel) {
  const Graph& g = plan.graph;
  const DeviceProfile& p = plan.options.profile;
  const Node& mm = g.node(contraction(g, k));
  GemmChoice c;
  c.kernel = k.name;
  c.matmul = mm.id;
  const bool epilogue = k.nodes.size() > 1;
  GemmOption lib;
  lib.name = epilogue ? "cuBLASLt GEMM, then the epilogue as its own kernel" : "cuBLASLt GEMM";
  std::string why;
  std::optional<Kernel> e = epilogue_kernel(plan, k, mm, &why);
  // Why neither library option applies: cuBLASLt's strided batches read an operand per batch or
  // one shared by all, and it is asked for one 16-bit dtype.
  const std::string unreadable = library_cannot_run(g, mm);
  if (!unreadable.empty()) {
    lib.applies = false;
    lib.why_not = unreadable;
  } else if (epilogue && !e) {
    lib.applies = false;
    lib.why_not = why;
  } else {
    *with_epilogue = {library_kernel(g, k, mm, std::nullopt, p)};
    if (e) with_epilogue->push_back(*e);
    for (const Kernel& x : *with_epilogue) lib.predicted_s += x.cost.predicted_s;
  }
  GemmOption native;
  native.name = "cuBLASLt GEMM with its native epilogue";
  LibraryEpilogue kind = LibraryEpilogue::None;
  why.clear();
  if (!unreadable.empty()) {
    native.applies = false;
    native.why_not = unreadable;
  } else if (native_epilogue(g, k, mm, &kind, &why)) {
    *native_kernel = library_kernel(g, k, mm, kind, p);
    native.predicted_s = native_kernel->cost.predicted_s;
  } else {
    native.applies = false;
    native.why_not = why;
  }
  GemmOption own;
  own.name = epilogue ? "tilefuse's GEMM with the epilogue fused" : "tilefuse's GEMM";
  own.predicted_s = k.cost.predicted_s;
  c.options = {lib, native, own};
  return c;
}

}  // namespace

std::string library_cannot_run(const Graph& g, const Node& mm) {
  const std::string why = partial_broadcast(g, mm);
  return why.empty() ? library_dtypes(g, mm) : why;
}

const char* library_epilogue_name(LibraryEpilogue e) {
  switch (e) {
    case LibraryEpilogue::None:
      return "none";
    case LibraryEpilogue::Bias:
      return "bias";
    case LibraryEpilogue::BiasRelu:
      return "bias + relu";
    case LibraryEpilogue::BiasGeluTanh:
      return "bias + gelu (tanh)";
  }
  return "?";
}

void price_library_gemm(Plan& plan) {
  std::vector<Kernel> kernels;
  plan.gemm_choices.clear();
  for (const Kernel& k : plan.kernels) {
    if (k.kind != ScheduleKind::MatMul || k.library) {
      kernels.push_back(k);
      continue;
    }
    std::vector<Kernel> with_epilogue;
    Kernel native_kernel;
    GemmChoice c = price(plan, k, &with_epilogue, &native_kernel);
    // The library's faster option (at a tie its native epilogue: one kernel), taken wherever it is
    // predicted no slower than the own kernel — at a tie (a memory-bound product, both at copy
    // bandwidth in the model) cuBLASLt streams its operands faster than the own kernel's cp.async
    // (attention's backward dV: 2.08 against 2.42 ms; bench/NOTES.md) — or always, where asked.
    const size_t library =
        c.options[1].applies && (!c.options[0].applies || c.options[1].predicted_s <= c.options[0].predicted_s) ? 1 : 0;
    const LibraryGemmUse use = plan.options.library_gemm;
    const std::string& missing = plan.options.profile.library_gemm_missing;
    const size_t fastest =
        c.options[library].applies &&
                (use == LibraryGemmUse::Always || c.options[library].predicted_s <= c.options[2].predicted_s)
            ? library
            : 2;
    if (fastest != 2 && (use == LibraryGemmUse::Never || !missing.empty())) {
      c.chosen = 2;
      c.lost_s = c.options[2].predicted_s - c.options[fastest].predicted_s;
      c.note = missing.empty() ? "cuBLASLt is not chosen: the plan was asked for tilefuse's GEMM only (--library-gemm never)"
                               : "cuBLASLt is not available here (" + missing + ")";
    } else {
      c.chosen = static_cast<int>(fastest);
    }
    if (c.chosen == 0) kernels.insert(kernels.end(), with_epilogue.begin(), with_epilogue.end());
    else kernels.push_back(c.chosen == 1 ? native_kernel : k);
    plan.gemm_choices.push_back(std::move(c));
  }
  if (plan.options.library_gemm != LibraryGemmUse::Never) {
    // Kernels renamed in their new order; the totals follow.
    const std::string base =
        plan.kernels.empty() ? "" : plan.kernels[0].name.substr(0, plan.kernels[0].name.rfind("_k"));
    std::map<std::string, std::string> renamed;
    for (size_t i = 0; i < kernels.size(); ++i) {
      const std::string name = fmt::format("{}_k{}", base, i);
      renamed.emplace(kernels[i].name, name);  // a split kernel's library half keeps the old name first
      kernels[i].name = name;
    }
    for (GemmChoice& c : plan.gemm_choices)
      if (renamed.count(c.kernel)) c.kernel = renamed.at(c.kernel);
    plan.kernels = std::move(kernels);
    plan.fused = {static_cast<int>(plan.kernels.size()), 0, 0};
    for (const Kernel& k : plan.kernels) {
      plan.fused.bytes += k.cost.bytes();
      plan.fused.predicted_s += k.cost.predicted_s;
    }
  }
  // A matmul fused with what follows it into a matmul kernel tilefuse generates gives up the
  // library (an attention kernel's products are its loop: no library GEMM computes them).
  std::set<NodeId> own_gemm;
  for (const Kernel& k : plan.kernels)
    if (k.kind == ScheduleKind::MatMul && !k.library) own_gemm.insert(contraction(plan.graph, k));
  for (FusionDecision& d : plan.decisions)
    d.library_gemm_lost = d.verdict != Verdict::Materialized && own_gemm.count(d.producer);
}

}  // namespace tilefuse
