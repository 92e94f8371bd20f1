#pragma once
// The vendor GEMM a fused matmul gives up, priced (DESIGN.md, "Matmul and the library GEMM").
// For every matmul kernel of a plan, three ways to compute it and its epilogue chain E:
//   (i)   the library GEMM (cuBLASLt) writing the product, then E as a kernel of its own;
//   (ii)  the library GEMM with its native epilogue, where E is one (bias, then ReLU or the tanh
//         GELU — cuBLASLt's GELU epilogue is the tanh form, so it cannot stand in for erf GELU);
//   (iii) tilefuse's own GEMM with E fused (what the plan's kernel is).
// The library's time is its measured throughput (DeviceProfile::bf16_matmul_flops, cuBLAS at
// 8192³; bf16_matmul_unaligned_flops where a leading dimension is not whole 16-byte chunks) over
// the shape's flops, with the tile waves the shape leaves partly empty, or its bytes at copy
// bandwidth where those take longer.
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

// Fills plan.gemm_choices for every matmul kernel; with FusionOptions::library_gemm, replaces
// each by its fastest option — cuBLASLt kernels (Kernel::library) where the library is predicted
// faster — and renames the kernels in their new order. Without it the plan keeps its own GEMMs
// and each choice says what that loses. Sets library_gemm_lost on the decisions that fused a
// matmul into a kernel tilefuse generates.
void price_library_gemm(Plan& plan);

// The library's bf16 throughput for matmul kernel k: the unaligned rate where a leading
// dimension of A, B or the product is not a multiple of 8 elements.
double library_flops_rate(const Graph& g, const Kernel& k, const DeviceProfile& p);

}  // namespace tilefuse
