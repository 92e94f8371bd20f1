// Training steps: a forward pass and its backward from dsl::grad, planned as one graph.
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

}  // namespace tilefuse
