#include "compiler/graph/tensor_data.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <set>

#include "compiler/support/error.h"
#include "compiler/support/parallel.h"

namespace tilefuse {

TensorData TensorData::zeros(DType dtype, const Shape& shape) {
  TensorData t;
  t.dtype = dtype;
  t.shape = shape;
  t.bytes.assign(static_cast<size_t>(num_elements(shape)) * dtype_size(dtype), 0);
  return t;
}

TensorData TensorData::from_doubles(DType dtype, const Shape& shape, const std::vector<double>& v) {
  TensorData t = zeros(dtype, shape);
  if (static_cast<int64_t>(v.size()) != num_elements(shape))
    throw InputError(fmt::format("from_doubles: {} values for shape {} ({} elements)", v.size(),
                                 shape_str(shape), num_elements(shape)));
  parallel_chunks(static_cast<int64_t>(v.size()), [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t i = begin; i < end; ++i) {
      float f = static_cast<float>(v[i]);
      switch (dtype) {
        case DType::F32:
          std::memcpy(&t.bytes[i * 4], &f, 4);
          break;
        case DType::BF16: {
          uint16_t b = float_to_bf16_bits(f);
          std::memcpy(&t.bytes[i * 2], &b, 2);
          break;
        }
        case DType::F16: {
          uint16_t h = float_to_f16_bits(f);
          std::memcpy(&t.bytes[i * 2], &h, 2);
          break;
        }
        case DType::Bool:
          t.bytes[i] = v[i] != 0.0;
          break;
      }
    }
  });
  return t;
}

std::vector<double> TensorData::to_doubles() const {
  size_t n = static_cast<size_t>(elements());
  std::vector<double> v(n);
  parallel_chunks(static_cast<int64_t>(n), [&](int64_t begin, int64_t end, int64_t) {
    for (int64_t i = begin; i < end; ++i) {
      switch (dtype) {
        case DType::F32: {
          float f;
          std::memcpy(&f, &bytes[i * 4], 4);
          v[i] = f;
          break;
        }
        case DType::BF16: {
          uint16_t b;
          std::memcpy(&b, &bytes[i * 2], 2);
          v[i] = bf16_bits_to_float(b);
          break;
        }
        case DType::F16: {
          uint16_t h;
          std::memcpy(&h, &bytes[i * 2], 2);
          v[i] = f16_bits_to_float(h);
          break;
        }
        case DType::Bool:
          v[i] = bytes[i] ? 1.0 : 0.0;
          break;
      }
    }
  });
  return v;
}

TensorData TensorData::random(DType dtype, const Shape& shape, std::mt19937_64& rng, double scale) {
  std::vector<double> v(static_cast<size_t>(num_elements(shape)));
  // Fixed-size chunks, each with its own generator seeded from `rng`: the values depend on the
  // seed only, not on how many threads draw them.
  const int64_t chunk = int64_t{1} << 20;
  int64_t chunks = (static_cast<int64_t>(v.size()) + chunk - 1) / chunk;
  std::vector<uint64_t> seeds(static_cast<size_t>(chunks));
  for (uint64_t& s : seeds) s = rng();
  parallel_chunks(
      chunks,
      [&](int64_t begin, int64_t end, int64_t) {
        for (int64_t c = begin; c < end; ++c) {
          std::mt19937_64 local(seeds[c]);
          std::normal_distribution<double> normal(0.0, scale);
          std::bernoulli_distribution coin(0.5);
          for (int64_t i = c * chunk; i < std::min<int64_t>((c + 1) * chunk, v.size()); ++i)
            v[i] = dtype == DType::Bool ? coin(local) : normal(local);
        }
      },
      1);
  return from_doubles(dtype, shape, v);
}

void check_inputs(const Graph& g, const TensorMap& inputs) {
  std::set<std::string> known;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    known.insert(n.name);
    auto it = inputs.find(n.name);
    if (it == inputs.end())
      throw InputError(fmt::format("graph '{}': input '{}' ({}{}) was not given", g.name(), n.name,
                                   dtype_name(n.dtype), shape_str(n.shape)));
    const TensorData& t = it->second;
    if (t.dtype != n.dtype)
      throw InputError(
          fmt::format("graph '{}': input '{}' must be {}, got {}; convert the buffer "
                      "or declare the input as {}",
                      g.name(), n.name, dtype_name(n.dtype), dtype_name(t.dtype), dtype_name(t.dtype)));
    if (t.shape != n.shape)
      throw InputError(fmt::format("graph '{}': input '{}' must have shape {}, got {}", g.name(), n.name,
                                   shape_str(n.shape), shape_str(t.shape)));
    size_t want = static_cast<size_t>(num_elements(n.shape)) * dtype_size(n.dtype);
    if (t.bytes.size() != want)
      throw InputError(fmt::format("graph '{}': input '{}' ({}{}) needs {} bytes, the buffer has {}",
                                   g.name(), n.name, dtype_name(n.dtype), shape_str(n.shape), want,
                                   t.bytes.size()));
  }
  for (const auto& [name, t] : inputs)
    if (!known.count(name))
      throw InputError(fmt::format("graph '{}' has no input named '{}'", g.name(), name));
}

TensorMap random_inputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TensorMap m;
  for (NodeId id : g.inputs()) {
    const Node& n = g.node(id);
    m[n.name] = TensorData::random(n.dtype, n.shape, rng);
  }
  return m;
}

double relative_error(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(ref[i]) != std::isnan(out[i])) return NAN;
    if (std::isnan(ref[i])) continue;
    if (std::isinf(ref[i]) || std::isinf(out[i])) {
      if (ref[i] != out[i]) return INFINITY;
      continue;
    }
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / (den > 0 ? std::sqrt(den) : 1.0);
}

}  // namespace tilefuse
