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

// One new query per head attending over a whole cache of n_kv keys (q [batch, kv_heads, group, 1,
// d] against k, v [batch, kv_heads, 1, n_kv, d]; group 1: one K/V head per query head). The
// decode step's shape, through the prefill rule: no per-sequence lengths, no cache write yet.
Graph attention_decode_graph(const std::string& name, int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t n_kv,
                             int64_t d) {
  Graph g(name);
  const int64_t group = q_heads / kv_heads;
  Tensor q = input(g, "q", {batch, kv_heads, group, 1, d}, DType::BF16);
  Tensor k = input(g, "k", {batch, kv_heads, 1, n_kv, d}, DType::BF16);
  Tensor v = input(g, "v", {batch, kv_heads, 1, n_kv, d}, DType::BF16);
  output("o", attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(d))));
  return g;
}

}  // namespace tilefuse
