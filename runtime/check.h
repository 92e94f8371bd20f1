#pragma once
// Checking a run's outputs against the float64 reference: relative error per output, and
// elements never written (outputs are poisoned before the run).
//
// The reference follows the plan's numerics: a kernel computes in f32 and rounds a bf16/f16
// value only where it writes a tensor (and then for every use of it), casts, or ends a matmul or
// a column reduction, so the reference rounds there and nowhere else (one kernel per op is then
// the graph's op-by-op semantics). A graph may amplify rounding so
// much that no f32 kernel matches the float64 result to the dtype's tolerance — x − mean(x) of a
// row whose values are all equal, a cast to bf16 of values near a rounding boundary, a sum that
// cancels: the check measures how far noise of a few f32 ulps per operation (more for the short
// forms of 16-bit results: codegen/accuracy.h) moves each output
// and allows a multiple of that, and calls an output it cannot judge so.
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"
#include "compiler/graph/tensor_data.h"

namespace tilefuse {

struct OutputCheck {
  std::string name;
  DType dtype = DType::F32;
  double rel_err = 0;       // ‖out − ref‖ / ‖ref‖ against the float64 reference
  double sensitivity = 0;   // how far noise of 2^-21 per operation (or a short form's) moves the reference
  double tolerance = 0;     // 1e-6 for f32, 1e-2 for 16-bit and bool outputs
  double allowed = 0;       // max(tolerance, 16 × sensitivity)
  int64_t unwritten = 0;    // elements still holding the poison
  // Where it went wrong: the element farthest from the reference (index into the output's
  // shape, its value, the reference's) and how many elements are off by more than `allowed` of
  // the reference's root mean square — a failing kernel's wrong rows or tiles show in them.
  std::vector<int64_t> worst_at;
  double worst_got = 0, worst_want = 0;
  int64_t off = 0;
  bool ok = false;          // rel_err ≤ allowed and every element written
  bool ill_conditioned = false;  // allowed > 0.1: f32 arithmetic alone moves the output too far to judge
};

struct CheckReport {
  std::vector<OutputCheck> outputs;
  double max_rel_err = 0;
  int64_t unwritten = 0;
  bool ok = true;               // every judged output ok
  bool ill_conditioned = false;  // some output could not be judged
  std::string text() const;     // one line per output
};

// `outputs` were produced by `plan` from `inputs` with poisoned output buffers
// (runtime/executable.h).
CheckReport check_against_reference(const Plan& plan, const TensorMap& inputs, const TensorMap& outputs);

}  // namespace tilefuse
