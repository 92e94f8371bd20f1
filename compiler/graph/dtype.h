#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tilefuse {

enum class DType { F32, F16, BF16, Bool };

const char* dtype_name(DType t);
size_t dtype_size(DType t);
bool is_float(DType t);

using Shape = std::vector<int64_t>;
// The most elements a tensor may have: 2^48, far beyond any device's memory, and small enough
// that the byte counts of a whole plan stay exact in 64-bit arithmetic.
constexpr int64_t kMaxElements = int64_t{1} << 48;
int64_t num_elements(const Shape& s);
// num_elements, or -1 when a dimension is not positive or the count passes kMaxElements.
int64_t checked_num_elements(const Shape& s);
std::string shape_str(const Shape& s);

// Host-side rounding used by the reference executor and by buffer conversion.
float round_to_bf16(float x);
float round_to_f16(float x);
// x as a value of dtype t holds it (bool: 0 or 1; f32, bf16, f16 rounded to nearest even).
double rounded(DType t, double x);
uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(uint16_t b);
uint16_t float_to_f16_bits(float x);
float f16_bits_to_float(uint16_t b);

}  // namespace tilefuse
