#pragma once
// The reference executor: interprets any Graph on the CPU in float64, rounding each node's
// value to bf16/f16 where its dtype says. The oracle for tests and `tilefuse run --check`.
#include <cstdint>
#include <vector>

#include "compiler/graph/tensor_data.h"

namespace tilefuse {

struct ReferenceOptions {
  // Per node: whether its value is rounded to its dtype (bf16/f16; f32 and bool values stay as
  // they are). Empty: every node is — the graph's own semantics, one op at a time. A compiled
  // plan rounds only where it writes a tensor or casts (runtime/check.h).
  std::vector<bool> rounded;
  // Each computed element, and each summand of a sum, multiplied by (1 + e) with e drawn
  // uniformly from [−noise, noise] (deterministic in noise_seed): a model of f32 arithmetic's
  // rounding and approximations, to measure how far a graph amplifies them.
  double noise = 0;
  // Per node, where it strays further (a short form for a 16-bit result: codegen/accuracy.h): its
  // own noise, at least `noise` (empty: `noise` everywhere).
  std::vector<double> node_noise;
  uint64_t noise_seed = 0;
};

// Values of every graph output, in float64.
std::map<std::string, std::vector<double>> reference_run(const Graph& g, const TensorMap& inputs,
                                                         const ReferenceOptions& options = {});

// One element of a unary or binary op in float64 (shared with constant folding and tests).
double reference_unary(Op op, double x);
double reference_binary(Op op, double a, double b);

}  // namespace tilefuse
