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
// move gives the element one register of its own; ptxas removes the move.
llvm::Value* own_register(llvm::IRBuilder<>& b, llvm::Value* f32);

// The module of kernel `kernel` once LLVM's verifier accepts it; CodegenError otherwise.
std::unique_ptr<llvm::Module> verified(std::unique_ptr<llvm::Module> m, const std::string& kernel);

}  // namespace tilefuse
