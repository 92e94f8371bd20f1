#include "tests/test_util.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
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

Graph row_kernels_graph(DType dt) {
  using namespace dsl;
  Graph g(std::string("rows_v2_") + dtype_name(dt));
  output("p", softmax(input(g, "x", {37, 1000}, dt), -1));
  output("l", log_softmax(input(g, "u", {64, 4096}, dt), -1));
  Tensor z = input(g, "z", {33, 768}, dt);
  output("n", layernorm(z, input(g, "w", {768}, dt), input(g, "b", {768}, dt)));
  output("r", rmsnorm(input(g, "v", {100, 96}, dt), input(g, "rw", {96}, dt)));
  Tensor a = input(g, "a", {50, 200}, dt);
  output("s", sum(a, {-1}));
  output("c", sum(input(g, "h", {50, 1}, dt) * a, {-1}, true));
  output("o", softmax(input(g, "q", {9, 5003}, dt), -1));
  return g;
}

std::vector<PlannedCase> matmul_schedule_cases() {
  using namespace dsl;
  struct Case {
    const char* name;
    DType dtype;
    Shape a, b;
    MatMulOptions options;
    bool epilogue;
  };
  std::vector<PlannedCase> out;
  for (const Case& c : std::vector<Case>{
           {"aligned", DType::BF16, {256, 128}, {128, 192}, {}, false},
           {"short_k", DType::BF16, {64, 24}, {24, 64}, {}, false},
           {"odd", DType::BF16, {37, 50}, {50, 29}, {}, false},
           {"batched_tail", DType::BF16, {2, 100, 72}, {72, 136}, {}, true},
           {"batched_shared_weight", DType::BF16, {3, 70, 40}, {40, 66}, {}, true},
           {"transposed_a", DType::BF16, {2, 48, 64}, {2, 48, 80}, {true, false, std::nullopt}, false},
           {"transposed_a_odd", DType::BF16, {2, 33, 65}, {2, 33, 80}, {true, false, std::nullopt}, false},
           // Odd rows of unbatched transposed operands: copied into a padded pitch (col-major).
           {"transposed_a_odd_unbatched", DType::BF16, {65, 33}, {65, 80}, {true, false, std::nullopt}, true},
           {"transposed_b_odd_k", DType::F16, {40, 71}, {50, 71}, {false, true, std::nullopt}, false},
           {"transposed_b_f16", DType::F16, {130, 96}, {72, 96}, {false, true, std::nullopt}, true},
           {"f32_product", DType::BF16, {64, 304}, {304, 64}, {false, false, DType::F32}, true},
           {"partially_broadcast_b", DType::BF16, {2, 3, 40, 32}, {1, 3, 32, 24}, {}, false},
           {"partially_broadcast_a_transposed", DType::F16, {2, 1, 32, 20}, {2, 3, 32, 48}, {true, false, std::nullopt}, true},
           // Few rows: B streamed, k split over blocks, the last of a tile's blocks summing the
           // partials and running the epilogue (the last k range shorter, K not a multiple of 32).
           {"m1_split_k_odd_n", DType::BF16, {1, 2048}, {2048, 100}, {}, true},
           {"m16_batched_split_k", DType::BF16, {2, 16, 1024}, {1024, 520}, {}, true},
           {"m40_split_k", DType::F16, {40, 3000}, {3000, 256}, {}, false},
           // 3 tile rows (clusters: the last pair's second tile past M) by 5 tile columns, the
           // last partly past N.
           {"tile_rows_odd", DType::BF16, {300, 128}, {128, 520}, {}, true},
       }) {
    Graph g(std::string("mm_") + c.name);
    Tensor y = matmul(input(g, "a", c.a, c.dtype), input(g, "b", c.b, c.dtype), c.options);
    if (c.epilogue) {
      const Shape& s = y.shape();
      const DType dt = c.options.out.value_or(c.dtype);
      y = gelu(y + input(g, "bias", {s.back()}, dt) + input(g, "res", {s[s.size() - 2], s.back()}, dt));
    }
    output("c", y);
    for (int variant = 0; variant < (c.epilogue ? 8 : 7); ++variant) {
      static const char* const names[] = {"default",
                                          "mma.sync",
                                          "direct",
                                          "wgmma cp.async",
                                          "ping-pong",
                                          "clusters",
                                          "tma, stores from registers",
                                          "rolled epilogue"};
      FusionOptions o;
      o.library_gemm = LibraryGemmUse::Never;  // tilefuse's own GEMM (GpuMatMul.LibraryGemm* the library's)
      o.schedule.gemm_wgmma = variant == 0 || variant >= 3 ? 1 : 0;
      o.schedule.gemm_tma = variant == 3 ? 0 : -1;
      if (variant == 4) {  // two blocks of two warpgroups taking turns over the tiles
        o.schedule.gemm_pingpong = 1;
        o.profile.sm_count = 2;
      }
      if (variant == 5) {  // one cluster of two blocks over the tiles, B multicast
        o.schedule.gemm_cluster = 2;
        o.profile.sm_count = 2;
      }
      if (variant == 6) o.schedule.gemm_tma_store = 0;
      if (variant == 7) o.schedule.rolled_epilogue = 1;  // (where the schedule stores by TMA)
      o.schedule.stages = variant == 2 ? 0 : -1;
      o.schedule.pitch_copy = variant == 2 ? -1 : 1;  // odd rows: the copies, where the schedule is staged
      out.push_back({fmt::format("{}, {}", c.name, names[variant]), plan_fusion(g, o)});
    }
  }
  return out;
}

std::vector<std::string> outputs_written(const Plan& p, const Kernel& k) {
  std::vector<std::string> names;
  for (NodeId o : k.outputs)
    for (const GraphOutput& out : p.graph.outputs())
      if (out.node == o) names.push_back(out.name);
  std::sort(names.begin(), names.end());
  return names;
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
