#pragma once
#include <string>

#include "compiler/fusion/plan.h"
#include "compiler/graph/tensor_data.h"

namespace tilefuse::testing {

// Plan invariants: every compute node in at least one kernel and every non-duplicated node in
// exactly one; every value a kernel reads is a graph input or written by an earlier kernel;
// byte accounting consistent with the kernels' operands.
void check_plan_invariants(const Plan& p);

// Compiles and runs the plan on the GPU with poisoned outputs and compares every output with
// the float64 reference on fresh random inputs. Caller must have checked cuda::available().
void check_on_gpu(const Plan& p, uint64_t seed);

bool gpu_available();

}  // namespace tilefuse::testing
