#include "compiler/codegen/llvm_support.h"

#include <fmt/format.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "compiler/support/error.h"

namespace tilefuse {

llvm::Value* own_register(llvm::IRBuilder<>& b, llvm::Value* x) {
  auto* ty = llvm::FunctionType::get(b.getFloatTy(), {b.getFloatTy()}, false);
  return b.CreateCall(llvm::InlineAsm::get(ty, "mov.b32 $0, $1;", "=f,f", false), {x});
}

std::unique_ptr<llvm::Module> verified(std::unique_ptr<llvm::Module> m, const std::string& kernel) {
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*m, &os))
    throw CodegenError(fmt::format("kernel {}: generated LLVM IR is invalid: {}", kernel, err));
  return m;
}

}  // namespace tilefuse
