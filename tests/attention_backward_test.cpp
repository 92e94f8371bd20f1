// The attention backward's two kernels in Tile IR v2 (compiler/tile/attention_backward.h): their
// programs verify and round-trip and read the streamed stages both ways, their PTX assembles
// without spills, and their gradients match float64's — on the host (the Tile IR interpreted:
// odd lengths, several heads, causal and not, bf16 and f16) and on a GPU (larger shapes, timed)
// — from seeded random q, k, v and dO into poisoned outputs.
#include "compiler/tile/attention_backward.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/autodiff.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/tensor_data.h"
#include "compiler/support/error.h"
#include "compiler/tile/interpret.h"
#include "compiler/tile/ir_verify.h"
#include "dsl_examples/examples.h"
#include "runtime/check.h"
#include "runtime/cuda_driver.h"
#include "runtime/executable.h"
#include "runtime/host_run.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {

using tir::AttentionBackwardShape;
using Part = AttentionBackwardShape::Part;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

AttentionBackwardShape shape(int64_t heads, int64_t n_q, int64_t n_kv, int64_t d, Part part) {
  AttentionBackwardShape s;
  s.batch_heads = heads;
  s.n_q = n_q;
  s.n_kv = n_kv;
  s.d = d;
  s.part = part;
  s.block_cols = tir::attention_backward_block_cols(d, part, false);
  s.scale = 1.0 / std::sqrt(static_cast<double>(d));
  return s;
}

// The program's text, checked to parse back into the same text.
std::string round_tripped(const tir::Program& p) {
  const std::string text = tir::print_program(p);
  try {
    EXPECT_EQ(tir::print_program(tir::parse_program(text)), text);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what() << " in\n" << text;
  }
  return text;
}

TEST(TileIrAttentionBackward, ProgramsVerifyAndRoundTrip) {
  for (Part part : {Part::Keys, Part::Queries}) {
    const std::string text = round_tripped(tir::attention_backward_program(shape(2, 100, 77, 64, part)));
    // Each streamed stage is read transposed for the scores (the B operand of A·Bᵀ) and as it is
    // for the gradients' products; the loop carries one accumulator per gradient.
    EXPECT_GT(count(text, "] transposed : tile<16x64xbf16, mma_b>"), 0) << text;
    EXPECT_GT(count(text, "] : tile<16x64xbf16, mma_b>"), 0) << text;
    const size_t loop = text.find("= for ");
    ASSERT_NE(loop, std::string::npos);
    const std::string carried = text.substr(loop, text.find('\n', loop) - loop);
    EXPECT_EQ(count(carried, "tile<64x64xf32, mma_acc>"), part == Part::Keys ? 2 : 1) << carried;
    EXPECT_EQ(count(text, "exp2"), 1) << "the probabilities recomputed once a step, with no max or sum";
  }
  {  // One kernel for all three (wgmma): dSᵀ stored to shared memory, dS·K in halves of d read
     // from it and added into the workspace, the last key block's conversion.
    AttentionBackwardShape s = shape(2, 100, 77, 128, Part::All);
    s.wgmma = true;
    const std::string text = round_tripped(tir::attention_backward_program(s));
    EXPECT_EQ(count(text, "store @ds_tile[%"), 1) << text;
    EXPECT_EQ(count(text, "dot_async @ds_tile["), 2) << text;
    EXPECT_EQ(count(text, "cols 64, "), 1) << text;
    EXPECT_EQ(count(text, "store_add %arg"), 2) << text;
    EXPECT_EQ(count(text, "last_arrival"), 1) << text;
    s.wgmma = false;
    EXPECT_THROW(tir::attention_backward_program(s), Error);  // (wgmma only)
  }
  {  // Summed by TMA: dQᵀ = Kᵀ·dSᵀ from K's resident stage read transposed and dSᵀ's two stages,
     // added through the staging panels; 128 keys a block at d 128 only.
    AttentionBackwardShape s = shape(2, 100, 77, 128, Part::All);
    s.wgmma = s.tma = true;
    s.block_rows = 128;
    const std::string text = round_tripped(tir::attention_backward_program(s));
    EXPECT_EQ(count(text, "] transposed, @ds_tile[%"), 1) << text;
    EXPECT_EQ(count(text, "tma_store_add %arg"), 1) << text;
    EXPECT_EQ(count(text, "via @dq_staging by warpgroup :"), 1) << text;  // (each warpgroup its rows)
    {  // The sums are waited for before the block counts in: without that wait the verifier says so.
      tir::Program p = tir::attention_backward_program(s);
      ASSERT_EQ(p.body.body.back().opcode, tir::Opcode::Specialize);
      std::vector<tir::Inst>& consumers = p.body.body.back().regions.at(1).body;
      const auto wait = std::find_if(consumers.begin(), consumers.end(),
                                     [](const tir::Inst& i) { return i.opcode == tir::Opcode::WaitStores; });
      ASSERT_NE(wait, consumers.end());
      consumers.erase(wait);
      const std::vector<std::string> problems = tir::program_problems(p);
      EXPECT_TRUE(std::any_of(problems.begin(), problems.end(), [](const std::string& m) {
        return m.find("not waited for") != std::string::npos;
      })) << fmt::format("{}", fmt::join(problems, "; "));
    }
    EXPECT_EQ(count(text, "store_add %arg"), 1) << text;  // (the tma_store_add alone)
    EXPECT_EQ(count(text, "last_arrival"), 1) << text;
    s.n_q = 101;  // (TMA's rows of f32 sums need 16-byte strides)
    EXPECT_THROW(tir::attention_backward_program(s), Error);
    s.n_q = 100;
    s.d = 64;
    EXPECT_THROW(tir::attention_backward_program(s), Error);
  }
  AttentionBackwardShape s = shape(1, 64, 64, 96, Part::Keys);
  EXPECT_THROW(tir::attention_backward_program(s), Error);
  s.d = 64;
  s.dtype = DType::F32;
  EXPECT_THROW(tir::attention_backward_program(s), Error);
}

TEST(CodegenAttentionBackward, PtxHasTheProductsAndAssemblesWithoutSpills) {
  for (const char* sm : {"sm_80", "sm_90"})
    for (int64_t d : {64, 128})
      for (Part part : {Part::Keys, Part::Queries}) {
        SCOPED_TRACE(fmt::format("{} d {} {}", sm, d, part == Part::Keys ? "keys" : "queries"));
        AttentionBackwardShape s = shape(2, 200, 300, d, part);
        s.causal_offset = 100;
        const CodegenOptions opt = codegen_options_for(sm);
        const std::string ptx = program_ptx(tir::attention_backward_program(s), opt);
        EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), std::string::npos);
        EXPECT_NE(ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
                  std::string::npos);                                                        // B as it is
        EXPECT_NE(ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16"), std::string::npos);  // B transposed
        EXPECT_NE(ptx.find("cp.async.cg.shared.global"), std::string::npos);
        if (find_ptxas().empty()) continue;
        auto m = run_ptxas(ptx, "attention_backward", opt);
        ASSERT_TRUE(m.has_value());
        // dK's and dV's causal step at d 128 keeps 4–12 bytes in local memory beside its two
        // accumulators of 64 registers each (a known cost of this mma.sync form; see the header).
        EXPECT_LE(m->spill_bytes, d == 128 && part == Part::Keys ? 16 : 0);
        ::testing::Test::RecordProperty(
            fmt::format("registers_{}_d{}_{}", sm, d, part == Part::Keys ? "keys" : "queries"), m->registers);
      }
}

// On wgmma (sm_90a): every product a wgmma.mma_async from the rings, the scores' B read
// transposed, and ptxas neither spills nor serializes them.
TEST(CodegenAttentionBackward, WgmmaPtxAssemblesWithoutSpills) {
  const CodegenOptions opt = codegen_options_for("sm_90a");
  for (int64_t d : {64, 128})
    // (keys grouped: two query heads a K/V head, the steps tile-major)
    for (const auto& [part, group] : std::vector<std::pair<Part, int64_t>>{
             {Part::Keys, 1}, {Part::Queries, 1}, {Part::All, 1}, {Part::Keys, 2}, {Part::All, 0}}) {
      if (group == 0 && d != 128) continue;  // (summed by TMA: d 128)
      const char* part_name = group > 1               ? "keys grouped"
                              : part == Part::Keys    ? "keys"
                              : part == Part::Queries ? "queries"
                              : group == 0            ? "all, summed by TMA"
                                                      : "all";
      SCOPED_TRACE(fmt::format("d {} {}", d, part_name));
      AttentionBackwardShape s = shape(2, 200, 300, d, part);
      s.group = std::max<int64_t>(group, 1);
      s.causal_offset = 100;
      s.wgmma = true;
      s.block_cols = tir::attention_backward_block_cols(d, part, true);
      if (group == 0) s.tma = true, s.block_rows = 128;
      const tir::Program p = tir::attention_backward_program(s);
      EXPECT_NE(tir::print_program(p).find("] transposed, "), std::string::npos);
      const std::string ptx = program_ptx(p, opt);
      EXPECT_NE(ptx.find("wgmma.mma_async.sync.aligned"), std::string::npos);
      EXPECT_EQ(ptx.find("mma.sync.aligned"), std::string::npos);
      if (find_ptxas().empty()) continue;
      auto m = run_ptxas(ptx, "attention_backward", opt);
      ASSERT_TRUE(m.has_value());
      if (part == Part::All) {
        EXPECT_NE(ptx.find(s.tma ? "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
                                 : "red.global.add.v2.f32"),
                  std::string::npos);
      }
      // (Summed by TMA, the causal mask in every step of the one loop keeps 44–76 bytes in local
      // memory beside dK, dV and dQᵀ's accumulators; without a mask none: CausalFreeSumsByTma.)
      EXPECT_LE(m->spill_bytes, group == 0 ? 80 : 0);
      EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
      std::printf("  wgmma d %lld %s: %d registers, %d bytes spilled\n", static_cast<long long>(d), part_name,
                  m->registers, m->spill_bytes);
      ::testing::Test::RecordProperty(fmt::format("registers_wgmma_d{}_{}", d, part_name), m->registers);
    }
}

// dQ summed by TMA without a causal mask (attention_train's kernel with `--attention-dq-tma 1`):
// no spills, the reductions in the PTX.
TEST(CodegenAttentionBackward, CausalFreeSumsByTma) {
  AttentionBackwardShape s = shape(4, 512, 512, 128, Part::All);
  s.wgmma = s.tma = true;
  s.block_rows = 128;
  s.block_cols = tir::attention_backward_block_cols(128, Part::All, true);
  const CodegenOptions opt = codegen_options_for("sm_90a");
  const std::string ptx = program_ptx(tir::attention_backward_program(s), opt);
  EXPECT_NE(ptx.find("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"),
            std::string::npos);
  EXPECT_NE(ptx.find("fence.proxy.async.global"), std::string::npos);
  if (find_ptxas().empty()) GTEST_SKIP() << "no ptxas";
  auto m = run_ptxas(ptx, "attention_backward", opt);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->spill_bytes, 0);
  EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
}

// Seeded inputs, the float64 forward's row statistics and the float64 gradients.
struct Case {
  int64_t heads, n_q, n_kv, d;
  DType dtype;
  std::optional<int64_t> causal_offset;
  int64_t group = 1;  // query heads per K/V head
};
struct Problem {
  TensorData q, k, v, d_o, lse, delta;  // L = c + ln h from the forward's row max c and divisor h
  std::vector<double> dq, dk, dv;  // float64's
};

// The float64 forward's row statistics and gradients of the problem's q, k, v and dO.
void reference(const Case& c, double scale, Problem* out) {
  Problem& pr = *out;
  const std::vector<double> q = pr.q.to_doubles(), k = pr.k.to_doubles(), v = pr.v.to_doubles(),
                            d_o = pr.d_o.to_doubles();
  const int64_t nq = c.n_q, nk = c.n_kv, d = c.d;
  std::vector<double> lse(static_cast<size_t>(c.heads * nq)), delta(lse.size());
  pr.dq.assign(q.size(), 0);
  pr.dk.assign(k.size(), 0);
  pr.dv.assign(v.size(), 0);
  std::vector<double> p(static_cast<size_t>(nk)), dp(static_cast<size_t>(nk)), o(static_cast<size_t>(d));
  for (int64_t h = 0; h < c.heads; ++h)
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t kh = h / c.group;  // (K/V heads shared by `group` query heads)
      auto at = [&](const std::vector<double>& x, int64_t head, int64_t rows, int64_t r, int64_t col) {
        return x[static_cast<size_t>((head * rows + r) * d + col)];
      };
      double mx = -INFINITY;
      for (int64_t j = 0; j < nk; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e) s += at(q, h, nq, i, e) * at(k, kh, nk, j, e);
        const bool seen = !c.causal_offset || j <= i + *c.causal_offset;
        p[static_cast<size_t>(j)] = seen ? s * scale : -INFINITY;
        mx = std::max(mx, p[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (double& x : p) sum += x = mx == -INFINITY ? 0 : std::exp(x - mx);
      const size_t row = static_cast<size_t>(h * nq + i);
      // The shift 0 where the row sees no key, the divisor max(Σ, 1), as softmax's are.
      lse[row] = (mx == -INFINITY ? 0.0 : mx) + std::log(std::max(sum, 1.0));
      for (double& x : p) x = sum > 0 ? x / sum : 0;
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t e = 0; e < d; ++e)
          o[static_cast<size_t>(e)] += p[static_cast<size_t>(j)] * at(v, kh, nk, j, e);
      for (int64_t e = 0; e < d; ++e) delta[row] += at(d_o, h, nq, i, e) * o[static_cast<size_t>(e)];
      for (int64_t j = 0; j < nk; ++j) {
        double x = 0;
        for (int64_t e = 0; e < d; ++e) x += at(d_o, h, nq, i, e) * at(v, kh, nk, j, e);
        const double pj = p[static_cast<size_t>(j)], ds = pj * (x - delta[row]);
        for (int64_t e = 0; e < d; ++e) {
          pr.dq[static_cast<size_t>((h * nq + i) * d + e)] += scale * ds * at(k, kh, nk, j, e);
          pr.dk[static_cast<size_t>((kh * nk + j) * d + e)] += scale * ds * at(q, h, nq, i, e);
          pr.dv[static_cast<size_t>((kh * nk + j) * d + e)] += pj * at(d_o, h, nq, i, e);
        }
      }
    }
  pr.lse = TensorData::from_doubles(DType::F32, {c.heads, nq}, lse);
  pr.delta = TensorData::from_doubles(DType::F32, {c.heads, nq}, delta);
}

Problem problem(const Case& c, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Problem pr;
  pr.q = TensorData::random(c.dtype, {c.heads, c.n_q, c.d}, rng);
  pr.k = TensorData::random(c.dtype, {c.heads / c.group, c.n_kv, c.d}, rng);
  pr.v = TensorData::random(c.dtype, {c.heads / c.group, c.n_kv, c.d}, rng);
  pr.d_o = TensorData::random(c.dtype, {c.heads, c.n_q, c.d}, rng);
  reference(c, scale, &pr);
  return pr;
}

// The largest |got − want| over the largest |want|: P and dS are rounded to the inputs' dtype
// before their products, and the gradients once more when stored.
double worst_error(const std::vector<double>& got, const std::vector<double>& want, std::string* where) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t e = 0; e < got.size(); ++e) {
    const double err = std::fabs(got[e] - want[e]);
    if (!(err <= worst)) {
      worst = err;
      *where = fmt::format("element {}: got {}, float64 {}", e, got[e], want[e]);
    }
  }
  return worst / std::max(scale, 1e-30);
}
double bound(DType dtype) { return dtype == DType::BF16 ? 1e-2 : 2e-3; }

// The gradients a kernel writes: dK and dV, or dQ.
using Run = std::function<std::vector<TensorData>(const tir::Program&, const Problem&, const Case&)>;

// Whether the part All (dQ added up across the key blocks) takes the case: on wgmma, 64 keys a
// block by red.global, or 128 by TMA's reductions at d 128 with a query count a multiple of 4.
bool sums_dq(const Case& c, int block_rows, bool wgmma, bool tma) {
  return wgmma && (tma ? block_rows == 128 && c.d == 128 && c.n_q % 4 == 0 : block_rows == 64);
}

// `tma`: the kernels fed by a producer warpgroup's TMA copies (wgmma).
void check_case(const Case& c, uint64_t seed, int block_rows, const Run& run, bool wgmma = false,
                bool tma = false) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const Problem pr = problem(c, scale, seed);
  std::vector<Part> parts = {Part::Keys, Part::Queries};
  if (sums_dq(c, block_rows, wgmma, tma)) parts.push_back(Part::All);
  for (Part part : parts) {
    AttentionBackwardShape s = shape(c.heads, c.n_q, c.n_kv, c.d, part);
    s.dtype = c.dtype;
    s.causal_offset = c.causal_offset;
    s.block_rows = block_rows;
    s.group = c.group;
    s.wgmma = wgmma;
    s.tma = tma;
    s.block_cols = tir::attention_backward_block_cols(c.d, part, wgmma);
    const std::vector<TensorData> grads = run(tir::attention_backward_program(s), pr, c);
    const std::vector<const std::vector<double>*> want = part == Part::Keys ? std::vector{&pr.dk, &pr.dv}
                                                         : part == Part::All
                                                             ? std::vector{&pr.dk, &pr.dv, &pr.dq}
                                                             : std::vector{&pr.dq};
    const std::vector<const char*> names =
        part == Part::Queries ? std::vector{"dq"} : std::vector{"dk", "dv", "dq"};
    for (size_t g = 0; g < want.size(); ++g) {
      std::string where;
      const double err = worst_error(grads[g].to_doubles(), *want[g], &where);
      EXPECT_LE(err, bound(c.dtype)) << names[g] << " " << where << " (seed " << seed << ")";
      std::printf(
          "  %s%s %lld heads /%lld %lld×%lld d %lld %s%s%s%s, %d rows: worst error %.3g of the largest "
          "(bound "
          "%.3g)\n",
          names[g], part == Part::All ? " (one kernel)" : "", static_cast<long long>(c.heads),
          static_cast<long long>(c.group), static_cast<long long>(c.n_q), static_cast<long long>(c.n_kv),
          static_cast<long long>(c.d), dtype_name(c.dtype), c.causal_offset ? " causal" : "",
          wgmma ? " wgmma" : "", tma ? " tma" : "", block_rows, err, bound(c.dtype));
    }
  }
}

// The gradients' buffers, poisoned (NaN): an element left unwritten shows.
std::vector<TensorData> poisoned_gradients(const tir::Program& p) {
  std::vector<TensorData> grads;
  for (const tir::Param& prm : p.params)
    if (prm.output) {
      TensorData t = TensorData::zeros(prm.dtype, prm.view);
      for (size_t e = 0; e + 1 < t.bytes.size(); e += 2) t.bytes[e + 1] = 0x7f, t.bytes[e] = 0xc1;
      grads.push_back(std::move(t));
    }
  return grads;
}

// The zeroed workspace of a program that adds dQ up (none for the others): dQ's sums, then a
// counter per K/V head.
std::vector<uint8_t> workspace_of(const tir::Program& p, const Case& c) {
  for (const tir::Param& prm : p.params)
    if (prm.workspace)
      return std::vector<uint8_t>(static_cast<size_t>((num_elements(prm.view) + c.heads / c.group) * 4), 0);
  return {};
}

std::vector<TensorData> interpreted(const tir::Program& p, const Problem& pr, const Case& c) {
  std::vector<TensorData> grads = poisoned_gradients(p);
  std::vector<TensorData> inputs = {pr.q, pr.k, pr.v, pr.d_o, pr.lse, pr.delta};
  std::vector<uint8_t> workspace = workspace_of(p, c);
  std::vector<tir::HostArg> args;
  for (TensorData& t : inputs) args.push_back({t.bytes.data(), t.bytes.size()});
  for (TensorData& t : grads) args.push_back({t.bytes.data(), t.bytes.size()});
  if (!workspace.empty()) args.push_back({workspace.data(), workspace.size()});
  tir::interpret(p, args);
  for (uint8_t byte : workspace) EXPECT_EQ(byte, 0) << "the workspace is not left zero";
  return grads;
}

TEST(HostAttentionBackward, MatchesFloat64) {
  const uint64_t seed = testing::test_seed();
  for (const Case& c : std::vector<Case>{{2, 70, 45, 32, DType::BF16, std::nullopt},
                                         {1, 45, 70, 16, DType::F16, std::nullopt},
                                         {2, 50, 50, 32, DType::BF16, 0},
                                         {1, 37, 90, 16, DType::F16, 53},
                                         {1, 90, 37, 16, DType::BF16, -53},
                                         {4, 45, 70, 16, DType::BF16, std::nullopt, 4}}) {
    SCOPED_TRACE(fmt::format("{} heads ({} a K/V head), {}×{}, d {}, {}{}", c.heads, c.group, c.n_q, c.n_kv,
                             c.d, dtype_name(c.dtype),
                             c.causal_offset ? fmt::format(", causal offset {}", *c.causal_offset) : ""));
    check_case(c, seed, 32, interpreted);
  }
  // On wgmma: warpgroups of 64 rows, d 64; a K/V head shared by 3 query heads (GQA), causal.
  for (const Case& c : std::vector<Case>{{2, 70, 45, 64, DType::BF16, std::nullopt},
                                         {1, 90, 37, 64, DType::F16, 5},
                                         {1, 150, 200, 64, DType::BF16, -70},  // blocks with no tiles
                                         // causal loops of several masked and unmasked steps, their
                                         // bounds off the tiles' edges
                                         {1, 260, 330, 64, DType::BF16, 62},
                                         {1, 330, 260, 64, DType::BF16, -45},
                                         // grouped heads' causal steps, tile-major
                                         {4, 260, 200, 64, DType::BF16, 62, 2},
                                         {6, 50, 70, 64, DType::BF16, 20, 3}}) {
    SCOPED_TRACE(
        fmt::format("wgmma: {} heads, {}×{}, d {}, {}", c.heads, c.n_q, c.n_kv, c.d, dtype_name(c.dtype)));
    check_case(c, seed, 64, interpreted, true);
    check_case(c, seed, 64, interpreted, true, true);  // fed by TMA
  }
  // Blocks of 128 rows on wgmma (--attention-backward-rows 128): two warpgroups sharing each
  // streamed stage, the second block's keys partly past the end; GQA and causal; by TMA too.
  for (bool tma : {false, true})
    check_case({6, 90, 200, 64, DType::BF16, 20, 3}, seed, 128, interpreted, true, tma);
  // At d 128 by TMA the part All too, dQ summed by TMA's reductions: GQA and causal with query
  // tiles partly past the end; keys partly past the end, not causal, f16.
  check_case({6, 92, 200, 128, DType::BF16, 20, 3}, seed, 128, interpreted, true, true);
  check_case({2, 128, 150, 128, DType::F16, std::nullopt}, seed, 128, interpreted, true, true);
}

// The program on device copies of the problem's inputs, into poisoned gradients; with `timed`,
// the median of that many launches after the first.
// A program with a workspace (dQ's sums) runs twice before its gradients are read: the second
// launch finds the workspace as the first left it.
std::vector<TensorData> on_gpu(const tir::Program& p, const Problem& pr, const Case& c, int timed = 0,
                               double* median_ms = nullptr) {
  cuda::Module module = cuda::Module::load_ptx(program_ptx(p), p.name);
  CUfunction f = module.function(p.name);
  const unsigned threads = static_cast<unsigned>(p.launch_threads()),
                 shared = static_cast<unsigned>(p.shared_bytes());
  EXPECT_GT(cuda::prepare_launch(f, {threads}, 1, shared, p.name), 0);
  std::vector<TensorData> grads = poisoned_gradients(p);
  std::vector<const TensorData*> all = {&pr.q, &pr.k, &pr.v, &pr.d_o, &pr.lse, &pr.delta};
  for (const TensorData& t : grads) all.push_back(&t);
  std::vector<cuda::DeviceBuffer> buffers;
  for (const TensorData* t : all) {
    buffers.emplace_back(t->bytes.size());
    buffers.back().upload(t->bytes.data(), t->bytes.size());
  }
  const std::vector<uint8_t> workspace = workspace_of(p, c);
  if (!workspace.empty()) {
    buffers.emplace_back(workspace.size());
    buffers.back().fill_u8(0);
  }
  std::vector<CUdeviceptr> ptrs;
  for (const cuda::DeviceBuffer& b : buffers) ptrs.push_back(b.ptr());
  std::vector<void*> params;
  for (CUdeviceptr& ptr : ptrs) params.push_back(&ptr);
  uint32_t epoch = 1;  // (a kernel with a workspace takes the launch's epoch after it)
  if (!workspace.empty()) params.push_back(&epoch);
  std::vector<CUtensorMap> maps;  // (TMA-read inputs: their tensor maps, after the tensors)
  const std::vector<TensorMapSpec> specs = tensor_maps_of(p);
  maps.reserve(specs.size());
  for (const TensorMapSpec& m : specs) {
    maps.push_back(cuda::tensor_map(ptrs.at(m.tensor), m.dtype, m.dims, m.strides, m.box, p.name));
    params.push_back(&maps.back());
  }
  cuda::Stream stream;
  const cuda::Dim3 grid{static_cast<unsigned>(p.grid[0])};
  cuda::launch(f, grid, {threads}, shared, stream.get(), params.data(), p.name);
  if (!workspace.empty()) cuda::launch(f, grid, {threads}, shared, stream.get(), params.data(), p.name);
  std::vector<float> ms;
  for (int t = 0; t < timed; ++t) {
    cuda::Event start, stop;
    start.record(stream.get());
    cuda::launch(f, grid, {threads}, shared, stream.get(), params.data(), p.name);
    stop.record(stream.get());
    stop.synchronize();
    ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  stream.synchronize();
  if (median_ms && !ms.empty()) {
    std::sort(ms.begin(), ms.end());
    *median_ms = ms[ms.size() / 2];
  }
  const size_t first_grad = all.size() - grads.size();  // the buffers follow `all`
  for (size_t g = 0; g < grads.size(); ++g)
    buffers[first_grad + g].download(grads[g].bytes.data(), grads[g].bytes.size());
  return grads;
}

TEST(GpuAttentionBackward, MatchesFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (const Case& c : std::vector<Case>{{3, 200, 150, 64, DType::BF16, std::nullopt},
                                         {2, 256, 256, 128, DType::BF16, 0},
                                         {2, 129, 300, 128, DType::F16, 171},
                                         {1, 300, 129, 64, DType::BF16, -171},
                                         {2, 97, 97, 32, DType::F16, 0},
                                         {8, 300, 200, 128, DType::BF16, 0, 4}}) {
    SCOPED_TRACE(fmt::format("{} heads ({} a K/V head), {}×{}, d {}, {}{}", c.heads, c.group, c.n_q, c.n_kv,
                             c.d, dtype_name(c.dtype),
                             c.causal_offset ? fmt::format(", causal offset {}", *c.causal_offset) : ""));
    const ::tilefuse::Run run = [](const tir::Program& p, const Problem& pr, const Case& cs) {
      return on_gpu(p, pr, cs);
    };
    for (bool wgmma : {false, true})
      if (!wgmma || c.d >= 64) check_case(c, seed, 64, run, wgmma);
    if (c.d < 64) continue;
    check_case(c, seed, 64, run, true, true);                                 // fed by TMA
    for (bool tma : {false, true}) check_case(c, seed, 128, run, true, tma);  // two warpgroups a block
  }
}

// The training shape (8 × 32 heads of 4096 queries and keys, d 128, bf16), each kernel (mma.sync,
// and on sm_90 wgmma) timed on random inputs with row statistics of a softmax over 4096 keys (not
// checked: float64 would take hours); TFLOP/s of the backward's 2.5 × 4·n²·d per head (halved
// when causal), as FlashAttention counts it.
TEST(GpuAttentionBackward, TrainingShapeTimed) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const int64_t heads = 256, n = 4096, d = 128;
  std::mt19937_64 rng(testing::test_seed());
  Problem pr;
  pr.q = TensorData::random(DType::BF16, {heads, n, d}, rng);
  pr.k = TensorData::random(DType::BF16, {heads, n, d}, rng);
  pr.v = TensorData::random(DType::BF16, {heads, n, d}, rng);
  pr.d_o = TensorData::random(DType::BF16, {heads, n, d}, rng);
  std::vector<double> lse(static_cast<size_t>(heads * n)), delta(lse.size());
  std::normal_distribution<double> normal;
  for (size_t r = 0; r < lse.size(); ++r) {
    lse[r] = 4 + 0.1 * normal(rng) + std::log(static_cast<double>(n) * (1 + 0.1 * std::fabs(normal(rng))));
    delta[r] = 0.1 * normal(rng);
  }
  pr.lse = TensorData::from_doubles(DType::F32, {heads, n}, lse);
  pr.delta = TensorData::from_doubles(DType::F32, {heads, n}, delta);
  const bool hopper = cuda::Context::get().info().cc_major >= 9;
  const Case whole = {heads, n, n, d, DType::BF16, std::nullopt};
  for (const char* how : {"mma.sync", "wgmma", "wgmma, TMA"})
    for (bool causal : {false, true}) {
      const bool wgmma = how[0] == 'w', tma = std::strchr(how, 'T') != nullptr;
      if (wgmma && !hopper) continue;
      double total = 0;
      for (Part part : {Part::Keys, Part::Queries, Part::All}) {
        if (part == Part::All && !wgmma) continue;
        AttentionBackwardShape s = shape(heads, n, n, d, part);
        if (causal) s.causal_offset = 0;
        s.wgmma = wgmma;
        s.tma = tma;
        if (part == Part::All && tma) s.block_rows = 128;  // (summed by TMA's reductions)
        s.block_cols = tir::attention_backward_block_cols(d, part, wgmma);
        double ms = 0;
        const std::vector<TensorData> grads = on_gpu(tir::attention_backward_program(s), pr, whole, 10, &ms);
        for (const TensorData& g :
             grads) {  // every element written, and finite (bf16's exponent not all ones)
          int64_t bad = 0;
          for (size_t e = 0; e + 1 < g.bytes.size(); e += 2)
            bad += (g.bytes[e + 1] & 0x7f) == 0x7f && (g.bytes[e] & 0x80);
          EXPECT_EQ(bad, 0);
        }
        const double flops =
            (part == Part::All ? 2.5 : 1.0) * 4 * heads * static_cast<double>(n) * n * d / (causal ? 2 : 1);
        if (part == Part::All) {  // the one kernel against the two
          std::printf(
              "  backward%s B8 H32 N4096 d128 bf16 as one kernel, dQ added up (%s): %.3f ms, %.0f "
              "TFLOP/s (two kernels: %.3f ms)\n",
              causal ? " causal" : "", tma ? "TMA's reductions, 128 keys" : "red.global, 64 keys", ms,
              flops / ms / 1e9, total);
          continue;
        }
        std::printf("  backward %s%s (%s): %.3f ms\n", part == Part::Keys ? "dK, dV" : "dQ",
                    causal ? " causal" : "", how, ms);
        total += ms;
      }
      const double flops = 2.5 * 4 * heads * static_cast<double>(n) * n * d / (causal ? 2 : 1);
      std::printf("  backward%s B8 H32 N4096 d128 bf16 (%s): %.3f ms, %.0f TFLOP/s\n",
                  causal ? " causal" : "", how, total, flops / total / 1e9);
    }
}

// ---- found by fusion in the gradient graph ----

const int64_t kHeads[2] = {2, 3};

// q [2, 2, 3, n, d] with K and V [2, 2, 1, n, d]: each K/V head shared by 3 query heads (GQA).
Graph gqa_train_graph(int64_t n, int64_t d, bool causal) {
  return attention_train_graph(fmt::format("gqa_train_n{}_d{}{}", n, d, causal ? "_causal" : ""), 2, 6, n, d,
                               causal, 3);
}

// `dq_sums`: ScheduleHints::attention_dq_sums (1: dQ summed across the key blocks in the keys'
// kernel; 0: dQ's own kernel; -1: the model's choice).
FusionOptions dq_form(int dq_sums) {
  FusionOptions o;
  o.schedule.attention_dq_sums = dq_sums;
  return o;
}
Plan train_plan(int64_t n, int64_t d, bool causal, int dq_sums = 0) {
  return plan_fusion(attention_train_graph(fmt::format("train_n{}_d{}{}", n, d, causal ? "_causal" : ""),
                                           kHeads[0], kHeads[1], n, d, causal),
                     dq_form(dq_sums));
}

std::vector<const Kernel*> backward_kernels(const Plan& p) {
  std::vector<const Kernel*> out;
  for (const Kernel& k : p.kernels)
    if (k.kind == ScheduleKind::AttentionBackward) out.push_back(&k);
  return out;
}

// dsl::grad of attention plans its backward as two kernels that recompute P — one writing dK and
// dV, one dQ — and no kernel writes a tensor of the scores' shape; the report says so.
TEST(FusionAttentionBackward, TheGradientGraphBecomesTwoKernels) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Plan p = train_plan(100, 64, causal);
    const std::vector<const Kernel*> backward = backward_kernels(p);
    ASSERT_EQ(backward.size(), 2u) << plan_report_text(p);
    std::vector<std::vector<std::string>> outputs = {testing::outputs_written(p, *backward[0]),
                                                     testing::outputs_written(p, *backward[1])};
    std::sort(outputs.begin(), outputs.end());
    EXPECT_EQ(outputs, (std::vector<std::vector<std::string>>{{"dk", "dv"}, {"dq"}}));
    for (const Kernel& k : p.kernels)
      for (NodeId o : k.outputs) {
        const Shape& sh = p.graph.node(o).shape;
        EXPECT_FALSE(sh.size() == 4 && sh[2] == 100 && sh[3] == 100)
            << k.name << " writes %" << o << " " << shape_str(sh);
      }
    const std::string report = plan_report_text(p);
    EXPECT_NE(report.find("attention backward %"), std::string::npos) << report;
    EXPECT_NE(report.find("never reach memory"), std::string::npos) << report;
    // The rows' log-sum-exp comes from the forward's kernel, written beside O (no kernel of its
    // own); D from its row reduction: the backward reads each from one of them.
    std::map<NodeId, ScheduleKind> writer;
    for (const Kernel& k : p.kernels)
      for (NodeId o : k.outputs) writer[o] = k.kind;
    std::multiset<ScheduleKind> row_writers;
    for (NodeId i : backward[0]->inputs)
      if (p.graph.node(i).shape.back() == 1) row_writers.insert(writer.at(i));
    EXPECT_EQ(row_writers, (std::multiset<ScheduleKind>{ScheduleKind::Attention, ScheduleKind::RowReduce}))
        << report;
  }
}

// A score function other than S·scale with a causal mask (here a softcap) keeps the plan that
// writes P and dS, and the plan says why.
// FlashAttention-2's form — dQ's products summed across the key blocks in the keys' kernel — is
// priced beside the two kernels: at the training shape its sums' traffic at L2 loses, and the
// decision says by how much; asked for, it is one kernel writing all three gradients through a
// workspace; where wgmma cannot run it, the two kernels stay and the decision says why.
TEST(FusionAttentionBackward, DqSummedAcrossKeyBlocksIsPriced) {
  const Graph g = attention_train_graph("train", 8, 32, 4096, 128, false);
  const Plan chosen = plan_fusion(g, dq_form(-1));
  EXPECT_EQ(backward_kernels(chosen).size(), 2u);
  const std::string report = plan_report_text(chosen);
  EXPECT_NE(report.find("dQ summed across the key blocks in one kernel (5 products, not 7) predicted"),
            std::string::npos)
      << report;
  const Plan summed = plan_fusion(g, dq_form(1));
  const std::vector<const Kernel*> one = backward_kernels(summed);
  ASSERT_EQ(one.size(), 1u) << plan_report_text(summed);
  EXPECT_EQ(testing::outputs_written(summed, *one[0]), (std::vector<std::string>{"dk", "dq", "dv"}));
  EXPECT_GT(one[0]->schedule.workspace_bytes(), 0);
  EXPECT_GT(one[0]->cost.reduce_s, 0);
  EXPECT_GT(one[0]->cost.predicted_s, 0);
  double two_s = 0;
  for (const Kernel* k : backward_kernels(chosen)) two_s += k->cost.predicted_s;
  EXPECT_LT(two_s, one[0]->cost.predicted_s);  // (as the model chose)
  // d 32 is mma.sync's: no summed form.
  const Plan small = train_plan(70, 32, false, 1);
  EXPECT_EQ(backward_kernels(small).size(), 2u);
  EXPECT_NE(plan_report_text(small).find("not dQ summed across the key blocks: "), std::string::npos);
}

// dQ summed by TMA's reductions (`--attention-dq-tma 1`, off by default: measured slower than the two
// kernels): asked for with the one kernel at d 128, 128 keys a block fed by TMA, its sums predicted to run
// beside the products; the plan matches float64 on the host (and on a GPU where there is one).
TEST(FusionAttentionBackward, DqSummedByTmaWhereAskedFor) {
  FusionOptions o = dq_form(1);
  o.schedule.attention_dq_tma = 1;
  const Plan big = plan_fusion(attention_train_graph("train", 8, 32, 4096, 128, false), o);
  std::vector<const Kernel*> one = backward_kernels(big);
  ASSERT_EQ(one.size(), 1u) << plan_report_text(big);
  EXPECT_TRUE(one[0]->schedule.tma);
  EXPECT_EQ(one[0]->schedule.block_m, 128);
  const KernelCost& c = one[0]->cost;
  EXPECT_LT(c.compute_s, c.tensor_s + c.softmax_s + c.reduce_s);  // (the sums beside the math)
  EXPECT_NE(plan_report_text(big).find("by TMA (cp.reduce.async.bulk)"), std::string::npos);
  const Plan by_reds = plan_fusion(attention_train_graph("train", 8, 32, 4096, 128, false), dq_form(1));
  EXPECT_FALSE(backward_kernels(by_reds).at(0)->schedule.tma);  // (the default: red.global)
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Plan p = plan_fusion(attention_train_graph("small", 1, 2, 132, 128, causal), o);
    one = backward_kernels(p);
    ASSERT_EQ(one.size(), 1u) << plan_report_text(p);
    EXPECT_TRUE(one[0]->schedule.tma);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    testing::check_on_host(p, testing::test_seed());
    if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
  }
  // Where the queries' f32 rows are not whole 16 bytes (130), the sums by red.global.
  one = backward_kernels(plan_fusion(attention_train_graph("odd", 1, 2, 130, 128, false), o));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_FALSE(one[0]->schedule.tma);
}

// dQ summed in the keys' kernel where its shape is not K's: more queries than keys and the K/V
// head shared by three query heads (MQA). The plan's checks take dQ by its map in the kernel's
// iteration space (they refused it as written outside the domain, and as running along the
// query heads dK sums over: fuzz seed 1561), and the plan matches float64 on the host.
TEST(FusionAttentionBackward, DqSummedWhereItsShapeIsNotTheKeys) {
  using namespace dsl;
  Graph g("mqa_train");
  Tensor q = input(g, "q", {3, 40, 64}, DType::BF16), k = input(g, "k", {1, 70, 64}, DType::BF16);
  Tensor v = input(g, "v", {1, 70, 64}, DType::BF16);
  Tensor o = attention(q, k, v, 0.125, false);
  output("o", o);
  const std::vector<Tensor> grads = grad({o}, {input(g, "do", {3, 40, 64}, DType::BF16)}, {q, k, v});
  output("dq", grads[0]);
  output("dk", grads[1]);
  output("dv", grads[2]);
  const Plan p = plan_fusion(g, dq_form(1));
  const std::vector<const Kernel*> one = backward_kernels(p);
  ASSERT_EQ(one.size(), 1u) << plan_report_text(p);
  EXPECT_EQ(testing::outputs_written(p, *one[0]), (std::vector<std::string>{"dk", "dq", "dv"}));
  for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
  testing::check_on_host(p, testing::test_seed());
  if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
}

TEST(FusionAttentionBackward, OutsideTheRuleThePlanSaysWhy) {
  using namespace dsl;
  Graph g("softcap_train");
  const Shape shape = {2, 40, 32};
  Tensor q = input(g, "q", shape, DType::BF16), k = input(g, "k", shape, DType::BF16);
  Tensor v = input(g, "v", shape, DType::BF16);
  MatMulOptions t;
  t.transpose_b = true;
  Tensor s = matmul(q, k, t) * 0.125;
  Tensor o = matmul(cast(softmax(tanh(s * 0.05) * 20.0, -1), DType::BF16), v);
  output("o", o);
  const std::vector<Tensor> grads = grad({o}, {input(g, "do", shape, DType::BF16)}, {q, k, v});
  output("dq", grads[0]);
  const Plan p = plan_fusion(g);
  EXPECT_TRUE(backward_kernels(p).empty());
  const std::string report = plan_report_text(p);
  EXPECT_NE(
      report.find("not the fused attention backward: dS reaches the gradient's product from P∘(dP − D)"),
      std::string::npos)
      << report;
}

// The gradients' products on their own, for a plan's outputs: float64's from the plan's inputs.
void check_plan_gradients(const Plan& p, const TensorMap& inputs, const TensorMap& outputs, int64_t n,
                          int64_t d, bool causal, int64_t group = 1) {
  Case c{group > 1 ? 12 : kHeads[0] * kHeads[1],
         n,
         n,
         d,
         DType::BF16,
         causal ? std::optional<int64_t>(0) : std::nullopt,
         group};
  Problem pr;
  pr.q = inputs.at("q");
  pr.k = inputs.at("k");
  pr.v = inputs.at("v");
  pr.d_o = inputs.at("do");
  reference(c, 1.0 / std::sqrt(static_cast<double>(d)), &pr);
  for (auto [name, want] : {std::pair{"dq", &pr.dq}, std::pair{"dk", &pr.dk}, std::pair{"dv", &pr.dv}}) {
    std::string where;
    const double err = worst_error(outputs.at(name).to_doubles(), *want, &where);
    EXPECT_LE(err, bound(c.dtype)) << name << " " << where << " (" << p.graph.name() << ")";
    std::printf("  %s %s: worst error %.3g of the largest (bound %.3g)\n", p.graph.name().c_str(), name, err,
                bound(c.dtype));
  }
}

// The fused plans interpreted on the host: their gradients against float64's.
TEST(HostAttentionBackward, FusedPlansMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (bool causal : {false, true})
    for (int64_t d : {32, 64})  // (d 64: on wgmma, where dQ may be summed in the keys' kernel)
      for (int sums : {0, 1}) {
        if (sums && d < 64) continue;
        const Plan p = train_plan(70, d, causal, sums);
        ASSERT_EQ(backward_kernels(p).size(), sums ? 1u : 2u) << plan_report_text(p);
        EXPECT_EQ(backward_kernels(p)[0]->schedule.wgmma, d == 64);
        const TensorMap inputs = random_inputs(p.graph, seed);
        const TensorMap outputs = run_on_host(p, inputs);
        check_plan_gradients(p, inputs, outputs, 70, d, causal);
        // The generic check judges it too: its noisy reference keeps the mask's i_q + offset exact
        // (whole numbers, as f32 adds them), so the diagonal does not move.
        const CheckReport check = check_against_reference(p, inputs, outputs);
        EXPECT_TRUE(check.ok && !check.ill_conditioned) << check.text();
      }
  // GQA: dK and dV summed over the 3 query heads of each K/V head in the keys' kernel (and dQ
  // summed there across the key blocks, or in its own kernel).
  for (int sums : {0, 1}) {
    const Plan p = plan_fusion(gqa_train_graph(50, 64, true), dq_form(sums));
    ASSERT_EQ(backward_kernels(p).size(), sums ? 1u : 2u) << plan_report_text(p);
    const TensorMap inputs = random_inputs(p.graph, seed);
    check_plan_gradients(p, inputs, run_on_host(p, inputs), 50, 64, true, 3);
  }
}

// FlashAttention-2's backward written out in its textbook form — P = e^(S·scale − L) (rounded
// to bf16 as dV's operand, and so read by dS) and dS = P∘(dP − D), L and D given — fuses as
// autodiff's form (P = 2^(X·log2 e + M), M = −L·log2 e given as the kernels use it) does: two
// kernels, no N×N tensor written; the kernels then scale L themselves, and the gradients match
// float64 on the host.
TEST(HostAttentionBackward, TheTextbookFormFusesToo) {
  using namespace dsl;
  Graph g("textbook_backward");
  const Shape qs = {2, 3, 70, 64}, rows = {2, 3, 70, 1};
  const Tensor q = input(g, "q", qs, DType::BF16), k = input(g, "k", qs, DType::BF16),
               v = input(g, "v", qs, DType::BF16), d_o = input(g, "do", qs, DType::BF16);
  const Tensor lse = input(g, "lse", rows), delta = input(g, "delta", rows);
  const double scale = 0.125;
  const Tensor p = cast(exp(matmul(q, k, {false, true, DType::F32}) * scale - lse), DType::BF16);
  const Tensor dp = matmul(d_o, v, {false, true, DType::F32});
  const Tensor ds = cast(cast(p, DType::F32) * (dp - delta) * scale, DType::BF16);
  output("dq", matmul(ds, k, {false, false, DType::BF16}));
  output("dk", matmul(ds, q, {true, false, DType::BF16}));
  output("dv", matmul(p, d_o, {true, false, DType::BF16}));
  const Plan plan = plan_fusion(g, dq_form(0));
  ASSERT_EQ(backward_kernels(plan).size(), 2u) << plan_report_text(plan);
  for (const Kernel& kernel : plan.kernels)
    for (NodeId o : kernel.outputs) EXPECT_NE(plan.graph.node(o).shape.back(), 70) << kernel.name;
  const TensorMap in = random_inputs(plan.graph, testing::test_seed());
  const CheckReport r = check_against_reference(plan, in, run_on_host(plan, in));
  EXPECT_TRUE(r.ok) << r.text();
}

TEST(GpuAttentionBackward, FusedPlansMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  const int sums_forms = cuda::Context::get().info().cc_major >= 9 ? 2 : 1;  // (summed dQ: wgmma)
  for (int sums = 0; sums < sums_forms; ++sums) {
    for (bool causal : {false, true})
      for (int64_t n : {100, 257}) {
        const Plan p = train_plan(n, 128, causal, sums);
        ASSERT_EQ(backward_kernels(p).size(), sums ? 1u : 2u);
        const TensorMap inputs = random_inputs(p.graph, seed);
        Executable exe(p);
        check_plan_gradients(p, inputs, exe.run(inputs), n, 128, causal);
      }
    for (int64_t d : {64, 128}) {  // GQA
      const Plan p = plan_fusion(gqa_train_graph(200, d, true), dq_form(sums));
      ASSERT_EQ(backward_kernels(p).size(), sums ? 1u : 2u);
      const TensorMap inputs = random_inputs(p.graph, seed);
      Executable exe(p);
      check_plan_gradients(p, inputs, exe.run(inputs), 200, d, true, 3);
    }
  }
}

}  // namespace
}  // namespace tilefuse
