#include "compiler/codegen/lower_to_llvm.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <array>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "compiler/codegen/math.h"
#include "compiler/support/error.h"

namespace tilefuse {

using llvm::Value;

namespace {

class Lowering {
 public:
  Lowering(const TileProgram& p, llvm::LLVMContext& ctx)
      : p_(p), s_(p.schedule), ctx_(ctx), b_(ctx), m_(std::make_unique<llvm::Module>(p.name, ctx)) {}

  std::unique_ptr<llvm::Module> run() {
    m_->setTargetTriple(llvm::Triple("nvptx64-nvidia-cuda"));
    std::vector<llvm::Type*> params(p_.params.size(), b_.getPtrTy(1));
    if (s_.split_blocks > 1) {  // split rows: their workspace and the launch's epoch (CompiledKernel)
      params.push_back(b_.getPtrTy(1));
      params.push_back(b_.getInt32Ty());
    }
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, p_.name, m_.get());
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn_->addFnAttr("nvvm.maxntid", std::to_string(s_.block_threads()));
    if (s_.min_blocks_per_sm > 0) fn_->addFnAttr("nvvm.minctasm", std::to_string(s_.min_blocks_per_sm));
    if (s_.split_blocks > 1) fn_->getArg(static_cast<unsigned>(p_.params.size()))->setName("workspace");
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
    if ((s_.cluster_blocks > 1 || s_.stages > 0) && (s_.col_iters > 1 || s_.tile_rows() > 1))
      throw CodegenError(
          fmt::format("kernel {}: clusters and staged rows hold one row per block in registers; this "
                      "schedule has {} rows per block and {} column tiles",
                      p_.name, s_.tile_rows(), s_.col_iters));
    if (s_.col_iters > 1)
      lower_looped();
    else if (s_.split_blocks > 1)
      lower_split();
    else if (s_.stages > 0)
      lower_staged();
    else
      lower_resident();
    if (s_.cluster_blocks > 1 && !cluster_joined_)
      intrinsic(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
    b_.CreateRetVoid();
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyModule(*m_, &os))
      throw CodegenError(fmt::format("kernel {}: generated LLVM IR is invalid: {}", p_.name, err));
    return std::move(m_);
  }

 private:
  using Regs = std::vector<Value*>;

  int rows_of(const TileType& t) const { return t.rows ? s_.rows_per_thread : 1; }
  int cols_of(const TileType& t) const { return t.cols ? s_.vec * s_.chunks_per_thread : 1; }
  Value* at(int v, int r, int c) const {
    const TileType& t = types_[v];
    return values_[v][(t.rows ? r : 0) * cols_of(t) + (t.cols ? c : 0)];
  }

  llvm::Type* storage_type(DType t) {
    switch (t) {
      case DType::F32:
        return b_.getFloatTy();
      case DType::F16:
        return b_.getHalfTy();
      case DType::BF16:
        return b_.getBFloatTy();
      case DType::Bool:
        return b_.getInt8Ty();
    }
    return nullptr;
  }

  Value* sreg(llvm::Intrinsic::ID id) { return b_.CreateIntrinsic(b_.getInt32Ty(), id, {}); }
  // A call of a non-overloaded intrinsic.
  Value* intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<Value*> args = {}) {
    return b_.CreateIntrinsic(id, llvm::ArrayRef<llvm::Type*>{}, args);
  }

  // Thread → (row, col) of its elements; masks only when tiles do not cover the domain.
  void prologue() {
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
    Value* col0 = b_.CreateAdd(b_.CreateMul(pid_c, b_.getInt32(static_cast<uint32_t>(s_.tile_cols()))),
                               b_.CreateMul(tc_, b_.getInt32(s_.vec)), "col", true, true);
    bool mask_cols = s_.cols % s_.tile_cols() != 0, mask_rows = s_.rows % s_.tile_rows() != 0;
    for (int k = 0; k < s_.chunks_per_thread; ++k) {
      Value* col = b_.CreateAdd(col0, b_.getInt32(k * s_.threads_per_row * s_.vec), fmt::format("col{}", k),
                                true, true);
      Value* ok = mask_cols ? b_.CreateICmpULT(col, b_.getInt32(static_cast<uint32_t>(s_.cols))) : nullptr;
      col_ok_.push_back(ok);
      cols_.push_back(mask_cols ? b_.CreateSelect(ok, col, b_.getInt32(0)) : col);
    }
    Value* row0 = b_.CreateMul(pid_r, b_.getInt32(static_cast<uint32_t>(s_.tile_rows())));
    for (int r = 0; r < s_.rows_per_thread; ++r) {
      Value* row = b_.CreateAdd(row0, b_.CreateAdd(tr_, b_.getInt32(r * s_.thread_rows)),
                                fmt::format("row{}", r), true, true);
      Value* ok = mask_rows ? b_.CreateICmpULT(row, b_.getInt32(static_cast<uint32_t>(s_.rows))) : nullptr;
      row_ok_.push_back(ok);
      rows_.push_back(mask_rows ? b_.CreateSelect(ok, row, b_.getInt32(0)) : row);
    }
  }

  // Element offset of (row r of this thread, first column of its chunk k) in a parameter's view.
  Value* offset(const Shape& view, bool spans_rows, bool spans_cols, int r, int k) {
    Value* off = b_.getInt64(0);
    if (spans_rows) {
      size_t n = s_.dims.size();
      bool full = true;
      for (size_t d = 0; d + 1 < n; ++d) full &= view[d] == s_.dims[d];
      Value* row = b_.CreateZExt(rows_[r], b_.getInt64Ty());
      if (full) {
        off = b_.CreateMul(row, b_.getInt64(view.back()), "", true, true);
      } else {  // partially broadcast outer dims: split the row into its dimensions
        Value* rem = row;
        int64_t stride = view.back();
        for (size_t d = n - 1; d-- > 0;) {
          Value* idx = b_.CreateURem(rem, b_.getInt64(s_.dims[d]));
          rem = b_.CreateUDiv(rem, b_.getInt64(s_.dims[d]));
          if (view[d] != 1) off = b_.CreateAdd(off, b_.CreateMul(idx, b_.getInt64(stride)));
          stride *= view[d];
        }
      }
    }
    if (spans_cols) off = b_.CreateAdd(off, b_.CreateZExt(cols_[k], b_.getInt64Ty()), "", true, true);
    return off;
  }

  Value* to_compute(Value* v, DType t) {
    if (t == DType::Bool) return b_.CreateICmpNE(v, b_.getInt8(0));
    if (t == DType::F32) return v;
    return b_.CreateFPExt(v, b_.getFloatTy());
  }
  Value* to_storage(Value* v, DType t) {
    if (t == DType::Bool) return b_.CreateZExt(v, b_.getInt8Ty());
    if (t == DType::F32) return v;
    return b_.CreateFPTrunc(v, storage_type(t));
  }

  void lower(const TileInst& i) {
    switch (i.opcode) {
      case TileOpcode::Load:
        return load(i);
      case TileOpcode::Constant: {
        double v = i.value;
        Value* c = i.type.dtype == DType::Bool
                       ? static_cast<Value*>(b_.getInt1(v != 0))
                       : to_compute(to_storage(llvm::ConstantFP::get(b_.getFloatTy(), v), i.type.dtype),
                                    i.type.dtype);
        types_[i.result] = i.type;
        values_[i.result] = {c};
        return;
      }
      case TileOpcode::Compute:
        return compute(i);
      case TileOpcode::Reduce:
        return reduce(i);
      case TileOpcode::Store:
        return store(i);
    }
  }

  void load(const TileInst& i) {
    const TileParam& prm = p_.params[i.param];
    llvm::Type* ty = storage_type(prm.dtype);
    Value* base = fn_->getArg(i.param);
    Regs regs;
    int vec = i.type.cols ? s_.vec : 1;
    for (int r = 0; r < rows_of(i.type); ++r)
      for (int k = 0; k < (i.type.cols ? s_.chunks_per_thread : 1); ++k) {
        Value* ptr = b_.CreateInBoundsGEP(ty, base, offset(prm.view, i.type.rows, i.type.cols, r, k));
        load_vector(ptr, prm.dtype, vec, fmt::format("{}.r{}.c{}", sanitize(prm.name), r, k), &regs);
      }
    types_[i.result] = i.type;
    values_[i.result] = std::move(regs);
  }

  // `vec` contiguous elements of type `dtype` at `ptr` (global or shared), in compute precision.
  void load_vector(Value* ptr, DType dtype, int vec, const std::string& name, Regs* regs) {
    llvm::Type* ty = storage_type(dtype);
    llvm::Align align(dtype_size(dtype) * vec);
    if (vec == 1) {
      regs->push_back(to_compute(b_.CreateAlignedLoad(ty, ptr, align, name), dtype));
      return;
    }
    Value* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(ty, vec), ptr, align, name);
    for (int c = 0; c < vec; ++c) regs->push_back(to_compute(b_.CreateExtractElement(v, c), dtype));
  }

  // Runs `body` only where `cond` holds (nullptr: always).
  template <typename F>
  void guarded(Value* cond, F body) {
    if (!cond) return body();
    auto* then = llvm::BasicBlock::Create(ctx_, "store", fn_);
    auto* cont = llvm::BasicBlock::Create(ctx_, "stored", fn_);
    b_.CreateCondBr(cond, then, cont);
    b_.SetInsertPoint(then);
    body();
    b_.CreateBr(cont);
    b_.SetInsertPoint(cont);
  }

  Value* both(Value* a, Value* b) { return !a ? b : !b ? a : b_.CreateAnd(a, b); }

  void store(const TileInst& i) {
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

  Value* combine(Op op, Value* a, Value* b) {
    switch (op) {
      case Op::ReduceSum:
        return b_.CreateFAdd(a, b);
      case Op::ReduceMax:
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, b);
      default:
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a, b);
    }
  }

  // This thread's share of row r of value v (masked columns contribute the identity).
  Value* thread_partial(Op op, int v, int r) {
    const TileType& t = types_[v];
    double identity = identity_of(op);
    Value* acc = f32(identity);
    for (int c = 0; c < cols_of(t); ++c) {
      Value* x = at(v, r, c);
      if (Value* ok = col_ok_.empty() ? nullptr : col_ok_[c / s_.vec])
        x = b_.CreateSelect(ok, x, f32(identity));
      acc = combine(op, acc, x);
    }
    // A value constant along the row (broadcast) stands for every column.
    if (!t.cols && op == Op::ReduceSum) {
      if (s_.col_iters > 1)
        throw CodegenError(
            fmt::format("kernel {}: summing a value that is constant along a row longer than "
                        "the registers hold is not supported; multiply by the row length instead",
                        p_.name));
      acc = b_.CreateFMul(acc, f32(static_cast<double>(s_.cols)));
      if (s_.cluster_blocks > 1)  // the whole row's share, counted once in the cluster
        acc = b_.CreateSelect(b_.CreateICmpEQ(rank_, b_.getInt32(0)), acc, f32(0.0));
    }
    return acc;
  }

  static double identity_of(Op op) {
    return op == Op::ReduceSum ? 0.0 : op == Op::ReduceMax ? -INFINITY : INFINITY;
  }

  // A fresh shared-memory array per reduction, so no slot is ever reused (no barrier to
  // protect a second use).
  llvm::GlobalVariable* shared_slots(uint64_t n, const char* name) {
    auto* arr = llvm::ArrayType::get(b_.getFloatTy(), n);
    auto* slots = new llvm::GlobalVariable(*m_, arr, false, llvm::GlobalValue::InternalLinkage,
                                           llvm::UndefValue::get(arr), name, nullptr,
                                           llvm::GlobalValue::NotThreadLocal, 3);
    slots->setAlignment(llvm::Align(16));
    return slots;
  }

  void block_barrier() {
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {}, {b_.getInt32(0)});
  }

  // Combines the row's threads: butterfly shuffles within a warp, then — for rows wider than a
  // warp — shared memory, one slot per warp; then, for a row split over a cluster, the blocks.
  Value* allreduce(Op op, Value* acc, int r) {
    acc = block_allreduce(op, acc, r);
    return s_.cluster_blocks > 1 ? cluster_allreduce(op, acc) : acc;
  }

  // Butterfly shuffles over `lanes` lanes: every lane gets the same total.
  Value* warp_allreduce(Op op, Value* acc, int lanes) {
    for (int off = lanes / 2; off >= 1; off /= 2)
      acc = combine(op, acc,
                    b_.CreateIntrinsic(b_.getFloatTy(), llvm::Intrinsic::nvvm_shfl_sync_bfly_f32,
                                       {b_.getInt32(0xffffffff), acc, b_.getInt32(off), b_.getInt32(0x1f)}));
    return acc;
  }

  Value* block_allreduce(Op op, Value* acc, int r) {
    int lanes = std::min(s_.threads_per_row, 32);
    acc = warp_allreduce(op, acc, lanes);
    int warps = s_.threads_per_row / lanes;
    if (warps == 1) return acc;
    auto* slots =
        shared_slots(static_cast<uint64_t>(s_.thread_rows) * s_.rows_per_thread * warps, "reduce_slots");
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
      acc = combine(op, acc,
                    b_.CreateAlignedLoad(
                        b_.getFloatTy(),
                        b_.CreateInBoundsGEP(b_.getFloatTy(), slots, b_.CreateAdd(base, b_.getInt32(w))),
                        llvm::Align(4)));
    return acc;
  }

  // Every block of the cluster holds its part's values (all its threads do). Thread t pushes
  // them into slot [rank] of block t's arrays; after the cluster barrier (release/acquire)
  // every block's arrays hold all ranks' values. Returns one array per value. A persistent
  // kernel alternates two sets of arrays by row: a block may push the next row's values while
  // a slower peer still reads this row's, but not two rows ahead (that needs the peer at the
  // next row's barrier, after its reads).
  std::vector<Value*> cluster_exchange(const std::vector<Value*>& mine) {
    const int n = s_.cluster_blocks;
    const bool alternate = row_parity_ != nullptr;
    std::vector<Value*> slots;
    for (size_t v = 0; v < mine.size(); ++v) {
      Value* arr = shared_slots(static_cast<uint64_t>(alternate ? 2 * n : n), "cluster_slots");
      if (alternate)
        arr = b_.CreateInBoundsGEP(b_.getFloatTy(), arr, b_.CreateMul(row_parity_, b_.getInt32(n)));
      slots.push_back(arr);
    }
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

  Value* slot(Value* slots, Value* rank) {
    return b_.CreateAlignedLoad(b_.getFloatTy(), b_.CreateInBoundsGEP(b_.getFloatTy(), slots, rank),
                                llvm::Align(4));
  }

  // Combined in rank order, so every block gets bit-identical totals.
  Value* cluster_allreduce(Op op, Value* acc) {
    Value* slots = cluster_exchange({acc})[0];
    Value* total = f32(identity_of(op));
    for (int w = 0; w < s_.cluster_blocks; ++w) total = combine(op, total, slot(slots, b_.getInt32(w)));
    return total;
  }

  // ---- rows held in registers ----

  void lower_resident() {
    for (const TileInst& i : p_.body) {
      if (i.opcode == TileOpcode::Load && !values_[i.result].empty()) continue;  // staged
      for (int a : i.args) ensure(a);
      if (i.opcode == TileOpcode::Reduce && i.online_with >= 0 && pairs_path(i.online_with))
        online_sum(i);
      else if (i.opcode == TileOpcode::Reduce && pairs_path(i.result))
        warp_reduce(i);  // completed with its online sum
      else
        lower(i);
    }
  }

  // ---- persistent rows staged through shared memory ----

  bool staged(const TileInst& i) const { return i.opcode == TileOpcode::Load && i.type.rows && i.type.cols; }

  // Byte offset of each staged parameter's part within a stage.
  std::map<int, int64_t> stage_layout() const {
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

  // The stages' mbarriers (one per stage, expecting its bytes) and the dynamic shared memory
  // that holds them; thread 0 initializes the mbarriers before a block barrier.
  void init_stages() {
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
        intrinsic(llvm::Intrinsic::nvvm_mbarrier_init_shared,
                  {stage_barrier(b_.getInt32(k)), b_.getInt32(1)});
      intrinsic(llvm::Intrinsic::nvvm_fence_mbarrier_init_release_cluster);
    });
    block_barrier();
  }

  Value* leader() { return b_.CreateICmpEQ(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x), b_.getInt32(0)); }
  Value* stage_barrier(Value* stage) { return b_.CreateInBoundsGEP(b_.getInt64Ty(), stage_full_, stage); }
  Value* stage_at(Value* stage, int param) {
    Value* off =
        b_.CreateAdd(b_.CreateMul(b_.CreateZExt(stage, b_.getInt64Ty()), b_.getInt64(s_.stage_bytes)),
                     b_.getInt64(layout_.at(param)));
    return b_.CreateInBoundsGEP(b_.getInt8Ty(), stage_rows_, off);
  }

  // Thread 0: the block's part `part` (its column block) of `row` into `stage`, by one bulk copy
  // per staged tensor, completing on the stage's mbarrier.
  void fill_stage(Value* stage, Value* row, Value* part) {
    intrinsic(llvm::Intrinsic::nvvm_mbarrier_arrive_expect_tx_scope_cta_space_cta,
              {stage_barrier(stage), b_.getInt32(static_cast<uint32_t>(s_.stage_bytes))});
    Value* saved = rows_[0];
    rows_[0] = row;
    Value* col0 = b_.CreateZExt(b_.CreateMul(part, b_.getInt32(static_cast<uint32_t>(s_.tile_cols()))),
                                b_.getInt64Ty());
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

  // Every thread waits for the stage's mbarrier to complete `phase`, then copies its columns of
  // the staged tensors into registers.
  void load_stage(Value* stage, Value* phase) {
    wait_stage(stage, phase);
    read_stage(stage);
  }
  void wait_stage(Value* stage, Value* phase) {
    auto* wait = llvm::BasicBlock::Create(ctx_, "stage.wait", fn_);
    auto* ready = llvm::BasicBlock::Create(ctx_, "stage.ready", fn_);
    b_.CreateBr(wait);
    b_.SetInsertPoint(wait);
    Value* full = intrinsic(llvm::Intrinsic::nvvm_mbarrier_try_wait_parity_scope_cta_space_cta,
                            {stage_barrier(stage), phase});
    b_.CreateCondBr(full, ready, wait);
    b_.SetInsertPoint(ready);
  }
  void read_stage(Value* stage) {
    for (const TileInst& i : p_.body) {
      if (!staged(i)) continue;
      const TileParam& prm = p_.params[i.param];
      Value* part = stage_at(stage, i.param);
      Regs regs;
      for (int k = 0; k < s_.chunks_per_thread; ++k) {  // the columns the thread would load
        Value* col = b_.CreateAdd(b_.CreateMul(tc_, b_.getInt32(s_.vec)),
                                  b_.getInt32(k * s_.threads_per_row * s_.vec));
        Value* ptr = b_.CreateInBoundsGEP(storage_type(prm.dtype), part, b_.CreateZExt(col, b_.getInt64Ty()));
        load_vector(ptr, prm.dtype, s_.vec, fmt::format("{}.c{}", sanitize(prm.name), k), &regs);
      }
      types_[i.result] = i.type;
      values_[i.result] = std::move(regs);
    }
  }

  // The grid holds as many row groups (blocks, or clusters of a row's blocks) as fit at once;
  // group g reduces rows g, g + groups, … Thread 0 keeps `stages` rows ahead in flight. Every
  // thread waits on the stage's mbarrier (its phase flips once per use), copies the part into
  // registers, and after a block barrier (all have read it) thread 0 refills the stage with the
  // row `stages` ahead; the row is then reduced and written from registers while that copy is
  // in flight.
  void lower_staged() {
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
    Value* stage = b_.CreateURem(it, b_.getInt32(stages), "stage");
    Value* phase = b_.CreateAnd(b_.CreateUDiv(it, b_.getInt32(stages)), b_.getInt32(1), "phase");
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

  // ---- split rows: a row's parts are tasks of the persistent grid ----

  // The online sum that completes the row's reductions (the schedule admits only a max and its
  // online sum), and the values computed before it that the rest of the body uses: loads and the
  // sum's exps are carried to the next iteration; the rest is recomputed from them.
  int split_sum() const {
    for (const TileInst& i : p_.body)
      if (i.opcode == TileOpcode::Reduce && i.online_with >= 0 && pairs_path(i.online_with)) return i.result;
    throw CodegenError(fmt::format("kernel {}: split rows need a max and its online sum", p_.name));
  }
  // With `recompute`, the exps are recomputed too (from the carried loads, with the row's max).
  std::vector<int> carried_after(int r, bool recompute) const {
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

  // The columns of this thread in part `part` of a row.
  void set_part(Value* part) {
    Value* col0 = b_.CreateAdd(b_.CreateMul(part, b_.getInt32(static_cast<uint32_t>(s_.tile_cols()))),
                               b_.CreateMul(tc_, b_.getInt32(s_.vec)));
    for (int k = 0; k < s_.chunks_per_thread; ++k)
      cols_[k] = b_.CreateAdd(col0, b_.getInt32(k * s_.threads_per_row * s_.vec));
  }

  // The pairs of split rows in global memory: a pair is two 8-byte words, (max, epoch) and
  // (sum, epoch), each stored and loaded whole at device scope, so a reader needs no fence or
  // counter: a word with this launch's epoch (the last parameter; launch n of the kernel passes
  // n) carries its value. Warp 0's lanes i < P fetch a row's pairs (lane i: part i) into shared
  // slots, two sets alternating by iteration.
  struct PairExchange {
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

    Value* max_slots(Value* parity) {
      return b.CreateInBoundsGEP(b.getFloatTy(), rmax, b.CreateMul(parity, b.getInt32(P)));
    }
    Value* sum_slots(Value* parity) {
      return b.CreateInBoundsGEP(b.getFloatTy(), rsum, b.CreateMul(parity, b.getInt32(P)));
    }

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

  // Task t is part t % P of row t / P, and block b takes tasks b, b + G, … (G blocks, all
  // resident: a cooperative launch). In each iteration the block
  //   1. warp 0 starts loading the previous task's row — its P published pairs — while the
  //      block waits for this task's stage, copies the part into registers and takes each
  //      warp's (max, sum of exps) pair into shared slots; warp 0 then checks that every pair
  //      it loaded is this launch's (reloading any that is not yet) and puts them in shared
  //      slots too;
  //   2. meets at one block barrier; thread 0 refills a stage: this task's (16 elements per
  //      thread) or the one written in the last iteration (32);
  //   3. merges the warps' pairs into the part's pair, which thread 0 publishes;
  //   4. writes the previous task: its row's pairs merged into (M, S); with 16 elements per
  //      thread its warps' exps, kept in registers, rescaled by exp(c(m_w) − c(M)); with 32,
  //      the part read again from its stage and its exps recomputed with M; the rest of the
  //      body computed from them and stored.
  // A block thus never waits for its peers on the task it has just reduced: a row's parts are
  // published an iteration before anyone needs them. The last task is written after the loop.
  void lower_split() {
    const int stages = s_.stages;
    const uint32_t P = static_cast<uint32_t>(s_.split_blocks);
    const int warps = s_.threads_per_row / 32;
    const int r = split_sum();
    const TileInst& sum = inst_of(r);
    const int m = sum.online_with, e = sum.args[0];
    const int c = inst_of(inst_of(e).args[0]).args[1];  // c(m)
    // A task of 32 elements per thread (16-bit parts) is written from its stage, which is
    // refilled only after that (stages − 2 parts ahead), with its exps recomputed from the row's
    // max; one of 16 carries its exps in registers and rescales them, and its stage is refilled
    // as soon as it is read (stages parts ahead).
    const bool recompute = s_.elems_per_thread() > 16;
    if (recompute && stages < 3)
      throw CodegenError(
          fmt::format("kernel {}: split rows of 32 elements per thread need 3 stages", p_.name));
    const std::vector<int> carried = carried_after(r, recompute);
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
    auto at_parity = [&](llvm::GlobalVariable* a, Value* parity, uint32_t n) {
      return b_.CreateInBoundsGEP(b_.getFloatTy(), a, b_.CreateMul(parity, b_.getInt32(n)));
    };
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
    auto write_task = [&](const TaskState& st, Value* parity) {
      Value* row = row_of(st.task);
      rows_[0] = row;
      set_part(part_of(st.task));
      for (Regs& v : values_) v.clear();
      auto [m_row, s_row] =
          merge_pairs(m, c, pairs.max_slots(parity), pairs.sum_slots(parity), static_cast<int>(P));
      if (recompute) {
        read_stage(st.stage);
      } else {
        for (size_t k = 0; k < carried.size(); ++k) values_[carried[k]] = st.regs[k];
        // A warp whose exps are all 0 (its part masked with −inf) keeps them 0.
        values_[m] = {st.m_warp};
        Value* factor =
            math::exp(b_, b_.CreateFSub(per_row_with(c, m, st.m_warp), per_row_with(c, m, m_row)));
        factor = b_.CreateSelect(b_.CreateFCmpOEQ(st.s_warp, f32(0.0)), f32(0.0), factor);
        row_factors_.insert(factor);
        Regs exps = values_[e];
        for (Value*& x : exps) x = b_.CreateFMul(x, factor);
        forget_computed_after(m);
        if (!exps.empty()) values_[e] = std::move(exps);
      }
      values_[m] = {m_row};
      types_[r] = sum.type;
      values_[r] = {s_row};
      for (size_t k = static_cast<size_t>(r) + 1; k < p_.body.size(); ++k) {
        const TileInst& i = p_.body[k];
        for (int a : i.args) ensure(a);
        lower(i);
      }
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

    Value* stage = b_.CreateURem(it, b_.getInt32(stages), "stage");
    Value* phase = b_.CreateAnd(b_.CreateUDiv(it, b_.getInt32(stages)), b_.getInt32(1), "phase");
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
    for (size_t k = 0; k < static_cast<size_t>(r); ++k) {
      const TileInst& i = p_.body[k];
      if (i.opcode == TileOpcode::Load && !values_[i.result].empty()) continue;  // staged
      for (int a : i.args) ensure(a);
      if (i.opcode == TileOpcode::Reduce && pairs_path(i.result))
        warp_reduce(i);
      else
        lower(i);
    }
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
                            b_.CreateInBoundsGEP(b_.getFloatTy(), at_parity(wmax, parity, warps), warp),
                            llvm::Align(4));
      b_.CreateAlignedStore(cur.s_warp,
                            b_.CreateInBoundsGEP(b_.getFloatTy(), at_parity(wsum, parity, warps), warp),
                            llvm::Align(4));
    });
    pairs.finish(prev_row, fetch_prev, parity);
    // 2.
    block_barrier();
    if (recompute) {  // the stage written in the last iteration: every thread has read it
      Value* back2 = b_.CreateSub(task, b_.CreateMul(blocks, b_.getInt32(2)));
      Value* ahead = b_.CreateAdd(back2, b_.CreateMul(blocks, b_.getInt32(stages)));
      Value* stage2 = b_.CreateURem(b_.CreateAdd(it, b_.getInt32(stages - 2)), b_.getInt32(stages));
      guarded(b_.CreateAnd(b_.CreateAnd(leader(), b_.CreateICmpUGE(it, b_.getInt32(2))),
                           b_.CreateICmpULT(ahead, tasks)),
              [&] { fill_stage(stage2, row_of(ahead), part_of(ahead)); });
    } else {
      Value* ahead = b_.CreateAdd(task, b_.CreateMul(blocks, b_.getInt32(stages)));
      guarded(b_.CreateAnd(leader(), b_.CreateICmpULT(ahead, tasks)),
              [&] { fill_stage(stage, row_of(ahead), part_of(ahead)); });
    }
    // 3.
    auto [m_part, s_part] =
        merge_pairs(m, c, at_parity(wmax, parity, warps), at_parity(wsum, parity, warps), warps);
    guarded(leader(), [&] { pairs.publish(task, m_part, s_part); });
    // 4.
    guarded(has_prev, [&] { write_task(prev, parity); });

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
    write_task(cur, last_parity);
    b_.CreateBr(exit);
    b_.SetInsertPoint(exit);
  }

  // Drops every elementwise value after `m` (value ids are body indices), so that what depended
  // on m is recomputed from its current value when next needed.
  void forget_computed_after(int m) {
    for (size_t k = static_cast<size_t>(m) + 1; k < values_.size(); ++k)
      if (p_.body[k].opcode == TileOpcode::Compute) values_[k].clear();
  }

  // Per-row value `id` with max reduction `m` taken to be `v`; other values are left as they were.
  Value* per_row_with(int id, int m, Value* v) {
    std::vector<Regs> saved = values_;
    forget_computed_after(m);
    values_[m] = {v};
    ensure(id);
    Value* out = values_[id][0];
    values_ = std::move(saved);
    return out;
  }

  // Softmax's sum of exp(u − c(m)) with max m, for a row of whole warps: each warp takes its
  // own max m_w and sum s_w of exp(u − c(m_w)) with shuffles alone; the pairs then merge level
  // by level — the block's warps through shared memory, a cluster's blocks through distributed
  // shared memory — each merge one barrier: M = max m_i, S = Σ s_i · exp(c(m_i) − c(M)). So a
  // row takes one block barrier (and one cluster barrier) instead of one per reduction per
  // level. The warp's exp values are rescaled by exp(c(m_w) − c(M)) rather than recomputed;
  // everything else that used m_w is recomputed with M.
  void online_sum(const TileInst& r) {
    const int m = r.online_with;
    const int e = r.args[0];                            // exp(u − c(m))
    const int c = inst_of(inst_of(e).args[0]).args[1];  // c(m)
    Value* m_warp = values_[m][0];
    Value* s_warp = warp_allreduce(r.op, thread_partial(r.op, e, 0), 32);
    Value* m_row = m_warp;
    Value* s_row = s_warp;
    const int warps = s_.threads_per_row / 32;
    Value* lane = b_.CreateURem(tc_, b_.getInt32(32));
    if (warps > 1) {
      auto* ms = shared_slots(static_cast<uint64_t>(warps), "warp_max");
      auto* ss = shared_slots(static_cast<uint64_t>(warps), "warp_sum");
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
    // A warp whose exp values are all 0 (its part masked with −inf) keeps them 0: its factor
    // could be exp(0 − c(M)) = inf.
    Value* factor = math::exp(b_, b_.CreateFSub(values_[c][0], per_row_with(c, m, m_row)));
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

  // The (max, sum) pairs of `n` ≤ 32 parts, in slots [0, n): lane i takes part i's pair and a
  // butterfly over the warp combines them (the same order in every warp of every block, so all
  // get bit-identical totals): one exp per thread instead of one per part.
  std::pair<Value*, Value*> merge_pairs(int m, int c, Value* max_slots, Value* sum_slots, int n) {
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

  // Whether max reduction `m` and its online sum take the warp-pair path: one row per block of
  // whole warps, and no other reduction between them (it would see a warp's max, not the row's).
  bool pairs_path(int m) const {
    if (s_.tile_rows() != 1 || s_.threads_per_row % 32 != 0 || s_.col_iters != 1) return false;
    for (size_t k = static_cast<size_t>(m) + 1; k < p_.body.size(); ++k) {
      const TileInst& i = p_.body[k];
      if (i.opcode != TileOpcode::Reduce) continue;
      return i.online_with == m;
    }
    return false;
  }

  void reduce(const TileInst& i) {
    Regs out;
    for (int r = 0; r < rows_of(i.type); ++r) {
      Value* acc = thread_partial(i.op, i.args[0], r);
      if (types_[i.args[0]].cols) acc = allreduce(i.op, acc, r);
      out.push_back(acc);
    }
    types_[i.result] = i.type;
    values_[i.result] = std::move(out);
  }

  // The reduction over this thread's warp only (one row per block of whole warps).
  void warp_reduce(const TileInst& i) {
    types_[i.result] = i.type;
    values_[i.result] = {warp_allreduce(i.op, thread_partial(i.op, i.args[0], 0), 32)};
  }

  // ---- rows too long for registers: each pass is a loop over column tiles ----

  const TileInst& inst_of(int id) const { return p_.body[static_cast<size_t>(id)]; }  // ids are body indices

  // Computes value `id` (and what it needs) in the current context; completed reductions and
  // values set by the caller are kept.
  void ensure(int id) {
    if (!values_[id].empty()) return;
    const TileInst& i = inst_of(id);
    if (i.opcode == TileOpcode::Reduce)
      throw CodegenError(fmt::format("kernel {}: %{} is needed before its pass completes it", p_.name, id));
    for (int a : i.args) ensure(a);
    lower(i);
  }

  // Forgets every value that is not a completed per-row result.
  void reset(const std::vector<bool>& keep) {
    for (size_t v = 0; v < values_.size(); ++v)
      if (!keep[v]) values_[v].clear();
  }

  // Value `id` (one per row: the thread's row) with reduction `m` taken to be `m_value`.
  Value* with_max(int id, int m, Value* m_value, const std::vector<bool>& keep) {
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

  void lower_looped() {
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
      Value* first_col = b_.CreateMul(it, b_.getInt32(static_cast<uint32_t>(s_.iter_cols())));
      bool mask = s_.cols % s_.iter_cols() != 0;
      for (size_t k = 0; k < cols_.size(); ++k) {
        Value* col = b_.CreateAdd(base_cols[k], first_col);
        col_ok_[k] = mask ? b_.CreateICmpULT(col, b_.getInt32(static_cast<uint32_t>(s_.cols))) : nullptr;
        cols_[k] = mask ? b_.CreateSelect(col_ok_[k], col, b_.getInt32(0)) : col;
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
        int c = inst_of(inst_of(r->args[0]).args[0]).args[1];  // sum(exp(u − c(m)))
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
        next[r->result] = b_.CreateFAdd(scaled, part);
      }
      Value* it_next = b_.CreateAdd(it, b_.getInt32(1));
      llvm::BasicBlock* latch = b_.GetInsertBlock();
      it->addIncoming(it_next, latch);
      for (const TileInst* r : reds) acc[r->result]->addIncoming(next[r->result], latch);
      b_.CreateCondBr(b_.CreateICmpULT(it_next, b_.getInt32(static_cast<uint32_t>(s_.col_iters))), loop,
                      done);
      b_.SetInsertPoint(done);
      reset(keep);
      // The loop exits from its last iteration: `next` holds the thread's totals.
      for (const TileInst* r : reds) {
        Value* total;
        if (r->online_with < 0) {
          total = allreduce(r->op, next[r->result], 0);
        } else {  // bring each thread's sum to the row's max before adding them up
          int m = r->online_with;
          int c = inst_of(inst_of(r->args[0]).args[0]).args[1];
          Value* c_mine = with_max(c, m, next[m], keep);
          Value* c_row = with_max(c, m, values_[m][0], keep);
          Value* s = next[r->result];
          total = allreduce(r->op,
                            guard_zero(s, b_.CreateFMul(s, math::exp(b_, b_.CreateFSub(c_mine, c_row)))), 0);
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

  // Whether value v is u − c(m) with m the row's (or the warp's, or the running) max of u, and
  // c(m) = m or where(…, m, constant): never positive (or NaN, or −inf − constant).
  bool nonpositive(int v) const {
    const TileInst& d = inst_of(v);
    if (d.opcode != TileOpcode::Compute || d.op != Op::Sub) return false;
    const int u = d.args[0];
    auto is_max_of_u = [&](int id) {
      const TileInst& m = inst_of(id);
      return m.opcode == TileOpcode::Reduce && m.op == Op::ReduceMax && m.args[0] == u;
    };
    const TileInst& c = inst_of(d.args[1]);
    if (is_max_of_u(d.args[1])) return true;
    return c.opcode == TileOpcode::Compute && c.op == Op::Where && is_max_of_u(c.args[1]) &&
           inst_of(c.args[2]).opcode == TileOpcode::Constant;
  }

  // Whether value v is x − c with c one value per row (broadcast along the columns).
  bool row_subtrahend(int v) const {
    const TileInst& d = inst_of(v);
    return d.opcode == TileOpcode::Compute && d.op == Op::Sub && types_[d.args[0]].cols &&
           !types_[d.args[1]].cols && types_[d.args[0]].rows == types_[d.args[1]].rows;
  }

  void compute(const TileInst& i) {
    types_[i.result] = i.type;
    // Dividing a tile by a value broadcast along it (softmax's x / sum): one correctly rounded
    // reciprocal per divisor element and a multiply per element (≤ 1.5 ulp) instead of a full
    // division per element.
    if (i.op == Op::Exp && i.type.dtype == DType::F32 && nonpositive(i.args[0])) {
      Regs regs;
      for (Value* x : values_[i.args[0]]) regs.push_back(math::exp_nonpositive(b_, x));
      values_[i.result] = std::move(regs);
      return;
    }
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
              math::exp2_16bit(b_, b_.CreateIntrinsic(b_.getFloatTy(), llvm::Intrinsic::fma,
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

  Value* f32(double v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); }

  Value* element(const TileInst& i, const std::vector<Value*>& a) {
    switch (i.op) {
      case Op::Neg:
        return b_.CreateFNeg(a[0]);
      case Op::Abs:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a[0]);
      case Op::Exp:
        if (i.type.dtype == DType::BF16 || i.type.dtype == DType::F16) return math::exp_16bit(b_, a[0]);
        return math::exp(b_, a[0]);
      case Op::Exp2:
        return math::exp2(b_, a[0]);
      case Op::Log:
        return math::log(b_, a[0]);
      case Op::Sqrt:
        return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a[0]);
      case Op::Rsqrt:
        return b_.CreateFDiv(f32(1.0), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a[0]));
      case Op::Tanh:
        return math::tanh(b_, a[0]);
      case Op::Erf:
        return math::erf(b_, a[0]);
      case Op::Sigmoid:
        return b_.CreateFDiv(f32(1.0), b_.CreateFAdd(f32(1.0), math::exp(b_, b_.CreateFNeg(a[0]))));
      case Op::Relu:  // NaN passes through, as in the reference
        return b_.CreateSelect(b_.CreateFCmpOLT(a[0], f32(0.0)), f32(0.0), a[0]);
      case Op::Gelu: {
        if (i.type.dtype == DType::BF16 || i.type.dtype == DType::F16) return math::gelu_16bit(b_, a[0]);
        Value* e = math::erf(b_, b_.CreateFMul(a[0], f32(0.70710678118654752440)));
        return b_.CreateFMul(b_.CreateFMul(f32(0.5), a[0]), b_.CreateFAdd(f32(1.0), e));
      }
      case Op::GeluTanh: {
        Value* x3 = b_.CreateFMul(b_.CreateFMul(a[0], a[0]), a[0]);
        Value* inner =
            b_.CreateFMul(f32(0.79788456080286535588), b_.CreateFAdd(a[0], b_.CreateFMul(f32(0.044715), x3)));
        return b_.CreateFMul(b_.CreateFMul(f32(0.5), a[0]), b_.CreateFAdd(f32(1.0), math::tanh(b_, inner)));
      }
      case Op::Cast: {
        DType to = i.type.dtype;
        if (a[0]->getType()->isIntegerTy(1)) return b_.CreateSelect(a[0], f32(1.0), f32(0.0));
        return to_compute(to_storage(a[0], to), to);  // rounds to the target precision
      }
      case Op::Add:
        return b_.CreateFAdd(a[0], a[1]);
      case Op::Sub:
        return b_.CreateFSub(a[0], a[1]);
      case Op::Mul:
        return b_.CreateFMul(a[0], a[1]);
      case Op::Div:
        return b_.CreateFDiv(a[0], a[1]);
      case Op::Max:
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a[0], a[1]);
      case Op::Min:
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a[0], a[1]);
      case Op::Pow:
        return math::pow(b_, a[0], a[1]);
      case Op::Lt:
        return b_.CreateFCmpOLT(a[0], a[1]);
      case Op::Le:
        return b_.CreateFCmpOLE(a[0], a[1]);
      case Op::Gt:
        return b_.CreateFCmpOGT(a[0], a[1]);
      case Op::Ge:
        return b_.CreateFCmpOGE(a[0], a[1]);
      case Op::Eq:
        return b_.CreateFCmpOEQ(a[0], a[1]);
      case Op::Ne:
        return b_.CreateFCmpUNE(a[0], a[1]);
      case Op::Where:
        return b_.CreateSelect(a[0], a[1], a[2]);
      case Op::Input:
      case Op::Constant:
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin:
        break;
    }
    throw CodegenError(fmt::format("kernel {}: op {} has no tile lowering", p_.name, op_info(i.op).name));
  }

  static std::string sanitize(const std::string& s) {
    std::string out;
    for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return out;
  }

  const TileProgram& p_;
  const TileSchedule& s_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  std::unique_ptr<llvm::Module> m_;
  llvm::Function* fn_ = nullptr;
  Value* tc_ = nullptr;                // thread's position along the row
  Value* tr_ = nullptr;                // thread's row within the block
  Value* rank_ = nullptr;              // block's column block: its rank in a row's cluster
  bool cluster_joined_ = false;        // the cluster's start barrier has been waited on
  Value* row_parity_ = nullptr;        // persistent kernels: the parity of the block's row count
  std::vector<Value*> cols_, col_ok_;  // per chunk
  std::vector<Value*> rows_, row_ok_;  // per row of the thread
  std::vector<Regs> values_;
  std::vector<TileType> types_;
  // Per-row factors that rescale a row's values (folded into a later per-row divisor).
  std::set<Value*> row_factors_;
  // Staged rows: stage → byte offset per parameter, the stages' mbarriers and buffer.
  std::map<int, int64_t> layout_;
  llvm::GlobalVariable* stage_full_ = nullptr;
  llvm::GlobalVariable* stage_rows_ = nullptr;
};

}  // namespace

std::unique_ptr<llvm::Module> lower_to_llvm(const TileProgram& p, llvm::LLVMContext& ctx) {
  return Lowering(p, ctx).run();
}

}  // namespace tilefuse
