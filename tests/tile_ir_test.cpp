// Tile IR v2 on its own: programs built, printed, parsed back and verified; the verifier's and
// the parser's errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "compiler/codegen/compile.h"
#include "compiler/codegen/target.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/fusion.h"
#include "compiler/graph/tensor_data.h"
#include "compiler/support/error.h"
#include "compiler/tile/attention.h"
#include "compiler/tile/build.h"
#include "compiler/tile/fold_factors.h"
#include "compiler/tile/ir.h"
#include "compiler/tile/ir_verify.h"
#include "compiler/tile/sink.h"
#include "runtime/check.h"
#include "runtime/cuda_driver.h"
#include "runtime/executable.h"
#include "tests/test_util.h"
#include "tools/fuzz/random_graph.h"

namespace tilefuse::tir {
namespace {

Param param(const char* name, DType dt, Shape view, bool output = false) {
  Param p;
  p.name = name;
  p.dtype = dt;
  p.view = std::move(view);
  p.output = output;
  return p;
}

Layout rows_of(int rows_per_thread, int thread_rows, int threads_per_row, int vec) {
  return {{1, vec}, {thread_rows, threads_per_row}, {rows_per_thread, 1}};
}

// How often `what` occurs in `text` (PTX instructions: shuffles, barriers).
size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// ptxas (where there is one) takes the PTX without spilling.
void expect_assembled_unspilled(const std::string& ptx, const std::string& name) {
  if (find_ptxas().empty()) return;
  std::optional<MeasuredKernel> m = run_ptxas(ptx, name);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->spill_bytes, 0);
}

// Each of `bad` after `header`, closed, is refused by the verifier (or already by the parser);
// the header alone is a good program.
void expect_each_refused(const std::string& header, const std::vector<std::string>& bad) {
  EXPECT_TRUE(program_problems(parse_program(header + "}\n")).empty()) << header;
  for (const std::string& b : bad) {
    SCOPED_TRACE(b);
    try {
      EXPECT_FALSE(program_problems(parse_program(header + b + "}\n")).empty());
    } catch (const Error&) {
    }
  }
}

// gelu(x + b) over [R, 1024] tiles: the bias is a [1, 1024] row, loaded once per thread.
Program bias_gelu() {
  Program p;
  p.name = "bias_gelu_k0";
  p.params = {param("x", DType::F32, {8192, 8192}),
              param("b", DType::F32, {1, 8192}),
              param("y", DType::F32, {8192, 8192}, true)};
  p.layout = rows_of(2, 1, 256, 4);
  p.grid = {4096 * 8};
  Builder b(p, p.body);
  int pid = b.program_id(0);
  int row = b.mul(b.index(2), b.index(0));  // placeholders so the text exercises both ops
  row = b.add(b.mul(pid, b.index(2)), row);
  int zero = b.index(0);
  int x = b.load(0, {row, zero}, {2, 1024});
  int bias = b.load(1, {zero, zero}, {1, 1024});
  int y = b.compute(Op::Gelu, {b.compute(Op::Add, {x, bias}, DType::F32)}, DType::F32);
  b.store(2, {row, zero}, y);
  return p;
}

// sum(x, {0}) of bf16 [8192, 8192]: each block a column tile, a loop over row tiles carrying an
// f32 [4, 512] partial, reduced over its rows after the loop.
Program column_sum() {
  Program p;
  p.name = "column_sum_k0";
  p.params = {param("x", DType::BF16, {8192, 8192}), param("s", DType::F32, {1, 8192}, true)};
  p.layout = rows_of(2, 2, 128, 4);
  p.grid = {8};
  Builder b(p, p.body);
  int col = b.mul(b.program_id(0), b.index(512));
  int zero = b.tile_const(0, DType::F32, {4, 512});
  std::vector<int> acc = b.for_loop(b.index(0), b.index(8192), b.index(4), {zero},
                                    [&](Builder& in, int row, const std::vector<int>& carried) {
                                      int t = in.compute(Op::Cast, {in.load(0, {row, col}, {4, 512})}, DType::F32);
                                      return std::vector<int>{in.compute(Op::Add, {carried[0], t}, DType::F32)};
                                    });
  b.store(1, {b.index(0), col}, b.reduce(Op::ReduceSum, acc[0], 0));
  return p;
}

TEST(TileIr, PrintParseRoundTrip) {
  for (const Program& p : {bias_gelu(), column_sum()}) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(program_problems(p).empty()) << print_program(p);
    const std::string text = print_program(p);
    Program q = parse_program(text);
    EXPECT_TRUE(program_problems(q).empty()) << text;
    EXPECT_EQ(print_program(q), text);
  }
}

TEST(TileIr, LoopCarriesATile) {
  const std::string text = print_program(column_sum());
  EXPECT_NE(text.find("= for %"), std::string::npos) << text;
  EXPECT_NE(text.find("iter_args(%"), std::string::npos) << text;
  EXPECT_NE(text.find(") : tile<4x512xf32> {"), std::string::npos) << text;
  EXPECT_NE(text.find("reduce_sum"), std::string::npos) << text;
}

TEST(TileIr, VerifierNamesTheProblem) {
  struct Case {
    const char* what;
    std::string text;
  };
  const std::string head =
      "tile.func @k(%arg0 \"x\": f32[64, 256], %arg1 \"b\": f32[1, 256], %arg2 \"y\": f32[64, 256] out)\n"
      "    grid [32] threads 256 layout blocked<per_thread [1, 4], threads [4, 64], reps [1, 1]> {\n"
      "  %0 = program_id 0 : index\n  %1 = const 0 : index\n";
  for (const Case& c : std::vector<Case>{
           {"spans 8 along axis 0, the layout's tile 4", "  %2 = load %arg0[%0, %1] : tile<8x256xf32>\n"},
           {"is broadcast along axis 0", "  %2 = load %arg1[%0, %1] : tile<4x256xf32>\n"},
           {"is an input", "  %2 = load %arg0[%0, %1] : tile<4x256xf32>\n  store %arg0[%0, %1], %2 : tile<4x256xf32>\n"},
           {"not a tile of %arg0's dtype f32", "  %2 = load %arg0[%0, %1] : tile<4x256xbf16>\n"},
           {"operand dtypes do not fit",  // (an f32 operand of a 16-bit result is taken; not the reverse)
            "  %2 = load %arg0[%0, %1] : tile<4x256xf32>\n  %3 = cast %2 : tile<4x256xbf16>\n"
            "  %4 = add %3, %2 : tile<4x256xf32>\n"},
           {"mask tile<4x256xf32> does not broadcast to tile<4x256xf32>",
            "  %2 = load %arg0[%0, %1] : tile<4x256xf32>\n  %3 = reduce_sum %2 axis 1 where %2 : tile<4x1xf32>\n"},
           {"yields f32 for carried value 0",
            "  %2 = load %arg0[%0, %1] : tile<4x256xf32>\n"
            "  %3 = for %4 = %1 to %0 step %0 iter_args(%5 = %2) : tile<4x256xf32> {\n"
            "    %6 = const 1 : f32\n    yield %6\n  }\n"},
       }) {
    SCOPED_TRACE(c.what);
    Program p = parse_program(head + c.text + "}\n");
    std::vector<std::string> problems = program_problems(p);
    ASSERT_FALSE(problems.empty());
    bool named = false;
    for (const std::string& s : problems) named |= s.find(c.what) != std::string::npos;
    EXPECT_TRUE(named) << problems[0];
  }
}

// cluster_values: each block's values of per-row tiles in one exchange, [a·n + r] block r's of
// arg a; printed and parsed back, and refused for a tile that is not one floating-point column.
TEST(TileIr, ClusterValuesGiveEachBlocksValues) {
  const std::string head =
      "tile.func @k(%arg0 \"x\": f32[64, 256], %arg1 \"y\": f32[64, 1] out)\n"
      "    grid [128] threads 256 layout blocked<per_thread [1, 4], threads [1, 256], reps [1, 1]> cluster 2 {\n"
      "  %0 = program_id 0 : index\n  %1 = const 2 : index\n  %2 = divui %0, %1 : index\n"
      "  %3 = remui %0, %1 : index\n  %4 = const 1024 : index\n  %5 = muli %3, %4 : index\n"
      "  %6 = const 0 : index\n"
      "  %7 = load %arg0[%2, %6] : tile<1x1024xf32>\n"
      "  %8 = reduce_max %7 axis 1 : tile<1x1xf32>\n"
      "  %9 = reduce_sum %7 axis 1 : tile<1x1xf32>\n";
  const std::string good = head +
                           "  %10, %11, %12, %13 = cluster_values %8, %9 : tile<1x1xf32>, tile<1x1xf32>\n"
                           "  %14 = max %10, %11 : tile<1x1xf32>\n"
                           "  %15 = add %12, %13 : tile<1x1xf32>\n"
                           "  %16 = div %15, %14 : tile<1x1xf32>\n"
                           "  store %arg1[%2, %6], %16 : tile<1x1xf32>\n}\n";
  const Program p = parse_program(good);
  EXPECT_TRUE(program_problems(p).empty()) << program_problems(p)[0];
  EXPECT_EQ(print_program(p), good);
  const Inst& x = p.body.body.at(10);
  ASSERT_EQ(x.opcode, Opcode::ClusterValues);
  EXPECT_EQ(x.results.size(), 4u);  // two args, two blocks
  // The wrong number of values defined for the cluster's blocks is the parser's to name.
  EXPECT_THROW(parse_program(head + "  %10, %11 = cluster_values %8, %9 : tile<1x1xf32>, tile<1x1xf32>\n}\n"), Error);
  for (const auto& [what, text] : std::vector<std::pair<std::string, std::string>>{
           {"not a floating-point tile of one column", "  %10, %11 = cluster_values %7 : tile<1x1024xf32>\n"},
           {"not a floating-point tile of one column",
            "  %10 = ne %8, %9 : tile<1x1xbool>\n  %11, %12 = cluster_values %10 : tile<1x1xbool>\n"},
       }) {
    SCOPED_TRACE(text);
    const std::vector<std::string> problems = program_problems(parse_program(head + text + "}\n"));
    ASSERT_FALSE(problems.empty());
    EXPECT_NE(problems[0].find(what), std::string::npos) << problems[0];
  }
}

// gather_blocks: the cluster's blocks' values of a row as a warp_lanes tile (lane r of each warp
// block r's), reduced over the blocks by shuffles alone: each warp combines them itself. It
// takes any cluster up to 32 blocks: of 3, each aligned group of 4 lanes counts its first 3.
TEST(TileIr, GatherBlocksSpreadsTheBlocksValuesOverLanes) {
  auto program = [](int cluster) {
    return fmt::format(
        "tile.func @k(%arg0 \"x\": f32[64, 4096], %arg1 \"y\": f32[64, 1] out)\n"
        "    grid [{grid}] threads 256 layout blocked<per_thread [1, 4], threads [1, 256], reps [1, 1]> cluster {n} {{\n"
        "  %0 = program_id 0 : index\n  %1 = const {n} : index\n  %2 = divui %0, %1 : index\n"
        "  %3 = remui %0, %1 : index\n  %4 = const 1024 : index\n  %5 = muli %3, %4 : index\n"
        "  %6 = const 0 : index\n"
        "  %7 = load %arg0[%2, %5] : tile<1x1024xf32>\n"
        "  %8 = reduce_sum %7 axis 1 : tile<1x1xf32>\n"
        "  %9 = gather_blocks %8 : tile<1x1xf32>\n"
        "  %10 = reduce_sum %9 axis 1 : tile<1x1xf32>\n"
        "  store %arg1[%2, %6], %10 : tile<1x1xf32>\n"
        "}}\n",
        fmt::arg("grid", 64 * cluster), fmt::arg("n", cluster));
  };
  const Program p = parse_program(program(4));
  EXPECT_TRUE(program_problems(p).empty()) << fmt::format("{}", fmt::join(program_problems(p), "\n"));
  const std::string text = print_program(p);
  EXPECT_EQ(print_program(parse_program(text)), text);
  EXPECT_EQ(type_str(p.types.at(static_cast<size_t>(p.body.body.at(9).results.at(0)))), "tile<1x4xf32, warp_lanes>");
  const std::string ptx = program_ptx(p);
  EXPECT_EQ(occurrences(ptx, "shfl.sync.bfly"), 5u + 2u);  // the block's row over a warp, then its 4 blocks over 4 lanes
  EXPECT_NE(ptx.find("mapa.shared::cluster"), std::string::npos);
  EXPECT_NE(ptx.find("barrier.cluster.wait"), std::string::npos);
  if (!find_ptxas().empty()) {
    EXPECT_TRUE(run_ptxas(ptx, p.name).has_value());
  }
  const Program three = parse_program(program(3));
  EXPECT_TRUE(program_problems(three).empty());
  EXPECT_EQ(occurrences(program_ptx(three), "shfl.sync.bfly"), 5u + 2u);
}

TEST(TileIr, ParserNamesTheLine) {
  const std::string text =
      "tile.func @k(%arg0 \"x\": f32[64], %arg1 \"y\": f32[64] out)\n"
      "    grid [1] threads 64 layout blocked<per_thread [1], threads [64], reps [1]> {\n"
      "  %0 = const 0 : index\n"
      "  %1 = load %arg0[%7] : tile<64xf32>\n"
      "}\n";
  try {
    parse_program(text);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 4: %7 is used before it is defined"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_program("tile.func @k() grid [1] threads 32 layout blocked<per_thread [1], threads [64], reps [1]> {}"),
               Error);  // 64 threads in the layout, 32 in the function
}

// Sinking moves an elementwise value down to its first use — past a reduction that does not
// read it (x − max, used only after a row's sum of x), a chain behind its last link — drops one
// nothing uses, and leaves loads, reductions and stores where they are; the program still
// verifies.
TEST(TileIr, SinkingMovesValuesToTheirFirstUse) {
  // x, its row's max m and x − m
  const std::string head =
      "tile.func @k(%arg0 \"x\": f32[64, 256], %arg1 \"y\": f32[64, 256] out)\n"
      "    grid [64] threads 64 layout blocked<per_thread [1, 4], threads [1, 64], reps [1, 1]> {\n"
      "  %0 = program_id 0 : index\n"
      "  %1 = const 0 : index\n"
      "  %2 = load %arg0[%0, %1] : tile<1x256xf32>\n"
      "  %3 = reduce_max %2 axis 1 : tile<1x1xf32>\n"
      "  %4 = sub %2, %3 : tile<1x256xf32>\n";
  const std::string text =
      head +
      "  %5 = exp %4 : tile<1x256xf32>\n"
      "  %6 = reduce_sum %5 axis 1 : tile<1x1xf32>\n"
      "  %7 = log %6 : tile<1x1xf32>\n"
      "  %8 = sub %4, %7 : tile<1x256xf32>\n"
      "  store %arg1[%0, %1], %8 : tile<1x256xf32>\n"
      "}\n";
  Program p = parse_program(text);
  sink_to_uses(p);
  EXPECT_TRUE(program_problems(p).empty()) << print_program(p);
  auto mnemonics = [](const Program& q) {
    std::vector<std::string> out;
    for (const Inst& i : q.body.body) {
      const bool graph_op = i.opcode == Opcode::Compute || i.opcode == Opcode::Reduce;
      out.push_back(graph_op ? op_info(i.op).name : opcode_name(i.opcode));
    }
    return out;
  };
  // (The max's exp chain stays where the sum reads it; x − max moves only as far as the exp.)
  EXPECT_EQ(fmt::format("{}", fmt::join(mnemonics(p), " ")),
            "program_id const load reduce_max sub exp reduce_sum log sub store");
  const std::string moved =
      head +
      "  %5 = const 1 : f32\n"
      "  %6 = add %3, %5 : tile<1x1xf32>\n"
      "  %7 = reduce_sum %2 axis 1 : tile<1x1xf32>\n"
      "  %8 = sub %4, %7 : tile<1x256xf32>\n"
      "  %9 = mul %8, %6 : tile<1x256xf32>\n"
      "  %10 = exp %9 : tile<1x256xf32>\n"
      "  store %arg1[%0, %1], %9 : tile<1x256xf32>\n"
      "}\n";
  Program q = parse_program(moved);
  sink_to_uses(q);
  EXPECT_TRUE(program_problems(q).empty()) << print_program(q);
  EXPECT_EQ(fmt::format("{}", fmt::join(mnemonics(q), " ")),
            "program_id const load reduce_max reduce_sum sub sub const add mul store")
      << print_program(q);
}

// Every pointwise, column-reduction and resident row kernel of the fuzzer's graphs builds a
// program that verifies and prints back to the same text.
TEST(TileIrBuild, FuzzKernelsVerifyAndRoundTrip) {
  fuzz::RandomGraphOptions compiled;
  compiled.iota = 0;
  compiled.matmul = 0.05;
  int built = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    Plan plan;
    try {
      plan = plan_fusion(fuzz::random_graph(seed, compiled));
    } catch (const UnsupportedError&) {
      continue;  // an f32 matmul, say: refused with its reason (fuzz_test checks the refusals)
    }
    for (const Kernel& k : plan.kernels) {
      const Program p = build_program(plan.graph, k);
      SCOPED_TRACE(fmt::format("seed {} kernel {}", seed, k.name));
      ++built;
      EXPECT_TRUE(program_problems(p).empty());
      const std::string text = print_program(p);
      EXPECT_EQ(print_program(parse_program(text)), text);
    }
  }
  EXPECT_GT(built, 0);
}

// An operand broadcast along some of the domain's row dimensions keeps them, so a load can split
// the row index; edge tiles are masked. (By default this odd element count runs as one row of
// vectors, the operand read at each element's index; rows of elements are `window 0`.)
TEST(TileIrBuild, PartlyBroadcastRowsAndEdges) {
  using namespace dsl;
  Graph g("edges");
  Tensor x = input(g, "x", {3, 37, 1001});
  Tensor r = input(g, "r", {3, 1, 1001});
  output("y", x * r);
  FusionOptions rows;
  rows.schedule.window = 0;
  Plan plan = plan_fusion(g, rows);
  ASSERT_EQ(plan.kernels.size(), 1u);
  Program p = build_program(plan.graph, plan.kernels[0]);
  const std::string text = print_program(p);
  EXPECT_NE(text.find("\"r\": f32[3, 1001] rows [3, 37] as [3, 1]"), std::string::npos) << text;
  EXPECT_NE(text.find("masked [0, 1]"), std::string::npos) << text;  // 111 rows, 1001 columns: edge tiles
}

// A 16-bit value a kernel writes and also uses is rounded where it is computed, so that its uses
// in this kernel see what other kernels read from memory; one it only uses stays in f32.
TEST(TileIrBuild, WrittenSixteenBitValuesAreRoundedBeforeTheirUses) {
  using namespace dsl;
  Graph g("both");
  Tensor x = input(g, "x", {64, 256}, DType::BF16);
  Tensor y = x * 3.0;
  output("y", y);
  output("z", exp(y) + x);
  Plan plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 1u);
  const std::string text = print_program(build_program(plan.graph, plan.kernels[0]));
  const size_t mul = text.find(" = mul "), cast = text.find(" = cast ", mul), exp = text.find(" = exp ");
  ASSERT_NE(cast, std::string::npos) << text;
  EXPECT_LT(cast, exp) << text;
  EXPECT_EQ(text.find(" = cast ", cast + 1), std::string::npos) << text;  // exp(y) + x is only written
}

// A matmul's kernel is a loop over K carrying an accumulator fragment tile through `dot`, then
// the epilogue on that tile; operands read transposed are column-major parameters, and tiles past
// M, N and K are masked (the K tail zeroed before the dot).
TEST(TileIrBuild, MatMulLoopCarriesTheAccumulator) {
  using namespace dsl;
  Graph g("mm");
  Tensor a = input(g, "a", {3, 50, 37}, DType::BF16);  // read as aᵀ: [3, 37, 50]
  Tensor b = input(g, "b", {50, 29}, DType::BF16);
  output("c", relu(matmul(a, b, {true, false, DType::F32}) + input(g, "r", {3, 37, 29})));
  Plan plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 1u);
  ASSERT_EQ(plan.kernels[0].kind, ScheduleKind::MatMul);
  Program p = build_program(plan.graph, plan.kernels[0]);
  EXPECT_TRUE(program_problems(p).empty());
  const std::string text = print_program(p);
  EXPECT_EQ(print_program(parse_program(text)), text);
  EXPECT_NE(text.find("\"a\": bf16[111, 50] col_major 37"), std::string::npos) << text;
  EXPECT_NE(text.find("\"b\": bf16[50, 29]"), std::string::npos) << text;
  EXPECT_NE(text.find("iter_args(%"), std::string::npos) << text;
  EXPECT_NE(text.find(") : tile<64x64xf32, mma_acc> {"), std::string::npos) << text;
  EXPECT_NE(text.find(": tile<64x16xbf16, mma_a>"), std::string::npos) << text;
  EXPECT_NE(text.find(": tile<16x64xbf16, mma_b>"), std::string::npos) << text;
  EXPECT_NE(text.find("= dot %"), std::string::npos) << text;
  EXPECT_NE(text.find("in_bounds"), std::string::npos) << text;  // K = 50: the last step is zeroed past it
  EXPECT_NE(text.find("masked [0 < %"), std::string::npos) << text;  // the product's edge tiles, per batch
}

// The plan's first kernel as a Tile IR program that the verifier holds and whose text parses
// back to itself (nullopt where the kernel has none).
Program round_tripped(const Plan& plan) {
  Program p = build_program(plan.graph, plan.kernels.at(0));
  EXPECT_TRUE(program_problems(p).empty());
  const std::string text = print_program(p);
  EXPECT_EQ(print_program(parse_program(text)), text);
  return p;
}

// A matmul whose operands' rows are whole 16-byte chunks goes through shared memory: rings of
// stages filled by copy_async (stages − 1 ahead), a wait and a barrier per k step, fragments
// loaded from the ring; nothing in flight at the end.
TEST(TileIrBuild, StagedMatMulRunsThroughSharedRings) {
  using namespace dsl;
  Graph g("mm");
  Tensor a = input(g, "a", {2, 100, 72}, DType::BF16);
  Tensor w = input(g, "w", {72, 136}, DType::BF16);
  output("c", matmul(a, w));
  FusionOptions mma_sync;
  mma_sync.schedule.gemm_wgmma = 0;
  Plan plan = plan_fusion(g, mma_sync);
  ASSERT_EQ(plan.kernels.size(), 1u);
  ASSERT_GT(plan.kernels[0].schedule.stages, 1);
  const Program p = round_tripped(plan);
  const std::string text = print_program(p);
  ASSERT_EQ(p.shared.size(), 2u);
  EXPECT_EQ(p.shared_bytes(), plan.kernels[0].schedule.dynamic_shared_bytes());
  const std::string pending = fmt::format("wait_group {}", plan.kernels[0].schedule.stages - 2);
  for (const char* want : {"into @a_ring[", "into @b_ring[", "commit_group", "barrier", "= load @a_ring[",
                           "= load @b_ring[", "wait_group 0"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  EXPECT_NE(text.find(pending), std::string::npos) << text;
  // The copies of the steps ahead are in the loop, after its barrier.
  EXPECT_LT(text.find("barrier"), text.rfind("into @a_ring[")) << text;
  FusionOptions direct;
  direct.schedule.stages = 0;
  Plan q = plan_fusion(g, direct);
  EXPECT_TRUE(build_program(q.graph, q.kernels[0]).shared.empty());
}

// Claimed rows staged through shared memory: each tensor along the rows has a bulk ring
// of the schedule's stages and bytes; the stages are filled before a `while` whose condition
// waits for the next stage and reads the row it holds; its body reads the row from the stage
// before its first reduction, and refills the stage with the claimed row (and claims the next)
// after it, before any store; the last block zeroes the counters. The text round-trips. The
// verifier refuses a ticket where threads other than the first would read it.
TEST(TileIrBuild, ClaimedRowsLoopWhileTheirStagesHoldRows) {
  using namespace dsl;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g("claimed");
    Tensor x = input(g, "x", {300, 16384}, dt);
    Tensor r = input(g, "r", {300, 16384}, dt);
    Tensor z = x + r;
    output("y", z - mean(z, {1}, true));
    FusionOptions o;
    Plan plan = plan_fusion(g, o);
    ASSERT_EQ(plan.kernels.size(), 1u);
    const TileSchedule& s = plan.kernels[0].schedule;
    ASSERT_TRUE(s.claims_rows()) << s.describe();
    const Program p = round_tripped(plan);
    ASSERT_EQ(p.shared.size(), 2u);  // x's and r's rows
    for (const SharedRing& ring : p.shared) {
      EXPECT_TRUE(ring.bulk);
      EXPECT_EQ(ring.stages, s.stages);
    }
    EXPECT_EQ(p.shared_bytes(), s.dynamic_shared_bytes());
    const auto loop = std::find_if(p.body.body.begin(), p.body.body.end(),
                                   [](const Inst& i) { return i.opcode == Opcode::While; });
    ASSERT_NE(loop, p.body.body.end());
    // Before it: the first stages' fills and a claim; after it, the count of finished blocks.
    auto count = [](const std::vector<Inst>& body, Opcode o) {
      return std::count_if(body.begin(), body.end(), [&](const Inst& i) { return i.opcode == o; });
    };
    const std::vector<Inst> before(p.body.body.begin(), loop), after(loop + 1, p.body.body.end());
    EXPECT_EQ(count(before, Opcode::FillStage), 2 * s.stages);
    EXPECT_EQ(count(before, Opcode::Claim), 1);
    EXPECT_EQ(count(after, Opcode::LastArrival), 1);
    const std::vector<Inst>& head = loop->regions.at(0).body;
    EXPECT_EQ(count(head, Opcode::WaitFull), 1);
    EXPECT_EQ(count(head, Opcode::StageRow), 1);
    const std::vector<Inst>& body = loop->regions.at(1).body;
    auto first = [&](Opcode o) {
      return std::find_if(body.begin(), body.end(), [&](const Inst& i) { return i.opcode == o; }) - body.begin();
    };
    EXPECT_EQ(count(body, Opcode::WaitFull), 1);  // r's ring (x's waited for in the condition)
    EXPECT_EQ(count(body, Opcode::LoadShared), 2);
    EXPECT_EQ(count(body, Opcode::Load), 0);
    EXPECT_EQ(count(body, Opcode::FillStage), 2);
    EXPECT_EQ(count(body, Opcode::Claim), 1);
    EXPECT_LT(first(Opcode::LoadShared), first(Opcode::Reduce));
    EXPECT_LT(first(Opcode::Reduce), first(Opcode::FillStage));
    EXPECT_LT(first(Opcode::FillStage), first(Opcode::Claim));
    EXPECT_LT(first(Opcode::Claim), first(Opcode::Store));
    // In PTX: the rows by bulk copies completing on the stages' mbarriers, claimed by atomics.
    const std::string ptx = program_ptx(p);
    for (const char* want : {"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
                             "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "atom.global.add.u32"})
      EXPECT_NE(ptx.find(want), std::string::npos) << want;
    if (!find_ptxas().empty()) {
      EXPECT_TRUE(run_ptxas(ptx, p.name).has_value());
    }
  }
    // A tensor broadcast along some of the row dimensions has rows of its own to stage (GPU fuzz
  // seed 11197: its rows [17, 16384] were refused as not whole stages).
  {
    Graph g("claimed_broadcast");
    Tensor x = input(g, "x", {5, 17, 16384}, DType::F32);
    Tensor w = input(g, "w", {1, 17, 16384}, DType::F32);
    Tensor z = x * w;
    output("y", z - mean(z, {2}, true));
    FusionOptions o;
    Plan plan = plan_fusion(g, o);
    ASSERT_TRUE(plan.kernels.at(0).schedule.claims_rows());
    const Program p = round_tripped(plan);
    EXPECT_EQ(p.shared.size(), 2u);
  }
  // Rows a cluster's blocks stage are taken grid-stride: no counter; each block its part's ring,
  // each reduction exchanged over the cluster inside the loop.
  {
    Graph g("staged_cluster");
    output("y", softmax(input(g, "x", {64, 262144}, DType::F32), -1));
    FusionOptions o;
    o.schedule.split = 0;
    o.schedule.cluster_online = 0;  // an exchange per reduction (the default is one a pass)
    Plan plan = plan_fusion(g, o);
    const TileSchedule& s = plan.kernels.at(0).schedule;
    ASSERT_TRUE(s.stages > 0 && s.cluster_blocks > 1) << s.describe();
    const Program p = round_tripped(plan);
    EXPECT_EQ(p.cluster_blocks, s.cluster_blocks);
    EXPECT_EQ(p.shared.at(0).tile, (Shape{1, s.tile_cols()}));
    const std::string text = print_program(p);
    EXPECT_EQ(text.find("claim"), std::string::npos) << text;
    EXPECT_EQ(text.find("workspace"), std::string::npos) << text;
    const auto loop = std::find_if(p.body.body.begin(), p.body.body.end(),
                                   [](const Inst& i) { return i.opcode == Opcode::While; });
    ASSERT_NE(loop, p.body.body.end());
    const std::vector<Inst>& body = loop->regions.at(1).body;
    EXPECT_EQ(std::count_if(body.begin(), body.end(), [](const Inst& i) { return i.opcode == Opcode::ClusterValues; }),
              2);  // the max's and the sum's
    const std::string ptx = program_ptx(p);
    EXPECT_NE(ptx.find("barrier.cluster.wait"), std::string::npos);
    if (!find_ptxas().empty()) {
      EXPECT_TRUE(run_ptxas(ptx, p.name).has_value());
    }
  }
  // A ticket is the block's first thread's: not an index for the block's arithmetic.
  const std::string text =
      "tile.func @k(%arg0 \"x\": f32[64, 1024], %arg1 \"workspace\": f32[0, 0] workspace)\n"
      "    grid [8] threads 256 layout blocked<per_thread [1, 4], threads [1, 256], reps [1, 1]>\n"
      "    shared [@rows0: f32[1, 1, 1024] bulk] {\n"
      "  %0 = const 0 : index\n  %1 = const 64 : index\n"
      "  %2 = claim %arg1[%0] after %1 : ticket\n"
      "  fill_stage %arg0[%2, %0] into @rows0[%0] rows %1\n"
      "  %3 = addi %2, %1 : index\n}\n";
  const Program bad = parse_program(text);
  EXPECT_EQ(print_program(bad), text);
  const std::vector<std::string> problems = program_problems(bad);
  ASSERT_EQ(problems.size(), 2u);  // the addi's, not the fill_stage's
  EXPECT_NE(problems[0].find("only the block's first thread holds"), std::string::npos) << problems[0];
}

// Claimed rows staged on Tile IR v2 against float64 on the GPU: more rows than the grid's blocks
// (claimed from the counter; two launches, so the counters the last block zeroed are used
// again), tensors of 16-bit and f32 rows, one broadcast along some of the row dimensions.
// Rows one block holds over whole warps with --block-online 1: each pass over the row is one
// gather of the warps' values (a softmax's max and online sum together, a layernorm's two
// passes one each) and one block barrier in PTX; staged, the gather precedes the stage's refill.
// A row of one warp has nothing to gather: the hint leaves it alone.
TEST(TileIrBuild, BlockOnlineRowsGatherEachPassOnce) {
  using namespace dsl;
  auto count = [](const std::vector<Inst>& body, Opcode o) {
    return std::count_if(body.begin(), body.end(), [&](const Inst& i) { return i.opcode == o; });
  };
  FusionOptions o;
  o.schedule.block_online = 1;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g("online_rows");
    output("y", softmax(input(g, "x", {300, 4096}, dt), -1));
    Graph n("online_norm");
    Tensor z = input(n, "z", {300, 4096}, dt);
    output("y", layernorm(z, input(n, "w", {4096}, dt), input(n, "b", {4096}, dt)));
    for (auto [graph, passes] : {std::pair<const Graph*, int>{&g, 1}, {&n, 2}}) {
      Plan plan = plan_fusion(*graph, o);
      ASSERT_EQ(plan.kernels.size(), 1u);
      ASSERT_TRUE(plan.kernels[0].schedule.block_online) << plan.kernels[0].schedule.describe();
      const Program p = round_tripped(plan);
      EXPECT_EQ(count(p.body.body, Opcode::GatherWarps), passes);
      const std::string ptx = program_ptx(p);
      EXPECT_EQ(occurrences(ptx, "bar.sync"), static_cast<size_t>(passes));
      expect_assembled_unspilled(ptx, p.name);
    }
  }
  {
    Graph g("online_claimed");
    output("y", softmax(input(g, "x", {300, 32768}, DType::F32), -1));
    FusionOptions staged = o;
    Plan plan = plan_fusion(g, staged);
    ASSERT_TRUE(plan.kernels.at(0).schedule.claims_rows() && plan.kernels[0].schedule.block_online);
    const Program p = round_tripped(plan);
    const auto loop = std::find_if(p.body.body.begin(), p.body.body.end(),
                                   [](const Inst& i) { return i.opcode == Opcode::While; });
    ASSERT_NE(loop, p.body.body.end());
    const std::vector<Inst>& body = loop->regions.at(1).body;
    EXPECT_EQ(count(body, Opcode::GatherWarps), 1);
    auto first = [&](Opcode op) {
      return std::find_if(body.begin(), body.end(), [&](const Inst& i) { return i.opcode == op; }) - body.begin();
    };
    EXPECT_LT(first(Opcode::GatherWarps), first(Opcode::FillStage));
    if (!find_ptxas().empty()) {
      EXPECT_TRUE(run_ptxas(program_ptx(p), p.name).has_value());
    }
  }
  Graph one("one_warp_rows");
  output("y", softmax(input(one, "x", {300, 96}, DType::F32), -1));
  EXPECT_FALSE(plan_fusion(one, o).kernels.at(0).schedule.block_online);
}

// Two launches of the plan through one executable (the second on what the first left in the
// workspace), each on fresh seeded inputs, against the float64 reference.
void expect_two_launches_match(const Plan& plan) {
  Executable exe(plan);
  const uint64_t seed = testing::test_seed();
  for (uint64_t launch = 0; launch < 2; ++launch) {
    TensorMap inputs = random_inputs(plan.graph, seed + launch);
    CheckReport check = check_against_reference(plan, inputs, exe.run(inputs));
    EXPECT_TRUE(check.ok) << "launch " << launch << ", inputs seeded " << seed + launch << ":\n" << check.text();
  }
}

// Rows split into parts: each iteration of the task loop reduces its part and publishes it,
// then — pipelined — finishes the previous task's row and stores it, under a flag that a task is
// pending; the last task is finished after the loop. The previous row's words are fetched at the
// top of the iteration (their row made again from the task the loop carries) and gathered behind
// the warps' gather's barrier, before the stage's refill: one block barrier a task. The PTX
// stores and loads the stamped words whole at device scope and sleeps between tries; ptxas takes
// it unspilled. The verifier refuses what the words cannot hold.
TEST(TileIrBuild, SplitRowsPublishThenFinishThePreviousTask) {
  using namespace dsl;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g("split_rows");
    output("y", softmax(input(g, "x", {40, 131072}, dt), -1));
    FusionOptions o;
    EXPECT_EQ(plan_fusion(g, o).kernels.at(0).schedule.fetch_parts_early, dt != DType::F32) << "the default";
    o.schedule.fetch_parts_early = 1;
    Plan plan = plan_fusion(g, o);
    ASSERT_GT(plan.kernels.at(0).schedule.split_blocks, 1) << plan.kernels[0].schedule.describe();
    const Program p = round_tripped(plan);
    const std::vector<Inst>& top = p.body.body;
    const auto loop = std::find_if(top.begin(), top.end(), [](const Inst& i) { return i.opcode == Opcode::While; });
    ASSERT_NE(loop, top.end());
    auto first = [](const std::vector<Inst>& body, Opcode op) {
      return std::find_if(body.begin(), body.end(), [&](const Inst& i) { return i.opcode == op; });
    };
    const Region& head = loop->regions.at(0);
    const std::vector<Inst>& body = loop->regions.at(1).body;
    const auto publish = first(body, Opcode::Publish), pending = first(body, Opcode::If);
    const auto fetch = first(body, Opcode::FetchParts), gather = first(body, Opcode::GatherParts);
    ASSERT_NE(publish, body.end());
    ASSERT_NE(pending, body.end());
    ASSERT_NE(fetch, body.end());
    ASSERT_NE(gather, body.end());
    EXPECT_LT(fetch, first(body, Opcode::WaitFull)) << "the words are not fetched before the stage's wait";
    EXPECT_LT(gather, first(body, Opcode::FillStage));
    EXPECT_LT(publish, pending);
    EXPECT_EQ(first(body, Opcode::GatherWarps), body.end()) << "the warps are gathered behind a barrier of their own";
    const PartsGather parts = parts_gather(p, *gather);
    EXPECT_EQ(parts.from, fetch->results.at(0));
    EXPECT_EQ(parts.when, pending->args.at(0));
    EXPECT_FALSE(parts.warps.empty());
    // (Its row made again from the task the loop carries from the iteration before.)
    EXPECT_EQ(parts.row, fetch->args.at(0));
    const auto row = std::find_if(body.begin(), fetch, [&](const Inst& i) {
      return i.results == std::vector<int>{parts.row};
    });
    ASSERT_NE(row, fetch);
    EXPECT_EQ(row->opcode, Opcode::IndexDiv);
    EXPECT_NE(std::find(head.args.begin(), head.args.end(), row->args.at(0)), head.args.end());
    const std::vector<Inst>& finish = pending->regions.at(0).body;
    EXPECT_EQ(first(finish, Opcode::GatherParts), finish.end());
    EXPECT_NE(first(finish, Opcode::Store), finish.end());
    EXPECT_TRUE(std::any_of(loop + 1, top.end(), [&](const Inst& i) {
      return i.opcode == Opcode::If && first(i.regions.at(0).body, Opcode::GatherParts) != i.regions.at(0).body.end();
    })) << "the last task is not finished after the loop";
    const std::string ptx = program_ptx(p);
    EXPECT_GE(occurrences(ptx, "st.relaxed.gpu.global.b64"), 2u);  // (the max and the sum)
    EXPECT_GE(occurrences(ptx, "ld.relaxed.gpu.global.b64"), 2u);
    EXPECT_GE(occurrences(ptx, "nanosleep"), 1u);
    // (The stages' setup; in the loop the warps' and the parts' gather — their slots doubled by
    // the iteration's parity, so no barrier of their own after them; the last task's.)
    EXPECT_EQ(occurrences(ptx, "bar.sync"), 3u);
    expect_assembled_unspilled(ptx, p.name);
  }
  for (DType dt : {DType::F32, DType::BF16}) {  // (an RMSNorm's one sum of squares a part)
    SCOPED_TRACE(std::string("rmsnorm ") + dtype_name(dt));
    Graph g("split_norm");
    output("y", rmsnorm(input(g, "x", {40, 131072}, dt), input(g, "w", {131072}, dt)));
    FusionOptions o;
    Plan plan = plan_fusion(g, o);
    ASSERT_GT(plan.kernels.at(0).schedule.split_blocks, 1) << plan.kernels[0].schedule.describe();
    const Program p = round_tripped(plan);
    expect_assembled_unspilled(program_ptx(p), p.name);
  }
  const std::string header =
      "tile.func @k(%arg0 \"x\": f32[64, 4096], %arg1 \"y\": f32[64, 1] out, %arg2 \"workspace\": f32[0, 0] workspace)\n"
      "    grid [256] threads 256 layout blocked<per_thread [1, 4], threads [1, 256], reps [1, 1]> {\n"
      "  %0 = program_id 0 : index\n  %1 = const 4 : index\n  %2 = divui %0, %1 : index\n"
      "  %3 = const 1.5 : tile<1x1xf32>\n  %4 = const 1.5 : tile<1x1xbf16>\n";
  expect_each_refused(header, {
                                  "  publish %arg2[%0], %4\n",                                   // not f32
                                  "  publish %arg1[%0], %3\n",                                   // not the workspace
                                  "  publish %arg2[%0]\n",                                       // no values
                                  "  %5 = gather_parts %arg2[%2] parts 1 : tile<1x1xf32, warp_lanes>\n",    // one part
                                  "  %5 = gather_parts %arg2[%2] parts 40 : tile<1x40xf32, warp_lanes>\n",  // past a warp
                                  "  %5 = gather_parts %arg2[%2] parts 4 : tile<1x4xf32>\n",     // not warp_lanes
                                  "  publish %arg2[%0], %3, %3\n"
                                  "  %5 = gather_parts %arg2[%2] parts 4 : tile<1x4xf32, warp_lanes>\n",  // 2 values, 1
                                  "  %5 = fetch_parts %arg2[%0] parts 4 : words<4x1>\n"
                                  "  %6 = gather_parts %arg2[%2] parts 4 from %5 : tile<1x4xf32, warp_lanes>\n",  // row
                                  "  %5 = fetch_parts %arg2[%2] parts 4 : words<4x2>\n"
                                  "  %6 = gather_parts %arg2[%2] parts 4 from %5 : tile<1x4xf32, warp_lanes>\n",  // 2, 1
                                  "  %5 = fetch_parts %arg2[%2] parts 4 : words<8x1>\n",         // 8 parts' words
                                  "  %5 = gather_parts %arg2[%2] parts 4 warps %3 : tile<1x4xf32, warp_lanes>, "
                                  "tile<1x1xf32, warp_lanes>\n",                                   // not warps
                              });
  EXPECT_TRUE(program_problems(parse_program(header +
                                             "  publish %arg2[%0], %3\n"
                                             "  %5 = gather_parts %arg2[%2] parts 4 : tile<1x4xf32, warp_lanes>\n"
                                             "}\n"))
                  .empty());
  EXPECT_TRUE(program_problems(parse_program(header +
                                             "  %5 = fetch_parts %arg2[%2] parts 4 : words<4x1>\n"
                                             "  %6 = const 1 : bool\n"
                                             "  publish %arg2[%0], %3\n"
                                             "  %7 = gather_parts %arg2[%2] parts 4 from %5 if %6 : tile<1x4xf32, warp_lanes>\n"
                                             "}\n"))
                  .empty());
}

// Split rows on Tile IR v2 on the GPU: two launches through one executable (the second reads
// words stamped with the first launch's epoch until its own parts arrive), f32 and bf16, a
// softmax, a log_softmax and an RMSNorm of rows of several parts, more tasks than the grid has
// blocks.
TEST(GpuTileIr, SplitRowsMatchFloat64) {
  using namespace dsl;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g("split_rows");
    output("p", softmax(input(g, "x", {300, 131072}, dt), -1));
    output("l", log_softmax(input(g, "z", {70, 65536}, dt), -1));
    output("n", rmsnorm(input(g, "v", {50, 65536}, dt), input(g, "w", {65536}, dt)));
    // (Scaled rows: the max of u times 3; a negative scale's max of the products.)
    output("s", log_softmax(input(g, "u", {30, 65536}, dt) * 3.0, -1));
    output("t", softmax(-0.5 * input(g, "t0", {20, 65536}, dt), -1));
    FusionOptions o;
    Plan plan = plan_fusion(g, o);
    for (const Kernel& k : plan.kernels)
      EXPECT_GT(k.schedule.split_blocks, 1) << k.schedule.describe();
    if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
    expect_two_launches_match(plan);  // (the second reads the first launch's stamped words)
  }
}

TEST(GpuTileIr, ClaimedRowsMatchFloat64) {
  using namespace dsl;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g("claimed_rows");
    Tensor x = input(g, "x", {3, 101, 16384}, dt);
    Tensor w = input(g, "w", {1, 101, 16384}, dt);
    Tensor z = x * w;
    output("y", z - mean(z, {2}, true));
    output("s", softmax(x, -1));
    FusionOptions o;
    Plan plan = plan_fusion(g, o);
    int claimed = 0;
    for (const Kernel& k : plan.kernels) claimed += k.schedule.claims_rows();
    EXPECT_GE(claimed, 1);
    if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
    expect_two_launches_match(plan);  // (the second on the counters the first zeroed)
  }
}

// On wgmma the rings are 1024-byte aligned panels, each step fences the copies for the async
// proxy before its barrier, refills the stage two steps back (stages − 2 ahead), starts its
// dot_async and waits for all but it; the last is waited for after the loop. The text round-trips
// and the verifier holds it; the verifier refuses a dot_async on rings not laid out for wgmma.
TEST(TileIrBuild, WgmmaMatMulStartsOneStepAndWaitsForThePrevious) {
  using namespace dsl;
  Graph g("mm");
  output("c", matmul(input(g, "a", {2, 100, 72}, DType::BF16), input(g, "w", {72, 136}, DType::BF16)));
  FusionOptions on_wgmma;
  on_wgmma.schedule.gemm_wgmma = 1;  // k 72 takes mma.sync by default
  on_wgmma.schedule.gemm_tma = 0;    // every thread's cp.async
  Plan plan = plan_fusion(g, on_wgmma);
  ASSERT_EQ(plan.kernels.size(), 1u);
  const TileSchedule& s = plan.kernels[0].schedule;
  ASSERT_TRUE(s.wgmma);
  const Program p = round_tripped(plan);
  const std::string text = print_program(p);
  ASSERT_EQ(p.shared.size(), 2u);
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(p.ring_offset(r) % 1024, 0);
  EXPECT_EQ(p.shared_bytes(), s.dynamic_shared_bytes());
  for (const std::string& want : {fmt::format("wait_group {}", s.stages - 3), std::string("fence_async"),
                                 std::string("= dot_async @a_ring["), std::string("pending 1 :"),
                                 std::string("pending 0 :"), std::string("wgmma]")})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  EXPECT_LT(text.find("fence_async"), text.find("barrier"));
  EXPECT_LT(text.find("barrier"), text.find("dot_async"));
  Program bad = p;
  bad.shared[0].wgmma = false;
  EXPECT_FALSE(program_problems(bad).empty());
}

TEST(TileIrBuild, TmaMatMulIsAProducerAndConsumers) {
  using namespace dsl;
  Graph g("mm");
  output("c", matmul(input(g, "a", {2, 100, 200}, DType::BF16), input(g, "w", {200, 136}, DType::BF16)));
  Plan plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 1u);
  const TileSchedule& s = plan.kernels[0].schedule;
  ASSERT_TRUE(s.wgmma && s.tma) << s.describe();
  const Program p = round_tripped(plan);
  ASSERT_TRUE(p.specialized());
  EXPECT_EQ(p.launch_threads(), p.block_threads() + 128);
  const std::string text = print_program(p);
  // The producer waits for a stage to be emptied and fills it by TMA; the consumers wait for it
  // to be full, and release a stage only after waiting for the wgmma before theirs.
  const size_t producer = text.find("specialize producer {"), consumers = text.find("} consumers ");
  ASSERT_NE(producer, std::string::npos) << text;
  ASSERT_NE(consumers, std::string::npos) << text;
  for (const char* want : {"wait_empty @a_ring[", "tma_load %arg0[", "tma_load %arg1["}) {
    EXPECT_GT(text.find(want), producer) << want;
    EXPECT_LT(text.find(want), consumers) << want;
  }
  for (const char* want : {"wait_full @a_ring[", "wait_full @b_ring[", "release @a_ring[", "release @b_ring["})
    EXPECT_GT(text.find(want), consumers) << want;
  EXPECT_LT(text.find("pending 1 :"), text.find("release @a_ring["));
  EXPECT_EQ(text.find("copy_async"), std::string::npos);
  EXPECT_EQ(text.find("barrier\n"), std::string::npos);
  // The weight is shared by both batches: its tensor map has one.
  int operands = 0;
  for (const Param& prm : p.params) {
    if (prm.name == "a") {
      EXPECT_EQ(prm.tma_rows, 100);
    }
    if (prm.name == "w") {
      EXPECT_EQ(prm.tma_rows, 200);
    }
    if (prm.output) {
      EXPECT_EQ(prm.tma_rows, 100);  // stored by TMA, a batch's rows at a time
    }
    operands += prm.name == "a" || prm.name == "w";
  }
  EXPECT_EQ(operands, 2);
  auto named = [](const Program& bad, const std::string& what) {
    for (const std::string& problem : program_problems(bad))
      if (problem.find(what) != std::string::npos) return true;
    return false;
  };
  Program no_map = p;
  no_map.params[0].tma_rows = 0;
  EXPECT_TRUE(named(no_map, "no tensor map")) << fmt::format("{}", fmt::join(program_problems(no_map), "; "));
  Program no_roles = p;
  no_roles.producer_registers = 0;
  EXPECT_TRUE(named(no_roles, "sets no producer and consumer registers"));
  Program not_tma = p;
  not_tma.shared[1].tma = false;
  EXPECT_TRUE(named(not_tma, "is not a TMA ring"));
  // A TMA copy moved into the consumers' region.
  Program wrong_side = p;
  Inst& split = wrong_side.body.body.back();
  ASSERT_EQ(split.opcode, Opcode::Specialize);
  split.regions[1].body.insert(split.regions[1].body.begin(), Inst{});
  Inst& moved = split.regions[1].body.front();
  moved.opcode = Opcode::TmaLoad;
  moved.param = 0;
  moved.ring = 0;
  const int zero = wrong_side.add_value(Type::index());
  moved.args = {zero, zero, zero, zero};
  Inst constant;
  constant.opcode = Opcode::Const;
  constant.results = {zero};
  wrong_side.body.body.insert(wrong_side.body.body.begin(), constant);
  EXPECT_TRUE(named(wrong_side, "runs in the producer region only"))
      << fmt::format("{}", fmt::join(program_problems(wrong_side), "; "));
}

// A persistent grid: each block loops over its tiles, both sides counting their stages on
// from one tile to the next, and the consumers release the last step's stage too.
TEST(TileIrBuild, TmaMatMulLoopsOverTilesOnAPersistentGrid) {
  using namespace dsl;
  Graph g("mm");
  output("c", matmul(input(g, "a", {1024, 200}, DType::BF16), input(g, "w", {200, 1024}, DType::BF16)));
  FusionOptions o;
  o.profile.sm_count = 5;
  o.library_gemm = LibraryGemmUse::Never;
  Plan plan = plan_fusion(g, o);
  const TileSchedule& s = plan.kernels.at(0).schedule;
  ASSERT_TRUE(s.tma);
  EXPECT_EQ(s.tile_blocks, 5);
  EXPECT_GT(s.tiles(), 5);
  const Program p = round_tripped(plan);
  EXPECT_EQ(p.grid, std::vector<int64_t>{5});
  const std::string text = print_program(p);
  const size_t consumers = text.find("} consumers ");
  EXPECT_NE(text.find("step %", text.find("specialize producer")), std::string::npos) << text;
  EXPECT_LT(text.find("for %", text.find("specialize producer")), text.find("tma_load"));
  EXPECT_LT(text.find("for %", consumers), text.find("dot_async", consumers));
  // After the k loop: the last wgmma waited for, then its stage released.
  EXPECT_LT(text.rfind("pending 0 :"), text.rfind("release @b_ring["));
  o.schedule.gemm_persistent = 0;
  EXPECT_EQ(plan_fusion(g, o).kernels.at(0).schedule.tile_blocks, 0);
}

// Attention's ping-pong: the TMA block's two warpgroups take turns at each key step, each
// issuing its products in its turn (after its wait for the stage, before it waits for them);
// turns at steps are one group's, refused between consumer groups.
TEST(TileIrBuild, AttentionWarpgroupsTakeTurns) {
  using namespace dsl;
  for (int overlap : {0, 1}) {
    SCOPED_TRACE(overlap);
    Graph g("attn");
    const auto qkv = [&](const char* name) { return input(g, name, {2, 3, 200, 64}, DType::BF16); };
    output("o", attention(qkv("q"), qkv("k"), qkv("v"), 0.125, true));
    FusionOptions o;
    o.schedule.attention_tma = 1;
    o.schedule.attention_overlap = overlap;
    o.schedule.attention_pingpong = 1;
    const Plan plan = plan_fusion(g, o);
    ASSERT_TRUE(plan.kernels.at(0).schedule.warpgroup_turns) << plan.kernels.at(0).schedule.describe();
    const Program p = round_tripped(plan);
    EXPECT_EQ(p.block_threads(), 256);
    const std::string text = print_program(p);
    const size_t loop = text.find("wait_full", text.find("} consumers"));
    const size_t wait = text.find("await_turn step", loop), handoff = text.find("hand_off step", loop);
    ASSERT_NE(wait, std::string::npos) << text;
    ASSERT_NE(handoff, std::string::npos) << text;
    EXPECT_LT(wait, text.find("dot_async", loop));
    EXPECT_LT(text.find("dot_async", wait), handoff);
    EXPECT_LT(handoff, text.find("dot_wait", text.rfind("dot_async", handoff)));  // no wait before it
    EXPECT_NE(text.find(" of %", handoff), std::string::npos);
    Program two_groups = p;
    two_groups.consumer_groups = 2;
    bool named = false;
    for (const std::string& problem : program_problems(two_groups))
      named |= problem.find("turns at steps are between one consumer group's two warpgroups") != std::string::npos;
    EXPECT_TRUE(named);
  }
}

// Causal attention loops first over the key tiles wholly below its block's diagonal, whose
// scores skip the mask (no positions compared, no where on the score tile), then over the rest,
// masked; the same on TMA stages.
TEST(TileIrBuild, CausalTilesBelowTheDiagonalSkipTheMask) {
  using namespace dsl;
  for (int tma : {0, 1}) {
    SCOPED_TRACE(tma);
    Graph g("attn");
    const auto qkv = [&](const char* name) { return input(g, name, {2, 3, 256, 64}, DType::BF16); };
    output("o", attention(qkv("q"), qkv("k"), qkv("v"), 0.125, true));
    FusionOptions o;
    o.schedule.attention_tma = tma;
    const Program p = round_tripped(plan_fusion(g, o));
    const std::string text = print_program(p);
    const size_t first = text.find("= for ", text.find(tma ? "} consumers" : "= for ") - 1);
    const size_t second = text.find("= for ", first + 1);
    ASSERT_NE(second, std::string::npos) << text;
    const std::string below = text.substr(first, second - first), rest = text.substr(second);
    const auto masks_scores = [](const std::string& loop) {  // a where on a tile of 64 keys
      for (size_t at = loop.find("= where "); at != std::string::npos; at = loop.find("= where ", at + 1))
        if (loop.substr(at, loop.find('\n', at) - at).find("x64xf32") != std::string::npos) return true;
      return false;
    };
    EXPECT_EQ(below.find("iota"), std::string::npos) << below;
    EXPECT_FALSE(masks_scores(below)) << below;
    EXPECT_NE(rest.find("iota"), std::string::npos) << rest;
    EXPECT_TRUE(masks_scores(rest)) << rest;
  }
}

// Ping-pong: two consumer warpgroups on 64-row tiles of their own, each waiting for its turn
// before its k loop and handing the turn on before its epilogue.
TEST(TileIrBuild, TmaPingPongTakesTurns) {
  using namespace dsl;
  Graph g("mm");
  output("c", gelu(matmul(input(g, "a", {1024, 200}, DType::BF16), input(g, "w", {200, 1024}, DType::BF16))));
  FusionOptions o;
  o.profile.sm_count = 5;
  o.library_gemm = LibraryGemmUse::Never;
  o.schedule.gemm_pingpong = 1;
  Plan plan = plan_fusion(g, o);
  const TileSchedule& s = plan.kernels.at(0).schedule;
  ASSERT_EQ(s.consumer_groups, 2) << s.describe();
  EXPECT_EQ(s.block_m, 64);
  const Program p = round_tripped(plan);
  EXPECT_EQ(p.consumer_groups, 2);
  EXPECT_EQ(p.block_threads(), 128);
  EXPECT_EQ(p.launch_threads(), 384);
  EXPECT_EQ(p.consumer_registers, 240);
  const std::string text = print_program(p);
  const size_t wait = text.find("await_turn"), handoff = text.find("hand_off");
  ASSERT_NE(wait, std::string::npos) << text;
  ASSERT_NE(handoff, std::string::npos) << text;
  EXPECT_LT(wait, text.find("dot_async", text.find("} consumers")));
  EXPECT_LT(text.rfind("pending 0 :"), handoff);
  EXPECT_LT(handoff, text.find("gelu", handoff));  // the epilogue after the hand-off
  Program one_group = p;
  one_group.consumer_groups = 1;
  bool named = false;
  for (const std::string& problem : program_problems(one_group))
    named |= problem.find("needs two consumer groups") != std::string::npos;
  EXPECT_TRUE(named);
  // Not without a persistent grid, nor where a block would have tiles for one group only.
  o.schedule.gemm_persistent = 0;
  EXPECT_EQ(plan_fusion(g, o).kernels.at(0).schedule.consumer_groups, 1);
}

// Clusters of two on adjacent tile rows: B's copies multicast (each block a share of its
// panels), and each producer waits for its last stages to be emptied before it exits.
TEST(TileIrBuild, TmaClustersMulticastB) {
  using namespace dsl;
  Graph g("mm");
  // 5 tile rows of 128: the last cluster's second tile lies past M, all of it masked.
  output("c", matmul(input(g, "a", {600, 200}, DType::BF16), input(g, "w", {200, 1024}, DType::BF16)));
  FusionOptions o;
  o.profile.sm_count = 4;
  o.library_gemm = LibraryGemmUse::Never;
  o.schedule.gemm_cluster = 2;
  Plan plan = plan_fusion(g, o);
  const TileSchedule& s = plan.kernels.at(0).schedule;
  ASSERT_EQ(s.cluster_blocks, 2) << s.describe();
  const Program p = round_tripped(plan);
  EXPECT_EQ(p.cluster_blocks, 2);
  const std::string text = print_program(p);
  // B's copy is multicast, A's (each block its own rows) is not.
  int b_multicast = 0, a_multicast = 0;
  for (size_t at = text.find("tma_load"); at != std::string::npos; at = text.find("tma_load", at + 1)) {
    const std::string line = text.substr(at, text.find('\n', at) - at);
    const bool multicast = line.find(" multicast") != std::string::npos;
    (line.find("@b_ring") != std::string::npos ? b_multicast : a_multicast) += multicast;
  }
  EXPECT_EQ(b_multicast, 1) << text;
  EXPECT_EQ(a_multicast, 0) << text;
  const size_t consumers = text.find("} consumers ");
  // The producer's tail: waits for emptied stages after its loop over the tiles.
  EXPECT_GT(text.rfind("wait_empty", consumers), text.rfind("tma_load", consumers));
  // Stores past M: by TMA, whose tensor map ends at M; from the registers, masked.
  EXPECT_NE(text.find("tma_store"), std::string::npos) << text;
  o.schedule.gemm_tma_store = 0;
  const std::optional<Program> masked = round_tripped(plan_fusion(g, o));
  ASSERT_TRUE(masked.has_value());
  EXPECT_NE(print_program(*masked).find("masked [0 < %"), std::string::npos);
  o.schedule.gemm_tma_store = -1;
  // B stored along K (transposed) has one panel per stage: no multicast, no clusters.
  Graph t("mmt");
  output("c", matmul(input(t, "a", {600, 200}, DType::BF16), input(t, "w", {1024, 200}, DType::BF16),
                     {false, true, std::nullopt}));
  EXPECT_EQ(plan_fusion(t, o).kernels.at(0).schedule.cluster_blocks, 1);
  auto named = [](const Program& bad, const std::string& what) {
    for (const std::string& problem : program_problems(bad))
      if (problem.find(what) != std::string::npos) return true;
    return false;
  };
  Program unclustered = p;
  unclustered.cluster_blocks = 1;
  EXPECT_TRUE(named(unclustered, "multicast"));
  Program ping_pong = p;
  ping_pong.consumer_groups = 2;
  EXPECT_TRUE(named(ping_pong, "ping-pong consumer groups in clusters"));
}

// setmaxnreg moves registers within the block: the consumers' raised count must fit in what
// the block starts with (a 256-row tile's four consumer warpgroups at 120 each waited forever).
// The epilogue's TMA stores: an output of whole 16-byte rows is stored through staging slots
// (two 128-byte panels per consumer group, set aside from the stages' shared memory, within
// the block's), its consumers waiting for their stores once, last; an f32 output's panels are
// 32 columns; rows that are not whole 16 bytes, or --tma-store 0, store from the registers.
TEST(TileIrBuild, TmaMatMulStoresItsOutputsByTma) {
  using namespace dsl;
  struct Case {
    int64_t n;
    std::optional<DType> out;
    int tma_store;
    bool by_tma;
    const char* staging;
  };
  for (const Case& c : std::vector<Case>{{1024, std::nullopt, -1, true, "@c_staging: bf16[2, 128, 64] staging"},
                                         {1024, DType::F32, -1, true, "@c_staging: f32[2, 128, 32] staging"},
                                         {1020, std::nullopt, -1, false, ""},
                                         {1024, std::nullopt, 0, false, ""}}) {
    SCOPED_TRACE(fmt::format("n {} tma_store {}", c.n, c.tma_store));
    Graph g("mm");
    Tensor y = matmul(input(g, "a", {1024, 200}, DType::BF16), input(g, "w", {200, c.n}, DType::BF16),
                      {false, false, c.out});
    output("c", gelu(y + input(g, "bias", {c.n}, c.out.value_or(DType::BF16))));
    FusionOptions o;
    o.profile.sm_count = 5;
    o.library_gemm = LibraryGemmUse::Never;
    o.schedule.gemm_tma_store = c.tma_store;
    Plan plan = plan_fusion(g, o);
    const TileSchedule& s = plan.kernels.at(0).schedule;
    ASSERT_TRUE(s.tma);
    EXPECT_EQ(s.tma_store, c.by_tma);
    const Program p = round_tripped(plan);
    EXPECT_LE(p.shared_bytes(), 227 * 1024);
    const std::string text = print_program(p);
    const size_t consumers = text.find("} consumers ");
    EXPECT_EQ(text.find("tma_store") != std::string::npos, c.by_tma) << text;
    if (!c.by_tma) {
      EXPECT_NE(text.find("store %arg", consumers), std::string::npos) << text;
      continue;
    }
    EXPECT_NE(text.find(c.staging), std::string::npos) << text;
    EXPECT_NE(text.find("tma_rows 1024 out"), std::string::npos) << text;
    EXPECT_EQ(text.find("  store %arg", consumers), std::string::npos) << text;
    EXPECT_GT(text.find("wait_stores"), text.rfind("tma_store"));
    EXPECT_EQ(text.find("wait_stores"), text.rfind("wait_stores"));
    // A TMA store through an operand's ring, or of an input, is refused.
    Program wrong_ring = p;
    Program wrong_param = p;
    std::function<void(Region&, Program&, int, int)> retarget = [&](Region& r, Program& q, int ring, int param) {
      for (Inst& i : r.body) {
        if (i.opcode == Opcode::TmaStore) {
          if (ring >= 0) i.ring = ring;
          if (param >= 0) i.param = param;
        }
        for (Region& inner : i.regions) retarget(inner, q, ring, param);
      }
    };
    retarget(wrong_ring.body, wrong_ring, 0, -1);
    retarget(wrong_param.body, wrong_param, -1, 0);
    EXPECT_FALSE(program_problems(wrong_ring).empty());
    EXPECT_FALSE(program_problems(wrong_param).empty());
  }
  // Ping-pong: two slots for each group.
  Graph g("mm");
  Tensor y = matmul(input(g, "a", {1024, 200}, DType::BF16), input(g, "w", {200, 1024}, DType::BF16));
  output("c", y);
  FusionOptions o;
  o.profile.sm_count = 5;
  o.library_gemm = LibraryGemmUse::Never;
  o.schedule.gemm_pingpong = 1;
  const Program p = round_tripped(plan_fusion(g, o));
  EXPECT_NE(print_program(p).find("@c_staging: bf16[4, 64, 64] staging"), std::string::npos) << print_program(p);
  // Two outputs: both from the registers.
  output("d", gelu(y));
  o.schedule.gemm_pingpong = 0;
  const Plan two = plan_fusion(g, o);
  ASSERT_EQ(two.kernels.size(), 1u);
  EXPECT_FALSE(two.kernels[0].schedule.tma_store);
}

// A rolled epilogue (--rolled-epilogue 1; auto where the epilogue evaluates a transcendental
// function): the product staged for the TMA store, and the epilogue run once per chunk of a
// staged panel in the store's region — its GELU appears once in the program, not once per
// accumulator element — keeping its text through a round trip. An output whose dtype is not
// the product's stays unrolled (the staged chunk holds the output's dtype), and so does a
// chain without a transcendental function under auto.
TEST(TileIrBuild, TmaMatMulRollsItsEpilogueOverStagedChunks) {
  using namespace dsl;
  auto plan_of = [](std::optional<DType> product, bool gelu_it, int rolled) {
    Graph g("mm");
    Tensor y = matmul(input(g, "a", {300, 200}, DType::BF16), input(g, "w", {200, 1024}, DType::BF16),
                      {false, false, product});
    Tensor z = y + input(g, "bias", {1024}, product.value_or(DType::BF16));
    z = gelu_it ? gelu(z) : relu(z);
    output("c", cast(z + input(g, "res", {300, 1024}, product.value_or(DType::BF16)), DType::BF16));
    FusionOptions o;
    o.profile.sm_count = 5;
    o.library_gemm = LibraryGemmUse::Never;
    o.schedule.rolled_epilogue = rolled;
    return plan_fusion(g, o);
  };
  const Plan plan = plan_of(std::nullopt, true, 1);
  const TileSchedule& s = plan.kernels.at(0).schedule;
  ASSERT_TRUE(s.tma_store);
  EXPECT_TRUE(s.rolled_epilogue);
  EXPECT_NE(s.describe().find("in a loop over chunks of 32 rows"), std::string::npos) << s.describe();
  const Program p = round_tripped(plan);
  const std::string text = print_program(p);
  const size_t region = text.find(" epilogue(");
  ASSERT_NE(region, std::string::npos) << text;
  EXPECT_NE(text.find(": tile<32x64xbf16>", region), std::string::npos) << text;
  EXPECT_GT(text.find("gelu"), region) << text;
  EXPECT_EQ(text.find("gelu"), text.rfind("gelu")) << text;
  EXPECT_TRUE(plan_of(std::nullopt, true, -1).kernels.at(0).schedule.rolled_epilogue);
  EXPECT_FALSE(plan_of(std::nullopt, false, -1).kernels.at(0).schedule.rolled_epilogue);
  EXPECT_FALSE(plan_of(std::nullopt, true, 0).kernels.at(0).schedule.rolled_epilogue);
  EXPECT_FALSE(plan_of(DType::F32, true, 1).kernels.at(0).schedule.rolled_epilogue);
  // A staged chunk must be the layout's 16 bytes a thread.
  Program wrong = p;
  wrong.layout = {{1, 1}, {1, 256}, {1, 1}};
  bool named = false;
  for (const std::string& problem : program_problems(wrong))
    named |= problem.find("staged chunk") != std::string::npos;
  EXPECT_TRUE(named);
}

// A 16-bit product reaches its epilogue in f32: rounded only where it is stored too, or staged
// by a rolled epilogue.
TEST(TileIrBuild, MatMulEpilogueTakesTheProductUnrounded) {
  using namespace dsl;
  auto plan_of = [](bool product_out, int rolled) {
    Graph g("mm");
    Tensor y = matmul(input(g, "a", {300, 200}, DType::BF16), input(g, "w", {200, 1024}, DType::BF16));
    if (product_out) output("y", y);
    output("c", gelu(y + input(g, "bias", {1024}, DType::BF16)));
    FusionOptions o;
    o.profile.sm_count = 5;
    o.library_gemm = LibraryGemmUse::Never;
    o.schedule.rolled_epilogue = rolled;
    return plan_fusion(g, o);
  };
  auto casts = [](const Plan& plan) {
    const std::string text = print_program(round_tripped(plan));
    int n = 0;
    for (size_t at = text.find(" = cast "); at != std::string::npos; at = text.find(" = cast ", at + 1)) ++n;
    return n;
  };
  const Plan fused = plan_of(false, 0);
  ASSERT_EQ(fused.kernels.size(), 1u);
  EXPECT_FALSE(rounds_product(fused.graph, fused.kernels[0]));
  EXPECT_EQ(casts(fused), 0);
  const Plan stored = plan_of(true, 0);
  ASSERT_EQ(stored.kernels.size(), 1u);
  EXPECT_TRUE(rounds_product(stored.graph, stored.kernels[0]));
  EXPECT_GE(casts(stored), 1);
  const Plan rolled = plan_of(false, 1);
  ASSERT_TRUE(rolled.kernels.at(0).schedule.rolled_epilogue);
  EXPECT_TRUE(rounds_product(rolled.graph, rolled.kernels[0]));
}

TEST(TileIrBuild, TmaRegisterSplitFitsTheBlock) {
  using namespace dsl;
  Graph g("mm");
  output("c", matmul(input(g, "a", {512, 256}, DType::BF16), input(g, "b", {256, 512}, DType::BF16)));
  for (const auto& [m, n] : std::vector<std::pair<int, int>>{{64, 64}, {128, 256}, {256, 128}}) {
    SCOPED_TRACE(fmt::format("{}x{}", m, n));
    FusionOptions o;
    o.schedule.gemm_block_m = m;
    o.schedule.gemm_block_n = n;
    o.library_gemm = LibraryGemmUse::Never;
    const Program p = round_tripped(plan_fusion(g, o));
    ASSERT_TRUE(p.specialized());
    EXPECT_LE(p.producer_registers * 128 + p.consumer_registers * p.block_threads(),
              p.entry_registers() * p.launch_threads());
    EXPECT_GE(p.consumer_registers, 112);
    Program greedy = p;
    greedy.consumer_registers = 240;
    EXPECT_EQ(program_problems(greedy).empty(), m < 256);
  }
}

TEST(TileIr, VerifierChecksFragments) {
  const std::string head =
      "tile.func @k(%arg0 \"a\": bf16[64, 16], %arg1 \"b\": bf16[16, 64], %arg2 \"c\": f32[64, 64] out)\n"
      "    grid [1] threads 128 layout blocked<per_thread [1, 1], threads [1, 128], reps [1, 1]>";
  const std::string mma = " mma warps [2, 2] warp_tile [32, 32]";
  const std::string body =
      " {\n  %0 = const 0 : index\n"
      "  %1 = load %arg0[%0, %0] : tile<64x16xbf16, mma_a>\n"
      "  %2 = load %arg1[%0, %0] : tile<16x64xbf16, mma_b>\n"
      "  %3 = const 0 : tile<64x64xf32, mma_acc>\n"
      "  %4 = dot %1, %2, %3 : tile<64x64xf32, mma_acc>\n"
      "  store %arg2[%0, %0], %4 : tile<64x64xf32, mma_acc>\n}\n";
  EXPECT_TRUE(program_problems(parse_program(head + mma + body)).empty());
  auto named = [](const std::vector<std::string>& problems, const std::string& what) {
    for (const std::string& s : problems)
      if (s.find(what) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(named(program_problems(parse_program(head + body)), "without an mma arrangement"));
  std::string swapped = body;
  swapped.replace(swapped.find("dot %1, %2"), 10, "dot %2, %1");
  EXPECT_TRUE(named(program_problems(parse_program(head + mma + swapped)), "needs mma_a, mma_b and mma_acc"));
  std::string narrow = body;
  narrow.replace(narrow.find("tile<64x16xbf16, mma_a>"), 23, "tile<32x16xbf16, mma_a>");
  EXPECT_TRUE(named(program_problems(parse_program(head + mma + narrow)), "is not a mma_a tile of [64, 16]"));
}

// Applies `edit` to the instructions of `r` and of the regions inside, in order, until it
// returns true (it changed one); false where it never did.
bool edit_first(Region& r, const std::function<bool(Inst&)>& edit) {
  for (Inst& i : r.body) {
    if (edit(i)) return true;
    for (Region& inner : i.regions)
      if (edit_first(inner, edit)) return true;
  }
  return false;
}

// Attention's loop on wgmma: Q's fragments (d/16 of them) against the K stage and P's against
// the V stage, each product waited for; the text round-trips. The verifier refuses a product
// missing one of A's fragments, and one whose B ring is not laid out for wgmma.
TEST(TileIrBuild, AttentionOnWgmmaTakesAFromRegisters) {
  AttentionShape shape;
  shape.n_q = 100;
  shape.n_kv = 130;
  shape.d = 128;
  shape.wgmma = true;
  const Program p = attention_program(shape);
  EXPECT_TRUE(program_problems(p).empty());
  const std::string text = print_program(p);
  EXPECT_EQ(print_program(parse_program(text)), text);
  int products = 0;
  std::function<void(const Region&)> visit = [&](const Region& r) {
    for (const Inst& i : r.body) {
      if (i.opcode == Opcode::DotAsync) {
        ++products;
        EXPECT_LT(i.ring, 0);  // A in registers
        const int64_t k = p.shared.at(static_cast<size_t>(i.ring_b)).tile[0];
        EXPECT_EQ(static_cast<int64_t>(i.args.size() - 2) * 16, k);
      }
      for (const Region& inner : i.regions) visit(inner);
    }
  };
  visit(p.body);
  EXPECT_EQ(products, 2 * 2);  // S = Q·Kᵀ and O += P·V per key step, in the whole tiles' loop and the last's
  EXPECT_EQ(text.find("= dot %"), std::string::npos) << "no mma.sync dot left";
  // The online softmax's exponentials (α and P, in each loop) flush subnormal terms; only an f32
  // exp2 may.
  size_t flushed = 0;
  for (size_t at = text.find(" ftz :"); at != std::string::npos; at = text.find(" ftz :", at + 1)) ++flushed;
  EXPECT_EQ(flushed, 2u * 2u) << text;
  Program flushed_exp = p;
  ASSERT_TRUE(edit_first(flushed_exp.body, [](Inst& i) {
    if (!i.flush_subnormal) return false;
    i.op = Op::Exp;  // an f32 exp flushing its subnormals
    return true;
  }));
  EXPECT_FALSE(program_problems(flushed_exp).empty());
  Program short_a = p;
  ASSERT_TRUE(edit_first(short_a.body, [](Inst& i) {
    if (i.opcode != Opcode::DotAsync) return false;
    i.args.pop_back();  // one A fragment short
    return true;
  }));
  EXPECT_FALSE(program_problems(short_a).empty());
  Program plain_ring = p;
  plain_ring.shared[0].wgmma = false;
  EXPECT_FALSE(program_problems(plain_ring).empty());
}

// The overlapped TMA loop: O rescaled by the carried α under S's product (after S is started,
// before P·V is), K's stage released once S is waited for; where asked, P·V's wait is pinned
// below the softmax — printed, parsed, and emitted after a CTA fence that ptxas does not move
// it across.
TEST(TileIrBuild, OverlappedAttentionPinsPVsWaitBelowTheSoftmax) {
  for (bool pin : {false, true}) {
    SCOPED_TRACE(pin);
    AttentionShape shape;
    shape.batch_heads = 2;
    shape.n_q = 256;
    shape.n_kv = 512;
    shape.d = 128;
    shape.block_m = 128;
    shape.block_n = 128;
    shape.wgmma = shape.tma = shape.overlap = true;
    shape.pin_pv_wait = pin;
    const Program p = attention_program(shape);
    EXPECT_TRUE(program_problems(p).empty());
    const std::string text = print_program(p);
    EXPECT_EQ(print_program(parse_program(text)), text);
    const size_t step = text.find("dot_async @q_tile", text.find("} consumers"));
    ASSERT_NE(step, std::string::npos) << text;
    const size_t rescale = text.find(" = mul ", step), pv = text.find("dot_async", step + 1);
    EXPECT_LT(rescale, pv);  // O·α between S's start and P·V's
    const size_t s_wait = text.find("pending 1", pv), k_release = text.find("release @k_ring", s_wait);
    EXPECT_LT(k_release, text.find("exp2", s_wait));  // K's stage back before the softmax
    const size_t pv_wait = text.find("pending 0", s_wait);
    EXPECT_LT(text.find("exp2", s_wait), pv_wait);
    EXPECT_EQ(text.compare(pv_wait, 16, "pending 0 pinned") == 0, pin) << text.substr(pv_wait, 40);
    const std::string ptx = program_ptx(p, codegen_options_for("sm_90a"));
    const size_t wait = ptx.find("wgmma.wait_group.sync.aligned 0;", ptx.find("ex2.approx.ftz"));
    ASSERT_NE(wait, std::string::npos);
    EXPECT_EQ(ptx.rfind("fence.acq_rel.cta;", wait) != std::string::npos, pin);
  }
}

// Sums and maxima of rows spread over a block's threads: `threads` lanes a row (whole warps, one
// warp, or part of one), the columns past 1000 masked to the op's identity before each reduce
// (`where`) or by the reduce's mask (`mask_operand`).
std::string row_reduction_text(int row_threads, int rows_per_block, int rows, bool mask_operand = false) {
  const int block = row_threads * rows_per_block, per_thread = 4;
  const int reps = (1000 + per_thread * row_threads - 1) / (per_thread * row_threads), width = per_thread * row_threads * reps;
  return fmt::format(
      "tile.func @row_reduction(%arg0 \"x\": f32[{rows}, 1000], %arg1 \"s\": f32[{rows}, 1] out, "
      "%arg2 \"m\": f32[{rows}, 1] out)\n"
      "    grid [{grid}] threads {block} layout blocked<per_thread [1, {pt}], threads [{rb}, {rt}], reps [1, {reps}]> {{\n"
      "  %0 = program_id 0 : index\n"
      "  %1 = const {rb} : index\n"
      "  %2 = muli %0, %1 : index\n"
      "  %3 = const 0 : index\n"
      "  %4 = load %arg0[%2, %3] masked [1] : tile<{rb}x{w}xf32>\n"
      "  %5 = const 1000 : index\n"
      "  %6 = in_bounds %3, %5 axis 1 : tile<1x{w}xbool>\n"
      "{reductions}"
      "  store %arg1[%2, %3], %9 : tile<{rb}x1xf32>\n"
      "  store %arg2[%2, %3], %12 : tile<{rb}x1xf32>\n"
      "}}\n",
      fmt::arg("reductions", fmt::format(mask_operand ? "  %9 = reduce_sum %4 axis 1 where %6 : tile<{rb}x1xf32>\n"
                                                      "  %12 = reduce_max %4 axis 1 where %6 : tile<{rb}x1xf32>\n"
                                                    : "  %7 = const 0 : f32\n"
                                                      "  %8 = where %6, %4, %7 : tile<{rb}x{w}xf32>\n"
                                                      "  %9 = reduce_sum %8 axis 1 : tile<{rb}x1xf32>\n"
                                                      "  %10 = const -inf : f32\n"
                                                      "  %11 = where %6, %4, %10 : tile<{rb}x{w}xf32>\n"
                                                      "  %12 = reduce_max %11 axis 1 : tile<{rb}x1xf32>\n",
                                         fmt::arg("rb", rows_per_block), fmt::arg("w", width))),
      fmt::arg("rows", rows), fmt::arg("grid", rows / rows_per_block), fmt::arg("block", block),
      fmt::arg("pt", per_thread), fmt::arg("rb", rows_per_block), fmt::arg("rt", row_threads), fmt::arg("reps", reps),
      fmt::arg("w", width));
}

// A row reduction over the threads that share the row: a butterfly over the row's lanes, and for
// rows of several warps their values through shared memory after one block barrier.
TEST(TileIr, RowReductionsAcrossThreads) {
  struct Case {
    int row_threads, rows_per_block, shuffles_per_reduction;
    bool barrier;
  };
  for (const Case& c : std::vector<Case>{{128, 2, 5, true}, {32, 4, 5, false}, {8, 16, 3, false}})
    for (bool mask_operand : {false, true}) {
      SCOPED_TRACE(fmt::format("{} threads a row, mask operand {}", c.row_threads, mask_operand));
      const Program p = parse_program(row_reduction_text(c.row_threads, c.rows_per_block, 96, mask_operand));
      EXPECT_TRUE(program_problems(p).empty());
      EXPECT_EQ(print_program(parse_program(print_program(p))), print_program(p));
      const std::string ptx = program_ptx(p);
      EXPECT_EQ(occurrences(ptx, "shfl.sync.bfly"), 2u * c.shuffles_per_reduction);  // two reductions, one row a thread
      EXPECT_EQ(ptx.find("bar.sync") != std::string::npos, c.barrier) << ptx;
      if (!find_ptxas().empty()) {
        EXPECT_TRUE(run_ptxas(ptx, p.name).has_value());
      }
    }
  // Neither a power of two up to a warp nor whole warps: refused, not wrong.
  const Program odd = parse_program(row_reduction_text(12, 8, 96));
  EXPECT_TRUE(program_problems(odd).empty());
  EXPECT_THROW(program_ptx(odd), CodegenError);
}

// Runs program `p` over input `x`, its two outputs one value per row (`rows` each, poisoned with
// NaN so that a row left unwritten shows): the two outputs as read back.
std::pair<std::vector<float>, std::vector<float>> run_row_program(const Program& p, const std::vector<float>& x,
                                                                  int rows) {
  cuda::Module module = cuda::Module::load_ptx(program_ptx(p), p.name);
  CUfunction f = module.function(p.name);
  cuda::DeviceBuffer dx(x.size() * 4), d1(static_cast<size_t>(rows) * 4), d2(static_cast<size_t>(rows) * 4);
  dx.upload(x.data(), x.size() * 4);
  d1.fill_u32(0x7fc00001u);
  d2.fill_u32(0x7fc00001u);
  CUdeviceptr args[] = {dx.ptr(), d1.ptr(), d2.ptr()};
  void* params[] = {&args[0], &args[1], &args[2]};
  cuda::Stream stream;
  cuda::launch(f, {static_cast<unsigned>(p.grid[0])}, {static_cast<unsigned>(p.block_threads())}, 0, stream.get(),
               params, p.name);
  stream.synchronize();
  std::vector<float> a(static_cast<size_t>(rows)), b(static_cast<size_t>(rows));
  d1.download(a.data(), a.size() * 4);
  d2.download(b.data(), b.size() * 4);
  return {a, b};
}

TEST(GpuTileIr, RowReductionsAcrossThreadsMatchTheRows) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const int rows = 96;
  std::mt19937_64 rng(testing::test_seed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * 1000);
  for (float& v : x) v = normal(rng);
  for (auto [row_threads, rows_per_block] : std::vector<std::pair<int, int>>{{128, 2}, {256, 1}, {32, 4}, {8, 16}})
    for (bool mask_operand : {false, true}) {
      SCOPED_TRACE(fmt::format("{} threads a row, mask operand {}", row_threads, mask_operand));
      const auto [s, m] =
          run_row_program(parse_program(row_reduction_text(row_threads, rows_per_block, rows, mask_operand)), x, rows);
      for (int r = 0; r < rows; ++r) {
        double sum = 0;
        float most = -INFINITY;
        for (int c = 0; c < 1000; ++c) {
          sum += x[static_cast<size_t>(r * 1000 + c)];
          most = std::max(most, x[static_cast<size_t>(r * 1000 + c)]);
        }
        EXPECT_NEAR(s[static_cast<size_t>(r)], sum, 1e-4 * 1000) << "row " << r;
        EXPECT_EQ(m[static_cast<size_t>(r)], most) << "row " << r;
      }
    }
}

// A row's online max and sum of exp(x − max) carried through a loop over column tiles one pair
// per thread (lanes tiles): each step reduces the thread's own elements (no shuffles), spreads
// the thread's running max over them, and rescales the thread's sum; after the loop the lanes'
// pairs meet over the row's threads.
std::string online_lanes_text(int rows) {
  return fmt::format(
      "tile.func @online_lanes(%arg0 \"x\": f32[{rows}, 4000], %arg1 \"m\": f32[{rows}, 1] out, "
      "%arg2 \"s\": f32[{rows}, 1] out)\n"
      "    grid [{rows}] threads 128 layout blocked<per_thread [1, 4], threads [1, 128], reps [1, 2]> {{\n"
      "  %0 = program_id 0 : index\n"
      "  %1 = const 0 : index\n"
      "  %2 = const 4000 : index\n"
      "  %3 = const 1024 : index\n"
      "  %4 = const -inf : tile<1x128xf32, lanes>\n"
      "  %5 = const 0 : tile<1x128xf32, lanes>\n"
      "  %6, %7 = for %8 = %1 to %2 step %3 iter_args(%9 = %4, %10 = %5) : tile<1x128xf32, lanes>, "
      "tile<1x128xf32, lanes> {{\n"
      "    %11 = load %arg0[%0, %8] masked [1] : tile<1x1024xf32>\n"
      "    %12 = in_bounds %8, %2 axis 1 : tile<1x1024xbool>\n"
      "    %13 = const -inf : f32\n"
      "    %14 = where %12, %11, %13 : tile<1x1024xf32>\n"
      "    %15 = reduce_max %14 axis 1 : tile<1x128xf32, lanes>\n"
      "    %16 = max %9, %15 : tile<1x128xf32, lanes>\n"
      "    %17 = spread %16 : tile<1x1024xf32>\n"
      "    %18 = sub %14, %17 : tile<1x1024xf32>\n"
      "    %19 = exp %18 : tile<1x1024xf32>\n"
      "    %20 = reduce_sum %19 axis 1 : tile<1x128xf32, lanes>\n"
      "    %21 = sub %9, %16 : tile<1x128xf32, lanes>\n"
      "    %22 = exp %21 : tile<1x128xf32, lanes>\n"
      "    %23 = mul %10, %22 : tile<1x128xf32, lanes>\n"
      "    %24 = add %23, %20 : tile<1x128xf32, lanes>\n"
      "    yield %16, %24\n"
      "  }}\n"
      "  %25 = reduce_max %6 axis 1 : tile<1x1xf32>\n"
      "  %26 = sub %6, %25 : tile<1x128xf32, lanes>\n"
      "  %27 = exp %26 : tile<1x128xf32, lanes>\n"
      "  %28 = mul %7, %27 : tile<1x128xf32, lanes>\n"
      "  %29 = reduce_sum %28 axis 1 : tile<1x1xf32>\n"
      "  store %arg1[%0, %1], %25 : tile<1x1xf32>\n"
      "  store %arg2[%0, %1], %29 : tile<1x1xf32>\n"
      "}}\n",
      fmt::arg("rows", rows));
}

TEST(TileIr, LanesTilesCarryAPartialPerThread) {
  const Program p = parse_program(online_lanes_text(64));
  EXPECT_TRUE(program_problems(p).empty());
  const std::string text = print_program(p);
  EXPECT_EQ(print_program(parse_program(text)), text);
  EXPECT_NE(text.find("tile<1x128xf32, lanes>"), std::string::npos);
  // The loop's reductions stay within each thread: the only shuffles are the two reductions of
  // the lanes after it (a butterfly over a warp each), the only barriers theirs.
  const std::string ptx = program_ptx(p);
  EXPECT_EQ(occurrences(ptx, "shfl.sync.bfly"), 10u) << ptx;
  EXPECT_EQ(occurrences(ptx, "bar.sync"), 2u);
  expect_assembled_unspilled(ptx, p.name);
  // A lanes tile is not loaded or stored, spreads only over its rows' blocked tile, and meets
  // blocked tiles only of one column.
  const std::string header =
      "tile.func @bad(%arg0 \"x\": f32[4, 1024], %arg1 \"y\": f32[4, 1024] out)\n"
      "    grid [4] threads 128 layout blocked<per_thread [1, 4], threads [1, 128], reps [1, 2]> {\n"
      "  %0 = const 0 : index\n"
      "  %1 = load %arg0[%0, %0] : tile<1x1024xf32>\n"
      "  %2 = reduce_sum %1 axis 1 : tile<1x128xf32, lanes>\n";
  expect_each_refused(header, {"  store %arg1[%0, %0], %2 : tile<1x128xf32, lanes>\n",
                               "  %3 = spread %2 : tile<1x512xf32>\n",
                               "  %3 = add %2, %1 : tile<1x128xf32, lanes>\n",
                               "  %3 = reduce_sum %2 axis 0 : tile<1x128xf32>\n"});
}

// Program `p` (outputs: each row's max m and sum of exp(x − m)) run on seeded normal rows of
// `cols`: the max exact, the sum within 1e-5 of the float64 one.
void expect_online_softmax_rows(const Program& p, int rows, int cols) {
  std::mt19937_64 rng(testing::test_seed());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = normal(rng);
  const auto [m, s] = run_row_program(p, x, rows);
  for (int r = 0; r < rows; ++r) {
    float most = -INFINITY;
    for (int c = 0; c < cols; ++c) most = std::max(most, x[static_cast<size_t>(r * cols + c)]);
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += std::exp(static_cast<double>(x[static_cast<size_t>(r * cols + c)]) - most);
    EXPECT_EQ(m[static_cast<size_t>(r)], most) << "row " << r;
    EXPECT_NEAR(s[static_cast<size_t>(r)], sum, 1e-5 * sum) << "row " << r;
  }
}

TEST(GpuTileIr, LanesTilesCarryAnOnlineSoftmaxRow) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  expect_online_softmax_rows(parse_program(online_lanes_text(64)), 64, 4000);
}


// Each row of 1000 (two rows a block of 2 × `row_threads` threads: 4 or 3 warps a row) reduced to
// its max m and its sum of exp(x − m) behind one block barrier: each warp's max and its sum of
// exp(x − m_w) (warps tiles), both gathered into every warp at once, the row's max over the
// warps' maxes and each warp's sum brought to it by exp(m_w − m) before they are added.
std::string warps_online_text(int rows, int row_threads = 128) {
  const int reps = (1000 + 4 * row_threads - 1) / (4 * row_threads);
  return fmt::format(
      "tile.func @warps_online(%arg0 \"x\": f32[{rows}, 1000], %arg1 \"m\": f32[{rows}, 1] out, "
      "%arg2 \"s\": f32[{rows}, 1] out)\n"
      "    grid [{grid}] threads {block} layout blocked<per_thread [1, 4], threads [2, {t}], reps [1, {reps}]> {{\n"
      "  %0 = program_id 0 : index\n"
      "  %1 = const 2 : index\n"
      "  %2 = muli %0, %1 : index\n"
      "  %3 = const 0 : index\n"
      "  %4 = load %arg0[%2, %3] masked [1] : tile<2x{w}xf32>\n"
      "  %5 = const 1000 : index\n"
      "  %6 = in_bounds %3, %5 axis 1 : tile<1x{w}xbool>\n"
      "  %7 = reduce_max %4 axis 1 where %6 : tile<2x{n}xf32, warps>\n"
      "  %8 = spread %7 : tile<2x{w}xf32>\n"
      "  %9 = sub %4, %8 : tile<2x{w}xf32>\n"
      "  %10 = exp %9 : tile<2x{w}xf32>\n"
      "  %11 = reduce_sum %10 axis 1 where %6 : tile<2x{n}xf32, warps>\n"
      "  %12, %13 = gather_warps %7, %11 : tile<2x{n}xf32, warps>, tile<2x{n}xf32, warps>\n"
      "  %14 = reduce_max %12 axis 1 : tile<2x1xf32>\n"
      "  %15 = sub %12, %14 : tile<2x{n}xf32, warp_lanes>\n"
      "  %16 = exp %15 : tile<2x{n}xf32, warp_lanes>\n"
      "  %17 = mul %13, %16 : tile<2x{n}xf32, warp_lanes>\n"
      "  %18 = reduce_sum %17 axis 1 : tile<2x1xf32>\n"
      "  store %arg1[%2, %3], %14 : tile<2x1xf32>\n"
      "  store %arg2[%2, %3], %18 : tile<2x1xf32>\n"
      "}}\n",
      fmt::arg("rows", rows), fmt::arg("grid", rows / 2), fmt::arg("block", 2 * row_threads), fmt::arg("t", row_threads),
      fmt::arg("reps", reps), fmt::arg("w", 4 * row_threads * reps), fmt::arg("n", row_threads / 32));
}

TEST(TileIr, WarpsTilesGatherInOneBarrier) {
  {  // 3 warps a row: each aligned group of 4 lanes holds the 3 columns, its fourth lane not counted
    const Program three = parse_program(warps_online_text(64, 96));
    EXPECT_TRUE(program_problems(three).empty()) << fmt::format("{}", fmt::join(program_problems(three), "\n"));
    const std::string ptx = program_ptx(three);
    EXPECT_EQ(occurrences(ptx, "shfl.sync.bfly"), 5u + 5u + 2u + 2u);
    EXPECT_EQ(occurrences(ptx, "bar.sync"), 1u);
    expect_assembled_unspilled(ptx, three.name);
  }
  const Program p = parse_program(warps_online_text(64));
  EXPECT_TRUE(program_problems(p).empty()) << fmt::format("{}", fmt::join(program_problems(p), "\n"));
  const std::string text = print_program(p);
  EXPECT_EQ(print_program(parse_program(text)), text);
  EXPECT_NE(text.find("gather_warps %7, %11 : tile<2x4xf32, warps>, tile<2x4xf32, warps>"), std::string::npos) << text;
  // The two reductions within each warp (a butterfly over 32 lanes each) and the two over the
  // gathered warps' columns (over 4 lanes each); one barrier, the gather's.
  const std::string ptx = program_ptx(p);
  EXPECT_EQ(occurrences(ptx, "shfl.sync.bfly"), 5u + 5u + 2u + 2u) << ptx;
  EXPECT_EQ(occurrences(ptx, "bar.sync"), 1u);
  expect_assembled_unspilled(ptx, p.name);
  // A warps tile is gathered before it is reduced over the row, is not loaded or stored, meets
  // blocked tiles only of one column, holds no positions; a tile of one column (every thread's
  // the same) does not reduce into one; only warps tiles are gathered, and only a warps tile
  // spreads; rows of one warp have no warps tiles.
  const std::string header =
      "tile.func @bad(%arg0 \"x\": f32[4, 1024], %arg1 \"y\": f32[4, 1024] out)\n"
      "    grid [4] threads 128 layout blocked<per_thread [1, 4], threads [1, 128], reps [1, 2]> {\n"
      "  %0 = const 0 : index\n"
      "  %1 = load %arg0[%0, %0] : tile<1x1024xf32>\n"
      "  %2 = reduce_sum %1 axis 1 : tile<1x4xf32, warps>\n"
      "  %3 = reduce_sum %1 axis 1 : tile<1x128xf32, lanes>\n"
      "  %4 = reduce_sum %1 axis 1 : tile<1x1xf32>\n";
  // Args of the tile's rows and of one row meet in one gather (a thread holding two rows).
  const Program mixed = parse_program(
      "tile.func @mixed(%arg0 \"x\": f32[8, 1024], %arg1 \"w\": f32[1, 1024], %arg2 \"y\": f32[8, 1] out)\n"
      "    grid [4] threads 128 layout blocked<per_thread [1, 4], threads [1, 128], reps [2, 2]> {\n"
      "  %0 = program_id 0 : index\n  %1 = const 2 : index\n  %2 = muli %0, %1 : index\n  %3 = const 0 : index\n"
      "  %4 = load %arg0[%2, %3] : tile<2x1024xf32>\n"
      "  %5 = load %arg1[%3, %3] : tile<1x1024xf32>\n"
      "  %6 = reduce_sum %5 axis 1 : tile<1x4xf32, warps>\n"
      "  %7 = reduce_sum %4 axis 1 : tile<2x4xf32, warps>\n"
      "  %8, %9 = gather_warps %6, %7 : tile<1x4xf32, warps>, tile<2x4xf32, warps>\n"
      "  %10 = reduce_sum %8 axis 1 : tile<1x1xf32>\n"
      "  %11 = reduce_sum %9 axis 1 : tile<2x1xf32>\n"
      "  %12 = add %10, %11 : tile<2x1xf32>\n"
      "  store %arg2[%2, %3], %12 : tile<2x1xf32>\n"
      "}\n");
  EXPECT_TRUE(program_problems(mixed).empty()) << fmt::format("{}", fmt::join(program_problems(mixed), "\n"));
  expect_assembled_unspilled(program_ptx(mixed), mixed.name);
  expect_each_refused(header, {"  %5 = reduce_sum %2 axis 1 : tile<1x1xf32>\n",
                               "  %5 = reduce_sum %4 axis 1 : tile<1x4xf32, warps>\n",
                               "  %5 = iota %0 axis 1 : tile<1x4xf32, warps>\n",
                               "  store %arg1[%0, %0], %2 : tile<1x4xf32, warps>\n",
                               "  %5 = add %2, %1 : tile<1x4xf32, warps>\n",
                               "  %5 = gather_warps %3 : tile<1x128xf32, lanes>\n",
                               "  %5 = gather_warps %2 : tile<1x4xf32, warps>\n  %6 = spread %5 : tile<1x1024xf32>\n",
                               "  %5 = reduce_sum %1 axis 1 : tile<1x8xf32, warps>\n"});
  const std::string one_warp =
      "tile.func @bad(%arg0 \"x\": f32[4, 256], %arg1 \"y\": f32[4, 1] out)\n"
      "    grid [4] threads 32 layout blocked<per_thread [1, 4], threads [1, 32], reps [1, 2]> {\n"
      "  %0 = const 0 : index\n"
      "  %1 = load %arg0[%0, %0] : tile<1x256xf32>\n"
      "  %2 = reduce_sum %1 axis 1 : tile<1x1xf32, warps>\n"
      "}\n";
  EXPECT_FALSE(program_problems(parse_program(one_warp)).empty());
}

// fold_row_factors: (t · spread(f)) / s, the product used by the quotient alone, becomes
// t · spread(f · (1/s)) — one multiply an element, not two; a product used elsewhere too stays.
TEST(TileIr, RowFactorsFoldIntoOneMultiplyAnElement) {
  // Each element times its row's max, divided by the row's sum: the quotient stored as `out`
  // (a bf16 one over the sum rounded to bf16, as a bf16 softmax's), the product too where asked.
  auto program = [](const std::string& out, bool product_stored) {
    const bool f32 = out == "f32";
    std::string text = fmt::format(
        "tile.func @fold(%arg0 \"x\": f32[4, 1024], %arg1 \"y\": {}[4, 1024] out{})\n"
        "    grid [4] threads 128 layout blocked<per_thread [1, 4], threads [1, 128], reps [1, 2]> {{\n"
        "  %0 = program_id 0 : index\n"
        "  %1 = const 0 : index\n"
        "  %2 = load %arg0[%0, %1] : tile<1x1024xf32>\n"
        "  %3 = reduce_max %2 axis 1 : tile<1x4xf32, warps>\n"
        "  %4 = spread %3 : tile<1x1024xf32>\n"
        "  %5 = mul %2, %4 : tile<1x1024xf32>\n"
        "  %6 = reduce_sum %2 axis 1 : tile<1x1xf32>\n",
        out, product_stored ? ", %arg2 \"z\": f32[4, 1024] out" : "");
    text += f32 ? "  %7 = div %5, %6 : tile<1x1024xf32>\n"
                : "  %7 = cast %6 : tile<1x1xbf16>\n  %8 = div %5, %7 : tile<1x1024xbf16>\n";
    text += fmt::format("  store %arg1[%0, %1], %{} : tile<1x1024x{}>\n", f32 ? 7 : 8, out);
    if (product_stored) text += "  store %arg2[%0, %1], %5 : tile<1x1024xf32>\n";
    return text + "}\n";
  };
  Program p = parse_program(program("f32", false));
  const size_t before = occurrences(program_ptx(p), "mul.rn.f32");
  fold_row_factors(p);
  EXPECT_TRUE(program_problems(p).empty()) << fmt::format("{}", fmt::join(program_problems(p), "\n"));
  const std::string text = print_program(p);
  EXPECT_EQ(text.find("mul %2, %4"), std::string::npos) << text;
  EXPECT_NE(text.find(" : tile<1x4xf32, warps>\n"), std::string::npos) << text;  // f · (1/s), a value a warp
  const std::string ptx = program_ptx(p);
  EXPECT_EQ(occurrences(ptx, "mul.rn.f32"), before - 8 + 1) << ptx;  // 8 elements a thread
  EXPECT_EQ(occurrences(ptx, "rcp.rn.f32"), 1u);
  Program kept = parse_program(program("f32", true));
  const std::string kept_text = print_program(kept);
  fold_row_factors(kept);
  EXPECT_EQ(print_program(kept), kept_text);
  // 1/s rounded to bf16 as the quotient's reciprocal is, then taken as f32 for f · (1/s).
  Program half = parse_program(program("bf16", false));
  fold_row_factors(half);
  EXPECT_TRUE(program_problems(half).empty()) << fmt::format("{}", fmt::join(program_problems(half), "\n"));
  const std::string half_text = print_program(half);
  EXPECT_EQ(half_text.find("mul %2, %4"), std::string::npos) << half_text;
  EXPECT_NE(half_text.find(" : tile<1x1xbf16>\n"), std::string::npos) << half_text;
  EXPECT_NE(half_text.find(" : tile<1x1024xbf16>\n"), std::string::npos) << half_text;
  expect_assembled_unspilled(program_ptx(half), half.name);
}

TEST(GpuTileIr, WarpsTilesGatherAnOnlineSoftmaxRow) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  for (int row_threads : {128, 96}) {  // 4 warps a row, and 3
    SCOPED_TRACE(row_threads);
    expect_online_softmax_rows(parse_program(warps_online_text(64, row_threads)), 64, 1000);
  }
}

}  // namespace
}  // namespace tilefuse::tir
