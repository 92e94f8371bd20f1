#include "compiler/codegen/math.h"

#include <llvm/IR/InlineAsm.h>
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
// erf ≤ 1.5 ulp, tanh's small-argument branch ≤ 1.02 ulp (with ex2.approx's own error included).
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
static constexpr uint32_t kLog2e = 0x3fb8aa3b, kLog2eLo = 0x32a57060;

// x·log2 e split into j + f with j an integer in the low mantissa bits of k = x·log2 e + 1.5·2^23
// (|x·log2 e| < 2^22) and |f| ≤ 0.5 from two fma steps with log2 e split into a high and a low
// part (within 0.35 ulp: checked against float64 over random x in [−104, 89]).
struct Split {
  Value* k;
  Value* f;
};
static Split split_log2e(llvm::IRBuilder<>& b, Value* x) {
  Value* shifter = f32(b, 12582912.0);  // 1.5·2^23
  Value* k = fma(b, x, f32_bits(b, kLog2e), shifter);
  Value* j = b.CreateFSub(k, shifter);
  Value* f = fma(b, x, f32_bits(b, kLog2e), b.CreateFNeg(j));
  return {k, fma(b, x, f32_bits(b, kLog2eLo), f)};
}
// 2^(j + e) as an f32 built from bits, for k from split_log2e and j + e + 127 in [1, 254].
static Value* pow2_of(llvm::IRBuilder<>& b, Value* j_bits, int e) {
  return b.CreateBitCast(b.CreateAdd(b.CreateShl(j_bits, b.getInt32(23)), b.getInt32((127 + e) << 23)),
                         b.getFloatTy());
}

// e^x = 2^f · 2^j: 2^f by ex2.approx.ftz (2 ulp on [2^-0.5, 2^0.5]), 2^j in two halves made
// from bits (so results near overflow and in the subnormal range are one rounding from exact)
// and multiplied in, which also carries a NaN through. About 19 instructions, one MUFU (the
// polynomial form took 25 with two). Beyond 88.73 the result is inf, below −104 it is 0.
Value* exp(llvm::IRBuilder<>& b, Value* x) {
  Split s = split_log2e(b, x);
  Value* p = b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx_ftz, {s.f});
  Value* j = b.CreateSub(b.CreateBitCast(s.k, b.getInt32Ty()), b.getInt32(0x4b400000));
  Value* j1 = b.CreateAShr(j, b.getInt32(1));
  Value* res = b.CreateFMul(b.CreateFMul(p, pow2_of(b, j1, 0)), pow2_of(b, b.CreateSub(j, j1), 0));
  res = b.CreateSelect(b.CreateFCmpOGT(x, f32(b, 88.72283172607422)), f32(b, INFINITY), res);
  return b.CreateSelect(b.CreateFCmpOLT(x, f32(b, -104.0)), f32(b, 0.0), res);
}

// 2^f · 2^j as in exp with one power of two: from x < −86.9 on, 2^f · 2^j is below 2^-125 and may
// leave the normal range: 0 instead. The power of two is multiplied in, so NaN stays NaN.
Value* exp_nonpositive(llvm::IRBuilder<>& b, Value* x) {
  Split s = split_log2e(b, x);
  Value* p = b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx_ftz, {s.f});
  // k's bits shifted left by 23 are j << 23 (the shifter's own bits shift out).
  Value* r = b.CreateFMul(p, pow2_of(b, b.CreateBitCast(s.k, b.getInt32Ty()), 0));
  return b.CreateSelect(b.CreateFCmpOLT(x, f32(b, -86.9)), f32(b, 0.0), r);
}

Value* reciprocal(llvm::IRBuilder<>& b, Value* x) {
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_rcp_approx_ftz_f, {x});
}

// 1 / (1 + e^-x) from t = e^-|x| ≤ 1: 1/(1 + t) for x ≥ 0, t/(1 + t) below (no cancellation,
// no overflow): ≤ 4 ulp, with one reciprocal (1 ulp on [1, 2]) for a full division.
Value* sigmoid(llvm::IRBuilder<>& b, Value* x) {
  Value* t = exp_nonpositive(b, b.CreateFNeg(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x)));
  Value* r = reciprocal(b, b.CreateFAdd(f32(b, 1.0), t));
  return b.CreateFMul(b.CreateSelect(b.CreateFCmpOGE(x, f32(b, 0.0)), f32(b, 1.0), t), r);
}

Value* sigmoid_16bit(llvm::IRBuilder<>& b, Value* x) {
  return reciprocal(b, b.CreateFAdd(f32(b, 1.0), exp_16bit(b, b.CreateFNeg(x))));
}

Value* rsqrt(llvm::IRBuilder<>& b, Value* x) {
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_rsqrt_approx_f, {x});
}

Value* sqrt(llvm::IRBuilder<>& b, Value* x) {
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_sqrt_approx_f, {x});
}

Value* exp2_ftz(llvm::IRBuilder<>& b, Value* x) {
  return b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx_ftz, {x});
}

Value* exp_16bit(llvm::IRBuilder<>& b, Value* x) {
  return exp2_ftz(b, b.CreateFMul(x, f32_bits(b, kLog2e)));
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

// erf for a bf16 result: tanh(x·(c₀ + c₁·x²)), c fitted by tools/mathfit/fit_erf16.py (relative
// error 3.6e-4 with an exact tanh) through tanh.approx (2^-11 beside it): 8.5e-4 in all, under
// half of half a bf16 ulp. Four instructions where erf takes 21. Odd as erf is; ±inf give ±1
// (c₁ > 0: x·P grows with |x|) and NaN stays NaN. Not for f16, whose half ulp is 2^-12.
Value* erf_bf16(llvm::IRBuilder<>& b, Value* x) {
  Value* p = fma(b, b.CreateFMul(x, x), f32_bits(b, 0x3dce4769), f32_bits(b, 0x3f907ba7));
  return tanh_16bit(b, b.CreateFMul(x, p));
}

// tanh: |x| < 0.875: |x| + |x|³·P(x²); below 9.01: (1 − t)/(1 + t) with t = e^{−2|x|} ≤ 0.174
// (one reciprocal, no cancellation); beyond: 1; sign restored.
Value* tanh(llvm::IRBuilder<>& b, Value* x) {
  Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* t2 = b.CreateFMul(a, a);
  Value* p = poly_bits(b, t2, {0x3ab335bb, 0xbbe53d98, 0x3cac2101, 0xbd5c336e, 0x3e08824d, 0xbeaaaa8c});
  Value* small = fma(b, b.CreateFMul(a, t2), p, a);
  Value* t = exp_nonpositive(b, b.CreateFMul(a, f32(b, -2.0)));
  Value* large = b.CreateFMul(b.CreateFSub(f32(b, 1.0), t), reciprocal(b, b.CreateFAdd(f32(b, 1.0), t)));
  Value* res = b.CreateSelect(b.CreateFCmpOLT(a, f32(b, 0.875)), small, large);
  res = b.CreateSelect(b.CreateFCmpOGE(a, f32(b, 9.01)), f32(b, 1.0), res);
  return copysign(b, res, x);
}

Value* tanh_absolute(llvm::IRBuilder<>& b, Value* x) {
  Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* t = exp2_ftz(b, b.CreateFMul(a, f32(b, -2.0 * 1.44269504088896340736)));
  Value* r = b.CreateFMul(b.CreateFSub(f32(b, 1.0), t), reciprocal(b, b.CreateFAdd(f32(b, 1.0), t)));
  return copysign(b, r, x);
}

// tanh.approx.f32: relative error about 2^-11, a quarter of a bf16 ulp.
Value* tanh_16bit(llvm::IRBuilder<>& b, Value* x) {
  auto* ty = llvm::FunctionType::get(b.getFloatTy(), {b.getFloatTy()}, false);
  return b.CreateCall(llvm::InlineAsm::get(ty, "tanh.approx.f32 $0, $1;", "=f,f", false), {x});
}

// x·Φ(x) with Φ(−t) = 2^Q(t), Q fitted on [0, 6] by tools/mathfit/fit_gelu16.py: of degree 5 for
// a bf16 result (relative error 4.0e-4, a fifth of half a bf16 ulp, under tanh.approx's 2^-11),
// of degree 6 for f16 (4.8e-5, a tenth of half an f16 ulp); Φ(x) = 1 − Φ(−x) for x ≥ 0.
// Horner's steps take t = min(|x|, 6), its last step |x| itself: the same Q up to 6, beyond it a
// line falling at 4.8 a unit (Φ(−6) < 1e-9), so that |x| = inf gives ex2(−inf) = 0 and C's
// results: −inf · 0 = NaN, inf · 1 = inf (and NaN stays NaN). 12 PTX instructions (degree 6)
// where the degree-7 fit with a clamp and a select for −inf took 15.
Value* gelu_16bit(llvm::IRBuilder<>& b, Value* x, DType dtype) {
  Value* a = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value* t = b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, a, f32(b, 6.0));
  const bool bf16 = dtype == DType::BF16;
  Value* p = bf16 ? poly_bits(b, t, {0xb94f18fe, 0x3b905e5c, 0xbd2e23af, 0xbef267c0, 0xbf926c34})
                  : poly_bits(b, t, {0x37c0ee83, 0xba204c69, 0x3bebef90, 0xbd51bfb4, 0xbeec2553, 0xbf933a3a});
  Value* q = fma(b, p, a, f32_bits(b, bf16 ? 0xbf801319 : 0xbf8001ee));
  Value* h = b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::nvvm_ex2_approx_ftz, {q});
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
