// Training steps: a forward pass and its backward from dsl::grad, planned as one graph.
#include <cmath>

#include "compiler/dsl/autodiff.h"
#include "compiler/dsl/dsl.h"

namespace tilefuse {

using namespace dsl;

// y = gelu(x·W1 + b1)·W2 over `tokens` rows of `width`, a hidden layer of `hidden`; given dL/dy,
// the gradients dx, dW1, db1 and dW2 (the loss itself is the caller's).
Graph mlp_train_graph(const std::string& name, int64_t tokens, int64_t width, int64_t hidden, DType dtype) {
  Graph g(name);
  Tensor x = input(g, "x", {tokens, width}, dtype);
  Tensor w1 = input(g, "w1", {width, hidden}, dtype), b1 = input(g, "b1", {hidden}, dtype);
  Tensor w2 = input(g, "w2", {hidden, width}, dtype);
  Tensor y = matmul(gelu(matmul(x, w1) + b1), w2);
  output("y", y);
  const std::vector<Tensor> d = grad({y}, {input(g, "dy", {tokens, width}, dtype)}, {x, w1, b1, w2});
  output("dx", d[0]);
  output("dw1", d[1]);
  output("db1", d[2]);
  output("dw2", d[3]);
  return g;
}

// O = attention(q, k, v) (causal or not) and, given dL/dO, dq, dk and dv from dsl::grad — whose
// attention rule gives FlashAttention-2's form: the forward one kernel writing O and its row
// statistics, the backward recomputing the probabilities from them.
Graph attention_train_graph(const std::string& name, int64_t batch, int64_t heads, int64_t n, int64_t d,
                            bool causal, int64_t group) {
  Graph g(name);
  const Shape shape = group > 1 ? Shape{batch, heads / group, group, n, d} : Shape{batch, heads, n, d};
  const Shape kv = group > 1 ? Shape{batch, heads / group, 1, n, d} : shape;
  Tensor q = input(g, "q", shape, DType::BF16), k = input(g, "k", kv, DType::BF16);
  Tensor v = input(g, "v", kv, DType::BF16);
  Tensor o = attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(d)), causal);
  output("o", o);
  const std::vector<Tensor> grads = grad({o}, {input(g, "do", shape, DType::BF16)}, {q, k, v});
  output("dq", grads[0]);
  output("dk", grads[1]);
  output("dv", grads[2]);
  return g;
}

}  // namespace tilefuse
