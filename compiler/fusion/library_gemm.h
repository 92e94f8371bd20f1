#pragma once
// The vendor GEMM a fused matmul gives up, priced (DESIGN.md, "Matmul and the library GEMM").
// For every matmul kernel of a plan, three ways to compute it and its epilogue chain E:
//   (i)   the library GEMM (cuBLASLt) writing the product, then E as a kernel of its own;
//   (ii)  the library GEMM with its native epilogue, where E is one (bias, then ReLU or the tanh
//         GELU — cuBLASLt's GELU epilogue is the tanh form, so it cannot stand in for erf GELU);
//   (iii) tilefuse's own GEMM with E fused (what the plan's kernel is).
// The library's time is its throughput over the shape's flops, or its bytes at copy bandwidth
// where those take longer: the rate the runtime measured for this shape on this device
// (DeviceProfile::library_gemm_flops, by LibraryGemmShape::key; runtime/device_probe.h), or else
// the H200's measured constants (bf16_matmul_flops, cuBLAS at 8192³; bf16_matmul_unaligned_flops
// where a leading dimension is not whole 16-byte chunks) with the tile waves the shape leaves
// partly empty.
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

// A matmul as cuBLASLt runs it (runtime/cublaslt.h): C[b, m, n] = A[b, m, k] · B[b, k, n] for
// b < batch, row-major; `transpose_a`: A stored as [b, k, m]; `transpose_b`: B as [b, n, k];
// `shared_a`, `shared_b`: one A, or one B, for every batch (a weight).
struct LibraryGemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false, shared_a = false, shared_b = false;
  DType dtype = DType::BF16;  // of A, B and C: bf16 or f16
  // E.g. "bf16 1x16384x4096x1024 nn": DeviceProfile::library_gemm_flops's key ("t" for a
  // transposed operand, "s" after it for one shared by the batches).
  std::string key() const;
};
// Matmul node mm's shape as cuBLASLt would run it (its operands per batch or shared by all:
// what price_library_gemm offers the library).
LibraryGemmShape library_gemm_shape(const Graph& g, const Node& mm);

// Why cuBLASLt is not offered matmul mm (an operand broadcast along some batch axes but not
// others; dtypes other than one 16-bit dtype throughout); empty where it is.
std::string library_cannot_run(const Graph& g, const Node& mm);

// Fills plan.gemm_choices for every matmul kernel; with FusionOptions::library_gemm, replaces
// each by its fastest option — cuBLASLt kernels (Kernel::library) where the library is predicted
// faster — and renames the kernels in their new order. Without it the plan keeps its own GEMMs
// and each choice says what that loses. Sets library_gemm_lost on the decisions that fused a
// matmul into a kernel tilefuse generates.
void price_library_gemm(Plan& plan);

// The library's bf16 throughput for matmul kernel k from the profile's constants: the
// unaligned rate where a leading dimension of A, B or the product is not a multiple of 8
// elements. (A rate measured for the shape takes precedence in the plans' pricing.)
double library_flops_rate(const Graph& g, const Kernel& k, const DeviceProfile& p);

}  // namespace tilefuse
