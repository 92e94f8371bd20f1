#pragma once
// A kernel as an iteration space (DESIGN.md, "Kernels as iteration spaces"): named axes, each
// parallel or reduced, and for every operand — the kernel's inputs and outputs — the axis each of
// its dimensions runs along. Pointwise kernels have parallel axes only; a row reduction reduces
// trailing axes, a column reduction a block of leading or middle ones; a matmul
// C[b…, m, n] = Σ_k A[b…, m, k] · B[b…, k, n] has parallel {b…, m, n} and reduced {k}, its operands
// read transposed being maps that swap two axes, a shared weight one with no batch axes.
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

// `reduced`: the kernel's reductions (or its contraction) run over it. A row or column kernel's
// elementwise values around its reductions, its full-size outputs among them, still run along it;
// nothing a matmul writes runs along k.
struct IterAxis {
  std::string name;
  int64_t extent = 1;
  bool reduced = false;
};

struct OperandMap {
  NodeId node = -1;
  bool output = false;
  // Per dimension of the operand (as the kernel aligns it: reductions' outputs keep their
  // reduced dimensions as 1), the axis it runs along; -1 for a dimension of size 1 (broadcast).
  std::vector<int> dims;
};

struct IterationSpace {
  std::vector<IterAxis> axes;
  std::vector<OperandMap> operands;  // inputs, then outputs
  // "[m 256, n 96, k 128 reduced]; a[m, k], w[k, n], bias[1, n] → y[m, n]"
  std::string str(const Graph& g) const;
};

IterationSpace iteration_space(const Graph& g, const Kernel& k);

// Where the space disagrees with the graph: a dimension of another extent than its axis, a
// dimension of more than one element along no axis, a matmul output along k, an axis no operand
// runs along. Empty when consistent.
std::vector<std::string> space_problems(const Graph& g, const Kernel& k, const IterationSpace& s);

}  // namespace tilefuse
