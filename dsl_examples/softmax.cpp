// Row reductions: softmax, log-softmax, layernorm and RMSNorm, each written with the DSL's
// composites (themselves built from primitives), so that the fusion pass makes each one kernel.
#include "compiler/dsl/dsl.h"
#include "dsl_examples/examples.h"

namespace tilefuse {
using namespace dsl;

static std::string named(const std::string& base, DType dtype) {
  return dtype == DType::F32 ? base : base + "_" + dtype_name(dtype);
}

Graph softmax_graph(const std::string& name, int64_t rows, int64_t cols, DType dtype) {
  Graph g(named(name, dtype));
  output("y", softmax(input(g, "x", {rows, cols}, dtype), -1));
  return g;
}

// x − max(x) along the row: the lightest row kernel (one max, one subtract), so its speed is
// what the row schedule itself costs, beside softmax's at the same shape.
Graph shift_graph(const std::string& name, int64_t rows, int64_t cols, DType dtype) {
  Graph g(named(name, dtype));
  Tensor x = input(g, "x", {rows, cols}, dtype);
  output("y", x - amax(x, {-1}, true));
  return g;
}

Graph log_softmax_graph(int64_t rows, int64_t cols) {
  Graph g("log_softmax");
  output("y", log_softmax(input(g, "x", {rows, cols}), -1));
  return g;
}

Graph layernorm_graph(DType dtype) {
  Graph g(named("layernorm", dtype));
  Tensor x = input(g, "x", {16384, 4096}, dtype);
  Tensor w = input(g, "w", {4096}, dtype);
  Tensor b = input(g, "b", {4096}, dtype);
  output("y", layernorm(x, w, b, 1e-5));
  return g;
}

Graph rmsnorm_graph(const std::string& name, int64_t rows, int64_t cols, DType dtype) {
  Graph g(named(name, dtype));
  Tensor x = input(g, "x", {rows, cols}, dtype);
  Tensor w = input(g, "w", {cols}, dtype);
  output("y", rmsnorm(x, w, 1e-6));
  return g;
}

}  // namespace tilefuse
