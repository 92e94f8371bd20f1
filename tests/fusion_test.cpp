// Fusion decisions on small graphs: kernel counts, decision records, budgets, cost arithmetic.
#include "compiler/fusion/fusion.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/iteration_space.h"
#include "compiler/fusion/library_gemm.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/fusion/report.h"
#include "compiler/fusion/row_passes.h"
#include "compiler/support/error.h"
#include "compiler/tile/build.h"
#include "compiler/tile/ir.h"
#include "dsl_examples/examples.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {
using namespace dsl;

TEST(Fusion, BiasGeluIsOneKernelWithHalfTheBytes) {
  Plan p = plan_fusion(find_example("bias_gelu").build());
  testing::check_plan_invariants(p);
  const int64_t x = 8192LL * 8192 * 4, b = 8192 * 4;
  EXPECT_EQ(p.unfused.kernels, 2);
  EXPECT_EQ(p.unfused.bytes, (x + b + x) + (x + x));
  ASSERT_EQ(p.unfused_kernels.size(), 2u);  // add, then gelu: the baseline the report shows
  EXPECT_EQ(p.unfused_kernels[0].cost.bytes(), x + b + x);
  EXPECT_EQ(p.unfused_kernels[1].cost.bytes(), x + x);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.fused.bytes, x + b + x);
  ASSERT_EQ(p.decisions.size(), 1u);
  const FusionDecision& d = p.decisions[0];
  EXPECT_EQ(d.verdict, Verdict::Fused);
  EXPECT_EQ(d.bytes_saved, 2 * x);
  EXPECT_EQ(d.launches_saved, 1);
  EXPECT_GT(d.registers_after, 0);
  EXPECT_LT(d.predicted_after_s, d.predicted_before_s);
  EXPECT_FALSE(d.stopped_by.has_value());
}

TEST(Fusion, CostModelCombinesMemoryIssueAndMufu) {
  Plan p = plan_fusion(find_example("bias_gelu").build());
  const Kernel& k = p.kernels[0];
  const DeviceProfile& prof = p.options.profile;
  EXPECT_EQ(k.cost.bytes_read, 8192LL * 8192 * 4 + 8192 * 4);
  EXPECT_EQ(k.cost.bytes_written, 8192LL * 8192 * 4);
  // Issue slots, counted per thread: each node's count per element over the domain (add, then
  // GELU), and beside it the loads, stores and indices — more, but not twice as many.
  const Graph& g = p.graph;
  double per_element = 0;
  for (NodeId n : k.nodes) per_element += instructions_per_element(g, g.node(n));
  EXPECT_GT(per_element, 1);
  EXPECT_GT(k.cost.instructions, per_element * 8192.0 * 8192);
  EXPECT_LT(k.cost.instructions, 1.5 * per_element * 8192.0 * 8192);
  EXPECT_DOUBLE_EQ(k.cost.compute_s, k.cost.instructions / prof.instructions_per_s);
  // Enough bytes in flight to cover latency: the full bandwidth applies.
  EXPECT_GE(k.cost.bytes_in_flight_per_sm, prof.hbm_bytes_per_s * prof.memory_latency_s / prof.sm_count);
  EXPECT_DOUBLE_EQ(k.cost.memory_s, k.cost.bytes() / prof.hbm_bytes_per_s);
  // The three limits combined: no less than the longest, no more than their sum; a kernel far
  // from the other two takes about the longest's time (the erf GELU: one MUFU op an element).
  const double longest = std::max({k.cost.memory_s, k.cost.compute_s, k.cost.mufu_s});
  EXPECT_GT(k.cost.mufu_s, 0);
  EXPECT_GE(k.cost.predicted_s, longest + prof.launch_s);
  EXPECT_LE(k.cost.predicted_s, k.cost.memory_s + k.cost.compute_s + k.cost.mufu_s + prof.launch_s);
  EXPECT_EQ(longest, k.cost.memory_s);
  EXPECT_LT(k.cost.predicted_s, 1.05 * k.cost.memory_s + k.cost.fill_drain_s + prof.launch_s);
  // Filling and draining the memory pipe (a latency each way) is a small part of a kernel of
  // half a gigabyte.
  EXPECT_GT(k.cost.fill_drain_s, 0);
  EXPECT_LT(k.cost.fill_drain_s, 0.02 * k.cost.predicted_s);
  // The bias is broadcast along rows: 16-byte vectors, several rows per thread.
  EXPECT_EQ(k.schedule.vec * 4, 16);
  EXPECT_GE(k.schedule.rows_per_thread, 2);
}

// A chain of transcendental functions over 16-bit elements: nine MUFU operations an element
// against two bytes read and two written, so the MUFU pipe, not memory, bounds it, and issue
// near its limit too takes the prediction past the longest of the three (measured on the H200:
// 0.093 ms; bench/NOTES.md, "Issue slots counted per thread").
TEST(Fusion, TranscendentalChainsAreBoundByTheMufuPipe) {
  const std::vector<Example>& family = family_examples();
  auto chain = std::find_if(family.begin(), family.end(),
                            [](const Example& e) { return e.name == "off_chain_long_bf16"; });
  ASSERT_NE(chain, family.end());
  Plan p = plan_fusion(chain->build());
  ASSERT_EQ(p.kernels.size(), 1u);
  const KernelCost& c = p.kernels[0].cost;
  EXPECT_GT(c.mufu_s, c.memory_s);
  EXPECT_GT(c.mufu_s, c.compute_s);
  EXPECT_GT(c.predicted_s, 1.1 * c.mufu_s + p.options.profile.launch_s);
  EXPECT_NE(plan_report_text(p).find("MUFU-bound"), std::string::npos) << plan_report_text(p);
}

// A kernel of fewer blocks than SMs streams through those SMs only (eight rows, a block each):
// its bandwidth is their share of the device's, and the report says so, where the model had put
// all SMs behind it.
TEST(Fusion, CostModelChargesTheSmsAGridLeavesIdle) {
  Graph g("few_rows");
  output("m", mean(input(g, "x", {8, 4096}), {-1}, true));
  const Plan p = plan_fusion(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  const Kernel& k = p.kernels[0];
  const DeviceProfile& prof = p.options.profile;
  ASSERT_LT(k.schedule.grid(), prof.sm_count);
  EXPECT_DOUBLE_EQ(k.cost.busy_share, static_cast<double>(k.schedule.grid()) / prof.sm_count);
  EXPECT_GE(k.cost.memory_s, k.cost.bytes() / (prof.hbm_bytes_per_s * k.cost.busy_share));
  const std::string report = plan_report_text(p);
  EXPECT_NE(report.find(fmt::format("{} blocks for {} SMs", k.schedule.grid(), prof.sm_count)), std::string::npos)
      << report;
}

// The exp is counted as codegen issues it: the short form only for x minus x's own max.
TEST(Fusion, CostModelCountsTheExpCodegenEmits) {
  Graph g("exp_cost");
  Tensor x = input(g, "x", {4, 1024});
  Tensor own = exp(x - amax(x, {-1}, true));
  Tensor other = exp(x - mean(x, {-1}, true));
  Tensor half = exp(cast(x, DType::BF16));
  // The short form for x − max x costs less than the accurate exp; a 16-bit result less still.
  EXPECT_LT(instructions_per_element(g, own.node()), instructions_per_element(g, other.node()));
  EXPECT_LT(instructions_per_element(g, half.node()), instructions_per_element(g, own.node()));
}

TEST(Fusion, Bf16UsesEightWideVectors) {
  Plan p = plan_fusion(find_example("bias_gelu_bf16").build());
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].schedule.vec, 8);
  EXPECT_EQ(p.fused.bytes, 8192LL * 8192 * 2 * 2 + 8192 * 2);
}

TEST(Fusion, SharedProducerBecomesOneKernelWithTwoOutputs) {
  Plan p = plan_fusion(find_example("gelu_two_consumers").build());
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].outputs.size(), 2u);
  // The decision for y = gelu(...) weighed materializing, duplicating and merging.
  const FusionDecision* gelu = nullptr;
  for (const FusionDecision& d : p.decisions)
    if (p.graph.node(d.producer).op == Op::Gelu) gelu = &d;
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(gelu->consumers.size(), 2u);
  EXPECT_EQ(gelu->verdict, Verdict::Merged);
  ASSERT_EQ(gelu->options.size(), 3u);
  EXPECT_EQ(gelu->options[1].verdict, Verdict::Duplicated);
  EXPECT_GT(gelu->options[1].predicted_s, gelu->options[2].predicted_s);
  EXPECT_LT(gelu->options[2].predicted_s, gelu->options[0].predicted_s);
}

TEST(Fusion, ProducerOfTwoDomainsIsDuplicated) {
  // p = b * 2 feeds a [64, 1024] kernel and a [1024] kernel: they cannot merge (different
  // domains), so p is recomputed in both rather than written and re-read.
  Graph g("dup");
  Tensor x = input(g, "x", {64, 1024});
  Tensor b = input(g, "b", {1024});
  Tensor p = b * 2.0;
  output("wide", x + p);
  output("narrow", exp(p));
  Plan plan = plan_fusion(g);
  testing::check_plan_invariants(plan);
  EXPECT_EQ(plan.kernels.size(), 2u);
  const FusionDecision& d = plan.decisions.back();
  EXPECT_EQ(d.producer, p.id());
  EXPECT_EQ(d.verdict, Verdict::Duplicated);
  EXPECT_EQ(d.duplicated_bytes, 1024 * 4);  // the second copy reads b again
  EXPECT_DOUBLE_EQ(d.duplicated_instructions, instructions_per_element(plan.graph, p.node()) * 1024);
  bool merge_illegal = false;
  for (const FusionOption& o : d.options)
    if (o.verdict == Verdict::Merged) merge_illegal = !o.legal;
  EXPECT_TRUE(merge_illegal);
}

TEST(Fusion, RegisterBudgetRefusesAWideFusion) {
  // A sum of many full-size inputs: each fused input holds rows_per_thread × vec registers.
  Graph g("wide_sum");
  Tensor s = input(g, "x0", {1024, 1024});
  for (int i = 1; i < 8; ++i) s = s + input(g, "x" + std::to_string(i), {1024, 1024});
  output("y", s);
  FusionOptions opt;
  opt.max_registers = 64;
  Plan p = plan_fusion(g, opt);
  testing::check_plan_invariants(p);
  EXPECT_GT(p.kernels.size(), 1u);
  for (const Kernel& k : p.kernels) EXPECT_LE(k.cost.registers, 64) << k.name;
  int refused = 0;
  for (const FusionDecision& d : p.decisions)
    if (d.stopped_by == Layer::Budget) {
      refused++;
      EXPECT_EQ(d.verdict, Verdict::Materialized);
      EXPECT_NE(d.reason.find("budget of 64"), std::string::npos) << d.reason;
    }
  EXPECT_GE(refused, 1);
  // With the hardware's limit as the budget the whole sum is one kernel.
  opt.max_registers = 255;
  EXPECT_EQ(plan_fusion(g, opt).kernels.size(), 1u);
}

TEST(Fusion, NoFuseGivesOneKernelPerOp) {
  FusionOptions opt;
  opt.fuse = false;
  Plan p = plan_fusion(find_example("gelu_two_consumers").build(), opt);
  testing::check_plan_invariants(p);
  EXPECT_EQ(p.kernels.size(), 4u);  // add, gelu, mul, add
  EXPECT_TRUE(p.decisions.empty());
  EXPECT_EQ(p.fused.bytes, p.unfused.bytes);
}

TEST(Report, TextAndJsonCarryTheRecords) {
  Plan p = plan_fusion(find_example("bias_gelu").build());
  MeasuredKernels m;
  m[p.kernels[0].name] = {30, 0, "ptxas", {}};
  std::string text = plan_report_text(p, m);
  EXPECT_NE(text.find("unfused"), std::string::npos);
  EXPECT_NE(text.find("1,073,774,592"), std::string::npos) << text;
  EXPECT_NE(text.find("536,903,680"), std::string::npos) << text;
  EXPECT_NE(text.find("ptxas 30"), std::string::npos) << text;
  EXPECT_NE(text.find("fused"), std::string::npos);
  std::string json = plan_report_json(p, m);
  EXPECT_NE(json.find("\"verdict\": \"fused\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"registers_measured\": 30"), std::string::npos) << json;
  EXPECT_NE(json.find("\"bytes_saved\": 536870912"), std::string::npos) << json;
}

TEST(FusionReduce, SoftmaxIsOneRowKernel) {
  Plan p = plan_fusion(find_example("softmax").build());
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 1u);
  const Kernel& k = p.kernels[0];
  EXPECT_EQ(k.kind, ScheduleKind::RowReduce);
  EXPECT_EQ(k.split, 1);
  EXPECT_EQ(k.schedule.col_iters, 1);  // a 4096-wide row is held in registers
  EXPECT_EQ(k.passes, 2);              // max with the online sum, then the output
  EXPECT_EQ(p.unfused.kernels, 8);     // amax, gt, where, sub, exp, sum, max, div
  EXPECT_EQ(p.fused.bytes, 2LL * 16384 * 4096 * 4);
  for (const FusionDecision& d : p.decisions) EXPECT_NE(d.verdict, Verdict::Materialized) << d.reason;
}

TEST(FusionReduce, NormsAreOneKernel) {
  for (const char* name : {"layernorm", "rmsnorm", "log_softmax", "softmax_bf16", "layernorm_bf16"}) {
    Plan p = plan_fusion(find_example(name).build());
    testing::check_plan_invariants(p);
    EXPECT_EQ(p.kernels.size(), 1u) << name;
    EXPECT_EQ(p.kernels[0].cost.reread_bytes, 0) << name;
  }
}

TEST(FusionReduce, LongRowsLoopAndCountTheReread) {
  FusionOptions no_clusters;
  no_clusters.profile.max_cluster_blocks = 1;  // a device without thread-block clusters
  no_clusters.profile.bulk_copies = false;     // or bulk copies (sm_80)
  Plan p = plan_fusion(find_example("softmax_256k").build(), no_clusters);
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 1u);
  const Kernel& k = p.kernels[0];
  EXPECT_GT(k.schedule.col_iters, 1);
  EXPECT_EQ(k.schedule.cluster_blocks, 1);
  EXPECT_EQ(k.passes, 2);
  // 1 MB rows in flight on every SM do not fit in L2: the second pass re-reads x from HBM.
  EXPECT_EQ(k.cost.reread_bytes, 2048LL * 262144 * 4);
  EXPECT_EQ(k.cost.bytes(), 3LL * 2048 * 262144 * 4);
}

// A whole tensor's reductions (fuzz seed 409: the mean of a [16, 262144] tensor, once one block
// looping over all of it) and a few long rows' are split into parts of the column-tile loop, a
// block each, enough to fill the device, meeting in the workspace; their per-row values after
// the reductions are computed by each row's last block. Kernels with an online sum or outputs
// along the row keep one block per row.
TEST(FusionReduce, FewLongRowsLoopInPartsThatFillTheDevice) {
  const DeviceProfile h200;
  Graph g("whole");
  Tensor x = input(g, "x", {16, 262144});
  output("m", mean(x, {0, 1}, true));
  Tensor y = input(g, "y", {3, 1000003}, DType::BF16);
  output("n", sqrt(mean(y * y, {-1}, true) + 1e-6) * input(g, "r", {3, 1}, DType::BF16));
  Plan p = plan_fusion(g);
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 2u);
  for (const Kernel& k : p.kernels) {
    SCOPED_TRACE(k.name);
    const TileSchedule& s = k.schedule;
    EXPECT_TRUE(s.looped_parts()) << s.describe();
    EXPECT_GE(s.grid(), h200.sm_count);
    EXPECT_GE(s.col_iters, 4);
    EXPECT_LE(s.col_blocks(), s.iter_cols());  // the last block reads a row's parts in one load
    EXPECT_DOUBLE_EQ(k.cost.busy_share, 1.0);
    EXPECT_NE(s.describe().find("parts"), std::string::npos);
    const tir::Program prog = tir::build_program(p.graph, k);
    const std::string text = tir::print_program(prog);
    EXPECT_NE(text.find("last_arrival"), std::string::npos) << text;
    EXPECT_EQ(tir::print_program(tir::parse_program(text)), text);
    // Its workspace holds every reduction's parts and a counter per row.
    for (const tir::Param& prm : prog.params) {
      if (prm.workspace) {
        EXPECT_LE((num_elements(prm.view) + s.rows) * 4, s.workspace_bytes());
      }
    }
    CompiledKernel c = compile_kernel(p.graph, k);
    if (!find_ptxas().empty()) {
      std::optional<MeasuredKernel> m = run_ptxas(c.ptx, k.name);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(m->spill_bytes, 0);
    }
  }
  // A part cannot finish an online sum or write along the row: four softmax rows of 2^20 without
  // split rows or clusters are planned as kernels of plain reductions in parts and a pointwise
  // one, not as four blocks looping over a row each.
  Graph soft("soft");
  output("s", softmax(input(soft, "x", {4, 1 << 20}), -1));
  FusionOptions plain;
  plain.schedule.split = 0;
  plain.schedule.max_cluster_blocks = 1;
  const Plan sp = plan_fusion(soft, plain);
  testing::check_plan_invariants(sp);
  int in_parts = 0;
  for (const Kernel& k : sp.kernels) {
    if (!k.schedule.looped_parts()) continue;
    ++in_parts;
    EXPECT_EQ(k.totals.online_sums, 0) << k.name;
    EXPECT_EQ(k.passes, 1) << k.name;
    for (NodeId o : k.outputs) EXPECT_EQ(num_elements(sp.graph.node(o).shape), 4) << k.name;
  }
  EXPECT_GE(in_parts, 1);
}

TEST(FusionReduce, LongRowsAreSplitIntoPartsAndReadOnce) {
  const DeviceProfile h200;
  Plan p = plan_fusion(find_example("softmax_256k").build());
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 1u);
  const TileSchedule& s = p.kernels[0].schedule;
  // Whole parts, each a task of the persistent grid (one block of 1024 threads per SM) staged
  // through shared memory by bulk copies, at most 16 f32 per thread (their exps stay in
  // registers until written), at most 32 parts (one warp merges a row's pairs).
  EXPECT_GT(s.split_blocks, 1);
  EXPECT_LE(s.split_blocks, 32);
  EXPECT_EQ(s.col_blocks(), s.split_blocks);
  EXPECT_EQ(s.tile_cols() * s.split_blocks, 262144);
  EXPECT_EQ(s.cluster_blocks, 1);
  EXPECT_EQ(s.block_threads(), 1024);
  EXPECT_LE(s.elems_per_thread(), 16);
  EXPECT_GE(s.stages, 1);
  EXPECT_EQ(s.stage_bytes, s.tile_cols() * 4);
  EXPECT_EQ(p.kernels[0].cost.reread_bytes, 0);
  EXPECT_EQ(p.kernels[0].cost.bytes(), 2LL * 2048 * 262144 * 4);
  EXPECT_LE(p.kernels[0].cost.registers, 64);
  // The grid takes the row's parts in rounds; the last may be partly idle, and each round costs
  // a split task's serial step.
  const int64_t tasks = 2048LL * s.split_blocks, groups = h200.sm_count * p.kernels[0].cost.blocks_per_sm;
  const int64_t rounds = (tasks + groups - 1) / groups;
  EXPECT_NEAR(p.kernels[0].cost.busy_share, static_cast<double>(tasks) / (groups * rounds), 1e-9);
  EXPECT_NEAR(p.kernels[0].cost.row_steps_s, rounds * h200.split_step_s, 1e-12);
  const std::string report = plan_report_text(p);
  EXPECT_NE(report.find(fmt::format("rows split into {} parts that meet in global memory", s.split_blocks)),
            std::string::npos)
      << report;
  // 16-bit rows split too, with as many stages as asked for.
  FusionOptions two;
  two.schedule.stages = 2;
  const TileSchedule& b2 = plan_fusion(find_example("softmax_256k_bf16").build(), two).kernels[0].schedule;
  EXPECT_GT(b2.split_blocks, 1);
  EXPECT_EQ(b2.stages, 2);
  // A row that one block holds is not split (RMSNorm's of 32768: its w is loaded after the
  // reduction, so a block holds it as softmax's), nor one whose parts are not whole (an odd
  // length). A longer RMSNorm row is: its sum of squares finishes in the parts' one pass.
  EXPECT_EQ(plan_fusion(find_example("softmax_32k").build()).kernels[0].schedule.split_blocks, 1);
  EXPECT_EQ(plan_fusion(find_example("rmsnorm_32k").build()).kernels[0].schedule.split_blocks, 1);
  Graph long_rms("long_rms");
  dsl::output("y", dsl::rmsnorm(dsl::input(long_rms, "x", {64, 65536}), dsl::input(long_rms, "w", {65536})));
  Plan rms = plan_fusion(long_rms);
  EXPECT_GT(rms.kernels[0].schedule.split_blocks, 1) << rms.kernels[0].schedule.describe();
  // RMSNorm's w is shared by every row and loaded after the reduction: a row of 32768 holds 32
  // elements per thread in one block, like softmax's.
  const TileSchedule& rms32k = plan_fusion(find_example("rmsnorm_32k_bf16").build()).kernels[0].schedule;
  EXPECT_EQ(rms32k.cluster_blocks, 1);
  EXPECT_EQ(rms32k.elems_per_thread(), 32);
  EXPECT_TRUE(rms32k.claims_rows());
  Graph g("odd");
  dsl::output("y", dsl::softmax(dsl::input(g, "x", {3, 40000}), -1));
  EXPECT_EQ(plan_fusion(g).kernels[0].schedule.split_blocks, 1);
  // The user may keep rows whole.
  FusionOptions whole;
  whole.schedule.split = 0;
  EXPECT_EQ(plan_fusion(find_example("softmax_256k").build(), whole).kernels[0].schedule.split_blocks, 1);
  FusionOptions bad;
  bad.schedule.split = 2;
  EXPECT_THROW(plan_fusion(find_example("softmax_256k").build(), bad), Error);
}

TEST(FusionReduce, LongRowsAreStagedOverAClusterAndReadOnce) {
  FusionOptions clusters;
  clusters.schedule.split = 0;
  Plan p = plan_fusion(find_example("softmax_256k").build(), clusters);
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 1u);
  const TileSchedule& s = p.kernels[0].schedule;
  // A cluster of blocks of 1024 threads × 32 f32 holds the row in registers, one block per SM,
  // the next row's part in shared memory.
  EXPECT_EQ(s.block_threads(), 1024);
  EXPECT_EQ(s.elems_per_thread(), 32);
  EXPECT_EQ(s.cluster_blocks, 262144 / (1024 * 32));
  EXPECT_EQ(s.col_blocks(), s.cluster_blocks);
  EXPECT_EQ(s.col_iters, 1);
  EXPECT_GE(s.stages, 1);
  EXPECT_EQ(s.stage_bytes, s.tile_cols() * 4);
  EXPECT_EQ(p.kernels[0].cost.reread_bytes, 0);
  EXPECT_EQ(p.kernels[0].cost.bytes(), 2LL * 2048 * 262144 * 4);
  EXPECT_LE(p.kernels[0].cost.registers, 64);
  EXPECT_EQ(p.kernels[0].cost.blocks_per_sm, 1);
  EXPECT_NE(plan_report_text(p).find(fmt::format("clusters of {} blocks", s.cluster_blocks)), std::string::npos);
  // Each round of rows costs its serial per-row step; a cluster's exchange adds its round trip.
  const DeviceProfile h200;
  const int64_t groups = h200.sm_count / s.cluster_blocks, rounds = (2048 + groups - 1) / groups;
  EXPECT_NEAR(p.kernels[0].cost.busy_share, 2048.0 / (groups * rounds), 1e-9);
  EXPECT_NEAR(p.kernels[0].cost.row_steps_s, rounds * (h200.row_step_s + h200.cluster_exchange_s), 1e-12);
  EXPECT_NE(plan_report_text(p).find("then per-row steps"), std::string::npos);

  // bf16: half the bytes per part, so more stages fit.
  const TileSchedule& b = plan_fusion(find_example("softmax_256k_bf16").build(), clusters).kernels[0].schedule;
  EXPECT_GT(b.cluster_blocks, 1);
  EXPECT_GT(b.stages, s.stages);
  // 32768-wide rows: one block per row; the last round of 4096 rows over 132 blocks is partial.
  Plan p32 = plan_fusion(find_example("softmax_32k_bf16").build());
  EXPECT_EQ(p32.kernels[0].schedule.cluster_blocks, 1);
  const int64_t rounds32 = (4096 + h200.sm_count - 1) / h200.sm_count;
  EXPECT_NEAR(p32.kernels[0].cost.busy_share, 4096.0 / (h200.sm_count * rounds32), 1e-9);
  EXPECT_NEAR(p32.kernels[0].cost.row_steps_s, rounds32 * h200.row_step_s, 1e-12);
  EXPECT_NE(plan_report_text(p32).find(fmt::format("busy {:.1f}% of the time",
                                                    100.0 * p32.kernels[0].cost.busy_share)),
            std::string::npos);

  // Straight to registers (no stages): blocks of 512 threads, two per SM, twice as many per row.
  FusionOptions regs = clusters;
  regs.schedule.stages = 0;
  const TileSchedule& r = plan_fusion(find_example("softmax_256k").build(), regs).kernels[0].schedule;
  EXPECT_EQ(r.block_threads(), 512);
  EXPECT_EQ(r.cluster_blocks, 2 * s.cluster_blocks);
  EXPECT_EQ(r.stages, 0);
  EXPECT_EQ(r.min_blocks_per_sm, 2);
  EXPECT_GT(plan_fusion(find_example("softmax_32k_bf16").build(), regs).kernels[0].schedule.cluster_blocks, 1);

  // An odd length has parts that are not whole: not staged, balanced over the blocks it needs.
  Graph g("odd");
  dsl::output("y", dsl::softmax(dsl::input(g, "x", {3, 40000}), -1));
  const TileSchedule& odd = plan_fusion(g).kernels[0].schedule;
  EXPECT_EQ(odd.stages, 0);
  EXPECT_GT(odd.cluster_blocks, 1);
  EXPECT_GE(odd.tile_cols() * odd.cluster_blocks, 40000);
  EXPECT_LT(odd.tile_cols() * (odd.cluster_blocks - 1), 40000);

  // A cap of 4 blocks cannot hold 262144 elements at 32 per thread: back to the loop.
  FusionOptions four = clusters;
  four.schedule.max_cluster_blocks = 4;
  EXPECT_GT(plan_fusion(find_example("softmax_256k").build(), four).kernels[0].schedule.col_iters, 1);
  // Smaller blocks need more of them and share an SM (two of 512 threads), each with a part
  // of half the bytes.
  FusionOptions small = clusters;
  small.schedule.block_threads = 512;
  const TileSchedule& sm = plan_fusion(find_example("softmax_256k").build(), small).kernels[0].schedule;
  EXPECT_EQ(sm.cluster_blocks, 2 * s.cluster_blocks);
  EXPECT_EQ(sm.min_blocks_per_sm, 2);
  EXPECT_GE(sm.stages, 1);
  // A cap on stages is kept.
  small.schedule.stages = 2;
  EXPECT_LE(plan_fusion(find_example("softmax_256k_bf16").build(), small).kernels[0].schedule.stages, 2);
}

// The edge-by-edge decisions weigh RMSNorm's sum of squares against its scaling before x·x
// has joined the reduction, and at these widths they may keep two kernels that both read x; the
// merge afterwards makes it one kernel reading x once, and says so. Either way the plan is one
// kernel; which of the four shapes take the merge depends on the costs, and some must.
TEST(FusionReduce, KernelsSharingAnInputAreMergedAfterwards) {
  int merges = 0;
  for (int64_t cols : {12288, 16384})
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::to_string(cols) + " " + dtype_name(dt));
      Graph g("rms");
      Tensor x = input(g, "x", {4096, cols}, dt);
      output("y", rmsnorm(x, input(g, "w", {cols}, dt), 1e-6));
      Plan p = plan_fusion(g);
      testing::check_plan_invariants(p);
      ASSERT_EQ(p.kernels.size(), 1u);
      const int64_t x_bytes = 4096 * cols * static_cast<int64_t>(dtype_size(dt));
      EXPECT_EQ(p.kernels[0].cost.bytes_read, x_bytes + cols * static_cast<int64_t>(dtype_size(dt)));
      for (const FusionDecision& d : p.decisions)
        if (d.verdict == Verdict::Merged && d.reason.find("afterwards") != std::string::npos) {
          ++merges;
          EXPECT_NE(d.reason.find("both read x"), std::string::npos) << d.reason;
          EXPECT_GE(d.bytes_saved, x_bytes);
          EXPECT_EQ(d.launches_saved, 1);
          EXPECT_LT(d.predicted_after_s, d.predicted_before_s);
        }
    }
  EXPECT_GE(merges, 1);
}

// A producer some of whose consumers read it from memory (a matmul) cannot be fused into all of
// them, but its column sum may still take it in: the bias gradient of a GELU' (mlp_train's db1)
// is computed where the gradient is, which is still written for the matmul and not read back.
TEST(FusionReduce, AColumnSumTakesInAProducerAMatmulAlsoReads) {
  Graph g("bias_gradient");
  Tensor a = input(g, "a", {2048, 1024}, DType::BF16), gr = input(g, "g", {2048, 1024}, DType::BF16);
  Tensor dz = gelu(a + input(g, "b", {1024}, DType::BF16)) * gr;
  output("db", sum(dz, {0}));
  output("e", matmul(dz, input(g, "c", {1024, 64}, DType::BF16)));
  const Plan p = plan_fusion(g);
  testing::check_plan_invariants(p);
  const Kernel* column = nullptr;
  for (const Kernel& k : p.kernels)
    if (k.kind == ScheduleKind::ColumnReduce) column = &k;
  ASSERT_NE(column, nullptr);
  EXPECT_EQ(column->outputs.size(), 2u);                               // dz for the matmul, and db
  EXPECT_EQ(column->cost.bytes_read, 2 * 2048 * 1024 * 2 + 1024 * 2);  // a, g and b: dz not read back
  bool said = false;
  for (const FusionDecision& d : p.decisions)
    said |=
        d.verdict == Verdict::Merged && d.reason.find("not read back (still written") != std::string::npos;
  EXPECT_TRUE(said);
  testing::check_on_host(p, testing::test_seed());
}

// Two reductions of one tensor that no edge joins — a row's Σx² and max, a whole tensor's sum
// and max — are merged afterwards into one kernel reading the tensor once; the decision names
// the tensor and each kernel's reader. Reductions over different axes of x cannot share a
// kernel (their domains differ) and stay two.
TEST(FusionReduce, IndependentReductionsOfOneTensorShareAKernel) {
  for (const Shape& shape : {Shape{16, 1048576}, Shape{4096, 4096}}) {
    SCOPED_TRACE(shape_str(shape));
    Graph g("siblings");
    Tensor x = input(g, "x", shape);
    output("ss", sum(x * x, {-1}));
    output("m", amax(x, {-1}));
    Plan p = plan_fusion(g);
    testing::check_plan_invariants(p);
    ASSERT_EQ(p.kernels.size(), 1u);
    EXPECT_EQ(p.kernels[0].cost.bytes_read, num_elements(shape) * 4);
    const FusionDecision& d = p.decisions.back();
    EXPECT_EQ(d.verdict, Verdict::Merged);
    EXPECT_EQ(p.graph.node(d.producer).op, Op::Input);
    EXPECT_EQ(d.consumers.size(), 2u);
    EXPECT_NE(d.reason.find("no kernel lies between them"), std::string::npos) << d.reason;
    EXPECT_EQ(d.launches_saved, 1);
    EXPECT_LT(d.predicted_after_s, d.predicted_before_s);
  }
  Graph g("two_axes");
  Tensor x = input(g, "x", {4096, 4096});
  output("rows", sum(x, {-1}));
  output("cols", sum(x, {0}));
  Plan p = plan_fusion(g);
  testing::check_plan_invariants(p);
  EXPECT_EQ(p.kernels.size(), 2u);
}

TEST(FusionReduce, KeepdimFalseResultIsNotBroadcastBackInKernel) {
  Graph g("nokeep");
  Tensor x = input(g, "x", {64, 64});
  Tensor s = sum(x, {-1});  // [64]: numpy aligns it with the columns, not the rows
  output("s", s);
  output("y", x * s);
  Plan p = plan_fusion(g);
  testing::check_plan_invariants(p);
  EXPECT_EQ(p.kernels.size(), 2u);
}

// A reduction over leading or middle axes is one column-reduction kernel, its pointwise producers
// and the values after it fused in; axes that are not adjacent are refused, saying so.
TEST(FusionReduce, ReductionsOverLeadingAxesAreColumnKernels) {
  Graph g("cols");
  Tensor x = input(g, "x", {8192, 8192});
  Tensor db = sum(x * input(g, "dy", {8192, 8192}), {0});
  output("db", db * 0.5);
  Plan p = plan_fusion(g);
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 1u);
  const Kernel& k = p.kernels[0];
  EXPECT_EQ(k.kind, ScheduleKind::ColumnReduce);
  EXPECT_EQ(k.nodes.size(), 3u);  // x·dy, its sum, the sum · 0.5: all in one kernel
  EXPECT_EQ(k.cost.bytes_read, 2LL * 8192 * 8192 * 4);
  // Enough blocks for every SM: the rows are split into parts that meet in the workspace.
  EXPECT_GE(k.schedule.grid(), p.options.profile.sm_count);
  EXPECT_GT(k.schedule.split_blocks, 1);
  EXPECT_GT(k.schedule.workspace_bytes(), 0);
  Graph bad("gaps");
  output("y", sum(input(bad, "x", {8, 16, 4}), {0, 2}));
  try {
    plan_fusion(bad);
    FAIL();
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("reduces axes [0, 2] of f32[8, 16, 4]"), std::string::npos) << e.what();
  }
}

// A matmul's kernel takes its pointwise consumers as an epilogue; what would have to be
// computed per block that reads it (a producer of an operand) or across the product's rows (a
// reduction) stays in kernels of its own, each decision saying why.
TEST(FusionMatMul, EpilogueFusesProducersAndReductionsDoNot) {
  auto decision_about = [](const Plan& p, Op producer) -> const FusionDecision* {
    for (const FusionDecision& d : p.decisions)
      if (p.graph.node(d.producer).op == producer) return &d;
    return nullptr;
  };
  Graph g("mm");
  Tensor a = input(g, "a", {256, 128}, DType::BF16);
  Tensor w = input(g, "w", {128, 96}, DType::BF16);
  output("z", gelu(matmul(a * 2.0, w) + input(g, "bias", {96}, DType::BF16)));
  Plan p = plan_fusion(g);
  testing::check_plan_invariants(p);
  ASSERT_EQ(p.kernels.size(), 2u);  // a·2, then the matmul with its epilogue
  const Kernel& mk = p.kernels[1];
  ASSERT_EQ(mk.kind, ScheduleKind::MatMul);
  EXPECT_EQ(mk.domain, (Shape{256, 96}));
  std::set<Op> ops;
  for (NodeId n : mk.nodes) ops.insert(p.graph.node(n).op);
  EXPECT_EQ(ops, (std::set<Op>{Op::MatMul, Op::Add, Op::Gelu}));
  EXPECT_EQ(mk.cost.flops, 2.0 * 256 * 96 * 128);
  const FusionDecision* mul = decision_about(p, Op::Mul);
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->verdict, Verdict::Materialized);
  EXPECT_EQ(mul->stopped_by, Layer::Legality);
  EXPECT_NE(mul->reason.find("its operands are read from memory"), std::string::npos) << mul->reason;

  // A residual as large as the product fuses too: the epilogue runs after the loop, and a
  // matmul's budget is the device's per-thread limit.
  Graph e("mm_residual");
  Tensor prod = matmul(input(e, "a", {2, 100, 72}, DType::BF16), input(e, "w", {72, 136}, DType::BF16));
  output("y", gelu(prod + input(e, "bias", {136}, DType::BF16) + input(e, "res", {100, 136}, DType::BF16)));
  EXPECT_EQ(plan_fusion(e).kernels.size(), 1u);

  Graph r("mm_sum");
  output("s", sum(matmul(input(r, "a", {256, 128}, DType::BF16), input(r, "w", {128, 96}, DType::BF16)), {1}));
  Plan q = plan_fusion(r);
  EXPECT_EQ(q.kernels.size(), 2u);
  const FusionDecision* mm = decision_about(q, Op::MatMul);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->stopped_by, Layer::Legality);
  EXPECT_NE(mm->reason.find("reduces in a matmul's kernel"), std::string::npos) << mm->reason;
}

// Every kernel is an iteration space with a map per operand: a matmul's k is reduced and read by
// both operands (transposed ones swap their axes, a shared weight has no batch axis), a column
// reduction reduces a leading axis, a row reduction a trailing one; the plan verifier checks the
// maps against the shapes (plan_problems).
TEST(FusionMatMul, KernelsAreIterationSpaces) {
  Graph g("spaces");
  Tensor a = input(g, "a", {3, 48, 64}, DType::BF16);  // read as aᵀ: [3, 64, 48]
  Tensor w = input(g, "w", {80, 48}, DType::BF16);     // read as wᵀ: [48, 80]
  output("y", matmul(a, w, {true, true, std::nullopt}) + input(g, "bias", {80}, DType::BF16));
  Plan p = plan_fusion(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_TRUE(plan_problems(p).empty());
  EXPECT_EQ(iteration_space(p.graph, p.kernels[0]).str(p.graph),
            "[b 3, m 64, n 80, k 48 reduced]; a[b, k, m], w[n, k], bias[n] → y[b, m, n]");

  Graph c("cols");
  Tensor x = input(c, "x", {6, 100, 40});
  output("s", sum(x * input(c, "dy", {100, 40}), {1}, true));
  Plan q = plan_fusion(c);
  ASSERT_EQ(q.kernels.size(), 1u);
  EXPECT_EQ(iteration_space(q.graph, q.kernels[0]).str(q.graph),
            "[d0 6, r1 100 reduced, d2 40]; x[d0, r1, d2], dy[r1, d2] → s[d0, 1, d2]");
}

// The matmul tile hints: sizes checked by name, a tile too large for the registers refused, and
// a hint that changes nothing reported as such.
TEST(FusionMatMul, TileHints) {
  FusionOptions o;
  o.schedule.gemm_block_m = 96;
  EXPECT_THROW(check_fusion_options(o), Error);
  o.schedule.gemm_block_m = 256;
  o.schedule.gemm_block_n = 256;
  try {
    check_fusion_options(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 128x256"), std::string::npos) << e.what();
  }
  o.schedule.gemm_block_n = 64;
  o.schedule.gemm_group = 4;
  Graph g("mm");
  output("c", matmul(input(g, "a", {512, 256}, DType::BF16), input(g, "b", {256, 512}, DType::BF16)));
  Plan p = plan_fusion(g, o);
  EXPECT_EQ(p.kernels[0].schedule.block_m, 256);
  EXPECT_EQ(p.kernels[0].schedule.block_n, 64);
  EXPECT_TRUE(ineffective_hints(p).empty());
  Plan q = plan_fusion(find_example("softmax").build(), o);
  EXPECT_EQ(ineffective_hints(q), (std::vector<std::string>{"--gemm-tile 256x64", "--gemm-group 4"}));
}

// A wgmma tile is no wider than the product needs: computing a 128-wide product (attention's
// dV = Pᵀ·dO at d 128) 256 wide wastes half the tensor cores, and the cost model charges the
// padding.
TEST(FusionMatMul, WgmmaTileFitsANarrowProduct) {
  FusionOptions own;
  own.library_gemm = LibraryGemmUse::Never;
  for (int64_t n : {48, 96, 128, 384, 1024}) {
    SCOPED_TRACE(n);
    Graph g("mm");
    output("c", matmul(input(g, "a", {4096, 512}, DType::BF16), input(g, "b", {512, n}, DType::BF16)));
    const Plan p = plan_fusion(g, own);
    const TileSchedule& s = p.kernels.at(0).schedule;
    ASSERT_TRUE(s.wgmma);
    const int64_t padded = (n + s.block_n - 1) / s.block_n * s.block_n;
    EXPECT_LE(padded, (n + 127) / 128 * 128) << s.describe();
    // A tile narrower than 256 says what shared memory costs it.
    EXPECT_EQ(
        plan_report_text(p).find("of its rate: the tile's shared-memory bytes a flop") != std::string::npos,
        s.block_n < 256);
  }
  // 48 columns in a 64-wide tile cost a third more per useful flop than 1024 in 256-wide ones
  // for the padding (both grids fill their last wave alike, and a long k leaves the stores a
  // sliver) — and more again for the shared memory the narrow tile moves a flop: each k step
  // writes A and B there and each of the two warpgroups reads its rows of A and all of B, which
  // at 128×256 is exactly the tensor cores' pace (DeviceProfile::smem_flops_per_byte).
  auto seconds_per_useful_flop = [&](int64_t n) {
    Graph g("mm");
    output("c", matmul(input(g, "a", {32768, 8192}, DType::BF16), input(g, "b", {8192, n}, DType::BF16)));
    const KernelCost& c = plan_fusion(g, own).kernels.at(0).cost;
    return c.compute_s / c.flops;
  };
  auto share = [&](double bm, double bn) {
    const double bytes = 2 * 64 * ((bm + bn) + bm + 2 * bn), flops = 2 * bm * bn * 64;
    return std::min(1.0, flops / (bytes * own.profile.smem_flops_per_byte));
  };
  EXPECT_DOUBLE_EQ(share(128, 256), 1.0);
  EXPECT_NEAR(seconds_per_useful_flop(48) / seconds_per_useful_flop(1024), 64.0 / 48.0 / share(128, 64),
              0.05);
}

TEST(FusionMatMul, RefusalsNameTheReason) {
  struct Case {
    const char* why;
    std::function<void(Graph&)> build;
  };
  for (const Case& c : std::vector<Case>{
           {"tensor cores (mma.sync) take bf16 or f16",
            [](Graph& g) { output("c", matmul(input(g, "a", {32, 32}), input(g, "b", {32, 32}))); }},
           {"one of them transposed",
            [](Graph& g) {
              Tensor x = input(g, "x", {64, 32}, DType::BF16);
              output("c", matmul(x, x, {false, true, std::nullopt}));
            }},
       }) {
    SCOPED_TRACE(c.why);
    Graph g("refused");
    c.build(g);
    try {
      plan_fusion(g);
      FAIL();
    } catch (const UnsupportedError& e) {
      EXPECT_NE(std::string(e.what()).find(c.why), std::string::npos) << e.what();
    }
  }
}

// wgmma where the k loop has at least 3 steps of 64; shorter products (attention's backward at
// d 128) take mma.sync unless wgmma is asked for.
TEST(FusionMatMul, ShortProductsTakeMmaSync) {
  FusionOptions own;
  own.library_gemm = LibraryGemmUse::Never;
  for (int64_t k : {64, 128, 192, 4096}) {
    SCOPED_TRACE(k);
    Graph g("mm");
    output("c", matmul(input(g, "a", {2048, k}, DType::BF16), input(g, "b", {k, 2048}, DType::BF16)));
    EXPECT_EQ(plan_fusion(g, own).kernels.at(0).schedule.wgmma, k > 128);
    FusionOptions forced = own;
    forced.schedule.gemm_wgmma = 1;
    EXPECT_TRUE(plan_fusion(g, forced).kernels.at(0).schedule.wgmma);
  }
}

// An operand whose rows are not whole 16-byte chunks (K or N not a multiple of 8 in bf16) cannot
// be copied by cp.async as it lies. Copied first into a padded pitch, it runs on the staged
// schedule, the copy's bytes and time charged; read in place, fragments are loaded straight from
// global memory (the direct schedule, at a much lower rate). The plan takes whichever is
// predicted faster: the copies at a large product, reading in place at a tiny one (the copies'
// launches). An operand stored transposed is copied too where it has no batches (the kernel
// finds a column-major operand's batches its row count apart), else read in place.
TEST(FusionMatMul, OddRowsAreCopiedIntoAPaddedPitch) {
  FusionOptions own;
  own.library_gemm = LibraryGemmUse::Never;
  FusionOptions copy = own, in_place = own;
  copy.schedule.pitch_copy = 1;
  in_place.schedule.pitch_copy = 0;
  struct Case {
    int64_t m, k, n, k_pitch, n_pitch;
    bool copies;
  };
  for (const Case& c : {Case{4096, 1001, 515, 1008, 520, true}, Case{16, 33, 23, 40, 24, false}}) {
    SCOPED_TRACE(c.m);
    Graph g("odd_rows");
    output("c", matmul(input(g, "a", {c.m, c.k}, DType::BF16), input(g, "b", {c.k, c.n}, DType::BF16)));
    const Kernel copied = plan_fusion(g, copy).kernels.at(0);
    EXPECT_GT(copied.schedule.stages, 0);
    EXPECT_EQ(copied.schedule.operand_pitch[0], c.k_pitch);
    EXPECT_EQ(copied.schedule.operand_pitch[1], c.n_pitch);
    EXPECT_EQ(copied.cost.copy_bytes, (c.m * c.k + c.m * c.k_pitch + c.k * c.n + c.k * c.n_pitch) * 2);
    EXPECT_GT(copied.cost.copy_s, 0);
    EXPECT_GT(copied.cost.predicted_s, copied.cost.copy_s + copied.cost.compute_s);
    const Kernel direct = plan_fusion(g, in_place).kernels.at(0);
    EXPECT_EQ(direct.schedule.stages, 0);
    EXPECT_FALSE(direct.schedule.copies_operands());
    EXPECT_EQ(direct.cost.copy_bytes, 0);
    const Plan p = plan_fusion(g, own);
    const Kernel& chosen = p.kernels.at(0);
    EXPECT_EQ(chosen.cost.predicted_s, std::min(copied.cost.predicted_s, direct.cost.predicted_s));
    EXPECT_EQ(chosen.schedule.copies_operands(), c.copies);
    if (c.copies) {
      const std::string report = plan_report_text(p);
      EXPECT_NE(report.find(fmt::format("A copied first into rows of {} elements", c.k_pitch)), std::string::npos)
          << report;
      EXPECT_NE(report.find("operand copies into a padded pitch first"), std::string::npos) << report;
      const CompiledKernel cc = compile_kernel(p.graph, chosen);
      EXPECT_NE(cc.ptx.find("cp.async"), std::string::npos);
      if (!find_ptxas().empty()) {
        EXPECT_TRUE(run_ptxas(cc.ptx, chosen.name).has_value());
      }
    }
  }
  for (const Shape& a : {Shape{1001, 255}, Shape{2, 1001, 255}}) {  // A stored [K, M]: rows M long
    SCOPED_TRACE(shape_str(a));
    Graph t("odd_rows_transposed");
    output("c", matmul(input(t, "a", a, DType::BF16), input(t, "b", {1001, 512}, DType::BF16),
                       {true, false, std::nullopt}));
    const Kernel tk = plan_fusion(t, copy).kernels.at(0);
    const bool batched = a.size() == 3;
    EXPECT_EQ(tk.schedule.operand_pitch[0], batched ? 0 : 256);
    EXPECT_EQ(tk.schedule.stages > 0, !batched);
    const CompiledKernel cc = compile_kernel(t, tk);  // the column-major copy's pitch verified and assembled
    if (!find_ptxas().empty()) {
      EXPECT_TRUE(run_ptxas(cc.ptx, tk.name).has_value());
    }
  }
}

// A product of few rows is bound by streaming B: tiles of 16 rows (not 64 or 128 mostly padding)
// and, where the tiles are too few to fill the device, k split over blocks whose partial products
// meet in the workspace, summed by each tile's last block. The split's bytes are charged, and a
// grid smaller than the device is charged its idle SMs.
TEST(FusionMatMul, FewRowsStreamTheWeightsAndSplitK) {
  FusionOptions own;
  own.library_gemm = LibraryGemmUse::Never;
  Graph g("m16");
  output("c", matmul(input(g, "a", {16, 8192}, DType::BF16), input(g, "b", {8192, 8192}, DType::BF16)));
  const Plan p = plan_fusion(g, own);
  const Kernel& k = p.kernels.at(0);
  const TileSchedule& s = k.schedule;
  EXPECT_EQ(s.block_m, 16);
  EXPECT_FALSE(s.wgmma);
  EXPECT_GT(s.k_splits, 1);
  EXPECT_GE(s.grid(), own.profile.sm_count);
  EXPECT_GE(s.k_steps_per_split(), 8);
  EXPECT_EQ(s.workspace_bytes(), (s.k_splits * 16 * 8192 + s.n_blocks()) * 4);
  EXPECT_EQ(k.cost.scratch_bytes, 2 * s.k_splits * 16 * 8192 * 4);
  EXPECT_NE(plan_report_text(p).find("k split"), std::string::npos);
  const CompiledKernel c = compile_kernel(p.graph, k);
  EXPECT_NE(c.ptx.find("atom.global"), std::string::npos) << "the tile's blocks count in";
  EXPECT_NE(c.ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
  if (!find_ptxas().empty()) {
    EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
  }

  FusionOptions whole = own;
  whole.schedule.gemm_k_splits = 1;
  const Kernel one = plan_fusion(g, whole).kernels.at(0);
  EXPECT_EQ(one.schedule.k_splits, 1);
  EXPECT_LT(one.cost.busy_share, 1);  // 64 tiles for 132 SMs
  EXPECT_GT(one.cost.predicted_s, k.cost.predicted_s);
}

// A plan of one own-GEMM kernel whose two cuBLASLt options do not apply, each saying `why`.
void expect_library_refused(const Plan& p, const std::string& why) {
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_FALSE(p.kernels[0].library.has_value());
  ASSERT_EQ(p.gemm_choices.size(), 1u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(p.gemm_choices[0].options[i].applies);
    EXPECT_NE(p.gemm_choices[0].options[i].why_not.find(why), std::string::npos) << p.gemm_choices[0].options[i].why_not;
  }
}

// An operand broadcast along some batch axes but not others (grouped-query attention's K and V
// heads): tilefuse's GEMM reads it at its own batch; cuBLASLt's strided batches cannot, and the
// priced options say so — even where the library is asked for wherever it can compute.
TEST(FusionMatMul, PartialBatchBroadcastIsTheOwnGemm) {
  Graph g("partial_broadcast");
  output("c", matmul(input(g, "a", {2, 3, 16, 32}, DType::BF16), input(g, "b", {1, 3, 32, 16}, DType::BF16)));
  FusionOptions always;
  always.library_gemm = LibraryGemmUse::Always;
  always.schedule.gemm_wgmma = 1;  // k 32 takes mma.sync by default
  const Plan p = plan_fusion(g, always);
  expect_library_refused(p, "strided batches");
  const CompiledKernel c = compile_kernel(p.graph, p.kernels[0]);
  EXPECT_NE(c.ptx.find("wgmma.mma_async"), std::string::npos);
  if (!find_ptxas().empty()) {
    EXPECT_TRUE(run_ptxas(c.ptx, p.kernels[0].name).has_value());
  }
}

// A product of another dtype than its operands (attention's f32 scores of bf16 Q and K) is not
// asked of cuBLASLt: its options say why, and the plan keeps its own GEMM even where the library
// is asked for wherever it can compute.
TEST(FusionMatMul, TheLibraryIsAskedOnlyForItsDtypes) {
  for (const auto& [operands, product] : {std::pair{DType::BF16, DType::F32}, {DType::F16, DType::F32}}) {
    Graph g("dtypes");
    output("c", matmul(input(g, "a", {256, 512}, operands), input(g, "b", {512, 256}, operands), {false, false, product}));
    FusionOptions always;
    always.library_gemm = LibraryGemmUse::Always;
    expect_library_refused(plan_fusion(g, always), dtype_name(product));
  }
}

// Every matmul kernel has the library GEMM priced beside it: cuBLASLt then the epilogue,
// cuBLASLt with its native epilogue only where the math is the same (bias, then ReLU or tanh
// GELU — not erf GELU), and the plan's own kernel; asked for its own GEMM only (--library-gemm
// never), the plan keeps it and states what that loses.
TEST(FusionMatMul, LibraryGemmIsPriced) {
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, Graph&)> epilogue;
    const char* native_refusal;  // nullptr: cuBLASLt's native epilogue applies
  };
  for (const Case& c : std::vector<Case>{
           {"none", [](const Tensor& y, Graph&) { return y; }, "no epilogue"},
           {"bias_tanh_gelu",
            [](const Tensor& y, Graph& g) { return gelu(y + input(g, "b", {512}, DType::BF16), GeluApprox::Tanh); },
            nullptr},
           {"bias_relu", [](const Tensor& y, Graph& g) { return relu(y + input(g, "b", {512}, DType::BF16)); }, nullptr},
           {"bias_erf_gelu", [](const Tensor& y, Graph& g) { return gelu(y + input(g, "b", {512}, DType::BF16)); },
            "erf form"},
           {"residual", [](const Tensor& y, Graph& g) { return y + input(g, "r", {256, 512}, DType::BF16); },
            "not a bias"},
       }) {
    SCOPED_TRACE(c.name);
    Graph g(c.name);
    Tensor y = matmul(input(g, "a", {256, 1024}, DType::BF16), input(g, "w", {1024, 512}, DType::BF16));
    output("y", c.epilogue(y, g));
    FusionOptions own_only;
    own_only.library_gemm = LibraryGemmUse::Never;
    Plan p = plan_fusion(g, own_only);
    ASSERT_EQ(p.gemm_choices.size(), 1u);
    const GemmChoice& ch = p.gemm_choices[0];
    ASSERT_EQ(ch.options.size(), 3u);
    const GemmOption &lib = ch.options[0], &native = ch.options[1], &own = ch.options[2];
    EXPECT_TRUE(lib.applies) << lib.why_not;
    EXPECT_EQ(native.applies, c.native_refusal == nullptr);
    if (c.native_refusal) {
      EXPECT_NE(native.why_not.find(c.native_refusal), std::string::npos) << native.why_not;
    }
    if (native.applies) {
      EXPECT_LT(native.predicted_s, lib.predicted_s);  // no second kernel
    }
    const Kernel* mm = nullptr;
    for (const Kernel& k : p.kernels)
      if (k.kind == ScheduleKind::MatMul) mm = &k;
    ASSERT_NE(mm, nullptr);
    EXPECT_EQ(ch.kernel, mm->name);
    EXPECT_DOUBLE_EQ(own.predicted_s, mm->cost.predicted_s);
    EXPECT_EQ(ch.chosen, 2);
    double fastest = own.predicted_s;
    for (const GemmOption& o : ch.options)
      if (o.applies) fastest = std::min(fastest, o.predicted_s);
    EXPECT_DOUBLE_EQ(ch.lost_s, own.predicted_s - fastest);
    EXPECT_EQ(ch.note.empty(), ch.lost_s == 0);
    // A decision that fused the matmul with its consumers says the library GEMM was given up.
    for (const FusionDecision& d : p.decisions)
      EXPECT_EQ(d.library_gemm_lost, p.graph.node(d.producer).op == Op::MatMul && d.verdict != Verdict::Materialized);
    const std::string report = plan_report_text(p);
    EXPECT_NE(report.find("the library GEMM priced"), std::string::npos);
  }
}

// A rate measured for the shape (DeviceProfile::library_gemm_flops, by LibraryGemmShape::key)
// prices the library instead of the profile's constant and waves, and the report says so: a
// slow measured library hands the matmul to the own GEMM, a fast one to cuBLASLt.
TEST(FusionMatMul, MeasuredLibraryRatePricesItsShape) {
  Graph g("mm");
  output("y", matmul(input(g, "a", {3, 640, 1024}, DType::BF16), input(g, "w", {1024, 512}, DType::BF16)));
  const Node* mm = nullptr;
  for (const Node& n : g.nodes())
    if (n.op == Op::MatMul) mm = &n;
  ASSERT_NE(mm, nullptr);
  const LibraryGemmShape shape = library_gemm_shape(g, *mm);
  EXPECT_EQ(shape.batch, 3);
  EXPECT_EQ(shape.m, 640);
  EXPECT_EQ(shape.n, 512);
  EXPECT_EQ(shape.k, 1024);
  EXPECT_TRUE(shape.shared_b);
  EXPECT_FALSE(shape.shared_a);
  EXPECT_EQ(shape.key(), "bf16 3x640x512x1024 nns");
  const double flops = 2.0 * 3 * 640 * 512 * 1024;
  for (double rate : {50e12, 2000e12}) {
    SCOPED_TRACE(rate);
    FusionOptions o;
    o.profile.library_gemm_flops[shape.key()] = rate;
    Plan p = plan_fusion(g, o);
    ASSERT_EQ(p.gemm_choices.size(), 1u);
    const GemmOption& lib = p.gemm_choices[0].options[0];
    ASSERT_TRUE(lib.applies);
    if (rate < 100e12) {  // compute-bound at the measured rate, not the profile's 777 TFLOP/s
      EXPECT_NEAR(lib.predicted_s, flops / rate + o.profile.launch_s, 1e-9);
    }
    EXPECT_EQ(p.gemm_choices[0].chosen, rate < 100e12 ? 2 : 0);
    if (rate > 100e12) {
      const std::string report = plan_report_text(p);
      EXPECT_NE(report.find("the library's rate measured here for bf16 3x640x512x1024 nns"), std::string::npos)
          << report;
    }
  }
  FusionOptions bad;
  bad.profile.library_gemm_flops[shape.key()] = 0;
  EXPECT_THROW(plan_fusion(g, bad), Error);
}

// By default a matmul kernel becomes cuBLASLt's where that is predicted faster: an erf GELU
// epilogue as a kernel of its own reading the product, a bias + tanh GELU folded into the
// library's native epilogue; the plan stays consistent and each kernel compiles (the library's to
// no code). Where cuBLASLt is missing, the plan keeps its own GEMM and says why and what it loses.
TEST(FusionMatMul, LibraryGemmWhereFaster) {
  for (bool tanh : {false, true}) {
    SCOPED_TRACE(tanh ? "bias + tanh GELU" : "bias + erf GELU");
    Graph g(tanh ? "lib_tanh" : "lib_erf");
    // K 8192: the own GEMM's epilogue saves too little beside the library's faster product.
    Tensor y = matmul(input(g, "a", {2048, 8192}, DType::BF16), input(g, "w", {8192, 2048}, DType::BF16)) +
               input(g, "b", {2048}, DType::BF16);
    output("y", gelu(y, tanh ? GeluApprox::Tanh : GeluApprox::None));
    Plan p = plan_fusion(g);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    ASSERT_EQ(p.gemm_choices.size(), 1u);
    EXPECT_EQ(p.gemm_choices[0].chosen, tanh ? 1 : 0);
    ASSERT_EQ(p.kernels.size(), tanh ? 1u : 2u);
    const Kernel& lib = p.kernels[0];
    ASSERT_TRUE(lib.library.has_value());
    EXPECT_EQ(*lib.library, tanh ? LibraryEpilogue::BiasGeluTanh : LibraryEpilogue::None);
    EXPECT_EQ(p.gemm_choices[0].kernel, lib.name);
    if (!tanh) {
      EXPECT_EQ(lib.nodes.size(), 1u);  // the product alone
      EXPECT_FALSE(p.kernels[1].library.has_value());
      EXPECT_NE(std::find(p.kernels[1].inputs.begin(), p.kernels[1].inputs.end(), lib.outputs.at(0)),
                p.kernels[1].inputs.end());
    }
    for (const FusionDecision& d : p.decisions) EXPECT_FALSE(d.library_gemm_lost);
    for (const Kernel& k : p.kernels) {
      CompiledKernel c = compile_kernel(p.graph, k);
      EXPECT_EQ(c.library, k.library.has_value());
      EXPECT_EQ(c.ptx.empty(), k.library.has_value());
      if (!c.library && !find_ptxas().empty()) {
        EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
      }
    }
    EXPECT_NE(plan_report_text(p).find("cuBLASLt GEMM, epilogue"), std::string::npos);

    FusionOptions missing;
    missing.profile.library_gemm_missing = "libcublasLt.so.13 not found";
    Plan own = plan_fusion(g, missing);
    ASSERT_EQ(own.gemm_choices.size(), 1u);
    const GemmChoice& ch = own.gemm_choices[0];
    EXPECT_EQ(ch.chosen, 2);
    for (const Kernel& k : own.kernels) EXPECT_FALSE(k.library.has_value()) << k.name;
    EXPECT_GT(ch.lost_s, 0);
    EXPECT_NE(ch.note.find("libcublasLt.so.13 not found"), std::string::npos) << ch.note;
    EXPECT_NE(plan_report_text(own).find("not available here"), std::string::npos);
  }
}

}  // namespace
}  // namespace tilefuse

namespace tilefuse {
namespace {

// A device profile with a zero or negative constant is refused by name before the cost model
// divides by it.
TEST(Fusion, DeviceProfileConstantsAreChecked) {
  Graph g = find_example("softmax").build();
  FusionOptions o;
  o.profile.sm_count = 0;
  try {
    plan_fusion(g, o);
    FAIL() << "a profile of 0 SMs was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sm_count is 0"), std::string::npos) << e.what();
  }
  o.profile = DeviceProfile::h200();
  o.profile.memory_latency_s = -1;
  EXPECT_THROW(plan_fusion(g, o), Error);
  o.profile = DeviceProfile::h200();
  o.schedule.block_threads = 48;
  try {
    plan_fusion(g, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--block-threads 48"), std::string::npos) << e.what();
  }
}

// A hint that changes no kernel's schedule is named (rows per thread apply to pointwise tiles).
TEST(Fusion, IneffectiveHintsAreNamed) {
  FusionOptions o;
  o.schedule.rows_per_thread = 3;
  o.schedule.split = 0;
  std::vector<std::string> row = ineffective_hints(plan_fusion(find_example("softmax_256k").build(), o));
  EXPECT_EQ(row, std::vector<std::string>{"--rows-per-thread 3"});
  EXPECT_EQ(ineffective_hints(plan_fusion(find_example("bias_gelu").build(), o)), std::vector<std::string>{"--split 0"});
}

// Windowed rows ask ptxas for as many blocks an SM as a thread's registers allow. A kernel that
// holds two row-sized values across its reductions (x for its own output beside x − max, a fuzz
// graph's) needs room for both: at the one-row allowance (its 16 elements + 16) it spilled 352
// bytes; a softmax holds one, and keeps that allowance. A row's inputs count at once: they are
// loaded before their first use.
TEST(FusionReduce, WindowedRowsHoldingTwoValuesAskForFewerBlocks) {
  Graph g("two_held");
  Tensor x = input(g, "x", {1024, 97});
  output("lsm", log_softmax(x));
  output("side", pow(abs(x) + 0.5, tanh(x)));
  FusionOptions o;
  o.schedule.block_threads = 128;
  Plan p = plan_fusion(g, o);
  ASSERT_EQ(p.kernels.size(), 1u);
  const Kernel& k = p.kernels[0];
  ASSERT_TRUE(k.schedule.window);
  EXPECT_EQ(row_tiles_held(p.graph, k.nodes, k.outputs, k.domain), 2);
  // The registers ptxas may give a thread at the blocks asked for: an SM's four sub-partitions
  // of 16384 each hold whole warps.
  auto granted = [](const TileSchedule& t) {
    const int warps = t.min_blocks_per_sm * ((t.block_threads() + 31) / 32);
    return 16384 / (((warps + 3) / 4) * 32) / 8 * 8;
  };
  const DeviceProfile h200 = DeviceProfile::h200();
  EXPECT_EQ(h200.registers_at_blocks(25, 64), 32) << "13 warps on some sub-partitions";
  EXPECT_EQ(h200.blocks_by_registers(40, 64), 24);
  EXPECT_EQ(h200.registers_at_blocks(24, 64), 40);
  EXPECT_GE(granted(k.schedule), 2 * k.schedule.elems_per_thread() + 16) << "room for both held values";
  if (!find_ptxas().empty()) {
    std::optional<MeasuredKernel> m = run_ptxas(compile_kernel(p.graph, k).ptx, k.name);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->spill_bytes, 0) << m->registers << " registers";
  }
  Graph h("one_held");
  output("y", softmax(input(h, "x", {1024, 97})));
  Plan q = plan_fusion(h, o);
  ASSERT_EQ(q.kernels.size(), 1u);
  const Kernel& s = q.kernels[0];
  EXPECT_EQ(row_tiles_held(q.graph, s.nodes, s.outputs, s.domain), 1);
  const int one_row = (s.schedule.elems_per_thread() + 16 + 7) / 8 * 8;
  EXPECT_GE(granted(s.schedule), one_row);
  TileSchedule more = s.schedule;
  more.min_blocks_per_sm += 1;
  EXPECT_LT(granted(more), one_row) << "as many blocks as that allows";
  // Blocks of two warps: 25 of them (65536 registers over 40 a thread) put 13 warps on some
  // sub-partitions, which leaves 32 registers; 24 leave 40.
  Graph f("two_warps");
  output("y", softmax(input(f, "x", {1024, 66}, DType::F16)));
  FusionOptions two_warps;
  two_warps.schedule.block_threads = 64;
  const TileSchedule& tw = plan_fusion(f, two_warps).kernels.at(0).schedule;
  ASSERT_TRUE(tw.window);
  ASSERT_EQ(tw.block_threads(), 64);
  EXPECT_GE(granted(tw), (tw.elems_per_thread() + 16 + 7) / 8 * 8) << tw.min_blocks_per_sm << " blocks";
  // Three inputs along the row are loaded at once (a fuzz graph's: 128 bytes spilled at 32).
  Graph t("three_loaded");
  Tensor a = input(t, "a", {169, 1799}), b = input(t, "b", {169, 1799}), c = input(t, "c", {169, 1799});
  Tensor prod = a * (b - c);
  output("y", prod / (abs(sum(prod, {1}, true)) + 1.0));
  Plan r = plan_fusion(t);
  ASSERT_EQ(r.kernels.size(), 1u);
  const Kernel& w = r.kernels[0];
  ASSERT_TRUE(w.schedule.window);
  EXPECT_GE(granted(w.schedule), 3 * w.schedule.elems_per_thread() + 16);
  if (!find_ptxas().empty()) {
    std::optional<MeasuredKernel> m = run_ptxas(compile_kernel(r.graph, w).ptx, w.name);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->spill_bytes, 0) << m->registers << " registers";
  }
}

}  // namespace
}  // namespace tilefuse
