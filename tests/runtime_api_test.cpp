// Running a plan on device memory the caller owns: the checks made before any launch (no GPU
// needed), DLPack views, and on a GPU a run on the test's own buffers and streams with nothing
// copied through the host.
#include <gtest/gtest.h>

#include <cstdint>

#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/graph/reference.h"
#include "compiler/support/error.h"
#include "runtime/check.h"
#include "runtime/cuda_driver.h"
#include "runtime/device_probe.h"
#include "runtime/dlpack.h"
#include "runtime/executable.h"
#include "tests/test_util.h"

namespace tilefuse {
namespace {
using namespace dsl;

// A column reduction (a workspace kept between launches) and a pointwise kernel.
Graph two_kernels() {
  Graph g("device_run");
  Tensor x = input(g, "x", {300, 520});
  Tensor b = input(g, "b", {520}, DType::F32);
  output("s", sum(x * 0.5, {0}));
  output("y", gelu(x + b));
  return g;
}

void expect_input_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no InputError; wanted one saying: " << what;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(RuntimeApi, DeviceTensorsAreCheckedBeforeAnyLaunch) {
  Executable exe(plan_fusion(two_kernels()));
  const uint64_t at = 0x7f0000000000;
  DeviceTensorMap in = {{"x", {at, DType::F32, {300, 520}}}, {"b", {at + (1 << 20), DType::F32, {520}}}};
  DeviceTensorMap out = {{"s", {at + (2 << 20), DType::F32, {520}}}, {"y", {at + (3 << 20), DType::F32, {300, 520}}}};
  auto with = [](DeviceTensorMap m, const std::string& name, DeviceTensor t) {
    m[name] = t;
    return m;
  };
  expect_input_error([&] { exe.run_on_device({{"x", in["x"]}}, out); }, "no input 'b' given");
  expect_input_error([&] { exe.run_on_device(with(in, "z", in["x"]), out); }, "has no input 'z'");
  expect_input_error([&] { exe.run_on_device(in, with(out, "w", out["s"])); }, "has no output 'w'");
  expect_input_error([&] { exe.run_on_device(with(in, "x", {at, DType::BF16, {300, 520}}), out); },
                     "input 'x' is bf16[300, 520], the graph's is f32[300, 520]");
  expect_input_error([&] { exe.run_on_device(in, with(out, "y", {at, DType::F32, {520, 300}})); },
                     "output 'y' is f32[520, 300]");
  expect_input_error([&] { exe.run_on_device(with(in, "b", {at + 8, DType::F32, {520}}), out); }, "16-byte aligned");
  expect_input_error([&] { exe.run_on_device(in, with(out, "s", {0, DType::F32, {520}})); }, "non-null");
  if (!testing::gpu_available()) {  // checked, then no GPU
    EXPECT_THROW(exe.run_on_device(in, out), CudaError);
  }
}

TEST(RuntimeApi, DlpackViews) {
  int64_t shape[] = {4, 6};
  int64_t compact[] = {6, 1}, strided[] = {12, 1};
  DLTensor t{};
  t.data = reinterpret_cast<void*>(uintptr_t{0x7f0000001000});
  t.device = {kDLCUDA, 0};
  t.ndim = 2;
  t.dtype = {kDLBfloat, 16, 1};
  t.shape = shape;
  t.byte_offset = 64;
  DeviceTensor d = from_dlpack(t);
  EXPECT_EQ(d.ptr, 0x7f0000001040u);
  EXPECT_EQ(d.dtype, DType::BF16);
  EXPECT_EQ(d.shape, (Shape{4, 6}));
  t.strides = compact;
  EXPECT_EQ(from_dlpack(t).shape, (Shape{4, 6}));
  t.strides = strided;
  expect_input_error([&] { from_dlpack(t); }, "not dense row-major");
  t.strides = nullptr;
  t.dtype = {kDLInt, 32, 1};
  expect_input_error([&] { from_dlpack(t); }, "type code 0 with 32 bits");
  t.dtype = {kDLFloat, 32, 2};
  expect_input_error([&] { from_dlpack(t); }, "2 lanes");
  t.dtype = {kDLFloat, 32, 1};
  t.device = {kDLCPU, 0};
  expect_input_error([&] { from_dlpack(t); }, "device type 1");

  DLManagedTensor* m = to_dlpack({0x7f0000002000, DType::F16, {3, 5, 7}}, 1);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 1);
  EXPECT_EQ(m->dl_tensor.ndim, 3);
  EXPECT_EQ(m->dl_tensor.shape[2], 7);
  DeviceTensor back = from_dlpack(m->dl_tensor);
  EXPECT_EQ(back.ptr, 0x7f0000002000u);
  EXPECT_EQ(back.dtype, DType::F16);
  EXPECT_EQ(back.shape, (Shape{3, 5, 7}));
  m->deleter(m);
}

// The test allocates every input and output itself, fills the inputs, poisons the outputs, runs
// the plan on its own stream (twice, then once on a second stream, the workspace kernel among
// them), and reads the outputs back: the runs copy nothing through the host.
TEST(GpuRuntimeApi, RunsOnCallerBuffersAndStreams) {
  if (!testing::gpu_available()) GTEST_SKIP() << "no GPU present";
  const uint64_t seed = testing::test_seed();
  Plan plan = plan_fusion(two_kernels());
  Executable exe(plan);
  const Graph& g = exe.plan().graph;
  TensorMap host_in = random_inputs(g, seed);
  std::map<std::string, cuda::DeviceBuffer> buffers;
  DeviceTensorMap in, out;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    const TensorData& t = host_in.at(n.name);
    buffers.emplace(n.name, cuda::DeviceBuffer(t.bytes.size()));
    buffers.at(n.name).upload(t.bytes.data(), t.bytes.size());
    DLManagedTensor* view = to_dlpack({buffers.at(n.name).ptr(), n.dtype, n.shape});  // as a framework's tensor
    in[n.name] = from_dlpack(view->dl_tensor);
    view->deleter(view);
  }
  for (const GraphOutput& o : g.outputs()) {
    const Node& n = g.node(o.node);
    buffers.emplace(o.name, cuda::DeviceBuffer(static_cast<size_t>(num_elements(n.shape)) * dtype_size(n.dtype)));
    out[o.name] = {buffers.at(o.name).ptr(), n.dtype, n.shape};
  }
  cuda::Stream first, second;
  for (cuda::Stream* s : {&first, &first, &second}) {
    for (const GraphOutput& o : g.outputs()) buffers.at(o.name).fill_u8(kPoisonByte);
    const uint64_t copied = cuda::host_transfer_bytes();
    exe.run_on_device(in, out, s->get());
    s->synchronize();
    EXPECT_EQ(cuda::host_transfer_bytes(), copied) << "run_on_device copied through the host";
    TensorMap host_out;
    for (const GraphOutput& o : g.outputs()) {
      const Node& n = g.node(o.node);
      TensorData t = TensorData::zeros(n.dtype, n.shape);
      buffers.at(o.name).download(t.bytes.data(), t.bytes.size());
      host_out[o.name] = std::move(t);
    }
    CheckReport check = check_against_reference(exe.plan(), host_in, host_out);
    EXPECT_TRUE(check.ok) << "inputs seeded " << seed << ":\n" << check.text();
  }
}

// A benchmark on another GPU than the profile's says that its predicted times are the profile's
// device's; on that device, or with the profile measured on this one, it says nothing.
TEST(RuntimeApi, PredictionsForAnotherDeviceAreNamed) {
  const DeviceProfile h200;  // the defaults
  EXPECT_EQ(foreign_profile_note(h200, "NVIDIA H200"), "");
  const std::string note = foreign_profile_note(h200, "NVIDIA H100 80GB HBM3");
  EXPECT_NE(note.find("H200"), std::string::npos) << note;
  EXPECT_NE(note.find("NVIDIA H100 80GB HBM3"), std::string::npos) << note;
  EXPECT_NE(note.find("--measured-profile"), std::string::npos) << note;
  DeviceProfile measured;
  measured.name = "NVIDIA H100 80GB HBM3 (measured)";
  EXPECT_EQ(foreign_profile_note(measured, "NVIDIA H100 80GB HBM3"), "");
}

}  // namespace
}  // namespace tilefuse
