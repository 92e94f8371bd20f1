#pragma once
// One element of an elementwise graph op in LLVM IR, in compute precision (f32; i1 for bool),
// and the conversions between storage and compute precision. Shared by every lowering.
#include <llvm/IR/IRBuilder.h>

#include <vector>

#include "compiler/graph/graph.h"

namespace tilefuse {

llvm::Type* storage_type(llvm::IRBuilder<>& b, DType t);
// A stored value in compute precision (16-bit → f32, bool → i1), and back (rounding to 16 bits).
llvm::Value* to_compute(llvm::IRBuilder<>& b, llvm::Value* v, DType t);
llvm::Value* to_storage(llvm::IRBuilder<>& b, llvm::Value* v, DType t);
// A constant of dtype t in compute precision: rounded to t first, as a stored value would be.
llvm::Value* compute_constant(llvm::IRBuilder<>& b, double v, DType t);

// `op` on one element; `dtype` is the result's (16-bit results take the short exp and GELU);
// `nonpositive_arg`: an exp's argument is never positive (compiler/graph/sign.h), so the short f32
// exp serves; `absolute_error`: only a tanh's absolute error counts (math::tanh_absolute). Throws
// CodegenError naming `kernel` for an op that is not elementwise.
llvm::Value* element(llvm::IRBuilder<>& b, Op op, DType dtype, const std::vector<llvm::Value*>& args,
                     const std::string& kernel, bool nonpositive_arg = false, bool absolute_error = false);

}  // namespace tilefuse
