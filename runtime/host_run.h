#pragma once
// A plan run on the host: each kernel's Tile IR v2 program interpreted (compiler/tile/
// interpret.h) over host memory, in order, as Executable::run launches them on a GPU — outputs
// and intermediates poisoned first, a matmul operand copied into its padded pitch by the copy
// kernel's program, a persistent grid launched with a few blocks, a cuBLASLt kernel stood in
// for by the float64 reference of its nodes. It checks what the passes build against the
// float64 reference (runtime/check.h) where no GPU is present; it does not check codegen.
#include <cstdint>
#include <string>

#include "compiler/fusion/plan.h"
#include "compiler/graph/tensor_data.h"

namespace tilefuse {

struct HostRunOptions {
  // Blocks of a persistent grid (claimed rows: NumPrograms), at most its grid; a cluster's
  // program launches whole clusters, at least one; split rows at least a row's parts.
  int64_t persistent_blocks = 3;
};

// Why `plan` cannot run on the host — a kernel whose program the interpreter refuses
// (tir::not_interpretable) — or "" where it can.
std::string host_run_refusal(const Plan& plan);

// The graph's outputs. Throws UnsupportedError where host_run_refusal says so, Error where a
// program's access leaves its memory.
TensorMap run_on_host(const Plan& plan, const TensorMap& inputs, const HostRunOptions& options = {});

}  // namespace tilefuse
