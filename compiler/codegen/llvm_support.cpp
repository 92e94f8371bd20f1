#include "compiler/codegen/llvm_support.h"

#include <fmt/format.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "compiler/support/error.h"

namespace tilefuse {

llvm::Value* own_register(llvm::IRBuilder<>& b, llvm::Value* x) {
  llvm::Type* t = x->getType();
  const bool wide = t->isIntegerTy(64);
  auto* ty = llvm::FunctionType::get(t, {t}, false);
  return b.CreateCall(llvm::InlineAsm::get(ty, wide ? "mov.b64 $0, $1;" : "mov.b32 $0, $1;",
                                           t->isFloatTy() ? "=f,f" : wide ? "=l,l" : "=r,r", false),
                      {x});
}

llvm::Value* unaligned_vector(llvm::IRBuilder<>& b, llvm::Function* fn, llvm::Value* base, llvm::Type* ty,
                              int64_t size, int64_t total, llvm::Value* first, int64_t vec, const std::string& name) {
  using llvm::Value;
  llvm::LLVMContext& ctx = b.getContext();
  auto* vty = llvm::FixedVectorType::get(ty, static_cast<unsigned>(vec));
  const int words = static_cast<int>(vec * size / 4);
  auto* wty = llvm::FixedVectorType::get(b.getInt32Ty(), static_cast<unsigned>(words));
  Value* aligned = b.CreateAnd(first, b.getInt64(-vec));
  Value* inside = b.CreateAnd(b.CreateICmpSGE(aligned, b.getInt64(0)),
                               b.CreateICmpSLE(aligned, b.getInt64(total - 2 * vec)));
  Value* at = b.CreateGEP(ty, base, aligned);  // may lie before the tensor: only the vectors' start
  auto* whole = llvm::BasicBlock::Create(ctx, "shifted_vectors", fn);
  auto* parts = llvm::BasicBlock::Create(ctx, "shifted_elements", fn);
  auto* done = llvm::BasicBlock::Create(ctx, "shifted_loaded", fn);
  auto* pair_ty = llvm::FixedVectorType::get(ty, static_cast<unsigned>(2 * vec));
  b.CreateCondBr(inside, whole, parts, llvm::MDBuilder(ctx).createLikelyBranchWeights());
  b.SetInsertPoint(whole);
  Value* lo = b.CreateAlignedLoad(vty, at, llvm::Align(size * vec), name);
  Value* hi = b.CreateAlignedLoad(vty, b.CreateGEP(ty, at, b.getInt64(vec)), llvm::Align(size * vec), name);
  std::vector<int> both_halves(static_cast<size_t>(2 * vec));
  for (size_t j = 0; j < both_halves.size(); ++j) both_halves[j] = static_cast<int>(j);
  Value* from_vectors = b.CreateShuffleVector(lo, hi, both_halves);
  b.CreateBr(done);
  // At the tensor's ends: each of the two vectors whole where it lies in the tensor (elsewhere
  // its load's address is the tensor's start and its words zero), and the tensor's last, partial
  // vector (total not a multiple of vec) from its elements one at a time — addresses that every
  // thread shares, so a warp at a row's end issues a few dozen instructions, not a predicated
  // load per element of both vectors.
  b.SetInsertPoint(parts);
  const int64_t tail_at = total / vec * vec;
  Value* tail = llvm::Constant::getNullValue(vty);
  for (int64_t j = 0; tail_at + j < total; ++j)
    tail = b.CreateInsertElement(
        tail,
        b.CreateAlignedLoad(ty, b.CreateGEP(ty, base, b.getInt64(tail_at + j)), llvm::Align(size), name),
        static_cast<uint64_t>(j));
  Value* no_words = llvm::Constant::getNullValue(wty);
  auto vector_at = [&](Value* start) {
    Value* words_v = no_words;
    if (total >= vec) {  // (a tensor shorter than a vector has its one partial vector only)
      Value* whole_in =
          b.CreateAnd(b.CreateICmpSGE(start, b.getInt64(0)), b.CreateICmpSLE(start, b.getInt64(total - vec)));
      Value* v =
          b.CreateAlignedLoad(vty, b.CreateGEP(ty, base, b.CreateSelect(whole_in, start, b.getInt64(0))),
                              llvm::Align(size * vec), name);
      words_v = b.CreateSelect(whole_in, b.CreateBitCast(v, wty), no_words);
    }
    if (tail_at < total)
      words_v =
          b.CreateSelect(b.CreateICmpEQ(start, b.getInt64(tail_at)), b.CreateBitCast(tail, wty), words_v);
    return b.CreateBitCast(words_v, vty);
  };
  Value* from_elements = b.CreateShuffleVector(vector_at(aligned),
                                               vector_at(b.CreateAdd(aligned, b.getInt64(vec))), both_halves);
  llvm::BasicBlock* parts_end = b.GetInsertBlock();
  b.CreateBr(done);
  b.SetInsertPoint(done);
  llvm::PHINode* pair = b.CreatePHI(pair_ty, 2);
  pair->addIncoming(from_vectors, whole);
  pair->addIncoming(from_elements, parts_end);
  Value* as_words = b.CreateBitCast(pair, llvm::FixedVectorType::get(b.getInt32Ty(), static_cast<unsigned>(2 * words)));
  std::vector<Value*> w;  // the two vectors' words, lowest address first
  for (int j = 0; j < 2 * words; ++j) w.push_back(b.CreateExtractElement(as_words, static_cast<uint64_t>(j)));
  // The shift in bytes: whole words by a barrel of selects, then the rest by a funnel shift.
  Value* bytes = b.CreateMul(b.CreateTrunc(b.CreateSub(first, aligned), b.getInt32Ty()),
                              b.getInt32(static_cast<uint32_t>(size)));
  Value* word_shift = b.CreateLShr(bytes, b.getInt32(2));
  for (size_t step = 1; step < static_cast<size_t>(words); step *= 2) {
    Value* take = b.CreateICmpNE(b.CreateAnd(word_shift, b.getInt32(static_cast<uint32_t>(step))), b.getInt32(0));
    for (size_t j = 0; j + step < w.size(); ++j) w[j] = b.CreateSelect(take, w[j + step], w[j]);
  }
  Value* bits = b.CreateShl(b.CreateAnd(bytes, b.getInt32(3)), b.getInt32(3));
  Value* out = llvm::PoisonValue::get(wty);
  for (size_t j = 0; j < static_cast<size_t>(words); ++j)
    out = b.CreateInsertElement(out, b.CreateIntrinsic(b.getInt32Ty(), llvm::Intrinsic::fshr, {w[j + 1], w[j], bits}), j);
  return b.CreateBitCast(out, vty);
}

std::unique_ptr<llvm::Module> verified(std::unique_ptr<llvm::Module> m, const std::string& kernel) {
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(*m, &os))
    throw CodegenError(fmt::format("kernel {}: generated LLVM IR is invalid: {}", kernel, err));
  return m;
}

}  // namespace tilefuse
