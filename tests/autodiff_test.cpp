// Reverse-mode gradients (compiler/dsl/autodiff.h) against float64 finite differences of the same
// graph's forward outputs, both through the reference executor without rounding: every op's
// rule, broadcasts, reductions, the composites, matmuls with transposes and broadcast batches,
// an attention chain, and the fuzzer's random graphs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/autodiff.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/contraction_chain.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/reference.h"
#include "compiler/support/error.h"
#include "dsl_examples/examples.h"
#include "tests/test_util.h"
#include "tools/fuzz/random_graph.h"

namespace tilefuse {
namespace {
using namespace dsl;

// L = Σᵢ Σ yᵢ · dyᵢ with dyᵢ random inputs of yᵢ's shape; its gradient with respect to each of
// `wrt` (graph inputs) from grad(), against (L(x + h) − L(x − h)) / 2h at up to 8 elements of
// each, h 1e-3 and 2.5e-4 (an element whose two differences disagree sits on a kink — a relu's 0,
// a max's tie — and is skipped; most must be checked; where the two agree but the gradient does
// not, a kink within the step may hide between them, and the gradient must be one side's
// derivative). Returns the elements checked.
int check_gradients(Graph& g, const std::vector<Tensor>& ys, const std::vector<Tensor>& wrt, uint64_t seed) {
  std::vector<Tensor> dys;
  for (size_t i = 0; i < ys.size(); ++i) {
    output(fmt::format("y{}", i), ys[i]);
    dys.push_back(input(g, fmt::format("dy{}", i), ys[i].shape(), ys[i].dtype()));
  }
  const std::vector<Tensor> dxs = grad(ys, dys, wrt);
  for (size_t j = 0; j < dxs.size(); ++j) {
    EXPECT_EQ(dxs[j].shape(), wrt[j].shape());
    EXPECT_EQ(dxs[j].dtype(), wrt[j].dtype());
    output(fmt::format("dx{}", j), dxs[j]);
  }
  verify(g);
  ReferenceOptions exact;
  exact.rounded.assign(g.nodes().size(), false);
  TensorMap in = random_inputs(g, seed);
  auto loss = [&](const TensorMap& m) {
    auto r = reference_run(g, m, exact);
    double l = 0;
    for (size_t i = 0; i < ys.size(); ++i) {
      const std::vector<double>& y = r.at(fmt::format("y{}", i));
      const std::vector<double> dy = m.at(fmt::format("dy{}", i)).to_doubles();
      for (size_t k = 0; k < y.size(); ++k) l += y[k] * dy[k];
    }
    return l;
  };
  const auto at = reference_run(g, in, exact);
  std::mt19937_64 rng(seed);
  int checked = 0, sampled = 0;
  for (size_t j = 0; j < wrt.size(); ++j) {
    const std::string name = wrt[j].node().name;
    const std::vector<double>& analytic = at.at(fmt::format("dx{}", j));
    const TensorData original = in.at(name);
    const std::vector<double> x = original.to_doubles();
    for (int s = 0; s < std::min<int>(8, static_cast<int>(x.size())); ++s) {
      const size_t e = std::uniform_int_distribution<size_t>(0, x.size() - 1)(rng);
      auto difference = [&](double h) {
        std::vector<double> v = x;
        v[e] = x[e] + h;
        in[name] = TensorData::from_doubles(original.dtype, original.shape, v);
        const double hi = in[name].to_doubles()[e], l_hi = loss(in);
        v[e] = x[e] - h;
        in[name] = TensorData::from_doubles(original.dtype, original.shape, v);
        const double lo = in[name].to_doubles()[e], l_lo = loss(in);
        in[name] = original;
        return (l_hi - l_lo) / (hi - lo);
      };
      // (L(x + s·h) − L(x)) / s·h, extrapolated to h → 0 (2·D(h/2) − D(h): the error O(h²)).
      auto one_sided = [&](double h, double side) {
        auto quotient = [&](double step) {
          std::vector<double> v = x;
          v[e] = x[e] + side * step;
          in[name] = TensorData::from_doubles(original.dtype, original.shape, v);
          const double moved = in[name].to_doubles()[e], l = loss(in);
          in[name] = original;
          return (l - loss(in)) / (moved - original.to_doubles()[e]);
        };
        return 2 * quotient(h / 2) - quotient(h);
      };
      const double coarse = difference(1e-3), fine = difference(2.5e-4);
      ++sampled;
      if (std::abs(coarse - fine) > 1e-3 * (1 + std::abs(fine))) continue;  // a kink between
      ++checked;
      const double tolerance = 2e-4 * (1 + std::abs(fine));
      if (std::abs(analytic[e] - fine) <= tolerance) continue;
      // A kink within the step that the two central differences hide (a min against a statistic
      // of every element moves with each of them: the kink may be another element's): the
      // gradient is then one side's derivative, which a one-sided difference of the other side
      // does not see.
      const double left = one_sided(1e-4, -1), right = one_sided(1e-4, 1);
      EXPECT_TRUE(std::abs(analytic[e] - left) <= tolerance || std::abs(analytic[e] - right) <= tolerance)
          << "d/d " << name << "[" << e << "]: " << analytic[e] << ", differences: central " << fine << ", left "
          << left << ", right " << right;
    }
  }
  EXPECT_GE(checked, sampled * 3 / 4) << "most elements lie on no kink";
  return checked;
}

TEST(Autodiff, ElementwiseOps) {
  Graph g("unary");
  Tensor x = input(g, "x", {3, 7});
  const Tensor a = abs(x);
  check_gradients(g,
                  {-x, a, exp(tanh(x)), log(a + 0.5), sqrt(a + 0.25), rsqrt(a + 0.25), tanh(x), erf(x), sigmoid(x),
                   relu(x), gelu(x), gelu(x, GeluApprox::Tanh), exp2(tanh(x)), pow(a + 0.5, 1.5), x / 3.0,
                   cast(cast(x, DType::BF16), DType::F32)},
                  {x}, testing::test_seed());
}

TEST(Autodiff, BroadcastsAndBinaryOps) {
  Graph g("binary");
  Tensor a = input(g, "a", {4, 1, 5}), b = input(g, "b", {3, 5}), c = input(g, "c", {5});
  check_gradients(g,
                  {a + b, a - b * c, a / (abs(b) + 0.5), max(a, b), min(a, c), pow(abs(a) + 0.5, tanh(b)),
                   where(a > b, a * c, b), max(b, 0.25), fma(a, b, c)},
                  {a, b, c}, testing::test_seed());
}

TEST(Autodiff, Reductions) {
  Graph g("reductions");
  Tensor x = input(g, "x", {4, 6, 5});
  check_gradients(g,
                  {sum(x, {2}, true) * x, sum(x, {0}), amax(x, {1}, true), amin(x, {0, 1}, true), mean(x, {0, 1, 2}),
                   sum(sum(x * x, {2}, true), {1}, true)},
                  {x}, testing::test_seed());
}

// A trailing reduction without keepdim would need a reshape to broadcast back: refused, named.
TEST(Autodiff, RefusesWhatNeedsAReshape) {
  Graph g("reshape");
  Tensor x = input(g, "x", {4, 6});
  Tensor y = sum(x, {1});
  EXPECT_THROW(grad({y}, {input(g, "dy", {4})}, {x}), UnsupportedError);
  EXPECT_THROW(grad({y}, {input(g, "dz", {5})}, {x}), ShapeError);
}

// softmax, log_softmax, layernorm, RMSNorm through their primitives; the max a softmax subtracts
// passes no gradient (no subgradient of it is built), while x − max(x) written as an output
// keeps the max's gradient.
TEST(Autodiff, Composites) {
  Graph g("composites");
  Tensor x = input(g, "x", {5, 9}), w = input(g, "w", {9}), b = input(g, "b", {9});
  check_gradients(g, {softmax(x * 2.0), log_softmax(x), layernorm(x, w, b), rmsnorm(x, w), x - amax(x, {1}, true)},
                  {x, w, b}, testing::test_seed());
  for (bool log : {false, true}) {
    Graph s("softmax_only");
    Tensor v = input(s, "v", {3, 8});
    Tensor y = log ? log_softmax(v) : softmax(v);
    const size_t forward = s.nodes().size();
    grad({y}, {input(s, "dy", {3, 8})}, {v});
    for (size_t id = forward; id < s.nodes().size(); ++id)
      EXPECT_NE(s.nodes()[id].op, Op::Eq) << (log ? "log_softmax" : "softmax") << ": a subgradient of the subtracted max";
  }
}

TEST(Autodiff, MatMuls) {
  Graph g("matmuls");
  Tensor a = input(g, "a", {2, 3, 4}), b = input(g, "b", {4, 5}), bt = input(g, "bt", {5, 4});
  Tensor at = input(g, "at", {2, 4, 3}), a1 = input(g, "a1", {1, 3, 4}), b2 = input(g, "b2", {2, 4, 5});
  check_gradients(g,
                  {matmul(a, b), matmul(a, bt, {false, true, {}}), matmul(at, b, {true, false, {}}),
                   matmul(at, bt, {true, true, {}}), matmul(a1, b2), gelu(matmul(a, b)) * 0.5},
                  {a, b, bt, at, a1, b2}, testing::test_seed());
}

// softmax(q·kᵀ·scale, causal)·v written in f32 primitives: the two products' transposes, the
// mask's where and the softmax together (the attention backward's graph).
// Attention's backward in FlashAttention-2's form (the probabilities recomputed from a copy of the
// scores' chain and the forward's row statistics; D = rowsum(dO∘O)) against finite differences:
// a causal mask; K/V heads shared by query heads (GQA) with a bias per query and key, whose
// gradient flows through the copy.
TEST(Autodiff, AttentionChain) {
  {
    Graph g("attention");
    Tensor q = input(g, "q", {2, 6, 4}), k = input(g, "k", {2, 7, 4}), v = input(g, "v", {2, 7, 3});
    Tensor s = matmul(q, k, {false, true, {}}) * 0.5;
    s = where(iota(g, {6, 7}, 0) + 1.0 >= iota(g, {6, 7}, 1), s, -INFINITY);
    check_gradients(g, {matmul(softmax(s), v)}, {q, k, v}, testing::test_seed());
  }
  {
    Graph g("gqa_bias");
    Tensor q = input(g, "q", {2, 2, 3, 5, 4}), k = input(g, "k", {2, 2, 1, 7, 4}), v = input(g, "v", {2, 2, 1, 7, 3});
    Tensor bias = input(g, "bias", {2, 1, 3, 5, 7});
    Tensor s = matmul(q, k, {false, true, {}}) * 0.5 + bias;
    check_gradients(g, {matmul(softmax(s), v)}, {q, k, v, bias}, testing::test_seed());
  }
  {  // O and its log-sum-exp both differentiated: the ordinary rules (the shift read twice)
    Graph g("with_lse");
    Tensor q = input(g, "q", {2, 6, 4}), k = input(g, "k", {2, 7, 4}), v = input(g, "v", {2, 7, 3});
    AttentionWithLse a = attention_with_lse(q, k, v, 0.5, true);
    check_gradients(g, {a.o, a.lse}, {q, k, v}, testing::test_seed());
  }
}

// The gradient graph of attention reads nothing of the forward's N×N values: the forward stays one
// attention kernel (writing O and the row statistics the backward recomputes P from), the
// backward computes Q·Kᵀ again.
TEST(Autodiff, AttentionBackwardRecomputesTheProbabilities) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Graph g = attention_train_graph("attention_train", 2, 3, 100, 64, causal);
    auto input_id = [&](const std::string& name) {
      for (NodeId id : g.inputs())
        if (g.node(id).name == name) return id;
      return NodeId{-1};
    };
    const NodeId q = input_id("q"), k = input_id("k"), o = g.outputs().at(0).node;
    std::string why;
    const std::optional<ContractionChain> chain = match_contraction_chain(g, o, &why);
    ASSERT_TRUE(chain.has_value()) << why;
    int scores = 0;  // Q·Kᵀ: the forward's and the backward's copy
    for (const Node& n : g.nodes())
      scores += n.op == Op::MatMul && n.operands == std::vector<NodeId>{q, k};
    EXPECT_EQ(scores, 2);
    const Plan p = plan_fusion(g);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    int attention_kernels = 0;
    const std::vector<NodeId> forward = chain->nodes();
    for (const Kernel& k : p.kernels) {
      attention_kernels += k.kind == ScheduleKind::Attention;
      for (NodeId in : k.inputs)
        EXPECT_TRUE(in == chain->output || chain->row_value(in) || !std::binary_search(forward.begin(), forward.end(), in))
            << k.name << " reads %" << in << ", inside the forward's chain\n"
            << plan_report_text(p);
    }
    EXPECT_EQ(attention_kernels, 1) << plan_report_text(p);
    if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
    testing::check_on_host(p, testing::test_seed());
  }
}

// O and its gradients given dO (d0, d1, …) as the graph's outputs.
void output_with_gradients(const Tensor& o, const Tensor& d_o, const std::vector<Tensor>& wrt) {
  output("o", o);
  const std::vector<Tensor> d = grad({o}, {d_o}, wrt);
  for (size_t i = 0; i < d.size(); ++i) output(fmt::format("d{}", i), d[i]);
}

// The graph's plan consistent and matching float64 on the host (and the GPU, where there is one).
void plan_and_check(const Graph& g) {
  const Plan p = plan_fusion(g);
  for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
  testing::check_on_host(p, testing::test_seed());
  if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
}

// With 16-bit scores the log-sum-exp the backward recomputes P from is still f32: in bf16 it
// rounds by up to 2^-9·|L| and every P of its row by as much (fuzz seed 201 at --attention 0.3
// failed so, off the float64 reference by 1.1e-2 in dQ, dK and dV). The plan matches float64.
TEST(Autodiff, AttentionLogSumExpStaysF32ForSixteenBitScores) {
  Graph g("bf16_scores_backward");
  Tensor q = input(g, "q", {1, 130, 64}, DType::BF16), k = input(g, "k", {1, 100, 64}, DType::BF16);
  Tensor v = input(g, "v", {1, 100, 64}, DType::BF16);
  Tensor s = matmul(q, k, {false, true, {}}) * 0.125 + input(g, "bias", {1, 130, 1}, DType::BF16);
  ASSERT_EQ(s.dtype(), DType::BF16);
  output_with_gradients(matmul(softmax(s, -1), v), input(g, "do", {1, 130, 64}, DType::BF16), {q, k, v});
  int logs = 0;
  for (const Node& n : g.nodes())
    if (n.op == Op::Log) {
      ++logs;
      EXPECT_EQ(n.dtype, DType::F32) << "the log-sum-exp %" << n.id << " is " << dtype_name(n.dtype);
    }
  EXPECT_EQ(logs, 1);
  plan_and_check(g);
}

// dP = dO·Vᵀ in f32, as the fused backward computes it: where a row sees one key, P is 1 and
// dP − D is 0 in exact arithmetic, so dS, dQ and dK are rounding noise; with dP rounded to bf16
// (V's dtype) the graph made that noise a bf16 rounding of dP, which no fused kernel reproduces
// (fuzz seeds 539, 563, 614 at --attention 0.3: relative error 1 in dK or dQ). The plan matches
// float64 on the host.
TEST(Autodiff, AttentionScoreGradientsOfOneKey) {
  Graph g("one_key");
  Tensor q = input(g, "q", {2, 1, 32}, DType::BF16), k = input(g, "k", {2, 1, 32}, DType::BF16);
  Tensor v = input(g, "v", {2, 1, 32}, DType::BF16), d_o = input(g, "do", {2, 1, 32}, DType::BF16);
  output_with_gradients(attention(q, k, v, 0.17677669529663687, false), d_o, {q, k, v});
  int dp = 0;  // dO·Vᵀ
  for (const Node& n : g.nodes())
    if (n.op == Op::MatMul && n.operands == std::vector<NodeId>{d_o.id(), v.id()} && n.transpose_b) {
      ++dp;
      EXPECT_EQ(n.dtype, DType::F32) << "dP %" << n.id << " is " << dtype_name(n.dtype);
    }
  EXPECT_EQ(dp, 1);
  plan_and_check(g);
}

// The fuzzer's random graphs (f32 inputs; graphs whose gradient needs a reshape are refused by
// name and skipped).
TEST(Autodiff, RandomGraphs) {
  fuzz::RandomGraphOptions ro;
  ro.max_elements = 512;
  ro.long_rows = 0;
  ro.attention = 0;
  int graphs = 0, refused = 0;
  const uint64_t seed = testing::test_seed();
  for (uint64_t s = 1; s <= 300 && graphs < 12; ++s) {
    Graph g = fuzz::random_graph(s, ro);
    std::vector<Tensor> ys, wrt;
    for (const GraphOutput& o : g.outputs())
      if (g.node(o.node).dtype != DType::Bool) ys.push_back(Tensor(&g, o.node));
    for (NodeId id : g.inputs())
      if (g.node(id).dtype == DType::F32) wrt.push_back(Tensor(&g, id));
    if (ys.empty() || wrt.empty()) continue;
    SCOPED_TRACE(fmt::format("fuzz graph {}", s));
    try {
      check_gradients(g, ys, wrt, seed + s);
      ++graphs;
    } catch (const UnsupportedError&) {
      ++refused;
    }
  }
  EXPECT_GE(graphs, 8) << refused << " refused";
}

// Backward graphs are graphs: layernorm's (row reductions and the dw, db column sums), an MLP's
// in bf16 (transposed matmuls, GELU's derivative, the bias gradient), a causal attention's (its
// mask's iotas in pointwise kernels, the scores written), softmax's — planned,
// consistent, compiled; on a GPU each plan is checked against the float64 reference.
TEST(Autodiff, BackwardGraphsPlanAndRun) {
  std::vector<Graph> graphs;
  {
    Graph g("layernorm_backward");
    Tensor x = input(g, "x", {64, 1000}), w = input(g, "w", {1000}), b = input(g, "b", {1000});
    const std::vector<Tensor> d = grad({layernorm(x, w, b)}, {input(g, "dy", {64, 1000})}, {x, w, b});
    output("dx", d[0]);
    output("dw", d[1]);
    output("db", d[2]);
    graphs.push_back(std::move(g));
  }
  {
    Graph g("mlp_backward");
    Tensor x = input(g, "x", {32, 64}, DType::BF16), w1 = input(g, "w1", {64, 128}, DType::BF16);
    Tensor b1 = input(g, "b1", {128}, DType::BF16), w2 = input(g, "w2", {128, 32}, DType::BF16);
    Tensor y = matmul(gelu(matmul(x, w1) + b1), w2);
    const std::vector<Tensor> d = grad({y}, {input(g, "dy", {32, 32}, DType::BF16)}, {x, w1, b1, w2});
    for (size_t i = 0; i < d.size(); ++i) output(fmt::format("d{}", i), d[i]);
    graphs.push_back(std::move(g));
  }
  {
    Graph g("causal_attention_backward");  // the mask's iotas in pointwise kernels (unfused backward)
    Tensor q = input(g, "q", {2, 3, 50, 32}, DType::BF16), k = input(g, "k", {2, 3, 70, 32}, DType::BF16);
    Tensor v = input(g, "v", {2, 3, 70, 32}, DType::BF16);
    Tensor o = attention(q, k, v, 0.18, true);
    const std::vector<Tensor> d = grad({o}, {input(g, "do", {2, 3, 50, 32}, DType::BF16)}, {q, k, v});
    output("o", o);
    output("dq", d[0]);
    output("dk", d[1]);
    output("dv", d[2]);
    graphs.push_back(std::move(g));
  }
  {
    Graph g("softmax_backward");
    Tensor x = input(g, "x", {128, 1000}, DType::BF16);
    output("dx", grad({softmax(x)}, {input(g, "dy", {128, 1000}, DType::BF16)}, {x})[0]);
    graphs.push_back(std::move(g));
  }
  for (const Graph& g : graphs) {
    SCOPED_TRACE(g.name());
    const Plan p = plan_fusion(g);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    EXPECT_LT(p.kernels.size(), g.nodes().size() / 2) << plan_report_text(p);  // fused, not a kernel per op
    for (const Kernel& k : p.kernels) {
      const CompiledKernel c = compile_kernel(p.graph, k);
      if (!find_ptxas().empty() && !k.library) {
        EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
      }
    }
    if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
    testing::check_on_host(p, testing::test_seed());
  }
}

}  // namespace
}  // namespace tilefuse
