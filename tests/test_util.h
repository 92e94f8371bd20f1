#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"
#include "compiler/graph/tensor_data.h"
#include "runtime/host_run.h"

namespace tilefuse::testing {

// Fails the current test for every broken plan invariant (compiler/fusion/plan_check.h).
void check_plan_invariants(const Plan& p);

// Compiles and runs the plan on the GPU with poisoned outputs and checks every output against
// the float64 reference (runtime/check.h) on random inputs drawn from `seed`. Caller must have
// checked gpu_available().
void check_on_gpu(const Plan& p, uint64_t seed);

// As check_on_gpu, with each kernel's Tile IR v2 program interpreted on the host
// (runtime/host_run.h); fails where the plan cannot run there.
void check_on_host(const Plan& p, uint64_t seed, const HostRunOptions& options = {});

// Row kernels on Tile IR v2 in one graph: rows one block holds, a warp's, an odd width (windowed
// rows), weights along the row, a reduction of a product with a per-row factor.
Graph row_kernels_graph(DType dt);

// A plan and what it is (for a trace).
struct PlannedCase {
  std::string name;
  Plan plan;
};
// Matmuls on and off the tile grid (K not a multiple of the k step, K shorter than one), batches
// with a shared weight, operands read transposed, f16, an f32 product, fused epilogues with a
// bias, a residual shared across batches and GELU, few rows split over k — each planned (one
// kernel, tilefuse's own GEMM) under every GEMM schedule: the default (wgmma fed by TMA),
// mma.sync staged, mma.sync straight from global memory, wgmma fed by cp.async, ping-pong
// warpgroups, clusters of two with B multicast, TMA loads with stores from registers.
std::vector<PlannedCase> matmul_schedule_cases();

// The names of the graph outputs kernel k writes, sorted.
std::vector<std::string> outputs_written(const Plan& p, const Kernel& k);

// A seed for random inputs: TILEFUSE_TEST_SEED when set (a replay), else drawn from the clock.
// Printed with the test's name, so that a failure names the seed that replays it.
uint64_t test_seed();

bool gpu_available();

}  // namespace tilefuse::testing
