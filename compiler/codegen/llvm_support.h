#pragma once
// Pieces of LLVM IR construction every lowering shares: a guarded region, an f32 in a register of
// its own, and the finished module checked by LLVM's verifier.
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <memory>
#include <string>

namespace tilefuse {

// Runs `body` only where `cond` holds (nullptr: always): a branch around what body emits.
template <typename F>
void guarded(llvm::IRBuilder<>& b, llvm::Function* fn, llvm::Value* cond, F body) {
  if (!cond) return body();
  auto* then = llvm::BasicBlock::Create(b.getContext(), "store", fn);
  auto* cont = llvm::BasicBlock::Create(b.getContext(), "stored", fn);
  b.CreateCondBr(cond, then, cont);
  b.SetInsertPoint(then);
  body();
  b.CreateBr(cont);
  b.SetInsertPoint(cont);
}

// An element of a vector load used by thousands of fused nodes slowed instruction selection
// quadratically: its FP combines ask whether each operand has one use, which walks the
// multi-result load's whole use list, and MachineCSE then clears kill flags over every use of
// each copy it merges (a 4,000-node chain compiled in 2.8 s; a freeze still took 1.0). An opaque
// move gives the element one register of its own; ptxas removes the move. The same move keeps
// LLVM from merging what is computed from x with what was computed from x itself (an f32, i32
// or i64 value).
llvm::Value* own_register(llvm::IRBuilder<>& b, llvm::Value* x);

// A tensor's vec elements (of type ty, `size` bytes each; `total` in the tensor) from element
// `first` on, at any alignment (an i64 that is negative or past the tensor only for elements the
// caller does not use): the two aligned vectors at and after first's, joined and shifted in
// 32-bit words (a funnel shift for a 16-bit element's half word), instead of a 2-byte load per
// element, each of which costs a warp four L1 wavefronts. Where the two vectors do not both lie
// in the tensor: each whole where it does, zero where it lies outside, and the tensor's partial
// last vector element by element. vec·size a multiple of 4.
llvm::Value* unaligned_vector(llvm::IRBuilder<>& b, llvm::Function* fn, llvm::Value* base, llvm::Type* ty,
                              int64_t size, int64_t total, llvm::Value* first, int64_t vec, const std::string& name);

// The module of kernel `kernel` once LLVM's verifier accepts it; CodegenError otherwise.
std::unique_ptr<llvm::Module> verified(std::unique_ptr<llvm::Module> m, const std::string& kernel);

}  // namespace tilefuse
