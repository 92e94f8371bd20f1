// The DSL beside the standard library, as a user's program has it: `using namespace std` and
// `using namespace tilefuse::dsl` at global scope (or in the user's own namespace), both sets of
// functions called unqualified; and numbers standing in for tensors in max, min, pow, where and
// the comparisons. (Inside namespace tilefuse itself, the DSL's names would hide the global
// ones: the library qualifies std there.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "compiler/dsl/dsl.h"
#include "compiler/graph/reference.h"
#include "compiler/graph/tensor_data.h"

using namespace std;
using namespace tilefuse;
using namespace tilefuse::dsl;

namespace {

TEST(DslStd, StandardAndTensorFunctionsCoexist) {
  const double d = exp(1.0) + abs(-2.0) + max(1.0, 2.0) + min(3, 4) + pow(2.0, 3) + sqrt(4.0) + tanh(0.0);
  EXPECT_DOUBLE_EQ(d, std::exp(1.0) + 2 + 2 + 3 + 8 + 2);
  Graph g("std");
  Tensor x = input(g, "x", {2, 3}, DType::BF16);
  Tensor y = exp(x) + abs(x) + max(x, x) + min(x, x) + pow(abs(x), 2.0) + sqrt(abs(x)) + tanh(x);
  EXPECT_EQ(y.dtype(), DType::BF16);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
}

TEST(DslStd, NumbersStandInForTensors) {
  Graph g("numbers");
  Tensor x = input(g, "x", {1, 4});
  output("relu", max(x, 0.0));
  output("clamp", min(1.0, max(0.0, x)));
  output("step", where(x > 0.0, 1.0, 0.0));
  output("keep", where(ge(x, 0.5), x, -1.0));
  output("flip", where(ne(x, 0.0), 0.0, x));
  output("two", pow(2.0, x));
  output("zero", where(eq(0.0, x), 1.0, 2.0, DType::BF16));
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::F32, {1, 4}, {-1.0, 0.0, 0.5, 2.0});
  auto out = reference_run(g, in);
  EXPECT_EQ(out.at("relu"), (std::vector<double>{0, 0, 0.5, 2}));
  EXPECT_EQ(out.at("clamp"), (std::vector<double>{0, 0, 0.5, 1}));
  EXPECT_EQ(out.at("step"), (std::vector<double>{0, 0, 1, 1}));
  EXPECT_EQ(out.at("keep"), (std::vector<double>{-1, -1, 0.5, 2}));
  EXPECT_EQ(out.at("flip"), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(out.at("two"), (std::vector<double>{0.5, 1, std::sqrt(2.0), 4}));
  EXPECT_EQ(out.at("zero"), (std::vector<double>{2, 1, 2, 2}));
  EXPECT_EQ(g.node(g.outputs().back().node).dtype, DType::BF16);
  EXPECT_EQ(g.node(g.outputs().back().node).shape, (Shape{1, 4}));
}

}  // namespace
