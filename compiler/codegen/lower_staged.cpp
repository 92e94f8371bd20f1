// Persistent rows staged through shared memory by bulk copies.
#include "compiler/codegen/lowering.h"

namespace tilefuse {

std::map<int, int64_t> Lowering::stage_layout() const {
  std::map<int, int64_t> at;
  int64_t off = 0;
  for (const TileInst& i : p_.body)
    if (staged(i) && !at.count(i.param)) {
      at[i.param] = off;
      off += s_.tile_cols() * static_cast<int64_t>(dtype_size(p_.params[i.param].dtype));
    }
  if (off != s_.stage_bytes)
    throw CodegenError(fmt::format("kernel {}: its staged rows take {} bytes, the schedule planned {}",
                                   p_.name, off, s_.stage_bytes));
  return at;
}

void Lowering::init_stages() {
  layout_ = stage_layout();
  auto* mbar_ty = llvm::ArrayType::get(b_.getInt64Ty(), s_.stages);
  stage_full_ = new llvm::GlobalVariable(*m_, mbar_ty, false, llvm::GlobalValue::InternalLinkage,
                                         llvm::UndefValue::get(mbar_ty), "stage_full", nullptr,
                                         llvm::GlobalValue::NotThreadLocal, 3);
  stage_full_->setAlignment(llvm::Align(8));
  auto* buf_ty = llvm::ArrayType::get(b_.getInt8Ty(), 0);
  stage_rows_ = new llvm::GlobalVariable(*m_, buf_ty, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                         "stage_rows", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
  stage_rows_->setAlignment(llvm::Align(128));
  guarded(leader(), [&] {
    for (int k = 0; k < s_.stages; ++k)
      intrinsic(llvm::Intrinsic::nvvm_mbarrier_init_shared, {stage_barrier(b_.getInt32(k)), b_.getInt32(1)});
    intrinsic(llvm::Intrinsic::nvvm_fence_mbarrier_init_release_cluster);
  });
  block_barrier();
}

Value* Lowering::stage_at(Value* stage, int param) {
  Value* off = b_.CreateAdd(b_.CreateMul(b_.CreateZExt(stage, b_.getInt64Ty()), b_.getInt64(s_.stage_bytes)),
                            b_.getInt64(layout_.at(param)));
  return b_.CreateInBoundsGEP(b_.getInt8Ty(), stage_rows_, off);
}

void Lowering::fill_stage(Value* stage, Value* row, Value* part) {
  intrinsic(llvm::Intrinsic::nvvm_mbarrier_arrive_expect_tx_scope_cta_space_cta,
            {stage_barrier(stage), b_.getInt32(static_cast<uint32_t>(s_.stage_bytes))});
  Value* saved = rows_[0];
  rows_[0] = row;
  Value* col0 =
      b_.CreateZExt(b_.CreateMul(part, b_.getInt32(static_cast<uint32_t>(s_.tile_cols()))), b_.getInt64Ty());
  for (const auto& [param, off] : layout_) {
    const TileParam& prm = p_.params[param];
    Value* elem = b_.CreateAdd(offset(prm.view, true, false, 0, 0), col0);
    Value* src = b_.CreateInBoundsGEP(storage_type(prm.dtype), fn_->getArg(param), elem);
    uint32_t bytes = static_cast<uint32_t>(s_.tile_cols() * static_cast<int64_t>(dtype_size(prm.dtype)));
    // The block's own shared memory, addressed in the cluster's window (addrspace 7).
    Value* dst = b_.CreateAddrSpaceCast(stage_at(stage, param), b_.getPtrTy(7));
    intrinsic(llvm::Intrinsic::nvvm_cp_async_bulk_global_to_shared_cluster,
              {dst, stage_barrier(stage), src, b_.getInt32(bytes), b_.getInt16(0), b_.getInt64(0),
               b_.getFalse(), b_.getFalse()});
  }
  rows_[0] = saved;
}

void Lowering::wait_stage(Value* stage, Value* phase) {
  auto* wait = llvm::BasicBlock::Create(ctx_, "stage.wait", fn_);
  auto* ready = llvm::BasicBlock::Create(ctx_, "stage.ready", fn_);
  b_.CreateBr(wait);
  b_.SetInsertPoint(wait);
  Value* full = intrinsic(llvm::Intrinsic::nvvm_mbarrier_try_wait_parity_scope_cta_space_cta,
                          {stage_barrier(stage), phase});
  b_.CreateCondBr(full, ready, wait);
  b_.SetInsertPoint(ready);
}

void Lowering::read_stage(Value* stage) {
  for (const TileInst& i : p_.body) {
    if (!staged(i)) continue;
    const TileParam& prm = p_.params[i.param];
    Value* part = stage_at(stage, i.param);
    Regs regs;
    for (int k = 0; k < s_.chunks_per_thread; ++k) {  // the columns the thread would load
      Value* col =
          b_.CreateAdd(b_.CreateMul(tc_, b_.getInt32(s_.vec)), b_.getInt32(k * s_.threads_per_row * s_.vec));
      Value* ptr = b_.CreateInBoundsGEP(storage_type(prm.dtype), part, b_.CreateZExt(col, b_.getInt64Ty()));
      load_vector(ptr, prm.dtype, s_.vec, fmt::format("{}.c{}", sanitize(prm.name), k), widely_used(i.result),
                  &regs);
    }
    types_[i.result] = i.type;
    values_[i.result] = std::move(regs);
  }
}

void Lowering::lower_staged() {
  const int stages = s_.stages;
  init_stages();
  auto cb = b_.getInt32(static_cast<uint32_t>(s_.col_blocks()));
  Value* group = b_.CreateUDiv(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x), cb, "group");
  Value* groups = b_.CreateUDiv(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x), cb, "groups");
  Value* rows = b_.getInt32(static_cast<uint32_t>(s_.rows));
  guarded(leader(), [&] {
    for (int k = 0; k < stages; ++k) {
      Value* row = b_.CreateAdd(group, b_.CreateMul(groups, b_.getInt32(k)));
      guarded(b_.CreateICmpULT(row, rows), [&] { fill_stage(b_.getInt32(k), row, rank_); });
    }
  });
  if (s_.cluster_blocks > 1) {  // pairs with the arrive in the prologue, overlapping the copies
    intrinsic(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
    cluster_joined_ = true;
  }

  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(ctx_, "row", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "rows.done", fn_);
  b_.CreateCondBr(b_.CreateICmpULT(group, rows), loop, done);
  b_.SetInsertPoint(loop);
  llvm::PHINode* it = b_.CreatePHI(b_.getInt32Ty(), 2, "it");
  llvm::PHINode* row = b_.CreatePHI(b_.getInt32Ty(), 2, "r");
  it->addIncoming(b_.getInt32(0), pre);
  row->addIncoming(group, pre);
  Value* stage = stage_of(it);
  Value* phase = phase_of(it);
  row_parity_ = b_.CreateAnd(it, b_.getInt32(1));
  rows_[0] = row;
  load_stage(stage, phase);
  block_barrier();
  Value* ahead = b_.CreateAdd(row, b_.CreateMul(groups, b_.getInt32(stages)));
  guarded(b_.CreateAnd(leader(), b_.CreateICmpULT(ahead, rows)), [&] { fill_stage(stage, ahead, rank_); });

  lower_resident();

  Value* it_next = b_.CreateAdd(it, b_.getInt32(1));
  Value* row_next = b_.CreateAdd(row, groups);
  it->addIncoming(it_next, b_.GetInsertBlock());
  row->addIncoming(row_next, b_.GetInsertBlock());
  b_.CreateCondBr(b_.CreateICmpULT(row_next, rows), loop, done);
  b_.SetInsertPoint(done);
}

}  // namespace tilefuse
