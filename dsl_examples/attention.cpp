// softmax(q·kᵀ·scale)·v written with the DSL's composite: two matmuls and a softmax between
// them, which fusion turns into one kernel looping over the keys (the scores never reach memory);
// causal, the mask from iota comparisons.
#include <cmath>

#include "compiler/dsl/dsl.h"
#include "dsl_examples/examples.h"

namespace tilefuse {
using namespace dsl;

Graph attention_graph(const std::string& name, int64_t batch, int64_t heads, int64_t n, int64_t d, bool causal) {
  Graph g(name);
  const Shape shape = {batch, heads, n, d};
  Tensor q = input(g, "q", shape, DType::BF16);
  Tensor k = input(g, "k", shape, DType::BF16);
  Tensor v = input(g, "v", shape, DType::BF16);
  output("o", attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(d)), causal));
  return g;
}

}  // namespace tilefuse
