#pragma once
// The graph as JSON, for tools outside C++ (bench/peers.py builds a PyTorch function from it, so
// every graph has eager and torch.compile peers): its nodes in order and its outputs.
//   {"name": …, "nodes": [{"id", "op", "operands", "shape", "dtype", and per op "name" (inputs),
//    "value" (constants: a number, or "inf"/"-inf"/"nan"), "axes"/"keepdim" (reductions, iota),
//    "transpose_a"/"transpose_b" (matmul)}], "outputs": [{"name", "node"}]}
#include <string>

#include "compiler/graph/graph.h"

namespace tilefuse {

std::string graph_json(const Graph& g);

}  // namespace tilefuse
