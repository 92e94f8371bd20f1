#pragma once
// Plan kernel → Tile IR → LLVM IR → O3 → PTX, cached by a hash of the Tile IR, the options and
// the toolchain version.
#include <string>
#include <vector>

#include "compiler/codegen/target.h"
#include "compiler/fusion/plan.h"
#include "compiler/fusion/report.h"

namespace tilefuse {

namespace tir {
struct Program;  // compiler/tile/ir.h
}

// A TMA tensor map the runtime encodes for a kernel parameter at each launch
// (cuTensorMapEncodeTiled, 128-byte swizzle, zeros out of bounds) and passes after the tensors
// and the workspace: `tensor` indexes the kernel's tensors (inputs, then outputs); dims and
// box are innermost first, strides in bytes for dims 1 and 2.
struct TensorMapSpec {
  unsigned tensor = 0;
  DType dtype = DType::BF16;  // bf16 or f16 (TMA rings), or f32 (a stored output, a workspace's sums)
  uint64_t dims[3] = {1, 1, 1};
  uint64_t strides[2] = {0, 0};
  unsigned box[3] = {1, 1, 1};
};
struct CompiledKernel {
  std::string name;
  std::string tile_ir;
  std::string llvm_ir;  // after O3; empty unless TILEFUSE_DUMP names llvm (printing it is slow)
  std::string ptx;
  unsigned block_threads = 0;
  uint64_t grid = 0;            // blocks the tiles need
  unsigned cluster_blocks = 1;  // > 1: launched as clusters of this many blocks along x
  unsigned dynamic_shared_bytes = 0;
  // Loops over its row tiles: launch only as many blocks (clusters) as the device holds at
  // once, at most `grid`.
  bool persistent = false;
  // Global memory zeroed once and kept between launches, passed after the tensors with the
  // launch's epoch (launch n, from 1, passes n): for split rows, each part's (max, sum) pair as
  // two 8-byte words stamped with the epoch; for claimed rows, the row counter and the count of
  // finished blocks, which the last block to finish zeroes again. So launches of one kernel
  // must not overlap (the runtime issues them on one stream).
  uint64_t workspace_bytes = 0;
  // The grid must be co-resident (a cooperative launch): split rows' blocks wait for each other.
  bool cooperative = false;
  bool from_cache = false;  // from memory or from the disk cache
  // cuBLASLt computes it (Kernel::library): no Tile IR program, no PTX; the runtime calls the
  // library (runtime/cublaslt.h).
  bool library = false;
  std::vector<TensorMapSpec> tensor_maps;  // in parameter order
};
// The tensor maps a Tile IR program's TMA copies read or write (Param::tma_rows), in parameter order.
std::vector<TensorMapSpec> tensor_maps_of(const tir::Program& p);

// Compiles through LLVM, or takes the kernel from this process's memory or from the disk cache
// (compiler/codegen/disk_cache.h) where the same Tile IR was compiled for the same target by the
// same compiler before.
CompiledKernel compile_kernel(const Graph& g, const Kernel& k, const CodegenOptions& opt = {});

// This process's compile_kernel outcomes so far.
struct CompileCounts {
  int64_t compiled = 0;  // through LLVM
  int64_t from_disk = 0;
  int64_t from_memory = 0;
  // Milliseconds the kernels compiled through LLVM spent in each phase, summed: the Tile IR
  // program built from the plan kernel, its LLVM IR emitted, O3, the NVPTX backend.
  double build_ms = 0, emit_ms = 0, optimize_ms = 0, ptx_ms = 0;
};
CompileCounts compile_counts();
// Empties this process's in-memory cache (the disk cache stays): the next compiles of the same
// kernels come from the disk, or from LLVM.
void forget_compiled_in_memory();

// A Tile IR v2 program through LLVM to PTX, uncached (a program built outside a plan).
std::string program_ptx(const tir::Program& p, const CodegenOptions& opt = {});

// TILEFUSE_PTXAS, else /usr/local/cuda/bin/ptxas, else ptxas on PATH; empty when there is none.
std::string find_ptxas();

// What ptxas -v printed for a kernel: its registers, spilled bytes and performance notes.
MeasuredKernel ptxas_report(const std::string& ptxas_output);

// ptxas -arch=<sm> -v on the PTX, when find_ptxas() finds one. Returns nullopt when there is none; throws
// CodegenError with ptxas's message when it rejects the PTX.
std::optional<MeasuredKernel> run_ptxas(const std::string& ptx, const std::string& kernel,
                                        const CodegenOptions& opt = {});

}  // namespace tilefuse
