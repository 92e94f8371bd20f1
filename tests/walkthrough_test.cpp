// The running-softmax walk-through against numbers worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/tile/softmax_walkthrough.h"
#include "runtime/executable.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {

TEST(Walkthrough, LargeLastEntry) {
  // Tile 0 = [1, 2]: m = 2, s = e^−1 + e^0 = 1.36787944.
  // Tile 1 = [3, 1000]: m' = 1000, rescale e^(2−1000) = 0, s = 0 + e^−997 + e^0 = 1.
  SoftmaxWalkthrough w = walk_online_softmax({1, 2, 3, 1000}, 2);
  ASSERT_EQ(w.steps.size(), 2u);
  EXPECT_EQ(w.steps[0].max_after, 2.0f);
  EXPECT_NEAR(w.steps[0].sum_after, 1.36787944f, 1e-6);
  EXPECT_TRUE(std::isnan(w.steps[0].rescale));  // nothing to rescale yet
  EXPECT_EQ(w.steps[1].max_after, 1000.0f);
  EXPECT_EQ(w.steps[1].rescale, 0.0f);
  EXPECT_EQ(w.steps[1].sum_after, 1.0f);
  EXPECT_EQ(w.probabilities, (std::vector<float>{0, 0, 0, 1}));
}

TEST(Walkthrough, MaskedEntries) {
  // Tile 0 = [−inf, 1]: m = 1, s = 0 + 1 = 1. Tile 1 = [−inf, 2]: rescale e^(1−2) = 0.36787944,
  // s = 0.36787944 + 1; p = [0, e^−1, 0, 1] / 1.36787944 = [0, 0.26894142, 0, 0.73105858].
  const float inf = INFINITY;
  SoftmaxWalkthrough w = walk_online_softmax({-inf, 1, -inf, 2}, 2);
  EXPECT_NEAR(w.steps[1].rescale, 0.36787944f, 1e-7);
  EXPECT_NEAR(w.sum, 1.36787944f, 1e-6);
  EXPECT_EQ(w.probabilities[0], 0.0f);
  EXPECT_NEAR(w.probabilities[1], 0.26894142f, 1e-7);
  EXPECT_NEAR(w.probabilities[3], 0.73105858f, 1e-7);
}

TEST(Walkthrough, FullyMaskedRowIsZero) {
  const float inf = INFINITY;
  SoftmaxWalkthrough w = walk_online_softmax({-inf, -inf, -inf}, 2);
  EXPECT_EQ(w.sum, 0.0f);
  for (float p : w.probabilities) EXPECT_EQ(p, 0.0f);
}

TEST(Walkthrough, KernelGivesTheSameNumbers) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const float inf = INFINITY;
  for (std::vector<float> row :
       {std::vector<float>{1, 2, 3, 1000}, std::vector<float>{-inf, 1, -inf, 2},
        std::vector<float>{-inf, -inf, -inf, -inf}, std::vector<float>{0.5f, -3, 7, 7.25f, 1e4f}}) {
    Graph g("walk");
    int64_t n = static_cast<int64_t>(row.size());
    output("y", dsl::softmax(dsl::input(g, "x", {1, n}), -1));
    Executable exe(plan_fusion(g));
    TensorMap in;
    in["x"] = TensorData::from_doubles(DType::F32, {1, n}, std::vector<double>(row.begin(), row.end()));
    std::vector<double> gpu = exe.run(in).at("y").to_doubles();
    SoftmaxWalkthrough w = walk_online_softmax(row, 2);
    for (size_t i = 0; i < row.size(); ++i) EXPECT_NEAR(gpu[i], w.probabilities[i], 1e-7) << i;
  }
}

}  // namespace
}  // namespace tilefuse
