#pragma once
// cuBLASLt, the vendor GEMM the plan prices against its own (compiler/fusion/library_gemm.h):
// libcublasLt.so.13 is opened with dlopen on first use, like libcuda, so nothing links against
// it and a machine without it is told so (TILEFUSE_CUBLASLT names it where the loader does not
// find it, e.g. a pip wheel's nvidia/cu13/lib/libcublasLt.so.13). Row-major operands, f32 accumulation, and cuBLASLt's
// native epilogues (bias over the product's columns, then ReLU or the tanh GELU).
#include <cuda.h>

#include <cstdint>
#include <string>

#include "compiler/fusion/library_gemm.h"
#include "compiler/fusion/plan.h"

namespace tilefuse::cublaslt {

// True when a GPU is present and libcublasLt.so.13 loads with every entry point used here;
// otherwise `why` (if given) says what is missing.
bool available(std::string* why = nullptr);

// C[b, m, n] = epilogue(A[b, m, k] · B[b, k, n] + bias[n]) for b < batch, each matrix row-major
// and contiguous, batches one after another (the layouts: LibraryGemmShape); the bias of C's
// dtype.
struct Gemm : LibraryGemmShape {
  LibraryEpilogue epilogue = LibraryEpilogue::None;
};

// Runs it on `stream` with cuBLASLt's first heuristic choice (in a workspace of 32 MiB per
// stream, kept for the process). Throws CudaError naming the call and cuBLASLt's status, or Error for a shape
// or dtype cuBLASLt is not asked to take here.
void run(const Gemm& g, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr c, CUstream stream);

}  // namespace tilefuse::cublaslt
