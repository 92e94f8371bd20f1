// The check of outputs against the reference (runtime/check.h), on outputs made on the host:
// it follows the plan's rounding, allows what f32 arithmetic moves an output, and still fails
// wrong, unwritten and NaN elements.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/reference.h"
#include "runtime/check.h"
#include "runtime/executable.h"

namespace tilefuse {
namespace {
using namespace dsl;

TensorMap as_outputs(const Graph& g, const std::map<std::string, std::vector<double>>& values) {
  TensorMap out;
  for (const GraphOutput& o : g.outputs())
    out[o.name] = TensorData::from_doubles(g.node(o.node).dtype, g.node(o.node).shape, values.at(o.name));
  return out;
}

// A bf16 row normalized after a min against its own sum: every element is the same, so x −
// mean(x) is 0 in exact arithmetic, and op-by-op bf16 rounding of the mean leaves noise that the
// normalization blows up. The fused kernel keeps f32 inside and is right; the check must judge
// it by the plan's rounding (found by the fuzzer: 63% "error" against op-by-op rounding).
TEST(Check, FusedSixteenBitIsJudgedByThePlansRounding) {
  Graph g("constant_rows");
  Tensor x = input(g, "x", {64, 33}, DType::BF16);
  Tensor t = min(x, sum(x, {-1}, true));
  Tensor tc = t - mean(t, {-1}, true);
  output("y", tc * rsqrt(mean(tc * tc, {-1}, true) + 1e-5));
  Plan fused = plan_fusion(g);
  ASSERT_EQ(fused.kernels.size(), 1u);
  TensorMap in = random_inputs(g, 11);
  ReferenceOptions kernel_like;  // what the fused kernel computes: rounded only where it writes
  kernel_like.rounded.assign(g.nodes().size(), false);
  for (const Node& n : g.nodes()) kernel_like.rounded[n.id] = n.op == Op::Input || n.op == Op::Constant;
  kernel_like.rounded[g.outputs()[0].node] = true;
  CheckReport ok = check_against_reference(fused, in, as_outputs(g, reference_run(g, in, kernel_like)));
  EXPECT_TRUE(ok.ok) << ok.text();
  EXPECT_FALSE(ok.ill_conditioned) << ok.text();
  // The op-by-op values are far from the fused kernel's.
  CheckReport op_by_op = check_against_reference(fused, in, as_outputs(g, reference_run(g, in)));
  EXPECT_FALSE(op_by_op.ok) << op_by_op.text();
}

// An f32 value rounded to bf16 and back: where it lies near a rounding boundary, an f32
// result a few ulps off the float64 one flips it by a whole bf16 ulp (found by the fuzzer: 3e-5
// against an f32 tolerance of 1e-6). The check allows what such noise moves the output, and no
// more.
TEST(Check, AmplificationIsAllowedWhatF32ArithmeticGives) {
  Graph g("round_trip");
  Tensor x = input(g, "x", {1024, 1024});
  output("y", cast(cast(erf(x * 0.5), DType::BF16), DType::F32));
  Plan p = plan_fusion(g);
  TensorMap in = random_inputs(g, 3);
  // The same arithmetic in f32 on the host, as a kernel does it.
  std::vector<double> xs = in.at("x").to_doubles(), y(xs.size());
  for (size_t i = 0; i < xs.size(); ++i)
    y[i] = static_cast<double>(round_to_bf16(std::erf(static_cast<float>(xs[i]) * 0.5f)));
  CheckReport f32 = check_against_reference(p, in, as_outputs(g, {{"y", y}}));
  EXPECT_TRUE(f32.ok) << f32.text();
  EXPECT_GT(f32.outputs[0].rel_err, f32.outputs[0].tolerance) << "no element flipped: the test shows nothing";
  // Every element off by a bf16 ulp is not rounding noise.
  for (double& v : y) v *= 1 + 0x1.0p-8;
  CheckReport wrong = check_against_reference(p, in, as_outputs(g, {{"y", y}}));
  EXPECT_FALSE(wrong.ok) << wrong.text();
}

// x − max x over a size-1 axis is 0 only if x and its max agree to the last bit; computed in two
// kernels (the max's and the normalization's) they need not (fuzz seed 815 on the H200: 7.8e-6
// against 4.5e-6 allowed), and a normalization then scales the difference by 1/√1e-5. The check's
// noise gives each kernel's copy of x its own rounding, so the output is allowed what that moves.
TEST(Check, RecomputedValuesGetNoiseOfTheirOwn) {
  Graph g("recomputed");
  Tensor x = exp(input(g, "in", {16, 1, 7}) * 0.5);
  Tensor d = x - amax(x, {1}, true);
  Tensor c = d - mean(d, {1, 2}, true);
  output("y", c * rsqrt(mean(c * c, {1, 2}, true) + 1e-5));
  Plan p = plan_fusion(g);
  int computing_x = 0;
  for (const Kernel& k : p.kernels)
    computing_x += std::count(k.nodes.begin(), k.nodes.end(), x.id()) > 0;
  ASSERT_GT(computing_x, 1) << "x is not recomputed: the test shows nothing\n" << plan_report_text(p);
  TensorMap in = random_inputs(g, 5);
  CheckReport r = check_against_reference(p, in, as_outputs(g, reference_run(g, in)));
  // One rounding of x moves d by ~2^-21·x; normalized by √1e-5, y moves far beyond f32 noise.
  EXPECT_GT(r.outputs[0].sensitivity, 1e-4) << r.text();
}

// A failing output says where it is wrong: how many elements are off and the worst one, by its
// index in the output's shape — a kernel's wrong rows or key tiles show there.
TEST(Check, AFailureNamesTheWorstElement) {
  Graph g("rows");
  output("y", exp(input(g, "x", {4, 96, 8})));
  Plan p = plan_fusion(g);
  TensorMap in = random_inputs(g, 9);
  std::vector<double> y = reference_run(g, in).at("y");
  for (int64_t r = 64; r < 96; ++r)  // batch 2's rows 64…95 as a kernel with a wrong tile might
    for (int64_t c = 0; c < 8; ++c) y[static_cast<size_t>((2 * 96 + r) * 8 + c)] *= 1.5;
  y[static_cast<size_t>((2 * 96 + 70) * 8 + 3)] += 1000;
  CheckReport r = check_against_reference(p, in, as_outputs(g, {{"y", y}}));
  ASSERT_FALSE(r.ok) << r.text();
  EXPECT_EQ(r.outputs[0].off, 32 * 8);
  EXPECT_EQ(r.outputs[0].worst_at, (std::vector<int64_t>{2, 70, 3}));
  EXPECT_NE(r.text().find("the worst at [2, 70, 3]"), std::string::npos) << r.text();
}

// GELU of values far below 0, every output in the tail: f32's 0.5·x·(1 + erf(x/√2)) cancels to
// 0 where the float64 value is ~1e-12·x (fuzz seed 949 on the H200: relative error 1 against an
// allowance of 6e-6). Its noise is absolute in |x|, so the check sees that f32 cannot resolve
// such an output and leaves it unjudged instead of failing it; a NaN still fails.
TEST(Check, GeluTailIsJudgedByItsAbsoluteNoise) {
  Graph g("gelu_tail");
  output("y", gelu(input(g, "x", {2049})));
  Plan p = plan_fusion(g);
  std::vector<double> x(2049), y(2049);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = -7 - static_cast<double>(i % 5) * 0.25;  // erf(x/√2) rounds to −1 in f32
    const float xf = static_cast<float>(x[i]);
    y[i] = 0.5f * xf * (1.0f + std::erf(xf * 0.70710678f));  // as a kernel computes it
  }
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::F32, {2049}, x);
  CheckReport f32 = check_against_reference(p, in, as_outputs(g, {{"y", y}}));
  EXPECT_TRUE(f32.ok) << f32.text();
  EXPECT_TRUE(f32.ill_conditioned) << f32.text();
  EXPECT_GT(f32.outputs[0].rel_err, 0.5) << "f32 kept the tail: the test shows nothing";
  y[7] = NAN;
  CheckReport nan = check_against_reference(p, in, as_outputs(g, {{"y", y}}));
  EXPECT_FALSE(nan.ok) << nan.text();
}

// A 16-bit tanh is tanh.approx (2^-11 relative, codegen/accuracy.h), not within f32 ulps: t minus
// its own max over a one-element row (written, so rounded to f16 where computed) is t's f16
// rounding error, which tanh.approx's error moves by as much again (fuzz seed 1615: judged by f32
// noise, a kernel within its short form's bound failed). Here every t lies 0.15–0.35 of an f16
// ulp from its rounding, so f32 noise flips none and calls the output well-conditioned; the
// check draws that node's noise from the short form's bound, and the output is beyond judging.
TEST(Check, ShortFormsOfSixteenBitResultsGetTheirOwnNoise) {
  std::vector<double> x;
  for (float v = 0.1f; x.size() < 256; v = std::nextafter(v, 2.0f)) {
    const float xf = round_to_f16(v), t = std::tanh(xf);
    const double ulp = std::ldexp(1.0, std::ilogb(t) - 10), frac = std::abs(t - round_to_f16(t)) / ulp;
    if (xf == v && frac > 0.15 && frac < 0.35) x.push_back(xf);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  Graph g("tanh_rounding");
  Tensor t = tanh(input(g, "x", {n, 1}, DType::F16));
  Tensor m = amax(t, {-1}, true);
  output("m", m);
  output("y", t - m);
  Plan p = plan_fusion(g);
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::F16, {n, 1}, x);
  std::vector<double> tm(x.size()), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {  // as the kernel computes them: tanh 2^-12 off
    const float t_approx = static_cast<float>(std::tanh(x[i]) * (1 + ((i % 2) ? 0x1.0p-12 : -0x1.0p-12)));
    tm[i] = round_to_f16(t_approx);
    y[i] = round_to_f16(t_approx - static_cast<float>(tm[i]));
  }
  CheckReport r = check_against_reference(p, in, as_outputs(g, {{"m", tm}, {"y", y}}));
  EXPECT_TRUE(r.ok) << r.text();
  EXPECT_TRUE(r.ill_conditioned) << r.text();
  EXPECT_GT(r.outputs[1].rel_err, 0.1) << "tanh's error did not reach y: the test shows nothing";
}

TEST(Check, UnwrittenAndNanElementsFail) {
  Graph g("plain");
  output("y", exp(input(g, "x", {8, 8})));
  Plan p = plan_fusion(g);
  TensorMap in = random_inputs(g, 5);
  TensorMap out = as_outputs(g, reference_run(g, in));
  EXPECT_TRUE(check_against_reference(p, in, out).ok);
  TensorMap unwritten = out;
  std::fill(unwritten["y"].bytes.begin(), unwritten["y"].bytes.begin() + 4, kPoisonByte);
  CheckReport u = check_against_reference(p, in, unwritten);
  EXPECT_FALSE(u.ok);
  EXPECT_EQ(u.unwritten, 1);
  std::vector<double> nan = reference_run(g, in).at("y");
  nan[3] = NAN;
  EXPECT_FALSE(check_against_reference(p, in, as_outputs(g, {{"y", nan}})).ok);
}

// sigmoid(−100) is 3.7e-44 in float64, a subnormal f32 that kernels flushing subnormals give
// as 0 (fuzz seed 15869: relative error 1 on sigmoid of a long row's sum). Values under the
// smallest normal f32 compare as 0 in f32 and bf16 outputs; a wrong normal value still fails.
TEST(Check, SubnormalF32ResultsCompareAsZero) {
  Graph g("underflow");
  output("y", sigmoid(input(g, "x", {4})));
  Plan p = plan_fusion(g);
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::F32, {4}, {-100.0, -90.0, -95.0, -103.0});
  const std::vector<double> y = reference_run(g, in).at("y");
  for (double v : y) {
    ASSERT_GT(v, 0.0);
    ASSERT_LT(v, std::numeric_limits<float>::min());
  }
  const std::vector<double> zeros(4, 0.0);
  EXPECT_TRUE(check_against_reference(p, in, as_outputs(g, {{"y", zeros}})).ok);
  std::vector<double> wrong = zeros;
  wrong[2] = 1e-3;
  EXPECT_FALSE(check_against_reference(p, in, as_outputs(g, {{"y", wrong}})).ok);
}

}  // namespace
}  // namespace tilefuse
