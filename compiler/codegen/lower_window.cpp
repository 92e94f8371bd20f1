// Windowed rows (TileSchedule::window): a row whose width is not a multiple of the vector width
// starts `shift` = (row · cols) mod vec elements into an aligned vector. The threads take the
// aligned vectors from that one on, so every tensor laid out like the domain is read with 16-byte
// loads; an element of the window lies in the row when its window column minus the shift is in
// [0, cols). Reductions skip the others, stores write only them (whole vectors where every element
// is the row's, element by element at the row's two ends), and tensors laid out otherwise (a weight
// along the row) are read element by element at the element's column.
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/MDBuilder.h>

#include "compiler/codegen/lowering.h"

namespace tilefuse {

void Lowering::window_columns(Value* col0) {
  Value* start = b_.CreateMul(b_.CreateZExt(rows_[0], b_.getInt64Ty()), b_.getInt64(s_.cols), "row_elem", true, true);
  Value* shift64 = b_.CreateAnd(start, b_.getInt64(s_.vec - 1));
  row_shift_ = b_.CreateTrunc(shift64, index_ty(), "shift");
  row_start_ = b_.CreateSub(start, shift64, "row_start", true, true);
  window0_ = col0;
  if (s_.chunks_per_thread * s_.vec > 32)
    throw CodegenError(fmt::format("kernel {}: a windowed row holds at most 32 elements per thread", p_.name));
  // Chunk k's elements in the row are one run, [lo, hi) with lo = clamp(shift − window(k)) and
  // hi = shift + cols − window(k), both clamped to [0, vec]: its bits are 2^hi − 2^lo.
  window_bits_ = b_.getInt32(0);
  auto clamped = [&](Value* x) {
    Value* in = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, index(0)),
                                         index(s_.vec));
    return b_.CreateTrunc(in, b_.getInt32Ty());
  };
  for (int k = 0; k < s_.chunks_per_thread; ++k) {
    Value* lo = clamped(b_.CreateSub(row_shift_, window(k)));
    Value* hi = clamped(b_.CreateSub(b_.CreateAdd(row_shift_, index(s_.cols)), window(k)));
    Value* run = b_.CreateSub(b_.CreateShl(b_.getInt32(1), hi), b_.CreateShl(b_.getInt32(1), lo));
    window_bits_ = b_.CreateOr(window_bits_, b_.CreateShl(run, static_cast<uint64_t>(k * s_.vec)));
  }
}

Value* Lowering::whole_window() {
  const int n = s_.chunks_per_thread * s_.vec;
  return b_.CreateICmpEQ(window_bits_, b_.getInt32(n == 32 ? 0xffffffffu : (1u << n) - 1));
}

Value* Lowering::in_row(int k, int e) {
  // The bits through an opaque move: LLVM would otherwise fold the tests of every use into one
  // value per element, live from the first reduction to the last store.
  auto* ty = llvm::FunctionType::get(b_.getInt32Ty(), {b_.getInt32Ty()}, false);
  Value* bits = b_.CreateCall(llvm::InlineAsm::get(ty, "mov.b32 $0, $1;", "=r,r", false), {window_bits_});
  return b_.CreateICmpNE(b_.CreateAnd(bits, b_.getInt32(1u << (k * s_.vec + e))), b_.getInt32(0));
}

Value* Lowering::unaligned_vector(int param, Value* first, const std::string& name) {
  const TileParam& prm = p_.params[static_cast<size_t>(param)];
  return tilefuse::unaligned_vector(b_, fn_, fn_->getArg(static_cast<unsigned>(param)), storage_type(prm.dtype),
                                    static_cast<int64_t>(dtype_size(prm.dtype)), num_elements(prm.view), first, s_.vec,
                                    name);
}

void Lowering::load_window(const TileInst& i) {
  const TileParam& prm = p_.params[i.param];
  llvm::Type* ty = storage_type(prm.dtype);
  Value* base = fn_->getArg(i.param);
  const bool vectors = i.type.rows && laid_out_as_domain(prm.view) && prm.view.back() == s_.cols;
  const uint64_t total = static_cast<uint64_t>(num_elements(prm.view));
  const bool wide = widely_used(i.result);
  Regs regs;
  for (int k = 0; k < s_.chunks_per_thread; ++k) {
    const std::string name = fmt::format("{}.w{}", sanitize(prm.name), k);
    if (!vectors && prm.view.back() == s_.cols && dtype_size(prm.dtype) * s_.vec % 4 == 0) {
      // Along the row but not laid out like the domain (a weight shared by every row): its
      // elements start at another alignment than the row's, so two aligned vectors shifted.
      Value* first = b_.CreateSub(b_.CreateAdd(row_offset(prm.view, i.type.rows, 0), b_.CreateZExt(window(k), b_.getInt64Ty())),
                                  b_.CreateZExt(row_shift_, b_.getInt64Ty()));
      auto* some = llvm::BasicBlock::Create(ctx_, "shifted", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "shifted_done", fn_);
      llvm::BasicBlock* none = b_.GetInsertBlock();
      b_.CreateCondBr(window_any(k), some, done);  // nothing for the threads past the row's end
      b_.SetInsertPoint(some);
      Value* loaded = unaligned_vector(i.param, first, name);
      llvm::BasicBlock* from = b_.GetInsertBlock();
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      llvm::PHINode* v = b_.CreatePHI(loaded->getType(), 2);
      v->addIncoming(llvm::Constant::getNullValue(loaded->getType()), none);
      v->addIncoming(loaded, from);
      for (int e = 0; e < s_.vec; ++e) regs.push_back(to_compute(b_.CreateExtractElement(v, e), prm.dtype));
      continue;
    }
    if (!vectors) {  // at each element's column (clamped to 0 outside the row)
      Value* row = row_offset(prm.view, i.type.rows, 0);
      for (int e = 0; e < s_.vec; ++e) {
        Value* ptr = b_.CreateInBoundsGEP(
            ty, base, b_.CreateAdd(row, b_.CreateZExt(row_column(k, e), b_.getInt64Ty()), "", true, true));
        regs.push_back(to_compute(b_.CreateAlignedLoad(ty, ptr, llvm::Align(dtype_size(prm.dtype)), name), prm.dtype));
      }
      continue;
    }
    // One aligned vector where it holds some of the row and lies inside the tensor (all but the
    // last row's end); element by element where it holds some of the row but runs past the
    // tensor; nothing where it holds none of the row (the threads past the row's end).
    Value* off = b_.CreateAdd(row_start_, b_.CreateZExt(window(k), b_.getInt64Ty()), "", true, true);
    Value* inside = b_.CreateICmpULE(b_.CreateAdd(off, b_.getInt64(s_.vec)), b_.getInt64(total));
    auto* whole = llvm::BasicBlock::Create(ctx_, "window_vector", fn_);
    auto* edge = llvm::BasicBlock::Create(ctx_, "window_edge", fn_);
    auto* parts = llvm::BasicBlock::Create(ctx_, "window_elements", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "window_loaded", fn_);
    b_.CreateCondBr(b_.CreateAnd(window_any(k), inside), whole, edge);
    // The three meet as one vector value: a load used only by extracts would be split into
    // element loads, which LLVM then sinks into the join (one load per element).
    auto* vty = llvm::FixedVectorType::get(ty, s_.vec);
    b_.SetInsertPoint(whole);
    Value* from_vector = b_.CreateAlignedLoad(vty, b_.CreateInBoundsGEP(ty, base, off),
                                              llvm::Align(dtype_size(prm.dtype) * s_.vec), name);
    b_.CreateBr(done);
    b_.SetInsertPoint(edge);
    b_.CreateCondBr(window_any(k), parts, done);
    b_.SetInsertPoint(parts);
    Value* from_elements = llvm::PoisonValue::get(vty);
    Value* first = b_.CreateAdd(row_start_, b_.CreateZExt(row_shift_, b_.getInt64Ty()));  // the row's first element
    for (int e = 0; e < s_.vec; ++e) {
      Value* at = b_.CreateSelect(in_row(k, e), b_.CreateAdd(off, b_.getInt64(e)), first);
      Value* x = b_.CreateAlignedLoad(ty, b_.CreateInBoundsGEP(ty, base, at), llvm::Align(dtype_size(prm.dtype)), name);
      from_elements = b_.CreateInsertElement(from_elements, x, e);
    }
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    llvm::PHINode* loaded = b_.CreatePHI(vty, 3);
    loaded->addIncoming(from_vector, whole);
    loaded->addIncoming(llvm::Constant::getNullValue(vty), edge);
    loaded->addIncoming(from_elements, parts);
    for (int e = 0; e < s_.vec; ++e) {
      Value* x = to_compute(b_.CreateExtractElement(loaded, e), prm.dtype);
      regs.push_back(wide && x->getType()->isFloatTy() ? own_register(b_, x) : x);
    }
  }
  types_[i.result] = i.type;
  values_[i.result] = std::move(regs);
}

void Lowering::store_window(const TileInst& i) {
  const TileParam& prm = p_.params[i.param];
  llvm::Type* ty = storage_type(prm.dtype);
  Value* base = fn_->getArg(i.param);
  const int v = i.args[0];
  const bool vectors = laid_out_as_domain(prm.view) && prm.view.back() == s_.cols;
  const llvm::Align one(dtype_size(prm.dtype));
  for (int k = 0; k < s_.chunks_per_thread; ++k) {
    std::vector<Value*> data;
    for (int e = 0; e < s_.vec; ++e) data.push_back(to_storage(at(v, 0, k * s_.vec + e), prm.dtype));
    auto element_by_element = [&](Value* first) {
      for (int e = 0; e < s_.vec; ++e)
        guarded(both(row_ok_[0], in_row(k, e)), [&] {
          Value* off = first ? b_.CreateAdd(first, b_.getInt64(e))
                             : b_.CreateAdd(row_offset(prm.view, true, 0),
                                            b_.CreateZExt(row_column(k, e), b_.getInt64Ty()));
          b_.CreateAlignedStore(data[e], b_.CreateInBoundsGEP(ty, base, off), one);
        });
    };
    if (!vectors) {
      element_by_element(nullptr);
      continue;
    }
    // The row's elements form one run, so a vector is all the row's where its ends are.
    Value* off = b_.CreateAdd(row_start_, b_.CreateZExt(window(k), b_.getInt64Ty()), "", true, true);
    Value* whole = b_.CreateAnd(in_row(k, 0), in_row(k, s_.vec - 1));
    if (row_ok_[0]) whole = b_.CreateAnd(whole, row_ok_[0]);
    auto* vec_bb = llvm::BasicBlock::Create(ctx_, "window_store", fn_);
    auto* ends = llvm::BasicBlock::Create(ctx_, "window_ends", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "window_stored", fn_);
    b_.CreateCondBr(whole, vec_bb, ends);
    b_.SetInsertPoint(vec_bb);
    Value* packed = llvm::PoisonValue::get(llvm::FixedVectorType::get(ty, s_.vec));
    for (int e = 0; e < s_.vec; ++e) packed = b_.CreateInsertElement(packed, data[e], e);
    b_.CreateAlignedStore(packed, b_.CreateInBoundsGEP(ty, base, off), llvm::Align(dtype_size(prm.dtype) * s_.vec));
    b_.CreateBr(done);
    b_.SetInsertPoint(ends);
    guarded(window_any(k), [&] { element_by_element(off); });
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }
}

}  // namespace tilefuse
