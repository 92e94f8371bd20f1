// Codegen: every example's PTX assembles with ptxas -arch=sm_90; the PTX has the accesses the
// schedule promises; targets are checked.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "compiler/codegen/compile.h"
#include "compiler/codegen/disk_cache.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/support/error.h"
#include "compiler/tile/ir.h"
#include "compiler/tile/ir_verify.h"
#include "compiler/tile/pitch_copy.h"
#include "dsl_examples/examples.h"
#include "runtime/device_probe.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {
using namespace dsl;

int count(const std::string& s, const std::string& re) {
  std::regex r(re);
  return static_cast<int>(std::distance(std::sregex_iterator(s.begin(), s.end(), r), std::sregex_iterator()));
}

TEST(Codegen, EveryExampleAssemblesWithPtxasWithoutSpillsOrNotes) {
  if (find_ptxas().empty()) GTEST_SKIP() << "no CUDA toolkit (ptxas) on this machine";
  std::vector<Graph> graphs;
  for (const Example& e : examples()) graphs.push_back(e.build());
  // Layernorm of rows longer than the examples' (clusters of blocks of 1024 threads with their
  // 64 registers each).
  for (DType dt : {DType::F32, DType::BF16}) {
    Graph g(std::string("layernorm_32k_") + dtype_name(dt));
    output("y",
           layernorm(input(g, "x", {64, 32768}, dt), input(g, "w", {32768}, dt), input(g, "b", {32768}, dt)));
    graphs.push_back(std::move(g));
  }
  // RMSNorm of a row that a cluster of two blocks holds, 32 elements per thread.
  Graph rms("rmsnorm_64k");
  output("y", rmsnorm(input(rms, "x", {64, 65536}), input(rms, "w", {65536})));
  graphs.push_back(std::move(rms));
  // Every kernel tilefuse generates, the matmuls too (by default they may be cuBLASLt's).
  FusionOptions own_gemm;
  own_gemm.library_gemm = LibraryGemmUse::Never;
  for (const Graph& g : graphs) {
    Plan p = plan_fusion(g, own_gemm);
    for (const Kernel& k : p.kernels) {
      ASSERT_FALSE(k.library) << k.name;
      CompiledKernel c = compile_kernel(p.graph, k);
      auto m = run_ptxas(c.ptx, k.name);
      ASSERT_TRUE(m.has_value());
      EXPECT_GT(m->registers, 0) << k.name;
      EXPECT_EQ(m->spill_bytes, 0) << k.name;
      // No performance note either (a wgmma serialized, a wait injected). matmul_odd's kernel,
      // whose output is stored from registers element by element, is among them: rounded one
      // element at a time, its accumulators made ptxas serialize its wgmmas (C7514).
      EXPECT_TRUE(m->notes.empty()) << k.name << ": " << fmt::format("{}", fmt::join(m->notes, "; "));
    }
  }
}

// The off-benchmark family: at least 30 graphs, each moving at least 64 MB (so its time is the
// memory system's, not the launch's), every one planned soundly and every kernel assembled.
TEST(Codegen, OffBenchmarkFamilyPlansAndAssembles) {
  const std::vector<Example>& family = family_examples();
  EXPECT_GE(family.size(), 30u);
  std::set<std::string> names;
  for (const Example& e : family) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(names.insert(e.name).second) << "two graphs named " << e.name;
    Graph g = e.build();
    EXPECT_EQ(g.name(), e.name);
    EXPECT_GE(minimum_bytes(g), int64_t{64} << 20);
    Plan p = plan_fusion(g);
    EXPECT_TRUE(plan_problems(p).empty());
    for (const Kernel& k : p.kernels) {
      CompiledKernel c = compile_kernel(p.graph, k);
      if (!find_ptxas().empty()) {
        auto m = run_ptxas(c.ptx, k.name);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->spill_bytes, 0) << k.name;
      }
    }
  }
}

// ptxas -v's report read: registers, spills, and its performance notes — info lines, not
// warnings — each as its code and words without the function's name (spaces collapsed).
TEST(Codegen, PtxasReportKeepsItsPerformanceNotes) {
  const MeasuredKernel m = ptxas_report(
      "ptxas info    : Compiling entry function 'k0' for 'sm_90a'\n"
      "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
      "wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline stage in "
      "the function 'k0'\n"
      "ptxas info    : (C7517) warpgroup.wait is injected in around line 599 by compiler to allow use of registers "
      "defined by GMMA in function 'k0'\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 1024 bytes smem\n"
      "    48 bytes stack frame, 40 bytes spill stores, 40 bytes spill loads\n");
  EXPECT_EQ(m.registers, 168);
  EXPECT_EQ(m.spill_bytes, 40);
  ASSERT_EQ(m.notes.size(), 2u);
  EXPECT_EQ(m.notes[0],
            "C7514 Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma "
            "instructions reading accumulator registers of a wgmma between start and end of the pipeline stage");
  EXPECT_EQ(m.notes[1],
            "C7517 warpgroup.wait is injected in around line 599 by compiler to allow use of registers defined by GMMA");
  EXPECT_TRUE(ptxas_report("ptxas info    : Used 40 registers\n    0 bytes spill stores\n").notes.empty());
}

TEST(Codegen, BiasGeluUses16ByteAccessesAndReadsBiasOncePerThread) {
  Plan p = plan_fusion(find_example("bias_gelu").build());
  CompiledKernel c = compile_kernel(p.graph, p.kernels[0]);
  int rows = p.kernels[0].schedule.rows_per_thread;
  // x: one 16-byte load per row the thread owns; b: one 16-byte load for all of them.
  EXPECT_EQ(count(c.ptx, R"(ld\.global\.nc\.v4\.(b32|f32))"), rows + 1) << c.ptx;
  EXPECT_EQ(count(c.ptx, R"(st\.global\.v4\.(b32|f32))"), rows) << c.ptx;
  EXPECT_EQ(count(c.ptx, R"(ld\.global\.nc\.(b32|f32) )"), 0) << "scalar loads";
  EXPECT_NE(c.ptx.find(".maxntid"), std::string::npos);
  EXPECT_NE(c.ptx.find(".target sm_90"), std::string::npos);
  EXPECT_EQ(c.ptx.find("@%p"), std::string::npos) << "exact tiling needs no masks";
}

TEST(Codegen, OddShapesAreMasked) {
  Graph g("odd");
  Tensor x = input(g, "x", {37, 1001});
  Tensor b = input(g, "b", {37, 1});
  output("y", tanh(x) * b);
  FusionOptions elements;  // (the default reads the odd count as one row of vectors)
  elements.schedule.window = 0;
  Plan p = plan_fusion(g, elements);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].schedule.vec, 1);  // 1001 is odd: no wider vector divides a row
  CompiledKernel c = compile_kernel(p.graph, p.kernels[0]);
  EXPECT_NE(c.ptx.find("@%p"), std::string::npos) << "edge tiles need predicated stores";
  if (!find_ptxas().empty()) {
    EXPECT_TRUE(run_ptxas(c.ptx, p.kernels[0].name).has_value());
  }
}

// A matmul's dot is mma.sync m16n8k16 on sm_80 and sm_90, bf16 and f16; operands read transposed
// and shapes off the tile grid (M, N, K not multiples of 64, 64, 16) assemble too.
// By default a 16-bit matmul on sm_90 is warpgroup MMA, emitted for sm_90a: wgmma.mma_async
// from descriptors (A K-major or M-major, B N-major or K-major as they are stored), the async
// proxy fenced after the copies, each step's wgmma left in flight (wait 1) and all of them
// waited for before the epilogue; ptxas takes it without spills or serialized wgmma. On sm_80
// it is refused with the way out; `--target sm_80` plans mma.sync.
// A rolled epilogue (--rolled-epilogue 1): the GELU's ex2 appears once per chunk loop, not once
// per accumulator element (each thread holds 128 of a 128×256 tile), the loop stays a loop, and
// ptxas takes the kernel without spills or serialized wgmma (the pairs are packed before the
// first panel, so no accumulator is live across a chunk loop).
TEST(Codegen, RolledGemmEpilogueIsALoopOverChunks) {
  using namespace dsl;
  Graph g("mm_gelu");
  output("c",
         gelu(matmul(input(g, "a", {4096, 1024}, DType::BF16), input(g, "w", {1024, 4096}, DType::BF16)) +
              input(g, "bias", {4096}, DType::BF16)));
  FusionOptions o;
  o.library_gemm = LibraryGemmUse::Never;
  o.schedule.rolled_epilogue = 1;
  const Plan p = plan_fusion(g, o);
  ASSERT_TRUE(p.kernels.at(0).schedule.rolled_epilogue) << p.kernels[0].schedule.describe();
  const CompiledKernel c = compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_90a"));
  const int exps = count(c.ptx, R"(ex2\.approx)");
  EXPECT_GT(exps, 0);
  EXPECT_LT(exps, 128) << "the epilogue unrolled per element";
  EXPECT_GT(count(c.ptx, R"(ld\.shared\.v4\.b32)"), 0);
  if (!find_ptxas().empty()) {
    auto m = run_ptxas(c.ptx, p.kernels[0].name);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->spill_bytes, 0);
    EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));
  }
}

// The copy of an operand into a padded pitch: rows of 4097 bf16 start anywhere, so they are read
// an element at a time (never a vector the address cannot hold); the padded rows are written in
// 16-byte vectors, zeros past the row's elements.
TEST(Codegen, PitchCopyReadsElementsAndWritesVectors) {
  const tir::Program p = tir::pitch_copy_program("copy_a", DType::BF16, 8191, 4097, 4104);
  const std::string ptx = program_ptx(p);
  EXPECT_EQ(count(ptx, R"(ld\.global[.a-z]*\.v\d)"), 0) << ptx;
  EXPECT_EQ(count(ptx, R"(ld\.global[.a-z]*\.[bu]16)"), 8) << ptx;
  EXPECT_EQ(count(ptx, R"(st\.global[.a-z]*\.v4\.b32)"), 1) << ptx;
  if (!find_ptxas().empty()) {
    EXPECT_TRUE(run_ptxas(ptx, "copy_a").has_value());
  }
}

TEST(Codegen, MatMulIsWgmmaOnSm90a) {
  struct Case {
    DType dtype;
    bool ta, tb;
    Shape a, b;
    const char* wgmma;
  };
  for (const Case& c : std::vector<Case>{
           {DType::BF16, false, false, {256, 128}, {128, 256}, "m64n256k16.f32.bf16.bf16"},
           {DType::F16, false, true, {2, 100, 72}, {136, 72}, "m64n256k16.f32.f16.f16"},
           // 96 wide: a tile of 128, not 256
           {DType::BF16, true, false, {64, 200}, {64, 96}, "m64n128k16.f32.bf16.bf16"},
       }) {
    SCOPED_TRACE(fmt::format("{} {} ta {} tb {}", dtype_name(c.dtype), shape_str(c.a), c.ta, c.tb));
    Graph g("mm");
    output("c", matmul(input(g, "a", c.a, c.dtype), input(g, "b", c.b, c.dtype), {c.ta, c.tb, std::nullopt}));
    for (int tma : {0, 1}) {
      SCOPED_TRACE(tma ? "tma" : "cp.async");
      FusionOptions own;
      own.library_gemm = LibraryGemmUse::Never;
      own.schedule.gemm_wgmma = 1;  // k ≤ 128 takes mma.sync by default
      own.schedule.gemm_tma = tma;
      Plan p = plan_fusion(g, own);
      ASSERT_EQ(p.kernels.size(), 1u);
      ASSERT_TRUE(p.kernels[0].schedule.wgmma) << p.kernels[0].schedule.describe();
      ASSERT_EQ(p.kernels[0].schedule.tma, tma == 1);
      CompiledKernel k = compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_90"));
      EXPECT_NE(k.ptx.find(".target sm_90a"), std::string::npos);
      // 64 of k per stage: four wgmma per step (the loop may be unrolled).
      const int mmas = count(k.ptx, std::string(R"(wgmma\.mma_async\.sync\.aligned\.)") + c.wgmma);
      EXPECT_GE(mmas, 4) << k.ptx;
      EXPECT_EQ(mmas % 4, 0);
      // The transposes: A M-major when stored column by column, B N-major when stored row by row.
      const std::string flags = fmt::format("p, 1, 1, {}, {};", c.ta ? 1 : 0, c.tb ? 0 : 1);
      EXPECT_NE(k.ptx.find(flags), std::string::npos) << flags;
      const int64_t m = c.a[c.a.size() - (c.ta ? 1 : 2)], kk = c.a[c.a.size() - (c.ta ? 2 : 1)];
      if (kk > 64 || !tma) {
        EXPECT_GT(count(k.ptx, R"(wgmma\.wait_group\.sync\.aligned 1)"), 0);
      }
      EXPECT_GT(count(k.ptx, R"(wgmma\.wait_group\.sync\.aligned 0)"), 0);
      EXPECT_EQ(count(k.ptx, R"(ldmatrix)"), 0);
      if (tma) {
        // A producer warpgroup's TMA copies into mbarrier rings; no thread's cp.async.
        EXPECT_GT(count(k.ptx, R"(cp\.async\.bulk\.tensor\.3d\.shared::cluster\.global\.tile\.mbarrier)"), 0);
        EXPECT_EQ(count(k.ptx, R"(cp\.async\.cg)"), 0);
        EXPECT_EQ(count(k.ptx, R"(setmaxnreg\.dec\.sync\.aligned\.u32)"), 1);
        EXPECT_EQ(count(k.ptx, R"(setmaxnreg\.inc\.sync\.aligned\.u32)"), 1);
        EXPECT_GT(count(k.ptx, R"(mbarrier\.arrive\.expect_tx)"), 0);
        EXPECT_EQ(k.block_threads, static_cast<unsigned>(p.kernels[0].schedule.block_threads() + 128));
        // One tensor map per operand, over its batches: A's rows within a batch are M (K when
        // stored column by column, where its stored rows run along M); and the output's, which
        // the epilogue stores by TMA a 128-byte panel at a time from shared memory.
        ASSERT_EQ(k.tensor_maps.size(), 3u);
        const TensorMapSpec& out = k.tensor_maps[2];
        EXPECT_EQ(out.tensor, 2u);
        EXPECT_EQ(out.dtype, c.dtype);
        EXPECT_EQ(out.dims[0], static_cast<uint64_t>(c.b[c.b.size() - (c.tb ? 2 : 1)]));
        EXPECT_EQ(out.dims[1], static_cast<uint64_t>(m));
        EXPECT_EQ(out.box[0], 64u);
        EXPECT_EQ(out.box[1], static_cast<unsigned>(p.kernels[0].schedule.block_m));
        EXPECT_GT(count(k.ptx, R"(cp\.async\.bulk\.tensor\.3d\.global\.shared::cta\.tile\.bulk_group)"), 0);
        EXPECT_EQ(count(k.ptx, R"(st\.global)"), 0);
        EXPECT_EQ(count(k.ptx, R"(cp\.async\.bulk\.wait_group\s+0;)"), 1);
        const NodeId a_id = p.graph.node(contraction(p.graph, p.kernels[0])).operands[0];
        const size_t a_at = static_cast<size_t>(
            std::find(p.kernels[0].inputs.begin(), p.kernels[0].inputs.end(), a_id) - p.kernels[0].inputs.begin());
        const TensorMapSpec& a = k.tensor_maps[0].tensor == a_at ? k.tensor_maps[0] : k.tensor_maps[1];
        ASSERT_EQ(a.tensor, a_at);
        EXPECT_EQ(a.dims[0], static_cast<uint64_t>(c.ta ? m : kk));
        EXPECT_EQ(a.dims[1], static_cast<uint64_t>(c.ta ? kk : m));
        EXPECT_EQ(a.dims[2], static_cast<uint64_t>(c.a.size() == 3 ? c.a[0] : 1));
        EXPECT_EQ(a.strides[0], a.dims[0] * 2);
        EXPECT_EQ(a.box[0], 64u);
      } else {
        EXPECT_GT(count(k.ptx, R"(fence\.proxy\.async\.shared::cta)"), 0);
        EXPECT_TRUE(k.tensor_maps.empty());
      }
      if (!find_ptxas().empty()) {
        auto m = run_ptxas(k.ptx, p.kernels[0].name);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->spill_bytes, 0);
        EXPECT_TRUE(m->notes.empty()) << fmt::format("{}", fmt::join(m->notes, "; "));  // no wgmma serialized
      }
      EXPECT_THROW(compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_80")), TargetError);
      FusionOptions sm80 = own;
      sm80.profile.wgmma = false;
      EXPECT_FALSE(plan_fusion(g, sm80).kernels[0].schedule.wgmma);
    }
  }
}

// Clusters of two: the cluster's barrier after the mbarriers are set up, B's boxes multicast
// (each block a share, by its rank), releases arriving at both blocks' empty barriers.
TEST(Codegen, TmaClusterMulticasts) {
  FusionOptions o;
  o.library_gemm = LibraryGemmUse::Never;
  o.schedule.gemm_cluster = 2;
  Plan p = plan_fusion(find_example("matmul").build(), o);
  ASSERT_EQ(p.kernels.at(0).schedule.cluster_blocks, 2);
  CompiledKernel k = compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_90"));
  EXPECT_EQ(k.cluster_blocks, 2u);
  EXPECT_EQ(k.grid % 2, 0u);
  EXPECT_GT(count(k.ptx, R"(barrier\.cluster\.arrive)"), 0);
  EXPECT_GT(count(k.ptx, R"(%cluster_ctarank)"), 0);
  EXPECT_GT(count(k.ptx, R"(bytes\.multicast::cluster)"), 0);
  EXPECT_GT(count(k.ptx, R"(mapa\.shared::cluster)"), 0);
  // (At CTA scope: a release at cluster scope waits on a memory barrier at every arrival.)
  EXPECT_GT(count(k.ptx, R"(mbarrier\.arrive\.shared::cluster\.b64)"), 0);
  EXPECT_EQ(count(k.ptx, R"(release\.cluster\.shared::cluster)"), 0);
  if (!find_ptxas().empty()) {
    auto m = run_ptxas(k.ptx, p.kernels[0].name);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->spill_bytes, 0);
  }
}

TEST(Codegen, MatMulIsMmaSync) {
  struct Case {
    DType dtype;
    bool ta, tb;
    Shape a, b;
    const char* mma;
  };
  for (const Case& c : std::vector<Case>{
           {DType::BF16, false, false, {128, 64}, {64, 128}, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
           {DType::F16, false, true, {64, 32}, {64, 32}, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"},
           {DType::F16, false, true, {2, 37, 50}, {29, 50}, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"},
           {DType::BF16, true, false, {50, 37}, {50, 29}, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
       }) {
    Graph g("mm");
    output("c", matmul(input(g, "a", c.a, c.dtype), input(g, "b", c.b, c.dtype), {c.ta, c.tb, std::nullopt}));
    FusionOptions mma_sync;
    mma_sync.schedule.gemm_wgmma = 0;
    mma_sync.library_gemm = LibraryGemmUse::Never;  // tilefuse's own kernel, whatever is predicted faster
    Plan p = plan_fusion(g, mma_sync);
    ASSERT_EQ(p.kernels.size(), 1u);
    for (const std::string sm : {"sm_80", "sm_90"}) {
      SCOPED_TRACE(fmt::format("{} {} {}", dtype_name(c.dtype), shape_str(c.a), sm));
      CompiledKernel k = compile_kernel(p.graph, p.kernels[0], codegen_options_for(sm));
      // A warp's 32×32 piece of the accumulator is 2×4 mma tiles of 16×8, per step of K (and
      // the loop may be unrolled).
      const int mmas = count(k.ptx, c.mma);
      EXPECT_GE(mmas, 8) << k.ptx;
      EXPECT_EQ(mmas % 8, 0) << k.ptx;
      // Staged operands arrive by cp.async and leave shared memory by ldmatrix; the fragments
      // reach mma.sync as loaded.
      const bool staged = p.kernels[0].schedule.stages > 0;
      EXPECT_EQ(count(k.ptx, R"(cp\.async\.cg\.shared\.global)") > 0, staged);
      EXPECT_EQ(count(k.ptx, R"(ldmatrix\.sync\.aligned\.m8n8\.x4)") > 0, staged);
      if (staged) {  // no fragment widened to f32 and narrowed back
        EXPECT_EQ(count(k.ptx, R"(cvt\.f32\.bf16|cvt\.f32\.f16)"), 0) << k.ptx;
      }
      if (!find_ptxas().empty()) {
        auto m = run_ptxas(k.ptx, p.kernels[0].name, codegen_options_for(sm));
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->spill_bytes, 0);
      }
    }
  }
}

// Rows not a multiple of the vector width: the kernel runs over the domain's elements in order,
// the operands spanning it in 16-byte vectors, the broadcast ones indexed element by element.
TEST(Codegen, OddWidthsRunFlatInVectors) {
  Graph g("odd_flat");
  output("y", gelu(input(g, "x", {64, 1001}) + input(g, "b", {1001})) * input(g, "r", {64, 1}));
  Plan p = plan_fusion(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_FALSE(p.kernels[0].schedule.elem_dims.empty());
  EXPECT_EQ(p.kernels[0].schedule.vec, 4);
  CompiledKernel c = compile_kernel(p.graph, p.kernels[0]);
  EXPECT_NE(c.tile_ir.find(" elements [64, 1001] as [1, 1001]"), std::string::npos) << c.tile_ir;  // b
  EXPECT_NE(c.tile_ir.find(" elements [64, 1001] as [64, 1]"), std::string::npos) << c.tile_ir;    // r
  EXPECT_GT(count(c.ptx, R"(ld\.global\.nc\.v4\.(b32|f32))"), 0) << "x in vectors";
  EXPECT_GT(count(c.ptx, R"(st\.global\.v4\.(b32|f32))"), 0) << "y in vectors";
  // b and r are indexed through the domain's dimensions once per run of a thread's consecutive
  // elements, not once per element (each split is a multiply-high by a constant, or more).
  const int elements = p.kernels[0].schedule.elems_per_thread();
  EXPECT_LT(count(c.ptx, R"(mul\.hi\.|(div|rem)\.[us](32|64))"), elements) << c.ptx;
  // b's elements of a run at consecutive offsets from one address.
  EXPECT_GT(count(c.ptx, R"(ld\.global\.nc\.(b32|f32)\s+%r\d+, \[%rd\d+\+4\])"), 0) << c.ptx;
  if (!find_ptxas().empty()) {
    EXPECT_TRUE(run_ptxas(c.ptx, p.kernels[0].name).has_value());
  }
}

// Row kernels whose width is not a multiple of the vector width read each row as the aligned
// vectors that overlap it (16-byte loads and stores, the row's ends masked); a tensor laid out
// otherwise (a weight along the row, a bias broadcast over a middle axis) is read as two aligned
// vectors shifted in registers. `window 0` reads every row element by element.
// A weight shared by windowed rows is read as the two aligned vectors around each run, shifted in
// registers; at the weight's ends, as those of the two that lie in it (zero elsewhere) and its
// last, partial vector element by element — not a load per element of both vectors, which every
// warp at a row's end issued for all its lanes.
TEST(Codegen, WindowedWeightEndsReadWholeVectorsAndTheTail) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g(std::string("weight_ends_") + dtype_name(dt));
    output("n", rmsnorm(input(g, "z", {64, 1003}, dt), input(g, "w", {1003}, dt)));
    FusionOptions on;
    on.schedule.window = 1;
    Plan p = plan_fusion(g, on);
    ASSERT_EQ(p.kernels.size(), 1u);
    const TileSchedule& s = p.kernels[0].schedule;
    ASSERT_TRUE(s.window);
    const std::string ptx = compile_kernel(p.graph, p.kernels[0]).ptx;
    const int tail = 1003 % s.vec, runs = s.rows_per_thread * s.chunks_per_thread;
    const std::string element =
        dt == DType::F32 ? R"(ld\.global\.nc\.(b32|f32)\s)" : R"(ld\.global\.nc\.(b16|u16)\s)";
    EXPECT_GT(count(ptx, element), 0) << "the weight's tail";
    EXPECT_LE(count(ptx, element), runs * tail);
  }
}

TEST(Codegen, OddWidthRowsReadInAlignedWindows) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g(std::string("odd_rows_") + dtype_name(dt));
    Tensor x = input(g, "x", {37, 4097}, dt);
    output("y", softmax(x, -1));
    output("n", rmsnorm(input(g, "z", {37, 5003}, dt), input(g, "w", {5003}, dt)));
    output("m", softmax(input(g, "u", {4, 9, 1001}, dt) + input(g, "c", {4, 1, 1001}, dt), -1));
    FusionOptions on;
    on.schedule.window = 1;
    Plan p = plan_fusion(g, on);
    ASSERT_EQ(p.kernels.size(), 3u);
    const int vec = dt == DType::F32 ? 4 : 8;
    for (const Kernel& k : p.kernels) {
      SCOPED_TRACE(k.name);
      EXPECT_TRUE(k.schedule.window);
      EXPECT_EQ(k.schedule.vec, vec);
      EXPECT_NE(k.schedule.describe().find("aligned windows"), std::string::npos) << k.schedule.describe();
      CompiledKernel c = compile_kernel(p.graph, k);
      const std::string v = dt == DType::F32 ? R"(v4\.(b32|f32))" : R"(v4\.b32)";
      EXPECT_GT(count(c.ptx, R"(ld\.global\.nc\.)" + v), 0) << "rows read in vectors";
      EXPECT_GT(count(c.ptx, R"(st\.global\.)" + v), 0) << "rows written in vectors";
      if (!find_ptxas().empty()) {
        EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
      }
    }
    FusionOptions off;
    off.schedule.window = 0;
    for (const Kernel& k : plan_fusion(g, off).kernels) {
      EXPECT_FALSE(k.schedule.window) << k.name;
      EXPECT_EQ(k.schedule.vec, 1) << k.name;
    }
    // By default rows reading at most one tensor laid out otherwise (x's softmax, RMSNorm's w,
    // the middle-axis bias c) are windowed; layernorm's rows, reading w and b, stay element by
    // element.
    output("l", layernorm(input(g, "v", {37, 2999}, dt), input(g, "lw", {2999}, dt), input(g, "lb", {2999}, dt)));
    Plan d = plan_fusion(g);
    ASSERT_EQ(d.kernels.size(), 4u);
    for (const Kernel& k : d.kernels) {
      int weights = 0;
      for (NodeId in : k.inputs) weights += d.graph.node(in).name == "lw" || d.graph.node(in).name == "lb";
      EXPECT_EQ(k.schedule.window, weights < 2) << k.name;
    }
  }
  FusionOptions bad;
  bad.schedule.window = 2;
  Graph g("bad_window");
  output("y", softmax(input(g, "x", {4, 4097}), -1));
  EXPECT_THROW(plan_fusion(g, bad), Error);
}

// Row kernels held in one block's registers: their rows' reductions over the block's threads
// (shuffles, and a block barrier for rows of several warps), the columns past the row masked with
// the op's identity before each reduction; through ptxas without spills.
TEST(Codegen, RowKernelsOnTileIrV2) {
  const FusionOptions v2;
  int kernels = 0;
  Graph rows1000("rows1000");
  output("y", softmax(input(rows1000, "x", {64, 1000}), -1));
  for (const char* name : {"softmax", "softmax_bf16", "layernorm", "rmsnorm_bf16", "log_softmax", "rows1000"}) {
    SCOPED_TRACE(name);
    Plan p = plan_fusion(std::string(name) == "rows1000" ? rows1000 : find_example(name).build(), v2);
    for (const Kernel& k : p.kernels) {
      if (k.kind != ScheduleKind::RowReduce) continue;
      ++kernels;
      CompiledKernel c = compile_kernel(p.graph, k);
      EXPECT_NE(c.tile_ir.find("tile.func"), std::string::npos) << "a Tile IR v2 program";
      EXPECT_GT(count(c.tile_ir, R"(reduce_(sum|max) %\d+ axis 1)"), 0) << c.tile_ir;
      EXPECT_GT(count(c.ptx, R"(shfl\.sync\.bfly)"), 0);
      if (k.schedule.threads_per_row > 32) {
        EXPECT_GT(count(c.ptx, R"(bar\.sync)"), 0);
      }
      if (!find_ptxas().empty()) {
        std::optional<MeasuredKernel> m = run_ptxas(c.ptx, k.name);
        ASSERT_TRUE(m.has_value());
        EXPECT_EQ(m->spill_bytes, 0) << k.name;
      }
    }
  }
  EXPECT_GE(kernels, 6);
  // Rows of 1000: the columns past them masked before the reductions.
  Plan odd = plan_fusion(rows1000, v2);
  EXPECT_NE(compile_kernel(odd.graph, odd.kernels[0]).tile_ir.find("in_bounds"), std::string::npos);
  // Windowed 16-bit rows a cluster holds: one exchange a pass by default; f32 rows one a
  // reduction.
  for (DType dt : {DType::BF16, DType::F32}) {
    Graph vocab("vocab");
    output("y", log_softmax(input(vocab, "x", {64, 50257}, dt), -1));
    const Kernel cluster_rows = plan_fusion(vocab, v2).kernels[0];
    ASSERT_GT(cluster_rows.schedule.cluster_blocks, 1) << cluster_rows.schedule.describe();
    EXPECT_TRUE(cluster_rows.schedule.window);
    EXPECT_EQ(cluster_rows.schedule.cluster_online, dt == DType::BF16) << cluster_rows.schedule.describe();
  }
  FusionOptions bad;
  bad.schedule.cluster_online = 2;
  EXPECT_THROW(plan_fusion(find_example("softmax").build(), bad), Error);
}

// Rows too long for a block's registers on sm_80 (no clusters or bulk copies, no split rows)
// loop over column tiles on Tile IR v2, each reduction's running value one partial per thread (a
// lanes tile): inside a loop every reduction stays within its thread — no cross-thread
// reduction, so no shuffle or barrier per step — and softmax's online sum spreads the thread's
// running max over its elements. Three passes (layernorm), masked ends (an odd width), bf16;
// through ptxas without spills.
TEST(Codegen, LoopedRowsOnTileIrV2CarryAPartialPerThread) {
  Graph g("looped_rows");
  output("y", softmax(input(g, "x", {300, 65536}), -1));
  output("l", log_softmax(input(g, "z", {300, 65544}, DType::BF16), -1));
  output("n", layernorm(input(g, "u", {300, 40000}), input(g, "w", {40000}), input(g, "b", {40000})));
  FusionOptions o;
  o.profile.max_cluster_blocks = 1;
  o.profile.bulk_copies = false;
  o.profile.wgmma = false;
  o.schedule.split = 0;
  Plan p = plan_fusion(g, o);
  int looped = 0;
  for (const Kernel& k : p.kernels) {
    SCOPED_TRACE(k.name);
    if (k.kind != ScheduleKind::RowReduce) continue;
    ASSERT_GT(k.schedule.col_iters, 1) << k.schedule.describe();
    ++looped;
    EXPECT_NE(k.schedule.describe().find("one partial a thread"), std::string::npos);
    CompiledKernel c = compile_kernel(p.graph, k, codegen_options_for("sm_80"));
    EXPECT_GT(count(c.tile_ir, R"(= for )"), 0) << c.tile_ir;
    EXPECT_GT(count(c.tile_ir, R"(reduce_(sum|max) %\d+ axis 1 : tile<1x\d+xf32, lanes>)"), 0) << c.tile_ir;
    // The loops' bodies: from each `for` to its region's end.
    std::istringstream lines(c.tile_ir);
    bool in_loop = false;
    for (std::string line; std::getline(lines, line);) {
      if (line.find("= for ") != std::string::npos) {
        in_loop = true;
      } else if (line == "  }") {
        in_loop = false;
      } else if (in_loop && line.find(" = reduce_") != std::string::npos) {
        EXPECT_EQ(line.find(": tile<1x1xf32>"), std::string::npos) << "reduced across threads in a loop: " << line;
      }
    }
    if (k.schedule.cols == 65536) {
      EXPECT_GT(count(c.tile_ir, R"(= spread )"), 0) << "the online sum's max";
    }
    if (!find_ptxas().empty()) {
      std::optional<MeasuredKernel> m = run_ptxas(c.ptx, k.name, codegen_options_for("sm_80"));
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0);
    }
  }
  EXPECT_EQ(looped, 3);
}

// Rows held in a cluster's registers (no staging or split rows): the program is launched in clusters, each block holds its rank's columns and
// reduces them over its threads, and a `cluster_values` exchange (a write into every block's
// shared memory and a cluster barrier) gives every block each block's values — of each
// reduction, or with `--cluster-online 1` of each pass's reductions at once (the softmax's max
// and its online sum together; with `--block-online 1` too, each block's values of a pass behind
// one block barrier, its warps' gathered); through ptxas without spills. An exchange in a program
// not launched in clusters, or under a branch, is refused.
TEST(Codegen, ClusterRowsOnTileIrV2ReduceOverTheCluster) {
  Graph g("cluster_rows");
  output("y", softmax(input(g, "x", {64, 65536}), -1));
  output("r", rmsnorm(input(g, "u", {64, 40000}, DType::BF16), input(g, "w", {40000}, DType::BF16)));
  FusionOptions o;
  o.schedule.stages = 0;
  o.schedule.split = 0;
  int clusters = 0;
  for (int online : {0, 1, 2}) {
  o.schedule.cluster_online = online > 0;
  o.schedule.block_online = online == 2;
  Plan p = plan_fusion(g, o);
  for (const Kernel& k : p.kernels) {
    SCOPED_TRACE(k.name + (online ? " online" : "") + (online == 2 ? " in blocks" : ""));
    ASSERT_GT(k.schedule.cluster_blocks, 1) << k.schedule.describe();
    ++clusters;
    EXPECT_EQ(k.schedule.block_online, online == 2);
    CompiledKernel c = compile_kernel(p.graph, k);
    EXPECT_NE(c.tile_ir.find(fmt::format(" cluster {} {{", k.schedule.cluster_blocks)), std::string::npos) << c.tile_ir;
    // An exchange for each reduction, or one for each pass over the row (the softmax's max and
    // sum in one).
    const int reductions = count(c.tile_ir, R"(= reduce_(sum|max) )");
    // (With block_online, the blocks are gathered over each warp's lanes.)
    const bool by_lane = online == 2;
    EXPECT_EQ(count(c.tile_ir, R"(= cluster_values %\d+(, %\d+)? : tile<1x1x)"), by_lane ? 0 : online ? 1 : reductions)
        << c.tile_ir;
    EXPECT_EQ(count(c.tile_ir, R"(= gather_blocks %\d+(, %\d+)? : tile<1x1x)"), by_lane ? 1 : 0) << c.tile_ir;
    EXPECT_EQ(count(c.tile_ir, R"(= gather_warps )"), online == 2 ? 1 : 0) << c.tile_ir;
    EXPECT_GT(count(c.ptx, R"(mapa\.shared::cluster)"), 0);
    EXPECT_GT(count(c.ptx, R"(barrier\.cluster\.wait)"), 0);
    if (!find_ptxas().empty()) {
      std::optional<MeasuredKernel> m = run_ptxas(c.ptx, k.name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0);
    }
    const tir::Program parsed = tir::parse_program(c.tile_ir);
    EXPECT_EQ(tir::print_program(parsed), c.tile_ir);
  }
  }
  EXPECT_EQ(clusters, 6);
  const std::string alone =
      "tile.func @alone(%arg0 \"x\": f32[4, 1024], %arg1 \"y\": f32[4, 1] out)\n"
      "    grid [4] threads 256 layout blocked<per_thread [1, 4], threads [1, 256], reps [1, 1]> {\n"
      "  %0 = program_id 0 : index\n"
      "  %1 = const 0 : index\n"
      "  %2 = load %arg0[%0, %1] : tile<1x1024xf32>\n"
      "  %3 = reduce_sum %2 axis 1 : tile<1x1xf32>\n"
      "  %4 = cluster_values %3 : tile<1x1xf32>\n"
      "  store %arg1[%0, %1], %4 : tile<1x1xf32>\n"
      "}\n";
  EXPECT_FALSE(tir::program_problems(tir::parse_program(alone)).empty());
  // Straight in a loop's body every block takes each exchange once an iteration (its slots
  // doubled by the parity); under a branch it need not: refused there.
  auto exchanged_in = [](const std::string& open, const std::string& close) {
    return "tile.func @looped(%arg0 \"x\": f32[4, 1024], %arg1 \"y\": f32[4, 1] out)\n"
           "    grid [8] threads 256 layout blocked<per_thread [1, 4], threads [1, 256], reps [1, 1]> cluster 2 {\n"
           "  %0 = program_id 0 : index\n"
           "  %1 = const 0 : index\n"
           "  %2 = const 2 : index\n"
           "  %3 = const 1 : index\n"
           "  %4 = ltui %1, %2 : bool\n" +
           open +
           "    %6 = load %arg0[%1, %1] : tile<1x1024xf32>\n"
           "    %7 = reduce_sum %6 axis 1 : tile<1x1xf32>\n"
           "    %8, %9 = cluster_values %7 : tile<1x1xf32>\n"
           "    store %arg1[%1, %1], %8 : tile<1x1xf32>\n" +
           close + "  }\n}\n";
  };
  const tir::Program looped = tir::parse_program(exchanged_in("  for %5 = %1 to %2 step %3 {\n", "    yield \n"));
  EXPECT_TRUE(tir::program_problems(looped).empty()) << tir::program_problems(looped)[0];
  EXPECT_FALSE(tir::program_problems(tir::parse_program(exchanged_in("  if %4 {\n", ""))).empty());
}

// Row kernels whose weight along the row an earlier kernel wrote (w·2, an output
// too, read back rather than computed again) load it where it is first used, like any tensor —
// also windowed, read shifted (GPU fuzz seeds 8945, 8999 and 163 more at 5530d69 stopped at
// compile: map::at).
TEST(Codegen, RowKernelsLoadWeightsEarlierKernelsWrote) {
  Graph g("row_weights_from_a_kernel");
  for (auto [name, cols, dt] : {std::tuple{"a", int64_t{1000}, DType::F32}, std::tuple{"b", int64_t{5003}, DType::BF16}}) {
    Tensor w = exp(input(g, std::string("w") + name, {cols}, dt));
    output(std::string("w2") + name, w);
    output(std::string("r") + name, rmsnorm(input(g, std::string("x") + name, {64, cols}, dt), w));
  }
  Plan p = plan_fusion(g);
  int rows = 0;
  for (const Kernel& k : p.kernels) {
    if (k.kind != ScheduleKind::RowReduce) continue;
    SCOPED_TRACE(k.name);
    bool computed = false;  // an input that is not the graph's
    for (NodeId in : k.inputs) computed |= p.graph.node(in).op != Op::Input;
    EXPECT_TRUE(computed) << plan_report_text(p);
    CompiledKernel c = compile_kernel(p.graph, k);
    ++rows;
  }
  EXPECT_EQ(rows, 2) << plan_report_text(p);
}

// A row the cluster schedule holds in one block (10000 f32 columns: one block of 512 threads at
// 32 elements each) is not a cluster: `--cluster-online 1` leaves it alone, and its program
// exchanges nothing (an exchange in a program not launched in clusters is invalid; fuzz seed 571
// at fcc0f98).
TEST(Codegen, OneBlockOfTheClusterScheduleExchangesNothing) {
  Graph g("one_block_cluster_schedule");
  output("y", softmax(input(g, "x", {64, 10000}), -1));
  FusionOptions o;
  o.schedule.stages = 0;
  o.schedule.split = 0;
  o.schedule.cluster_online = 1;
  Plan p = plan_fusion(g, o);
  ASSERT_EQ(p.kernels.size(), 1u);
  const Kernel& k = p.kernels[0];
  EXPECT_EQ(k.schedule.cluster_blocks, 1) << k.schedule.describe();
  EXPECT_GT(k.schedule.threads_per_row, 512 / 2) << k.schedule.describe();
  EXPECT_FALSE(k.schedule.cluster_online);
  CompiledKernel c = compile_kernel(p.graph, k);
  EXPECT_EQ(c.tile_ir.find("cluster_values"), std::string::npos) << c.tile_ir;
}

// Windowed rows (a width that is not a multiple of the vector width), one block's and a
// cluster's: the tensors along the row read and written at
// window columns (`window 4`: whole vectors from each row's aligned start), each element's place
// in its row tested (`in_window`) before the reductions, the output stored only where it is the
// row's; a weight along the row (RMSNorm's) read at the same window columns; through ptxas. A
// window is refused on a store to a tensor not laid out as the rows, on a copy, and off a power
// of two.
TEST(Codegen, WindowedRowsOnTileIrV2ReadWindowColumns) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g(std::string("windows_v2_") + dtype_name(dt));
    output("sm", softmax(input(g, "x", {37, 4097}, dt) * 2.0, -1));
    Tensor v = input(g, "v", {3, 50257}, dt);
    output("ce", -sum(input(g, "t", {3, 50257}, dt) * log_softmax(v, -1), {-1}, true));
    output("rms", rmsnorm(input(g, "r", {5, 5003}, dt), input(g, "rw", {5003}, dt)));
    Plan p = plan_fusion(g);
    int on_v2 = 0;
    for (const Kernel& k : p.kernels) {
      SCOPED_TRACE(k.name);
      ASSERT_TRUE(k.schedule.window) << k.schedule.describe();
      bool weight = false;  // (RMSNorm's w runs along its row)
      for (NodeId in : k.inputs) weight |= p.graph.node(in).name == "rw";
      ++on_v2;
      CompiledKernel c = compile_kernel(p.graph, k);
      for (size_t j = 0; weight && j < k.inputs.size();
           ++j) {  // (the weight's tile: the block's rows, each shifted)
        if (p.graph.node(k.inputs[j]).name == "rw") {
          EXPECT_EQ(count(c.tile_ir, fmt::format(R"(load %arg{}\[%\d+, %\d+\] window \d+ masked \[1\] : tile<1x)", j)), 1)
              << c.tile_ir;
        }
      }
      EXPECT_GT(count(c.tile_ir, R"(in_window %\d+, %\d+, %\d+ vec \d+)"), 0) << c.tile_ir;
      EXPECT_GT(count(c.ptx, R"(ld\.global\.nc\.v4\.(b32|f32))"), 0) << "inputs in vectors";
      bool writes_rows = false;  // (cross-entropy writes one value a row)
      for (NodeId o : k.outputs) writes_rows |= p.graph.node(o).shape.back() != 1;
      if (writes_rows) {
        EXPECT_GT(count(c.tile_ir, R"(store %arg\d+\[%\d+, %\d+\], %\d+ window \d+ masked \[1\])"), 0) << c.tile_ir;
        EXPECT_GT(count(c.ptx, R"(st\.global\.v4\.(b32|f32))"), 0) << "the row's whole vectors stored whole";
      }
      EXPECT_EQ(tir::print_program(tir::parse_program(c.tile_ir)), c.tile_ir);
      if (!find_ptxas().empty()) {
        EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
      }
    }
    EXPECT_EQ(on_v2, 3);
  }
  auto problems_of = [](const std::string& access, const std::string& view) {
    return tir::program_problems(tir::parse_program(
        "tile.func @windows(%arg0 \"x\": f32[8, 1001], %arg1 \"y\": f32" + view + " out)\n"
        "    grid [2] threads 256 layout blocked<per_thread [1, 4], threads [4, 64], reps [1, 1]> {\n"
        "  %0 = program_id 0 : index\n"
        "  %1 = const 0 : index\n"
        "  %2 = load %arg0[%0, %1] window 4 masked [1] : tile<4x256xf32>\n" +
        access + "}\n"));
  };
  const std::string store = "  store %arg1[%0, %1], %2 window 4 masked [1] : tile<4x256xf32>\n";
  EXPECT_TRUE(problems_of(store, "[8, 1001]").empty());
  for (const auto& [access, view] : std::vector<std::pair<std::string, std::string>>{
           {store, "[1, 1001]"},                                                          // broadcast
           {"  store %arg1[%0, %1], %2 window 4 : tile<4x256xf32>\n", "[8, 1001]"},        // columns unmasked
           {"  store %arg1[%0, %1], %2 window 3 masked [1] : tile<4x256xf32>\n", "[8, 1001]"},  // not a power of two
           {"  %3 = in_bounds %1, %0 window 4 axis 1 : tile<4x256xbool>\n", "[8, 1001]"},  // (none: a parse error)
           {"  %3 = iota %1 axis 1 : tile<4x256xf32>\n  store %arg1[%0, %1], %3 window 32 masked [1] : tile<4x256xf32>\n",
            "[8, 1001]"}}) {
    SCOPED_TRACE(access + view);
    std::vector<std::string> problems;
    try {
      problems = problems_of(access, view);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
    EXPECT_FALSE(problems.empty());
  }
}

// An element count that is not a whole number of vectors (an odd count), by default: one
// row of every element, read and written in 16-byte vectors, its last vector element by element.
TEST(Codegen, OddElementCountsRunAsOneRowOfVectors) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g(std::string("odd_count_") + dtype_name(dt));
    output("y", gelu(input(g, "x", {7, 13, 1001}, dt) + input(g, "b", {13, 1}, dt)));
    output("z", input(g, "u", {100003}, dt) * 2.0 + input(g, "v", {100003}, dt));
    FusionOptions on;
    on.schedule.window = 1;
    Plan p = plan_fusion(g, on);
    ASSERT_EQ(p.kernels.size(), 2u);
    for (const Kernel& k : p.kernels) {
      SCOPED_TRACE(k.name);
      EXPECT_EQ(k.schedule.rows, 1);
      EXPECT_EQ(k.schedule.vec, dt == DType::F32 ? 4 : 8);
      CompiledKernel c = compile_kernel(p.graph, k);
      EXPECT_GT(count(c.ptx, R"(ld\.global\.nc\.v4\.(b32|f32))"), 0) << "inputs in vectors";
      EXPECT_GT(count(c.ptx, R"(st\.global\.v4\.(b32|f32))"), 0) << "outputs in vectors";
      if (!find_ptxas().empty()) {
        EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
      }
    }
    for (const Kernel& k : plan_fusion(g).kernels) EXPECT_EQ(k.schedule.rows, 1) << k.name;  // the default
    FusionOptions off;
    off.schedule.window = 0;
    for (const Kernel& k : plan_fusion(g, off).kernels) EXPECT_EQ(k.schedule.vec, 1) << k.name;
  }
}

TEST(Codegen, TargetsAndCache) {
  Plan p = plan_fusion(find_example("bias_gelu_bf16").build());
  CompiledKernel a = compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_80"));
  EXPECT_NE(a.ptx.find(".target sm_80"), std::string::npos);
  CompiledKernel b = compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_90a"));
  EXPECT_NE(b.ptx.find(".target sm_90a"), std::string::npos);
  EXPECT_TRUE(compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_80")).from_cache);
  EXPECT_THROW(codegen_options_for("sm_75"), TargetError);
  EXPECT_THROW(codegen_options_for("gfx90a"), TargetError);
}

// The disk cache serves an entry only for the Tile IR and target it was compiled for (its file
// name is a hash), and nothing from a damaged file.
TEST(Codegen, DiskCacheServesOnlyItsOwnKernel) {
  const std::string dir = ::testing::TempDir() + "tilefuse_cache_test";
  std::filesystem::remove_all(dir);
  const char* was = std::getenv("TILEFUSE_CACHE");
  const std::string saved = was ? was : "";
  setenv("TILEFUSE_CACHE_DIR", dir.c_str(), 1);
  unsetenv("TILEFUSE_CACHE");
  CompiledKernel c;
  c.name = "k";
  c.tile_ir = "tile.func @k() {}";
  c.ptx = ".version 8.0";
  c.block_threads = 256;
  c.grid = 5000000000ull;
  c.dynamic_shared_bytes = 49152;
  c.cooperative = true;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/77aa.tfk") << "tilefuse-kernel 4\n";  // an entry of the flat layout before shards
  disk_cache_store("00ff", "sm_90 x", c);
  EXPECT_FALSE(std::filesystem::exists(dir + "/77aa.tfk"));
  std::optional<CompiledKernel> back = disk_cache_load("00ff", c.tile_ir, "sm_90 x");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ptx, c.ptx);
  EXPECT_EQ(back->grid, c.grid);
  EXPECT_EQ(back->dynamic_shared_bytes, c.dynamic_shared_bytes);
  EXPECT_TRUE(back->cooperative);
  EXPECT_FALSE(disk_cache_load("00ff", "tile.func @other() {}", "sm_90 x").has_value());
  EXPECT_FALSE(disk_cache_load("00ff", c.tile_ir, "sm_80 x").has_value());
  EXPECT_EQ(disk_cache_info().entries, 1);
  std::ofstream(dir + "/00/00ff.tfk", std::ios::trunc) << "tilefuse-kernel 1\ntarget 6\nsm_90";
  EXPECT_FALSE(disk_cache_load("00ff", c.tile_ir, "sm_90 x").has_value());
  EXPECT_EQ(disk_cache_info().invalid, 1);
  EXPECT_EQ(disk_cache_clear(), 1);
  unsetenv("TILEFUSE_CACHE_DIR");
  if (was) setenv("TILEFUSE_CACHE", saved.c_str(), 1);
  std::filesystem::remove_all(dir);
}

// A store evicts the oldest entries past the limit, never the entry it stored. Where its shard
// (the key's first two characters) holds many entries, only that shard, against its 1/256 of
// the limit, and the other shards are left alone.
TEST(Codegen, DiskCacheEvictsTheOldest) {
  namespace fs = std::filesystem;
  const std::string dir = ::testing::TempDir() + "tilefuse_cache_evict_test";
  fs::remove_all(dir);
  const char* was = std::getenv("TILEFUSE_CACHE");
  const std::string saved = was ? was : "";
  setenv("TILEFUSE_CACHE_DIR", dir.c_str(), 1);
  setenv("TILEFUSE_CACHE_MAX_MB", "1", 1);  // 4 KiB a shard
  unsetenv("TILEFUSE_CACHE");
  CompiledKernel c;
  c.name = "k";
  auto tile = [](int i) { return fmt::format("tile.func @k{}() {{}}", i); };
  auto bytes_in = [&](const std::string& shard) {
    int64_t n = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(dir + "/" + shard)) n += e.file_size();
    return n;
  };
  const auto start = fs::file_time_type::clock::now() - std::chrono::hours(1);
  // A few entries of 300 KB, each in its own shard: the whole cache is held to 1 MiB.
  c.ptx = std::string(300000, 'p');
  for (int i = 0; i < 5; ++i) {
    c.tile_ir = tile(i);
    const std::string key = fmt::format("{:02}aa", 10 + i);
    disk_cache_store(key, "t", c);
    fs::last_write_time(dir + "/" + key.substr(0, 2) + "/" + key + ".tfk", start + std::chrono::minutes(i));
  }
  EXPECT_LE(disk_cache_info().bytes, int64_t{1} << 20);
  EXPECT_TRUE(disk_cache_load("14aa", tile(4), "t").has_value()) << "the newest stays";
  EXPECT_FALSE(disk_cache_load("10aa", tile(0), "t").has_value()) << "the oldest goes";
  // Many small entries in one shard: it is held to its share, and other shards are untouched.
  c.ptx = std::string(50, 'p');
  const int64_t other_shards = disk_cache_info().bytes;
  for (int i = 0; i < 60; ++i) {
    c.tile_ir = tile(100 + i);
    const std::string key = fmt::format("01{:02}", i);
    disk_cache_store(key, "t", c);
    fs::last_write_time(dir + "/01/" + key + ".tfk", start + std::chrono::minutes(i));
  }
  EXPECT_LE(bytes_in("01"), 4096) << "the shard's entries stay within its share";
  EXPECT_GT(bytes_in("01"), 2048) << "and are not all evicted";
  EXPECT_TRUE(disk_cache_load("0159", tile(159), "t").has_value()) << "the newest stays";
  EXPECT_FALSE(disk_cache_load("0100", tile(100), "t").has_value()) << "the oldest goes";
  EXPECT_EQ(disk_cache_info().bytes - bytes_in("01"), other_shards) << "other shards are untouched";
  unsetenv("TILEFUSE_CACHE_DIR");
  unsetenv("TILEFUSE_CACHE_MAX_MB");
  if (was) setenv("TILEFUSE_CACHE", saved.c_str(), 1);
  fs::remove_all(dir);
}

TEST(Codegen, SplitRowsExchangeStampedPairs) {
  Plan p = plan_fusion(find_example("softmax_256k").build());
  const Kernel& k = p.kernels[0];
  ASSERT_GT(k.schedule.split_blocks, 1);
  CompiledKernel c = compile_kernel(p.graph, k);
  EXPECT_TRUE(c.persistent);
  EXPECT_TRUE(c.cooperative);
  EXPECT_EQ(c.cluster_blocks, 1u);
  EXPECT_EQ(c.workspace_bytes, 2048u * k.schedule.split_blocks * 16);  // two 8-byte words per part
  // Each pair word is stored and loaded whole at device scope: no counter, fence or atomic.
  EXPECT_NE(c.ptx.find("st.relaxed.gpu.global.b64"), std::string::npos);
  EXPECT_NE(c.ptx.find("ld.relaxed.gpu.global.b64"), std::string::npos);
  EXPECT_EQ(c.ptx.find("atom."), std::string::npos);
  EXPECT_EQ(c.ptx.find("barrier.cluster"), std::string::npos);
  EXPECT_NE(c.ptx.find("cp.async.bulk"), std::string::npos);
  // The workspace and the epoch follow the tensors.
  EXPECT_NE(c.ptx.find(".param .u32 softmax_256k_k0_param_3"), std::string::npos);
  // The exps of x − max x take the short form: one ex2.approx.ftz each.
  EXPECT_NE(c.ptx.find("ex2.approx.ftz.f32"), std::string::npos);
  try {
    compile_kernel(p.graph, k, codegen_options_for("sm_80"));
    FAIL() << "a split kernel compiled for sm_80";
  } catch (const TargetError& e) {
    EXPECT_NE(std::string(e.what()).find("--stages 0"), std::string::npos) << e.what();
  }
}

// A persistent kernel of one block per row claims its rows from a counter in its workspace
// (one atomic per row, issued a row ahead), and the last block to finish zeroes the counters.
TEST(Codegen, PersistentRowsAreClaimedFromACounter) {
  Plan p = plan_fusion(find_example("softmax_32k_bf16").build());
  const Kernel& k = p.kernels[0];
  ASSERT_GT(k.schedule.stages, 0);
  ASSERT_EQ(k.schedule.cluster_blocks, 1);
  ASSERT_TRUE(k.schedule.claims_rows());
  CompiledKernel c = compile_kernel(p.graph, k);
  EXPECT_TRUE(c.persistent);
  EXPECT_FALSE(c.cooperative);  // no block waits for another
  EXPECT_EQ(c.workspace_bytes, 8u);
  EXPECT_NE(c.ptx.find(".param .u64 .ptr .global .align 1 softmax_32k_bf16_k0_param_2"), std::string::npos);
  EXPECT_NE(c.ptx.find("atom.global.add.u32"), std::string::npos);
  // The count of finished blocks is taken between fences, then both counters are zeroed.
  size_t fence = c.ptx.find("fence.acq_rel.gpu");
  ASSERT_NE(fence, std::string::npos);
  EXPECT_NE(c.ptx.find("st.relaxed.gpu.global.b32", fence), std::string::npos);
  // Clusters keep taking rows grid-stride: their blocks must agree on the row.
  FusionOptions o;
  o.schedule.split = 0;
  Plan q = plan_fusion(find_example("softmax_256k").build(), o);
  ASSERT_GT(q.kernels[0].schedule.cluster_blocks, 1);
  EXPECT_FALSE(q.kernels[0].schedule.claims_rows());
  CompiledKernel d = compile_kernel(q.graph, q.kernels[0]);
  EXPECT_EQ(d.workspace_bytes, 0u);
  EXPECT_EQ(d.ptx.find("atom."), std::string::npos);
}

// A split row's part is read from its stage once, f32 or 16-bit: its exps are carried in
// registers to the next task, which writes the part once every part of the row has published.
TEST(Codegen, SplitPartsAreReadFromTheirStageOnce) {
  for (const char* name : {"softmax_256k", "softmax_256k_bf16"}) {
    SCOPED_TRACE(name);
    Plan p = plan_fusion(find_example(name).build());
    ASSERT_GT(p.kernels[0].schedule.split_blocks, 1);
    const std::string ptx = compile_kernel(p.graph, p.kernels[0]).ptx;
    EXPECT_EQ(count(ptx, R"(ld\.shared\.v4\.b32)"), p.kernels[0].schedule.chunks_per_thread);
  }
}

// The short exp (one power of two, no overflow to inf: its only bound is 0 below −86.9) only
// where the argument is x minus x's own max; x − mean(x) can be positive and takes the full exp
// (two powers of two, inf beyond 88.72).
TEST(Codegen, ShortExpOnlyWhereTheArgumentIsNeverPositive) {
  for (bool own_max : {true, false}) {
    SCOPED_TRACE(own_max);
    Graph g("exp_argument");
    Tensor x = input(g, "x", {64, 1024});
    output("y", exp(x - (own_max ? amax(x, {-1}, true) : mean(x, {-1}, true))));
    Plan p = plan_fusion(g);
    ASSERT_EQ(p.kernels.size(), 1u);
    const std::string ptx = compile_kernel(p.graph, p.kernels[0]).ptx;
    EXPECT_EQ(ptx.find("0f42B17217") == std::string::npos, own_max);  // 88.72283: e^x overflows past it
    EXPECT_EQ(ptx.find("0fC2ADCCCD") != std::string::npos, own_max);  // −86.9
  }
}

// Pointwise kernels take the short exp too, where the argument's sign is known (e^-|x|, a
// Tile IR v2 `exp … nonpositive`), and the full one elsewhere.
TEST(Codegen, ShortExpInPointwiseKernelsWhereTheSignIsKnown) {
  for (bool known : {true, false}) {
    SCOPED_TRACE(known);
    Graph g("exp_pointwise");
    Tensor x = input(g, "x", {64, 1024});
    output("y", exp(known ? -abs(x) : x * 0.5));
    Plan p = plan_fusion(g);
    ASSERT_EQ(p.kernels.size(), 1u);
    CompiledKernel c = compile_kernel(p.graph, p.kernels[0]);
    EXPECT_EQ(c.tile_ir.find(" nonpositive :") != std::string::npos, known) << c.tile_ir;
    EXPECT_EQ(c.ptx.find("0f42B17217") == std::string::npos, known);  // 88.72283: e^x overflows past it
    // −86.9, or 86.9 where LLVM compares |x| instead of −|x|
    EXPECT_EQ(c.ptx.find("0fC2ADCCCD") != std::string::npos || c.ptx.find("0f42ADCCCD") != std::string::npos, known);
  }
}

TEST(Codegen, ClustersAndBulkCopiesNeedSm90) {
  FusionOptions clusters;
  clusters.schedule.split = 0;
  Plan p = plan_fusion(find_example("softmax_256k").build(), clusters);
  ASSERT_GT(p.kernels[0].schedule.cluster_blocks, 1);
  try {
    compile_kernel(p.graph, p.kernels[0], codegen_options_for("sm_80"));
    FAIL() << "a cluster kernel compiled for sm_80";
  } catch (const TargetError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-cluster 1"), std::string::npos) << e.what();
  }
  FusionOptions o;
  o.profile.max_cluster_blocks = 1;
  Plan one = plan_fusion(find_example("softmax_32k").build(), o);
  ASSERT_GT(one.kernels[0].schedule.stages, 0);  // one block per row, still staged
  try {
    compile_kernel(one.graph, one.kernels[0], codegen_options_for("sm_80"));
    FAIL() << "a staged kernel compiled for sm_80";
  } catch (const TargetError& e) {
    EXPECT_NE(std::string(e.what()).find("--stages 0"), std::string::npos) << e.what();
  }
  o.profile.bulk_copies = false;  // what --target sm_80 plans for
  o.profile.wgmma = false;
  Plan flat = plan_fusion(find_example("softmax_32k").build(), o);
  CompiledKernel c = compile_kernel(flat.graph, flat.kernels[0], codegen_options_for("sm_80"));
  EXPECT_EQ(c.ptx.find("barrier.cluster"), std::string::npos);
  EXPECT_EQ(c.ptx.find("cp.async.bulk"), std::string::npos);
  EXPECT_EQ(c.cluster_blocks, 1u);
  EXPECT_FALSE(c.persistent);
}

TEST(Codegen, PtxasRejectionIsReported) {
  if (find_ptxas().empty()) GTEST_SKIP() << "no CUDA toolkit (ptxas) on this machine";
  std::string bad = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { frobnicate; }\n";
  try {
    run_ptxas(bad, "k");
    FAIL();
  } catch (const CodegenError& e) {
    EXPECT_NE(std::string(e.what()).find("frobnicate"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilefuse

namespace tilefuse {
namespace {
using namespace dsl;

// Element indices are computed in 64 bits where an extent passes 2^31 − 1 (masks compare with
// the whole extent, not its low 32 bits), and in 32 bits elsewhere.
TEST(Codegen, WideIndicesWhereAnExtentPassesTwoToThe31) {
  struct Case {
    const char* name;
    Shape shape;
    bool softmax;
    std::string extent;     // the extent a mask compares with, whole
    std::string truncated;  // a pattern of its low 32 bits, as a 32-bit mask would use them
  };
  const std::string u32_mask = R"(setp\.\w+\.[bsu]32\s+%p\d+, %r\d+, )";
  for (const Case& c : {Case{"long_vector", {5000000001}, false, "500000000", "70503270[45]"},
                        Case{"long_rows", {2, 4294967312}, true, "4294967312", u32_mask + "1[56];"},
                        Case{"many_rows", {4294967297, 4}, true, "4294967296", u32_mask + "[01];"}}) {
    SCOPED_TRACE(c.name);
    Graph g(c.name);
    Tensor x = input(g, "x", c.shape);
    output("y", c.softmax ? softmax(x, -1) : x + 1.0);
    // (Two rows of 2^32 take two SMs fused or not: the plan may keep the reductions apart.)
    Plan p = plan_fusion(g);
    int whole = 0;
    for (const Kernel& k : p.kernels) {
      if (num_elements(k.domain) <= INT32_MAX) continue;  // a kernel over the rows' values
      EXPECT_TRUE(k.schedule.wide_indices()) << k.name;
      const std::string ptx = compile_kernel(p.graph, k).ptx;
      whole += std::regex_search(ptx, std::regex(R"(setp\.\w+\.u64\s+%p\d+, %rd\d+, )" + c.extent));
      EXPECT_FALSE(std::regex_search(ptx, std::regex(c.truncated))) << ptx;
    }
    EXPECT_GE(whole, 1) << "a mask compares with the whole extent";
  }
  Plan narrow = plan_fusion(find_example("bias_gelu").build());
  EXPECT_FALSE(narrow.kernels[0].schedule.wide_indices());
  EXPECT_EQ(compile_kernel(narrow.graph, narrow.kernels[0]).ptx.find(".u64 \t%p"), std::string::npos);
}

// A kernel needing more blocks than a grid holds is a typed error naming the domain, as is a
// tensor beyond 2^48 elements; neither divides by zero.
TEST(Codegen, AbsurdSizesAreTypedErrors) {
  Graph g("huge");
  EXPECT_THROW(input(g, "x", {int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40}), ShapeError);
  Tensor a = input(g, "a", {int64_t{1} << 30, 1});
  Tensor b = input(g, "b", {1, int64_t{1} << 30});
  EXPECT_THROW(a + b, ShapeError);  // 2^60 elements
  output("y", input(g, "c", {kMaxElements}) * 2.0);
  try {
    plan_fusion(g);
    FAIL() << "a grid of 2^40 blocks was planned";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("more than a grid (2^31 − 1)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilefuse
