// DSL: shapes, dtypes, broadcasting and the errors bad input gets.
#include "compiler/dsl/dsl.h"

#include <gtest/gtest.h>

#include "compiler/graph/reference.h"
#include "compiler/graph/tensor_data.h"
#include "compiler/support/error.h"

namespace tilefuse {
namespace {
using namespace dsl;

TEST(Dsl, BroadcastShapes) {
  Graph g("b");
  Tensor x = input(g, "x", {4, 1, 8});
  Tensor y = input(g, "y", {3, 1});
  EXPECT_EQ((x + y).shape(), (Shape{4, 3, 8}));
  EXPECT_EQ((x * 2.0).shape(), (Shape{4, 1, 8}));
  EXPECT_EQ((2.0 - x).dtype(), DType::F32);
  EXPECT_EQ(gt(x, y).dtype(), DType::Bool);
  EXPECT_EQ(where(x > 0.0, x, y).shape(), (Shape{4, 3, 8}));
}

TEST(Dsl, ScalarTakesTensorDtype) {
  Graph g("s");
  Tensor x = input(g, "x", {4}, DType::BF16);
  Tensor y = x * 0.5;
  EXPECT_EQ(y.dtype(), DType::BF16);
  EXPECT_EQ(g.node(y.node().operands[1]).dtype, DType::BF16);
}

TEST(Dsl, IncompatibleBroadcastNamesOpAndShapes) {
  Graph g("e");
  Tensor x = input(g, "x", {4, 8});
  Tensor y = input(g, "y", {3});
  try {
    add(x, y);
    FAIL() << "no exception";
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos) << m;
    EXPECT_NE(m.find("[4, 8]"), std::string::npos) << m;
    EXPECT_NE(m.find("[3]"), std::string::npos) << m;
  }
}

TEST(Dsl, MixedDtypesNeedACast) {
  Graph g("e");
  Tensor x = input(g, "x", {4});
  Tensor y = input(g, "y", {4}, DType::BF16);
  try {
    mul(x, y);
    FAIL() << "no exception";
  } catch (const DTypeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("mul"), std::string::npos) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
    EXPECT_NE(m.find("bf16"), std::string::npos) << m;
    EXPECT_NE(m.find("cast"), std::string::npos) << m;
  }
  EXPECT_EQ(mul(x, cast(y, DType::F32)).dtype(), DType::F32);
}

TEST(Dsl, BoolOperandsRejected) {
  Graph g("e");
  Tensor x = input(g, "x", {4});
  Tensor c = x > 0.0;
  EXPECT_THROW(exp(c), DTypeError);
  EXPECT_THROW(where(x, x, x), DTypeError);
  EXPECT_THROW(cast(x, DType::Bool), DTypeError);
  EXPECT_THROW(fma(c, c, c), DTypeError);
}

// fma(a, b, c) broadcasts its three operands as numpy does and is a·b + c in the reference;
// operands of different dtypes are refused, naming them.
TEST(Dsl, FmaBroadcastsAndRoundsOnce) {
  Graph g("fma");
  Tensor a = input(g, "a", {2, 3}), b = input(g, "b", {3}), c = input(g, "c", {2, 1});
  const Tensor y = fma(a, b, c);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  output("y", y);
  verify(g);
  TensorMap in = {{"a", TensorData::from_doubles(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6})},
                                          {"b", TensorData::from_doubles(DType::F32, {3}, {0.5, -1, 2})},
                                          {"c", TensorData::from_doubles(DType::F32, {2, 1}, {10, -10})}};
  EXPECT_EQ(reference_run(g, in).at("y"), (std::vector<double>{10.5, 8, 16, -8, -15, 2}));
  try {
    fma(a, cast(b, DType::BF16), c);
    FAIL() << "no exception";
  } catch (const DTypeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("fma"), std::string::npos) << m;
    EXPECT_NE(m.find("bf16"), std::string::npos) << m;
  }
}

TEST(Dsl, InputErrors) {
  Graph g("e");
  input(g, "x", {4});
  EXPECT_THROW(input(g, "x", {4}), GraphError);
  EXPECT_THROW(input(g, "", {4}), GraphError);
  EXPECT_THROW(input(g, "z", {4, 0}), ShapeError);
}

TEST(Dsl, TensorsOfDifferentGraphsDoNotMix) {
  Graph g1("a"), g2("b");
  Tensor x = input(g1, "x", {4});
  Tensor y = input(g2, "y", {4});
  EXPECT_THROW(add(x, y), GraphError);
}

TEST(Dsl, OutputsMustBeUniqueAndInGraph) {
  Graph g("o");
  Tensor x = input(g, "x", {4});
  output("y", exp(x));
  EXPECT_THROW(output("y", x), GraphError);
  EXPECT_THROW(g.add_output("z", 99), GraphError);
}

TEST(DslReduce, ShapesAndKeepdim) {
  Graph g("r");
  Tensor x = input(g, "x", {2, 3, 4});
  EXPECT_EQ(sum(x, {-1}).shape(), (Shape{2, 3}));
  EXPECT_EQ(amax(x, {1, 2}, true).shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(amin(x, {0}).shape(), (Shape{3, 4}));
  EXPECT_EQ(mean(x, {2, -2}, true).shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(g.node(sum(x, {2, 1}).id()).axes, (std::vector<int>{1, 2}));  // normalized, ascending
  EXPECT_EQ(softmax(x).shape(), x.shape());
  EXPECT_EQ(layernorm(x, input(g, "w", {4}), input(g, "b", {4})).shape(), x.shape());
}

TEST(DslReduce, BadAxesNameTheProblem) {
  Graph g("r");
  Tensor x = input(g, "x", {2, 3});
  try {
    sum(x, {2});
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("axis 2 is out of range"), std::string::npos) << m;
    EXPECT_NE(m.find("-2..1"), std::string::npos) << m;
  }
  EXPECT_THROW(sum(x, {0, -2}), ShapeError);  // the same axis twice
  EXPECT_THROW(amax(x, {}), ShapeError);
  EXPECT_THROW(sum(x > 0.0, {0}), DTypeError);
  EXPECT_THROW(softmax(x, 5), ShapeError);
}

}  // namespace
}  // namespace tilefuse
