// bias + GELU over 8192×8192 activations: the canonical first fusion. Unfused, `x + b` is
// written to memory and read back by GELU; fused, one kernel reads x and b and writes y.
#include "compiler/dsl/dsl.h"
#include "dsl_examples/examples.h"

namespace tilefuse {
using namespace dsl;

Graph bias_gelu(DType dtype) {
  Graph g(dtype == DType::F32 ? "bias_gelu" : std::string("bias_gelu_") + dtype_name(dtype));
  Tensor x = input(g, "x", {8192, 8192}, dtype);
  Tensor b = input(g, "b", {8192}, dtype);
  output("y", gelu(x + b));
  return g;
}

// One producer, two consumers: y = gelu(x + b) feeds both outputs. The report shows the
// choice between recomputing y in each consumer kernel, materializing it, and one kernel
// with two outputs.
Graph gelu_two_consumers() {
  Graph g("gelu_two_consumers");
  Tensor x = input(g, "x", {4096, 4096});
  Tensor b = input(g, "b", {4096});
  Tensor y = gelu(x + b);
  output("out1", y * 2.0);
  output("out2", y + x);
  return g;
}

}  // namespace tilefuse
