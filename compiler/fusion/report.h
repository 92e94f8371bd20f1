#pragma once
// Fusion-decision reports, rendered from the Plan's records and nothing else.
#include <map>
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

// What codegen/ptxas (or the driver) reported for a kernel, shown beside the estimate.
struct MeasuredKernel {
  int registers = -1;
  int spill_bytes = -1;
  std::string source;  // "ptxas" or "driver"
  // ptxas's performance notes: wgmma serialized, or a wait or arrive it injected (C75xx), each
  // with its code; none for a kernel whose products run as planned.
  std::vector<std::string> notes;
};
using MeasuredKernels = std::map<std::string, MeasuredKernel>;

std::string plan_report_text(const Plan& plan, const MeasuredKernels& measured = {});
std::string plan_report_json(const Plan& plan, const MeasuredKernels& measured = {});

}  // namespace tilefuse
