// Attention found by fusion (compiler/fusion/contraction_chain.h) and the attention loop in Tile
// IR v2 (compiler/tile/attention.h). The loop: its program verifies and
// round-trips, its PTX has the tensor-core, quad-shuffle and async-copy instructions and ptxas
// takes it without spills, and on a GPU it matches a float64 softmax(Q·Kᵀ·scale)·V on seeded
// random inputs into a poisoned output — odd sequence lengths, several heads, head dims 16 to
// 128, bf16 and f16 — the two layout operations attention adds (an accumulator's row reductions
// and its conversion into the next dot's A fragment) checked on their own. The fusion: plain
// graphs of matmul → f → softmax → matmul become one kernel that the float64 check accepts;
// graphs outside the rule keep their scores, and the report says why.
#include "compiler/tile/attention.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/contraction_chain.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/tensor_data.h"
#include "compiler/support/error.h"
#include "compiler/tile/attention_walkthrough.h"
#include "compiler/tile/ir_verify.h"
#include "dsl_examples/examples.h"
#include "runtime/check.h"
#include "runtime/cuda_driver.h"
#include "runtime/executable.h"
#include "runtime/host_run.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {

using tir::AttentionShape;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `tilefuse explain attention`'s recurrence, tile by tile, ends where softmax(q·kᵀ·scale)·v does
// in float64 — for any tile width and for rows that see only some keys (one, all, none).
TEST(AttentionWalkthrough, EndsAtTheFloat64Result) {
  std::mt19937_64 rng(testing::test_seed());
  std::normal_distribution<float> normal(0, 1);
  const int n = 9, d = 3;
  std::vector<std::vector<float>> k(n, std::vector<float>(d)), v = k;
  std::vector<float> q(d);
  for (auto* m : {&k, &v})
    for (auto& r : *m)
      for (float& x : r) x = normal(rng);
  for (float& x : q) x = normal(rng);
  for (int visible : {0, 1, 5, n})
    for (int tile : {1, 2, 4, n}) {
      SCOPED_TRACE(fmt::format("{} keys seen, tiles of {}", visible, tile));
      const AttentionRowWalk w = walk_online_attention(q, k, v, 0.7f, tile, visible);
      EXPECT_EQ(w.steps.size(), static_cast<size_t>((n + tile - 1) / tile));
      const std::vector<double> want = exact_attention_row(q, k, v, 0.7f, visible);
      ASSERT_EQ(w.out.size(), want.size());
      for (int c = 0; c < d; ++c) {
        EXPECT_NEAR(w.out[c], want[c], 1e-5 * (1 + std::fabs(want[c])));
        if (visible == 0) { EXPECT_EQ(w.out[c], 0.0f); }  // a row that sees no key gives 0, as softmax does
      }
    }
}

TEST(TileIrAttention, ProgramVerifiesAndRoundTrips) {
  AttentionShape s;
  s.batch_heads = 3;
  s.n_q = 100;
  s.n_kv = 77;
  s.d = 64;
  const tir::Program p = tir::attention_program(s);
  const std::string text = tir::print_program(p);
  try {
    EXPECT_EQ(tir::print_program(tir::parse_program(text)), text);
  } catch (const Error& e) {
    FAIL() << e.what() << " in\n" << text;
  }
  // The loop carries the output accumulator and the per-row max and sum; the scores' rows reduce
  // in their accumulator layout and turn into the next dot's A fragments. 77 keys: a loop over
  // the whole tile, whose scores are not masked, then one over the partial tile, masked past the
  // keys — each a step's worth of products and reductions.
  EXPECT_NE(text.find("tile<64x64xf32, mma_acc>, tile<64x1xf32, mma_acc>, tile<64x1xf32, mma_acc>"), std::string::npos)
      << text;
  const size_t second = text.find("= for ", text.find("= for ") + 1);
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_EQ(count(text, "= for "), 2);
  EXPECT_EQ(text.rfind("in_bounds", second), std::string::npos) << "the whole tiles are not masked";
  EXPECT_NE(text.find("in_bounds", second), std::string::npos) << "the partial tile is";
  EXPECT_EQ(count(text, "reduce_max"), 2);
  EXPECT_EQ(count(text, "reduce_sum"), 2);
  EXPECT_EQ(count(text, " convert "), 2 * 4);  // 64 keys, 16 per A fragment
  EXPECT_EQ(count(text, " dot "), 2 * 8);      // Q·Kᵀ over d = 64, then P·V over 64 keys
}

TEST(TileIrAttention, VerifierRefusesWhatCodegenCannotDo) {
  AttentionShape s;
  s.n_q = s.n_kv = 64;
  tir::Program p = tir::attention_program(s);
  // A convert needs warps_n 1: with two warps along the columns no warp holds whole rows.
  p.mma->warps_n = 2;
  p.mma->warp_n = 32;
  std::vector<std::string> problems = tir::program_problems(p);
  bool convert = false, reduce = false;
  for (const std::string& m : problems) {
    convert |= m.find("needs warps_n 1") != std::string::npos;
    reduce |= m.find("only an accumulator's rows reduce") != std::string::npos;
  }
  EXPECT_TRUE(convert);
  EXPECT_TRUE(reduce);
  s.d = 72;  // not a multiple of 16
  EXPECT_THROW(tir::attention_program(s), Error);
  s.d = 64;
  s.dtype = DType::F32;
  EXPECT_THROW(tir::attention_program(s), Error);
}

TEST(CodegenAttention, PtxHasTensorCoreLoopAndAssembles) {
  for (const char* sm : {"sm_80", "sm_90"})
    for (int64_t d : {64, 128}) {
      SCOPED_TRACE(fmt::format("{} d {}", sm, d));
      AttentionShape s;
      s.batch_heads = 2;
      s.n_q = 200;
      s.n_kv = 300;
      s.d = d;
      const CodegenOptions opt = codegen_options_for(sm);
      const std::string ptx = program_ptx(tir::attention_program(s), opt);
      EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
      EXPECT_NE(ptx.find("shfl.sync.bfly.b32"), std::string::npos);
      EXPECT_NE(ptx.find("cp.async.cg.shared.global"), std::string::npos);
      EXPECT_NE(ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"), std::string::npos);  // V
      EXPECT_NE(ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16"), std::string::npos);        // Kᵀ
      if (find_ptxas().empty()) continue;
      auto m = run_ptxas(ptx, "attention", opt);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0);
      EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
      ::testing::Test::RecordProperty(fmt::format("registers_{}_d{}", sm, d), m->registers);
    }
}

// float64 softmax(Q·Kᵀ·scale)·V of the rounded inputs.
std::vector<double> reference(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v) {
  std::vector<double> o(static_cast<size_t>(s.batch_heads * s.n_q * s.d));
  std::vector<double> w(static_cast<size_t>(s.n_kv));
  for (int64_t h = 0; h < s.batch_heads; ++h)
    for (int64_t i = 0; i < s.n_q; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < s.n_kv; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < s.d; ++c)
          dot += q[static_cast<size_t>((h * s.n_q + i) * s.d + c)] * k[static_cast<size_t>((h * s.n_kv + j) * s.d + c)];
        w[static_cast<size_t>(j)] = dot * s.scale;
        mx = std::max(mx, w[static_cast<size_t>(j)]);
      }
      for (double& x : w) sum += x = std::exp(x - mx);
      for (int64_t c = 0; c < s.d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < s.n_kv; ++j)
          acc += w[static_cast<size_t>(j)] * v[static_cast<size_t>((h * s.n_kv + j) * s.d + c)];
        o[static_cast<size_t>((h * s.n_q + i) * s.d + c)] = acc / sum;
      }
    }
  return o;
}

// The program on device copies of q, k and v, into a poisoned output: O, and the median time of
// `timed` launches after one (0: none timed).
struct Launched {
  TensorData o;
  double median_ms = 0;
};
Launched run_program(const tir::Program& p, const AttentionShape& s, const TensorData& q, const TensorData& k,
                const TensorData& v, int timed = 0) {
  cuda::Module module = cuda::Module::load_ptx(program_ptx(p), p.name);
  CUfunction f = module.function(p.name);
  const unsigned threads = static_cast<unsigned>(p.block_threads()), shared = static_cast<unsigned>(p.shared_bytes());
  EXPECT_GT(cuda::prepare_launch(f, {threads}, 1, shared, p.name), 0);
  cuda::DeviceBuffer dq(q.bytes.size()), dk(k.bytes.size()), dv(v.bytes.size()), dout(q.bytes.size());
  dq.upload(q.bytes.data(), q.bytes.size());
  dk.upload(k.bytes.data(), k.bytes.size());
  dv.upload(v.bytes.data(), v.bytes.size());
  dout.fill_u16(0x7fc1);  // NaN in bf16 and f16: an element left unwritten shows
  CUdeviceptr args[] = {dq.ptr(), dk.ptr(), dv.ptr(), dout.ptr()};
  void* params[] = {&args[0], &args[1], &args[2], &args[3]};
  cuda::Stream stream;
  const cuda::Dim3 grid{static_cast<unsigned>(p.grid[0])};
  cuda::launch(f, grid, {threads}, shared, stream.get(), params, p.name);
  Launched r;
  std::vector<float> ms;
  for (int t = 0; t < timed; ++t) {
    cuda::Event start, stop;
    start.record(stream.get());
    cuda::launch(f, grid, {threads}, shared, stream.get(), params, p.name);
    stop.record(stream.get());
    stop.synchronize();
    ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  stream.synchronize();
  if (!ms.empty()) {
    std::sort(ms.begin(), ms.end());
    r.median_ms = ms[ms.size() / 2];
  }
  r.o = TensorData::zeros(s.dtype, {s.batch_heads, s.n_q, s.d});
  dout.download(r.o.bytes.data(), r.o.bytes.size());
  return r;
}

TEST(GpuAttention, MatchesFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  struct Case {
    int64_t heads, n_q, n_kv, d;
    DType dtype;
    int block_n;
  };
  for (const Case& c : std::vector<Case>{{3, 100, 77, 64, DType::BF16, 64},
                                         {2, 128, 256, 128, DType::BF16, 64},
                                         {1, 65, 1, 64, DType::BF16, 64},
                                         {2, 33, 130, 32, DType::F16, 32},
                                         {1, 16, 200, 16, DType::BF16, 128}}) {
    for (bool wgmma : {false, true}) {
      if (wgmma && padded_head_dim(c.d) < 64) continue;  // wgmma reads K in whole 128-byte panels
      AttentionShape s;
      s.batch_heads = c.heads;
      s.n_q = c.n_q;
      s.n_kv = c.n_kv;
      s.d = c.d;
      s.dtype = c.dtype;
      s.block_n = c.block_n;
      s.wgmma = wgmma;
      s.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      SCOPED_TRACE(fmt::format("{} heads, {} queries, {} keys, d {}, {}, {} keys per step, {}", c.heads, c.n_q, c.n_kv,
                               c.d, dtype_name(c.dtype), c.block_n, wgmma ? "wgmma" : "mma.sync"));
      std::mt19937_64 rng(seed);
      TensorData q = TensorData::random(c.dtype, {c.heads, c.n_q, c.d}, rng);
      TensorData k = TensorData::random(c.dtype, {c.heads, c.n_kv, c.d}, rng);
      TensorData v = TensorData::random(c.dtype, {c.heads, c.n_kv, c.d}, rng);
      const TensorData o = run_program(tir::attention_program(s), s, q, k, v).o;
      const std::vector<double> got = o.to_doubles();
      const std::vector<double> want = reference(s, q.to_doubles(), k.to_doubles(), v.to_doubles());
      // Normal inputs give scores of a few units (scale·|q||k|): a softmax neither flat nor one-hot,
      // so that the rescaling across key tiles matters. P rounded to the input dtype before P·V and
      // O rounded once: a few units of the last place of |v| (1 here).
      const double eps = c.dtype == DType::BF16 ? 0x1p-8 : 0x1p-11;
      double worst = 0;
      int64_t bad = 0, worst_at = 0;
      for (size_t e = 0; e < got.size(); ++e) {
        const double err = std::fabs(got[e] - want[e]);
        if (!(err <= 4 * eps)) ++bad;
        if (!(err <= worst)) {
          worst = err;
          worst_at = static_cast<int64_t>(e);
        }
      }
      EXPECT_EQ(bad, 0) << "worst " << worst << " at element " << worst_at << ": got "
                        << got[static_cast<size_t>(worst_at)] << ", float64 " << want[static_cast<size_t>(worst_at)]
                        << " (seed " << seed << ")";
      ::testing::Test::RecordProperty(
          fmt::format("worst_{}_{}_{}_{}{}", c.heads, c.n_q, c.n_kv, c.d, wgmma ? "_wgmma" : ""), std::to_string(worst));
      std::printf("  %lld heads %lld×%lld d %lld %s%s: worst |error| %.3g (bound %.3g)\n",
                  static_cast<long long>(c.heads), static_cast<long long>(c.n_q), static_cast<long long>(c.n_kv),
                  static_cast<long long>(c.d), dtype_name(c.dtype), wgmma ? " wgmma" : "", worst, 4 * eps);
    }
  }
}

// A prefill-sized shape (64 heads of 4096 queries and keys, d 128): rows sampled from every
// head checked against float64, and the kernel timed (printed as TFLOP/s of 4·n²·d per head).
TEST(GpuAttention, LargeShapeSampled) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  AttentionShape s;
  s.batch_heads = 64;
  s.n_q = s.n_kv = 4096;
  s.d = 128;
  s.scale = 1.0 / std::sqrt(128.0);
  std::mt19937_64 rng(seed);
  TensorData q = TensorData::random(s.dtype, {s.batch_heads, s.n_q, s.d}, rng);
  TensorData k = TensorData::random(s.dtype, {s.batch_heads, s.n_kv, s.d}, rng);
  TensorData v = TensorData::random(s.dtype, {s.batch_heads, s.n_kv, s.d}, rng);
  const Launched r = run_program(tir::attention_program(s), s, q, k, v, 10);
  const std::vector<double> got = r.o.to_doubles(), qd = q.to_doubles(), kd = k.to_doubles(), vd = v.to_doubles();
  // Two rows of every head: each row's reference over its head's keys.
  AttentionShape one = s;
  one.batch_heads = 1;
  one.n_q = 1;
  int bad = 0;
  double worst = 0;
  for (int64_t h = 0; h < s.batch_heads; ++h)
    for (int64_t i : {(h * 977) % s.n_q, s.n_q - 1 - (h * 131) % s.n_q}) {
      const auto row = [&](const std::vector<double>& x, int64_t r0, int64_t rows) {
        return std::vector<double>(x.begin() + r0 * s.d, x.begin() + (r0 + rows) * s.d);
      };
      const std::vector<double> want =
          reference(one, row(qd, h * s.n_q + i, 1), row(kd, h * s.n_kv, s.n_kv), row(vd, h * s.n_kv, s.n_kv));
      for (int64_t c = 0; c < s.d; ++c) {
        const double err = std::fabs(got[static_cast<size_t>((h * s.n_q + i) * s.d + c)] - want[static_cast<size_t>(c)]);
        worst = std::max(worst, err);
        bad += !(err <= 4 * 0x1p-8);
      }
    }
  EXPECT_EQ(bad, 0) << "worst |error| " << worst << " (seed " << seed << ")";
  const double flops = 4.0 * static_cast<double>(s.n_q * s.n_kv * s.d * s.batch_heads);
  std::printf("  attention 64 heads × 4096² d 128 bf16: %.4f ms, %.1f TFLOP/s; worst sampled |error| %.3g\n",
              r.median_ms, flops / (r.median_ms * 1e-3) / 1e12, worst);
}

}  // namespace
}  // namespace tilefuse

namespace tilefuse {
namespace {

using namespace dsl;

// q, k, v of [2, 3, n, d] (or n_kv keys) in `dt`.
struct Qkv {
  Tensor q, k, v;
};
Qkv qkv(Graph& g, int64_t n, int64_t n_kv, int64_t d, DType dt) {
  return {input(g, "q", {2, 3, n, d}, dt), input(g, "k", {2, 3, n_kv, d}, dt), input(g, "v", {2, 3, n_kv, d}, dt)};
}

const Kernel* only_attention(const Plan& p) {
  const Kernel* a = nullptr;
  for (const Kernel& k : p.kernels)
    if (k.kind == ScheduleKind::Attention) a = &k;
  return p.kernels.size() == 1 ? a : nullptr;
}

// The graphs the rule takes: the DSL's composite, softcapped scores, all-bf16 scores (no cast),
// odd lengths, f16.
std::vector<Graph> chains() {
  std::vector<Graph> out;
  {
    Graph g("composite");
    Qkv t = qkv(g, 100, 77, 64, DType::BF16);
    output("o", attention(t.q, t.k, t.v, 0.125));
    out.push_back(std::move(g));
  }
  {
    Graph g("softcap");  // tanh(s / 30) · 30, as Gemma's attention caps its logits
    Qkv t = qkv(g, 64, 130, 32, DType::BF16);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * (1.0 / std::sqrt(32.0));
    output("o", matmul(cast(softmax(tanh(s * (1.0 / 30)) * 30.0), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("bf16_scores");  // the scores, the softmax and P all bf16: no cast before P·V
    Qkv t = qkv(g, 65, 64, 16, DType::BF16);
    output("o", matmul(softmax(matmul(t.q, t.k, {false, true, std::nullopt}) * 0.25), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("f16");
    Qkv t = qkv(g, 33, 200, 128, DType::F16);
    output("o", attention(t.q, t.k, t.v, 1.0 / std::sqrt(128.0)));
    out.push_back(std::move(g));
  }
  {
    Graph g("causal");  // the mask from iota comparisons, computed in the kernel from positions
    Qkv t = qkv(g, 100, 100, 64, DType::BF16);
    output("o", attention(t.q, t.k, t.v, 0.125, true));
    out.push_back(std::move(g));
  }
  {
    Graph g("causal_d128");  // several key tiles at the benchmark's head dimension: below, on and past the diagonal
    Qkv t = qkv(g, 321, 321, 128, DType::BF16);
    output("o", attention(t.q, t.k, t.v, 1.0 / std::sqrt(128.0), true));
    out.push_back(std::move(g));
  }
  {
    Graph g("causal_after_a_prefix");  // 33 new queries after 97 cached keys
    Qkv t = qkv(g, 33, 130, 32, DType::F16);
    output("o", attention(t.q, t.k, t.v, 1.0 / std::sqrt(32.0), true));
    out.push_back(std::move(g));
  }
  {
    Graph g("plain_max_first_keys_masked");  // softmax by hand, unguarded: every row's first tile is −inf
    Qkv t = qkv(g, 64, 128, 64, DType::BF16);
    Tensor x = where(iota(g, {64, 128}, 1) >= 64.0, matmul(t.q, t.k, {false, true, DType::F32}) * 0.125, -INFINITY);
    Tensor e = exp(x - amax(x, {-1}, true));
    output("o", matmul(cast(e / sum(e, {-1}, true), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("additive_mask");  // a causal mask added as 0 or −1e9, through a bool → f32 cast
    Qkv t = qkv(g, 48, 48, 32, DType::BF16);
    Tensor seen = cast(iota(g, {48, 48}, 0) >= iota(g, {48, 48}, 1), DType::F32);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125 + (seen - 1.0) * 1e9;
    output("o", matmul(cast(softmax(s), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("gqa");  // 2 K/V heads, 3 query heads each: K and V broadcast along the group axis
    Tensor q = input(g, "q", {2, 2, 3, 70, 64}, DType::BF16);
    Tensor k = input(g, "k", {2, 2, 1, 90, 64}, DType::BF16), v = input(g, "v", {2, 2, 1, 90, 64}, DType::BF16);
    output("o", attention(q, k, v, 0.125, true));
    out.push_back(std::move(g));
  }
  {
    Graph g("mqa");  // one K/V head for 4 query heads
    Tensor q = input(g, "q", {3, 4, 40, 32}, DType::F16);
    Tensor k = input(g, "k", {3, 1, 50, 32}, DType::F16), v = input(g, "v", {3, 1, 50, 32}, DType::F16);
    output("o", attention(q, k, v, 1.0 / std::sqrt(32.0)));
    out.push_back(std::move(g));
  }
  {
    Graph g("alibi");  // causal, with a bias slope[h]·(i_k − i_q) from a tensor of one slope per head
    Qkv t = qkv(g, 72, 72, 64, DType::BF16);
    Tensor slope = input(g, "slope", {3, 1, 1});
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125 +
               slope * (iota(g, {72, 72}, 1) - iota(g, {72, 72}, 0));
    s = where(iota(g, {72, 72}, 0) >= iota(g, {72, 72}, 1), s, -INFINITY);
    output("o", matmul(cast(softmax(s), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    // A bias along the keys from their positions alone: kept as the tile's first key (a part
    // constant along the keys, one value a tile) plus its offsets (the same in every tile).
    Graph g("key_positions");
    Qkv t = qkv(g, 70, 150, 64, DType::BF16);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125 + iota(g, {70, 150}, 1) * 0.01;
    output("o", matmul(cast(softmax(s), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("bias_and_padding");  // a bf16 bias per (query, key) and an additive mask per (batch, key)
    Qkv t = qkv(g, 50, 77, 32, DType::BF16);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * (1.0 / std::sqrt(32.0));
    s = s + cast(input(g, "bias", {50, 77}, DType::BF16), DType::F32) + input(g, "pad", {2, 1, 1, 77});
    output("o", matmul(cast(softmax(s), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("lengths");  // one query per sequence over a cache, keys at or past its length masked
    Qkv t = qkv(g, 1, 100, 64, DType::BF16);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125;
    Tensor length = abs(input(g, "length", {2, 1, 1, 1})) * 60.0 + 1.0;  // 1 … 61 keys
    s = where(iota(g, {1, 100}, 1) < length, s, -INFINITY);
    output("o", matmul(cast(softmax(s), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("head_dim_256");  // Q read from shared memory each step, 32 keys a step
    Qkv t = qkv(g, 70, 100, 256, DType::BF16);
    output("o", attention(t.q, t.k, t.v, 1.0 / 16.0, true));
    out.push_back(std::move(g));
  }
  {
    Graph g("head_dim_96");  // padded to 128 in the rings and the accumulator, never stored
    Qkv t = qkv(g, 40, 75, 96, DType::F16);
    output("o", attention(t.q, t.k, t.v, 0.1));
    out.push_back(std::move(g));
  }
  {
    Graph g("sliding_window");  // keys within 16 positions before the query, written out by hand
    Qkv t = qkv(g, 80, 80, 64, DType::BF16);
    Tensor qi = iota(g, {80, 80}, 0), ki = iota(g, {80, 80}, 1);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125;
    s = where(qi >= ki, where(qi - ki < 16.0, s, -INFINITY), -INFINITY);
    output("o", matmul(cast(softmax(s), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("long_window");  // keys within 70 before the query: the tiles before a block's window skipped
    Qkv t = qkv(g, 300, 300, 64, DType::BF16);
    Tensor qi = iota(g, {300, 300}, 0), ki = iota(g, {300, 300}, 1);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125;
    s = where(70.0 > qi - ki, where(qi >= ki, s, -INFINITY), -INFINITY);
    output("o", matmul(cast(softmax(s), DType::BF16), t.v));
    out.push_back(std::move(g));
  }
  {
    Graph g("window_after_a_prefix");  // 50 new queries after 100 cached keys, each seeing the last 30 keys up to its own
    Qkv t = qkv(g, 50, 150, 64, DType::F16);
    Tensor qi = iota(g, {50, 150}, 0) + 100.0, ki = iota(g, {50, 150}, 1);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125;
    s = where(qi >= ki, where(qi - ki <= 29.0, s, -INFINITY), -INFINITY);
    output("o", matmul(cast(softmax(s), DType::F16), t.v));
    out.push_back(std::move(g));
  }
  return out;
}

TEST(FusionAttention, ContractionChainsBecomeOneKernel) {
  for (const Graph& g : chains()) {
    SCOPED_TRACE(g.name());
    const Plan p = plan_fusion(g);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    const Kernel* k = only_attention(p);
    ASSERT_NE(k, nullptr) << plan_report_text(p);
    const std::map<std::string, size_t> tensors = {{"alibi", 1}, {"bias_and_padding", 2}, {"lengths", 1}};
    EXPECT_EQ(k->inputs.size(), 3u + (tensors.count(g.name()) ? tensors.at(g.name()) : 0));
    // A causal mask ends each block's loop early: 0 keys of offset (97 for 33 queries after 97
    // keys); the window's outer mask is causal too.
    const std::map<std::string, int64_t> causal = {
        {"causal", 0}, {"causal_d128", 0}, {"causal_after_a_prefix", 97}, {"sliding_window", 0}, {"gqa", 20}, {"alibi", 0},
        {"head_dim_256", 30}, {"long_window", 0}, {"window_after_a_prefix", 100}};
    EXPECT_EQ(k->schedule.causal_offset, causal.count(g.name()) ? causal.at(g.name()) : -1);
    EXPECT_EQ(k->schedule.key_limit, g.name() == "lengths");  // the loop ends at the sequence's length
    // A window starts each block's loop: keys within 16 before the query are those from i − 15
    // on; within 70, from i − 69; query i at position i + 100 seeing 30, from i + 71.
    const std::map<std::string, int64_t> window = {{"sliding_window", -15}, {"long_window", -69}, {"window_after_a_prefix", 71}};
    EXPECT_EQ(k->schedule.window_offset,
              window.count(g.name()) ? std::optional<int64_t>(window.at(g.name())) : std::nullopt);
    ASSERT_FALSE(p.decisions.empty());
    const FusionDecision& d = p.decisions.front();
    EXPECT_NE(d.reason.find("contraction chain"), std::string::npos) << d.reason;
    // The scores, written and read at least once each unfused, are what fusing saved.
    const Node& s = p.graph.node(d.producer);
    EXPECT_EQ(s.op, Op::MatMul);
    EXPECT_GE(d.bytes_saved, 2 * num_elements(s.shape) * static_cast<int64_t>(dtype_size(s.dtype)));
    EXPECT_FALSE(d.library_gemm_lost);
    const std::string report = plan_report_text(p);
    EXPECT_NE(report.find("a loop over"), std::string::npos) << report;
    // The decision is weighed against the plan without the rule, which writes the scores: that
    // plan exists, is consistent, and is what the decision's "materialized" option costs.
    FusionOptions without;
    without.contraction_chains = false;
    if (g.name() == "composite" || g.name() == "f16") {  // (no iota: such a plan compiles)
      const Plan w = plan_fusion(g, without);
      for (const std::string& problem : plan_problems(w)) ADD_FAILURE() << problem;
      double predicted = 0;
      for (const Kernel& wk : w.kernels) {
        EXPECT_NE(wk.kind, ScheduleKind::Attention);
        predicted += wk.cost.predicted_s;
      }
      EXPECT_DOUBLE_EQ(d.options.at(0).predicted_s, predicted);
    }
    const CompiledKernel c = compile_kernel(p.graph, *k);
    // Tensor cores: wgmma where the head dimension pads to 64 or more, mma.sync below that.
    EXPECT_NE(c.ptx.find(k->schedule.wgmma ? "wgmma.mma_async" : "mma.sync.aligned.m16n8k16"), std::string::npos);
    EXPECT_NE(c.tile_ir.find(" convert "), std::string::npos);
    if (!find_ptxas().empty()) {
      auto m = run_ptxas(c.ptx, k->name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0) << m->registers << " registers";
    }
  }
}

// Where the chain's f(S) is S times a positive constant, maybe under masks to −inf (causal,
// windows), the kernel leaves the product unscaled: the row max is the product's times the
// scale, and each probability one fma (the scale and log2 e in one multiplier) and one exp2.
// A chain with anything more (a softcap, a bias) applies f first and multiplies by log2 e alone.
TEST(FusionAttention, APositiveScaleFoldsIntoTheExponent) {
  const std::map<std::string, double> folded = {
      {"composite", 0.125}, {"f16", 1.0 / std::sqrt(128.0)}, {"causal", 0.125}, {"sliding_window", 0.125}};
  const std::map<std::string, double> applied = {{"softcap", 1.0 / std::sqrt(32.0)}, {"alibi", 0.125}};
  for (const Graph& g : chains()) {
    const bool folds = folded.count(g.name()) > 0;
    if (!folds && !applied.count(g.name())) continue;
    SCOPED_TRACE(g.name());
    const Plan p = plan_fusion(g);
    const Kernel* k = only_attention(p);
    ASSERT_NE(k, nullptr);
    const double scale = folds ? folded.at(g.name()) : applied.at(g.name());
    const std::string text = tir::print_program(tir::attention_kernel_program(p.graph, *k));
    const bool multiplier = text.find(fmt::format("const {} : f32", scale * M_LOG2E)) != std::string::npos;
    EXPECT_EQ(multiplier, folds) << text;
    EXPECT_NE(text.find(" = fma %"), std::string::npos) << text;
    // Folded, no score tile (masked or not) is multiplied by the scale: only row maxima are.
    const std::regex scale_const(fmt::format(R"((%\d+) = const {} : f32)", scale));
    for (auto it = std::sregex_iterator(text.begin(), text.end(), scale_const); folds && it != std::sregex_iterator();
         ++it) {
      const std::regex times_tile("= mul %\\d+, " + (*it)[1].str() + R"( : tile<\d+x(\d+)x)");
      for (auto m = std::sregex_iterator(text.begin(), text.end(), times_tile); m != std::sregex_iterator(); ++m)
        EXPECT_EQ((*m)[1].str(), "1") << m->str();
    }
  }
}

// A log-sum-exp beside O: the attention kernel computes lse = c + log Σ from its final running
// max (softmax's guarded shift) and sum after its loop and writes it; c and Σ, used by nothing
// else, stay in registers.
Graph with_lse(bool causal) {
  Graph g(causal ? "lse_causal" : "lse");
  Qkv t = qkv(g, 70, 90, 64, DType::BF16);
  AttentionWithLse a = attention_with_lse(t.q, t.k, t.v, 0.125, causal);
  output("o", a.o);
  output("lse", a.lse);
  return g;
}

TEST(FusionAttention, LogSumExpRowsAreWrittenBesideTheOutput) {
  for (bool causal : {false, true}) {
    const Graph g = with_lse(causal);
    SCOPED_TRACE(g.name());
    const Plan p = plan_fusion(g);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    const Kernel* a = nullptr;
    for (const Kernel& k : p.kernels)
      if (k.kind == ScheduleKind::Attention) a = &k;
    ASSERT_NE(a, nullptr) << plan_report_text(p);
    EXPECT_EQ(p.kernels.size(), 1u) << plan_report_text(p);
    EXPECT_EQ(testing::outputs_written(p, *a), (std::vector<std::string>{"lse", "o"}));
    const CompiledKernel c = compile_kernel(p.graph, *a);
    if (!find_ptxas().empty()) {
      auto m = run_ptxas(c.ptx, a->name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0);
      EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
    }
  }
}

// Row ops beyond the log-sum-exp: any elementwise op of the row values and constants runs after
// the loop in the attention kernel (L·log₂e, e^(−L)), and an op that also reads a tensor (a
// bias per row) is a kernel of its own reading what the attention kernel wrote.
// (And in bf16 scores' dtype, a cast among them: as a kernel of their own computes them.)
AttentionWithLse bf16_scores_with_lse(const Qkv& t) {
  Tensor s = matmul(t.q, t.k, {false, true, std::nullopt}) * 0.125;
  Tensor c = amax(s, {-1}, true);
  Tensor e = exp(s - c), total = sum(e, {-1}, true);
  return {matmul(e / total, t.v), c + log(total)};
}

TEST(FusionAttention, RowOpsRunAfterTheLoop) {
  for (int form = 0; form < 3; ++form) {
    Graph g(form == 0 ? "row_ops" : form == 1 ? "row_ops_causal" : "row_ops_bf16_scores");
    SCOPED_TRACE(g.name());
    Qkv t = qkv(g, 70, 90, 64, DType::BF16);
    const AttentionWithLse a =
        form < 2 ? attention_with_lse(t.q, t.k, t.v, 0.125, form == 1) : bf16_scores_with_lse(t);
    output("o", a.o);
    output("lse2", (form < 2 ? a.lse : cast(cast(a.lse, DType::F32) * 0.5, DType::BF16)) * M_LOG2E);
    output("inv_norm", exp(-a.lse));
    output("biased", a.lse + input(g, "row_bias", {2, 3, 70, 1}, a.lse.dtype()));
    const Plan p = plan_fusion(g);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    const Kernel* attention = nullptr;
    std::vector<std::string> others;  // what the other kernels write
    for (const Kernel& k : p.kernels) {
      if (k.kind == ScheduleKind::Attention) attention = &k;
      else
        for (const std::string& name : testing::outputs_written(p, k)) others.push_back(name);
    }
    ASSERT_NE(attention, nullptr) << plan_report_text(p);
    EXPECT_EQ(testing::outputs_written(p, *attention), (std::vector<std::string>{"inv_norm", "lse2", "o"}));
    EXPECT_EQ(others, std::vector<std::string>{"biased"});
    EXPECT_NE(plan_report_text(p).find("computed from the final max and sum after the loop"),
              std::string::npos);
    testing::check_on_host(p, testing::test_seed());
  }
}

// A log-sum-exp nothing uses is no row op: the chain fuses as without it.
TEST(FusionAttention, AnUnusedLogSumExpLeavesTheChainFused) {
  Graph g("unused_lse");
  Qkv t = qkv(g, 70, 90, 64, DType::BF16);
  output("o", attention_with_lse(t.q, t.k, t.v, 0.125, true).o);
  const Plan p = plan_fusion(g);
  ASSERT_NE(only_attention(p), nullptr) << plan_report_text(p);
  EXPECT_EQ(only_attention(p)->outputs.size(), 1u);
}

// Keys at or past a sequence's length masked, the length a tensor: each block ends its loop at
// its sequence's length, read at run time, so one compiled kernel serves every length up to the
// cache's (issue: decode). Causal after the cached keys as well, and a length of 0 (every key
// masked: O = 0, as softmax gives).
Graph cache_lengths_graph() {
  Graph g("cache_lengths");
  Tensor q = input(g, "q", {4, 2, 3, 64}, DType::BF16);  // 3 new queries per sequence
  Tensor k = input(g, "k", {4, 2, 300, 64}, DType::BF16), v = input(g, "v", {4, 2, 300, 64}, DType::BF16);
  Tensor length = input(g, "length", {4, 1, 1, 1});
  Tensor s = matmul(q, k, {false, true, DType::F32}) * 0.125;
  s = where(iota(g, {3, 300}, 1) < length, s, -INFINITY);
  output("o", matmul(cast(softmax(s), DType::BF16), v));
  return g;
}

TEST(FusionAttention, TheLoopEndsAtALengthReadAtRunTime) {
  const Plan p = plan_fusion(cache_lengths_graph());
  const Kernel* k = only_attention(p);
  ASSERT_NE(k, nullptr) << plan_report_text(p);
  EXPECT_TRUE(k->schedule.key_limit);
  EXPECT_NE(k->schedule.describe().find("key limit per head"), std::string::npos) << k->schedule.describe();
  const CompiledKernel c = compile_kernel(p.graph, *k);
  EXPECT_NE(c.tile_ir.find(" ceili "), std::string::npos) << c.tile_ir;
  if (!find_ptxas().empty()) {
    EXPECT_TRUE(run_ptxas(c.ptx, k->name).has_value());
  }
}

TEST(GpuAttention, OneKernelServesEveryLength) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Executable exe(plan_fusion(cache_lengths_graph()));
  const uint64_t seed = testing::test_seed();
  TensorMap in = random_inputs(exe.plan().graph, seed);
  for (const std::vector<double>& lengths :
       std::vector<std::vector<double>>{{1, 17, 64, 300}, {0, 65, 128.5, 299}, {300, 300, 2, 129}}) {
    SCOPED_TRACE(fmt::format("lengths {}", fmt::join(lengths, ", ")));
    in["length"] = TensorData::from_doubles(DType::F32, {4, 1, 1, 1}, lengths);
    const CheckReport r = check_against_reference(exe.plan(), in, exe.run(in));
    EXPECT_TRUE(r.ok) << r.text();
  }
}

TEST(GpuAttention, LogSumExpMatchesFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  for (bool causal : {false, true}) testing::check_on_gpu(plan_fusion(with_lse(causal)), testing::test_seed());
}

// Outside the rule the scores are written, and the decision for the probabilities says why.
TEST(FusionAttention, OutsideTheRuleTheScoresAreWrittenAndTheReportSaysWhy) {
  struct Case {
    const char* name;
    std::function<void(Graph&)> build;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {"probabilities_kept",
            [](Graph& g) {
              Qkv t = qkv(g, 64, 64, 64, DType::BF16);
              Tensor p = cast(softmax(matmul(t.q, t.k, {false, true, DType::F32}) * 0.125), DType::BF16);
              output("p", p);
              output("o", matmul(p, t.v));
            },
            "also used outside the chain"},
           {"bias_from_a_reduction",  // a bias the kernel cannot compute from inputs and positions
            [](Graph& g) {
              Qkv t = qkv(g, 64, 64, 64, DType::BF16);
              Tensor bias = amax(input(g, "b", {64, 64, 8}, DType::F32), {-1});
              Tensor s = matmul(t.q, t.k, {false, true, DType::F32}) * 0.125 + bias;
              output("o", matmul(cast(softmax(s), DType::BF16), t.v));
            },
            "masks or biases"},
           {"head_dim_72",
            [](Graph& g) {
              Qkv t = qkv(g, 64, 64, 72, DType::BF16);
              output("o", attention(t.q, t.k, t.v, 0.1));
            },
            "head dimension 72"},
       }) {
    SCOPED_TRACE(c.name);
    Graph g(c.name);
    c.build(g);
    const Plan p = plan_fusion(g);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    for (const Kernel& k : p.kernels) EXPECT_NE(k.kind, ScheduleKind::Attention) << k.name;
    bool said = false;
    for (const FusionDecision& d : p.decisions)
      said |= d.reason.find("not one attention kernel") != std::string::npos && d.reason.find(c.why) != std::string::npos;
    EXPECT_TRUE(said) << plan_report_text(p);
  }
}

// What the kernel could not honour is no chain: a mask that widens the scores (its extra axis
// would be rows the kernel never writes), V computed inside the chain, and a causal offset past
// the last key (nothing to skip).
TEST(FusionAttention, TheMatchRefusesWhatTheKernelCannotHonour) {
  {
    Graph g("wide_mask");
    Tensor q = input(g, "q", {16, 64}, DType::BF16), k = input(g, "k", {128, 64}, DType::BF16);
    Tensor s = where(iota(g, {4, 16, 128}, 2) < 100.0, matmul(q, k, {false, true, DType::F32}), -INFINITY);
    Tensor o = matmul(cast(softmax(s), DType::BF16), input(g, "v", {128, 64}, DType::BF16));
    output("o", o);
    std::string why;
    EXPECT_FALSE(match_contraction_chain(g, o.id(), &why).has_value());
    EXPECT_NE(why.find("must keep the scores' shape"), std::string::npos) << why;
  }
  {
    Graph g("v_is_the_scores");
    Tensor s =
        matmul(input(g, "q", {64, 64}, DType::BF16), input(g, "k", {64, 64}, DType::BF16), {false, true, {}});
    Tensor o = matmul(softmax(s), s);
    output("o", o);
    std::string why;
    EXPECT_FALSE(match_contraction_chain(g, o.id(), &why).has_value());
    EXPECT_NE(why.find("computed in it"), std::string::npos) << why;
  }
  {
    Graph g("bias_wider_than_the_scores");  // a bias over more heads than the scores have
    Qkv t = qkv(g, 32, 32, 32, DType::BF16);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32});
    Tensor o = matmul(cast(softmax(s + input(g, "bias", {4, 2, 3, 32, 32})), DType::BF16), t.v);
    output("o", o);
    std::string why;
    EXPECT_FALSE(match_contraction_chain(g, o.id(), &why).has_value());
    EXPECT_FALSE(why.empty());
  }
  {
    Graph g("k_and_v_heads_differ");  // K's heads broadcast, V's not
    Tensor q = input(g, "q", {2, 3, 64, 32}, DType::BF16), k = input(g, "k", {2, 1, 64, 32}, DType::BF16);
    Tensor o = matmul(cast(softmax(matmul(q, k, {false, true, DType::F32})), DType::BF16),
                      input(g, "v", {2, 3, 64, 32}, DType::BF16));
    output("o", o);
    std::string why;
    EXPECT_FALSE(match_contraction_chain(g, o.id(), &why).has_value());
    EXPECT_NE(why.find("K and V must share their leading"), std::string::npos) << why;
  }
  {
    Graph g("offset_past_the_keys");
    Qkv t = qkv(g, 64, 64, 32, DType::BF16);
    Tensor s = matmul(t.q, t.k, {false, true, DType::F32});
    s = where(iota(g, {64, 64}, 0) + 4294967296.0 >= iota(g, {64, 64}, 1), s, -INFINITY);
    Tensor o = matmul(cast(softmax(s), DType::BF16), t.v);
    output("o", o);
    std::string why;
    const std::optional<ContractionChain> c = match_contraction_chain(g, o.id(), &why);
    ASSERT_TRUE(c.has_value()) << why;
    EXPECT_FALSE(c->causal_offset.has_value());
  }
}

// Decode with K/V heads shared by query heads (GQA, MQA): one query per head, a length per
// sequence, a bias per query head and key, a causal mask after the cache. `pack_heads` holds a
// K/V head's query heads in one block.
std::vector<Graph> decode_groups() {
  std::vector<Graph> out;
  {
    Graph g("gqa_decode");  // 2 K/V heads of 3 query heads, 90 cached keys, causal after them
    Tensor q = input(g, "q", {2, 2, 3, 1, 64}, DType::BF16);
    Tensor k = input(g, "k", {2, 2, 1, 90, 64}, DType::BF16), v = input(g, "v", {2, 2, 1, 90, 64}, DType::BF16);
    output("o", attention(q, k, v, 0.125, true));
    out.push_back(std::move(g));
  }
  {
    Graph g("mqa_decode_lengths_bias");  // one K/V head for 5 query heads; keys past the length masked
    Tensor q = input(g, "q", {3, 5, 1, 32}, DType::F16);
    Tensor k = input(g, "k", {3, 1, 130, 32}, DType::F16), v = input(g, "v", {3, 1, 130, 32}, DType::F16);
    Tensor s = matmul(q, k, {false, true, DType::F32}) * (1.0 / std::sqrt(32.0)) + input(g, "bias", {3, 5, 1, 130});
    Tensor length = abs(input(g, "length", {3, 1, 1, 1})) * 100.0 + 1.0;  // 1 … 101 keys
    s = where(iota(g, {1, 130}, 1) < length, s, -INFINITY);
    output("o", matmul(cast(softmax(s), DType::F16), v));
    out.push_back(std::move(g));
  }
  {
    Graph g("gqa_decode_window");  // keys within 20 positions before the query: a mask that reads its position
    Tensor q = input(g, "q", {2, 2, 4, 1, 32}, DType::BF16);
    Tensor k = input(g, "k", {2, 2, 1, 75, 32}, DType::BF16), v = input(g, "v", {2, 2, 1, 75, 32}, DType::BF16);
    Tensor qi = iota(g, {1, 75}, 0) + 74.0, ki = iota(g, {1, 75}, 1);
    Tensor s = matmul(q, k, {false, true, DType::F32}) * 0.2;
    s = where(qi >= ki, where(qi - ki < 20.0, s, -INFINITY), -INFINITY);
    output("o", matmul(cast(softmax(s), DType::BF16), v));
    out.push_back(std::move(g));
  }
  {
    Graph g("mqa_decode_80_heads_lse");  // 80 query heads of one K/V head: two 64-row tiles; the log-sum-exp too
    Tensor q = input(g, "q", {2, 80, 1, 64}, DType::BF16);
    Tensor k = input(g, "k", {2, 1, 150, 64}, DType::BF16), v = input(g, "v", {2, 1, 150, 64}, DType::BF16);
    AttentionWithLse a = attention_with_lse(q, k, v, 0.125, true);
    output("o", a.o);
    output("lse", a.lse);
    out.push_back(std::move(g));
  }
  return out;
}

const Kernel* attention_kernel_of(const Plan& p) {
  for (const Kernel& k : p.kernels)
    if (k.kind == ScheduleKind::Attention) return &k;
  return nullptr;
}

TEST(FusionAttention, PackedQueryHeadsShareABlock) {
  FusionOptions packed, unpacked;  // the keys not split, so that the blocks are the heads'
  packed.schedule.kv_splits = unpacked.schedule.kv_splits = 1;
  unpacked.schedule.pack_heads = 0;
  // (group, blocks: one per K/V head and 64 of its query heads)
  const std::map<std::string, std::pair<int64_t, int64_t>> expected = {{"gqa_decode", {3, 4}},
                                                                        {"mqa_decode_lengths_bias", {5, 3}},
                                                                        {"gqa_decode_window", {4, 4}},
                                                                        {"mqa_decode_80_heads_lse", {80, 4}}};
  for (const Graph& g : decode_groups()) {
    SCOPED_TRACE(g.name());
    const Plan p = plan_fusion(g, packed);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    const Kernel* k = attention_kernel_of(p);
    ASSERT_NE(k, nullptr) << plan_report_text(p);
    EXPECT_EQ(k->schedule.heads_per_block, expected.at(g.name()).first);
    EXPECT_EQ(k->schedule.grid(), expected.at(g.name()).second);
    EXPECT_NE(k->schedule.describe().find("query heads that share one"), std::string::npos) << k->schedule.describe();
    const CompiledKernel c = compile_kernel(p.graph, *k);
    if (!find_ptxas().empty()) {
      EXPECT_TRUE(run_ptxas(c.ptx, k->name).has_value());
    }
    EXPECT_EQ(attention_kernel_of(plan_fusion(g))->schedule.heads_per_block, k->schedule.heads_per_block)
        << "packing is the default";
    const Plan one_per_head = plan_fusion(g, unpacked);
    ASSERT_NE(attention_kernel_of(one_per_head), nullptr);
    EXPECT_EQ(attention_kernel_of(one_per_head)->schedule.heads_per_block, 1) << "--pack-heads 0";
  }
  // Where a block's rows would need different lengths (one per query head), or a head has several
  // queries, each query head keeps its block.
  {
    Graph g("length_per_query_head");
    Tensor q = input(g, "q", {2, 4, 1, 32}, DType::BF16);
    Tensor k = input(g, "k", {2, 1, 64, 32}, DType::BF16), v = input(g, "v", {2, 1, 64, 32}, DType::BF16);
    Tensor s = matmul(q, k, {false, true, DType::F32}) * 0.2;
    s = where(iota(g, {1, 64}, 1) < abs(input(g, "length", {2, 4, 1, 1})) * 60.0, s, -INFINITY);
    output("o", matmul(cast(softmax(s), DType::BF16), v));
    EXPECT_EQ(only_attention(plan_fusion(g, packed))->schedule.heads_per_block, 1);
  }
  {
    Graph g("two_queries");
    Tensor q = input(g, "q", {2, 4, 2, 32}, DType::BF16);
    Tensor k = input(g, "k", {2, 1, 64, 32}, DType::BF16), v = input(g, "v", {2, 1, 64, 32}, DType::BF16);
    output("o", attention(q, k, v, 0.2));
    EXPECT_EQ(only_attention(plan_fusion(g, packed))->schedule.heads_per_block, 1);
  }
}

TEST(GpuAttention, PackedQueryHeadsMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (int pack : {1, 0})
    for (const Graph& g : decode_groups()) {
      SCOPED_TRACE(g.name() + (pack ? " packed" : ""));
      FusionOptions o;
      o.schedule.pack_heads = pack;
      const Plan p = plan_fusion(g, o);
      ASSERT_NE(attention_kernel_of(p), nullptr);
      testing::check_on_gpu(p, seed);
    }
}

// Split-KV: the keys in ranges of whole key tiles, a block each, merged by the last block of
// each query tile through the workspace — decode (packed or not), a cache with lengths (ranges
// past a sequence's length are empty), and a causal prefill writing its log-sum-exp.
std::vector<std::pair<Graph, int>> split_cases() {
  std::vector<std::pair<Graph, int>> out;
  for (Graph& g : decode_groups()) out.emplace_back(std::move(g), 2);  // 75 to 150 keys: 2 or 3 tiles
  out.emplace_back(cache_lengths_graph(), 3);  // 5 tiles of 300 keys: 2, 2, 1 (fewer with the lengths)
  out.emplace_back(with_lse(true), 2);
  for (Graph& g : chains())  // Q in a shared ring and 32-key tiles; a padded head dimension
    if (g.name() == "head_dim_256" || g.name() == "head_dim_96") out.emplace_back(std::move(g), 2);
  return out;
}

TEST(FusionAttention, SplitKeysMergeInTheLastBlock) {
  for (auto& [g, splits] : split_cases()) {
    SCOPED_TRACE(g.name());
    FusionOptions o;
    o.schedule.kv_splits = 1;
    const Plan unsplit = plan_fusion(g, o);
    ASSERT_NE(attention_kernel_of(unsplit), nullptr) << plan_report_text(unsplit);
    const int64_t base = attention_kernel_of(unsplit)->schedule.grid();
    o.schedule.kv_splits = splits;
    const Plan p = plan_fusion(g, o);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    const Kernel* k = attention_kernel_of(p);
    ASSERT_NE(k, nullptr) << plan_report_text(p);
    EXPECT_EQ(k->schedule.kv_splits, splits);
    EXPECT_EQ(k->schedule.grid(), base * splits);
    EXPECT_GT(k->schedule.workspace_bytes(), 0);
    const CompiledKernel c = compile_kernel(p.graph, *k);
    EXPECT_NE(c.tile_ir.find("last_arrival"), std::string::npos) << c.tile_ir;
    if (!find_ptxas().empty()) {
      EXPECT_TRUE(run_ptxas(c.ptx, k->name).has_value());
    }
  }
  // The merge loops over the splits: its registers do not grow with their count (unrolled, 60
  // splits spilled).
  if (!find_ptxas().empty()) {
    for (int splits : {2, 64}) {
      Graph g("long_decode");
      Tensor q = input(g, "q", {1, 2, 8, 1, 128}, DType::BF16);
      Tensor k = input(g, "k", {1, 2, 1, 32768, 128}, DType::BF16), v = input(g, "v", {1, 2, 1, 32768, 128}, DType::BF16);
      output("o", attention(q, k, v, 0.088));
      FusionOptions o;
      o.schedule.kv_splits = splits;
      const Plan p = plan_fusion(g, o);
      const Kernel* k_split = attention_kernel_of(p);
      ASSERT_NE(k_split, nullptr) << plan_report_text(p);
      EXPECT_EQ(k_split->schedule.kv_splits, splits);
      const std::optional<MeasuredKernel> m = run_ptxas(compile_kernel(p.graph, *k_split).ptx, k_split->name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0) << splits << " splits: " << m->registers << " registers";
      EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
    }
  }
  // No more splits than key tiles.
  Graph g("few_keys");
  Qkv t = qkv(g, 16, 100, 32, DType::BF16);
  output("o", attention(t.q, t.k, t.v, 0.2));
  FusionOptions o;
  o.schedule.kv_splits = 64;
  const Plan p = plan_fusion(g, o);
  ASSERT_NE(attention_kernel_of(p), nullptr) << plan_report_text(p);
  EXPECT_EQ(attention_kernel_of(p)->schedule.kv_splits, 2);
}

// --kv-splits auto: where the heads and query tiles alone leave the device's block slots (132 SMs
// × 2) idle, the fewest splits that fill 90 % of them, unless a split would hold fewer than 8 key
// tiles; none where the heads fill them.
TEST(FusionAttention, SplitsFollowTheDevice) {
  struct Case {
    int64_t batch, q_heads, kv_heads, keys;
    bool pack;
  };
  const DeviceProfile device;
  const int64_t slots = int64_t{device.sm_count} * attention_blocks_per_sm(64);
  for (const Case& c : std::vector<Case>{{8, 32, 8, 32768, true},
                                         {1, 64, 8, 131072, true},
                                         {8, 32, 32, 4096, false},
                                         {1, 32, 32, 131072, false},
                                         {1, 8, 8, 1000, false}}) {
    SCOPED_TRACE(fmt::format("B{} Hq{} Hkv{} L{}", c.batch, c.q_heads, c.kv_heads, c.keys));
    Graph g("decode");
    Tensor q = input(g, "q", {c.batch, c.kv_heads, c.q_heads / c.kv_heads, 1, 128}, DType::BF16);
    Tensor k = input(g, "k", {c.batch, c.kv_heads, 1, c.keys, 128}, DType::BF16);
    Tensor v = input(g, "v", {c.batch, c.kv_heads, 1, c.keys, 128}, DType::BF16);
    output("o", attention(q, k, v, 0.088));
    FusionOptions o;
    o.schedule.kv_splits = -1;
    o.schedule.pack_heads = c.pack;
    const Plan p = plan_fusion(g, o);
    const Kernel* kernel = attention_kernel_of(p);
    ASSERT_NE(kernel, nullptr) << plan_report_text(p);
    const TileSchedule& s = kernel->schedule;
    const int64_t blocks = s.batch * s.m_blocks(), splits = s.kv_splits, tiles = s.n_blocks();
    EXPECT_NE(s.describe().find("split-KV for the device"), std::string::npos) << s.describe();
    const bool filled = blocks * splits >= slots * 9 / 10, tiles_bound = (splits + 1) * 8 > tiles;
    EXPECT_TRUE(filled || tiles_bound) << splits << " splits of " << blocks << " blocks, " << tiles << " key tiles";
    if (splits > 1) { EXPECT_LT(blocks * (splits - 1), slots * 9 / 10) << "one split fewer would fill the slots too"; }
    if (splits > 1) { EXPECT_GE(tiles / splits, 8) << "a split of a few key tiles"; }
  }
}

// Each case run twice through one executable: the last block resets its counter for the next
// launch. Lengths of 0 leave every range empty.
TEST(GpuAttention, SplitKeysMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (auto& [g, splits] : split_cases())
    for (int pack : {0, 1}) {
      SCOPED_TRACE(g.name() + (pack ? " packed" : ""));
      FusionOptions o;
      o.schedule.kv_splits = splits;
      o.schedule.pack_heads = pack;
      Executable exe(plan_fusion(g, o));
      ASSERT_NE(attention_kernel_of(exe.plan()), nullptr);
      EXPECT_GT(attention_kernel_of(exe.plan())->schedule.kv_splits, 1);
      TensorMap in = random_inputs(exe.plan().graph, seed);
      for (int launch = 0; launch < 2; ++launch) {
        if (g.name() == "cache_lengths")
          in["length"] = TensorData::from_doubles(DType::F32, {4, 1, 1, 1},
                                                  launch == 0 ? std::vector<double>{1, 0, 129, 300} : std::vector<double>{64, 65, 0, 17});
        const CheckReport r = check_against_reference(exe.plan(), in, exe.run(in));
        EXPECT_TRUE(r.ok) << "launch " << launch << "\n" << r.text();
      }
    }
}

// Packed query heads and split keys on the host: each kernel's Tile IR interpreted, the split
// ranges merged by the last block through the workspace (a cache with lengths that leave some
// ranges empty).
TEST(HostAttention, PackedHeadsAndSplitKeysMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (auto& [g, splits] : split_cases())
    for (int pack : {0, 1})
      for (int split : {1, splits}) {
        SCOPED_TRACE(fmt::format("{}{}, {} splits", g.name(), pack ? " packed" : "", split));
        FusionOptions o;
        o.schedule.kv_splits = split;
        o.schedule.pack_heads = pack;
        const Plan p = plan_fusion(g, o);
        ASSERT_NE(attention_kernel_of(p), nullptr);
        TensorMap in = random_inputs(p.graph, seed);
        if (g.name() == "cache_lengths") in["length"] = TensorData::from_doubles(DType::F32, {4, 1, 1, 1}, {1, 0, 129, 300});
        ASSERT_EQ(host_run_refusal(p), "");
        const CheckReport r = check_against_reference(p, in, run_on_host(p, in));
        EXPECT_TRUE(r.ok) << r.text();
      }
}

// Speculative decoding: a few new tokens per sequence (here 4), written into the cache after its
// `length` keys; token i sees the cache and the new tokens up to itself (keys < length + i + 1).
// One attention kernel, its loop ending at each sequence's own bound.
Graph speculative_decode(int64_t tokens, int64_t max_len) {
  Graph g("speculative_decode");
  Tensor q = input(g, "q", {2, 4, tokens, 64}, DType::BF16);
  Tensor k = input(g, "k", {2, 4, max_len, 64}, DType::BF16), v = input(g, "v", {2, 4, max_len, 64}, DType::BF16);
  Tensor length = input(g, "length", {2, 1, 1, 1});
  Tensor s = matmul(q, k, {false, true, DType::F32}) * 0.125;
  s = where(iota(g, {tokens, max_len}, 1) < length + iota(g, {tokens, max_len}, 0) + 1.0, s, -INFINITY);
  output("o", matmul(cast(softmax(s), DType::BF16), v));
  return g;
}

TEST(FusionAttention, SpeculativeTokensAreOneKernel) {
  const Plan p = plan_fusion(speculative_decode(4, 700));
  for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
  ASSERT_NE(only_attention(p), nullptr) << plan_report_text(p);
}

TEST(GpuAttention, SpeculativeTokensMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Executable exe(plan_fusion(speculative_decode(4, 700)));
  TensorMap in = random_inputs(exe.plan().graph, testing::test_seed());
  for (const std::vector<double>& lengths : std::vector<std::vector<double>>{{0, 696}, {17, 300}, {129, 1}}) {
    SCOPED_TRACE(fmt::format("lengths {}", fmt::join(lengths, ", ")));
    in["length"] = TensorData::from_doubles(DType::F32, {2, 1, 1, 1}, lengths);
    const CheckReport r = check_against_reference(exe.plan(), in, exe.run(in));
    EXPECT_TRUE(r.ok) << r.text();
  }
}

TEST(HostAttention, SpeculativeTokensMatchFloat64) {
  const Plan p = plan_fusion(speculative_decode(4, 700));
  TensorMap in = random_inputs(p.graph, testing::test_seed());
  for (const std::vector<double>& lengths : std::vector<std::vector<double>>{{0, 696}, {129, 1}}) {
    SCOPED_TRACE(fmt::format("lengths {}", fmt::join(lengths, ", ")));
    in["length"] = TensorData::from_doubles(DType::F32, {2, 1, 1, 1}, lengths);
    const CheckReport r = check_against_reference(p, in, run_on_host(p, in));
    EXPECT_TRUE(r.ok) << r.text();
  }
}

// The decode grid: one query per head against a cache of Lmax keys, a length per sequence
// (ragged across the batch: 1, 17, 4097 and 131072 keys), MHA, GQA and MQA, head dimensions 64
// and 128. Each case compiles once and serves two sets of lengths; the default decode schedule
// (a K/V head's query heads in one block, split-KV where the heads leave SMs idle) is checked
// against float64 and against the prefill schedule (a block per query head, the keys unsplit) on
// the same cache.
TEST(GpuAttention, DecodeGridMatchesFloat64AndThePrefillSchedule) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  struct Case {
    int64_t batch, q_heads, kv_heads, max_len, d;
    std::vector<std::vector<double>> lengths;  // per sequence, two launches
  };
  const uint64_t seed = testing::test_seed();
  for (const Case& c : std::vector<Case>{
           {3, 8, 8, 4097, 64, {{1, 17, 4097}, {4097, 4000, 2}}},
           {4, 32, 8, 4097, 128, {{17, 4097, 1, 300}, {4097, 4097, 4097, 4097}}},
           {2, 8, 2, 131072, 128, {{131072, 17}, {1, 131071}}},
           {2, 6, 1, 2000, 64, {{1999, 1}, {17, 2000}}}}) {
    SCOPED_TRACE(fmt::format("B{} Hq{} Hkv{} Lmax {} d {}", c.batch, c.q_heads, c.kv_heads, c.max_len, c.d));
    const int64_t group = c.q_heads / c.kv_heads;
    Graph g("decode_lengths");
    Tensor q = input(g, "q", {c.batch, c.kv_heads, group, 1, c.d}, DType::BF16);
    Tensor k = input(g, "k", {c.batch, c.kv_heads, 1, c.max_len, c.d}, DType::BF16);
    Tensor v = input(g, "v", {c.batch, c.kv_heads, 1, c.max_len, c.d}, DType::BF16);
    Tensor length = input(g, "length", {c.batch, 1, 1, 1, 1});
    Tensor s = matmul(q, k, {false, true, DType::F32}) * (1.0 / std::sqrt(static_cast<double>(c.d)));
    s = where(iota(g, {1, c.max_len}, 1) < length, s, -INFINITY);
    output("o", matmul(cast(softmax(s), DType::BF16), v));
    FusionOptions prefill;
    prefill.schedule.pack_heads = 0;
    prefill.schedule.kv_splits = 1;
    Executable decode(plan_fusion(g)), one_per_head(plan_fusion(g, prefill));
    const Kernel* kernel = attention_kernel_of(decode.plan());
    ASSERT_NE(kernel, nullptr) << plan_report_text(decode.plan());
    ASSERT_NE(attention_kernel_of(one_per_head.plan()), nullptr);
    EXPECT_EQ(kernel->schedule.heads_per_block, group);
    TensorMap in = random_inputs(g, seed);
    for (const std::vector<double>& lengths : c.lengths) {
      SCOPED_TRACE(fmt::format("lengths {} ({} splits)", fmt::join(lengths, ", "), kernel->schedule.kv_splits));
      in["length"] = TensorData::from_doubles(DType::F32, {c.batch, 1, 1, 1, 1}, lengths);
      const TensorMap out = decode.run(in), reference_schedule = one_per_head.run(in);
      const CheckReport r = check_against_reference(decode.plan(), in, out);
      EXPECT_TRUE(r.ok) << r.text();
      const std::vector<double> a = out.at("o").to_doubles(), b = reference_schedule.at("o").to_doubles();
      ASSERT_EQ(a.size(), b.size());
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
      EXPECT_LE(worst, 2.0 / 64) << "the decode and prefill schedules disagree";  // two bf16 roundings of |o| < 4
      fmt::print("  B{} Hq{} Hkv{} Lmax {} d {}, lengths {}: {} splits, worst |decode − prefill schedule| {:.3g}, "
                 "worst relative error {:.3g}\n",
                 c.batch, c.q_heads, c.kv_heads, c.max_len, c.d, fmt::join(lengths, " "), kernel->schedule.kv_splits,
                 worst, r.max_rel_err);
    }
  }
}

// The default prefill schedule (FlashAttention-3's block: TMA, 128 keys a step, the softmax
// overlapped) at full sequence lengths against an independent path on the GPU: the plan without
// the contraction-chain rule, which writes the scores and runs the softmax and both products as
// kernels of their own. Causal and not, GQA, a sliding window, an odd length, d 64, and causal on
// the persistent grid (each block about 4 of the 512 query tiles).
TEST(GpuAttention, PrefillScheduleMatchesTheUnfusedPlan) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  struct Case {
    const char* name;
    int64_t batch, q_heads, kv_heads, n, d;
    bool causal;
    int64_t window = 0;  // > 0: a causal sliding window of this many keys
    bool persistent = false;  // --attention-persistent 1
  };
  const uint64_t seed = testing::test_seed();
  for (const Case& c : {Case{"attention", 1, 8, 8, 4096, 128, false}, Case{"causal", 1, 8, 8, 4096, 128, true},
                        Case{"gqa", 1, 8, 2, 4096, 128, false}, Case{"odd_causal", 1, 8, 8, 4097, 128, true},
                        Case{"odd", 1, 8, 8, 4097, 128, false}, Case{"d64", 2, 8, 8, 2048, 64, true},
                        Case{"window", 1, 8, 8, 4096, 128, true, 1000},
                        Case{"causal_persistent", 2, 8, 8, 4096, 128, true, 0, true}}) {
    SCOPED_TRACE(c.name);
    const Graph g = c.window ? attention_window_graph(c.name, c.batch, c.q_heads, c.n, c.d, c.window)
                             : attention_grouped_graph(c.name, c.batch, c.q_heads, c.kv_heads, c.n, c.n, c.d, c.causal);
    FusionOptions options;
    options.schedule.attention_persistent = c.persistent ? 1 : -1;
    Executable fused(plan_fusion(g, options));
    const Kernel* k = attention_kernel_of(fused.plan());
    ASSERT_NE(k, nullptr) << plan_report_text(fused.plan());
    EXPECT_TRUE(k->schedule.tma && k->schedule.overlap) << k->schedule.describe();
    EXPECT_EQ(k->schedule.tile_blocks > 0, c.persistent);
    FusionOptions unfused;
    unfused.contraction_chains = false;
    Executable materialized(plan_fusion(g, unfused));
    ASSERT_EQ(attention_kernel_of(materialized.plan()), nullptr);
    const TensorMap in = random_inputs(g, seed);
    const std::vector<double> a = fused.run(in).at("o").to_doubles(), b = materialized.run(in).at("o").to_doubles();
    ASSERT_EQ(a.size(), b.size());
    double diff = 0, norm = 0, worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double e = std::isfinite(a[i]) ? std::abs(a[i] - b[i]) : INFINITY;
      diff += e * e;
      norm += b[i] * b[i];
      worst = std::max(worst, e);
    }
    const double rel = std::sqrt(diff / norm);
    EXPECT_LE(rel, 1e-2) << "worst |fused − unfused| " << worst;  // P rounded to bf16 in one, the softmax's output in the other
    fmt::print("  {} B{} Hq{} Hkv{} N{} d {}: |fused − unfused| relative {:.3g}, worst {:.3g}\n", c.name, c.batch,
               c.q_heads, c.kv_heads, c.n, c.d, rel, worst);
  }
}

TEST(GpuAttention, FusedPlansMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (const Graph& g : chains()) {
    SCOPED_TRACE(g.name());
    const Plan p = plan_fusion(g);
    ASSERT_NE(only_attention(p), nullptr);
    testing::check_on_gpu(p, seed);
  }
}

// The same plans on the host (each kernel's Tile IR interpreted): what the builders make of each
// chain checked where no GPU is.
TEST(HostAttention, FusedPlansMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (const Graph& g : chains()) {
    SCOPED_TRACE(g.name());
    const Plan p = plan_fusion(g);
    ASSERT_NE(only_attention(p), nullptr);
    testing::check_on_host(p, seed);
  }
}

// Every chain planned with attention's products on warpgroup MMA (--attention-wgmma 1), without
// and with the softmax overlapped (--attention-overlap 1: three stages), each also
// warp-specialized with K and V by TMA (--attention-tma 1), that also with the warpgroups taking
// turns (--attention-pingpong 1), and overlapped on TMA with 128 keys a step
// (--attention-keys 128); named for a trace.
std::vector<std::pair<std::string, Plan>> wgmma_plans() {
  std::vector<std::pair<std::string, Plan>> out;
  for (int variant = 0; variant < 8; ++variant)
    for (const Graph& g : chains()) {
      FusionOptions o;
      o.schedule.attention_wgmma = 1;
      o.schedule.attention_overlap = variant % 2;
      o.schedule.attention_tma = variant >= 2 ? 1 : 0;
      o.schedule.attention_pingpong = variant >= 4 ? 1 : 0;
      o.schedule.attention_block_n = variant >= 6 ? 128 : 64;
      o.schedule.attention_persistent = variant == 7 ? 1 : 0;
      if (variant == 7) o.profile.sm_count = 2;  // each block takes several query tiles
      static const char* const names[] = {
          "",           ", overlapped", ", tma", ", tma, overlapped", ", tma, turns", ", tma, overlapped, turns",
          ", tma, turns, 128 keys", ", tma, overlapped, turns, 128 keys, persistent on 2 SMs"};
      out.emplace_back(g.name() + names[variant], plan_fusion(g, o));
    }
  return out;
}

// By default, where the products bound the kernel (prefill), FlashAttention-3's block: TMA key
// tiles for two consumer warpgroups, 128 keys a step, the softmax overlapping P·V, on a
// persistent grid where its order balances the blocks (turns only where asked for); where the
// cache's bytes do (decode, which ran 2–4% slower overlapped), every thread's cp.async without
// overlap. The hints force each part.
TEST(FusionAttention, FlashAttention3WhereTheProductsBoundTheKernel) {
  for (const char* name : {"attention", "attention_causal", "attention_gqa", "attention_decode", "attention_decode_gqa"}) {
    SCOPED_TRACE(name);
    const Graph g = find_example(name).build();
    const Plan p = plan_fusion(g);
    const Kernel* k = only_attention(p);
    ASSERT_NE(k, nullptr);
    const TileSchedule& s = k->schedule;
    ASSERT_TRUE(s.wgmma);
    const bool prefill = std::string(name).find("decode") == std::string::npos;
    EXPECT_EQ(prefill, k->cost.compute_s > k->cost.memory_s);
    EXPECT_EQ(s.tma, prefill);
    EXPECT_EQ(s.overlap, prefill);
    EXPECT_FALSE(s.warpgroup_turns);
    EXPECT_EQ(s.tile_blocks, prefill ? p.options.profile.sm_count : 0);
    if (prefill) { EXPECT_LE(s.tile_balance, 1.02); }
    EXPECT_EQ(s.block_m, prefill ? 128 : 64);
    EXPECT_EQ(s.block_n, prefill ? 128 : 64);
    for (int overlap : {0, 1}) {
      FusionOptions o;
      o.schedule.attention_overlap = overlap;
      const TileSchedule& forced = only_attention(plan_fusion(g, o))->schedule;
      EXPECT_EQ(forced.overlap, overlap == 1);
      EXPECT_EQ(forced.tma, prefill);
    }
    FusionOptions per_tile;
    per_tile.schedule.attention_persistent = 0;
    EXPECT_EQ(only_attention(plan_fusion(g, per_tile))->schedule.tile_blocks, 0);
    FusionOptions fa3;
    fa3.schedule.attention_pingpong = fa3.schedule.attention_persistent = 1;
    const TileSchedule& turns = only_attention(plan_fusion(g, fa3))->schedule;
    EXPECT_EQ(turns.warpgroup_turns, prefill);
    EXPECT_EQ(turns.tile_blocks, prefill ? fa3.profile.sm_count : 0);  // a block per SM
    FusionOptions cp_async;
    cp_async.schedule.attention_tma = 0;
    const TileSchedule& plain = only_attention(plan_fusion(g, cp_async))->schedule;
    EXPECT_FALSE(plain.tma);
    EXPECT_FALSE(plain.warpgroup_turns);
    EXPECT_EQ(plain.block_n, 64);
    EXPECT_EQ(plain.overlap, prefill);
  }
}

// Keys that fit one step leave the overlapped softmax nothing to overlap: not overlapped by
// default (its second score tile made ptxas serialize the wgmmas at 16 keys), unless asked for.
// A softcap's tanh, c·tanh(s/c), shifts an exponent whose term is rounded to bf16: its absolute
// error is what counts, and the kernel computes it so (`tanh %x abs`, math::tanh_absolute) for
// c up to 256 — not where c is larger, nor a tanh whose result goes through another tanh; the
// cost model counts the two MUFU instructions of either form a score beside the exponent's one.
TEST(FusionAttention, ASoftcapsTanhNeedsOnlyAnAbsoluteError) {
  auto count = [](const std::string& text, const std::regex& r) {
    return std::distance(std::sregex_iterator(text.begin(), text.end(), r), std::sregex_iterator());
  };
  const std::regex absolute(R"(= tanh %[0-9]+ abs :)"), any(R"(= tanh %[0-9]+)");
  for (auto [c, nested, expected] :
       {std::tuple{30.0, false, 1}, {256.0, false, 1}, {1000.0, false, 0}, {30.0, true, 1}}) {
    SCOPED_TRACE(fmt::format("c {} nested {}", c, nested));
    Graph g("softcap");
    Qkv t = qkv(g, 64, 130, 32, DType::BF16);
    Tensor x = tanh(matmul(t.q, t.k, {false, true, DType::F32}) * (0.1 / c)) * c;
    if (nested) x = tanh(x * (1 / c)) * c;  // the inner tanh's error goes through the outer one
    output("o", matmul(cast(softmax(x), DType::BF16), t.v));
    const Plan p = plan_fusion(g);
    const Kernel* a = only_attention(p);
    ASSERT_NE(a, nullptr) << plan_report_text(p);
    const std::string tile = compile_kernel(p.graph, *a).tile_ir;
    EXPECT_EQ(count(tile, any) % (nested ? 2 : 1), 0) << tile;
    EXPECT_EQ(count(tile, absolute), expected * count(tile, any) / (nested ? 2 : 1)) << tile;
    EXPECT_EQ(a->totals.mufu_per_element, nested ? 4 : 2);  // ex2 and a reciprocal a tanh, either form
  }
  // At the family's shape the accurate tanh (c 1000) outweighs the products, and P·V's wait is
  // pinned below the softmax; the short one (c 50) does not.
  for (double c : {50.0, 1000.0}) {
    Graph g("softcap_big");
    const Shape shape = {8, 32, 4096, 128};
    Tensor q = input(g, "q", shape, DType::BF16), k = input(g, "k", shape, DType::BF16);
    Tensor s = matmul(q, k, {false, true, DType::F32}) * (1 / std::sqrt(128.0));
    output("o", matmul(cast(softmax(tanh(s * (1 / c)) * c), DType::BF16), input(g, "v", shape, DType::BF16)));
    const Plan p = plan_fusion(g);
    const Kernel* a = only_attention(p);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(attention_pins_pv_wait(*a), c > 256) << a->cost.softmax_s << " " << a->cost.tensor_s;
    EXPECT_EQ(compile_kernel(p.graph, *a).tile_ir.find(" pinned :") != std::string::npos, c > 256);
  }
}

// The scores never reach memory, so the kernel picks their roundings and where it adds what: ALiBi's
// S·scale + slope·(i_k − i_q) is one fma a score on S and the key tile's part (at 64 keys
// slope·(offset in the tile), the same in every tile; at 128 slope·(i_k − i_q0), i_q0 the block's
// first query), and the rest, constant along the keys, is added to each tile's row max and taken
// from the exponent's shift — no other arithmetic on score tiles (the masked tiles' compare and
// where aside), and at 128 keys it fits without spilling. The default plan steps 64 keys and says
// why; plain causal attention steps 128.
TEST(FusionAttention, AlibiScoresAreOneFmaAScore) {
  const Example* alibi = nullptr;
  const Example* causal = nullptr;
  for (const Example& e : attention_family_examples()) {
    if (e.name == "attention_alibi") alibi = &e;
    if (e.name == "attention_gqa_causal") causal = &e;
  }
  ASSERT_NE(alibi, nullptr);
  ASSERT_NE(causal, nullptr);
  const std::string why = "f(S) adds a term of its own";
  const Plan biased = plan_fusion(alibi->build()), unbiased = plan_fusion(causal->build());
  ASSERT_NE(only_attention(biased), nullptr);
  ASSERT_NE(only_attention(unbiased), nullptr);
  const TileSchedule& with_bias = only_attention(biased)->schedule;
  EXPECT_EQ(with_bias.block_n, 64);
  EXPECT_NE(with_bias.describe().find(why), std::string::npos) << with_bias.describe();
  const TileSchedule& plain = only_attention(unbiased)->schedule;
  EXPECT_EQ(plain.block_n, 128);
  EXPECT_EQ(plain.describe().find(why), std::string::npos) << plain.describe();
  for (int keys : {64, 128}) {
    FusionOptions o;
    o.schedule.attention_block_n = keys;
    const Plan p = plan_fusion(alibi->build(), o);
    const Kernel* a = only_attention(p);
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a->schedule.block_n, keys);
    const CompiledKernel c = compile_kernel(p.graph, *a);
    const std::string scores = fmt::format("tile<{}x{}xf32, mma_acc>", a->schedule.block_m, keys);
    int fmas = 0;
    std::istringstream lines(c.tile_ir);
    for (std::string line; std::getline(lines, line);) {
      if (line.find(scores) == std::string::npos) continue;
      if (keys != a->schedule.k) {  // (else O·α's product has the score tile's type)
        for (const char* op : {" = add ", " = sub ", " = mul ", " = neg "})
          EXPECT_EQ(line.find(op), std::string::npos) << line;
      }
      fmas += line.find(" = fma ") != std::string::npos;
    }
    EXPECT_GT(fmas, 0) << c.tile_ir;
    if (!find_ptxas().empty()) {
      auto m = run_ptxas(c.ptx, a->name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0) << keys << " keys";
    }
  }
}

TEST(FusionAttention, OneKeyStepIsNotOverlapped) {
  // A softcap's tanh an element makes the products' side bound the kernel (prefill's block).
  Graph g("one_key_step");
  Tensor q = input(g, "q", {2, 8, 1024, 48}, DType::BF16);
  Tensor k = input(g, "k", {2, 8, 16, 48}, DType::BF16);
  Tensor v = input(g, "v", {2, 8, 16, 48}, DType::BF16);
  Tensor s = tanh(matmul(q, k, {.transpose_b = true, .out = DType::F32}) * (0.144 / 5)) * 5.0;
  output("o", matmul(cast(softmax(s), DType::BF16), v, {.out = DType::BF16}));
  const Plan p = plan_fusion(g);
  const Kernel* a = only_attention(p);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->schedule.tma) << a->schedule.describe();
  EXPECT_FALSE(a->schedule.overlap) << a->schedule.describe();
  if (!find_ptxas().empty()) {
    std::optional<MeasuredKernel> m = run_ptxas(compile_kernel(p.graph, *a).ptx, a->name);
    ASSERT_TRUE(m.has_value());
    EXPECT_TRUE(m->notes.empty()) << m->notes.front();
    EXPECT_EQ(m->spill_bytes, 0);
  }
  FusionOptions o;
  o.schedule.attention_overlap = 1;
  EXPECT_TRUE(only_attention(plan_fusion(g, o))->schedule.overlap);
}

// The persistent grid is the default only where its static order of query tiles keeps the
// blocks' work within 2%: not where 133 causal heads of 38 tiles make 2527 pairs, 19 full waves
// of 132 and one of 19 (one block ~1.04× the mean), and the report says why; the hint still
// forces it. N 4097 causal (33 tiles a head) balances, but each head's middle tile would run
// after the pairs, which measured slower than a block a tile: per-tile blocks, and the report
// says why. One causal tile a head (660 heads of 128 queries after 3968 cached keys: 5 a block) has no
// pairs and no middle round.
TEST(FusionAttention, PersistentWhereItsOrderBalances) {
  for (const char* name : {"attention_n4097", "attention_n4097_causal", "attention_window",
                           "attention_d64_causal", "unbalanced_last_wave", "one_tile_a_head"}) {
    SCOPED_TRACE(name);
    const std::string n = name;
    const bool unbalanced = n == "unbalanced_last_wave", middle_last = n == "attention_n4097_causal";
    Graph g = unbalanced ? attention_grouped_graph(name, 1, 133, 133, 38 * 128, 38 * 128, 128, true)
              : n == "one_tile_a_head" ? attention_grouped_graph(name, 1, 660, 660, 128, 4096, 128, true)
                                       : Graph();
    for (const Example& e : attention_family_examples())
      if (e.name == name) g = e.build();
    const Plan p = plan_fusion(g);
    const TileSchedule& s = only_attention(p)->schedule;
    EXPECT_EQ(s.tile_blocks > 0, !unbalanced && !middle_last) << s.describe();
    if (middle_last) {  // balanced, but each head's middle tile would run in a last round
      EXPECT_LE(s.tile_balance, 1.02);
      EXPECT_NE(s.describe().find("middle query tile to a last round"), std::string::npos) << s.describe();
    } else if (unbalanced) {
      EXPECT_GT(s.tile_balance, 1.02);
      EXPECT_NE(s.describe().find("static order would load one block"), std::string::npos) << s.describe();
    } else {
      EXPECT_LE(s.tile_balance, 1.02);
      EXPECT_EQ(s.describe().find("middle query tile"), std::string::npos) << s.describe();
    }
    FusionOptions forced;
    forced.schedule.attention_persistent = 1;
    EXPECT_GT(only_attention(plan_fusion(g, forced))->schedule.tile_blocks, 0);
  }
}

// The causal order places every (head, query tile) once; in each full wave a block's two
// positions hold a head's long tile and its complement (tile numbers adding up to m − 1); the
// heads of a wave are a few consecutive ones; a window keeps groups of 8 heads longest first.
TEST(FusionAttention, CausalTileOrderPairsLongAndShort) {
  for (const auto& [m, heads, blocks] : std::vector<std::array<int64_t, 3>>{
           {32, 256, 132}, {33, 256, 132}, {33, 7, 5}, {2, 3, 4}, {1, 5, 2}, {38, 7, 132}}) {
    SCOPED_TRACE(fmt::format("{} tiles a head, {} heads, {} blocks", m, heads, blocks));
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int64_t t = 0; t < m * heads; ++t) {
      const QueryTilePlace q = causal_tile_place(t, m, heads, blocks, false);
      ASSERT_TRUE(q.head >= 0 && q.head < heads && q.tile >= 0 && q.tile < m) << t;
      seen.insert({q.head, q.tile});
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), m * heads);
    const int64_t full_waves = heads * (m / 2) / blocks;
    for (int64_t w = 0; w < full_waves; ++w) {
      std::set<int64_t> wave_heads;
      for (int64_t b = 0; b < blocks; ++b) {
        const QueryTilePlace a = causal_tile_place(2 * w * blocks + b, m, heads, blocks, false);
        const QueryTilePlace c = causal_tile_place(2 * w * blocks + blocks + b, m, heads, blocks, false);
        EXPECT_EQ(a.head, c.head);
        EXPECT_EQ(a.tile + c.tile, m - 1);
        EXPECT_GE(a.tile, c.tile);
        wave_heads.insert(a.head);
      }
      EXPECT_LE(static_cast<int64_t>(wave_heads.size()), blocks / (m / 2) + 2);
    }
  }
  // (A window's order: the first 8 heads' last tiles first.)
  for (int64_t t = 0; t < 8; ++t) {
    const QueryTilePlace q = causal_tile_place(t, 32, 256, 132, true);
    EXPECT_EQ(q.head, t);
    EXPECT_EQ(q.tile, 31);
  }
}

// Every chain whose head dimension pads to 64 or more plans the wgmma schedule, emitted for
// sm_90a with Q·Kᵀ and P·V as wgmma with A in registers (no ldmatrix of K or V, no mma.sync) and
// ptxas takes it without spills; smaller heads keep mma.sync. On a GPU each plan matches float64.
TEST(FusionAttention, WgmmaScheduleCompiles) {
  int on_wgmma = 0;
  for (const auto& [name, p] : wgmma_plans()) {
    SCOPED_TRACE(name);
    const Kernel* k = only_attention(p);
    ASSERT_NE(k, nullptr);
    if (!k->schedule.wgmma) {
      EXPECT_LT(padded_head_dim(k->schedule.k), 64);
      continue;
    }
    ++on_wgmma;
    const bool small = padded_head_dim(k->schedule.k) <= 128;
    const bool tma = p.options.schedule.attention_tma == 1;
    EXPECT_EQ(k->schedule.tma, tma);
    EXPECT_EQ(k->schedule.stages, (p.options.schedule.attention_overlap || tma) && small ? 3 : 2);
    // Past d 128 overlapped only on TMA: its two stages fit a K and a V in flight each (every
    // thread's cp.async overlapped fetches two tiles ahead: three stages).
    EXPECT_EQ(k->schedule.overlap, p.options.schedule.attention_overlap == 1 && (small || tma));
    const bool turns = tma && small && p.options.schedule.attention_pingpong == 1;
    EXPECT_EQ(k->schedule.warpgroup_turns, turns);
    // (Past d 128 persistent only where not overlapped: with the overlap one such chain spilled.)
    const bool persistent = tma && (small || !k->schedule.overlap) &&
                            p.options.schedule.attention_persistent == 1 && k->schedule.kv_splits == 1 &&
                            !k->schedule.key_limit;
    EXPECT_EQ(k->schedule.tile_blocks > 0, persistent);
    if (persistent) { EXPECT_EQ(k->schedule.tile_blocks, std::min<int64_t>(2, k->schedule.batch * k->schedule.m_blocks())); }
    EXPECT_EQ(k->schedule.block_n, !small ? (tma ? 64 : 32) : p.options.schedule.attention_block_n == 128 ? 128 : 64);
    const CompiledKernel c = compile_kernel(p.graph, *k);
    // Turns: each warpgroup waits at its named barrier and arrives at the other's.
    EXPECT_EQ(c.ptx.find("bar.arrive") != std::string::npos, turns);
    EXPECT_NE(c.ptx.find(".target sm_90a"), std::string::npos);
    EXPECT_NE(c.ptx.find("wgmma.mma_async.sync.aligned.m64n"), std::string::npos);
    EXPECT_EQ(c.ptx.find("mma.sync.aligned"), std::string::npos);
    // The softmax's exponentials on one MUFU instruction each: ex2.approx.ftz, not ex2.approx.
    EXPECT_NE(c.ptx.find("ex2.approx.ftz.f32"), std::string::npos);
    EXPECT_EQ(c.ptx.find("ex2.approx.f32"), std::string::npos);
    // Warp-specialized: Q, K and V by TMA from the producer (their tensor maps; Q's unless the
    // block's rows are several heads'), two consumer warpgroups of 64 rows and the producer's;
    // Q in a ring of its own, S's A operand read there by wgmma (no Q fragments in registers).
    EXPECT_EQ(c.ptx.find("cp.async.bulk.tensor.3d.shared::cluster.global") != std::string::npos, tma);
    EXPECT_EQ(c.tensor_maps.size(), tma ? (k->schedule.heads_per_block > 1 ? 2u : 3u) : 0u);
    EXPECT_EQ(c.tile_ir.find("dot_async @q_tile") != std::string::npos, tma) << c.tile_ir;
    if (tma) {
      EXPECT_EQ(k->schedule.block_m, 128);
      EXPECT_EQ(c.block_threads, 384u);
    }
    if (!find_ptxas().empty()) {
      auto m = run_ptxas(c.ptx, k->name);
      ASSERT_TRUE(m.has_value());
      // No spills and no wgmma serialized by ptxas, but where the warpgroups take turns with the
      // softmax overlapped: there ptxas serializes them for want of registers (C7511) and keeps up
      // to 24 bytes in local memory — the opt-in ping-pong that measured slower.
      const bool short_of_registers = turns && k->schedule.overlap;
      EXPECT_LE(m->spill_bytes, short_of_registers ? 32 : 0);
      if (!short_of_registers) {
        EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
      }
    }
  }
  EXPECT_GE(on_wgmma, 20);
}

TEST(GpuAttention, WgmmaPlansMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (const auto& [name, p] : wgmma_plans()) {
    SCOPED_TRACE(name);
    ASSERT_NE(only_attention(p), nullptr);
    testing::check_on_gpu(p, seed);
  }
}

// The wgmma schedules on the host: K and V by TMA from a producer warpgroup, the warpgroups'
// turns, the softmax overlapped, a persistent grid.
TEST(HostAttention, WgmmaPlansMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (const auto& [name, p] : wgmma_plans()) {
    SCOPED_TRACE(name);
    ASSERT_NE(only_attention(p), nullptr);
    testing::check_on_host(p, seed);
  }
}

// Scores that climb along the keys, by about 3.2 a tile of 64 keys in head 0 and 24 in head 1
// (key j's first element c·j against queries whose first element is 1), the rest random: with
// the running max raised lazily, head 0's shift u stays over tiles (its terms grow towards 2⁸)
// and moves every other tile; head 1's moves every tile, and a shift that stayed would overflow
// its terms (e^100 past the f32 range by its last keys).
TensorMap climbing_scores(const Graph& g, uint64_t seed) {
  TensorMap in = random_inputs(g, seed);
  std::vector<double> q = in.at("q").to_doubles(), k = in.at("k").to_doubles();
  const Shape& qs = in.at("q").shape;
  const Shape& ks = in.at("k").shape;
  const int64_t d = qs[2];
  for (int64_t i = 0; i < qs[0] * qs[1]; ++i) q[static_cast<size_t>(i * d)] = 1;
  for (int64_t h = 0; h < ks[0]; ++h)
    for (int64_t j = 0; j < ks[1]; ++j)
      k[static_cast<size_t>((h * ks[1] + j) * d)] = (h == 0 ? 0.4 : 3.0) * static_cast<double>(j);
  in["q"] = TensorData::from_doubles(in.at("q").dtype, qs, q);
  in["k"] = TensorData::from_doubles(in.at("k").dtype, ks, k);
  return in;
}

// The climbing scores' graph (o and the log-sum-exp: the sum the kernel writes must be the exact
// max's, where O/l alone is not) planned with the running max raised lazily
// (AttentionShape::lazy_rescale) by default, forced on and forced off; the plain and the
// overlapped loop, by cp.async and by TMA, and mma.sync; named for a trace. Each plan's Tile IR
// rescales O `lazy` exactly where its schedule says so: on TMA unless forced off (never on
// cp.async or mma.sync, whose Q fragments in registers ptxas gave to P with it: wrong outputs on
// the GPU for the chains above whose first key tile is wholly masked).
Graph climbing_graph() {
  using namespace dsl;
  Graph g("climbing");
  const Tensor q = input(g, "q", {2, 96, 64}, DType::BF16), k = input(g, "k", {2, 300, 64}, DType::BF16),
               v = input(g, "v", {2, 300, 64}, DType::BF16);
  const AttentionWithLse a = attention_with_lse(q, k, v, 0.125);
  output("o", a.o);
  output("lse", a.lse);
  return g;
}
std::vector<std::pair<std::string, Plan>> lazy_rescale_plans() {
  std::vector<std::pair<std::string, Plan>> out;
  const Graph g = climbing_graph();
  for (int wgmma : {0, 1})
    for (int tma : {0, 1})
      for (int overlap : {0, 1})
        for (int lazy : {-1, 0, 1}) {
          if (!wgmma && (tma || overlap)) continue;
          const std::string name =
              fmt::format("wgmma {} tma {} overlap {} lazy {}", wgmma, tma, overlap, lazy);
          FusionOptions o;
          o.schedule.attention_wgmma = wgmma;
          o.schedule.attention_tma = tma;
          o.schedule.attention_overlap = overlap;
          o.schedule.attention_lazy_rescale = lazy;
          Plan p = plan_fusion(g, o);
          const Kernel* kernel = attention_kernel_of(p);
          EXPECT_NE(kernel, nullptr) << name;
          if (!kernel) continue;
          const bool lazily = tma && lazy != 0;
          EXPECT_EQ(kernel->schedule.lazy_rescale, lazily) << name << ": " << kernel->schedule.describe();
          const std::string ir = tir::print_program(tir::attention_kernel_program(p.graph, *kernel));
          EXPECT_EQ(ir.find(" lazy :") != std::string::npos, lazily) << name;
          out.emplace_back(name, std::move(p));
        }
  return out;
}

TEST(HostAttention, LazyRescaleMatchesFloat64OnClimbingScores) {
  const TensorMap in = climbing_scores(climbing_graph(), testing::test_seed());
  for (const auto& [name, p] : lazy_rescale_plans()) {
    SCOPED_TRACE(name);
    const CheckReport r = check_against_reference(p, in, run_on_host(p, in));
    EXPECT_TRUE(r.ok) << r.text();
  }
}

TEST(GpuAttention, LazyRescaleMatchesFloat64OnClimbingScores) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const TensorMap in = climbing_scores(climbing_graph(), testing::test_seed());
  for (auto& [name, p] : lazy_rescale_plans()) {
    SCOPED_TRACE(name);
    Executable exe(std::move(p));
    const CheckReport r = check_against_reference(exe.plan(), in, exe.run(in));
    EXPECT_TRUE(r.ok) << r.text();
  }
}

// The persistent causal order where its last wave is partial (5 heads: 5 pairs over 4 blocks),
// for an even count of tiles a head and an odd one (each head's middle tile after the pairs),
// interpreted on the host: every query tile taken once, by the kernel's own index arithmetic.
TEST(HostAttention, CausalPairsWithAPartialWaveMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (int64_t n : {256, 300}) {
    SCOPED_TRACE(n);
    const Graph g = attention_grouped_graph(fmt::format("causal_pairs_n{}", n), 1, 5, 5, n, n, 64, true);
    FusionOptions o;
    o.schedule.attention_wgmma = o.schedule.attention_tma = o.schedule.attention_overlap = 1;
    o.schedule.attention_block_n = 128;
    o.schedule.attention_persistent = 1;
    o.profile.sm_count = 4;
    const Plan p = plan_fusion(g, o);
    ASSERT_NE(only_attention(p), nullptr);
    ASSERT_EQ(only_attention(p)->schedule.tile_blocks, 4) << only_attention(p)->schedule.describe();
    testing::check_on_host(p, seed);
  }
}

// The attention family at benchmark size: each graph one attention kernel on FlashAttention-3's
// block (past d 128 two stages, overlapped too), assembled without spills; the window's loop starts at its
// first key's tile, so it multiplies fewer scores than the causal mask alone.
TEST(FusionAttention, TheAttentionFamilyIsOneKernelEach) {
  const std::vector<Example>& family = attention_family_examples();
  EXPECT_GE(family.size(), 10u);
  double causal_flops = 0, window_flops = 0;
  for (const Example& e : family) {
    SCOPED_TRACE(e.name);
    const Plan p = plan_fusion(e.build());
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    const Kernel* k = only_attention(p);
    ASSERT_NE(k, nullptr) << plan_report_text(p);
    EXPECT_TRUE(k->schedule.tma) << k->schedule.describe();
    EXPECT_TRUE(k->schedule.overlap) << k->schedule.describe();
    EXPECT_EQ(k->schedule.stages, padded_head_dim(k->schedule.k) <= 128 ? 3 : 2) << k->schedule.describe();
    EXPECT_EQ(k->schedule.window_offset.has_value(), e.name == "attention_window");
    // P·V's wait pinned below the softmax only where the softmax clearly outweighs the products:
    // none of the family (the softcap's tanh, in seven instructions, leaves its softmax level
    // with the products); the pin is a CTA fence just before that wait.
    const bool pinned = attention_pins_pv_wait(*k);
    EXPECT_FALSE(pinned) << k->cost.softmax_s << " " << k->cost.tensor_s;
    EXPECT_EQ(plan_report_text(p).find("its wait pinned below the softmax") != std::string::npos, pinned);
    if (e.name == "attention_window") {
      EXPECT_EQ(*k->schedule.window_offset, -1023);
      window_flops = k->cost.flops;
      EXPECT_NE(plan_report_text(p).find("sliding window"), std::string::npos) << plan_report_text(p);
    }
    if (e.name == "attention_gqa_causal") causal_flops = k->cost.flops;
    const CompiledKernel c = compile_kernel(p.graph, *k);
    EXPECT_EQ(c.tile_ir.find(" pinned :") != std::string::npos, pinned);
    EXPECT_EQ(c.ptx.find("fence.acq_rel.cta;") != std::string::npos, pinned);
    if (!find_ptxas().empty()) {
      auto m = run_ptxas(c.ptx, k->name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0) << m->registers << " registers";
      EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
    }
  }
  // 1024 of a causal mask's 2048 keys on average, plus the edge tiles.
  EXPECT_LT(window_flops, 0.6 * causal_flops);
  EXPECT_GT(window_flops, 0.4 * causal_flops);
}

// The grid: every head dimension × score function (none, causal, a causal window, causal with
// ALiBi's bias from a tensor, a softcap, an additive bias per key) × query heads per K/V head
// (1, 3) × lengths (whole tiles, one past, fewer queries than keys: the causal mask's diagonal
// offset) × dtype (bf16, f16), on the default schedule and FlashAttention-3's block forced — each
// against float64 with poisoned outputs.
struct GridCase {
  int64_t d, group, n_q, n_kv;
  int scores;  // 0 plain, 1 causal, 2 window, 3 ALiBi, 4 softcap, 5 key bias
  DType dtype;
  bool fa3;
  std::string name() const {
    static const char* const kinds[] = {"plain", "causal", "window", "alibi", "softcap", "key_bias"};
    return fmt::format("grid_d{}_g{}_{}x{}_{}_{}{}", d, group, n_q, n_kv, kinds[scores], dtype_name(dtype),
                       fa3 ? "_fa3" : "");
  }
};

std::vector<GridCase> grid_cases() {
  std::vector<GridCase> out;
  int i = 0;
  for (int64_t d : {64, 96, 128, 256})
    for (int scores = 0; scores < 6; ++scores)
      for (int64_t group : {1, 3})
        for (auto [n_q, n_kv] : {std::pair<int64_t, int64_t>{128, 128}, {257, 257}, {100, 333}})
          for (DType dt : {DType::BF16, DType::F16})
            out.push_back({d, group, n_q, n_kv, scores, dt, i++ % 2 == 1});
  return out;
}

Graph grid_graph(const GridCase& c) {
  Graph g(c.name());
  const int64_t b = 2, kv_heads = 2;
  Tensor q = input(g, "q", {b, kv_heads, c.group, c.n_q, c.d}, c.dtype);
  Tensor k = input(g, "k", {b, kv_heads, 1, c.n_kv, c.d}, c.dtype), v = input(g, "v", {b, kv_heads, 1, c.n_kv, c.d}, c.dtype);
  Tensor s = matmul(q, k, {false, true, DType::F32}) * (1.0 / std::sqrt(static_cast<double>(c.d)));
  // Queries are the last n_q positions of n_kv (the causal diagonal ends at the last key).
  Tensor qi = iota(g, {c.n_q, c.n_kv}, 0) + static_cast<double>(c.n_kv - c.n_q), ki = iota(g, {c.n_q, c.n_kv}, 1);
  if (c.scores == 3) s = s + input(g, "slope", {kv_heads, c.group, 1, 1}) * (ki - qi);
  if (c.scores == 4) s = tanh(s * (1.0 / 30)) * 30.0;
  if (c.scores == 5) s = s + input(g, "key_bias", {b, 1, 1, 1, c.n_kv});
  if (c.scores == 2) s = where(qi - ki < 70.0, s, -INFINITY);
  if (c.scores == 1 || c.scores == 2 || c.scores == 3) s = where(qi >= ki, s, -INFINITY);
  output("o", matmul(cast(softmax(s), c.dtype), v));
  return g;
}

TEST(FusionAttention, TheGridIsOneKernelEach) {
  const std::vector<GridCase> cases = grid_cases();
  EXPECT_GE(cases.size(), 200u);
  int tma = 0;
  for (const GridCase& c : cases) {
    SCOPED_TRACE(c.name());
    FusionOptions o;
    if (c.fa3) o.schedule.attention_tma = o.schedule.attention_overlap = 1;
    const Plan p = plan_fusion(grid_graph(c), o);
    const Kernel* k = only_attention(p);
    ASSERT_NE(k, nullptr) << plan_report_text(p);
    if (c.fa3) {
      EXPECT_TRUE(k->schedule.tma && k->schedule.overlap);
    }
    tma += k->schedule.tma;
  }
  // Both of prefill's schedules are well covered: TMA's and every thread's cp.async.
  EXPECT_GE(tma, 50);
  EXPECT_GE(static_cast<int>(cases.size()) - tma, 50);
}

// Each case planned (FlashAttention-3's block forced where it says so) and checked against
// float64 on inputs seeded `seed` + its index, the outputs from `run`, the cases on threads of
// their own; a failure per case that fails.
void check_grid(const std::vector<GridCase>& cases, uint64_t seed,
                const std::function<TensorMap(const Plan&, const TensorMap&)>& run) {
  std::vector<std::string> failures(cases.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < cases.size();) {
      const GridCase& c = cases[i];
      try {
        FusionOptions o;
        if (c.fa3) o.schedule.attention_tma = o.schedule.attention_overlap = 1;
        const Plan p = plan_fusion(grid_graph(c), o);
        const TensorMap in = random_inputs(p.graph, seed + i);
        const CheckReport check = check_against_reference(p, in, run(p, in));
        if (!check.ok) failures[i] = check.text();
      } catch (const std::exception& e) {
        failures[i] = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::clamp(std::thread::hardware_concurrency(), 1u, 16u); ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  size_t failed = 0;
  for (size_t i = 0; i < cases.size(); ++i)
    if (!failures[i].empty()) {
      ++failed;
      ADD_FAILURE() << cases[i].name() << ", inputs seeded " << seed + i << ":\n" << failures[i];
    }
  fmt::print("  grid: {} cases, {} failed (seed {} + case index)\n", cases.size(), failed, seed);
}

TEST(GpuAttention, GridMatchesFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  check_grid(grid_cases(), testing::test_seed(),
             [](const Plan& p, const TensorMap& in) { return Executable(p).run(in); });
}

// Every seventh case of the grid on the host (each kernel's Tile IR interpreted): every head
// dimension, score function, group, length, dtype and both schedules among them.
TEST(HostAttention, GridSampleMatchesFloat64) {
  std::vector<GridCase> sample;
  const std::vector<GridCase> cases = grid_cases();
  for (size_t i = 0; i < cases.size(); i += 7) sample.push_back(cases[i]);
  std::set<int64_t> dims, groups, lengths;
  std::set<int> scores, dtypes, schedules;
  for (const GridCase& c : sample) {
    dims.insert(c.d);
    groups.insert(c.group);
    lengths.insert(c.n_kv);
    scores.insert(c.scores);
    dtypes.insert(static_cast<int>(c.dtype));
    schedules.insert(c.fa3);
  }
  EXPECT_EQ(dims.size(), 4u);
  EXPECT_EQ(scores.size(), 6u);
  EXPECT_EQ(groups.size() + lengths.size() + dtypes.size() + schedules.size(), 2u + 3u + 2u + 2u);
  check_grid(sample, testing::test_seed(),
             [](const Plan& p, const TensorMap& in) { return run_on_host(p, in); });
}

}  // namespace
}  // namespace tilefuse
