#include "compiler/graph/dtype.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace tilefuse {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::Bool:
      return 1;
  }
  return 0;
}

bool is_float(DType t) { return t != DType::Bool; }

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

int64_t checked_num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    if (d <= 0 || __builtin_mul_overflow(n, d, &n) || n > kMaxElements) return -1;
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

static uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
static float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

uint16_t float_to_bf16_bits(float x) {
  uint32_t u = bits_of(x);
  if (std::isnan(x)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
float bf16_bits_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }
float round_to_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }

uint16_t float_to_f16_bits(float x) {
  uint32_t u = bits_of(x);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t au = u & 0x7fffffff;
  if (au > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);   // NaN
  if (au >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to inf
  if (au < 0x38800000) {  // subnormal half (or zero): scale into integer units of 2^-24
    float a = float_of(au);
    uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));  // 2^24, ties to even
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((au >> 23) - 112) << 10;
  uint32_t mant = au & 0x7fffff;
  uint32_t h = exp | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
  return static_cast<uint16_t>(sign | h);
}

float f16_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000 | (mant << 13));
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}
float round_to_f16(float x) { return f16_bits_to_float(float_to_f16_bits(x)); }

double rounded(DType t, double x) {
  switch (t) {
    case DType::BF16:
      return round_to_bf16(static_cast<float>(x));
    case DType::F16:
      return round_to_f16(static_cast<float>(x));
    case DType::Bool:
      return x != 0.0;
    case DType::F32:
      break;
  }
  return static_cast<double>(static_cast<float>(x));
}

}  // namespace tilefuse
