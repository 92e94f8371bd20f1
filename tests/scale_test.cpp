// Planning and compiling grow near-linearly with the graph: a pointwise chain of 1,000 to
// 4,000 nodes (one kernel), timed and printed. The bounds are loose — a shared CI machine's
// clock is no benchmark — but a quadratic pass (4,000 nodes planned in seconds, as before
// decisions stopped copying the planning state) fails them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"

namespace tilefuse {
namespace {
using namespace dsl;

Graph chain(int nodes) {
  Graph g("chain_" + std::to_string(nodes));
  Tensor x = input(g, "x", {4096, 4096});
  Tensor t = x;
  while (static_cast<int>(g.nodes().size()) < nodes) {
    switch (g.nodes().size() % 5) {
      case 0:
        t = t * x;
        break;
      case 1:
        t = t + 0.5;
        break;
      case 2:
        t = max(t, x);
        break;
      case 3:
        t = t - x;
        break;
      default:
        t = abs(t);
    }
  }
  output("y", t);
  return g;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(Scale, LongChainsPlanAndCompileNearLinearly) {
  std::map<int, double> plan_s, compile_s;
  for (int n : {1000, 2000, 4000}) {
    Graph g = chain(n);
    auto t0 = std::chrono::steady_clock::now();
    Plan p = plan_fusion(g);
    plan_s[n] = seconds_since(t0);
    ASSERT_EQ(p.kernels.size(), 1u);
    size_t producers = 0;  // every computed node but the last is weighed once
    for (const Node& node : g.nodes()) producers += node.op != Op::Input && node.op != Op::Constant;
    EXPECT_EQ(p.decisions.size(), producers - 1);
    t0 = std::chrono::steady_clock::now();
    for (const Kernel& k : p.kernels) compile_kernel(p.graph, k);
    compile_s[n] = seconds_since(t0);
    std::printf("[  scale   ] %d-node chain: planned in %.1f ms, compiled in %.2f s\n", n, plan_s[n] * 1e3,
                compile_s[n]);
  }
  EXPECT_LT(plan_s[4000], 0.5);  // 14.9 s when each decision copied the planning state
  // Doubling the chain twice: linear growth is 4×, quadratic 16×.
  EXPECT_LT(plan_s[4000], 8 * plan_s[1000] + 0.02);
  EXPECT_LT(compile_s[4000], 8 * compile_s[1000]);
}

}  // namespace
}  // namespace tilefuse
