// Examples on the GPU against the float64 reference: fresh random inputs, poisoned outputs.
#include <chrono>

#include <gtest/gtest.h>

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/support/error.h"
#include "dsl_examples/examples.h"
#include "runtime/executable.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {
using namespace dsl;

uint64_t fresh_seed() {
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

TEST(Gpu, ExamplesMatchReference) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  for (const Example& e : examples()) {
    SCOPED_TRACE(e.name);
    testing::check_on_gpu(plan_fusion(e.build()), fresh_seed());
  }
}

TEST(Gpu, UnfusedPlansMatchReference) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  FusionOptions off;
  off.fuse = false;
  testing::check_on_gpu(plan_fusion(find_example("gelu_two_consumers").build(), off), fresh_seed());
}

TEST(Gpu, EdgeTilesAndBroadcasts) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Graph g("edges");
  Tensor x = input(g, "x", {3, 37, 1001});
  Tensor r = input(g, "r", {3, 1, 1});
  Tensor c = input(g, "c", {37, 1});
  output("y", gelu(x * r + c, GeluApprox::Tanh));
  output("z", where(x > c, exp(x), neg(x)));
  testing::check_on_gpu(plan_fusion(g), fresh_seed());
}

TEST(Gpu, WrongInputsAreRejectedBeforeLaunch) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Executable exe(plan_fusion(find_example("gelu_two_consumers").build()));
  TensorMap in = random_inputs(exe.plan().graph, 1);
  in.erase("b");
  EXPECT_THROW(exe.run(in), InputError);
}

TEST(NoGpu, RunSaysSo) {
  if (testing::gpu_available()) GTEST_SKIP() << "a GPU is present";
  Executable exe(plan_fusion(find_example("gelu_two_consumers").build()));
  try {
    exe.run(random_inputs(exe.plan().graph, 1));
    FAIL();
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU present"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilefuse
