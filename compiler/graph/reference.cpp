#include "compiler/graph/reference.h"

#include <fmt/format.h>

#include <cmath>

#include "compiler/support/error.h"
#include "compiler/support/parallel.h"

namespace tilefuse {

double reference_unary(Op op, double x) {
  switch (op) {
    case Op::Neg:
      return -x;
    case Op::Abs:
      return std::fabs(x);
    case Op::Exp:
      return std::exp(x);
    case Op::Exp2:
      return std::exp2(x);
    case Op::Log:
      return std::log(x);
    case Op::Sqrt:
      return std::sqrt(x);
    case Op::Rsqrt:
      return 1.0 / std::sqrt(x);
    case Op::Tanh:
      return std::tanh(x);
    case Op::Erf:
      return std::erf(x);
    case Op::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case Op::Relu:
      return x > 0 ? x : (std::isnan(x) ? x : 0.0);
    case Op::Gelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Op::GeluTanh: {
      const double k = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
    case Op::Cast:
      return x;
    default:
      break;
  }
  throw GraphError(fmt::format("reference: {} is not a unary op", op_info(op).name));
}

double reference_binary(Op op, double a, double b) {
  switch (op) {
    case Op::Add:
      return a + b;
    case Op::Sub:
      return a - b;
    case Op::Mul:
      return a * b;
    case Op::Div:
      return a / b;
    case Op::Max:
      return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case Op::Min:
      return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case Op::Pow:
      return std::pow(a, b);
    case Op::Lt:
      return a < b;
    case Op::Le:
      return a <= b;
    case Op::Gt:
      return a > b;
    case Op::Ge:
      return a >= b;
    case Op::Eq:
      return a == b;
    case Op::Ne:
      return a != b;
    default:
      break;
  }
  throw GraphError(fmt::format("reference: {} is not a binary op", op_info(op).name));
}

static double round_to(DType t, double v) {
  switch (t) {
    case DType::BF16:
      return round_to_bf16(static_cast<float>(v));
    case DType::F16:
      return round_to_f16(static_cast<float>(v));
    default:
      return v;
  }
}

// A uniform draw from [−1, 1] for (seed, node, element): splitmix64 of the three.
static double unit_noise(uint64_t seed, NodeId node, int64_t i) {
  uint64_t z = seed ^ (static_cast<uint64_t>(node) * 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(i) * 0xbf58476d1ce4e5b9ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
}

namespace {
// Maps a flat index of `out` to the flat index of a broadcast operand of shape `in`.
struct BroadcastIndex {
  std::vector<int64_t> out_dims, in_strides;  // in_strides aligned to out rank, 0 where broadcast
  BroadcastIndex(const Shape& in, const Shape& out) : out_dims(out), in_strides(out.size(), 0) {
    int64_t stride = 1;
    for (size_t i = in.size(); i-- > 0;) {
      size_t o = out.size() - in.size() + i;
      in_strides[o] = in[i] == 1 ? 0 : stride;
      stride *= in[i];
    }
  }
  int64_t operator()(int64_t flat) const {
    int64_t idx = 0;
    for (size_t d = out_dims.size(); d-- > 0;) {
      idx += (flat % out_dims[d]) * in_strides[d];
      flat /= out_dims[d];
    }
    return idx;
  }
};
}  // namespace

// C = A·B over the broadcast batch, accumulated in float64; with noise, each product is
// perturbed as a summand of a sum is.
static void matmul(const Graph& g, const Node& n, const std::vector<std::vector<double>>& val,
                   std::vector<double>& out, const ReferenceOptions* noise) {
  const Node& a = g.node(n.operands[0]);
  const Node& b = g.node(n.operands[1]);
  const auto [m, k] = matmul_operand_dims(a.shape, n.transpose_a);
  const int64_t nn = n.shape.back();
  const Shape batch(n.shape.begin(), n.shape.end() - 2);
  BroadcastIndex a_batch(Shape(a.shape.begin(), a.shape.end() - 2), batch);
  BroadcastIndex b_batch(Shape(b.shape.begin(), b.shape.end() - 2), batch);
  const int64_t batches = num_elements(batch);
  const std::vector<double>& av = val[a.id];
  const std::vector<double>& bv = val[b.id];
  parallel_chunks(
      batches * m,
      [&](int64_t begin, int64_t end, int64_t) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t bi = row / m, i = row % m;
          const int64_t a0 = a_batch(bi) * m * k, b0 = b_batch(bi) * k * nn;
          for (int64_t j = 0; j < nn; ++j) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double x = av[a0 + (n.transpose_a ? p * m + i : i * k + p)];
              const double y = bv[b0 + (n.transpose_b ? j * k + p : p * nn + j)];
              double term = x * y;
              if (noise) term *= 1 + noise->noise * unit_noise(noise->noise_seed, n.id, (row * nn + j) * k + p);
              acc += term;
            }
            out[row * nn + j] = acc;
          }
        }
      },
      1);
}

// The cache with the value's slices at ⌈position⌉ (0 where position ≤ 0 or NaN) along the axis;
// slices past the cache's extent dropped.
static void write_at(const Graph& g, const Node& n, const std::vector<std::vector<double>>& val,
                     std::vector<double>& out) {
  const Node &cache = g.node(n.operands[0]), &value = g.node(n.operands[1]), &position = g.node(n.operands[2]);
  const size_t axis = static_cast<size_t>(n.axes[0]);
  int64_t inner = 1;
  for (size_t d = axis + 1; d < n.shape.size(); ++d) inner *= n.shape[d];
  const int64_t extent = n.shape[axis], slices = value.shape[axis], outer = num_elements(n.shape) / (extent * inner);
  out = val[cache.id];
  BroadcastIndex position_of(position.shape, n.shape);
  for (int64_t o = 0; o < outer; ++o) {
    const double x = val[position.id][position_of(o * extent * inner)];
    const double p = std::isnan(x) || x <= 0 ? 0 : std::ceil(x);
    for (int64_t j = 0; j < slices && p + static_cast<double>(j) < static_cast<double>(extent); ++j) {
      const int64_t to = (o * extent + static_cast<int64_t>(p) + j) * inner, from = (o * slices + j) * inner;
      std::copy_n(val[value.id].begin() + from, inner, out.begin() + to);
    }
  }
}

std::map<std::string, std::vector<double>> reference_run(const Graph& g, const TensorMap& inputs,
                                                         const ReferenceOptions& options) {
  verify(g);
  check_inputs(g, inputs);
  std::vector<std::vector<double>> val(g.nodes().size());
  // Values are freed after their last use, so large graphs need only the live tensors.
  std::vector<NodeId> last_use(g.nodes().size(), -1);
  for (const Node& n : g.nodes())
    for (NodeId o : n.operands) last_use[o] = n.id;
  auto release_operands = [&](const Node& n) {
    for (NodeId o : n.operands)
      if (last_use[o] == n.id && !g.is_output(o)) std::vector<double>().swap(val[o]);
  };
  auto rounds = [&](const Node& n) { return options.rounded.empty() || options.rounded.at(n.id); };
  auto noise_of = [&](NodeId n) {
    return options.node_noise.empty() ? options.noise : std::max(options.noise, options.node_noise.at(n));
  };
  auto noisy = [&](NodeId n, int64_t i, double v) {
    return options.noise == 0 ? v : v * (1 + noise_of(n) * unit_noise(options.noise_seed, n, i));
  };
  // A sum, difference or product of whole numbers that is one below 2^24 in magnitude, as f32
  // computes it exactly (a causal mask's i_q + offset: noise there would move the diagonal).
  auto exact_integer_arithmetic = [](const Node& n, const auto& arg, int64_t i, double v) {
    if (n.op != Op::Add && n.op != Op::Sub && n.op != Op::Mul) return false;
    auto whole = [](double x) { return std::fabs(x) <= 0x1p24 && x == std::floor(x); };
    return whole(arg(0, i)) && whole(arg(1, i)) && whole(v);
  };
  for (const Node& n : g.nodes()) {
    int64_t count = num_elements(n.shape);
    std::vector<double>& out = val[n.id];
    if (n.op == Op::Input) {
      out = inputs.at(n.name).to_doubles();
      continue;
    }
    if (n.op == Op::Constant) {
      out.assign(count, round_to(n.dtype, n.value));
      continue;
    }
    out.resize(count);
    if (n.op == Op::Iota) {
      int64_t stride = 1;
      for (size_t d = static_cast<size_t>(n.axes[0]) + 1; d < n.shape.size(); ++d) stride *= n.shape[d];
      const int64_t extent = n.shape[static_cast<size_t>(n.axes[0])];
      for (int64_t i = 0; i < count; ++i) out[i] = round_to(n.dtype, static_cast<double>((i / stride) % extent));
      continue;
    }
    if (n.op == Op::WriteAt) {
      write_at(g, n, val, out);
      release_operands(n);
      continue;
    }
    if (n.op == Op::MatMul) {
      matmul(g, n, val, out, options.noise == 0 ? nullptr : &options);
      if (rounds(n))
        for (double& v : out) v = round_to(n.dtype, v);
      release_operands(n);
      continue;
    }
    if (op_info(n.op).kind == OpKind::Reduce) {
      const Node& in = g.node(n.operands[0]);
      const std::vector<double>& src = val[in.id];
      // Output index of each input element: the input index with the reduced axes dropped.
      Shape kept = reduced_shape(in.shape, n.axes, true);
      BroadcastIndex to_out(kept, in.shape);
      double init = n.op == Op::ReduceSum ? 0.0 : n.op == Op::ReduceMax ? -INFINITY : INFINITY;
      std::fill(out.begin(), out.end(), init);
      auto accumulate = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          double& acc = out[to_out(i)];
          double v = src[i];
          if (n.op == Op::ReduceSum)
            acc += noisy(n.id, i, v);
          else if (std::isnan(v) || std::isnan(acc))
            acc = NAN;
          else
            acc = n.op == Op::ReduceMax ? std::max(acc, v) : std::min(acc, v);
        }
      };
      // Trailing axes: each output owns a contiguous run of inputs, so runs split cleanly.
      int64_t run = static_cast<int64_t>(src.size()) / count;
      bool trailing = n.axes.back() == static_cast<int>(in.shape.size()) - 1 &&
                      n.axes.back() - n.axes.front() + 1 == static_cast<int>(n.axes.size());
      if (trailing)
        parallel_chunks(
            count, [&](int64_t b, int64_t e, int64_t) { accumulate(b * run, e * run); }, 64);
      else
        accumulate(0, static_cast<int64_t>(src.size()));
      if (rounds(n))
        for (double& v : out) v = round_to(n.dtype, v);
      release_operands(n);
      continue;
    }
    std::vector<BroadcastIndex> idx;
    for (NodeId o : n.operands) idx.emplace_back(g.node(o).shape, n.shape);
    auto arg = [&](size_t k, int64_t i) { return val[n.operands[k]][idx[k](i)]; };
    OpKind kind = op_info(n.op).kind;
    parallel_chunks(count, [&](int64_t begin, int64_t end, int64_t) {
      for (int64_t i = begin; i < end; ++i) {
        double v;
        if (kind == OpKind::Unary)
          v = reference_unary(n.op, arg(0, i));
        else if (kind == OpKind::Select)
          v = arg(0, i) != 0.0 ? arg(1, i) : arg(2, i);
        else if (n.op == Op::Fma)
          v = arg(0, i) * arg(1, i) + arg(2, i);
        else
          v = reference_binary(n.op, arg(0, i), arg(1, i));
        if (n.op == Op::Gelu && options.noise != 0)
          // x·(1 + erf(x/√2))/2: f32's 1 + erf cancels for x ≪ 0, so its noise is absolute, in |x|.
          v += 0.5 * std::abs(arg(0, i)) * noise_of(n.id) * unit_noise(options.noise_seed, n.id, i);
        else if (kind != OpKind::Compare && kind != OpKind::Select && n.op != Op::Max && n.op != Op::Min &&
                 n.op != Op::Abs && n.op != Op::Neg && n.op != Op::Relu && n.op != Op::Cast &&
                 !exact_integer_arithmetic(n, arg, i, v))
          v = noisy(n.id, i, v);  // the ops f32 computes exactly stay exact
        out[i] = rounds(n) ? round_to(n.dtype, v) : v;
      }
    });
    release_operands(n);
  }
  std::map<std::string, std::vector<double>> result;
  for (const GraphOutput& o : g.outputs()) result[o.name] = val[o.node];
  return result;
}

}  // namespace tilefuse
