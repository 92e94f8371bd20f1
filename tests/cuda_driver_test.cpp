#include "runtime/cuda_driver.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/support/error.h"

namespace tilefuse::cuda {
namespace {

#define REQUIRE_GPU()                            \
  do {                                           \
    std::string why_;                            \
    if (!available(&why_)) GTEST_SKIP() << why_; \
  } while (0)

// out[i] = in[i] * 2.0f for i < n.
const char* kScalePtx = R"(
.version 8.0
.target sm_90
.address_size 64

.visible .entry scale2(
    .param .u64 in_ptr,
    .param .u64 out_ptr,
    .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [in_ptr];
    ld.param.u64 %rd2, [out_ptr];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f1, [%rd6];
    mul.f32 %f2, %f1, 0f40000000;
    st.global.f32 [%rd7], %f2;
DONE:
    ret;
}
)";

TEST(CudaDriverNoGpu, ReportsWhyAndThrows) {
  std::string why;
  if (available(&why)) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(why.empty());
  EXPECT_NE(why.find("no GPU"), std::string::npos) << why;
  EXPECT_THROW(Context::get(), CudaError);
  try {
    Context::get();
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DeviceBuffer(16), CudaError);
  EXPECT_THROW(Stream(), CudaError);
  EXPECT_THROW(Module::load_ptx(kScalePtx, "scale2"), CudaError);
  DeviceBuffer empty;  // default construction and destruction need no driver
  EXPECT_EQ(empty.ptr(), 0u);
}

TEST(CudaDriver, ContextInfo) {
  REQUIRE_GPU();
  const DeviceInfo& info = Context::get().info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.cc_major, 0);
  EXPECT_GT(info.driver_version, 0);
  EXPECT_GT(info.total_mem, 0u);
  EXPECT_GT(info.l2_bytes, 0);
  EXPECT_GT(info.max_shared_per_block_optin, 0);
  Context::get().synchronize();
}

TEST(CudaDriver, UploadDownloadRoundTrip) {
  REQUIRE_GPU();
  std::mt19937 rng(1234);
  std::vector<uint32_t> host(1 << 20);
  for (auto& v : host) v = rng() | 1u;  // never zero
  DeviceBuffer buf(host.size() * 4);
  EXPECT_NE(buf.ptr(), 0u);
  EXPECT_EQ(buf.size(), host.size() * 4);
  buf.upload(host.data(), host.size() * 4);
  std::vector<uint32_t> back(host.size(), 0);
  buf.download(back.data(), back.size() * 4);
  EXPECT_EQ(back, host);

  EXPECT_THROW(buf.upload(host.data(), buf.size() + 1), CudaError);
  EXPECT_THROW(buf.download(back.data(), buf.size() + 1), CudaError);

  DeviceBuffer moved = std::move(buf);
  EXPECT_EQ(buf.ptr(), 0u);
  std::fill(back.begin(), back.end(), 0);
  moved.download(back.data(), back.size() * 4);
  EXPECT_EQ(back, host);
}

TEST(CudaDriver, FillPoison) {
  REQUIRE_GPU();
  DeviceBuffer buf(4096);
  buf.fill_u32(0x7fc00001u);
  std::vector<uint32_t> back(1024, 0);
  buf.download(back.data(), 4096);
  for (uint32_t v : back) ASSERT_EQ(v, 0x7fc00001u);

  buf.fill_u16(0xabcd);
  std::vector<uint16_t> back16(2048, 0);
  buf.download(back16.data(), 4096);
  for (uint16_t v : back16) ASSERT_EQ(v, 0xabcd);

  buf.fill_u8(0x5a);
  std::vector<uint8_t> back8(4096, 0);
  buf.download(back8.data(), 4096);
  for (uint8_t v : back8) ASSERT_EQ(v, 0x5a);

  DeviceBuffer odd(6);
  EXPECT_THROW(odd.fill_u32(1), CudaError);
}

TEST(CudaDriver, LaunchScaleKernel) {
  REQUIRE_GPU();
  const unsigned n = 100000 + 37;  // not a multiple of the block size
  const unsigned tail = 64;        // extra poisoned elements the kernel must not touch
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> in(n);
  for (auto& v : in) v = dist(rng);

  DeviceBuffer din(n * 4), dout((n + tail) * 4);
  din.upload(in.data(), n * 4);
  const uint32_t poison = 0x7fc00001u;
  dout.fill_u32(poison);

  Module mod = Module::load_ptx(kScalePtx, "scale2");
  CUfunction f = mod.function("scale2");
  EXPECT_GT(mod.num_registers(f), 0);
  EXPECT_GE(mod.local_bytes(f), 0);
  EXPECT_THROW(mod.function("no_such_kernel"), CudaError);

  Stream stream;
  CUdeviceptr pin = din.ptr(), pout = dout.ptr();
  unsigned nn = n;
  void* args[] = {&pin, &pout, &nn};
  Dim3 block{128, 1, 1};
  Dim3 grid{(n + block.x - 1) / block.x, 1, 1};
  launch(f, grid, block, 0, stream.get(), args, "scale2");
  stream.synchronize();

  std::vector<float> out(n + tail);
  dout.download(out.data(), out.size() * 4);
  for (unsigned i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i] * 2.0f) << "i=" << i;
  for (unsigned i = n; i < n + tail; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &out[i], 4);
    ASSERT_EQ(bits, poison) << "kernel wrote past n at i=" << i;
  }

  // An impossible block size is rejected at launch and named in the message.
  try {
    launch(f, grid, Dim3{4096, 1, 1}, 0, stream.get(), args, "scale2_badblock");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("cuLaunchKernel(scale2_badblock)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA_ERROR_"), std::string::npos) << msg;
  }
}

TEST(CudaDriver, BrokenPtxReportsJitLog) {
  REQUIRE_GPU();
  std::string bad = kScalePtx;
  bad.replace(bad.find("mul.f32"), 7, "frobnicate.f32");
  try {
    Module::load_ptx(bad, "broken_k");
    FAIL() << "expected CudaError";
  } catch (const CudaError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("cuModuleLoadDataEx(broken_k)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("JIT error log"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("frobnicate") != std::string::npos || msg.find("ptxas") != std::string::npos) << msg;
  }
}

TEST(CudaDriver, EventTimesCopy) {
  REQUIRE_GPU();
  const size_t bytes = size_t{256} << 20;
  DeviceBuffer src(bytes), dst(bytes);
  src.fill_u32(0x01020304u);
  Stream stream;
  Event start, stop;
  start.record(stream.get());
  copy_device_to_device(dst.ptr(), src.ptr(), bytes, stream.get());
  stop.record(stream.get());
  stop.synchronize();
  EXPECT_GT(Event::elapsed_ms(start, stop), 0.0f);
  uint32_t first = 0;
  dst.download(&first, 4);
  EXPECT_EQ(first, 0x01020304u);
}

}  // namespace
}  // namespace tilefuse::cuda
