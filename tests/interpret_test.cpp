// Tile IR v2 programs interpreted on the host (compiler/tile/interpret.h, runtime/host_run.h):
// what the passes build checked against the float64 reference without a GPU, and the
// interpreter's own strictness (masked elements, bounds, a cluster out of step).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/support/error.h"
#include "compiler/tile/build.h"
#include "compiler/tile/interpret.h"
#include "runtime/check.h"
#include "runtime/executable.h"
#include "runtime/host_run.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {

using namespace dsl;
using tir::Program;

// The row kernels of Gpu.RowKernelsOnTileIrV2MatchFloat64, with and without a block barrier a pass.
TEST(Interpret, RowKernelsMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (int online : {0, 1})
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (online ? " block_online" : ""));
      FusionOptions o;
      o.schedule.block_online = online;
      testing::check_on_host(plan_fusion(testing::row_kernels_graph(dt), o), seed);
    }
}

// Long rows on Tile IR v2: staged through shared memory — claimed one a block from a counter
// (several rounds of a grid of three blocks) or a cluster's taken grid-stride, each stage refilled
// at the first reduction's barrier or right after its reads —, and split over a cluster's blocks
// in registers (an exchange per reduction, one a pass, one block barrier a pass).
TEST(Interpret, LongRowsStagedAndClusteredMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (DType dt : {DType::F32, DType::BF16}) {
    Graph g(std::string("host_long_") + dtype_name(dt));
    output("p", softmax(input(g, "x", {11, 32768}, dt), -1));
    Tensor z = input(g, "z", {7, 32768}, dt);
    output("n", rmsnorm(z, input(g, "w", {32768}, dt)));
    output("q", softmax(input(g, "v", {5, 65536}, dt), -1));
    for (int online : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (online ? " block_online, refill_at_read" : ""));
      FusionOptions staged;
      staged.schedule.split = 0;
      staged.schedule.block_online = online;
      staged.schedule.cluster_online = online;
      staged.schedule.refill_at_read = online;
      Plan p = plan_fusion(g, staged);
      int clustered = 0;
      for (const Kernel& k : p.kernels) {
        EXPECT_GT(k.schedule.stages, 0) << k.schedule.describe();
        EXPECT_EQ(k.schedule.refill_at_read, online == 1) << k.schedule.describe();
        clustered += k.schedule.cluster_blocks > 1;
      }
      EXPECT_EQ(clustered, 1);
      testing::check_on_host(p, seed);
      FusionOptions cluster = staged;
      cluster.schedule.stages = 0;
      cluster.schedule.cluster_online = online;
      Plan c = plan_fusion(g, cluster);
      for (const Kernel& k : c.kernels) EXPECT_GT(k.schedule.cluster_blocks, 1) << k.schedule.describe();
      testing::check_on_host(c, seed);
    }
  }
}

// Rows split into parts: each part a task of a persistent grid of
// fewer blocks than tasks, published to the workspace and the row's parts gathered from the
// other blocks' (parts of 64 KiB: rows of four f32 parts, of two bf16 ones; a softmax's max and
// online sum, an RMSNorm's sum of squares and its weight read at the part's columns, rows scaled
// by a positive and a negative constant).
TEST(Interpret, SplitRowsMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g(std::string("host_split_") + dtype_name(dt));
    output("p", softmax(input(g, "x", {5, 65536}, dt), -1));
    output("l", log_softmax(input(g, "z", {3, 65536}, dt), -1));
    output("n", rmsnorm(input(g, "v", {3, 65536}, dt), input(g, "w", {65536}, dt)));
    output("s", log_softmax(input(g, "u", {3, 65536}, dt) * 3.0, -1));  // (the max of u, times 3)
    output("t", softmax(-0.5 * input(g, "t0", {2, 65536}, dt), -1));    // (of the products)
    const Tensor y = input(g, "y0", {2, 65536}, dt) * 0.3;  // (an output too: rounded where used)
    output("y", y);
    output("q", softmax(y, -1));
    Plan p = plan_fusion(g);
    const int64_t part = 65536 / static_cast<int64_t>(dtype_size(dt));
    for (const Kernel& k : p.kernels)
      EXPECT_EQ(k.schedule.split_blocks, 65536 / part) << k.schedule.describe();
    // (Grids of 4, 5 and 9 blocks: f32's four parts a row one round's on 4, bf16's two on 4;
    // where they straddle rounds a block waits for parts of a round before its own.)
    for (int64_t blocks : {4, 5, 9}) {
      SCOPED_TRACE(std::to_string(blocks) + " blocks");
      HostRunOptions grid;
      grid.persistent_blocks = blocks;
      testing::check_on_host(p, seed, grid);
    }
    // (Parts of 32 elements a thread, of 64 — 16-bit only: f32 is over the fused kernels' register
    // budget — in blocks of fewer threads.)
    for (int elements : {32, 64}) {
      if (dt == DType::F32 && elements == 64) continue;
      SCOPED_TRACE(fmt::format("{} elements a thread", elements));
      FusionOptions o;
      o.schedule.part_elements = elements;  // (blocks of part / elements threads)
      Plan q = plan_fusion(g, o);
      int split = 0;
      for (const Kernel& k : q.kernels) {
        if (k.schedule.split_blocks < 2) continue;
        ++split;
        EXPECT_EQ(k.schedule.elems_per_thread(), elements) << k.schedule.describe();
        EXPECT_EQ(k.schedule.threads_per_row, part / elements);
      }
      EXPECT_EQ(split, static_cast<int>(q.kernels.size()));  // (every row still split)
      HostRunOptions grid;
      grid.persistent_blocks = 5;
      testing::check_on_host(q, seed, grid);
    }
  }
}

// A block of one warp takes whole rows, not parts of them (the parts' gather is over a block's
// warps): a plan asked for blocks of 32 threads builds and runs.
TEST(Interpret, BlocksOfOneWarpDoNotSplitRows) {
  Graph g("host_one_warp_rows");
  output("p", softmax(input(g, "x", {3, 16384}, DType::F32), -1));
  FusionOptions o;
  o.schedule.block_threads = 32;
  o.schedule.part_elements = 16;
  Plan p = plan_fusion(g, o);
  for (const Kernel& k : p.kernels) EXPECT_LT(k.schedule.split_blocks, 2) << k.schedule.describe();
  testing::check_on_host(p, testing::test_seed());
}

// Windowed rows (odd widths): several rows a block, each
// read from its own aligned start, a weight shared by the rows and one broadcast along some rows
// only (each row's run shifted by its own place), the output stored only where it is the row's.
TEST(Interpret, WindowedRowsSeveralABlockMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g(std::string("host_windows_") + dtype_name(dt));
    output("p", softmax(input(g, "x", {37, 1001}, dt), -1));
    Tensor z = input(g, "z", {21, 1003}, dt);
    output("n", layernorm(z, input(g, "w", {1003}, dt), input(g, "b", {1003}, dt)));
    output("r", rmsnorm(input(g, "v", {3, 5, 997}, dt), input(g, "rw", {3, 1, 997}, dt)));
    Tensor u = input(g, "u", {19, 1005}, dt);
    output("c", sum(cast(u, DType::F32) * iota(g, {19, 1005}, 1), {-1}, true));
    FusionOptions o;
    o.schedule.window = 1;  // (also layernorm's two weights along the row)
    Plan p = plan_fusion(g, o);
    int windowed = 0, several = 0;
    for (const Kernel& k : p.kernels) {
      SCOPED_TRACE(k.name + ": " + k.schedule.describe());
      if (!k.schedule.window) continue;
      ++windowed;
      several += k.schedule.tile_rows() > 1;
    }
    EXPECT_EQ(windowed, 4);
    EXPECT_GT(several, 0) << "no kernel holds several windowed rows a block";
    testing::check_on_host(p, seed);
  }
}

// Pointwise domains (flat, odd element counts, broadcasts along the middle) and reductions over
// leading axes (split over blocks that meet in the workspace).
TEST(Interpret, PointwiseAndColumnKernelsMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g(std::string("host_pointwise_") + dtype_name(dt));
    Tensor x = input(g, "x", {3, 17, 1001}, dt);
    output("y", gelu(x + input(g, "b", {1001}, dt)) * input(g, "m", {3, 1, 1}, dt));
    output("t", tanh(input(g, "e", {999}, dt)) + 1.0);
    Tensor c = input(g, "c", {4099, 300}, dt);
    output("cs", sum(c * c, {0}));
    testing::check_on_host(plan_fusion(g), seed);
  }
}

// Every GEMM schedule of GpuMatMul.ShapesLayoutsAndEpiloguesMatchReference: mma.sync (staged or
// straight from global memory), wgmma fed by cp.async or by TMA from a producer warpgroup,
// ping-pong consumer groups, clusters of two with B multicast, split-K, padded pitches.
TEST(Interpret, MatmulSchedulesMatchFloat64) {
  const uint64_t seed = testing::test_seed();
  for (const testing::PlannedCase& c : testing::matmul_schedule_cases()) {
    SCOPED_TRACE(c.name);
    testing::check_on_host(c.plan, seed);
  }
}

// A program of `blocks` blocks of 32 threads along a row (`per_thread` elements each), reading
// f32 "x" and writing f32 "y" of these views; and host memory for the two.
Program x_to_y(const std::string& name, int64_t blocks, int per_thread, const Shape& x_view, const Shape& y_view) {
  Program p;
  p.name = name;
  p.grid = {blocks};
  p.layout = {{1, per_thread}, {1, 32}, {1, 1}};
  tir::Param x;
  x.name = "x";
  x.view = x_view;
  tir::Param y = x;
  y.name = "y";
  y.view = y_view;
  y.output = true;
  p.params = {x, y};
  return p;
}
std::vector<tir::HostArg> host_args(std::vector<float>& x, std::vector<float>& y) {
  return {{reinterpret_cast<uint8_t*>(x.data()), x.size() * 4}, {reinterpret_cast<uint8_t*>(y.data()), y.size() * 4}};
}

// A masked load's excluded elements are NaN on the host: a program that used one would show it.
// Here a row's sum over a tile wider than the row, once masked and once not.
TEST(Interpret, MaskedElementsAreNotValues) {
  auto program = [](bool mask_the_sum) {
    Program p = x_to_y("masked", 2, 4, {2, 100}, {2, 1});
    tir::Builder b(p, p.body);
    const int row = b.program_id(0), zero = b.index(0);
    const int t = b.load(0, {row, zero}, {1, 128}, {false, true});
    const int ok = b.in_bounds(zero, b.index(100), 1, {1, 128});
    b.store(1, {row, zero}, b.reduce(Op::ReduceSum, t, 1, mask_the_sum ? ok : -1));
    return p;
  };
  std::vector<float> in(200);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7);
  for (bool masked : {true, false}) {
    std::vector<float> out(2, -1.0f);
    tir::interpret(program(masked), host_args(in, out));
    for (int r = 0; r < 2; ++r) {
      double want = 0;
      for (int c = 0; c < 100; ++c) want += in[static_cast<size_t>(r * 100 + c)];
      if (masked)
        EXPECT_EQ(out[static_cast<size_t>(r)], want);
      else
        EXPECT_TRUE(std::isnan(out[static_cast<size_t>(r)])) << out[static_cast<size_t>(r)];
    }
  }
}

// An unmasked access past a parameter's view (or its memory) is an error naming the kernel, block
// and parameter.
TEST(Interpret, AccessesOutsideTheirMemoryAreErrors) {
  Program p = x_to_y("outside", 3, 1, {2, 32}, {2, 32});  // three blocks over two rows, unmasked
  tir::Builder b(p, p.body);
  const int row = b.program_id(0), zero = b.index(0);
  b.store(1, {row, zero}, b.load(0, {row, zero}, {1, 32}));
  std::vector<float> in(64, 1.0f), out(64);
  try {
    tir::interpret(p, host_args(in, out));
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("block 2"), std::string::npos) << what;
    EXPECT_NE(what.find("'x'"), std::string::npos) << what;
  }
  EXPECT_EQ(out[63], 1.0f);  // the blocks before it ran
}

// A cluster's blocks that exchange values a different number of times (a hang on the GPU) are an
// error; exchanged values arrive in rank order.
TEST(Interpret, ClustersExchangeInStep) {
  auto program = [](bool uneven) {
    Program p;
    p.name = "cluster";
    p.grid = {4};
    p.cluster_blocks = 2;
    p.layout = {{1, 1}, {1, 32}, {1, 1}};
    tir::Param y;
    y.name = "y";
    y.view = {4, 2};
    y.output = true;
    p.params = {y};
    tir::Builder b(p, p.body);
    const int id = b.program_id(0), zero = b.index(0);
    const int mine = b.compute(Op::Add, {b.iota(id, 1, {1, 1}), b.tile_const(0.5, DType::F32, {1, 1})}, DType::F32);
    std::vector<int> all = b.cluster_values({mine});
    if (uneven)
      b.when(b.less(b.rem(id, b.index(2)), b.index(1)), [&](tir::Builder& in) { in.cluster_values({mine}); });
    b.store(0, {id, zero}, all[0]);
    b.store(0, {id, b.index(1)}, all[1]);
    return p;
  };
  std::vector<float> out(8, 0.0f);
  tir::interpret(program(false), {{reinterpret_cast<uint8_t*>(out.data()), out.size() * 4}});
  for (int block = 0; block < 4; ++block)
    for (int rank = 0; rank < 2; ++rank)  // block `rank` of the block's cluster
      EXPECT_EQ(out[static_cast<size_t>(block * 2 + rank)], block / 2 * 2 + rank + 0.5f) << block;
  EXPECT_THROW(tir::interpret(program(true), {{reinterpret_cast<uint8_t*>(out.data()), out.size() * 4}}), Error);
}

// A cuBLASLt kernel runs on the host as the float64 reference of its nodes, and the kernels
// around it as their programs.
TEST(Interpret, LibraryKernelsAreStoodInFor) {
  Graph g("library_on_host");
  Tensor y = matmul(input(g, "a", {96, 64}, DType::BF16), input(g, "b", {64, 80}, DType::BF16));
  output("y", softmax(y + input(g, "bias", {80}, DType::BF16), -1));
  FusionOptions o;
  o.library_gemm = LibraryGemmUse::Always;
  const Plan p = plan_fusion(g, o);
  int library = 0;
  for (const Kernel& k : p.kernels) library += k.library.has_value();
  ASSERT_EQ(library, 1) << p.kernels.size();
  ASSERT_GT(p.kernels.size(), 1u);
  testing::check_on_host(p, testing::test_seed());
}

// Every instruction of a region and the regions inside it, in order.
void for_each_inst(tir::Region& r, const std::function<void(tir::Inst&)>& f) {
  for (tir::Inst& i : r.body) {
    f(i);
    for (tir::Region& inner : i.regions) for_each_inst(inner, f);
  }
}

// Program p run over random inputs (its parameters' views, a workspace of 4 KiB of counters), or
// the error it stops with ("" where it runs to its end).
std::string interpreted(const Program& p) {
  std::mt19937_64 rng(7);
  std::vector<TensorData> memory;
  for (const tir::Param& prm : p.params)
    memory.push_back(prm.workspace ? TensorData::zeros(DType::F32, {num_elements(prm.view) + 1024})
                                   : TensorData::random(prm.dtype, prm.view, rng));
  std::vector<tir::HostArg> args;
  for (TensorData& t : memory) args.push_back({t.bytes.data(), t.bytes.size()});
  try {
    tir::interpret(p, args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A warp-specialized GEMM (TMA stages, a producer, wgmma consumers) with its synchronization
// broken three ways, each a race or a hang on the GPU, each an error naming it here: the
// consumers' waits for the stages' fills dropped; a product's wait that lets it run past the
// release of its stages; the producer's waits for the stages' releases dropped.
TEST(Interpret, StageRacesAreErrors) {
  Graph g("tma_gemm");
  output("c", matmul(input(g, "a", {256, 512}, DType::BF16), input(g, "b", {512, 192}, DType::BF16)));
  FusionOptions o;
  o.library_gemm = LibraryGemmUse::Never;
  o.schedule.gemm_wgmma = 1;
  const Plan plan = plan_fusion(g, o);
  ASSERT_TRUE(plan.kernels.at(0).schedule.tma) << plan.kernels[0].schedule.describe();
  const Program p = tir::build_program(plan.graph, plan.kernels[0]);
  EXPECT_EQ(interpreted(p), "");
  auto broken = [&](const std::function<void(tir::Inst&)>& change) {
    Program q = p;
    for_each_inst(q.body, change);
    return interpreted(q);
  };
  auto drop = [](tir::Opcode o) {
    return [o](tir::Inst& i) {
      if (i.opcode == o) i.opcode = tir::Opcode::Barrier;  // (a barrier: nothing here)
    };
  };
  const std::string unwaited = broken(drop(tir::Opcode::WaitFull));
  EXPECT_NE(unwaited.find("without waiting for its fill"), std::string::npos) << unwaited;
  const std::string early = broken([](tir::Inst& i) {
    if (i.opcode == tir::Opcode::DotWait && i.value == 1) i.value = 2;
  });
  EXPECT_NE(early.find("while a product reading it is in flight"), std::string::npos) << early;
  const std::string overwritten = broken(drop(tir::Opcode::WaitEmpty));
  EXPECT_NE(overwritten.find("without waiting for its last fill's release"), std::string::npos) << overwritten;
}

}  // namespace
}  // namespace tilefuse
