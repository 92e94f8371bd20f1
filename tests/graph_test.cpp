// Graph IR: verifier, printer, and the reference executor's numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/graph/reference.h"
#include "compiler/graph/sign.h"
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

namespace tilefuse {
namespace {
using namespace dsl;

// numpy's matmul: batch axes broadcast, operands read transposed by flag, checked by hand.
TEST(MatMul, ShapesAndReference) {
  Graph g("mm");
  Tensor a = input(g, "a", {2, 1, 2, 3});   // batch [2, 1], M 2, K 3
  Tensor b = input(g, "b", {4, 3, 2});      // batch [4],    K 3, N 2
  Tensor bt = input(g, "bt", {2, 3});       // N 2, K 3: read transposed
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 4, 2, 2}));
  output("c", c);
  MatMulOptions transposed_b;
  transposed_b.transpose_b = true;
  output("ct", matmul(a, bt, transposed_b));
  MatMulOptions to_f32;
  to_f32.out = DType::F32;
  output("half", matmul(cast(a, DType::BF16), cast(b, DType::BF16), to_f32));
  std::string printed = print_graph(g);
  EXPECT_NE(printed.find("matmul %0, %2ᵀ : f32[2, 1, 2, 2]"), std::string::npos) << printed;
  verify(g);
  TensorMap in;
  std::vector<double> av(12), bv(24), btv = {1, 0, -1, 2, 1, 0};
  for (int i = 0; i < 12; ++i) av[i] = i;
  for (int i = 0; i < 24; ++i) bv[i] = i % 5 - 2;
  in["a"] = TensorData::from_doubles(DType::F32, {2, 1, 2, 3}, av);
  in["b"] = TensorData::from_doubles(DType::F32, {4, 3, 2}, bv);
  in["bt"] = TensorData::from_doubles(DType::F32, {2, 3}, btv);
  auto out = reference_run(g, in);
  // c[1][2][1][0] = Σ_p a[1][0][1][p] · b[2][p][0]: a's row (9, 10, 11), b's column (0, 2, -1).
  EXPECT_EQ(out["c"][((1 * 4 + 2) * 2 + 1) * 2 + 0], 9 * 0 + 10 * 2 + 11 * -1);
  // ct[0][0][1][1] = a row (3, 4, 5) · bt row 1 (2, 1, 0).
  EXPECT_EQ(out["ct"][1 * 2 + 1], 3 * 2 + 4 * 1 + 5 * 0);
  EXPECT_EQ(out["half"], out["c"]);  // small integers: exact in bf16
}

TEST(MatMul, TypedErrors) {
  Graph g("bad");
  Tensor a = input(g, "a", {4, 3});
  EXPECT_THROW(matmul(a, input(g, "b", {4, 5})), ShapeError);  // K 3 against 4
  EXPECT_THROW(matmul(a, input(g, "v", {3})), ShapeError);     // a vector: give it an axis
  EXPECT_THROW(matmul(input(g, "x", {2, 4, 3}), input(g, "y", {3, 3, 5})), ShapeError);  // batch 2 vs 3
  EXPECT_THROW(matmul(a, input(g, "h", {3, 5}, DType::BF16)), DTypeError);
  try {
    MatMulOptions t;
    t.transpose_b = true;
    matmul(a, input(g, "w", {5, 4}), t);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("contracts 3 values but b [5, 4] (transposed) has 4"), std::string::npos)
        << e.what();
  }
  output("y", matmul(a, input(g, "ok", {3, 2})));
  EXPECT_THROW(plan_fusion(g), UnsupportedError);  // no kernel for matmul yet: a typed refusal
}

TEST(Iota, CausalMask) {
  Graph g("mask");
  Tensor q = iota(g, {3, 3}, 0), k = iota(g, {3, 3}, -1);
  output("causal", where(q >= k, constant(g, 1.0), constant(g, 0.0)));
  auto out = reference_run(g, {});
  EXPECT_EQ(out["causal"], (std::vector<double>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_THROW(iota(g, {3}, 1), ShapeError);
  EXPECT_THROW(iota(g, {300}, 0, DType::BF16), DTypeError);  // 257 is not a bf16
}

}  // namespace
}  // namespace tilefuse

namespace tilefuse {
namespace {

// The sign facts codegen's short exp relies on: what they claim must hold for every input, and
// the common never-positive arguments (−|x|, x − max x, a guarded max) are recognised.
TEST(Sign, NeverPositiveAndNeverNegative) {
  using namespace dsl;
  Graph g("signs");
  Tensor x = input(g, "x", {4, 8});
  Tensor y = input(g, "y", {4, 8});
  Tensor m = amax(x, {-1}, true);
  struct Case {
    Tensor t;
    bool nonpositive, nonnegative;
  };
  std::vector<Case> cases = {
      {-abs(x), true, false},
      {x - m, true, false},
      {x - where(gt(m, -INFINITY), m, 0.0), true, false},  // a softmax guarding fully masked rows
      {x - where(gt(m, 5.0), m, 0.0), false, false},        // where it fails, x − 0 may be 5
      {x - where(gt(y, -INFINITY), m, 0.0), false, false},  // a condition on something else
      {x - mean(x, {-1}, true), false, false},
      {-exp(x) * abs(y), true, false},
      {sum(-abs(x), {-1}, true), true, false},
      {min(x, -abs(y)), true, false},
      {x * x, false, true},
      {sqrt(abs(x)) + sigmoid(y), false, true},
      {relu(x) / exp(y), false, true},
      {abs(x) - -exp(y), false, true},
      {-abs(x) / exp(y), true, false},
      {max(-abs(x), y), false, false},
      {max(abs(x), y), false, true},
      {gelu(x), false, false},
      {x + y, false, false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(never_positive(g, cases[i].t.id()), cases[i].nonpositive);
    EXPECT_EQ(never_negative(g, cases[i].t.id()), cases[i].nonnegative);
  }
}

}  // namespace
}  // namespace tilefuse
