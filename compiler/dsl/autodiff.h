#pragma once
// Reverse-mode differentiation of a Graph: the backward pass as more nodes of the same graph,
// one rule per op, so that fusion plans it like any other graph.
#include <vector>

#include "compiler/dsl/dsl.h"

namespace tilefuse::dsl {

// The gradients of L = Σᵢ Σ outputs[i] · output_grads[i] (each output_grads[i] of outputs[i]'s
// shape) with respect to each of `wrt`, appended to the graph: one tensor of each wrt's shape and
// dtype. Rules: elementwise ops by their derivatives (GELU exact and tanh, …); broadcasts by
// sums over the broadcast axes; sums by broadcasting back; max and min as a subgradient (ties
// share the gradient equally, as JAX does); the max a softmax subtracts from its own operand
// (x − max(x)) as a stop-gradient, as JAX does — softmax does not depend on it; casts cast the
// gradient back; matmul by the two transposed products; where by routing; comparisons, iotas and
// constants pass none. Throws UnsupportedError for a reduction without keepdim over axes that are
// not leading (its gradient would need a reshape, which the graph does not have) and ShapeError
// for gradients of the wrong shape. A wrt that L does not depend on gets zeros.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& output_grads,
                         const std::vector<Tensor>& wrt);

}  // namespace tilefuse::dsl
