#pragma once
#include <cstdint>
#include <string>

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

// A seed for random inputs: TILEFUSE_TEST_SEED when set (a replay), else drawn from the clock.
// Printed with the test's name, so that a failure names the seed that replays it.
uint64_t test_seed();

bool gpu_available();

}  // namespace tilefuse::testing
