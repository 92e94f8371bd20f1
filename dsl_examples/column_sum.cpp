// sum(x, {0}): the reduction over rows that a bias gradient is (db = Σ_rows dy). A column
// reduction: each block takes a tile of columns and a part of the rows, and the parts meet in the
// kernel's workspace.
#include "compiler/dsl/dsl.h"
#include "dsl_examples/examples.h"

namespace tilefuse {
using namespace dsl;

Graph column_sum_graph(DType dtype) {
  Graph g(dtype == DType::F32 ? "column_sum" : std::string("column_sum_") + dtype_name(dtype));
  output("s", sum(input(g, "x", {8192, 8192}, dtype), {0}));
  return g;
}

}  // namespace tilefuse
