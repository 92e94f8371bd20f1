// The decode step as a graph: the new token's key and value written into the caches in place
// (dsl::write_at) at each sequence's length, then attention over length + 1 keys. The write's
// semantics in the float64 reference (positions rounded up, slices past the end dropped), the
// errors for what cannot be written in place, the plan (a write kernel per cache before the
// attention kernel, which reads the caches' memory), and on a GPU the step against float64 —
// ragged lengths through one compiled plan, and the caller's cache updated in place.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/reference.h"
#include "compiler/graph/tensor_data.h"
#include "compiler/support/error.h"
#include "runtime/check.h"
#include "runtime/cuda_driver.h"
#include "runtime/executable.h"
#include "tests/test_util.h"
#include "tools/fuzz/random_graph.h"

namespace tilefuse {
namespace {

using namespace dsl;

// q [B, Hkv, G, 1, D]; caches k, v [B, Hkv, 1, Lmax, D]; the new token's k and v [B, Hkv, 1, 1,
// D]; length [B] (as [B, 1, 1, 1, 1]). Outputs o and, when asked, the updated key cache.
Graph decode_step(int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t max_len, int64_t d, bool cache_out) {
  Graph g("decode_step");
  const int64_t group = q_heads / kv_heads;
  Tensor q = input(g, "q", {batch, kv_heads, group, 1, d}, DType::BF16);
  Tensor k_cache = input(g, "k_cache", {batch, kv_heads, 1, max_len, d}, DType::BF16);
  Tensor v_cache = input(g, "v_cache", {batch, kv_heads, 1, max_len, d}, DType::BF16);
  Tensor k_new = input(g, "k_new", {batch, kv_heads, 1, 1, d}, DType::BF16);
  Tensor v_new = input(g, "v_new", {batch, kv_heads, 1, 1, d}, DType::BF16);
  Tensor length = input(g, "length", {batch, 1, 1, 1, 1});
  Tensor k = write_at(k_cache, k_new, length, 3), v = write_at(v_cache, v_new, length, 3);
  Tensor s = matmul(q, k, {false, true, DType::F32}) * (1.0 / std::sqrt(static_cast<double>(d)));
  s = where(iota(g, {1, max_len}, 1) < length + 1.0, s, -INFINITY);
  output("o", matmul(cast(softmax(s), DType::BF16), v));
  if (cache_out) output("k_cache_after", k);
  return g;
}

TEST(WriteAt, ReferenceWritesTheSlicesAtTheirPositions) {
  Graph g("write");
  Tensor cache = input(g, "cache", {2, 5, 3}), value = input(g, "value", {2, 2, 3}), position = input(g, "pos", {2, 1, 1});
  output("out", write_at(cache, value, position, 1));
  std::vector<double> c(30), v(12);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<double>(i);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 100.0 + static_cast<double>(i);
  for (const auto& [positions, expect_rows] :
       std::vector<std::pair<std::vector<double>, std::vector<std::vector<int>>>>{
           {{1, 4}, {{1, 2}, {4}}},           // sequence 1's second slice would land past the end
           {{2.5, -3}, {{3, 4}, {0, 1}}},     // rounded up; below 0 is 0
           {{NAN, 5}, {{0, 1}, {}}}}) {       // NaN is 0; at the end: nothing written
    TensorMap in = {{"cache", TensorData::from_doubles(DType::F32, {2, 5, 3}, c)},
                    {"value", TensorData::from_doubles(DType::F32, {2, 2, 3}, v)},
                    {"pos", TensorData::from_doubles(DType::F32, {2, 1, 1}, positions)}};
    const std::vector<double> out = reference_run(g, in).at("out");
    std::vector<double> expect = c;
    for (int b = 0; b < 2; ++b)
      for (size_t j = 0; j < expect_rows[b].size(); ++j)
        for (int e = 0; e < 3; ++e) expect[(b * 5 + expect_rows[b][j]) * 3 + e] = v[(b * 2 + j) * 3 + e];
    EXPECT_EQ(out, expect) << "positions " << positions[0] << ", " << positions[1];
  }
}

void expect_graph_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying: " << what;
  } catch (const GraphError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(WriteAt, RefusesWhatItCannotWriteInPlace) {
  Graph g("bad");
  Tensor cache = input(g, "cache", {2, 8, 4}, DType::BF16), value = input(g, "value", {2, 1, 4}, DType::BF16);
  Tensor pos = input(g, "pos", {2, 1, 1});
  expect_graph_error([&] { write_at(exp(cache), value, pos, 1); }, "not a graph input");
  expect_graph_error([&] { write_at(cache, input(g, "wide", {2, 1, 5}, DType::BF16), pos, 1); }, "do not fit");
  expect_graph_error([&] { write_at(cache, input(g, "long", {2, 9, 4}, DType::BF16), pos, 1); }, "do not fit");
  expect_graph_error([&] { write_at(cache, input(g, "f32", {2, 1, 4}), pos, 1); }, "cast them");
  expect_graph_error([&] { write_at(cache, value, input(g, "per_row", {2, 8, 1}), 1); }, "one per slice");
  expect_graph_error([&] { write_at(cache, value, input(g, "bf16_pos", {2, 1, 1}, DType::BF16), 1); }, "must be f32");
  expect_graph_error([&] { write_at(cache, value, constant(g, 3.0), 1); }, "position is a constant");
  {
    Graph h("itself");
    Tensor c = input(h, "cache", {2, 8, 4}, DType::BF16);
    expect_graph_error([&] { write_at(c, c, input(h, "pos", {2, 1, 1}), 1); }, "as its value or position");
  }
  {
    Graph h("read_before");
    Tensor c = input(h, "cache", {2, 8, 4}, DType::BF16);
    output("twice", c * 2.0);
    expect_graph_error([&] { write_at(c, input(h, "value", {2, 1, 4}, DType::BF16), input(h, "pos", {2, 1, 1}), 1); },
                       "also read by");
  }
  {  // a read added after the write is found when the graph is planned
    Graph h("read_after");
    Tensor c = input(h, "cache", {2, 8, 4}, DType::BF16);
    output("updated", write_at(c, input(h, "value", {2, 1, 4}, DType::BF16), input(h, "pos", {2, 1, 1}), 1));
    output("old", c * 2.0);
    expect_graph_error([&] { plan_fusion(h); }, "also read by");
  }
  {
    Graph h("cache_out");
    Tensor c = input(h, "cache", {2, 8, 4}, DType::BF16);
    output("same", c);
    expect_graph_error([&] { write_at(c, input(h, "value", {2, 1, 4}, DType::BF16), input(h, "pos", {2, 1, 1}), 1); },
                       "also a graph output");
  }
}

// Each cache's write is a kernel of its own, before the attention kernel that reads the caches'
// memory; the report says it writes in place, and its code assembles.
TEST(WriteAt, DecodeStepPlansAWriteKernelPerCacheBeforeAttention) {
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "--no-fuse");
    FusionOptions o;
    o.fuse = fuse;
    const Plan p = plan_fusion(decode_step(2, 8, 2, 300, 64, false), o);
    for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
    int writes = 0;
    bool attention_after_writes = false;
    for (const Kernel& k : p.kernels) {
      if (k.kind == ScheduleKind::Write) {
        ++writes;
        EXPECT_EQ(k.nodes.size(), 1u);
        EXPECT_NE(k.schedule.describe().find("in place"), std::string::npos) << k.schedule.describe();
        EXPECT_EQ(k.cost.bytes_written, 2 * 2 * 64 * 2) << "the new token's bytes, not the cache's";
        const CompiledKernel c = compile_kernel(p.graph, k);
        EXPECT_NE(c.tile_ir.find("store"), std::string::npos) << c.tile_ir;
        if (!find_ptxas().empty()) {
          EXPECT_TRUE(run_ptxas(c.ptx, k.name).has_value());
        }
      }
      if (k.kind == ScheduleKind::Attention) attention_after_writes = writes == 2;
    }
    EXPECT_EQ(writes, 2) << plan_report_text(p);
    if (fuse) {
      EXPECT_TRUE(attention_after_writes) << plan_report_text(p);
    }
    EXPECT_NE(plan_report_text(p).find("in place"), std::string::npos);
  }
}

// A write whose result nothing reads still updates the caller's cache: it is planned, not dead.
TEST(WriteAt, AWriteNothingReadsIsStillPlanned) {
  Graph g("append_only");
  Tensor c = input(g, "cache", {2, 8, 4}, DType::BF16);
  write_at(c, input(g, "value", {2, 1, 4}, DType::BF16), input(g, "pos", {2, 1, 1}), 1);
  output("other", input(g, "x", {16}) * 2.0);
  const Plan p = plan_fusion(g);
  for (const std::string& problem : plan_problems(p)) ADD_FAILURE() << problem;
  int writes = 0;
  for (const Kernel& k : p.kernels) writes += k.kind == ScheduleKind::Write;
  EXPECT_EQ(writes, 1) << plan_report_text(p);
}

// One compiled plan serves every set of lengths: ragged (0, 17, the last free slot), and the
// cache full (length Lmax: the write is dropped, attention reads every key).
TEST(GpuWriteAt, DecodeStepMatchesFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  Executable exe(plan_fusion(decode_step(3, 8, 2, 300, 64, true)));
  TensorMap in = random_inputs(exe.plan().graph, seed);
  for (const std::vector<double>& lengths : std::vector<std::vector<double>>{{0, 17, 299}, {150, 300, 1}}) {
    SCOPED_TRACE(fmt::format("lengths {}", fmt::join(lengths, ", ")));
    in["length"] = TensorData::from_doubles(DType::F32, {3, 1, 1, 1, 1}, lengths);
    const CheckReport r = check_against_reference(exe.plan(), in, exe.run(in));
    EXPECT_TRUE(r.ok) << r.text();
  }
}

// run_on_device: the caller's caches hold the new token afterwards (nothing else of them
// changes), and a second step at the next position reads it.
TEST(GpuWriteAt, TheCallersCacheIsUpdatedInPlace) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  Executable exe(plan_fusion(decode_step(2, 4, 4, 130, 32, false)));
  const Graph& g = exe.plan().graph;
  TensorMap host = random_inputs(g, seed);
  host["length"] = TensorData::from_doubles(DType::F32, {2, 1, 1, 1, 1}, {5, 129});
  std::map<std::string, cuda::DeviceBuffer> buffers;
  DeviceTensorMap in;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    const TensorData& t = host.at(n.name);
    buffers.emplace(n.name, cuda::DeviceBuffer(t.bytes.size()));
    buffers.at(n.name).upload(t.bytes.data(), t.bytes.size());
    in[n.name] = {buffers.at(n.name).ptr(), n.dtype, n.shape};
  }
  const Node& o = g.node(g.outputs().at(0).node);
  cuda::DeviceBuffer o_buffer(static_cast<size_t>(num_elements(o.shape)) * dtype_size(o.dtype));
  cuda::Stream stream;
  exe.run_on_device(in, {{"o", {o_buffer.ptr(), o.dtype, o.shape}}}, stream.get());
  stream.synchronize();
  // The reference's updated caches: the graph's writes as outputs.
  Graph with_caches = decode_step(2, 4, 4, 130, 32, true);
  const std::vector<double> expect = reference_run(with_caches, host).at("k_cache_after");
  TensorData after = TensorData::zeros(DType::BF16, host.at("k_cache").shape);
  buffers.at("k_cache").download(after.bytes.data(), after.bytes.size());
  EXPECT_EQ(after.to_doubles(), expect) << "the caller's key cache after the step";
  TensorData out = TensorData::zeros(o.dtype, o.shape);
  o_buffer.download(out.bytes.data(), out.bytes.size());
  const CheckReport r = check_against_reference(exe.plan(), host, {{"o", out}});
  EXPECT_TRUE(r.ok) << r.text();
}

// Speculative slices (three per write) at a position another kernel computes, then attention
// over the written caches — what Fuzz.AttentionChains draws (its seeds 4 and 9 failed on the
// H200 at 67956cb with these input seeds). Each plan — fused, the chain's scores written, and
// one kernel per op — against float64, so a failure names the kernel kind at fault.
TEST(GpuWriteAt, WrittenSlicesThenAttentionMatchFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  fuzz::RandomGraphOptions ro;
  ro.attention = 0.3;
  ro.matmul = 0;
  ro.iota = 0;
  ro.long_rows = 0;
  for (auto [graph_seed, input_seed] : {std::pair<uint64_t, uint64_t>{4, 30300406926}, {9, 31199424605}}) {
    const Graph g = fuzz::random_graph(graph_seed, ro);
    for (int variant = 0; variant < 3; ++variant) {
      FusionOptions fo;
      fo.contraction_chains = variant == 0;
      fo.fuse = variant < 2;
      SCOPED_TRACE(fmt::format("graph seed {}, inputs {}, {}", graph_seed, input_seed,
                               variant == 0 ? "fused" : variant == 1 ? "scores written" : "unfused"));
      const Plan p = plan_fusion(g, fo);
      Executable exe(p);
      const TensorMap in = random_inputs(p.graph, input_seed);
      const CheckReport r = check_against_reference(p, in, exe.run(in));
      EXPECT_TRUE(r.ok) << r.text();
    }
  }
}

// The parts of the fuzz seeds above, each an output so the check names the one at fault: a
// position another kernel computes (|x|·65, x −0.1395: 10), three slices written there into a
// [1, 130, 64] cache, and attention over it; then the same with the position an input.
TEST(GpuWriteAt, ThreeSlicesAtAComputedPosition) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  for (bool computed : {true, false}) {
    SCOPED_TRACE(computed ? "position computed" : "position an input");
    Graph g("three_slices");
    Tensor q = input(g, "q", {1, 64, 64}, DType::BF16);
    Tensor k_cache = input(g, "k_cache", {1, 130, 64}, DType::BF16);
    Tensor x = input(g, "x", {1, 1, 1});
    Tensor pos = computed ? abs(x) * 65.0 : x;
    Tensor k = write_at(k_cache, input(g, "k_new", {1, 3, 64}, DType::BF16), pos, 1);
    output("k_after", k);
    if (computed) output("pos", pos);
    output("o", matmul(cast(softmax(matmul(q, k, {false, true, DType::F32}) * 0.125), DType::BF16), k));
    Executable exe(plan_fusion(g));
    TensorMap in = random_inputs(exe.plan().graph, seed);
    in["x"] = TensorData::from_doubles(DType::F32, {1, 1, 1}, {computed ? -0.13950513303279877 : 9.068});
    const CheckReport r = check_against_reference(exe.plan(), in, exe.run(in));
    EXPECT_TRUE(r.ok) << r.text() << plan_report_text(exe.plan());
  }
}

}  // namespace
}  // namespace tilefuse
