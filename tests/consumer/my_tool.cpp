// The tilefuse command line over graphs of this program's own: `my_tool plan mlp_block`, `tile`,
// `ptx`, `run --check --bench`.
#include <tilefuse/tilefuse.h>

using namespace tilefuse;
using namespace tilefuse::dsl;

static Graph mlp_block() {
  Graph g("mlp_block");
  Tensor x = input(g, "x", {512, 256}, DType::BF16);
  Tensor w = input(g, "w", {256, 1024}, DType::BF16);
  output("h", gelu(matmul(x, w) + input(g, "b", {1024}, DType::BF16)));
  return g;
}

int main(int argc, char** argv) {
  return run_cli(argc, argv, {{"mlp_block", "gelu(x·w + b): a matmul with its epilogue", mlp_block}}, "my_tool");
}
