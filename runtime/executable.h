#pragma once
// An executable plan: compiled kernels (no GPU needed), and on a GPU the loaded modules and
// device buffers for inputs, intermediates and outputs. run() uploads inputs, launches the
// kernels in order and downloads the outputs; the caller's buffers are never written.
#include <map>
#include <memory>
#include <vector>

#include "compiler/codegen/compile.h"
#include "compiler/fusion/plan.h"
#include "compiler/graph/tensor_data.h"

namespace tilefuse {

struct RunOptions {
  bool poison_outputs = true;  // fill every output and intermediate with kPoisonByte first
};

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
  // Uploads inputs once, then times `iters` launches of the whole plan after `warmup`; returns
  // the per-iteration milliseconds from CUDA events.
  std::vector<float> time(const TensorMap& inputs, int warmup, int iters);

 private:
  struct Device;
  void load();
  void upload(const TensorMap& inputs);
  void launch_all();

  Plan plan_;
  CodegenOptions options_;
  std::vector<CompiledKernel> compiled_;
  MeasuredKernels ptxas_;
  std::unique_ptr<Device> dev_;
};

}  // namespace tilefuse
