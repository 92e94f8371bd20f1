#include "compiler/codegen/elementwise.h"

#include <fmt/format.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include "compiler/codegen/accuracy.h"
#include "compiler/codegen/math.h"
#include "compiler/support/error.h"

namespace tilefuse {

using llvm::Value;

static Value* f32(llvm::IRBuilder<>& b, double v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }

llvm::Type* storage_type(llvm::IRBuilder<>& b, DType t) {
  switch (t) {
    case DType::F32:
      return b.getFloatTy();
    case DType::F16:
      return b.getHalfTy();
    case DType::BF16:
      return b.getBFloatTy();
    case DType::Bool:
      return b.getInt8Ty();
  }
  return nullptr;
}

Value* to_compute(llvm::IRBuilder<>& b, Value* v, DType t) {
  if (t == DType::Bool) return b.CreateICmpNE(v, b.getInt8(0));
  if (t == DType::F32) return v;
  return b.CreateFPExt(v, b.getFloatTy());
}

Value* to_storage(llvm::IRBuilder<>& b, Value* v, DType t) {
  if (t == DType::Bool) return b.CreateZExt(v, b.getInt8Ty());
  if (t == DType::F32) return v;
  return b.CreateFPTrunc(v, storage_type(b, t));
}

Value* compute_constant(llvm::IRBuilder<>& b, double v, DType t) {
  if (t == DType::Bool) return b.getInt1(v != 0);
  return to_compute(b, to_storage(b, f32(b, v), t), t);
}

double short_form_error(Op op, DType dtype) {
  if (dtype != DType::BF16 && dtype != DType::F16) return 0;
  switch (op) {
    case Op::Tanh:  // tanh.approx.f32
      return 0x1.0p-11;
    case Op::Exp:  // exp_16bit: 2^-22 + |x|·2^-24, |x| ≤ 89 where a 16-bit result is finite and normal
    case Op::Sigmoid:
    case Op::GeluTanh:  // (sigmoid_16bit: exp_16bit and a reciprocal)
      return 0x1.0p-22 + 89 * 0x1.0p-24;
    case Op::Gelu:  // gelu_16bit's fits (measured over [−40, 40] by their fitting script)
      return dtype == DType::BF16 ? 4.1e-4 : 5e-5;
    case Op::Erf:  // erf_bf16: its fit's 3.6e-4 and tanh.approx's 2^-11
      return dtype == DType::BF16 ? 8.5e-4 : 0;
    default:
      return 0;
  }
}

Value* element(llvm::IRBuilder<>& b, Op op, DType dtype, const std::vector<Value*>& a,
               const std::string& kernel, bool nonpositive_arg, bool absolute_error) {
  const bool half = dtype == DType::BF16 || dtype == DType::F16;  // a result rounded to 16 bits
  switch (op) {
    case Op::Neg:
      return b.CreateFNeg(a[0]);
    case Op::Abs:
      return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a[0]);
    case Op::Exp:
      if (half) return math::exp_16bit(b, a[0]);
      return nonpositive_arg ? math::exp_nonpositive(b, a[0]) : math::exp(b, a[0]);
    case Op::Exp2:
      return math::exp2(b, a[0]);
    case Op::Log:
      return math::log(b, a[0]);
    case Op::Sqrt:
      return math::sqrt(b, a[0]);
    case Op::Rsqrt:
      return math::rsqrt(b, a[0]);
    case Op::Tanh:
      if (half) return math::tanh_16bit(b, a[0]);
      return absolute_error ? math::tanh_absolute(b, a[0]) : math::tanh(b, a[0]);
    case Op::Erf:
      return dtype == DType::BF16 ? math::erf_bf16(b, a[0]) : math::erf(b, a[0]);
    case Op::Sigmoid:
      return half ? math::sigmoid_16bit(b, a[0]) : math::sigmoid(b, a[0]);
    case Op::Relu:  // NaN passes through, as in the reference
      return b.CreateSelect(b.CreateFCmpOLT(a[0], f32(b, 0.0)), f32(b, 0.0), a[0]);
    case Op::Gelu: {
      if (half) return math::gelu_16bit(b, a[0], dtype);
      Value* e = math::erf(b, b.CreateFMul(a[0], f32(b, 0.70710678118654752440)));
      return b.CreateFMul(b.CreateFMul(f32(b, 0.5), a[0]), b.CreateFAdd(f32(b, 1.0), e));
    }
    case Op::GeluTanh: {
      // x·(1 + tanh u)/2 = x·sigmoid(2u), u = √(2/π)(x + 0.044715x³): no cancellation for x ≪ 0.
      Value* x3 = b.CreateFMul(b.CreateFMul(a[0], a[0]), a[0]);
      Value* u2 = b.CreateFMul(f32(b, 2 * 0.79788456080286535588), b.CreateFAdd(a[0], b.CreateFMul(f32(b, 0.044715), x3)));
      return b.CreateFMul(a[0], half ? math::sigmoid_16bit(b, u2) : math::sigmoid(b, u2));
    }
    case Op::Cast: {
      DType to = dtype;
      if (a[0]->getType()->isIntegerTy(1)) return b.CreateSelect(a[0], f32(b, 1.0), f32(b, 0.0));
      return to_compute(b, to_storage(b, a[0], to), to);  // rounds to the target precision
    }
    case Op::Add:
      return b.CreateFAdd(a[0], a[1]);
    case Op::Sub:
      return b.CreateFSub(a[0], a[1]);
    case Op::Mul:
      return b.CreateFMul(a[0], a[1]);
    case Op::Div:  // a 16-bit quotient: div.full (2 ulp of f32 over the full range, no IEEE sequence)
      return half ? b.CreateIntrinsic(llvm::Intrinsic::nvvm_div_full, {a[0], a[1]}) : b.CreateFDiv(a[0], a[1]);
    case Op::Max:
      return b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a[0], a[1]);
    case Op::Min:
      return b.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a[0], a[1]);
    case Op::Pow:
      return math::pow(b, a[0], a[1]);
    case Op::Lt:
      return b.CreateFCmpOLT(a[0], a[1]);
    case Op::Le:
      return b.CreateFCmpOLE(a[0], a[1]);
    case Op::Gt:
      return b.CreateFCmpOGT(a[0], a[1]);
    case Op::Ge:
      return b.CreateFCmpOGE(a[0], a[1]);
    case Op::Eq:
      return b.CreateFCmpOEQ(a[0], a[1]);
    case Op::Ne:
      return b.CreateFCmpUNE(a[0], a[1]);
    case Op::Where:
      return b.CreateSelect(a[0], a[1], a[2]);
    case Op::Fma:
      return b.CreateIntrinsic(llvm::Intrinsic::fma, {a[0]->getType()}, {a[0], a[1], a[2]});
    case Op::Input:
    case Op::Constant:
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::Iota:
    case Op::MatMul:
    case Op::WriteAt:
      break;
  }
  throw CodegenError(fmt::format("kernel {}: op {} has no elementwise lowering", kernel, op_info(op).name));
}

}  // namespace tilefuse
