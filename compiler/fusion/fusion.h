#pragma once
// The fusion pass: Graph → Plan. Three layers decide each producer → consumer(s) edge:
// legality (can the nodes be one kernel at all), budget (does the fused kernel fit the register
// budget), profitability (is it faster by the cost model). Every decision is recorded.
#include "compiler/fusion/plan.h"

namespace tilefuse {

Plan plan_fusion(const Graph& g, const FusionOptions& options = {});

}  // namespace tilefuse
