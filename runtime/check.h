#pragma once
// Checking a run's outputs against the float64 reference: relative error per output, elements
// never written (outputs are poisoned before the run), and how far rounding alone moves the
// graph's result, so that a graph that amplifies rounding is judged by what f32 arithmetic can
// give rather than failed for it.
#include <string>
#include <vector>

#include "compiler/graph/tensor_data.h"

namespace tilefuse {

struct OutputCheck {
  std::string name;
  DType dtype = DType::F32;
  double rel_err = 0;       // ‖out − ref‖ / ‖ref‖ against the float64 reference
  double rounding = 0;      // the same distance for the reference with every node rounded to its dtype
  double tolerance = 0;     // 1e-6 for f32, 1e-2 for 16-bit and bool outputs
  double allowed = 0;       // max(tolerance, 16 × rounding)
  int64_t unwritten = 0;    // elements still holding the poison
  bool ok = false;          // rel_err ≤ allowed and every element written
  bool ill_conditioned = false;  // allowed > 0.1: rounding alone moves the output too far to judge
};

struct CheckReport {
  std::vector<OutputCheck> outputs;
  double max_rel_err = 0;
  int64_t unwritten = 0;
  bool ok = true;               // every judged output ok
  bool ill_conditioned = false;  // some output could not be judged
  std::string text() const;     // one line per output
};

// `outputs` were produced from `inputs` with poisoned output buffers (runtime/executable.h).
CheckReport check_against_reference(const Graph& g, const TensorMap& inputs, const TensorMap& outputs);

}  // namespace tilefuse
