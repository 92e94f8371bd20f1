#include "compiler/codegen/math.h"

#include <llvm/IR/IntrinsicsNVPTX.h>

#include <cmath>
#include <cstring>

namespace tilefuse::math {

using llvm::Value;

static Value* f32(llvm::IRBuilder<>& b, double v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }
static Value* fma(llvm::IRBuilder<>& b, Value* x, Value* y, Value* z) {
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::fma, {x, y, z});
}
static Value* ex2(llvm::IRBuilder<>& b, Value* x) {  // PTX ex2.approx.f32: 2 ulp, subnormals kept
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx, {x});
}
static Value* lg2(llvm::IRBuilder<>& b, Value* x) {
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_lg2_approx_f, {x});
}
static Value* copysign(llvm::IRBuilder<>& b, Value* mag, Value* sign) {
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sign);
}

Value* exp2(llvm::IRBuilder<>& b, Value* x) { return ex2(b, x); }

// Coefficients fitted for this module (minimax-weighted least squares in high precision, then
// rounded to f32 one at a time and refitted), verified over every f32 input against float64:
// exp ≤ 0.9 ulp, erf ≤ 1.5 ulp, tanh ≤ 1.02 ulp (with ex2.approx's own error included).
static Value* f32_bits(llvm::IRBuilder<>& b, uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return llvm::ConstantFP::get(b.getFloatTy(), f);
}
static Value* poly_bits(llvm::IRBuilder<>& b, Value* x, std::initializer_list<uint32_t> high_first) {
  auto it = high_first.begin();
  Value* acc = f32_bits(b, *it++);
  for (; it != high_first.end(); ++it) acc = fma(b, acc, x, f32_bits(b, *it));
  return acc;
}
static constexpr uint32_t kLog2e = 0x3fb8aa3b, kLog2eLo = 0x32a57060, kLn2Hi = 0x3f317200,
                          kLn2Lo = 0x35bfbe8e;

// e^r on [−ln2/2, ln2/2], degree 6.
static Value* exp_reduced(llvm::IRBuilder<>& b, Value* r) {
  return poly_bits(b, r,
                   {0x3ab525f5, 0x3c091f31, 0x3d2aac5d, 0x3e2aaa46, 0x3efffffe, 0x3f800000, 0x3f800000});
}

// e^x = 2^j · e^r with j = rint(x·log2 e) and r = x − j·ln2 in two exact fma steps (ln2's high
// part has trailing zero bits), so the error does not grow with |x|. 2^j is applied in two
// halves so that results near overflow and in the subnormal range stay exact. NaN propagates;
// −inf (which makes r NaN) is caught by the final select.
Value* exp(llvm::IRBuilder<>& b, Value* x) {
  Value* j = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(x, f32_bits(b, kLog2e)));
  Value* nj = b.CreateFNeg(j);
  Value* r = fma(b, nj, f32_bits(b, kLn2Hi), x);
  r = fma(b, nj, f32_bits(b, kLn2Lo), r);
  Value* j1 = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(j, f32(b, 0.5)));
  Value* j2 = b.CreateFSub(j, j1);
  Value* res = b.CreateFMul(b.CreateFMul(exp_reduced(b, r), ex2(b, j1)), ex2(b, j2));
  res = b.CreateSelect(b.CreateFCmpOGT(x, f32(b, 88.72283172607422)), f32(b, INFINITY), res);
  return b.CreateSelect(b.CreateFCmpOLT(x, f32(b, -104.0)), f32(b, 0.0), res);
}

// 2^j · 2^f: j = rint(x·log2 e) by adding 1.5·2^23 (j lands in the sum's low mantissa bits),
// f = x·log2 e − j from two fma steps with log2 e split into a high and a low part (|f| ≤ 0.5,
// within 0.35 ulp: checked against float64 over random x in [−87, 0]), 2^f by ex2.approx.ftz
// (2 ulp), and 2^j added to 2^f's exponent bits: the sum's bits shifted left by 23 are j << 23.
// From x < −86.9 on, 2^f · 2^j is below 2^-125 and may leave the normal range: 0 instead.
Value* exp_nonpositive(llvm::IRBuilder<>& b, Value* x) {
  Value* shifter = f32(b, 12582912.0);  // 1.5·2^23
  Value* k = fma(b, x, f32_bits(b, kLog2e), shifter);
  Value* j = b.CreateFSub(k, shifter);
  Value* f = fma(b, x, f32_bits(b, kLog2e), b.CreateFNeg(j));
  f = fma(b, x, f32_bits(b, kLog2eLo), f);
  Value* p = b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx_ftz, {f});
  Value* scale = b.CreateShl(b.CreateBitCast(k, b.getInt32Ty()), b.getInt32(23));
  Value* r = b.CreateBitCast(b.CreateAdd(b.CreateBitCast(p, b.getInt32Ty()), scale), b.getFloatTy());
  return b.CreateSelect(b.CreateFCmpOLT(x, f32(b, -86.9)), f32(b, 0.0), r);
}

Value* exp2_16bit(llvm::IRBuilder<>& b, Value* x) {
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx_ftz, {x});
}

Value* exp_16bit(llvm::IRBuilder<>& b, Value* x) {
  return exp2_16bit(b, b.CreateFMul(x, f32_bits(b, kLog2e)));
}

// erf: |x| < 0.9: |x| + |x|·P(x²); 0.9 ≤ |x| < 3.92: 1 − 2^Q(|x|); beyond: 1; sign restored.
Value* erf(llvm::IRBuilder<>& b, Value* x) {
  Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* t = b.CreateFMul(a, a);
  Value* p = poly_bits(b, t, {0xba1dd4e7, 0x3ba3ce4f, 0xbcdb4dcb, 0x3de70dc3, 0xbec09376, 0x3e0375d3});
  Value* small = fma(b, a, p, a);
  Value* q =
      poly_bits(b, a, {0x39954c43, 0xbb908b50, 0x3d03aff7, 0xbe19b852, 0xbf6b4752, 0xbfd041fe, 0xb98458fa});
  Value* large = b.CreateFSub(f32(b, 1.0), ex2(b, q));
  Value* r = b.CreateSelect(b.CreateFCmpOLT(a, f32(b, 0.9)), small, large);
  r = b.CreateSelect(b.CreateFCmpOGE(a, f32(b, 3.92)), f32(b, 1.0), r);
  return copysign(b, r, x);
}

// tanh: |x| < 0.875: |x| + |x|³·P(x²); below 9.01: 1 − 2/(e^{2|x|} + 1); beyond: 1; sign restored.
Value* tanh(llvm::IRBuilder<>& b, Value* x) {
  Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* t = b.CreateFMul(a, a);
  Value* p = poly_bits(b, t, {0x3ab335bb, 0xbbe53d98, 0x3cac2101, 0xbd5c336e, 0x3e08824d, 0xbeaaaa8c});
  Value* small = fma(b, b.CreateFMul(a, t), p, a);
  Value* a2 = b.CreateFAdd(a, a);  // ≤ 18.02 here, so one 2^j scale suffices
  Value* j = b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, b.CreateFMul(a2, f32_bits(b, kLog2e)));
  Value* nj = b.CreateFNeg(j);
  Value* r = fma(b, nj, f32_bits(b, kLn2Hi), a2);
  r = fma(b, nj, f32_bits(b, kLn2Lo), r);
  Value* e = b.CreateFMul(exp_reduced(b, r), ex2(b, j));
  Value* large = b.CreateFSub(f32(b, 1.0), b.CreateFDiv(f32(b, 2.0), b.CreateFAdd(e, f32(b, 1.0))));
  Value* res = b.CreateSelect(b.CreateFCmpOLT(a, f32(b, 0.875)), small, large);
  res = b.CreateSelect(b.CreateFCmpOGE(a, f32(b, 9.01)), f32(b, 1.0), res);
  return copysign(b, res, x);
}

// x·Φ(x) with Φ(−t) = 2^Q(t), t = min(|x|, 6), Q of degree 7 fitted by
// tools/mathfit/fit_gelu16.py; Φ(x) = 1 − Φ(−x) for x ≥ 0. Beyond 6, Φ(−6)·x < 1e-8·|x|.
Value* gelu_16bit(llvm::IRBuilder<>& b, Value* x) {
  Value* t = b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum,
                                     b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), f32(b, 6.0));
  Value* q = poly_bits(
      b, t, {0xb5fd9f10, 0x388373d2, 0xba761e5c, 0x3c0be919, 0xbd5d44cc, 0xbeeab4b0, 0xbf935cca, 0xbf7fffa1});
  Value* h =
      b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx_ftz, {q});  // q ≥ −57: no subnormals
  Value* phi = b.CreateSelect(b.CreateFCmpOLT(x, f32(b, 0.0)), h, b.CreateFSub(f32(b, 1.0), h));
  return b.CreateFMul(x, phi);
}

Value* log(llvm::IRBuilder<>& b, Value* x) { return b.CreateFMul(lg2(b, x), f32(b, 0.6931471805599453)); }

// |a|^b through 2^(b·log2|a|), with C's sign and special cases: a negative base needs an integer
// exponent (odd → negative result); pow(a, 0) = pow(1, b) = 1.
Value* pow(llvm::IRBuilder<>& b, Value* a, Value* e) {
  Value* mag = ex2(b, b.CreateFMul(e, lg2(b, b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a))));
  Value* half = b.CreateFMul(e, f32(b, 0.5));
  Value* is_int = b.CreateFCmpOEQ(b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, e), e);
  Value* is_odd =
      b.CreateAnd(is_int, b.CreateFCmpUNE(b.CreateUnaryIntrinsic(llvm::Intrinsic::rint, half), half));
  Value* neg = b.CreateFCmpOLT(a, f32(b, 0.0));
  Value* r = b.CreateSelect(is_odd, b.CreateFNeg(mag), mag);
  r = b.CreateSelect(b.CreateAnd(neg, b.CreateNot(is_int)), f32(b, NAN), r);
  r = b.CreateSelect(neg, r, mag);
  Value* one = b.CreateOr(b.CreateFCmpOEQ(e, f32(b, 0.0)), b.CreateFCmpOEQ(a, f32(b, 1.0)));
  return b.CreateSelect(one, f32(b, 1.0), r);
}

}  // namespace tilefuse::math
