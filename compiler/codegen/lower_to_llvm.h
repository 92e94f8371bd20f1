#pragma once
// Tile IR → LLVM IR for nvptx64-nvidia-cuda. Tiles become per-thread register arrays (fully
// unrolled, indexed only by compile-time constants); loads and stores are 16-byte vectors where
// the schedule's vector width allows.
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <memory>

#include "compiler/tile/tile_ir.h"

namespace tilefuse {

std::unique_ptr<llvm::Module> lower_to_llvm(const TileProgram& p, llvm::LLVMContext& ctx);

}  // namespace tilefuse
