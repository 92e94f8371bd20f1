#pragma once
// Tile IR v2 → LLVM IR for nvptx64-nvidia-cuda, one lowering per instruction.
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>

#include "compiler/tile/ir.h"

namespace tilefuse {

std::unique_ptr<llvm::Module> emit_program(const tir::Program& p, llvm::LLVMContext& ctx);

}  // namespace tilefuse
