// Tile IR v2 on its own: programs built, printed, parsed back and verified; the verifier's and
// the parser's errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "compiler/support/error.h"
#include "compiler/tile/ir.h"
#include "compiler/tile/ir_verify.h"

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
           {"operand dtypes do not fit", "  %2 = load %arg0[%0, %1] : tile<4x256xf32>\n  %3 = add %2, %2 : tile<4x256xbf16>\n"},
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

}  // namespace
}  // namespace tilefuse::tir

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/tile/build.h"
#include "tools/fuzz/random_graph.h"

namespace tilefuse::tir {
namespace {

// Every pointwise and column-reduction kernel of the fuzzer's graphs builds a program that
// verifies and prints back to the same text.
TEST(TileIrBuild, FuzzKernelsVerifyAndRoundTrip) {
  fuzz::RandomGraphOptions compiled;
  compiled.matmul = compiled.iota = compiled.non_trailing = 0;
  int built = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    Plan plan = plan_fusion(fuzz::random_graph(seed, compiled));
    for (const Kernel& k : plan.kernels) {
      std::optional<Program> p = build_program(plan.graph, k);
      EXPECT_EQ(p.has_value(), k.kind != ScheduleKind::RowReduce) << k.name;  // rows: the first Tile IR
      if (!p) continue;
      SCOPED_TRACE(fmt::format("seed {} kernel {}", seed, k.name));
      ++built;
      EXPECT_TRUE(program_problems(*p).empty());
      const std::string text = print_program(*p);
      EXPECT_EQ(print_program(parse_program(text)), text);
    }
  }
  EXPECT_GT(built, 0);
}

// An operand broadcast along some of the domain's row dimensions keeps them, so a load can split
// the row index; edge tiles are masked.
TEST(TileIrBuild, PartlyBroadcastRowsAndEdges) {
  using namespace dsl;
  Graph g("edges");
  Tensor x = input(g, "x", {3, 37, 1001});
  Tensor r = input(g, "r", {3, 1, 1001});
  output("y", x * r);
  Plan plan = plan_fusion(g);
  ASSERT_EQ(plan.kernels.size(), 1u);
  std::optional<Program> p = build_program(plan.graph, plan.kernels[0]);
  ASSERT_TRUE(p.has_value());
  const std::string text = print_program(*p);
  EXPECT_NE(text.find("\"r\": f32[3, 1001] rows [3, 37] as [3, 1]"), std::string::npos) << text;
  EXPECT_NE(text.find("masked [0, 1]"), std::string::npos) << text;  // 111 rows, 1001 columns: edge tiles
}

}  // namespace
}  // namespace tilefuse::tir
