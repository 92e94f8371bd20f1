#pragma once
// Seeded random graphs for the differential fuzzer: 1–5-D shapes with odd, prime and size-1
// axes; inputs broadcast along leading, middle and trailing axes; elementwise chains; sum, max,
// min and mean over one or several trailing axes (rows) or a block of leading or middle axes
// (columns), with keepdim results broadcast back and
// reductions of reductions; softmax, log-softmax, layernorm, RMSNorm and group-norm written
// from primitives; matmuls against weights, iota masks; attention chains; f32, f16 and bf16 mixed through casts; several outputs, intermediates among
// them. Values stay finite: every op that needs it gets an argument kept in range.
// The same seed gives the same graph (on one standard library build).
#include <cstdint>

#include "compiler/graph/graph.h"

namespace tilefuse::fuzz {

struct RandomGraphOptions {
  // Elements of the largest tensor: keeps the float64 reference quick.
  int64_t max_elements = int64_t{1} << 20;
  // Chance of a graph over long rows (16384 to 262144 elements: staged, claimed, split,
  // cluster and looped row schedules), with at most 4·max_elements elements.
  double long_rows = 0.15;
  // Chance that a graph also reduces a leading axis (a column reduction).
  double non_trailing = 0.02;
  // Chance of each step being a matmul against a weight of its own (planned on tensor cores for
  // 16-bit graphs, refused for f32 ones), or an iota mask (computed in pointwise kernels,
  // which write it where a row or matmul kernel reads it).
  double matmul = 0.03;
  double iota = 0.005;
  // Chance of each step being an attention of inputs of its own (an output): Q·Kᵀ, a scale and
  // sometimes a softcap, a causal or windowed mask from iotas, softmax, P·V — mostly within the
  // contraction-chain rule, sometimes outside it (P also an output, a head dim of 48); a quarter of
  // those not decoding also with dQ, dK and dV of a given dO (dsl::grad).
  double attention = 0.01;
};

Graph random_graph(uint64_t seed, const RandomGraphOptions& options = {});

}  // namespace tilefuse::fuzz
