#pragma once
// f32 math for NVPTX, built from fma/mul/add and ex2.approx/lg2.approx: LLVM has no NVPTX
// lowering for exp, erf or tanh, and tilefuse carries no device library.
#include <llvm/IR/IRBuilder.h>

namespace tilefuse::math {

llvm::Value* exp(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* exp2(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* log(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* erf(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* tanh(llvm::IRBuilder<>& b, llvm::Value* x);
llvm::Value* pow(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y);

}  // namespace tilefuse::math
