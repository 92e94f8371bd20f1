#pragma once
// f32 math for NVPTX, built from fma/mul/add and ex2.approx/lg2.approx: LLVM has no NVPTX
// lowering for exp, erf or tanh, and tilefuse carries no device library.
#include <llvm/IR/IRBuilder.h>

namespace tilefuse::math {

llvm::Value* exp(llvm::IRBuilder<>& b, llvm::Value* x);
// e^x for x ≤ 0 (softmax's x − max x): ≤ 2.4 ulp in 8 instructions with one ex2.approx, where
// exp takes about 25; results below 2^-125 (x < −86.9, −inf included) are 0. NaN stays NaN.
llvm::Value* exp_nonpositive(llvm::IRBuilder<>& b, llvm::Value* x);
// e^x for a result rounded to bf16/f16: ex2.approx(x·log2 e), relative error ≤ 2^-22 + |x|·2^-24
// (about 6e-6 at |x| = 100), far below half an f16 ulp, in two instructions.
llvm::Value* exp_16bit(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* exp2(llvm::IRBuilder<>& b, llvm::Value* x);
// 2^x for a result rounded to bf16/f16: ex2.approx.ftz (subnormal results of f32 are 0).
llvm::Value* exp2_16bit(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* log(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* erf(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* tanh(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);
// GELU for a result that is rounded to bf16/f16: relative error ≤ 4e-6 (far below half an f16
// ulp, 4.9e-4) in about half the instructions of the f32-accurate erf form.
llvm::Value* gelu_16bit(llvm::IRBuilder<>& b, llvm::Value* x);

}  // namespace tilefuse::math
