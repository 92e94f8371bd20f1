// The elementwise math codegen emits (compiler/codegen/math.h) against float64, element by
// element, on the GPU: f32 results within a few ulp (or, where the function's own conditioning
// makes ulps meaningless, a small absolute error), 16-bit results within one of their ulps, and
// NaN, ±inf and ±0 as C gives them. Prints each function's measured worst case.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <regex>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/tile/ir.h"
#include "runtime/cuda_driver.h"
#include "runtime/executable.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {
using namespace dsl;

struct Function {
  const char* name;
  std::function<Tensor(const Tensor&)> build;
  std::function<double(double)> exact;
  double ulps;      // allowed error in ulps of the exact result …
  double absolute;  // … or, where that is larger, this times max(1, |x|)
};

const double kSqrtHalf = 0.70710678118654752440;

std::vector<Function> functions() {
  auto sigmoid_d = [](double x) { return 1 / (1 + std::exp(-x)); };
  auto gelu_d = [](double x) { return 0.5 * x * (1 + std::erf(x * kSqrtHalf)); };
  auto gelu_tanh_d = [](double x) {
    return 0.5 * x * (1 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
  };
  return {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, 3, 0},
      {"exp(-|x|)", [](const Tensor& x) { return exp(-abs(x)); }, [](double x) { return std::exp(-std::abs(x)); }, 3, 0},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, 4, 0},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_d, 4, 0},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, 3, 0},
      // For x ≪ 0 both GELUs are ill-conditioned in f32 (1 + erf(x/√2) cancels; e^2u carries u's
      // rounding times |2u|): accurate to f32's noise in |x|, not in the result.
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_d, 4, 0x1p-22},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }, gelu_tanh_d, 4, 0x1p-22},
      {"sqrt|x|", [](const Tensor& x) { return sqrt(abs(x)); }, [](double x) { return std::sqrt(std::abs(x)); }, 2, 0},
      {"rsqrt|x|", [](const Tensor& x) { return rsqrt(abs(x)); }, [](double x) { return 1 / std::sqrt(std::abs(x)); }, 2, 0},
      // lg2.approx: an absolute error (log near 1 is small).
      {"log|x|", [](const Tensor& x) { return log(abs(x)); }, [](double x) { return std::log(std::abs(x)); }, 3, 0x1p-21},
  };
}

// Inputs: special values, the branch points of the implementations and their neighbours, and
// random values over [−10, 10], [−104, 89] and magnitudes 2^-140 … 2^127 of either sign.
std::vector<double> inputs(uint64_t seed, int64_t n) {
  std::vector<double> x = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-45, -1e-45, 1e-40, 1.0, -1.0, 0x1p-126, 88.72, 88.73,
                           -86.9, -87.5, -103.9, -104.5, 1e30, -1e30};
  for (double b : {0.875, 0.9, 3.92, 9.01, 4.5, 6.0, 0.4375, 1.9601})
    for (double s : {-1.0, 1.0})
      for (int d = -3; d <= 3; ++d) x.push_back(s * std::nextafter(static_cast<float>(b), d < 0 ? 0.0f : 100.0f) * (1 + d * 1e-7));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  while (static_cast<int64_t>(x.size()) < n) {
    switch (x.size() % 3) {
      case 0:
        x.push_back(-10 + 20 * u(rng));
        break;
      case 1:
        x.push_back(-104 + 193 * u(rng));
        break;
      default:
        x.push_back((u(rng) < 0.5 ? -1 : 1) * std::exp2(-140 + 267 * u(rng)));
    }
  }
  return x;
}

double ulp_of(double r, DType dt) {
  const int mantissa = dt == DType::F32 ? 23 : dt == DType::BF16 ? 7 : 10;
  const int min_exp = dt == DType::F16 ? -14 : -126;
  int e;
  std::frexp(r, &e);  // r = f · 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, min_exp) - mantissa);
}

// Rounded to f32, then to dt (as the GPU's f32 result is stored).
std::vector<double> rounded(const std::vector<double>& v, DType dt) {
  std::vector<double> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i]);
  return TensorData::from_doubles(dt, {static_cast<int64_t>(v.size())}, f).to_doubles();
}

void check_functions(DType dt) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  const int64_t n = int64_t{1} << 18;
  std::vector<double> x = inputs(seed, n);
  Graph g(fmt::format("math_{}", dtype_name(dt)));
  Tensor in = input(g, "x", {n}, dt);
  const std::vector<Function> fs = functions();
  for (size_t i = 0; i < fs.size(); ++i) output(fmt::format("y{}", i), fs[i].build(in));
  TensorMap args;
  args["x"] = TensorData::from_doubles(dt, {n}, x);
  const std::vector<double> xs = args.at("x").to_doubles();  // as the kernel sees them
  Executable exe(plan_fusion(g));
  TensorMap out = exe.run(args);
  for (size_t f = 0; f < fs.size(); ++f) {
    SCOPED_TRACE(fs[f].name);
    std::vector<double> y = out.at(fmt::format("y{}", f)).to_doubles();
    std::vector<double> exact(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) exact[i] = fs[f].exact(xs[i]);
    const std::vector<double> held = rounded(exact, dt);  // the exact results as the output dtype holds them
    double worst = 0, worst_x = 0;
    int failures = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double r = exact[static_cast<size_t>(i)];
      const double got = y[static_cast<size_t>(i)];
      const double rr = held[static_cast<size_t>(i)];
      bool ok;
      double ulps = 0;
      if (std::isnan(r) || std::isinf(rr)) {
        ok = std::isnan(r) ? std::isnan(got) : got == rr;
      } else if (std::abs(r) < 0x1p-125) {  // at f32's subnormal range: may be flushed to zero
        ok = std::abs(got - r) <= std::max(0x1p-125, fs[f].absolute * std::max(1.0, std::abs(xs[static_cast<size_t>(i)])));
      } else {
        // 16-bit outputs: one ulp of their own; f32: the function's bound, or its absolute one.
        const double allowed_ulps = dt == DType::F32 ? fs[f].ulps : 1;
        ulps = std::abs(got - r) / ulp_of(r, dt);
        const double absolute = fs[f].absolute * std::max(1.0, std::abs(xs[static_cast<size_t>(i)]));
        ok = !std::isnan(got) && (ulps <= allowed_ulps || std::abs(got - r) <= absolute);
        if (ok && ulps > worst && std::abs(got - r) > absolute) worst = ulps, worst_x = xs[static_cast<size_t>(i)];
      }
      if (!ok && ++failures <= 5)
        ADD_FAILURE() << fmt::format("{}({:a}) = {:a} ({}), exact {:a} ({} ulp)", fs[f].name, xs[static_cast<size_t>(i)],
                                     got, got, r, ulps);
    }
    fmt::print("  {} {}: worst {:.2f} ulp (at x = {}), {} of {} outside the bound\n", dtype_name(dt), fs[f].name,
               worst, worst_x, failures, n);
  }
}

TEST(GpuMath, F32FunctionsWithinTheirBounds) { check_functions(DType::F32); }

// An attention score's tanh (math::tanh_absolute, Tile IR `tanh %x abs`): within 2^-20 of tanh
// in absolute terms over the same inputs, ±1 at ±inf, NaN for NaN. No graph but an attention's
// score chain computes it, so a pointwise tanh's program is marked `abs`, compiled and launched
// here by hand.
TEST(GpuMath, ScoreTanhWithinItsAbsoluteBound) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const int64_t n = int64_t{1} << 18;
  const std::vector<double> x = inputs(testing::test_seed(), n);
  Graph g("score_tanh");
  output("y", tanh(input(g, "x", {n})));
  const Plan plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 1u);
  const std::string text = compile_kernel(g, plan.kernels[0]).tile_ir;
  const std::string marked = std::regex_replace(text, std::regex(R"((= tanh %[0-9]+) :)"), "$1 abs :");
  ASSERT_NE(marked, text) << text;
  const tir::Program p = tir::parse_program(marked);
  cuda::Module module = cuda::Module::load_ptx(program_ptx(p), p.name);
  CUfunction f = module.function(p.name);
  const unsigned threads = static_cast<unsigned>(p.block_threads()),
                 shared = static_cast<unsigned>(p.shared_bytes());
  ASSERT_GT(cuda::prepare_launch(f, {threads}, 1, shared, p.name), 0);
  std::vector<float> xf(x.begin(), x.end()), y(x.size());
  cuda::DeviceBuffer dx(xf.size() * 4), dy(y.size() * 4);
  dx.upload(xf.data(), xf.size() * 4);
  dy.fill_u32(0x7fc00001);  // NaN: an element left unwritten shows
  CUdeviceptr args[] = {dx.ptr(), dy.ptr()};
  void* params[] = {&args[0], &args[1]};
  cuda::Stream stream;
  cuda::launch(f, {static_cast<unsigned>(p.grid[0])}, {threads}, shared, stream.get(), params, p.name);
  stream.synchronize();
  dy.download(y.data(), y.size() * 4);
  double worst = 0, worst_x = 0;
  int failures = 0;
  for (size_t i = 0; i < xf.size(); ++i) {
    const double r = std::tanh(static_cast<double>(xf[i])), err = std::abs(y[i] - r);
    const bool ok = std::isnan(r) ? std::isnan(y[i]) : err <= 0x1p-20;
    if (ok && err > worst) worst = err, worst_x = xf[i];
    if (!ok && ++failures <= 5) ADD_FAILURE() << fmt::format("tanh({:a}) = {:a}, exact {:a}", xf[i], y[i], r);
  }
  fmt::print("  score tanh: worst absolute error {:.3g} = 2^{:.2f} (at x = {}), {} of {} outside 2^-20\n",
             worst, std::log2(worst), worst_x, failures, n);
}
TEST(GpuMath, Bf16FunctionsWithinAnUlp) { check_functions(DType::BF16); }
TEST(GpuMath, F16FunctionsWithinAnUlp) { check_functions(DType::F16); }

}  // namespace
}  // namespace tilefuse
