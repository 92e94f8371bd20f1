// Seeded random pointwise graphs: shapes with broadcasting, mixed ops, several outputs. Plan
// invariants everywhere; PTX through ptxas; on a GPU, results against the reference.
#include <gtest/gtest.h>

#include <random>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {
using namespace dsl;

// Ops whose f32 result stays within the f32 tolerance of the float64 reference for any finite
// operands the generator produces (arguments are kept in range where an op needs it).
Tensor random_unary(std::mt19937_64& rng, const Tensor& x) {
  switch (std::uniform_int_distribution<int>(0, 13)(rng)) {
    case 12:
      return softmax(x, -1);
    case 13:
      return x * rsqrt(mean(x * x, {-1}, true) + 1.0);
    case 0:
      return -x;
    case 1:
      return abs(x);
    case 2:
      return exp(tanh(x));
    case 3:
      return log(abs(x) + 0.5);
    case 4:
      return sqrt(abs(x));
    case 5:
      return rsqrt(abs(x) + 0.25);
    case 6:
      return tanh(x);
    case 7:
      return erf(x);
    case 8:
      return sigmoid(x);
    case 9:
      return relu(x);
    case 10:
      return gelu(x);
    default:
      return gelu(x, GeluApprox::Tanh);
  }
}

Tensor random_binary(std::mt19937_64& rng, const Tensor& a, const Tensor& b) {
  switch (std::uniform_int_distribution<int>(0, 7)(rng)) {
    case 0:
      return a + b;
    case 1:
      return a - b;
    case 2:
      return a * b;
    case 3:
      return a / (abs(b) + 1.0);
    case 4:
      return max(a, b);
    case 5:
      return min(a, b);
    case 6:
      return where(a > b, a, b * 0.5);
    default:
      return pow(abs(a) + 0.5, tanh(b));
  }
}

Graph random_graph(uint64_t seed, DType dtype = DType::F32) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int64_t sizes[] = {1, 3, 8, 17, 64, 130, 256, 1000};
  int rank = pick(1, 3);
  Shape full;
  for (int d = 0; d < rank; ++d) full.push_back(sizes[pick(1, 7)]);
  Graph g("random_" + std::to_string(seed));
  std::vector<Tensor> pool;
  int inputs = pick(1, 4);
  for (int i = 0; i < inputs; ++i) {
    Shape s = full;
    if (i > 0)
      for (auto& d : s)
        if (pick(0, 2) == 0) d = 1;                    // broadcast along this dim
    if (i > 0 && pick(0, 3) == 0) s.erase(s.begin());  // lower rank
    if (s.empty()) s = {1};
    pool.push_back(input(g, "in" + std::to_string(i), s, dtype));
  }
  int ops = pick(2, 10);
  for (int i = 0; i < ops; ++i) {
    const Tensor& a = pool[pick(0, static_cast<int>(pool.size()) - 1)];
    if (pick(0, 1) == 0) {
      pool.push_back(random_unary(rng, a));
    } else {
      const Tensor& b = pool[pick(0, static_cast<int>(pool.size()) - 1)];
      pool.push_back(random_binary(rng, a, b));
    }
  }
  output("out0", pool.back());
  int extra = pick(0, 2);
  for (int i = 0; i < extra; ++i) {
    const Tensor& t = pool[pick(inputs, static_cast<int>(pool.size()) - 1)];
    if (!g.is_output(t.id())) output("out" + std::to_string(i + 1), t);
  }
  return g;
}

TEST(RandomGraphs, PlanInvariants) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Graph g = random_graph(seed);
    Plan fused = plan_fusion(g);
    testing::check_plan_invariants(fused);
    EXPECT_LE(fused.kernels.size(), static_cast<size_t>(fused.unfused.kernels));
    EXPECT_LE(fused.fused.bytes, fused.unfused.bytes);
    FusionOptions off;
    off.fuse = false;
    testing::check_plan_invariants(plan_fusion(g, off));
  }
}

TEST(RandomGraphs, PtxAssembles) {
  if (find_ptxas().empty()) GTEST_SKIP() << "no CUDA toolkit (ptxas) on this machine";
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Plan p = plan_fusion(random_graph(seed, seed % 3 == 0 ? DType::BF16 : DType::F32));
    for (const Kernel& k : p.kernels) {
      auto m = run_ptxas(compile_kernel(p.graph, k).ptx, k.name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0);
    }
  }
}

TEST(RandomGraphs, MatchReferenceOnGpu) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    DType dt = seed % 4 == 0 ? DType::BF16 : seed % 4 == 1 ? DType::F16 : DType::F32;
    testing::check_on_gpu(plan_fusion(random_graph(seed, dt)), seed * 7919);
  }
}

}  // namespace
}  // namespace tilefuse
