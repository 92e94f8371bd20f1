#pragma once
// An executable plan: compiled kernels (no GPU needed), and on a GPU the loaded modules and
// device buffers for inputs, intermediates and outputs. run() uploads inputs, launches the
// kernels in order and downloads the outputs; the caller's buffers are never written (a
// write_at updates the uploaded copy of its cache).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/fusion/plan.h"
#include "compiler/graph/tensor_data.h"

namespace tilefuse {

struct RunOptions {
  bool poison_outputs = true;  // fill every output and intermediate with kPoisonByte first
};

// A tensor in device memory its caller owns: a CUdeviceptr (as an integer), its dtype and shape,
// stored densely in row-major order. The plan reads or writes it in place.
struct DeviceTensor {
  uint64_t ptr = 0;
  DType dtype = DType::F32;
  Shape shape;
};
using DeviceTensorMap = std::map<std::string, DeviceTensor>;

// No computed f32/f16/bf16 value is all 0xFF bytes (hardware NaNs are canonical), so an output
// element that still is was never written.
constexpr uint8_t kPoisonByte = 0xff;
int64_t count_unwritten(const TensorData& t);

class Executable {
 public:
  explicit Executable(Plan plan, const CodegenOptions& options = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  const Plan& plan() const { return plan_; }
  const std::vector<CompiledKernel>& kernels() const { return compiled_; }
  // ptxas's registers/spills for each kernel where ptxas is present, else the driver's after load.
  MeasuredKernels measured() const;

  // GPU only (throws CudaError "no GPU present: ..." otherwise).
  TensorMap run(const TensorMap& inputs, const RunOptions& options = {});
  // Runs the plan on device memory: every graph input read from `inputs`, every graph output
  // written into `outputs` (by name), the kernels issued on `stream` (a CUstream; nullptr: the
  // executable's own) with no copy through the host and no wait — the caller synchronizes the
  // stream before reading the outputs. Intermediates live in the executable's own buffers, so its
  // runs must not overlap: a run on another stream than the last first waits for that one.
  // A write_at's cache (dsl::write_at) is updated in the caller's input memory; an output of the
  // write's result may be left out of `outputs` (else the updated cache is copied there).
  // Throws InputError, before any launch, for a missing or unknown tensor, a dtype or shape
  // other than the graph's, or a null or not 16-byte aligned pointer. GPU only.
  void run_on_device(const DeviceTensorMap& inputs, const DeviceTensorMap& outputs, void* stream = nullptr);

  // Uploads inputs once, then times `iters` launches of the whole plan after `warmup`; returns
  // the per-iteration milliseconds from CUDA events.
  std::vector<float> time(const TensorMap& inputs, int warmup, int iters);
  // As time(), with an event after each kernel: per kernel, its milliseconds in each of the
  // `iters` runs (the events cost each launch a record; the whole run is timed by time()).
  std::vector<std::vector<float>> time_kernels(const TensorMap& inputs, int warmup, int iters);
  // The host's microseconds to issue one run's launches, averaged over the last time() (the
  // per-step overhead a decode loop pays beside the kernels' time).
  double issue_us() const { return issue_us_; }

 private:
  struct Device;
  void load();
  void allocate_io();  // buffers for graph inputs and outputs, for runs from and to the host
  void upload(const TensorMap& inputs);
  // Every kernel in order on `stream`, reading and writing `at` (a node's device address: graph
  // inputs and outputs) or the executable's buffers (intermediates).
  // `after_kernel`, if given, is called with each kernel's index once it is issued.
  void launch_all(const std::map<NodeId, uint64_t>& at, void* stream,
                  const std::function<void(size_t)>& after_kernel = nullptr);
  void launch_all();
  void* last_stream_ = nullptr;  // of the last run_on_device (nullptr: the executable's own)
  double issue_us_ = 0;

  Plan plan_;
  CodegenOptions options_;
  std::vector<CompiledKernel> compiled_;
  MeasuredKernels ptxas_;
  std::unique_ptr<Device> dev_;
};

}  // namespace tilefuse
