#pragma once
// Signs a graph's values can take, from how they are computed: what codegen's short exp (for
// arguments that are never positive) and the cost model's instruction counts rely on. NaN is
// allowed in both facts (an operation on NaN stays NaN whatever form computes it).
#include "compiler/graph/graph.h"

namespace tilefuse {

// Whether no element of node n is positive: −|x|, x − max x over any axes (also x − where(m > K,
// m, C) with C ≥ K: a softmax guarding fully masked rows), −e^x, and sums, maxima and products
// of such values with never negative ones.
bool never_positive(const Graph& g, NodeId n);
// Whether no element of node n is negative: |x|, e^x, √x, sigmoid, relu, x·x, and sums and
// products of such values.
bool never_negative(const Graph& g, NodeId n);
// Whether node n is an exp whose argument is never positive: the short f32 exp serves
// (compiler/codegen/math.h, exp_nonpositive).
bool exp_of_nonpositive(const Graph& g, const Node& n);

}  // namespace tilefuse
