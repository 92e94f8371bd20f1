#pragma once
// The plan verifier: the invariants every Plan must hold, whatever the graph and options.
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

// Every live compute node is computed by at least one kernel, and a node computed by several
// (duplicated) is written by none; dead nodes are computed by none; a kernel reads only graph
// inputs and values written by earlier kernels, computes or reads every operand it uses, and
// writes outputs of its domain's shape (or one value per row), and its iteration space agrees with
// its operands' shapes (iteration_space.h); every graph output is written
// or is an input/constant; byte and kernel totals agree with the kernels. Returns one sentence
// per violation (empty when the plan is sound).
std::vector<std::string> plan_problems(const Plan& p);

}  // namespace tilefuse
