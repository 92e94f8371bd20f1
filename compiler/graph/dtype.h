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
int64_t num_elements(const Shape& s);
std::string shape_str(const Shape& s);

// Host-side rounding used by the reference executor and by buffer conversion.
float round_to_bf16(float x);
float round_to_f16(float x);
uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(uint16_t b);
uint16_t float_to_f16_bits(float x);
float f16_bits_to_float(uint16_t b);

}  // namespace tilefuse
