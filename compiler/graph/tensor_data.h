#pragma once
// Host tensors in their storage dtype: run-time inputs and outputs.
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace tilefuse {

struct TensorData {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<uint8_t> bytes;

  static TensorData zeros(DType dtype, const Shape& shape);
  // Rounds each value to the dtype.
  static TensorData from_doubles(DType dtype, const Shape& shape, const std::vector<double>& v);
  // Normal(0, scale) values, or {0, 1} for bool.
  static TensorData random(DType dtype, const Shape& shape, std::mt19937_64& rng, double scale = 1.0);
  std::vector<double> to_doubles() const;
  int64_t elements() const { return num_elements(shape); }
};

using TensorMap = std::map<std::string, TensorData>;

// Throws InputError when an input is missing, unknown, or has the wrong shape, dtype or size.
void check_inputs(const Graph& g, const TensorMap& inputs);
// Fresh random inputs for every graph input.
TensorMap random_inputs(const Graph& g, uint64_t seed);

// ‖out − ref‖ / ‖ref‖ (with ‖ref‖ = 0 treated as 1); NaN/inf where out has one that ref lacks.
double relative_error(const std::vector<double>& out, const std::vector<double>& ref);

}  // namespace tilefuse
