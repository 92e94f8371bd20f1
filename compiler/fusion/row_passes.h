#pragma once
// Passes of a row-reduction kernel over its rows. A reduction whose operand needs another
// reduction's result (exp(x − max) needs max) comes one pass later — except a sum of
// exp(u − c(m)), with u elementwise and c a per-row function of one max reduction m, which is
// computed in m's pass by online rescaling: when the running max grows from m to m', the
// running sum is multiplied by exp(c(m) − c(m')). Full-size outputs need one pass after their
// last reduction. A row held in registers runs the passes over registers; a row too long for
// that loops over column tiles and re-reads its inputs once per pass.
#include <map>
#include <vector>

#include "compiler/graph/graph.h"

namespace tilefuse {

struct RowPasses {
  int passes = 1;
  std::map<NodeId, int> pass_of;         // reduction → the pass (1-based) that completes it
  std::map<NodeId, NodeId> online_with;  // sum of exp(u − c(m)) → the max reduction m
  std::map<NodeId, NodeId> shift_of;     // sum of exp(u − c(m)) → the per-row value c(m)
};

RowPasses analyze_row_passes(const Graph& g, const std::vector<NodeId>& nodes,
                             const std::vector<NodeId>& outputs, const Shape& domain);

// Row-sized values (the domain's element count) a thread holds at once across a reduction: the
// most, over the kernel's reductions r, of the values not depending on r that are needed after
// it — operands of nodes depending on r, and for each output not depending on r (the codegen
// computes its elementwise chain at its store, after the reductions) the row-sized inputs of its
// cone. A softmax holds one (x, until x − max); 0 for a kernel without reductions.
int row_tiles_held(const Graph& g, const std::vector<NodeId>& nodes, const std::vector<NodeId>& outputs,
                   const Shape& domain);

}  // namespace tilefuse
