#pragma once
// f32 math for NVPTX, built from fma/mul/add and ex2.approx/lg2.approx: LLVM has no NVPTX
// lowering for exp, erf or tanh, and tilefuse carries no device library.
#include <llvm/IR/IRBuilder.h>

#include "compiler/graph/graph.h"

namespace tilefuse::math {

// Every function here is within a few ulp of float64 over all f32 inputs (GpuMath tests the
// bounds on the GPU) with NaN, ±inf and ±0 as C's; the *_16bit forms are for results rounded to
// bf16/f16 and are within a fraction of their ulp.
llvm::Value* exp(llvm::IRBuilder<>& b, llvm::Value* x);
// e^x for x ≤ 0 (softmax's x − max x, e^-|x|): ≤ 2.4 ulp in 9 instructions with one ex2.approx,
// where exp takes about 19; results below 2^-125 (x < −86.9, −inf included) are 0.
llvm::Value* exp_nonpositive(llvm::IRBuilder<>& b, llvm::Value* x);
// e^x for a result rounded to bf16/f16: ex2.approx(x·log2 e), relative error ≤ 2^-22 + |x|·2^-24
// (about 6e-6 at |x| = 100), far below half an f16 ulp, in two instructions.
llvm::Value* exp_16bit(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* exp2(llvm::IRBuilder<>& b, llvm::Value* x);
// 2^x by ex2.approx.ftz: one MUFU instruction (ex2.approx keeps subnormals in four), subnormal
// results 0 — for a result rounded to bf16/f16, or an online softmax's terms (tile/ir.h).
llvm::Value* exp2_ftz(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* log(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* erf(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* erf_bf16(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* tanh(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* tanh_16bit(llvm::IRBuilder<>& b, llvm::Value* x);
// tanh where only the absolute error counts (an attention score that shifts an exponent whose
// term is rounded to 16 bits, tile/ir.h Inst::absolute_error): (1 − t)/(1 + t) with t = e^-2|x| by
// ex2.approx.ftz over the whole range, sign restored. Absolute error ≤ 2^-20 (GpuMath measures
// it); near 0 the relative error is not bounded. 7 instructions, two on the MUFU pipe, where tanh
// takes about 25.
llvm::Value* tanh_absolute(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* sigmoid(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* sigmoid_16bit(llvm::IRBuilder<>& b, llvm::Value* x);
// rcp.approx.ftz: 1 ulp for 2^-126 ≤ |x| < 2^126 (callers keep x in [1, 2]).
llvm::Value* reciprocal(llvm::IRBuilder<>& b, llvm::Value* x);
// rsqrt.approx and sqrt.approx (MUFU with the range fix-ups; no IEEE rounding sequence).
llvm::Value* rsqrt(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* sqrt(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);
// GELU for a result that is rounded to `dtype`, bf16 or f16: relative error ≤ 4.1e-4 for bf16 (a
// fifth of half a bf16 ulp), ≤ 5e-5 for f16 (a tenth of half an f16 ulp), in about a third of the
// instructions of the erf form.
llvm::Value* gelu_16bit(llvm::IRBuilder<>& b, llvm::Value* x, DType dtype);

}  // namespace tilefuse::math
