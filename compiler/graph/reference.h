#pragma once
// The reference executor: interprets any Graph on the CPU in float64, rounding each node's
// value to bf16/f16 where its dtype says. The oracle for tests and `tilefuse run --check`.
#include "compiler/graph/tensor_data.h"

namespace tilefuse {

// Float64: every node in float64, rounded to bf16/f16 where its dtype is one (the oracle).
// Storage: every node rounded to its dtype, f32 included — what correctly rounded f32
// arithmetic between nodes gives; its distance from the oracle measures how much a graph
// amplifies rounding (runtime/check.h).
enum class ReferencePrecision { Float64, Storage };

// Values of every graph output, in float64.
std::map<std::string, std::vector<double>> reference_run(const Graph& g, const TensorMap& inputs,
                                                         ReferencePrecision precision = ReferencePrecision::Float64);

// One element of a unary or binary op in float64 (shared with constant folding and tests).
double reference_unary(Op op, double x);
double reference_binary(Op op, double a, double b);

}  // namespace tilefuse
