#pragma once
// The fusion pass: Graph → Plan. Three layers decide each producer → consumer(s) edge:
// legality (can the nodes be one kernel at all), budget (does the fused kernel fit the register
// budget), profitability (is it faster by the cost model). Every decision is recorded.
#include "compiler/fusion/plan.h"

namespace tilefuse {

Plan plan_fusion(const Graph& g, const FusionOptions& options = {});

// Throws Error naming the field (and its CLI flag) when a schedule hint or a device profile
// constant is out of range; plan_fusion checks the same first.
void check_fusion_options(const FusionOptions& options);

// The schedule hints of plan.options that change no kernel's schedule (the plan with the hint
// left to tilefuse is the same), by their CLI flags: e.g. "--rows-per-thread 3" on a plan of
// row kernels, which take no rows-per-thread hint.
std::vector<std::string> ineffective_hints(const Plan& plan);

}  // namespace tilefuse
