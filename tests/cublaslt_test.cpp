// cuBLASLt through runtime/cublaslt.h against a float64 GEMM: row-major operands, transposes,
// batches with a shared weight, and the native epilogues, on seeded random inputs into a
// poisoned output.
#include "runtime/cublaslt.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <vector>

#include "compiler/dsl/dsl.h"
#include "compiler/graph/tensor_data.h"
#include "compiler/support/error.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_probe.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {

TEST(Cublaslt, WithoutAGpuSaysWhy) {
  if (testing::gpu_available()) GTEST_SKIP() << "a GPU is present";
  std::string why;
  EXPECT_FALSE(cublaslt::available(&why));
  EXPECT_FALSE(why.empty());
  cublaslt::Gemm g;
  g.m = g.n = g.k = 16;
  EXPECT_THROW(cublaslt::run(g, 0, 0, 0, 0, nullptr), CudaError);
}

// Element (i, j) of a row-major [rows, cols] matrix stored transposed or not.
double at(const std::vector<double>& v, int64_t rows, int64_t cols, bool transposed, int64_t i, int64_t j) {
  return transposed ? v[static_cast<size_t>(j * rows + i)] : v[static_cast<size_t>(i * cols + j)];
}

void check_gemm(const cublaslt::Gemm& g, uint64_t seed) {
  SCOPED_TRACE(fmt::format("batch {} m {} n {} k {} ta {} tb {} shared_b {} {} epilogue {}", g.batch, g.m, g.n, g.k,
                           g.transpose_a, g.transpose_b, g.shared_b, dtype_name(g.dtype), static_cast<int>(g.epilogue)));
  std::mt19937_64 rng(seed);
  const int64_t b_batches = g.shared_b ? 1 : g.batch;
  TensorData a = TensorData::random(g.dtype, {g.batch, g.m * g.k}, rng);
  TensorData b = TensorData::random(g.dtype, {b_batches, g.k * g.n}, rng);
  TensorData bias = TensorData::random(g.dtype, {g.n}, rng);
  cuda::DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dbias(bias.bytes.size());
  cuda::DeviceBuffer dc(static_cast<size_t>(g.batch * g.m * g.n) * dtype_size(g.dtype));
  da.upload(a.bytes.data(), a.bytes.size());
  db.upload(b.bytes.data(), b.bytes.size());
  dbias.upload(bias.bytes.data(), bias.bytes.size());
  dc.fill_u16(0x7fc1);  // NaN in bf16 and f16: an element left unwritten shows
  cuda::Stream stream;
  cublaslt::run(g, da.ptr(), db.ptr(), g.epilogue == LibraryEpilogue::None ? 0 : dbias.ptr(), dc.ptr(), stream.get());
  stream.synchronize();
  TensorData c = TensorData::zeros(g.dtype, {g.batch, g.m, g.n});
  dc.download(c.bytes.data(), c.bytes.size());
  const std::vector<double> av = a.to_doubles(), bv = b.to_doubles(), biasv = bias.to_doubles(), got = c.to_doubles();
  std::vector<double> ref(got.size());
  for (int64_t q = 0; q < g.batch; ++q) {
    const std::vector<double> aq(av.begin() + q * g.m * g.k, av.begin() + (q + 1) * g.m * g.k);
    const int64_t qb = g.shared_b ? 0 : q;
    const std::vector<double> bq(bv.begin() + qb * g.k * g.n, bv.begin() + (qb + 1) * g.k * g.n);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t l = 0; l < g.k; ++l) s += at(aq, g.m, g.k, g.transpose_a, i, l) * at(bq, g.k, g.n, g.transpose_b, l, j);
        if (g.epilogue != LibraryEpilogue::None) s += biasv[static_cast<size_t>(j)];
        if (g.epilogue == LibraryEpilogue::BiasRelu) s = std::max(s, 0.0);
        if (g.epilogue == LibraryEpilogue::BiasGeluTanh)
          s = 0.5 * s * (1 + std::tanh(0.79788456080286535588 * (s + 0.044715 * s * s * s)));
        ref[static_cast<size_t>((q * g.m + i) * g.n + j)] = s;
      }
  }
  EXPECT_LT(relative_error(got, ref), 1e-2);
}

TEST(GpuCublaslt, MatchesFloat64) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  std::string why;
  if (!cublaslt::available(&why)) GTEST_SKIP() << why;
  const uint64_t seed = testing::test_seed();
  using E = LibraryEpilogue;
  int i = 0;
  for (DType dt : {DType::BF16, DType::F16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        cublaslt::Gemm g;
        g.m = 200, g.n = 136, g.k = 72, g.transpose_a = ta, g.transpose_b = tb, g.dtype = dt;
        check_gemm(g, seed + static_cast<uint64_t>(i++));
      }
  for (E e : {E::Bias, E::BiasRelu, E::BiasGeluTanh}) {
    cublaslt::Gemm g;
    g.m = 256, g.n = 128, g.k = 64, g.epilogue = e;
    check_gemm(g, seed + static_cast<uint64_t>(i++));
  }
  cublaslt::Gemm batched;
  batched.batch = 3, batched.m = 64, batched.n = 96, batched.k = 40, batched.shared_b = true;
  check_gemm(batched, seed + static_cast<uint64_t>(i++));
  batched.shared_b = false;
  check_gemm(batched, seed + static_cast<uint64_t>(i++));
}

// The runtime measures cuBLASLt's rate for a graph's GEMM shapes once and keeps it beside the
// disk cache: a second profile reads it back instead of measuring again.
TEST(GpuCublaslt, MeasuresLibraryRatesOnce) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  std::string why;
  if (!cublaslt::available(&why)) GTEST_SKIP() << why;
  const std::string dir = ::testing::TempDir() + "tilefuse_library_rates_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  setenv("TILEFUSE_CACHE_DIR", dir.c_str(), 1);
  // The rates are kept beside the disk cache, so the test turns it on whatever the environment
  // says (the GPU scripts run with TILEFUSE_CACHE=0), and puts the setting back when it ends.
  struct CacheOn {
    std::optional<std::string> was;
    CacheOn() {
      if (const char* v = std::getenv("TILEFUSE_CACHE")) was = v;
      setenv("TILEFUSE_CACHE", "1", 1);
    }
    ~CacheOn() { was ? setenv("TILEFUSE_CACHE", was->c_str(), 1) : unsetenv("TILEFUSE_CACHE"); }
  } cache_on;
  Graph g("mm");
  output("y", dsl::matmul(dsl::input(g, "a", {512, 1024}, DType::BF16), dsl::input(g, "w", {1024, 768}, DType::BF16)));
  output("z", dsl::matmul(dsl::input(g, "x", {64, 96}, DType::F32), dsl::input(g, "v", {96, 32}, DType::F32)));
  DeviceProfile first;
  EXPECT_EQ(measure_library_gemms(g, first, 5), 1);  // the f32 product is not offered to the library
  ASSERT_EQ(first.library_gemm_flops.size(), 1u);
  const auto& [key, rate] = *first.library_gemm_flops.begin();
  EXPECT_EQ(key, "bf16 1x512x768x1024 nn");
  EXPECT_GT(rate, 1e12);
  EXPECT_LT(rate, 5e15);
  DeviceProfile second;
  EXPECT_EQ(measure_library_gemms(g, second, 5), 0);
  EXPECT_EQ(second.library_gemm_flops, first.library_gemm_flops);
  unsetenv("TILEFUSE_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tilefuse
