// matmul(a, b) on tensor cores: bf16 operands, f32 accumulation, a bf16 product; and the same
// product with a bias and GELU fused into its epilogue (computed on the accumulator's fragments:
// the product never reaches memory).
#include "compiler/dsl/dsl.h"
#include "dsl_examples/examples.h"

namespace tilefuse {
using namespace dsl;

Graph matmul_graph(const std::string& name, int64_t m, int64_t n, int64_t k, bool bias_gelu) {
  Graph g(name);
  Tensor a = input(g, "a", {m, k}, DType::BF16);
  Tensor b = input(g, "b", {k, n}, DType::BF16);
  Tensor c = matmul(a, b);
  if (bias_gelu) c = gelu(c + input(g, "bias", {n}, DType::BF16));
  output("c", c);
  return g;
}

}  // namespace tilefuse
