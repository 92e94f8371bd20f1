#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "compiler/fusion/cost_model.h"
#include "compiler/graph/reference.h"
#include "runtime/cuda_driver.h"
#include "runtime/executable.h"

namespace tilefuse::testing {

void check_plan_invariants(const Plan& p) {
  const Graph& g = p.graph;
  std::map<NodeId, int> computed_in, written_by;
  std::set<NodeId> available;
  for (NodeId id : g.inputs()) available.insert(id);
  int64_t bytes = 0;
  for (size_t ki = 0; ki < p.kernels.size(); ++ki) {
    const Kernel& k = p.kernels[ki];
    std::set<NodeId> members(k.nodes.begin(), k.nodes.end());
    for (NodeId n : k.nodes) computed_in[n]++;
    for (NodeId in : k.inputs) {
      EXPECT_TRUE(available.count(in)) << k.name << " reads %" << in << " before it is written";
      EXPECT_FALSE(members.count(in));
    }
    for (NodeId n : k.nodes)
      for (NodeId o : g.node(n).operands)
        EXPECT_TRUE(members.count(o) || g.node(o).op == Op::Constant ||
                    std::count(k.inputs.begin(), k.inputs.end(), o))
            << k.name << ": operand %" << o << " of %" << n << " is neither computed nor read";
    for (NodeId o : k.outputs) {
      EXPECT_TRUE(members.count(o));
      Shape s = aligned_shape(g, o, k.domain, k.split);
      if (k.kind == ScheduleKind::Pointwise) {
        EXPECT_EQ(s, k.domain);
      } else {  // the full row domain, or one value per row
        Shape per_row = k.domain;
        for (size_t d = static_cast<size_t>(k.split); d < per_row.size(); ++d) per_row[d] = 1;
        EXPECT_TRUE(s == k.domain || s == per_row) << "%" << o << " " << shape_str(s);
      }
      EXPECT_EQ(written_by.count(o), 0u) << "%" << o << " written twice";
      written_by[o] = static_cast<int>(ki);
      available.insert(o);
    }
    int64_t kb = 0;
    for (NodeId in : k.inputs) kb += num_elements(g.node(in).shape) * dtype_size(g.node(in).dtype);
    EXPECT_EQ(kb, k.cost.bytes_read) << k.name;
    int64_t wb = 0;
    for (NodeId o : k.outputs) wb += num_elements(g.node(o).shape) * dtype_size(g.node(o).dtype);
    EXPECT_EQ(wb, k.cost.bytes_written) << k.name;
    bytes += k.cost.bytes();
  }
  EXPECT_EQ(bytes, p.fused.bytes);
  EXPECT_EQ(static_cast<int>(p.kernels.size()), p.fused.kernels);
  std::set<NodeId> dead(p.dead.begin(), p.dead.end());
  for (const Node& n : g.nodes()) {
    if (n.op == Op::Input || n.op == Op::Constant) continue;
    if (dead.count(n.id)) {
      EXPECT_EQ(computed_in[n.id], 0) << "dead %" << n.id << " is computed";
      continue;
    }
    EXPECT_GE(computed_in[n.id], 1) << "%" << n.id << " is computed by no kernel";
    if (computed_in[n.id] > 1) {
      EXPECT_FALSE(written_by.count(n.id)) << "duplicated %" << n.id << " is also written";
    }
  }
  for (const GraphOutput& o : g.outputs()) {
    if (g.node(o.node).op != Op::Input && g.node(o.node).op != Op::Constant) {
      EXPECT_TRUE(written_by.count(o.node)) << "output " << o.name << " is never written";
    }
  }
}

void check_on_gpu(const Plan& p, uint64_t seed) {
  Executable exe(p);
  TensorMap inputs = random_inputs(p.graph, seed);
  TensorMap outs = exe.run(inputs);
  auto ref = reference_run(p.graph, inputs);
  for (const GraphOutput& o : p.graph.outputs()) {
    const TensorData& t = outs.at(o.name);
    EXPECT_EQ(count_unwritten(t), 0) << p.graph.name() << " output " << o.name;
    double err = relative_error(t.to_doubles(), ref.at(o.name));
    // A bool output may flip where a float64 and an f32 value straddle a threshold: rare, bounded by 1e-2.
    double tol = t.dtype == DType::F32 ? 1e-6 : 1e-2;
    EXPECT_LE(err, tol) << p.graph.name() << " output " << o.name << " seed " << seed;
  }
}

bool gpu_available() { return cuda::available(); }

}  // namespace tilefuse::testing
