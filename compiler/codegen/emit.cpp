// Tile IR v2 → LLVM IR: one lowering per instruction. A tile is held as its thread's elements in
// registers (compute precision), in the layout's order: along each axis the thread's
// repetitions of its contiguous run, the first axis outermost.
#include "compiler/codegen/emit.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "compiler/codegen/elementwise.h"
#include "compiler/support/error.h"

namespace tilefuse {

namespace {

using llvm::Value;
using tir::Inst;
using tir::Opcode;
using tir::Program;
using tir::Region;
using tir::Type;

class Emitter {
 public:
  Emitter(const Program& p, llvm::LLVMContext& ctx)
      : p_(p), l_(p.layout), ctx_(ctx), b_(ctx), m_(std::make_unique<llvm::Module>(p.name, ctx)) {}

  std::unique_ptr<llvm::Module> run() {
    if (l_.threads.size() != 2)
      throw CodegenError(fmt::format("kernel {}: codegen takes two-axis tiles, not {}", p_.name, l_.threads.size()));
    m_->setTargetTriple(llvm::Triple("nvptx64-nvidia-cuda"));
    // Tensors, then — where the program has a workspace — the workspace and the launch's epoch
    // (the runtime passes both to every kernel with a workspace; this one needs no epoch).
    std::vector<llvm::Type*> params;
    for (const tir::Param& prm : p_.params)
      if (!prm.workspace) params.push_back(b_.getPtrTy(1));
    for (const tir::Param& prm : p_.params)
      if (prm.workspace) {
        params.push_back(b_.getPtrTy(1));
        params.push_back(b_.getInt32Ty());
      }
    fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                 llvm::Function::ExternalLinkage, p_.name, m_.get());
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn_->addFnAttr("nvvm.maxntid", std::to_string(p_.block_threads()));
    if (p_.min_blocks_per_sm > 0) fn_->addFnAttr("nvvm.minctasm", std::to_string(p_.min_blocks_per_sm));
    for (size_t i = 0, tensors = 0; i < p_.params.size(); ++i) {
      const tir::Param& prm = p_.params[i];
      const unsigned at = prm.workspace ? static_cast<unsigned>(params.size() - 2) : static_cast<unsigned>(tensors++);
      llvm::Argument* a = fn_->getArg(at);
      args_.push_back(a);
      a->setName(prm.workspace ? "workspace" : fmt::format("arg{}", i));
      a->addAttr(llvm::Attribute::NoAlias);
      if (!prm.workspace) a->addAttr(prm.output ? llvm::Attribute::WriteOnly : llvm::Attribute::ReadOnly);
    }
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    vals_.resize(p_.types.size());
    uses_.assign(p_.types.size(), 0);
    count_uses(p_.body);
    Value* tid = b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {});
    thread_[1] = b_.CreateURem(tid, b_.getInt32(static_cast<uint32_t>(l_.threads[1])), "tc");
    thread_[0] = b_.CreateUDiv(tid, b_.getInt32(static_cast<uint32_t>(l_.threads[1])), "tr");
    region(p_.body);
    b_.CreateRetVoid();
    std::string err;
    llvm::raw_string_ostream os(err);
    if (llvm::verifyModule(*m_, &os))
      throw CodegenError(fmt::format("kernel {}: generated LLVM IR is invalid: {}", p_.name, err));
    return std::move(m_);
  }

 private:
  const Type& type(int v) const { return p_.types.at(static_cast<size_t>(v)); }
  llvm::IntegerType* index_ty() { return p_.wide_indices ? b_.getInt64Ty() : b_.getInt32Ty(); }
  Value* index(int64_t v) { return llvm::ConstantInt::get(index_ty(), static_cast<uint64_t>(v)); }
  Value* one(int v) const { return vals_.at(static_cast<size_t>(v)).at(0); }

  void count_uses(const Region& r) {
    for (const Inst& i : r.body) {
      for (int a : i.args) uses_[static_cast<size_t>(a)]++;
      for (const Region& inner : i.regions) count_uses(inner);
    }
  }

  // Elements the thread holds along axis d of a tile spanning `extent` there.
  int count(int64_t extent, size_t d) const { return extent == 1 ? 1 : l_.reps[d] * l_.per_thread[d]; }
  // The position within the tile of the thread's element i along axis d (an i32).
  Value* position(size_t d, int i) {
    const int pt = l_.per_thread[d], rep = i / pt, j = i % pt;
    Value* run = b_.CreateMul(b_.CreateAdd(thread_[d], b_.getInt32(static_cast<uint32_t>(rep * l_.threads[d]))),
                              b_.getInt32(static_cast<uint32_t>(pt)));
    return j == 0 ? run : b_.CreateAdd(run, b_.getInt32(static_cast<uint32_t>(j)));
  }
  // Element index along axis d: the offset plus the element's position (unless the tile is one
  // element wide there), clamped to 0 where masked and out of the view; `ok` gets the mask.
  Value* coordinate(const Inst& i, size_t d, int64_t tile_extent, int element, Value** ok) {
    Value* at = one(i.args[d]);
    if (tile_extent != 1) at = b_.CreateAdd(at, b_.CreateZExt(position(d, element), index_ty()), "", true, true);
    *ok = nullptr;
    if (d < i.masked.size() && i.masked[d]) {
      const int limit = d < i.limits.size() ? i.limits[d] : -1;
      *ok = b_.CreateICmpULT(at, limit >= 0 ? one(limit) : index(index_extent(p_.params[static_cast<size_t>(i.param)], d)));
      at = b_.CreateSelect(*ok, at, index(0));
    }
    return at;
  }

  // How far indices into a parameter run along axis d: its view's extent, or — where its rows are
  // split into the domain's row dimensions — the domain's rows (an index is a domain row there).
  static int64_t index_extent(const tir::Param& prm, size_t d) {
    return d == 0 && !prm.row_dims.empty() ? num_elements(prm.row_dims) : prm.view[d];
  }

  // Element offset of (row, col) in a parameter: its rows split into the domain's dimensions
  // where it is broadcast along some of them.
  Value* offset(const tir::Param& prm, Value* row, Value* col) {
    Value* off = b_.getInt64(0);
    if (prm.view[0] != 1) {
      Value* r = b_.CreateZExt(row, b_.getInt64Ty());
      if (prm.row_dims.empty()) {
        off = b_.CreateMul(r, b_.getInt64(static_cast<uint64_t>(prm.view[1])), "", true, true);
      } else {
        int64_t stride = prm.view[1];
        for (size_t d = prm.row_dims.size(); d-- > 0;) {
          Value* idx = b_.CreateURem(r, b_.getInt64(static_cast<uint64_t>(prm.row_dims[d])));
          r = b_.CreateUDiv(r, b_.getInt64(static_cast<uint64_t>(prm.row_dims[d])));
          if (prm.row_view[d] != 1) off = b_.CreateAdd(off, b_.CreateMul(idx, b_.getInt64(static_cast<uint64_t>(stride))));
          stride *= prm.row_view[d];
        }
      }
    }
    if (prm.view[1] != 1) off = b_.CreateAdd(off, b_.CreateZExt(col, b_.getInt64Ty()), "", true, true);
    return off;
  }

  // Each run of contiguous elements along the last axis is one vector access.
  template <typename F>  // f(element index along axis 0, first element along axis 1, width, row, col, mask)
  void for_each_vector(const Inst& i, const Shape& shape, F f) {
    const int width = shape[1] == 1 ? 1 : l_.per_thread[1];
    for (int e0 = 0; e0 < count(shape[0], 0); ++e0)
      for (int e1 = 0; e1 < count(shape[1], 1); e1 += width) {
        Value *ok0, *ok1;
        Value* row = coordinate(i, 0, shape[0], e0, &ok0);
        Value* col = coordinate(i, 1, shape[1], e1, &ok1);
        Value* ok = !ok0 ? ok1 : !ok1 ? ok0 : b_.CreateAnd(ok0, ok1);
        f(e0, e1, width, row, col, ok);
      }
  }

  void load(const Inst& i) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const Type& t = type(i.results[0]);
    llvm::Type* ty = storage_type(b_, prm.dtype);
    std::vector<Value*> out;
    // An element used by many instructions gets a register of its own: instruction selection
    // otherwise walks the multi-result vector load's whole use list for each of them (quadratic
    // in long fused chains; see bench/NOTES.md, robustness).
    const bool widely_used = uses_[static_cast<size_t>(i.results[0])] > 64;
    for_each_vector(i, t.shape, [&](int, int, int width, Value* row, Value* col, Value*) {
      Value* ptr = b_.CreateInBoundsGEP(ty, args_[static_cast<size_t>(i.param)], offset(prm, row, col));
      const llvm::Align align(dtype_size(prm.dtype) * static_cast<size_t>(width));
      if (width == 1) {
        out.push_back(to_compute(b_, b_.CreateAlignedLoad(ty, ptr, align), prm.dtype));
        return;
      }
      Value* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(ty, static_cast<unsigned>(width)), ptr, align);
      for (int c = 0; c < width; ++c) {
        Value* x = to_compute(b_, b_.CreateExtractElement(v, static_cast<uint64_t>(c)), prm.dtype);
        out.push_back(widely_used && x->getType()->isFloatTy() ? own_register(x) : x);
      }
    });
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  Value* own_register(Value* x) {
    auto* ty = llvm::FunctionType::get(b_.getFloatTy(), {b_.getFloatTy()}, false);
    return b_.CreateCall(llvm::InlineAsm::get(ty, "mov.b32 $0, $1;", "=f,f", false), {x});
  }

  void store(const Inst& i) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const int v = i.args.back();
    const Type& t = type(v);
    llvm::Type* ty = storage_type(b_, prm.dtype);
    const std::vector<Value*>& elems = vals_.at(static_cast<size_t>(v));
    const int per_row = count(t.shape[1], 1);
    for_each_vector(i, t.shape, [&](int e0, int e1, int width, Value* row, Value* col, Value* ok) {
      Value* data;
      if (width == 1) {
        data = to_storage(b_, elems[static_cast<size_t>(e0 * per_row + e1)], prm.dtype);
      } else {
        data = llvm::PoisonValue::get(llvm::FixedVectorType::get(ty, static_cast<unsigned>(width)));
        for (int c = 0; c < width; ++c)
          data = b_.CreateInsertElement(data, to_storage(b_, elems[static_cast<size_t>(e0 * per_row + e1 + c)], prm.dtype),
                                        static_cast<uint64_t>(c));
      }
      guarded(ok, [&] {
        Value* ptr = b_.CreateInBoundsGEP(ty, args_[static_cast<size_t>(i.param)], offset(prm, row, col));
        b_.CreateAlignedStore(data, ptr, llvm::Align(dtype_size(prm.dtype) * static_cast<size_t>(width)));
      });
    });
  }

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

  // Elementwise over the result's elements; operands that are one element wide along an axis
  // (or scalars) are broadcast.
  void compute(const Inst& i) {
    const Type& t = type(i.results[0]);
    std::vector<Value*> out;
    const int n0 = t.is_tile() ? count(t.shape[0], 0) : 1, n1 = t.is_tile() ? count(t.shape[1], 1) : 1;
    for (int e0 = 0; e0 < n0; ++e0)
      for (int e1 = 0; e1 < n1; ++e1) {
        std::vector<Value*> args;
        for (int a : i.args) {
          const Type& at = type(a);
          if (!at.is_tile()) {
            args.push_back(one(a));
            continue;
          }
          const int a0 = at.shape[0] == 1 ? 0 : e0, a1 = at.shape[1] == 1 ? 0 : e1;
          args.push_back(vals_[static_cast<size_t>(a)][static_cast<size_t>(a0 * count(at.shape[1], 1) + a1)]);
        }
        out.push_back(element(b_, i.op, t.dtype, args, p_.name));
      }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  void inst(const Inst& i) {
    auto set = [&](Value* v) { vals_[static_cast<size_t>(i.results.at(0))] = {v}; };
    switch (i.opcode) {
      case Opcode::ProgramId:
        if (i.axis != 0) throw CodegenError(fmt::format("kernel {}: one grid axis only", p_.name));
        return set(b_.CreateZExt(b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, {}),
                                 index_ty()));
      case Opcode::Const: {
        const Type& t = type(i.results[0]);
        if (t.kind == Type::Kind::Index) return set(index(static_cast<int64_t>(i.value)));
        Value* c = compute_constant(b_, i.value, t.dtype);
        if (!t.is_tile()) return set(c);
        vals_[static_cast<size_t>(i.results[0])].assign(static_cast<size_t>(count(t.shape[0], 0) * count(t.shape[1], 1)), c);
        return;
      }
      case Opcode::Splat: {
        const Type& t = type(i.results[0]);
        vals_[static_cast<size_t>(i.results[0])].assign(static_cast<size_t>(count(t.shape[0], 0) * count(t.shape[1], 1)),
                                                        one(i.args[0]));
        return;
      }
      case Opcode::IndexMul:
        return set(b_.CreateMul(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexAdd:
        return set(b_.CreateAdd(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexDiv:
        return set(b_.CreateUDiv(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexRem:
        return set(b_.CreateURem(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexMin:
        return set(b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, one(i.args[0]), one(i.args[1])));
      case Opcode::InBounds:
        return in_bounds(i);
      case Opcode::Reduce:
        return reduce(i);
      case Opcode::For:
        return loop(i);
      case Opcode::If:
        return when(i);
      case Opcode::LastArrival:
        return last_arrival(i);
      case Opcode::ResetCount:
        return reset_count(i);
      case Opcode::Load:
        return load(i);
      case Opcode::Store:
        return store(i);
      case Opcode::Compute:
        return compute(i);
      case Opcode::Yield:
        break;
    }
    throw CodegenError(fmt::format("kernel {}: no lowering for {} yet", p_.name, opcode_name(i.opcode)));
  }

  void region(const Region& r) {
    for (const Inst& i : r.body) inst(i);
  }

  size_t elements(const Type& t) const {
    return t.is_tile() ? static_cast<size_t>(count(t.shape[0], 0) * count(t.shape[1], 1)) : 1;
  }

  // Whether offset + each element's position along the axis is below the limit.
  void in_bounds(const Inst& i) {
    const Type& t = type(i.results[0]);
    const size_t d = static_cast<size_t>(i.axis);
    std::vector<Value*> out;
    for (int e0 = 0; e0 < count(t.shape[0], 0); ++e0)
      for (int e1 = 0; e1 < count(t.shape[1], 1); ++e1) {
        Value* at = one(i.args[0]);
        if (t.shape[d] != 1) at = b_.CreateAdd(at, b_.CreateZExt(position(d, d == 0 ? e0 : e1), index_ty()));
        out.push_back(b_.CreateICmpULT(at, one(i.args[1])));
      }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // Along an axis no two threads share (threads[axis] == 1): the thread's own elements combined
  // in order. (Reductions across threads stay with the first Tile IR until they move here.)
  void reduce(const Inst& i) {
    const size_t d = static_cast<size_t>(i.axis);
    const Type& in = type(i.args[0]);
    if (l_.threads[d] != 1)
      throw CodegenError(fmt::format("kernel {}: a reduction across threads along axis {} is not in Tile IR v2 yet",
                                     p_.name, d));
    const std::vector<Value*>& v = vals_[static_cast<size_t>(i.args[0])];
    const int n0 = count(in.shape[0], 0), n1 = count(in.shape[1], 1);
    const Op combine = i.op == Op::ReduceSum ? Op::Add : i.op == Op::ReduceMax ? Op::Max : Op::Min;
    std::vector<Value*> out;
    for (int a = 0; a < (d == 0 ? n1 : n0); ++a) {
      Value* acc = nullptr;
      for (int e = 0; e < (d == 0 ? n0 : n1); ++e) {
        Value* x = v[static_cast<size_t>(d == 0 ? e * n1 + a : a * n1 + e)];
        acc = acc ? element(b_, combine, DType::F32, {acc, x}, p_.name) : x;
      }
      out.push_back(acc);
    }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // lo ≤ iv < hi by step, the carried values (every element of a carried tile) as PHIs.
  void loop(const Inst& i) {
    const Region& r = i.regions.at(0);
    Value* lo = one(i.args[0]);
    Value* hi = one(i.args[1]);
    Value* step = one(i.args[2]);
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* body = llvm::BasicBlock::Create(ctx_, "loop.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "loop.exit", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* iv = b_.CreatePHI(index_ty(), 2, "iv");
    iv->addIncoming(lo, pre);
    vals_[static_cast<size_t>(r.args[0])] = {iv};
    std::vector<std::vector<llvm::PHINode*>> phis;
    for (size_t k = 3; k < i.args.size(); ++k) {
      std::vector<llvm::PHINode*> ps;
      std::vector<Value*> vs;
      for (Value* init : vals_[static_cast<size_t>(i.args[k])]) {
        llvm::PHINode* phi = b_.CreatePHI(init->getType(), 2);
        phi->addIncoming(init, pre);
        ps.push_back(phi);
        vs.push_back(phi);
      }
      vals_[static_cast<size_t>(r.args[k - 2])] = vs;
      phis.push_back(ps);
    }
    b_.CreateCondBr(b_.CreateICmpULT(iv, hi), body, exit);
    b_.SetInsertPoint(body);
    for (const Inst& inner : r.body)
      if (inner.opcode != Opcode::Yield) inst(inner);
    const Inst& yield = r.body.back();
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    iv->addIncoming(b_.CreateAdd(iv, step), latch);
    for (size_t k = 0; k < phis.size(); ++k)
      for (size_t e = 0; e < phis[k].size(); ++e)
        phis[k][e]->addIncoming(vals_[static_cast<size_t>(yield.args[k])][e], latch);
    b_.CreateBr(head);
    b_.SetInsertPoint(exit);
    for (size_t k = 0; k < i.results.size(); ++k)
      vals_[static_cast<size_t>(i.results[k])] = std::vector<Value*>(phis[k].begin(), phis[k].end());
  }

  void when(const Inst& i) {
    guarded(one(i.args[0]), [&] { region(i.regions.at(0)); });
  }

  Value* leader() {
    Value* tid = b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {});
    return b_.CreateICmpEQ(tid, b_.getInt32(0));
  }
  void block_barrier() {
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {}, {b_.getInt32(0)});
  }
  // The u32 counter `slot` after the workspace's f32 view.
  Value* counter(const Inst& i) {
    const tir::Param& ws = p_.params[static_cast<size_t>(i.param)];
    Value* base = b_.CreateInBoundsGEP(b_.getFloatTy(), args_[static_cast<size_t>(i.param)],
                                       b_.getInt64(static_cast<uint64_t>(num_elements(ws.view))));
    return b_.CreateInBoundsGEP(b_.getInt32Ty(), base, b_.CreateZExt(one(i.args[0]), b_.getInt64Ty()));
  }

  // Every thread's earlier writes reach the block barrier; thread 0 releases them at device
  // scope and counts the block in; the block that brings the count to `arrivals` acquires the
  // others' writes (thread 0's acquire, passed on by the second barrier) and learns it is last.
  // (LLVM 22 emits an acq_rel atomicrmw as a relaxed one, so the fences are explicit.)
  void last_arrival(const Inst& i) {
    llvm::SyncScope::ID device = ctx_.getOrInsertSyncScopeID("device");
    auto* flag_ty = llvm::ArrayType::get(b_.getInt32Ty(), 1);
    auto* flag = new llvm::GlobalVariable(*m_, flag_ty, false, llvm::GlobalValue::InternalLinkage,
                                          llvm::UndefValue::get(flag_ty), "last_block", nullptr,
                                          llvm::GlobalValue::NotThreadLocal, 3);
    block_barrier();
    Value* slot = counter(i);
    Value* arrivals = b_.CreateTrunc(one(i.args[1]), b_.getInt32Ty());
    guarded(leader(), [&] {
      b_.CreateFence(llvm::AtomicOrdering::Release, device);
      Value* before = b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, slot, b_.getInt32(1), llvm::Align(4),
                                         llvm::AtomicOrdering::Monotonic, device);
      Value* last = b_.CreateICmpEQ(b_.CreateAdd(before, b_.getInt32(1)), arrivals);
      guarded(last, [&] { b_.CreateFence(llvm::AtomicOrdering::Acquire, device); });
      b_.CreateAlignedStore(b_.CreateZExt(last, b_.getInt32Ty()), flag, llvm::Align(4));
    });
    block_barrier();
    Value* last = b_.CreateICmpNE(b_.CreateAlignedLoad(b_.getInt32Ty(), flag, llvm::Align(4)), b_.getInt32(0));
    vals_[static_cast<size_t>(i.results[0])] = {last};
  }

  void reset_count(const Inst& i) {
    llvm::SyncScope::ID device = ctx_.getOrInsertSyncScopeID("device");
    Value* slot = counter(i);
    guarded(leader(), [&] {
      auto* st = b_.CreateAlignedStore(b_.getInt32(0), slot, llvm::Align(4));
      st->setAtomic(llvm::AtomicOrdering::Monotonic, device);
    });
  }

  const Program& p_;
  const tir::Layout& l_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  std::unique_ptr<llvm::Module> m_;
  llvm::Function* fn_ = nullptr;
  Value* thread_[2] = {nullptr, nullptr};  // the thread's coordinate along each axis (i32)
  std::vector<std::vector<Value*>> vals_;  // value id → the thread's elements
  std::vector<int> uses_;                  // value id → instructions using it
  std::vector<llvm::Argument*> args_;      // param → its kernel argument
};

}  // namespace

std::unique_ptr<llvm::Module> emit_program(const tir::Program& p, llvm::LLVMContext& ctx) {
  return Emitter(p, ctx).run();
}

}  // namespace tilefuse
