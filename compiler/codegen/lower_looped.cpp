// Rows too long for registers: each pass over the row is a loop over column tiles.
#include <cmath>

#include "compiler/codegen/lowering.h"
#include "compiler/codegen/math.h"

namespace tilefuse {

Value* Lowering::with_max(int id, int m, Value* m_value, const std::vector<bool>& keep) {
  Regs saved = values_[m];
  reset(keep);
  types_[m] = inst_of(m).type;
  values_[m] = {m_value};
  ensure(id);
  Value* v = values_[id][0];
  values_[m] = saved;
  reset(keep);
  return v;
}

void Lowering::lower_looped() {
  std::vector<bool> keep(values_.size(), false);
  std::vector<Value*> base_cols = cols_;
  auto guard_zero = [&](Value* s, Value* scaled) {  // 0 · anything = 0, even 0 · inf
    return b_.CreateSelect(b_.CreateFCmpOEQ(s, f32(0.0)), f32(0.0), scaled);
  };
  for (int pass = 1; pass <= p_.passes; ++pass) {
    std::vector<const TileInst*> reds, stores;
    for (const TileInst& i : p_.body) {
      if (i.opcode == TileOpcode::Reduce && i.pass == pass) reds.push_back(&i);
      if (i.opcode == TileOpcode::Store && i.type.cols && pass == p_.passes) stores.push_back(&i);
    }
    if (reds.empty() && stores.empty()) continue;
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* loop = llvm::BasicBlock::Create(ctx_, fmt::format("pass{}", pass), fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, fmt::format("pass{}.done", pass), fn_);
    b_.CreateBr(loop);
    b_.SetInsertPoint(loop);
    llvm::PHINode* it = b_.CreatePHI(b_.getInt32Ty(), 2, "tile");
    it->addIncoming(b_.getInt32(0), pre);
    std::map<int, llvm::PHINode*> acc;
    for (const TileInst* r : reds) {
      acc[r->result] = b_.CreatePHI(b_.getFloatTy(), 2, fmt::format("acc{}", r->result));
      acc[r->result]->addIncoming(f32(identity_of(r->op)), pre);
    }
    Value* first_col = b_.CreateMul(to_index(it), index(s_.iter_cols()));
    bool mask = s_.cols % s_.iter_cols() != 0;
    for (size_t k = 0; k < cols_.size(); ++k) {
      Value* col = b_.CreateAdd(base_cols[k], first_col);
      col_ok_[k] = mask ? b_.CreateICmpULT(col, index(s_.cols)) : nullptr;
      cols_[k] = mask ? b_.CreateSelect(col_ok_[k], col, index(0)) : col;
    }
    reset(keep);
    std::map<int, Value*> next;
    for (const TileInst* r : reds) {
      if (r->online_with >= 0) continue;
      ensure(r->args[0]);
      Value* part = thread_partial(r->op, r->args[0], 0);
      next[r->result] = combine(r->op, acc[r->result], part);
    }
    for (const TileInst* st : stores) {
      ensure(st->args[0]);
      store(*st);
    }
    for (const TileInst* r : reds) {
      if (r->online_with < 0) continue;
      int m = r->online_with;
      int c = r->online_shift;  // sum(exp(u − c(m)))
      Value* c_old = with_max(c, m, acc[m], keep);
      Value* c_new = with_max(c, m, next[m], keep);
      reset(keep);
      types_[m] = inst_of(m).type;
      values_[m] = {next[m]};
      ensure(r->args[0]);
      Value* part = thread_partial(r->op, r->args[0], 0);
      reset(keep);
      Value* scaled = guard_zero(acc[r->result],
                                 b_.CreateFMul(acc[r->result], math::exp(b_, b_.CreateFSub(c_old, c_new))));
      // A thread whose elements so far are all −inf adds nothing to the row's sum, whatever its
      // terms' −inf − (−inf) make of them (the row's max is at least theirs).
      Value* seen = b_.CreateFCmpUNE(next[m], f32(-INFINITY));
      next[r->result] = b_.CreateSelect(seen, b_.CreateFAdd(scaled, part), f32(0.0));
    }
    Value* it_next = b_.CreateAdd(it, b_.getInt32(1));
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    it->addIncoming(it_next, latch);
    for (const TileInst* r : reds) acc[r->result]->addIncoming(next[r->result], latch);
    b_.CreateCondBr(b_.CreateICmpULT(it_next, b_.getInt32(static_cast<uint32_t>(s_.col_iters))), loop, done);
    b_.SetInsertPoint(done);
    reset(keep);
    // The loop exits from its last iteration: `next` holds the thread's totals.
    for (const TileInst* r : reds) {
      Value* total;
      if (r->online_with < 0) {
        total = allreduce(r->op, next[r->result], 0);
      } else {  // bring each thread's sum to the row's max before adding them up
        int m = r->online_with;
        int c = r->online_shift;
        Value* c_mine = with_max(c, m, next[m], keep);
        Value* c_row = with_max(c, m, values_[m][0], keep);
        Value* s = next[r->result];
        total =
            allreduce(r->op, guard_zero(s, b_.CreateFMul(s, math::exp(b_, b_.CreateFSub(c_mine, c_row)))), 0);
      }
      types_[r->result] = r->type;
      values_[r->result] = {total};
      keep[r->result] = true;
    }
  }
  for (const TileInst& i : p_.body)  // values of one per row, stored once every pass is done
    if (i.opcode == TileOpcode::Store && !i.type.cols) {
      ensure(i.args[0]);
      store(i);
    }
}

}  // namespace tilefuse
