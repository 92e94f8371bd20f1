#pragma once
// The vendor GEMM a fused matmul gives up, priced (DESIGN.md, "Matmul and the library GEMM").
// For every matmul kernel of a plan, three ways to compute it and its epilogue chain E:
//   (i)   the library GEMM (cuBLASLt) writing the product, then E as a kernel of its own;
//   (ii)  the library GEMM with its native epilogue, where E is one (bias, then ReLU or the tanh
//         GELU — cuBLASLt's GELU epilogue is the tanh form, so it cannot stand in for erf GELU);
//   (iii) tilefuse's own GEMM with E fused (what the plan's kernel is).
// The library's time is its measured throughput (DeviceProfile::bf16_matmul_flops, cuBLAS at
// 8192³) over the shape's flops, with the tile waves the shape leaves partly empty, or its bytes
// at copy bandwidth where those take longer.
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

// Whether the runtime can launch the library GEMM (options (i) and (ii)): not yet, so the plan
// keeps (iii) and says what that costs.
constexpr bool kLibraryGemmRuns = false;

std::vector<GemmChoice> price_library_gemm(const Plan& plan);

}  // namespace tilefuse
