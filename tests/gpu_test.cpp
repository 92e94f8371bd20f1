// Examples on the GPU against the float64 reference: fresh random inputs, poisoned outputs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "compiler/codegen/compile.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/tile/ir.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/reference.h"
#include "compiler/support/error.h"
#include "compiler/support/parallel.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_probe.h"
#include "dsl_examples/examples.h"
#include "runtime/check.h"
#include "runtime/executable.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {
using namespace dsl;

TEST(Gpu, ExamplesMatchReference) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  for (const Example& e : examples()) {
    SCOPED_TRACE(e.name);
    Graph g = e.build();
    // The largest examples (2^29 elements) are checked by the benchmark run instead: their
    // float64 reference alone takes tens of seconds.
    int64_t biggest = 0;
    for (NodeId id : g.inputs()) biggest = std::max(biggest, num_elements(g.node(id).shape));
    if (biggest > (int64_t{1} << 27)) continue;
    // So do the matmuls (GpuMatMul.FullShapeSampled): 8192³ multiply-adds in float64.
    bool contracts = false;
    for (const Node& n : g.nodes()) contracts |= n.op == Op::MatMul;
    if (contracts) continue;
    testing::check_on_gpu(plan_fusion(g), testing::test_seed());
  }
}

// Matmuls against the float64 reference: shapes on and off the tile grid (K not a multiple of
// the k step, K shorter than one), batches with a shared weight, operands read transposed, f16,
// an f32 product, fused epilogues with a bias, a residual shared across batches and GELU — each
// planned staged through shared memory where its rows allow, and with fragments loaded straight
// from global memory (--stages 0).
TEST(GpuMatMul, ShapesLayoutsAndEpiloguesMatchReference) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  int staged = 0, wgmma = 0, tma = 0, tma_stores = 0, pingpong = 0, clustered = 0, copied = 0, split = 0;
  for (const testing::PlannedCase& c : testing::matmul_schedule_cases()) {
    SCOPED_TRACE(c.name);
    const TileSchedule& s = c.plan.kernels[0].schedule;
    EXPECT_EQ(c.plan.kernels.size(), 1u);  // the epilogue fused
    wgmma += s.wgmma;
    tma += s.tma;
    tma_stores += s.tma_store;
    pingpong += s.consumer_groups == 2;
    clustered += s.cluster_blocks == 2;
    staged += !s.wgmma && s.stages > 0;
    copied += s.copies_operands();
    split += s.k_splits > 1;
    testing::check_on_gpu(c.plan, seed);
  }
  EXPECT_GE(wgmma, 10);  // the path most cases take by default, and with cp.async
  EXPECT_GE(tma, 5);     // fed by TMA, the default
  EXPECT_GE(tma_stores, 5);  // and storing by TMA
  EXPECT_LT(tma_stores, tma);  // or not
  EXPECT_GE(pingpong, 4);  // two warpgroups taking turns
  EXPECT_GE(clustered, 4);  // clusters of two
  EXPECT_GE(staged, 5);  // and mma.sync's, asked for
  EXPECT_GE(copied, 8);  // odd rows copied into a padded pitch, on wgmma and on mma.sync
  EXPECT_GE(split, 6);   // split-K, on wgmma and on mma.sync
}

// The staged matmul's other tiles, depths and tile orders (the hints a sweep tries): every tile
// of the product computed once, whatever the grouping, including a last group of fewer rows.
TEST(GpuMatMul, TilesDepthsAndGroupsMatchReference) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  Graph g("mm_tiles");
  output("c", matmul(input(g, "a", {2, 328, 96}, DType::BF16), input(g, "b", {96, 456}, DType::BF16)));
  struct Variant {
    int m, n, stages, group;
  };
  for (int on_wgmma : {2, 1, 0})  // wgmma fed by TMA, by cp.async; mma.sync
  for (const Variant& v : std::vector<Variant>{
           {64, 64, 2, 0}, {128, 256, 3, 0}, {256, 128, 4, 0}, {128, 128, 3, 3}, {64, 128, 2, 2}}) {
    SCOPED_TRACE(fmt::format("{}x{}, {} stages, group {}, {}", v.m, v.n, v.stages, v.group,
                             on_wgmma == 2 ? "wgmma tma" : on_wgmma ? "wgmma cp.async" : "mma.sync"));
    FusionOptions o;
    o.schedule.gemm_wgmma = on_wgmma ? 1 : 0;
    o.schedule.gemm_tma = on_wgmma == 2 ? 1 : 0;
    o.library_gemm = LibraryGemmUse::Never;
    o.schedule.gemm_block_m = v.m;
    o.schedule.gemm_block_n = v.n;
    o.schedule.stages = v.stages;
    o.schedule.gemm_group = v.group;
    Plan p = plan_fusion(g, o);
    ASSERT_EQ(p.kernels.size(), 1u);
    EXPECT_EQ(p.kernels[0].schedule.block_n, v.n);
    testing::check_on_gpu(p, seed);
    if (on_wgmma == 2) {  // persistent: 7 blocks looping over the tiles, the rings' phases wrapping
      o.profile.sm_count = 7;
      Plan q = plan_fusion(g, o);
      EXPECT_EQ(q.kernels.at(0).schedule.tile_blocks, 7);
      testing::check_on_gpu(q, seed);
      if (v.m == 64) {  // and two warpgroups taking turns on tiles of their own
        o.schedule.gemm_pingpong = 1;
        Plan r = plan_fusion(g, o);
        EXPECT_EQ(r.kernels.at(0).schedule.consumer_groups, 2);
        testing::check_on_gpu(r, seed);
        o.schedule.gemm_pingpong = 0;
      }
      if (v.n >= 128) {  // clusters of two: 3 of them (6 blocks), tile rows of 328 rows
        o.schedule.gemm_cluster = 2;
        o.profile.sm_count = 6;
        Plan c = plan_fusion(g, o);
        EXPECT_EQ(c.kernels.at(0).schedule.cluster_blocks, 2);
        testing::check_on_gpu(c, seed);
      }
    }
  }
}

// The 8192³ example is too big for the float64 reference on the CPU: 4096 sampled outputs are
// each checked against their own float64 dot product.
TEST(GpuMatMul, FullShapeSampled) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  FusionOptions own_gemm;
  own_gemm.library_gemm = LibraryGemmUse::Never;
  // On the tile grid, and off it along every extent (odd, not a multiple of 8: masked copies).
  for (const char* name : {"matmul", "matmul_odd"}) {
    SCOPED_TRACE(name);
    Executable exe(plan_fusion(find_example(name).build(), own_gemm));
    TensorMap in = random_inputs(exe.plan().graph, seed);
    const std::vector<double> out = exe.run(in).at("c").to_doubles();
    const std::vector<double> a = in.at("a").to_doubles(), b = in.at("b").to_doubles();
    const int64_t m = in.at("a").shape[0], k = in.at("a").shape[1], n = in.at("b").shape[1];
    std::mt19937_64 rng(seed);
    int bad = 0;
    for (int s = 0; s < 4096; ++s) {
      // Half the samples at the last rows and columns, where the tiles are cut.
      const bool edge = s % 2 == 1;
      const int64_t i = edge ? m - 1 - static_cast<int64_t>(rng() % 64) : static_cast<int64_t>(rng() % m);
      const int64_t j = edge ? n - 1 - static_cast<int64_t>(rng() % 64) : static_cast<int64_t>(rng() % n);
      double ref = 0, mag = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        ref += a[i * k + kk] * b[kk * n + j];
        mag += std::abs(a[i * k + kk] * b[kk * n + j]);
      }
      // The bf16 product's rounding, and f32 accumulation over k terms.
      const double allowed = 0x1.0p-8 * std::abs(ref) + 0x1.0p-16 * mag;
      const double got = out[static_cast<size_t>(i * n + j)];
      if (!(std::abs(got - ref) <= allowed) && bad++ < 5)
        ADD_FAILURE() << "c[" << i << ", " << j << "] = " << got << ", float64 " << ref << " (allowed ±" << allowed
                      << "), inputs seeded " << seed;
    }
    EXPECT_EQ(bad, 0);
  }
}

// Plans whose matmuls are cuBLASLt's (--library-gemm): the product alone with the epilogue as
// a kernel of its own, the native bias + tanh GELU and bias + ReLU epilogues, a batch over a
// shared weight; each plan is checked to take the library where the test means it to.
TEST(GpuMatMul, LibraryGemmPlansMatchReference) {
  struct Case {
    const char* name;
    std::function<void(Graph&)> build;
    int chosen;  // the priced option the plan must take
  };
  auto bias_act = [](Graph& g, Shape a, Shape w, bool tanh, bool relu) {
    Tensor y = matmul(input(g, "a", a, DType::BF16), input(g, "w", w, DType::BF16)) +
               input(g, "b", {w.back()}, DType::BF16);
    output("y", relu ? dsl::relu(y) : gelu(y, tanh ? GeluApprox::Tanh : GeluApprox::None));
  };
  const std::vector<Case> cases = {
      {"erf GELU after", [&](Graph& g) { bias_act(g, {2048, 8192}, {8192, 2048}, false, false); }, 0},
      {"native tanh GELU", [&](Graph& g) { bias_act(g, {2048, 1024}, {1024, 2048}, true, false); }, 1},
      {"native ReLU, shared weight", [&](Graph& g) { bias_act(g, {4, 1024, 1024}, {1024, 2048}, false, true); }, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Graph g("library_gemm");
    c.build(g);
    FusionOptions o;
    o.library_gemm = LibraryGemmUse::WhenFaster;
    Plan p = plan_fusion(g, o);
    ASSERT_EQ(p.gemm_choices.size(), 1u);
    ASSERT_EQ(p.gemm_choices[0].chosen, c.chosen) << plan_report_text(p);
    if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
  }
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present (the plans were checked)";
}

TEST(Gpu, UnfusedPlansMatchReference) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  FusionOptions off;
  off.fuse = false;
  testing::check_on_gpu(plan_fusion(find_example("gelu_two_consumers").build(), off), testing::test_seed());
}

TEST(Gpu, EdgeTilesAndBroadcasts) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Graph g("edges");
  Tensor x = input(g, "x", {3, 37, 1001});
  Tensor r = input(g, "r", {3, 1, 1});
  Tensor c = input(g, "c", {37, 1});
  output("y", gelu(x * r + c, GeluApprox::Tanh));
  output("z", where(x > c, exp(x), neg(x)));
  testing::check_on_gpu(plan_fusion(g), testing::test_seed());
}

// Odd and prime row widths run flat (the domain's elements in order, broadcast operands indexed
// element by element): bias rows, per-row scales, middle-axis broadcasts, f32 and bf16.
TEST(Gpu, OddWidthsRunFlat) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (DType dt : {DType::F32, DType::BF16}) {
    Graph g(std::string("flat_") + dtype_name(dt));
    Tensor x = input(g, "x", {64, 1001}, dt);
    output("y", gelu(x + input(g, "b", {1001}, dt)) * input(g, "r", {64, 1}, dt));
    Tensor z = input(g, "z", {6, 104, 4099}, dt);
    output("w", z * input(g, "s", {6, 1, 4099}, dt) + input(g, "c", {104, 1}, dt));
    // A last dimension shorter than a vector, and one a vector's width apart from a multiple of it.
    Tensor u = input(g, "u", {50, 37, 6}, dt);
    output("v", u * input(g, "h", {37, 1}, dt) + input(g, "m", {50, 1, 6}, dt));
    output("q", input(g, "t", {9, 11, 13}, dt) - input(g, "n", {11, 13}, dt));
    Plan p = plan_fusion(g);
    for (const Kernel& k : p.kernels) EXPECT_FALSE(k.schedule.elem_dims.empty()) << k.name;
    testing::check_on_gpu(p, seed);
  }
  // Odd element counts (window 1): one row of vectors whose last one is partly outside.
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string("odd count ") + dtype_name(dt));
    Graph g(std::string("odd_count_") + dtype_name(dt));
    output("y", gelu(input(g, "x", {7, 103, 1001}, dt) + input(g, "b", {103, 1}, dt)));
    for (int64_t n : {1, 7, 9, 4097, 100003})
      output("z" + std::to_string(n), input(g, "u" + std::to_string(n), {n}, dt) * 2.0 + input(g, "v" + std::to_string(n), {n}, dt));
    FusionOptions on;
    on.schedule.window = 1;
    testing::check_on_gpu(plan_fusion(g, on), seed);
  }
}

// Row kernels on Tile IR v2 (the default) against float64: softmax, log_softmax, layernorm and
// RMSNorm rows of whole vectors, of a width a tile does not fill and of an odd width (windowed), a
// row count the blocks do not divide, sums written as outputs (keepdim or not, of a per-row
// operand times the row); f32 and bf16 (testing::row_kernels_graph).
// (And with --block-online 1: each pass over a row of whole warps behind one block barrier.)
TEST(Gpu, RowKernelsOnTileIrV2MatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (int online : {0, 1})
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + (online ? " block_online" : ""));
    FusionOptions v2;
    v2.schedule.block_online = online;
    Plan p = plan_fusion(testing::row_kernels_graph(dt), v2);
    int in_one_barrier = 0;
    for (const Kernel& k : p.kernels) in_one_barrier += k.schedule.block_online;
    // (the 4096 and 768 rows span whole warps)
    if (online) {
      EXPECT_GE(in_one_barrier, 2);
    }
    testing::check_on_gpu(p, seed);
  }
}

TEST(Gpu, WrongInputsAreRejectedBeforeLaunch) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Executable exe(plan_fusion(find_example("gelu_two_consumers").build()));
  TensorMap in = random_inputs(exe.plan().graph, 1);
  in.erase("b");
  EXPECT_THROW(exe.run(in), InputError);
}

// Each kernel's time (an event after each launch): one series per kernel, a time per run, every
// one positive; the kernels' medians add up to about the whole run's (the events between them
// cost a little; a series mis-indexed or unrecorded would be far off or fail).
TEST(Gpu, KernelTimesAddUpToTheRun) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  FusionOptions off;  // layernorm op by op: many kernels
  off.fuse = false;
  Executable exe(plan_fusion(find_example("layernorm").build(), off));
  const size_t kernels = exe.kernels().size();
  ASSERT_GT(kernels, 2u);
  const TensorMap in = random_inputs(exe.plan().graph, testing::test_seed());
  const int runs = 7;
  const std::vector<std::vector<float>> ms = exe.time_kernels(in, 2, runs);
  ASSERT_EQ(ms.size(), kernels);
  double sum = 0;
  for (const std::vector<float>& k : ms) {
    ASSERT_EQ(k.size(), static_cast<size_t>(runs));
    for (float t : k) EXPECT_GT(t, 0.0f);
    sum += summarize_ms(k).median_ms;
  }
  const double whole = summarize_ms(exe.time(in, 2, runs)).median_ms;
  EXPECT_GT(sum, 0.7 * whole);
  EXPECT_LT(sum, 1.5 * whole + 0.05);
}

TEST(NoGpu, RunSaysSo) {
  if (testing::gpu_available()) GTEST_SKIP() << "a GPU is present";
  Executable exe(plan_fusion(find_example("gelu_two_consumers").build()));
  try {
    exe.run(random_inputs(exe.plan().graph, 1));
    FAIL();
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU present"), std::string::npos) << e.what();
  }
}

// Softmax numerics on rows a reader can check: large magnitudes, −inf entries, a fully masked
// row, every row length class (one warp, one block, a loop over column tiles), 16-bit inputs.
TEST(GpuReduce, SoftmaxSpecialRows) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const double inf = INFINITY;
  Graph g("special");
  output("y", softmax(input(g, "x", {5, 4}), -1));
  Plan p = plan_fusion(g);
  Executable exe(p);
  TensorMap in;
  in["x"] =
      TensorData::from_doubles(DType::F32, {5, 4}, {1,    2, 3,    1000, 1e4,  -1e4, 9999, 1e4,  -inf, 0,
                                                    -inf, 1, -inf, -inf, -inf, -inf, -1e4, -1e4, -1e4, -1e4});
  std::vector<double> y = exe.run(in).at("y").to_doubles();
  std::vector<double> ref = reference_run(g, in).at("y");
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_FALSE(std::isnan(y[i])) << i;
    EXPECT_NEAR(y[i], ref[i], 1e-6) << i;
  }
  for (int i = 12; i < 16; ++i) EXPECT_EQ(y[i], 0.0);  // the fully masked row
  EXPECT_NEAR(y[16], 0.25, 1e-7);
}

// Special rows split over a cluster: staged through shared memory (the default: clusters of
// 2 blocks of 1024 threads) and straight to registers (clusters of 4 blocks of 512 threads).
// Rows 0–3 of every `period` rows are special: with more rows than the persistent grid has
// groups, it meets them again in later rounds.
// Each warp's and block's own max and sum must be rescaled to the row's: parts whose values
// are all −inf (next to values near −2e4, so a careless factor exp(0 − max) overflows), a
// fully masked row, the max in the last block.
// With split rows (the default for rows longer than a block holds), the parts are tasks of
// blocks that meet only through their published pairs: the same special rows, across parts.
// `looped`: planned for a device without clusters or bulk copies (sm_80), so each row is visited
// by a loop over column tiles carrying each thread's running max and sum (row_loop.cpp).
// `cluster_online` 1: each pass's reductions over a cluster in one exchange (0: one a reduction).
// `block_online` 1: rows one block holds, each pass's reductions behind one block barrier (warps
// whose elements are all −inf in row 0; 0: a barrier a reduction).
void check_special_rows(int64_t rows, int64_t n, int64_t period, int stages, int split, int cluster,
                        int parts, DType dt = DType::F32, bool looped = false, int cluster_online = 0,
                        int block_online = 0) {
  Graph g("cluster_special");
  output("y", softmax(input(g, "x", {rows, n}, dt), -1));
  output("lse", log_softmax(input(g, "z", {rows, n}, dt), -1));
  FusionOptions o;
  o.schedule.stages = stages;
  o.schedule.split = split;
  if (looped) {
    o.profile.max_cluster_blocks = 1;
    o.profile.bulk_copies = false;
  }
  o.schedule.cluster_online = cluster_online;
  o.schedule.block_online = block_online;
  Plan p = plan_fusion(g, o);
  for (const Kernel& k : p.kernels) {
    // The schedule kind the case is meant to cover (clusters, parts, stages, loops), not its sizes.
    EXPECT_EQ(k.schedule.cluster_blocks > 1, cluster > 1);
    EXPECT_EQ(k.schedule.split_blocks > 1, parts > 1);
    EXPECT_EQ(k.schedule.stages > 0, stages != 0 && n > 16384);
    EXPECT_EQ(k.schedule.col_iters > 1, looped);
    EXPECT_EQ(k.schedule.cluster_online, cluster_online == 1 && cluster > 1);
    if (parts == 1 && !looped && (cluster == 1 || cluster_online == 1)) {
      EXPECT_EQ(k.schedule.block_online, block_online == 1) << k.schedule.describe();
    }
  }
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  std::vector<double> x = random_inputs(g, testing::test_seed()).at("x").to_doubles();
  for (int64_t base = 0; base < rows * n; base += period * n) {
    double* r = x.data() + base;
    for (int64_t j = 0; j < n / 2; ++j) r[j] = -INFINITY;  // row 0: the first half masked,
    for (int64_t j = n / 2; j < n; ++j) r[j] -= 2e4;       // the rest near −2e4
    for (int64_t j = 0; j < n; ++j) r[n + j] = -INFINITY;  // row 1: all masked
    r[2 * n + n - 5] = 1e4;                                // row 2: the max in the last block
    for (int64_t j = 0; j < n; ++j) r[3 * n + j] *= 1e4;   // row 3: ±1e4
  }
  TensorMap in;
  in["x"] = TensorData::from_doubles(dt, {rows, n}, x);
  std::vector<double> z = x;
  for (int64_t base = 0; base < rows * n; base += period * n)
    z[base + n] = 0;  // log_softmax of a fully masked row is −inf − log 0: keep every row defined
  in["z"] = TensorData::from_doubles(dt, {rows, n}, z);
  Executable exe(p);
  TensorMap out = exe.run(in);
  auto ref = reference_run(g, in);
  for (const char* name : {"y", "lse"}) {
    SCOPED_TRACE(name);
    std::vector<double> y = out.at(name).to_doubles();
    const std::vector<double>& r = ref.at(name);
    int bad = 0;
    for (size_t i = 0; i < y.size() && bad < 5; ++i) {
      const double tol = dt == DType::F32 ? 1e-6 : 1e-2;
      bool same = (std::isinf(r[i]) && y[i] == r[i]) || std::abs(y[i] - r[i]) <= tol * (1 + std::abs(r[i]));
      if (!same || std::isnan(y[i])) ++bad, ADD_FAILURE() << i << ": " << y[i] << " vs " << r[i];
    }
  }
  std::vector<double> y = out.at("y").to_doubles();
  for (int64_t base = 0; base < rows * n; base += period * n) {
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(y[base + n + j], 0.0) << base << " " << j;  // 0, not NaN
    EXPECT_NEAR(y[base + 2 * n + n - 5], 1.0, dt == DType::F32 ? 1e-6 : 1e-2);
  }
}

TEST(GpuReduce, WarpAndClusterSpecialRows) {
  check_special_rows(4, 65536, 4, -1, -1, 1, 4);  // staged, split into 4 parts of 1024 × 16
  check_special_rows(4, 65536, 4, -1, -1, 1, 2, DType::BF16);  // bf16: parts of 1024 × 16
  check_special_rows(4, 32768, 4, -1, -1, 1, 1, DType::BF16);  // staged, one block per row
  // More claimed rows than the grid's blocks (claimed from the counter, the special rows met
  // again in later rounds).
  check_special_rows(300, 32768, 7, -1, -1, 1, 1, DType::F32);
  check_special_rows(300, 32768, 5, -1, -1, 1, 1, DType::BF16);
  // Rows a cluster's blocks stage, taken grid-stride: the exchanges in the loop, one a reduction
  // or one a pass.
  check_special_rows(4, 65536, 4, -1, 0, 2, 1);  // clusters of 2 × 1024 threads
  check_special_rows(300, 65536, 7, -1, 0, 2, 1, DType::BF16);
  check_special_rows(300, 65536, 7, -1, 0, 2, 1, DType::F32, false, 1);
  check_special_rows(4, 65536, 4, 0, -1, 4, 1);  // registers only, clusters of 4 × 512 threads
  check_special_rows(4, 65544, 4, 0, -1, 4, 1, DType::BF16);
  // An exchange a pass (--cluster-online 1): each block's max and its sum exchanged together,
  // whole blocks' parts −inf in row 0; on rows of an odd width too (windowed).
  check_special_rows(4, 65536, 4, 0, -1, 4, 1, DType::F32, false, 1);
  check_special_rows(4, 65544, 4, 0, -1, 4, 1, DType::BF16, false, 1);
  for (int online : {0, 1}) {
    check_special_rows(4, 50257, 4, 0, -1, 4, 1, DType::F32, false, online);
    check_special_rows(4, 50257, 4, 0, -1, 4, 1, DType::BF16, false, online);
  }
  check_special_rows(300, 4096, 100, -1, -1, 1, 1);            // one block of 8 warps per row
  // A barrier a pass (--block-online 1): each warp's max and sum gathered together, staged
  // (claimed) and not.
  check_special_rows(300, 4096, 100, -1, -1, 1, 1, DType::F32, false, 0, 1);
  check_special_rows(300, 4096, 100, -1, -1, 1, 1, DType::BF16, false, 0, 1);
  check_special_rows(300, 32768, 7, -1, -1, 1, 1, DType::F32, false, 0, 1);
  check_special_rows(300, 32768, 5, -1, -1, 1, 1, DType::BF16, false, 0, 1);
  // A barrier a pass in each block of a cluster, its warps' values gathered, then one exchange
  // a pass over the cluster, its blocks' values over each warp's lanes: held in registers, and
  // staged (taken grid-stride; the default for a cluster's staged rows).
  check_special_rows(4, 65536, 4, 0, -1, 4, 1, DType::F32, false, 1, 1);
  check_special_rows(4, 65544, 4, 0, -1, 4, 1, DType::BF16, false, 1, 1);
  check_special_rows(300, 65536, 7, -1, 0, 2, 1, DType::F32, false, 1, 1);
  // Clusters of 7, 8 lanes a group of which 7 hold blocks' values; windowed rows.
  check_special_rows(4, 50257, 4, 0, -1, 4, 1, DType::F32, false, 1, 1);
  check_special_rows(4, 50257, 4, 0, -1, 4, 1, DType::BF16, false, 1, 1);
  // A loop over column tiles per row (sm_80's schedule; rows enough to fill the device, so the
  // plan keeps one kernel), the last tile masked in the odd width.
  check_special_rows(300, 65536, 100, 0, 0, 1, 1, DType::F32, true);
  check_special_rows(300, 65544, 100, 0, 0, 1, 1, DType::BF16, true);
}

// More rows than the persistent grid has groups: each block (cluster) takes several rounds, so
// every stage is reused and its mbarrier's phase flips; special rows recur in later rounds.
TEST(GpuReduce, PersistentRounds) {
  check_special_rows(300, 65536, 100, -1, -1, 1, 4);
  check_special_rows(300, 65536, 100, -1, -1, 1, 2, DType::BF16);
  check_special_rows(300, 65536, 100, -1, 0, 2, 1);
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  struct Case {
    int64_t rows, cols;
    DType dt;
    int split;                   // hint
    int stages, cluster, parts;  // expected
  };
  for (Case c : {Case{600, 32768, DType::F32, -1, 1, 1, 1}, Case{1000, 32768, DType::BF16, -1, 2, 1, 1},
                 Case{300, 131072, DType::F32, -1, 3, 1, 8}, Case{333, 65536, DType::F16, -1, 3, 1, 2},
                 Case{300, 131072, DType::F32, 0, 1, 4, 1}, Case{333, 65536, DType::F16, 0, 3, 2, 1}}) {
    SCOPED_TRACE(std::to_string(c.rows) + "×" + std::to_string(c.cols) + " " + dtype_name(c.dt) + " split " +
                 std::to_string(c.split));
    Graph g("rounds");
    Tensor x = input(g, "x", {c.rows, c.cols}, c.dt);
    output("y", softmax(x, -1));
    FusionOptions o;
    o.schedule.split = c.split;
    Plan p = plan_fusion(g, o);
    ASSERT_EQ(p.kernels.size(), 1u);
    EXPECT_EQ(p.kernels[0].schedule.stages > 0, c.stages > 0);
    EXPECT_EQ(p.kernels[0].schedule.cluster_blocks > 1, c.cluster > 1);
    EXPECT_EQ(p.kernels[0].schedule.split_blocks > 1, c.parts > 1);
    testing::check_on_gpu(p, testing::test_seed());
  }
  // Layernorm stages x only (w and b are shared by every row, loaded after the reductions).
  Graph g("rounds_ln");
  Tensor x = input(g, "x", {700, 32768}, DType::BF16);
  output("y", layernorm(x, input(g, "w", {32768}, DType::BF16), input(g, "b", {32768}, DType::BF16)));
  Plan p = plan_fusion(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_GT(p.kernels[0].schedule.stages, 0);
  EXPECT_EQ(p.kernels[0].schedule.stage_bytes, 32768 * 2 / p.kernels[0].schedule.cluster_blocks);
  testing::check_on_gpu(p, testing::test_seed());
}

// A kernel's workspace stays between launches. A split kernel's pairs are stamped with the
// launch's epoch: later launches on new inputs (and with stale pairs of the same rows present)
// must each wait for their own. A kernel that claims its rows from a counter must find it zeroed
// again by the last block of the launch before (else a later launch writes nothing).
TEST(GpuReduce, WorkspaceAcrossLaunches) {
  Graph split("split_launches");
  output("y", softmax(input(split, "x", {300, 65536}, DType::BF16), -1));
  Graph claimed("claimed_launches");
  output("y", softmax(input(claimed, "x", {700, 32768}, DType::BF16), -1));
  Plan ps = plan_fusion(split), pc = plan_fusion(claimed);
  ASSERT_GT(ps.kernels[0].schedule.split_blocks, 1);
  ASSERT_TRUE(pc.kernels[0].schedule.claims_rows());
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  for (const Plan* p : {&ps, &pc}) {
    const Graph& g = p->graph;
    Executable exe(*p);
    for (int launch = 0; launch < 3; ++launch) {
      SCOPED_TRACE(g.name() + " launch " + std::to_string(launch));
      uint64_t seed = testing::test_seed();
      TensorMap in = random_inputs(g, seed);
      TensorMap out = exe.run(in);
      EXPECT_EQ(count_unwritten(out.at("y")), 0);
      EXPECT_LE(relative_error(out.at("y").to_doubles(), reference_run(g, in).at("y")), 1e-2) << seed;
    }
  }
}

TEST(GpuReduce, SoftmaxLengthsAndDtypes) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  // 40000: a row split over a cluster of 3 blocks; 262144: split into 16 parts; 262147: the
  // column-tile loop.
  for (int64_t cols : {1, 31, 4097, 40000, 262144, 262147})
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(std::to_string(cols) + " " + dtype_name(dt));
      Graph g("lengths");
      output("y", softmax(input(g, "x", {3, cols}, dt), -1));
      output("lse", log_softmax(input(g, "z", {3, cols}, dt), -1));
      testing::check_on_gpu(plan_fusion(g), testing::test_seed());
    }
}

TEST(GpuReduce, NormsAndReductions) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  for (int64_t cols : {96, 4096, 20000, 100000}) {  // 100000: a cluster of 13 blocks
    SCOPED_TRACE(cols);
    Graph g("norms");
    Tensor x = input(g, "x", {7, cols});
    Tensor w = input(g, "w", {cols});
    Tensor b = input(g, "b", {cols});
    output("ln", layernorm(x, w, b));
    output("rms", rmsnorm(x, w));
    output("rowmax", amax(x, {-1}));
    output("rowmin", amin(x * 2.0, {-1}, true));
    testing::check_on_gpu(plan_fusion(g), testing::test_seed());
  }
}

// RMSNorm rows of 32 elements per thread (w loaded after the reduction): one block per row,
// claimed from the counter; rows twice as long split into parts that meet in global memory.
TEST(GpuReduce, RmsnormRowsOfThirtyTwoPerThread) {
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t cols : {32768, 65536}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(cols));
      Graph g("rms32");
      Tensor x = input(g, "x", {300, cols}, dt);
      output("y", rmsnorm(x, input(g, "w", {cols}, dt)));
      Plan p = plan_fusion(g);
      ASSERT_EQ(p.kernels.size(), 1u);
      const TileSchedule& s = p.kernels[0].schedule;
      if (cols == 32768) {
        EXPECT_EQ(s.elems_per_thread(), 32);
        EXPECT_TRUE(s.claims_rows()) << s.describe();
      } else {
        EXPECT_GT(s.split_blocks, 1) << s.describe();
      }
      if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
    }
}

// A plan whose single kernel comes from merging two kernels that both read x afterwards
// (FusionReduce.KernelsSharingAnInputAreMergedAfterwards).
TEST(GpuReduce, MergedRmsnorm) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Graph g("merged_rms");
  Tensor x = input(g, "x", {4096, 12288});
  output("y", rmsnorm(x, input(g, "w", {12288}), 1e-6));
  Plan p = plan_fusion(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  testing::check_on_gpu(p, testing::test_seed());
}

// Few long rows in parts of the column-tile loop meeting in the workspace (FusionReduce.
// FewLongRowsLoopInPartsThatFillTheDevice), against float64: a whole tensor's mean, sum and max
// (fuzz seed 409's mean among them), bf16 rows whose width leaves the last part short and its
// last tile masked, an epilogue with a per-row input; run twice, so the workspace's counters
// are seen reset.
// A looped online sum Σ exp(x − max) (sm_80's schedule): a row holding +inf sums to
// NaN as the reference does (the rescaling must not turn a NaN sum into 0), a row whose first
// half is −inf (its threads' first steps see only −inf) sums as the reference, and the other rows
// within 1e-6.
TEST(GpuReduce, LoopedOnlineSumsAtInfinities) {
  Graph g("online_infinities");
  Tensor x = input(g, "x", {300, 65536});
  output("s", sum(exp(x - amax(x, {-1}, true)), {-1}, true));
  FusionOptions o;
  o.profile.max_cluster_blocks = 1;
  o.profile.bulk_copies = false;
  o.schedule.split = 0;
  Plan p = plan_fusion(g, o);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_GT(p.kernels[0].schedule.col_iters, 1) << p.kernels[0].schedule.describe();
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  std::vector<double> v = random_inputs(g, testing::test_seed()).at("x").to_doubles();
  v[static_cast<size_t>(7 * 65536 + 40000)] = INFINITY;
  for (int64_t j = 0; j < 32768; ++j) v[static_cast<size_t>(11 * 65536 + j)] = -INFINITY;
  TensorMap in;
  in["x"] = TensorData::from_doubles(DType::F32, {300, 65536}, v);
  Executable exe(p);
  const std::vector<double> s = exe.run(in).at("s").to_doubles();
  const std::vector<double> ref = reference_run(g, in).at("s");
  ASSERT_TRUE(std::isnan(ref[7]));
  EXPECT_TRUE(std::isnan(s[7])) << s[7];
  for (size_t r = 0; r < s.size(); ++r) {
    if (r != 7) {
      EXPECT_NEAR(s[r], ref[r], 1e-6 * ref[r]) << "row " << r;
    }
  }
}

// A reduction of a value constant along the row (a row of width 1 here) is the value times the
// width, kept unrounded like every reduction inside a kernel: t − mean(t) of a 16-bit t is then
// exactly 0, as in the reference, where a result rounded to f16 left t's rounding error (up to
// 2^-12 of t, times 1024 here).
TEST(GpuReduce, ReductionsOfRowConstantsAreNotRounded) {
  for (DType dt : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g("row_constants");
    Tensor t = tanh(input(g, "x", {300, 1}, dt));
    output("d", cast((t - mean(t, {-1}, true)) * 1024.0, DType::F32));
    Plan p = plan_fusion(g);
    if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
    TensorMap in = random_inputs(g, testing::test_seed());
    const std::vector<double> d = Executable(p).run(in).at("d").to_doubles();
    for (size_t r = 0; r < d.size(); ++r) ASSERT_EQ(d[r], 0.0) << "row " << r;
  }
}

TEST(GpuReduce, FewLongRowsInParts) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Graph g("parts");
  Tensor x = input(g, "x", {16, 262144});
  output("mean", mean(x, {0, 1}, true));
  output("sum", sum(x * x, {0, 1}));
  output("max", amax(x, {0, 1}, true));
  Tensor y = input(g, "y", {3, 1000003}, DType::BF16);
  output("rms", sqrt(mean(y * y, {-1}, true) + 1e-6) * input(g, "r", {3, 1}, DType::BF16));
  output("min", amin(input(g, "z", {2, 5, 300007}), {1, 2}));
  Plan p = plan_fusion(g);
  int parts = 0;
  for (const Kernel& k : p.kernels) parts += k.schedule.looped_parts();
  EXPECT_GE(parts, 3);
  const uint64_t seed = testing::test_seed();
  Executable exe(p);
  for (uint64_t run = 0; run < 2; ++run) {  // the second launch finds the counters reset by the first
    TensorMap inputs = random_inputs(p.graph, seed + run);
    CheckReport check = check_against_reference(p, inputs, exe.run(inputs));
    EXPECT_TRUE(check.ok) << "inputs seeded " << seed + run << ":\n" << check.text();
  }
}

TEST(GpuReduce, ShortRowsManyPerBlock) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  Graph g("short_rows");
  Tensor x = input(g, "x", {1000, 3, 24}, DType::BF16);
  output("y", softmax(x * 3.0, -1));
  output("s", sum(x, {1, 2}, true));
  Plan p = plan_fusion(g);
  testing::check_on_gpu(p, testing::test_seed());
}

// Rows of odd widths read as aligned windows, against float64: rows that start at every offset
// within a vector, row counts that leave a block's last rows empty, weights and biases read
// element by element, a middle-axis bias, reductions kept per row, a vocabulary-sized row over a
// cluster; and the same graph read element by element (window 0).
TEST(GpuReduce, WindowedRowsMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (int window : {1, 0, 3}) {  // 1: windows for all (--window 1); 0: none; 3: the defaults
      SCOPED_TRACE(std::string(dtype_name(dt)) + " window " + std::to_string(window));
      Graph g(std::string("windows_") + dtype_name(dt));
      Tensor x = input(g, "x", {37, 4097}, dt);
      output("sm", softmax(x * 2.0, -1));
      output("lsm", log_softmax(x, -1));
      output("shift", x - mean(x, {-1}, true));
      Tensor z = input(g, "z", {19, 2999}, dt);
      output("ln", layernorm(z, input(g, "w", {2999}, dt), input(g, "b", {2999}, dt)));
      output("rms", rmsnorm(input(g, "r", {5, 5003}, dt), input(g, "rw", {5003}, dt)));
      output("mid", softmax(input(g, "u", {3, 7, 1001}, dt) + input(g, "c", {3, 1, 1001}, dt), -1));
      Tensor v = input(g, "v", {3, 50257}, dt);
      output("ce", -sum(input(g, "t", {3, 50257}, dt) * log_softmax(v, -1), {-1}, true));
      FusionOptions o;
      if (window < 3) o.schedule.window = window;
      Plan p = plan_fusion(g, o);
      int windowed = 0;
      for (const Kernel& k : p.kernels) windowed += k.schedule.window;
      EXPECT_EQ(windowed > 0, window > 0) << plan_report_text(p);
      testing::check_on_gpu(p, seed);
    }
}

// The same rows split over clusters of 2, 4, 8 and 16 blocks (blocks of 1024 down to 128
// threads, 32 bf16 elements each), and without clusters (loops over column tiles: five rows
// are planned as their statistics' kernels, each row in parts of the loop, and a pointwise
// one); not split rows.
TEST(GpuReduce, ClusterSizes) {
  for (int threads : {1024, 512, 256, 128, 0}) {
    SCOPED_TRACE(threads);
    Graph g("clusters");
    Tensor x = input(g, "x", {5, 65536}, DType::BF16);
    output("y", softmax(x, -1));
    FusionOptions o;
    o.schedule.block_threads = threads;
    o.schedule.max_cluster_blocks = threads ? 16 : 1;
    o.schedule.split = 0;
    Plan p = plan_fusion(g, o);
    if (threads) {
      ASSERT_EQ(p.kernels.size(), 1u);
      EXPECT_EQ(p.kernels[0].schedule.cluster_blocks, 65536 / 32 / threads);
    } else {
      int looped = 0;
      for (const Kernel& k : p.kernels) {
        EXPECT_EQ(k.schedule.cluster_blocks, 1);
        if (k.kind == ScheduleKind::RowReduce) {
          EXPECT_GT(k.schedule.col_iters, 1) << k.schedule.describe();
        }
        looped += k.schedule.col_iters > 1;
      }
      EXPECT_GE(looped, 1);
    }
    if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
  }
}

// Iotas in pointwise kernels: each element's index along the iota's axis from its index in the
// domain — row-tiled, flat over an odd count, broadcast over a batch, a middle axis — as masks and
// as values, against float64 (compiled everywhere; run where a GPU is present).
TEST(Gpu, IotasInPointwiseKernels) {
  Graph g("iotas");
  Tensor x = input(g, "x", {3, 100, 90});
  output("causal", where(iota(g, {100, 90}, 0) + 5.0 >= iota(g, {100, 90}, 1), x, 0.0));
  output("rows", x * iota(g, {3, 100, 90}, 1));
  output("batch", x + iota(g, {3, 1, 1}, 0));
  Tensor y = input(g, "y", {16, 64}, DType::BF16);
  output("band", where(iota(g, {16, 64}, 1) - iota(g, {16, 64}, 0) < 8.0, y, 0.0));
  const Plan p = plan_fusion(g);
  for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
  for (const Kernel& k : p.kernels) {
    EXPECT_EQ(k.kind, ScheduleKind::Pointwise);
    const CompiledKernel c = compile_kernel(p.graph, k);
    EXPECT_NE(c.tile_ir.find(" iota "), std::string::npos) << c.tile_ir;
    EXPECT_EQ(tir::print_program(tir::parse_program(c.tile_ir)), c.tile_ir);  // the linear form round-trips
    if (!find_ptxas().empty()) {
      EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
    }
  }
  if (testing::gpu_available()) testing::check_on_gpu(p, testing::test_seed());
}

}  // namespace
}  // namespace tilefuse

namespace tilefuse {
namespace {

// A pointwise graph of more than 2^31 elements (an odd count: masked edge tiles, 64-bit
// indices) runs and every element is checked — against the same arithmetic on the host, since
// the float64 reference of 2^31 elements would need tens of GB.
TEST(Gpu, MoreThanTwoToThe31Elements) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const int64_t n = (int64_t{1} << 31) + 4099;
  if (cuda::Context::get().info().total_mem < size_t{24} << 30) GTEST_SKIP() << "needs 24 GB of device memory";
  Graph g("two_to_the_31");
  output("y", input(g, "x", {n}, DType::BF16) * 2.0 + 1.0);
  Plan p = plan_fusion(g);
  ASSERT_EQ(p.kernels.size(), 1u);
  ASSERT_TRUE(p.kernels[0].schedule.wide_indices());
  const uint64_t seed = testing::test_seed();
  TensorMap in;
  in["x"] = TensorData::zeros(DType::BF16, {n});
  // bf16 values of magnitude about 1, from a cheap hash of the index and the seed.
  parallel_chunks(n, [&](int64_t b, int64_t e, int64_t) {
    for (int64_t i = b; i < e; ++i) {
      uint64_t h = (static_cast<uint64_t>(i) + seed) * 0x9e3779b97f4a7c15ull;
      uint16_t bits = static_cast<uint16_t>(0x3e00 + ((h >> 40) & 0x1ff)) | static_cast<uint16_t>((h >> 63) << 15);
      std::memcpy(&in["x"].bytes[static_cast<size_t>(i) * 2], &bits, 2);
    }
  });
  Executable exe(p);
  TensorMap out = exe.run(in);
  std::atomic<int64_t> wrong{0}, first_wrong{-1};
  parallel_chunks(n, [&](int64_t b, int64_t e, int64_t) {
    for (int64_t i = b; i < e; ++i) {
      uint16_t xb, yb;
      std::memcpy(&xb, &in["x"].bytes[static_cast<size_t>(i) * 2], 2);
      std::memcpy(&yb, &out["y"].bytes[static_cast<size_t>(i) * 2], 2);
      if (float_to_bf16_bits(bf16_bits_to_float(xb) * 2.0f + 1.0f) != yb) {
        if (wrong++ == 0) first_wrong = i;
      }
    }
  });
  EXPECT_EQ(wrong.load(), 0) << "first wrong element " << first_wrong.load() << " of " << n << ", seed " << seed;
}

}  // namespace
}  // namespace tilefuse

namespace tilefuse {
namespace {
using namespace dsl;

// Reductions over leading and middle axes (column reductions), on the GPU against the reference:
// one part and many (the workspace and the last block's sum), odd widths (masked column tiles),
// row counts that are no multiple of a loop step, several reductions in one kernel, values after
// the reduction (an epilogue with a per-column input), full-size outputs written in the loop, and
// launches that reuse the workspace's counters.
TEST(GpuReduce, ColumnReductions) {
  struct Case {
    Shape shape;
    std::vector<int> axes;
    DType dt;
  };
  for (const Case& c : {Case{{8192, 1024}, {0}, DType::F32}, Case{{4097, 33}, {0}, DType::BF16},
                        Case{{8, 512, 768}, {0, 1}, DType::BF16}, Case{{6, 300, 129}, {1}, DType::F32},
                        Case{{3, 5, 77, 2}, {1, 2}, DType::F16}, Case{{1000, 3}, {0}, DType::F32}}) {
    SCOPED_TRACE(shape_str(c.shape) + " over " + std::to_string(c.axes.size()) + " axes " + dtype_name(c.dt));
    Graph g("columns");
    Tensor x = input(g, "x", c.shape, c.dt);
    Tensor y = x * 2.0;
    output("y", y);  // full-size, written in the loop
    Tensor s = sum(y, c.axes);
    Shape per_column = s.shape();
    output("s", s * input(g, "scale", {per_column.back()}, c.dt));  // after the reduction
    output("m", amax(x, c.axes, true));
    output("n", amin(x, c.axes));
    Plan p = plan_fusion(g);
    bool columns = false;
    for (const Kernel& k : p.kernels) {
      columns |= k.kind == ScheduleKind::ColumnReduce;
      CompiledKernel compiled = compile_kernel(p.graph, k);
      if (!find_ptxas().empty()) {
        EXPECT_TRUE(run_ptxas(compiled.ptx, k.name).has_value());
      }
    }
    EXPECT_TRUE(columns);
    if (!testing::gpu_available()) continue;
    Executable exe(p);
    for (int launch = 0; launch < 2; ++launch) {  // the counters are zeroed again by each launch's last blocks
      const uint64_t seed = testing::test_seed();
      TensorMap in = random_inputs(g, seed);
      CheckReport check = check_against_reference(exe.plan(), in, exe.run(in));
      EXPECT_TRUE(check.ok) << "seed " << seed << "\n" << check.text();
    }
  }
}

}  // namespace
}  // namespace tilefuse
