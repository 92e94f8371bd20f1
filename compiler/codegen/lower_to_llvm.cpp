#include "compiler/codegen/lower_to_llvm.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <fmt/format.h>

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
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, p_.name, m_.get());
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn_->addFnAttr("nvvm.maxntid", std::to_string(s_.block_threads()));
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
    for (const TileInst& i : p_.body) lower(i);
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
      case DType::F32: return b_.getFloatTy();
      case DType::F16: return b_.getHalfTy();
      case DType::BF16: return b_.getBFloatTy();
      case DType::Bool: return b_.getInt8Ty();
    }
    return nullptr;
  }

  Value* sreg(llvm::Intrinsic::ID id) {
    return b_.CreateIntrinsic(b_.getInt32Ty(), id, {});
  }

  // Thread → (row, col) of its elements; masks only when tiles do not cover the domain.
  void prologue() {
    Value* tid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x);
    Value* pid = sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x);
    tc_ = b_.CreateURem(tid, b_.getInt32(s_.threads_per_row), "tc");
    tr_ = b_.CreateUDiv(tid, b_.getInt32(s_.threads_per_row), "tr");
    auto cb = b_.getInt32(static_cast<uint32_t>(s_.col_blocks()));
    Value* pid_c = b_.CreateURem(pid, cb, "pid_c");
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
      case TileOpcode::Load: return load(i);
      case TileOpcode::Constant: {
        double v = i.value;
        Value* c = i.type.dtype == DType::Bool ? static_cast<Value*>(b_.getInt1(v != 0))
                                               : to_compute(to_storage(llvm::ConstantFP::get(b_.getFloatTy(), v), i.type.dtype), i.type.dtype);
        types_[i.result] = i.type;
        values_[i.result] = {c};
        return;
      }
      case TileOpcode::Compute: return compute(i);
      case TileOpcode::Reduce: return reduce(i);
      case TileOpcode::Store: return store(i);
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
        llvm::Align align(dtype_size(prm.dtype) * vec);
        if (vec > 1) {
          Value* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(ty, vec), ptr, align,
                                          fmt::format("{}.r{}.c{}", sanitize(prm.name), r, k));
          for (int c = 0; c < vec; ++c) regs.push_back(to_compute(b_.CreateExtractElement(v, c), prm.dtype));
        } else {
          regs.push_back(to_compute(b_.CreateAlignedLoad(ty, ptr, align), prm.dtype));
        }
      }
    types_[i.result] = i.type;
    values_[i.result] = std::move(regs);
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
      case Op::ReduceSum: return b_.CreateFAdd(a, b);
      case Op::ReduceMax: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, b);
      default: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a, b);
    }
  }

  // Along the row: each thread combines its own elements (masked columns contribute the
  // identity), then the row's threads combine by butterfly shuffles within a warp, then — for
  // rows wider than a warp — through shared memory, one slot per warp.
  void reduce(const TileInst& i) {
    double identity = i.op == Op::ReduceSum ? 0.0 : i.op == Op::ReduceMax ? -INFINITY : INFINITY;
    int arg = i.args[0];
    const TileType& at_type = types_[arg];
    Regs out;
    int lanes = std::min(s_.threads_per_row, 32);
    int warps = s_.threads_per_row / lanes;
    llvm::GlobalVariable* slots = nullptr;
    if (warps > 1) {
      auto* arr = llvm::ArrayType::get(b_.getFloatTy(), static_cast<uint64_t>(s_.thread_rows) * s_.rows_per_thread * warps);
      slots = new llvm::GlobalVariable(*m_, arr, false, llvm::GlobalValue::InternalLinkage,
                                       llvm::UndefValue::get(arr), fmt::format("reduce{}", i.result), nullptr,
                                       llvm::GlobalValue::NotThreadLocal, 3);
      slots->setAlignment(llvm::Align(16));
    }
    for (int r = 0; r < rows_of(i.type); ++r) {
      Value* acc = f32(identity);
      for (int c = 0; c < (at_type.cols ? s_.vec * s_.chunks_per_thread : 1); ++c) {
        Value* v = at(arg, r, c);
        if (Value* ok = col_ok_.empty() ? nullptr : col_ok_[c / s_.vec]) v = b_.CreateSelect(ok, v, f32(identity));
        acc = combine(i.op, acc, v);
      }
      if (!at_type.cols) {  // a per-row value reduced over its row: every column holds it
        if (i.op == Op::ReduceSum) acc = b_.CreateFMul(acc, f32(static_cast<double>(s_.cols)));
      } else {
        for (int off = lanes / 2; off >= 1; off /= 2)
          acc = combine(i.op, acc, b_.CreateIntrinsic(b_.getFloatTy(), llvm::Intrinsic::nvvm_shfl_sync_bfly_f32,
                                                      {b_.getInt32(0xffffffff), acc, b_.getInt32(off), b_.getInt32(0x1f)}));
      }
      if (slots && at_type.cols) {
        Value* warp = b_.CreateUDiv(tc_, b_.getInt32(32));
        Value* row_slot = b_.CreateAdd(b_.CreateMul(tr_, b_.getInt32(s_.rows_per_thread)), b_.getInt32(r));
        Value* base = b_.CreateMul(row_slot, b_.getInt32(warps));
        guarded(b_.CreateICmpEQ(b_.CreateURem(tc_, b_.getInt32(32)), b_.getInt32(0)), [&] {
          b_.CreateAlignedStore(acc, b_.CreateInBoundsGEP(b_.getFloatTy(), slots, b_.CreateAdd(base, warp)), llvm::Align(4));
        });
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {}, {b_.getInt32(0)});
        acc = f32(identity);
        for (int w = 0; w < warps; ++w)
          acc = combine(i.op, acc, b_.CreateAlignedLoad(b_.getFloatTy(),
                                                        b_.CreateInBoundsGEP(b_.getFloatTy(), slots, b_.CreateAdd(base, b_.getInt32(w))),
                                                        llvm::Align(4)));
      }
      out.push_back(acc);
    }
    types_[i.result] = i.type;
    values_[i.result] = std::move(out);
  }

  void compute(const TileInst& i) {
    types_[i.result] = i.type;
    Regs regs;
    for (int r = 0; r < rows_of(i.type); ++r)
      for (int c = 0; c < cols_of(i.type); ++c) {
        std::vector<Value*> a;
        for (int arg : i.args) a.push_back(at(arg, r, c));
        regs.push_back(element(i, a));
      }
    values_[i.result] = std::move(regs);
  }

  Value* f32(double v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); }

  Value* element(const TileInst& i, const std::vector<Value*>& a) {
    switch (i.op) {
      case Op::Neg: return b_.CreateFNeg(a[0]);
      case Op::Abs: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a[0]);
      case Op::Exp: return math::exp(b_, a[0]);
      case Op::Exp2: return math::exp2(b_, a[0]);
      case Op::Log: return math::log(b_, a[0]);
      case Op::Sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a[0]);
      case Op::Rsqrt: return b_.CreateFDiv(f32(1.0), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a[0]));
      case Op::Tanh: return math::tanh(b_, a[0]);
      case Op::Erf: return math::erf(b_, a[0]);
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
        Value* inner = b_.CreateFMul(f32(0.79788456080286535588),
                                     b_.CreateFAdd(a[0], b_.CreateFMul(f32(0.044715), x3)));
        return b_.CreateFMul(b_.CreateFMul(f32(0.5), a[0]), b_.CreateFAdd(f32(1.0), math::tanh(b_, inner)));
      }
      case Op::Cast: {
        DType to = i.type.dtype;
        if (a[0]->getType()->isIntegerTy(1)) return b_.CreateSelect(a[0], f32(1.0), f32(0.0));
        return to_compute(to_storage(a[0], to), to);  // rounds to the target precision
      }
      case Op::Add: return b_.CreateFAdd(a[0], a[1]);
      case Op::Sub: return b_.CreateFSub(a[0], a[1]);
      case Op::Mul: return b_.CreateFMul(a[0], a[1]);
      case Op::Div: return b_.CreateFDiv(a[0], a[1]);
      case Op::Max: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a[0], a[1]);
      case Op::Min: return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a[0], a[1]);
      case Op::Pow: return math::pow(b_, a[0], a[1]);
      case Op::Lt: return b_.CreateFCmpOLT(a[0], a[1]);
      case Op::Le: return b_.CreateFCmpOLE(a[0], a[1]);
      case Op::Gt: return b_.CreateFCmpOGT(a[0], a[1]);
      case Op::Ge: return b_.CreateFCmpOGE(a[0], a[1]);
      case Op::Eq: return b_.CreateFCmpOEQ(a[0], a[1]);
      case Op::Ne: return b_.CreateFCmpUNE(a[0], a[1]);
      case Op::Where: return b_.CreateSelect(a[0], a[1], a[2]);
      case Op::Input:
      case Op::Constant:
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin: break;
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
  Value* tc_ = nullptr;  // thread's position along the row
  Value* tr_ = nullptr;  // thread's row within the block
  std::vector<Value*> cols_, col_ok_;  // per chunk
  std::vector<Value*> rows_, row_ok_;  // per row of the thread
  std::vector<Regs> values_;
  std::vector<TileType> types_;
};

}  // namespace

std::unique_ptr<llvm::Module> lower_to_llvm(const TileProgram& p, llvm::LLVMContext& ctx) {
  return Lowering(p, ctx).run();
}

}  // namespace tilefuse
