// Rows split into parts that are tasks of a persistent grid and meet in global memory.
#include <array>
#include <functional>

#include "compiler/codegen/lowering.h"
#include "compiler/codegen/math.h"

namespace tilefuse {

int Lowering::split_sum() const {
  for (const TileInst& i : p_.body)
    if (i.opcode == TileOpcode::Reduce && i.online_with >= 0 && pairs_path(i.online_with)) return i.result;
  throw CodegenError(fmt::format("kernel {}: split rows need a max and its online sum", p_.name));
}

std::vector<int> Lowering::carried_after(int r, bool recompute) const {
  const int m = inst_of(r).online_with, e = inst_of(r).args[0];
  std::set<int> carried;
  std::function<void(int)> visit = [&](int v) {
    const TileInst& i = inst_of(v);
    if (v == m || v == r || i.opcode == TileOpcode::Constant) return;
    if (recompute && i.opcode == TileOpcode::Load) return;  // read again
    if ((v == e && !recompute) || i.opcode == TileOpcode::Load) {
      carried.insert(v);
      return;
    }
    if (i.opcode == TileOpcode::Reduce)
      throw CodegenError(fmt::format("kernel {}: split rows need a max and its online sum only", p_.name));
    for (int a : i.args) visit(a);
  };
  for (size_t k = static_cast<size_t>(r) + 1; k < p_.body.size(); ++k) {
    if (p_.body[k].opcode == TileOpcode::Reduce)
      throw CodegenError(fmt::format("kernel {}: split rows need a max and its online sum only", p_.name));
    for (int a : p_.body[k].args)
      if (a < r) visit(a);
  }
  return {carried.begin(), carried.end()};
}

void Lowering::set_part(Value* part) {
  Value* col0 = b_.CreateAdd(b_.CreateMul(part, b_.getInt32(static_cast<uint32_t>(s_.tile_cols()))),
                             b_.CreateMul(tc_, b_.getInt32(s_.vec)));
  for (int k = 0; k < s_.chunks_per_thread; ++k)
    cols_[k] = b_.CreateAdd(col0, b_.getInt32(k * s_.threads_per_row * s_.vec));
}

struct Lowering::PairExchange {
  Lowering& l;
  llvm::IRBuilder<>& b;
  const uint32_t P;
  Value* words;  // two u64 per task
  Value* epoch;
  llvm::SyncScope::ID device;
  llvm::GlobalVariable* rmax;
  llvm::GlobalVariable* rsum;
  Value* lane;
  Value* warp;
  Value* fetcher;

  explicit PairExchange(Lowering& lowering)
      : l(lowering),
        b(lowering.b_),
        P(static_cast<uint32_t>(lowering.s_.split_blocks)),
        words(lowering.fn_->getArg(static_cast<unsigned>(lowering.p_.params.size()))),
        epoch(lowering.fn_->getArg(static_cast<unsigned>(lowering.p_.params.size()) + 1)),
        device(lowering.ctx_.getOrInsertSyncScopeID("device")) {
    rmax = l.shared_slots(2 * static_cast<uint64_t>(P), "row_max");
    rsum = l.shared_slots(2 * static_cast<uint64_t>(P), "row_sum");
    lane = b.CreateURem(l.tc_, b.getInt32(32));
    warp = b.CreateUDiv(l.tc_, b.getInt32(32));
    fetcher = b.CreateAnd(b.CreateICmpEQ(warp, b.getInt32(0)), b.CreateICmpULT(lane, b.getInt32(P)));
  }

  Value* max_slots(Value* parity) { return l.slots_at_parity(rmax, parity, P); }
  Value* sum_slots(Value* parity) { return l.slots_at_parity(rsum, parity, P); }

  // Word j of task `task`'s pair.
  Value* word_at(Value* task, int j) {
    Value* i = b.CreateAdd(b.CreateMul(b.CreateZExt(task, b.getInt64Ty()), b.getInt64(2)), b.getInt64(j));
    return b.CreateInBoundsGEP(b.getInt64Ty(), words, i);
  }
  Value* load_word(Value* at) {
    auto* w = b.CreateAlignedLoad(b.getInt64Ty(), at, llvm::Align(8), "pair_word");
    w->setAtomic(llvm::AtomicOrdering::Monotonic, device);
    return w;
  }
  Value* fresh(Value* w) {
    return b.CreateICmpEQ(b.CreateTrunc(b.CreateLShr(w, b.getInt64(32)), b.getInt32Ty()), epoch);
  }

  // Thread 0: the part's pair, stamped.
  void publish(Value* task, Value* m_part, Value* s_part) {
    Value* stamp = b.CreateShl(b.CreateZExt(epoch, b.getInt64Ty()), b.getInt64(32));
    for (int j = 0; j < 2; ++j) {
      Value* bits = b.CreateZExt(b.CreateBitCast(j ? s_part : m_part, b.getInt32Ty()), b.getInt64Ty());
      auto* st = b.CreateAlignedStore(b.CreateOr(bits, stamp), word_at(task, j), llvm::Align(8));
      st->setAtomic(llvm::AtomicOrdering::Monotonic, device);
    }
  }

  // The fetcher lanes' first loads of `row`'s pairs: {task, word 0, word 1}, valid where `when`
  // holds. Issued early, so that their latency passes while the block reduces.
  std::array<Value*, 3> start(Value* row, Value* when) {
    Value* task = b.CreateAdd(b.CreateMul(row, b.getInt32(P)), lane);
    llvm::BasicBlock* from = b.GetInsertBlock();
    auto* then = llvm::BasicBlock::Create(l.ctx_, "fetch", l.fn_);
    auto* cont = llvm::BasicBlock::Create(l.ctx_, "fetched", l.fn_);
    b.CreateCondBr(when, then, cont);
    b.SetInsertPoint(then);
    Value* w0 = load_word(word_at(task, 0));
    Value* w1 = load_word(word_at(task, 1));
    llvm::BasicBlock* loaded = b.GetInsertBlock();
    b.CreateBr(cont);
    b.SetInsertPoint(cont);
    std::array<Value*, 3> out;
    out[0] = task;
    for (int j = 0; j < 2; ++j) {
      llvm::PHINode* p = b.CreatePHI(b.getInt64Ty(), 2);
      p->addIncoming(j ? w1 : w0, loaded);
      p->addIncoming(llvm::PoisonValue::get(b.getInt64Ty()), from);
      out[1 + j] = p;
    }
    return out;
  }

  // The fetcher lanes: reload (sleeping between tries) until both words are this launch's,
  // then the row slots of `parity`.
  void finish(const std::array<Value*, 3>& f, Value* when, Value* parity) {
    l.guarded(when, [&] {
      llvm::BasicBlock* from = b.GetInsertBlock();
      auto* check = llvm::BasicBlock::Create(l.ctx_, "pair.check", l.fn_);
      auto* reload = llvm::BasicBlock::Create(l.ctx_, "pair.reload", l.fn_);
      auto* ready = llvm::BasicBlock::Create(l.ctx_, "pair.ready", l.fn_);
      b.CreateBr(check);
      b.SetInsertPoint(check);
      llvm::PHINode* w0 = b.CreatePHI(b.getInt64Ty(), 2);
      llvm::PHINode* w1 = b.CreatePHI(b.getInt64Ty(), 2);
      w0->addIncoming(f[1], from);
      w1->addIncoming(f[2], from);
      b.CreateCondBr(b.CreateAnd(fresh(w0), fresh(w1)), ready, reload);
      b.SetInsertPoint(reload);
      l.intrinsic(llvm::Intrinsic::nvvm_nanosleep, {b.getInt32(32)});
      w0->addIncoming(load_word(word_at(f[0], 0)), reload);
      w1->addIncoming(load_word(word_at(f[0], 1)), reload);
      b.CreateBr(check);
      b.SetInsertPoint(ready);
      for (int j = 0; j < 2; ++j) {
        Value* bits = b.CreateTrunc(j ? static_cast<Value*>(w1) : w0, b.getInt32Ty());
        b.CreateAlignedStore(
            b.CreateBitCast(bits, b.getFloatTy()),
            b.CreateInBoundsGEP(b.getFloatTy(), j ? sum_slots(parity) : max_slots(parity), lane),
            llvm::Align(4));
      }
    });
  }
};

void Lowering::lower_split() {
  const int stages = s_.stages;
  const uint32_t P = static_cast<uint32_t>(s_.split_blocks);
  const int warps = s_.threads_per_row / 32;
  const int r = split_sum();
  const TileInst& sum = inst_of(r);
  const int m = sum.online_with, e = sum.args[0], c = sum.online_shift;  // sum of e = exp(u − c(m))
  // A task of 32 elements per thread (16-bit parts) is written from its stage, which is
  // refilled only after that (stages − 2 parts ahead, less the reduce of one), with its exps
  // recomputed from the row's max; one of 16 carries its exps in registers and rescales them,
  // and its stage is refilled as soon as it is read (stages parts ahead).
  const bool recompute = s_.elems_per_thread() > 16;
  if (recompute && stages < 3)
    throw CodegenError(fmt::format("kernel {}: split rows of 32 elements per thread need 3 stages", p_.name));
  const std::vector<int> carried = carried_after(r, recompute);
  if (warps & (warps - 1))
    throw CodegenError(fmt::format("kernel {}: split rows need a power-of-two warp count", p_.name));
  // Recompute mode: per stage, how many warps have read it in their write step (modulo warps).
  llvm::GlobalVariable* readers = nullptr;
  if (recompute) {
    auto* ty = llvm::ArrayType::get(b_.getInt32Ty(), static_cast<uint64_t>(stages));
    readers = new llvm::GlobalVariable(*m_, ty, false, llvm::GlobalValue::InternalLinkage,
                                       llvm::UndefValue::get(ty), "stage_readers", nullptr,
                                       llvm::GlobalValue::NotThreadLocal, 3);
    readers->setAlignment(llvm::Align(4));
    guarded(leader(), [&] {  // before init_stages' barrier
      for (int k = 0; k < stages; ++k)
        b_.CreateAlignedStore(b_.getInt32(0), b_.CreateConstInBoundsGEP2_32(ty, readers, 0, k),
                              llvm::Align(4));
    });
  }
  init_stages();
  Value* block = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  Value* blocks = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x);
  Value* tasks = b_.getInt32(static_cast<uint32_t>(s_.rows * P));
  auto row_of = [&](Value* t) { return b_.CreateUDiv(t, b_.getInt32(P)); };
  auto part_of = [&](Value* t) { return b_.CreateURem(t, b_.getInt32(P)); };
  guarded(leader(), [&] {
    for (int k = 0; k < stages; ++k) {
      Value* t = b_.CreateAdd(block, b_.CreateMul(blocks, b_.getInt32(k)));
      guarded(b_.CreateICmpULT(t, tasks), [&] { fill_stage(b_.getInt32(k), row_of(t), part_of(t)); });
    }
  });

  auto* wmax = shared_slots(2 * static_cast<uint64_t>(warps), "warp_max");
  auto* wsum = shared_slots(2 * static_cast<uint64_t>(warps), "warp_sum");
  PairExchange pairs(*this);
  Value* lane = pairs.lane;
  Value* warp = pairs.warp;

  // Step 4 for a task whose state is `st`: every value the rest of the body needs.
  struct TaskState {
    Value* task;
    Value* stage;
    Value* m_warp;
    Value* s_warp;
    std::vector<Regs> regs;  // per carried value
  };
  // Recompute mode: once every warp has read the part of task `st` for its write step, the last
  // of them refills the stage with the task `stages` iterations later — half an iteration
  // sooner than the next block barrier would, so the copy has a whole iteration to arrive.
  llvm::SyncScope::ID cta = ctx_.getOrInsertSyncScopeID("block");
  auto release_stage = [&](const TaskState& st) {
    intrinsic(llvm::Intrinsic::nvvm_bar_warp_sync, {b_.getInt32(0xffffffff)});  // the warp's reads
    guarded(b_.CreateICmpEQ(lane, b_.getInt32(0)), [&] {
      Value* before = release_increment(b_.CreateInBoundsGEP(b_.getInt32Ty(), readers, st.stage), cta);
      Value* last = b_.CreateICmpEQ(b_.CreateAnd(before, b_.getInt32(warps - 1)), b_.getInt32(warps - 1));
      Value* ahead = b_.CreateAdd(st.task, b_.CreateMul(blocks, b_.getInt32(stages)));
      guarded(b_.CreateAnd(last, b_.CreateICmpULT(ahead, tasks)), [&] {
        b_.CreateFence(llvm::AtomicOrdering::Acquire, cta);
        fill_stage(st.stage, row_of(ahead), part_of(ahead));
      });
    });
  };
  auto write_task = [&](const TaskState& st, Value* parity, bool refill) {
    Value* row = row_of(st.task);
    rows_[0] = row;
    set_part(part_of(st.task));
    for (Regs& v : values_) v.clear();
    auto [m_row, s_row] =
        merge_pairs(m, c, pairs.max_slots(parity), pairs.sum_slots(parity), static_cast<int>(P));
    if (recompute) {
      read_stage(st.stage);
      if (refill) release_stage(st);
      values_[m] = {m_row};
      types_[r] = sum.type;
      values_[r] = {s_row};
    } else {
      for (size_t k = 0; k < carried.size(); ++k) values_[carried[k]] = st.regs[k];
      settle_online_sum(sum, per_row_with(c, m, st.m_warp), st.s_warp, m_row, s_row);
    }
    lower_resident(static_cast<size_t>(r) + 1);
  };

  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(ctx_, "task", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "tasks.done", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "tasks.exit", fn_);
  b_.CreateCondBr(b_.CreateICmpULT(block, tasks), loop, exit);
  b_.SetInsertPoint(loop);
  llvm::PHINode* it = b_.CreatePHI(b_.getInt32Ty(), 2, "it");
  llvm::PHINode* task = b_.CreatePHI(b_.getInt32Ty(), 2, "t");
  it->addIncoming(b_.getInt32(0), pre);
  task->addIncoming(block, pre);
  // The previous task's state (poison before the first task: never used).
  TaskState prev;
  auto phi = [&](llvm::Type* ty, const char* name) {
    llvm::PHINode* p = b_.CreatePHI(ty, 2, name);
    p->addIncoming(llvm::PoisonValue::get(ty), pre);
    return p;
  };
  prev.task = phi(b_.getInt32Ty(), "t.prev");
  prev.stage = phi(b_.getInt32Ty(), "stage.prev");
  prev.m_warp = phi(b_.getFloatTy(), "m.prev");
  prev.s_warp = phi(b_.getFloatTy(), "s.prev");
  std::vector<std::vector<llvm::PHINode*>> prev_phis;
  for (int v : carried) {
    const TileInst& i = inst_of(v);
    size_t n = static_cast<size_t>(cols_of(i.type));
    llvm::Type* ty = i.type.dtype == DType::Bool ? b_.getInt1Ty() : b_.getFloatTy();
    std::vector<llvm::PHINode*> ps;
    Regs regs;
    for (size_t k = 0; k < n; ++k) {
      ps.push_back(phi(ty, "carried"));
      regs.push_back(ps.back());
    }
    prev_phis.push_back(ps);
    prev.regs.push_back(regs);
  }

  Value* stage = stage_of(it);
  Value* phase = phase_of(it);
  Value* parity = b_.CreateAnd(it, b_.getInt32(1), "parity");
  Value* has_prev = b_.CreateICmpNE(it, b_.getInt32(0));
  Value* fetch_prev = b_.CreateAnd(has_prev, pairs.fetcher);
  std::array<Value*, 3> prev_row = pairs.start(row_of(prev.task), fetch_prev);
  Value* row = row_of(task);
  rows_[0] = row;
  set_part(part_of(task));
  for (Regs& v : values_) v.clear();
  load_stage(stage, phase);
  // 1. The part up to its warps' pairs.
  lower_resident(0, static_cast<size_t>(r));
  ensure(e);
  TaskState cur;
  cur.task = task;
  cur.stage = stage;
  cur.m_warp = values_[m][0];
  cur.s_warp = warp_allreduce(Op::ReduceSum, thread_partial(Op::ReduceSum, e, 0), 32);
  for (int v : carried) {
    ensure(v);
    cur.regs.push_back(values_[v]);
  }
  guarded(b_.CreateICmpEQ(lane, b_.getInt32(0)), [&] {
    b_.CreateAlignedStore(cur.m_warp,
                          b_.CreateInBoundsGEP(b_.getFloatTy(), slots_at_parity(wmax, parity, warps), warp),
                          llvm::Align(4));
    b_.CreateAlignedStore(cur.s_warp,
                          b_.CreateInBoundsGEP(b_.getFloatTy(), slots_at_parity(wsum, parity, warps), warp),
                          llvm::Align(4));
  });
  pairs.finish(prev_row, fetch_prev, parity);
  // 2.
  block_barrier();
  if (!recompute) {
    Value* ahead = b_.CreateAdd(task, b_.CreateMul(blocks, b_.getInt32(stages)));
    guarded(b_.CreateAnd(leader(), b_.CreateICmpULT(ahead, tasks)),
            [&] { fill_stage(stage, row_of(ahead), part_of(ahead)); });
  }
  // 3.
  auto [m_part, s_part] =
      merge_pairs(m, c, slots_at_parity(wmax, parity, warps), slots_at_parity(wsum, parity, warps), warps);
  guarded(leader(), [&] { pairs.publish(task, m_part, s_part); });
  // 4.
  guarded(has_prev, [&] { write_task(prev, parity, true); });

  Value* it_next = b_.CreateAdd(it, b_.getInt32(1));
  Value* task_next = b_.CreateAdd(task, blocks);
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  it->addIncoming(it_next, latch);
  task->addIncoming(task_next, latch);
  llvm::cast<llvm::PHINode>(prev.task)->addIncoming(cur.task, latch);
  llvm::cast<llvm::PHINode>(prev.stage)->addIncoming(cur.stage, latch);
  llvm::cast<llvm::PHINode>(prev.m_warp)->addIncoming(cur.m_warp, latch);
  llvm::cast<llvm::PHINode>(prev.s_warp)->addIncoming(cur.s_warp, latch);
  for (size_t k = 0; k < carried.size(); ++k)
    for (size_t j = 0; j < prev_phis[k].size(); ++j) prev_phis[k][j]->addIncoming(cur.regs[k][j], latch);
  b_.CreateCondBr(b_.CreateICmpULT(task_next, tasks), loop, done);

  // The last task: fetch its row, one barrier (its slots were last read before the barrier of
  // this iteration), write it.
  b_.SetInsertPoint(done);
  Value* last_parity = b_.CreateAnd(it_next, b_.getInt32(1));
  pairs.finish(pairs.start(row_of(cur.task), pairs.fetcher), pairs.fetcher, last_parity);
  block_barrier();
  write_task(cur, last_parity, false);
  b_.CreateBr(exit);
  b_.SetInsertPoint(exit);
}

}  // namespace tilefuse
