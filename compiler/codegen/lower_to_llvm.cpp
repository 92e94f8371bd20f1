#include "compiler/codegen/lower_to_llvm.h"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <tuple>

#include "compiler/codegen/elementwise.h"
#include "compiler/codegen/lowering.h"
#include "compiler/codegen/math.h"

namespace tilefuse {

std::unique_ptr<llvm::Module> Lowering::run() {
  m_->setTargetTriple(llvm::Triple("nvptx64-nvidia-cuda"));
  std::vector<llvm::Type*> params(p_.params.size(), b_.getPtrTy(1));
  if (s_.workspace_bytes() > 0) {  // the kernel's workspace and the launch's epoch (CompiledKernel)
    params.push_back(b_.getPtrTy(1));
    params.push_back(b_.getInt32Ty());
  }
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, p_.name, m_.get());
  fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
  fn_->addFnAttr("nvvm.maxntid", std::to_string(s_.block_threads()));
  if (s_.min_blocks_per_sm > 0) fn_->addFnAttr("nvvm.minctasm", std::to_string(s_.min_blocks_per_sm));
  if (s_.workspace_bytes() > 0) {
    fn_->getArg(static_cast<unsigned>(p_.params.size()))->setName("workspace");
    fn_->getArg(static_cast<unsigned>(p_.params.size()) + 1)->setName("epoch");
  }
  for (size_t i = 0; i < p_.params.size(); ++i) {
    llvm::Argument* a = fn_->getArg(static_cast<unsigned>(i));
    a->setName(fmt::format("arg{}", i));
    a->addAttr(llvm::Attribute::NoAlias);
    a->addAttr(p_.params[i].output ? llvm::Attribute::WriteOnly : llvm::Attribute::ReadOnly);
  }
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  prologue();
  values_.resize(p_.num_values);
  types_.resize(p_.num_values);
  if (s_.col_iters > 1)  // (Tile IR v2's row_loop.cpp builds rows looped over column tiles)
    throw CodegenError(fmt::format("kernel {}: the first Tile IR holds rows in registers, not a loop over {} column tiles",
                                   p_.name, s_.col_iters));
  if ((s_.cluster_blocks > 1 || s_.stages > 0) && s_.tile_rows() > 1)
    throw CodegenError(fmt::format("kernel {}: clusters and staged rows hold one row per block in registers; this "
                                   "schedule has {} rows per block",
                                   p_.name, s_.tile_rows()));
  if (s_.window && (s_.rows_per_thread != 1 || s_.split_blocks > 1 || s_.stages > 0))
    throw CodegenError(fmt::format("kernel {}: windowed rows are held in registers, one row per thread", p_.name));
  if (s_.claims_rows() && s_.split_blocks == 1)
    throw CodegenError(fmt::format("kernel {}: rows claimed one a block are built on Tile IR v2", p_.name));
  if (s_.split_blocks > 1)
    lower_split();
  else if (s_.stages > 0)
    lower_staged();
  else
    lower_resident();
  if (s_.cluster_blocks > 1 && !cluster_joined_)
    intrinsic(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
  b_.CreateRetVoid();
  return verified(std::move(m_), p_.name);
}

llvm::Type* Lowering::storage_type(DType t) { return tilefuse::storage_type(b_, t); }

void Lowering::prologue() {
  Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
  Value* pid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
  tc_ = b_.CreateURem(tid, b_.getInt32(s_.threads_per_row), "tc");
  tr_ = b_.CreateUDiv(tid, b_.getInt32(s_.threads_per_row), "tr");
  auto cb = b_.getInt32(static_cast<uint32_t>(s_.col_blocks()));
  Value* pid_c = b_.CreateURem(pid, cb, "pid_c");
  rank_ = pid_c;  // with clusters of col_blocks() along x, the block's rank in its cluster
  // Remote shared memory may be written only once every block of the cluster is running:
  // announce this block now, wait for the others just before the first exchange.
  if (s_.cluster_blocks > 1) intrinsic(llvm::Intrinsic::nvvm_barrier_cluster_arrive_relaxed_aligned);
  Value* pid_r = b_.CreateUDiv(pid, cb, "pid_r");
  Value* col0 = b_.CreateAdd(b_.CreateMul(to_index(pid_c), index(s_.tile_cols())),
                             to_index(b_.CreateMul(tc_, b_.getInt32(s_.vec))), "col", true, true);
  bool mask_cols = s_.cols % s_.tile_cols() != 0, mask_rows = s_.rows % s_.tile_rows() != 0;
  for (int k = 0; k < s_.chunks_per_thread && !s_.window; ++k) {
    Value* col = b_.CreateAdd(col0, index(int64_t{k} * s_.threads_per_row * s_.vec), fmt::format("col{}", k),
                              true, true);
    Value* ok = mask_cols ? b_.CreateICmpULT(col, index(s_.cols)) : nullptr;
    col_ok_.push_back(ok);
    cols_.push_back(mask_cols ? b_.CreateSelect(ok, col, index(0)) : col);
  }
  Value* row0 = b_.CreateMul(to_index(pid_r), index(s_.tile_rows()));
  for (int r = 0; r < s_.rows_per_thread; ++r) {
    Value* row = b_.CreateAdd(row0, to_index(b_.CreateAdd(tr_, b_.getInt32(r * s_.thread_rows))),
                              fmt::format("row{}", r), true, true);
    Value* ok = mask_rows ? b_.CreateICmpULT(row, index(s_.rows)) : nullptr;
    row_ok_.push_back(ok);
    rows_.push_back(mask_rows ? b_.CreateSelect(ok, row, index(0)) : row);
  }
  if (s_.window) window_columns(col0);
}

bool Lowering::laid_out_as_domain(const Shape& view) const {
  for (size_t d = 0; d + 1 < s_.dims.size(); ++d)
    if (view[d] != s_.dims[d]) return false;
  return true;
}

Value* Lowering::row_offset(const Shape& view, bool spans_rows, int r) {
  Value* off = b_.getInt64(0);
  if (!spans_rows) return off;
  Value* row = b_.CreateZExt(rows_[r], b_.getInt64Ty());
  if (laid_out_as_domain(view)) return b_.CreateMul(row, b_.getInt64(view.back()), "", true, true);
  // Partially broadcast outer dims: split the row into its dimensions.
  Value* rem = row;
  int64_t stride = view.back();
  for (size_t d = s_.dims.size() - 1; d-- > 0;) {
    Value* idx = b_.CreateURem(rem, b_.getInt64(s_.dims[d]));
    rem = b_.CreateUDiv(rem, b_.getInt64(s_.dims[d]));
    if (view[d] != 1) off = b_.CreateAdd(off, b_.CreateMul(idx, b_.getInt64(stride)));
    stride *= view[d];
  }
  return off;
}

Value* Lowering::to_compute(Value* v, DType t) { return tilefuse::to_compute(b_, v, t); }

Value* Lowering::to_storage(Value* v, DType t) { return tilefuse::to_storage(b_, v, t); }

void Lowering::lower(const TileInst& i) {
  switch (i.opcode) {
    case TileOpcode::Load:
      return load(i);
    case TileOpcode::Constant:
      types_[i.result] = i.type;
      values_[i.result] = {compute_constant(b_, i.value, i.type.dtype)};
      return;
    case TileOpcode::Compute:
      return compute(i);
    case TileOpcode::Reduce:
      return reduce(i);
    case TileOpcode::Store:
      return store(i);
  }
}

void Lowering::load(const TileInst& i) {
  if (s_.window && i.type.cols) return load_window(i);
  const TileParam& prm = p_.params[i.param];
  llvm::Type* ty = storage_type(prm.dtype);
  Value* base = fn_->getArg(i.param);
  Regs regs;
  int vec = i.type.cols ? s_.vec : 1;
  for (int r = 0; r < rows_of(i.type); ++r)
    for (int k = 0; k < (i.type.cols ? s_.chunks_per_thread : 1); ++k) {
      Value* ptr = b_.CreateInBoundsGEP(ty, base, offset(prm.view, i.type.rows, i.type.cols, r, k));
      load_vector(ptr, prm.dtype, vec, fmt::format("{}.r{}.c{}", sanitize(prm.name), r, k),
                  widely_used(i.result), &regs);
    }
  types_[i.result] = i.type;
  values_[i.result] = std::move(regs);
}

void Lowering::load_vector(Value* ptr, DType dtype, int vec, const std::string& name, bool widely_used,
                           Regs* regs) {
  llvm::Type* ty = storage_type(dtype);
  llvm::Align align(dtype_size(dtype) * vec);
  if (vec == 1) {
    regs->push_back(to_compute(b_.CreateAlignedLoad(ty, ptr, align, name), dtype));
    return;
  }
  Value* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(ty, vec), ptr, align, name);
  for (int c = 0; c < vec; ++c) {
    Value* x = to_compute(b_.CreateExtractElement(v, c), dtype);
    regs->push_back(widely_used && x->getType()->isFloatTy() ? own_register(b_, x) : x);
  }
}

void Lowering::store(const TileInst& i) {
  const TileParam& prm = p_.params[i.param];
  llvm::Type* ty = storage_type(prm.dtype);
  Value* base = fn_->getArg(i.param);
  int v = i.args[0];
  if (!i.type.cols) {  // one value per row: the row's first thread writes it
    Value* first = b_.CreateICmpEQ(tc_, b_.getInt32(0));
    if (s_.cluster_blocks > 1) first = b_.CreateAnd(first, b_.CreateICmpEQ(rank_, b_.getInt32(0)));
    for (int r = 0; r < s_.rows_per_thread; ++r)
      guarded(both(first, row_ok_[r]), [&] {
        Value* ptr = b_.CreateInBoundsGEP(ty, base, offset(prm.view, i.type.rows, false, r, 0));
        b_.CreateAlignedStore(to_storage(at(v, r, 0), prm.dtype), ptr, llvm::Align(dtype_size(prm.dtype)));
      });
    return;
  }
  if (s_.window) return store_window(i);
  for (int r = 0; r < s_.rows_per_thread; ++r)
    for (int k = 0; k < s_.chunks_per_thread; ++k) {
      Value* data;
      if (s_.vec > 1) {
        data = llvm::PoisonValue::get(llvm::FixedVectorType::get(ty, s_.vec));
        for (int c = 0; c < s_.vec; ++c)
          data = b_.CreateInsertElement(data, to_storage(at(v, r, k * s_.vec + c), prm.dtype), c);
      } else {
        data = to_storage(at(v, r, k), prm.dtype);
      }
      guarded(both(row_ok_[r], col_ok_[k]), [&] {
        Value* ptr = b_.CreateInBoundsGEP(ty, base, offset(prm.view, true, true, r, k));
        b_.CreateAlignedStore(data, ptr, llvm::Align(dtype_size(prm.dtype) * s_.vec));
      });
    }
}

Value* Lowering::combine(Op op, Value* a, Value* b) {
  switch (op) {
    case Op::ReduceSum:
      return b_.CreateFAdd(a, b);
    case Op::ReduceMax:
      return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, b);
    default:
      return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a, b);
  }
}

bool Lowering::used_only_by(int v, int user) const {
  for (size_t k = 0; k < p_.body.size(); ++k)
    if (static_cast<int>(k) != user && std::count(p_.body[k].args.begin(), p_.body[k].args.end(), v)) return false;
  return true;
}

Value* Lowering::thread_partial(Op op, int v, int r) {
  const TileType& t = inst_of(v).type;
  double identity = identity_of(op);
  // Each element's mask (none where every element counts). A windowed row's masks are its
  // elements'; a value constant along the row has none.
  auto masks = [&] {
    std::vector<Value*> ok(static_cast<size_t>(cols_of(t)));
    for (int c = 0; c < cols_of(t); ++c)
      ok[static_cast<size_t>(c)] = s_.window ? (t.cols ? in_row(c / s_.vec, c % s_.vec) : nullptr)
                                  : col_ok_.empty() ? nullptr : col_ok_[c / s_.vec];
    return ok;
  };
  auto partial = [&](const std::vector<Value*>& ok) {
    Value* acc = f32(identity);
    for (int c = 0; c < cols_of(t); ++c) {
      Value* x = at(v, r, c);
      if (!ok.empty() && ok[static_cast<size_t>(c)]) x = b_.CreateSelect(ok[static_cast<size_t>(c)], x, f32(identity));
      acc = combine(op, acc, x);
    }
    return acc;
  };
  Value* acc;
  if (unmasked_partials() && t.cols) {
    // A thread whose elements all lie in the row (all but those at its two ends) combines them
    // without a mask test each: a branch per reduction instead of a test and select per element.
    auto* whole = llvm::BasicBlock::Create(ctx_, "partial_whole", fn_);
    auto* ends = llvm::BasicBlock::Create(ctx_, "partial_masked", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "partial_done", fn_);
    // A value only this reduction reads (log_softmax's exps; lower_resident leaves it) is
    // computed inside each path, from the loads and the row's earlier reductions: each element is
    // combined as soon as it is computed, and holds no register across the branch. One read
    // elsewhere too (softmax's exps) was computed before the branch.
    std::vector<int> chain;
    for (std::vector<int> todo = {v}; values_[v].empty() && !todo.empty();) {
      const int id = todo.back();
      todo.pop_back();
      if (inst_of(id).opcode != TileOpcode::Compute || !values_[id].empty() || std::count(chain.begin(), chain.end(), id))
        continue;  // (what was computed before stays as it is)
      chain.push_back(id);
      todo.insert(todo.end(), inst_of(id).args.begin(), inst_of(id).args.end());
    }
    // The masked path computes from its row-long inputs zeroed outside the row: had both paths
    // computed the same values, LLVM would hoist them above the branch.
    std::vector<int> inputs;
    for (int id : chain)
      for (int a : inst_of(id).args)
        if (inst_of(a).opcode == TileOpcode::Load && inst_of(a).type.cols && !std::count(inputs.begin(), inputs.end(), a))
          inputs.push_back(a);
    auto in_path = [&](bool masked) {
      std::vector<Regs> before;
      for (int id : chain) before.push_back(std::exchange(values_[id], {}));
      std::vector<Value*> ok = masked ? masks() : std::vector<Value*>{};
      std::vector<Regs> loaded;
      for (int a : masked ? inputs : std::vector<int>{}) {
        loaded.push_back(values_[a]);
        for (int c = 0; c < cols_of(t); ++c)
          for (int rr = 0; rr < rows_of(inst_of(a).type); ++rr) {
            Value*& x = values_[a][static_cast<size_t>(rr * cols_of(t) + c)];
            x = b_.CreateSelect(ok[static_cast<size_t>(c)], x, llvm::Constant::getNullValue(x->getType()));
          }
      }
      ensure(v);
      Value* acc = partial(ok);
      for (size_t j = 0; j < loaded.size(); ++j) values_[inputs[j]] = std::move(loaded[j]);
      for (size_t j = 0; j < chain.size(); ++j) values_[chain[j]] = std::move(before[j]);
      return acc;
    };
    b_.CreateCondBr(whole_window(), whole, ends, llvm::MDBuilder(ctx_).createLikelyBranchWeights());
    b_.SetInsertPoint(whole);
    Value* unmasked = in_path(false);
    llvm::BasicBlock* whole_end = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(ends);
    Value* masked = in_path(true);
    llvm::BasicBlock* ends_end = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    llvm::PHINode* phi = b_.CreatePHI(b_.getFloatTy(), 2);
    phi->addIncoming(unmasked, whole_end);
    phi->addIncoming(masked, ends_end);
    acc = phi;
  } else {
    ensure(v);
    acc = partial(masks());
  }
  // A value constant along the row (broadcast) stands for every column.
  if (!t.cols && op == Op::ReduceSum) {
    acc = b_.CreateFMul(acc, f32(static_cast<double>(s_.cols)));
    if (s_.cluster_blocks > 1)  // the whole row's share, counted once in the cluster
      acc = b_.CreateSelect(b_.CreateICmpEQ(rank_, b_.getInt32(0)), acc, f32(0.0));
  }
  return acc;
}

llvm::GlobalVariable* Lowering::shared_slots(uint64_t n, const char* name) {
  auto* arr = llvm::ArrayType::get(b_.getFloatTy(), n);
  auto* slots = new llvm::GlobalVariable(*m_, arr, false, llvm::GlobalValue::InternalLinkage,
                                         llvm::UndefValue::get(arr), name, nullptr,
                                         llvm::GlobalValue::NotThreadLocal, 3);
  slots->setAlignment(llvm::Align(16));
  return slots;
}

Value* Lowering::warp_allreduce(Op op, Value* acc, int lanes) {
  for (int off = lanes / 2; off >= 1; off /= 2)
    acc = combine(op, acc,
                  b_.CreateIntrinsic(b_.getFloatTy(), llvm::Intrinsic::nvvm_shfl_sync_bfly_f32,
                                     {b_.getInt32(0xffffffff), acc, b_.getInt32(off), b_.getInt32(0x1f)}));
  return acc;
}

Value* Lowering::block_allreduce(Op op, Value* acc, int r) {
  int lanes = std::min(s_.threads_per_row, 32);
  acc = warp_allreduce(op, acc, lanes);
  int warps = s_.threads_per_row / lanes;
  if (warps == 1) return acc;
  Value* slots =
      row_slots(static_cast<uint64_t>(s_.thread_rows) * s_.rows_per_thread * warps, "reduce_slots");
  Value* warp = b_.CreateUDiv(tc_, b_.getInt32(32));
  Value* row_slot = b_.CreateAdd(b_.CreateMul(tr_, b_.getInt32(s_.rows_per_thread)), b_.getInt32(r));
  Value* base = b_.CreateMul(row_slot, b_.getInt32(warps));
  guarded(b_.CreateICmpEQ(b_.CreateURem(tc_, b_.getInt32(32)), b_.getInt32(0)), [&] {
    b_.CreateAlignedStore(acc, b_.CreateInBoundsGEP(b_.getFloatTy(), slots, b_.CreateAdd(base, warp)),
                          llvm::Align(4));
  });
  block_barrier();
  acc = f32(identity_of(op));
  for (int w = 0; w < warps; ++w)
    acc = combine(
        op, acc,
        b_.CreateAlignedLoad(b_.getFloatTy(),
                             b_.CreateInBoundsGEP(b_.getFloatTy(), slots, b_.CreateAdd(base, b_.getInt32(w))),
                             llvm::Align(4)));
  return acc;
}

std::vector<Value*> Lowering::cluster_exchange(const std::vector<Value*>& mine) {
  const int n = s_.cluster_blocks;
  std::vector<Value*> slots;
  for (size_t v = 0; v < mine.size(); ++v)
    slots.push_back(row_slots(static_cast<uint64_t>(n), "cluster_slots"));
  if (!cluster_joined_) {  // pairs with the arrive in the prologue
    intrinsic(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
    cluster_joined_ = true;
  }
  guarded(b_.CreateICmpULT(tc_, b_.getInt32(n)), [&] {
    for (size_t v = 0; v < mine.size(); ++v) {
      Value* local = b_.CreateInBoundsGEP(b_.getFloatTy(), slots[v], rank_);
      Value* theirs = intrinsic(llvm::Intrinsic::nvvm_mapa_shared_cluster, {local, tc_});
      b_.CreateAlignedStore(mine[v], theirs, llvm::Align(4));
    }
  });
  intrinsic(llvm::Intrinsic::nvvm_barrier_cluster_arrive_aligned);
  intrinsic(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
  return slots;
}

Value* Lowering::cluster_allreduce(Op op, Value* acc) {
  Value* slots = cluster_exchange({acc})[0];
  Value* total = f32(identity_of(op));
  for (int w = 0; w < s_.cluster_blocks; ++w) total = combine(op, total, slot(slots, b_.getInt32(w)));
  return total;
}

void Lowering::lower_resident(size_t begin, size_t end) {
  for (size_t k = begin; k < std::min(end, p_.body.size()); ++k) {
    const TileInst& i = p_.body[k];
    if (i.opcode == TileOpcode::Load && !values_[i.result].empty()) continue;  // staged
    // Such rows compute elementwise values where they are used: a value only a reduction reads is
    // computed inside its partial's paths (thread_partial), not before them.
    if (unmasked_partials() && i.opcode == TileOpcode::Compute) continue;
    for (int a : i.args)
      if (!(unmasked_partials() && i.opcode == TileOpcode::Reduce && inst_of(a).type.cols &&
            used_only_by(a, static_cast<int>(k))))
        ensure(a);
    if (i.opcode == TileOpcode::Reduce && i.online_with >= 0 && pairs_path(i.online_with))
      online_sum(i);
    else if (i.opcode == TileOpcode::Reduce && pairs_path(i.result))
      warp_reduce(i);  // completed with its online sum
    else
      lower(i);
  }
}

Value* Lowering::per_row_with(int id, int m, Value* v) {
  std::vector<Regs> saved = values_;
  forget_computed_after(m);
  values_[m] = {v};
  ensure(id);
  Value* out = values_[id][0];
  values_ = std::move(saved);
  return out;
}

void Lowering::online_sum(const TileInst& r) {
  const int m = r.online_with;
  const int e = r.args[0];  // exp(u − c(m))
  const int c = r.online_shift;
  Value* m_warp = values_[m][0];
  Value* s_warp = warp_allreduce(r.op, thread_partial(r.op, e, 0), 32);
  Value* m_row = m_warp;
  Value* s_row = s_warp;
  const int warps = s_.threads_per_row / 32;
  Value* lane = b_.CreateURem(tc_, b_.getInt32(32));
  if (warps > 1) {
    Value* ms = row_slots(static_cast<uint64_t>(warps), "warp_max");
    Value* ss = row_slots(static_cast<uint64_t>(warps), "warp_sum");
    Value* warp = b_.CreateUDiv(tc_, b_.getInt32(32));
    guarded(b_.CreateICmpEQ(lane, b_.getInt32(0)), [&] {
      b_.CreateAlignedStore(m_row, b_.CreateInBoundsGEP(b_.getFloatTy(), ms, warp), llvm::Align(4));
      b_.CreateAlignedStore(s_row, b_.CreateInBoundsGEP(b_.getFloatTy(), ss, warp), llvm::Align(4));
    });
    block_barrier();
    std::tie(m_row, s_row) = merge_pairs(m, c, ms, ss, warps);
  }
  if (s_.cluster_blocks > 1) {
    std::vector<Value*> slots = cluster_exchange({m_row, s_row});
    std::tie(m_row, s_row) = merge_pairs(m, c, slots[0], slots[1], s_.cluster_blocks);
  }
  ensure(c);  // c(m_w), with the warp's max
  settle_online_sum(r, values_[c][0], s_warp, m_row, s_row);
}

void Lowering::settle_online_sum(const TileInst& r, Value* c_warp, Value* s_warp, Value* m_row,
                                 Value* s_row) {
  const int m = r.online_with, e = r.args[0], c = r.online_shift;
  // A warp whose exp values are all 0 (its part masked with −inf) keeps them 0: its factor
  // could be exp(0 − c(M)) = inf.
  Value* factor = math::exp(b_, b_.CreateFSub(c_warp, per_row_with(c, m, m_row)));
  factor = b_.CreateSelect(b_.CreateFCmpOEQ(s_warp, f32(0.0)), f32(0.0), factor);
  row_factors_.insert(factor);
  Regs rescaled;
  for (Value* x : values_[e]) rescaled.push_back(b_.CreateFMul(x, factor));
  forget_computed_after(m);
  values_[m] = {m_row};
  values_[e] = std::move(rescaled);
  types_[r.result] = r.type;
  values_[r.result] = {s_row};
}

std::pair<Value*, Value*> Lowering::merge_pairs(int m, int c, Value* max_slots, Value* sum_slots, int n) {
  Value* lane = b_.CreateURem(tc_, b_.getInt32(32));
  Value* in = b_.CreateICmpULT(lane, b_.getInt32(n));
  Value* i = b_.CreateSelect(in, lane, b_.getInt32(0));
  Value* m_i = slot(max_slots, i);
  Value* s_i = slot(sum_slots, i);
  Value* m_all = warp_allreduce(Op::ReduceMax, b_.CreateSelect(in, m_i, f32(-INFINITY)), 32);
  Value* scale = math::exp(b_, b_.CreateFSub(per_row_with(c, m, m_i), per_row_with(c, m, m_all)));
  Value* term = b_.CreateSelect(b_.CreateOr(b_.CreateNot(in), b_.CreateFCmpOEQ(s_i, f32(0.0))), f32(0.0),
                                b_.CreateFMul(s_i, scale));
  return {m_all, warp_allreduce(Op::ReduceSum, term, 32)};
}

bool Lowering::pairs_path(int m) const {
  if (s_.tile_rows() != 1 || s_.threads_per_row % 32 != 0) return false;
  for (size_t k = static_cast<size_t>(m) + 1; k < p_.body.size(); ++k) {
    const TileInst& i = p_.body[k];
    if (i.opcode != TileOpcode::Reduce) continue;
    return i.online_with == m;
  }
  return false;
}

void Lowering::reduce(const TileInst& i) {
  Regs out;
  for (int r = 0; r < rows_of(i.type); ++r) {
    Value* acc = thread_partial(i.op, i.args[0], r);
    if (types_[i.args[0]].cols) acc = allreduce(i.op, acc, r);
    out.push_back(acc);
  }
  types_[i.result] = i.type;
  values_[i.result] = std::move(out);
}

void Lowering::ensure(int id) {
  if (!values_[id].empty()) return;
  const TileInst& i = inst_of(id);
  if (i.opcode == TileOpcode::Reduce)
    throw CodegenError(fmt::format("kernel {}: %{} is needed before its pass completes it", p_.name, id));
  for (int a : i.args) ensure(a);
  lower(i);
}

bool Lowering::row_subtrahend(int v) const {
  const TileInst& d = inst_of(v);
  return d.opcode == TileOpcode::Compute && d.op == Op::Sub && types_[d.args[0]].cols &&
         !types_[d.args[1]].cols && types_[d.args[0]].rows == types_[d.args[1]].rows;
}

void Lowering::compute(const TileInst& i) {
  types_[i.result] = i.type;
  // Dividing a tile by a value broadcast along it (softmax's x / sum): one correctly rounded
  // reciprocal per divisor element and a multiply per element (≤ 1.5 ulp) instead of a full
  // division per element.
  if (i.op == Op::Exp && i.type.dtype != DType::F32 && row_subtrahend(i.args[0])) {
    // e^(x − c) rounded to 16 bits, c per row: 2^(x·log2 e − c·log2 e) with c·log2 e once per
    // row and one fma per element. c·log2 e's rounding scales the row by at most
    // 1 + |c|·2^-24·ln 2 (1e-3 at |c| = 1e4, under half a bf16 ulp).
    const TileInst& d = inst_of(i.args[0]);
    Regs regs;
    for (int r = 0; r < rows_of(i.type); ++r) {
      Value* cl = b_.CreateFNeg(b_.CreateFMul(at(d.args[1], r, 0), f32(1.4426950408889634)));
      for (int c = 0; c < cols_of(i.type); ++c)
        regs.push_back(
            math::exp2_ftz(b_, b_.CreateIntrinsic(b_.getFloatTy(), llvm::Intrinsic::fma,
                                                    {at(d.args[0], r, c), f32(1.4426950408889634), cl})));
    }
    values_[i.result] = std::move(regs);
    return;
  }
  std::map<Value*, Value*> reciprocal;
  std::map<std::pair<Value*, Value*>, Value*> folded_scales;  // (factor, 1/d) → factor/d
  bool broadcast_divisor = i.op == Op::Div && cols_of(types_[i.args[1]]) < cols_of(i.type);
  Regs regs;
  for (int r = 0; r < rows_of(i.type); ++r)
    for (int c = 0; c < cols_of(i.type); ++c) {
      std::vector<Value*> a;
      for (int arg : i.args) a.push_back(at(arg, r, c));
      if (broadcast_divisor) {
        // A dividend that is x·f with f a per-row factor (softmax's exps rescaled by their
        // warp's factor) becomes x·(f·(1/d)): one multiply per element instead of two.
        Value*& inv = reciprocal[a[1]];
        if (!inv) inv = b_.CreateFDiv(f32(1.0), a[1]);
        auto* scaled = llvm::dyn_cast<llvm::BinaryOperator>(a[0]);
        if (scaled && scaled->getOpcode() == llvm::Instruction::FMul &&
            row_factors_.count(scaled->getOperand(1))) {
          Value*& folded = folded_scales[{scaled->getOperand(1), inv}];
          if (!folded) folded = b_.CreateFMul(scaled->getOperand(1), inv);
          regs.push_back(b_.CreateFMul(scaled->getOperand(0), folded));
          continue;
        }
        regs.push_back(b_.CreateFMul(a[0], inv));
      } else {
        regs.push_back(element(i, a));
      }
    }
  values_[i.result] = std::move(regs);
}

Value* Lowering::element(const TileInst& i, const std::vector<Value*>& a) {
  return tilefuse::element(b_, i.op, i.type.dtype, a, p_.name, i.nonpositive_arg);
}

std::string Lowering::sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::unique_ptr<llvm::Module> lower_to_llvm(const TileProgram& p, llvm::LLVMContext& ctx) {
  return Lowering(p, ctx).run();
}

}  // namespace tilefuse
