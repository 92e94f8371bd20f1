#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "compiler/fusion/plan_check.h"
#include "runtime/check.h"
#include "runtime/cuda_driver.h"
#include "runtime/executable.h"

namespace tilefuse::testing {

void check_plan_invariants(const Plan& p) {
  for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << p.graph.name() << ": " << problem;
}

void check_on_gpu(const Plan& p, uint64_t seed) {
  Executable exe(p);
  TensorMap inputs = random_inputs(p.graph, seed);
  CheckReport check = check_against_reference(p, inputs, exe.run(inputs));
  EXPECT_TRUE(check.ok) << p.graph.name() << ", inputs seeded " << seed << " (replay: TILEFUSE_TEST_SEED=" << seed
                        << "):\n"
                        << check.text();
}

void check_on_host(const Plan& p, uint64_t seed, const HostRunOptions& options) {
  const std::string refusal = host_run_refusal(p);
  ASSERT_EQ(refusal, "") << p.graph.name();
  TensorMap inputs = random_inputs(p.graph, seed);
  CheckReport check = check_against_reference(p, inputs, run_on_host(p, inputs, options));
  EXPECT_TRUE(check.ok) << p.graph.name() << " on the host, inputs seeded " << seed
                        << " (replay: TILEFUSE_TEST_SEED=" << seed << "):\n"
                        << check.text();
}

uint64_t test_seed() {
  uint64_t seed;
  if (const char* env = std::getenv("TILEFUSE_TEST_SEED"))
    seed = std::strtoull(env, nullptr, 10);
  else
    seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << "[   seed   ] " << (test ? std::string(test->test_suite_name()) + "." + test->name() : "")
            << ": " << seed << " (replay: TILEFUSE_TEST_SEED=" << seed << ")\n";
  return seed;
}

bool gpu_available() { return cuda::available(); }

}  // namespace tilefuse::testing
