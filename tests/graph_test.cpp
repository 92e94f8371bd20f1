// Graph IR: verifier, printer, and the reference executor's numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/dsl/dsl.h"
#include "compiler/graph/reference.h"
#include "compiler/support/error.h"

namespace tilefuse {
namespace {
using namespace dsl;

TEST(Graph, PrinterListsNodesAndOutputs) {
  Graph g("p");
  Tensor x = input(g, "x", {2, 3});
  Tensor b = input(g, "b", {3});
  output("y", gelu(x + b));
  std::string s = print_graph(g);
  EXPECT_NE(s.find("%0 = input \"x\" : f32[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("%2 = add %0, %1 : f32[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("%3 = gelu %2"), std::string::npos) << s;
  EXPECT_NE(s.find("output \"y\" = %3"), std::string::npos) << s;
}

TEST(Graph, VerifierRejectsBadNodes) {
  Graph g("v");
  Tensor x = input(g, "x", {2, 3});
  Node bad;
  bad.op = Op::Add;
  bad.operands = {x.id(), x.id()};
  bad.shape = {3, 2};  // not the broadcast of its operands
  g.append(bad);
  g.add_output("y", 1);
  EXPECT_THROW(verify(g), GraphError);
}

TEST(Graph, VerifierNeedsOutputs) {
  Graph g("v");
  exp(input(g, "x", {2}));
  EXPECT_THROW(verify(g), GraphError);
}

TEST(Reference, BroadcastAndOps) {
  Graph g("r");
  Tensor x = input(g, "x", {2, 3});
  Tensor b = input(g, "b", {3});
  output("sum", x + b);
  output("sel", where(x > b, x, b));
  output("mx", max(x, b * 2.0));
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6});
  in["b"] = TensorData::from_doubles(DType::F32, {3}, {10, 0, -1});
  auto out = reference_run(g, in);
  EXPECT_EQ(out["sum"], (std::vector<double>{11, 2, 2, 14, 5, 5}));
  EXPECT_EQ(out["sel"], (std::vector<double>{10, 2, 3, 10, 5, 6}));
  EXPECT_EQ(out["mx"], (std::vector<double>{20, 2, 3, 20, 5, 6}));
}

TEST(Reference, GeluForms) {
  EXPECT_NEAR(reference_unary(Op::Gelu, 1.0), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(reference_unary(Op::Gelu, -1.0), -0.15865525393145707, 1e-15);
  EXPECT_NEAR(reference_unary(Op::GeluTanh, 1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(reference_unary(Op::Sigmoid, 0.0), 0.5, 0);
  EXPECT_TRUE(std::isnan(reference_binary(Op::Max, NAN, 1.0)));
}

TEST(Reference, RoundsToBf16WhereDtypeSays) {
  Graph g("bf");
  Tensor x = input(g, "x", {2}, DType::BF16);
  output("y", x + 1.0);
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::BF16, {2}, {0.00390625, 256.0});
  auto out = reference_run(g, in);
  EXPECT_EQ(out["y"][0], 1.0);    // 1 + 2^-8 rounds to 1 in bf16 (8 bits of mantissa)
  EXPECT_EQ(out["y"][1], 256.0);  // 257 rounds to even: 256
}

TEST(TensorData, RoundTripsAndRounding) {
  EXPECT_EQ(round_to_bf16(1.0f + 1.0f / 256), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
  EXPECT_EQ(round_to_f16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_to_f16(65520.0f)));
  EXPECT_EQ(round_to_f16(1.0f / 16777216.0f), 1.0f / 16777216.0f);  // smallest subnormal
  TensorData t = TensorData::from_doubles(DType::F16, {3}, {0.5, -2.0, 1e-3});
  auto v = t.to_doubles();
  EXPECT_EQ(v[0], 0.5);
  EXPECT_EQ(v[1], -2.0);
  EXPECT_NEAR(v[2], 1e-3, 1e-6);
}

TEST(TensorData, InputChecksNameTheProblem) {
  Graph g("c");
  output("y", exp(input(g, "x", {4})));
  TensorMap in;
  EXPECT_THROW(check_inputs(g, in), InputError);  // missing
  in["x"] = TensorData::zeros(DType::BF16, {4});
  EXPECT_THROW(check_inputs(g, in), InputError);  // wrong dtype
  in["x"] = TensorData::zeros(DType::F32, {5});
  EXPECT_THROW(check_inputs(g, in), InputError);  // wrong shape
  in["x"] = TensorData::zeros(DType::F32, {4});
  in["x"].bytes.resize(3);
  try {
    check_inputs(g, in);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("16 bytes"), std::string::npos) << e.what();
  }
  in["x"] = TensorData::zeros(DType::F32, {4});
  in["extra"] = TensorData::zeros(DType::F32, {4});
  EXPECT_THROW(check_inputs(g, in), InputError);  // unknown
}

TEST(TensorData, RelativeError) {
  EXPECT_EQ(relative_error({1, 2}, {1, 2}), 0.0);
  EXPECT_NEAR(relative_error({1, 2.1}, {1, 2}), 0.1 / std::sqrt(5.0), 1e-12);
  EXPECT_TRUE(std::isnan(relative_error({NAN, 2}, {1, 2})));
}

TEST(Reference, Reductions) {
  Graph g("red");
  Tensor x = input(g, "x", {2, 3});
  output("rows", sum(x, {1}));
  output("cols", amax(x, {0}, true));
  output("all", amin(x, {0, 1}));
  output("mean", mean(x, {-1}, true));
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::F32, {2, 3}, {1, 5, -2, 4, 0, 3});
  auto out = reference_run(g, in);
  EXPECT_EQ(out["rows"], (std::vector<double>{4, 7}));
  EXPECT_EQ(out["cols"], (std::vector<double>{4, 5, 3}));
  EXPECT_EQ(out["all"], (std::vector<double>{-2}));
  EXPECT_NEAR(out["mean"][0], 4.0 / 3, 1e-15);
  EXPECT_NEAR(out["mean"][1], 7.0 / 3, 1e-15);
}

TEST(Reference, SoftmaxRowsByHand) {
  Graph g("sm");
  output("y", softmax(input(g, "x", {3, 4}), -1));
  const double inf = INFINITY;
  TensorMap in;
  in["x"] =
      TensorData::from_doubles(DType::F32, {3, 4}, {1, 2, 3, 1000, -inf, 0, -inf, 0, -inf, -inf, -inf, -inf});
  auto y = reference_run(g, in)["y"];
  // Row 1: exp(k − 1000) for k = 1, 2, 3 underflows against 1: the max takes everything.
  EXPECT_EQ(y[3], 1.0);
  EXPECT_LT(y[2], 1e-300);
  // Row 2: −inf entries get 0, the two zeros share evenly.
  EXPECT_EQ(y[4], 0.0);
  EXPECT_EQ(y[5], 0.5);
  EXPECT_EQ(y[7], 0.5);
  // Row 3, fully masked: defined as 0, not NaN.
  for (int i = 8; i < 12; ++i) EXPECT_EQ(y[i], 0.0);
}

}  // namespace
}  // namespace tilefuse
