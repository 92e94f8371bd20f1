#pragma once
// tilefuse's public API in one header: the DSL that builds graphs, planning with its fusion
// decisions and reports, compiling kernels to PTX, running a plan on the GPU, and checking its
// outputs against the float64 reference. Needs neither LLVM's nor CUDA's headers.
//
//   #include <tilefuse/tilefuse.h>
//   using namespace tilefuse;
//   using namespace tilefuse::dsl;
//
//   Graph g("bias_gelu");
//   Tensor x = input(g, "x", {8192, 8192});
//   output("y", gelu(x + input(g, "b", {8192})));
//   Plan plan = plan_fusion(g);                       // one kernel, and why
//   std::string report = plan_report_text(plan);
//   Executable exe(plan);                             // compiled (PTX) here
//   TensorMap out = exe.run(random_inputs(g, 1));     // on a GPU
#include "compiler/codegen/compile.h"
#include "compiler/codegen/disk_cache.h"
#include "compiler/codegen/target.h"
#include "compiler/dsl/autodiff.h"
#include "compiler/dsl/dsl.h"
#include "compiler/fusion/fusion.h"
#include "compiler/fusion/iteration_space.h"
#include "compiler/fusion/plan_check.h"
#include "compiler/fusion/report.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/reference.h"
#include "compiler/graph/tensor_data.h"
#include "compiler/support/dump.h"
#include "compiler/support/error.h"
#include "dsl_examples/examples.h"
#include "runtime/check.h"
#include "runtime/device_probe.h"
#include "runtime/executable.h"
#include "tools/tilefuse/cli.h"
