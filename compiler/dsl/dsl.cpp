#include "compiler/dsl/dsl.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/support/error.h"

namespace tilefuse::dsl {

static void same_graph(const char* op, const Tensor& a, const Tensor& b);

static std::string describe(const Tensor& t) {
  return fmt::format("%{} {}{}", t.id(), dtype_name(t.dtype()), shape_str(t.shape()));
}

Tensor input(Graph& g, const std::string& name, const Shape& shape, DType dtype) {
  if (name.empty()) throw GraphError("input: every input needs a non-empty name");
  for (NodeId id : g.inputs())
    if (g.node(id).name == name)
      throw GraphError(
          fmt::format("input '{}' is already declared in graph '{}' (%{}); inputs "
                      "need unique names",
                      name, g.name(), id));
  if (checked_num_elements(shape) < 0)
    throw ShapeError(fmt::format("input '{}': shape {}: {}", name, shape_str(shape), shape_problem(shape)));
  Node n;
  n.op = Op::Input;
  n.shape = shape;
  n.dtype = dtype;
  n.name = name;
  return {&g, g.append(std::move(n))};
}

Tensor constant(Graph& g, double value, DType dtype) {
  if (dtype == DType::Bool)
    throw DTypeError("constant: bool constants are not supported; compare two tensors instead");
  Node n;
  n.op = Op::Constant;
  n.dtype = dtype;
  n.value = value;
  return {&g, g.append(std::move(n))};
}

Tensor iota(Graph& g, const Shape& shape, int axis, DType dtype) {
  const int rank = static_cast<int>(shape.size());
  if (axis < -rank || axis >= rank)
    throw ShapeError(fmt::format("iota: axis {} is out of range for shape {} (rank {})", axis, shape_str(shape), rank));
  if (!is_float(dtype)) throw DTypeError("iota: its values are float; compare them to make a mask");
  if (checked_num_elements(shape) < 0)
    throw ShapeError(fmt::format("iota: shape {}: {}", shape_str(shape), shape_problem(shape)));
  if (dtype != DType::F32 && shape[static_cast<size_t>(axis < 0 ? axis + rank : axis)] > 256)
    throw DTypeError(fmt::format(
        "iota: {} holds integers exactly only up to 256; an axis of {} needs f32 (cast the mask, not the index)",
        dtype_name(dtype), shape[static_cast<size_t>(axis < 0 ? axis + rank : axis)]));
  Node n;
  n.op = Op::Iota;
  n.shape = shape;
  n.dtype = dtype;
  n.axes = {axis < 0 ? axis + rank : axis};
  return {&g, g.append(std::move(n))};
}

Tensor matmul(const Tensor& a, const Tensor& b, const MatMulOptions& options) {
  same_graph("matmul", a, b);
  if (a.dtype() != b.dtype())
    throw DTypeError(fmt::format("matmul: operands {} and {} have different dtypes; cast one", describe(a),
                                 describe(b)));
  if (!is_float(a.dtype())) throw DTypeError(fmt::format("matmul: operands {} are bool", describe(a)));
  const DType out = options.out.value_or(a.dtype());
  if (!is_float(out)) throw DTypeError("matmul: the result dtype must be f32, f16 or bf16");
  Node n;
  n.op = Op::MatMul;
  n.operands = {a.id(), b.id()};
  n.shape = matmul_shape(a.shape(), b.shape(), options.transpose_a, options.transpose_b);
  n.dtype = out;
  n.transpose_a = options.transpose_a;
  n.transpose_b = options.transpose_b;
  return {&a.graph(), a.graph().append(std::move(n))};
}

void output(const std::string& name, const Tensor& t) { t.graph().add_output(name, t.id()); }

static Tensor unary(Op op, const Tensor& x) {
  if (!is_float(x.dtype()))
    throw DTypeError(
        fmt::format("{}: operand {} is bool; {} needs a float tensor (use "
                    "where(cond, a, b) to turn a condition into numbers)",
                    op_info(op).name, describe(x), op_info(op).name));
  Node n;
  n.op = op;
  n.operands = {x.id()};
  n.shape = x.shape();
  n.dtype = x.dtype();
  return {&x.graph(), x.graph().append(std::move(n))};
}

static void same_graph(const char* op, const Tensor& a, const Tensor& b) {
  if (&a.graph() != &b.graph())
    throw GraphError(
        fmt::format("{}: operands {} and {} belong to different graphs ('{}' and "
                    "'{}'); build both in one graph",
                    op, describe(a), describe(b), a.graph().name(), b.graph().name()));
}

static Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  const char* name = op_info(op).name;
  same_graph(name, a, b);
  if (a.dtype() != b.dtype())
    throw DTypeError(
        fmt::format("{}: operands {} and {} have different dtypes; tilefuse never "
                    "converts silently — cast one: cast(x, DType::{})",
                    name, describe(a), describe(b),
                    a.dtype() == DType::Bool ? dtype_name(b.dtype()) : dtype_name(a.dtype())));
  bool compare = op_info(op).kind == OpKind::Compare;
  if (!is_float(a.dtype()))
    throw DTypeError(fmt::format("{}: operands {} and {} are bool; {} needs float tensors", name, describe(a),
                                 describe(b), name));
  Node n;
  n.op = op;
  n.operands = {a.id(), b.id()};
  n.shape = broadcast_shapes(a.shape(), b.shape(), name);
  n.dtype = compare ? DType::Bool : a.dtype();
  return {&a.graph(), a.graph().append(std::move(n))};
}

Tensor neg(const Tensor& x) { return unary(Op::Neg, x); }
Tensor abs(const Tensor& x) { return unary(Op::Abs, x); }
Tensor exp(const Tensor& x) { return unary(Op::Exp, x); }
Tensor exp2(const Tensor& x) { return unary(Op::Exp2, x); }
Tensor log(const Tensor& x) { return unary(Op::Log, x); }
Tensor sqrt(const Tensor& x) { return unary(Op::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(Op::Rsqrt, x); }
Tensor tanh(const Tensor& x) { return unary(Op::Tanh, x); }
Tensor erf(const Tensor& x) { return unary(Op::Erf, x); }
Tensor sigmoid(const Tensor& x) { return unary(Op::Sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(Op::Relu, x); }
Tensor gelu(const Tensor& x, GeluApprox approx) {
  return unary(approx == GeluApprox::Tanh ? Op::GeluTanh : Op::Gelu, x);
}

Tensor cast(const Tensor& x, DType to) {
  if (to == DType::Bool)
    throw DTypeError(fmt::format("cast: {} to bool is not supported; compare instead (x != 0)", describe(x)));
  if (x.dtype() == to) return x;
  Node n;
  n.op = Op::Cast;
  n.operands = {x.id()};
  n.shape = x.shape();
  n.dtype = to;
  return {&x.graph(), x.graph().append(std::move(n))};
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(Op::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(Op::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(Op::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(Op::Div, a, b); }
Tensor max(const Tensor& a, const Tensor& b) { return binary(Op::Max, a, b); }
Tensor min(const Tensor& a, const Tensor& b) { return binary(Op::Min, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(Op::Pow, a, b); }
Tensor pow(const Tensor& a, double b) { return pow(a, constant(a.graph(), b, a.dtype())); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(Op::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(Op::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(Op::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(Op::Ge, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(Op::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(Op::Ne, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  same_graph("where", cond, a);
  same_graph("where", a, b);
  if (cond.dtype() != DType::Bool)
    throw DTypeError(
        fmt::format("where: condition {} must be bool (the result of a comparison "
                    "such as x > 0)",
                    describe(cond)));
  if (a.dtype() != b.dtype())
    throw DTypeError(
        fmt::format("where: branches {} and {} have different dtypes; cast one", describe(a), describe(b)));
  Node n;
  n.op = Op::Where;
  n.operands = {cond.id(), a.id(), b.id()};
  n.shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  n.dtype = a.dtype();
  return {&a.graph(), a.graph().append(std::move(n))};
}

Tensor fma(const Tensor& a, const Tensor& b, const Tensor& c) {
  same_graph("fma", a, b);
  same_graph("fma", b, c);
  if (a.dtype() != b.dtype() || b.dtype() != c.dtype())
    throw DTypeError(fmt::format("fma: operands {}, {} and {} have different dtypes; cast them to one", describe(a),
                                 describe(b), describe(c)));
  if (!is_float(a.dtype())) throw DTypeError(fmt::format("fma: operands {}, … are bool; fma needs float tensors", describe(a)));
  Node n;
  n.op = Op::Fma;
  n.operands = {a.id(), b.id(), c.id()};
  n.shape = broadcast_shapes(broadcast_shapes(a.shape(), b.shape(), "fma"), c.shape(), "fma");
  n.dtype = a.dtype();
  return {&a.graph(), a.graph().append(std::move(n))};
}

Tensor write_at(const Tensor& cache, const Tensor& value, const Tensor& position, int axis) {
  same_graph("write_at", cache, value);
  same_graph("write_at", cache, position);
  const int rank = static_cast<int>(cache.shape().size());
  if (axis < -rank || axis >= rank)
    throw ShapeError(fmt::format("write_at: axis {} is out of range for the cache {}", axis, describe(cache)));
  Graph& g = cache.graph();
  Node n;
  n.id = static_cast<NodeId>(g.nodes().size());  // (not appended yet: nothing reads it)
  n.op = Op::WriteAt;
  n.operands = {cache.id(), value.id(), position.id()};
  n.shape = cache.shape();
  n.dtype = cache.dtype();
  n.axes = {axis < 0 ? axis + rank : axis};
  if (std::string problem = write_at_problem(g, n); !problem.empty())
    throw GraphError(fmt::format("write_at: {}", problem));
  return {&g, g.append(std::move(n))};
}

static std::vector<int> normalize_axes(const char* op, const Tensor& x, const std::vector<int>& axes) {
  int rank = static_cast<int>(x.shape().size());
  if (axes.empty())
    throw ShapeError(fmt::format("{}: no axes given for {}; name at least one axis", op, describe(x)));
  std::vector<int> out;
  for (int a : axes) {
    int n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank)
      throw ShapeError(fmt::format("{}: axis {} is out of range for {} (rank {}: axes {}..{})", op, a,
                                   describe(x), rank, -rank, rank - 1));
    if (std::count(out.begin(), out.end(), n))
      throw ShapeError(fmt::format("{}: axis {} is given twice for {}", op, a, describe(x)));
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

static Tensor reduce(Op op, const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  const char* name = op_info(op).name;
  if (!is_float(x.dtype()))
    throw DTypeError(
        fmt::format("{}: operand {} is bool; reductions need a float tensor", name, describe(x)));
  Node n;
  n.op = op;
  n.operands = {x.id()};
  n.axes = normalize_axes(name, x, axes);
  n.keepdim = keepdim;
  n.shape = reduced_shape(x.shape(), n.axes, keepdim);
  n.dtype = x.dtype();
  return {&x.graph(), x.graph().append(std::move(n))};
}

Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  return reduce(Op::ReduceSum, x, axes, keepdim);
}
Tensor amax(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  return reduce(Op::ReduceMax, x, axes, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  return reduce(Op::ReduceMin, x, axes, keepdim);
}
Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdim) {
  Tensor s = sum(x, axes, keepdim);
  int64_t count = num_elements(x.shape()) / num_elements(s.shape());
  return s * (1.0 / static_cast<double>(count));
}

// The max with −inf (a fully masked row) replaced by 0, so x − max stays −inf, not NaN.
static Tensor safe_row_max(const Tensor& x, int axis) {
  Tensor m = amax(x, {axis}, true);
  return where(m > -INFINITY, m, constant(x.graph(), 0.0, x.dtype()));
}

Tensor softmax(const Tensor& x, int axis) {
  Tensor e = exp(x - safe_row_max(x, axis));
  Tensor s = sum(e, {axis}, true);
  // Every row sums to ≥ 1 (its max contributes exp(0) = 1) except a fully masked row, which sums
  // to 0: max(s, 1) divides that one by 1, giving 0, and leaves the others exact.
  return e / max(s, constant(x.graph(), 1.0, x.dtype()));
}

// q·kᵀ·scale, −inf past each query's last key when causal.
static Tensor attention_scores(const Tensor& q, const Tensor& k, double scale, bool causal) {
  Tensor s = matmul(q, k, {false, true, DType::F32}) * scale;
  if (causal) {
    const int64_t n = s.shape()[s.shape().size() - 2], n_kv = s.shape().back();
    Graph& g = q.graph();
    Tensor seen = iota(g, {n, n_kv}, 0) + static_cast<double>(n_kv - n) >= iota(g, {n, n_kv}, 1);
    s = where(seen, s, -INFINITY);
  }
  return s;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  return matmul(cast(softmax(attention_scores(q, k, scale, causal)), v.dtype()), v);
}

AttentionWithLse attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  Tensor s = attention_scores(q, k, scale, causal);
  const int axis = static_cast<int>(s.shape().size()) - 1;
  Tensor c = safe_row_max(s, axis);  // softmax's, written out so that its sum is at hand
  Tensor e = exp(s - c);
  Tensor total = sum(e, {axis}, true);
  Tensor o = matmul(cast(e / max(total, constant(s.graph(), 1.0, s.dtype())), v.dtype()), v);
  return {o, c + log(total)};
}

Tensor log_softmax(const Tensor& x, int axis) {
  Tensor z = x - safe_row_max(x, axis);
  return z - log(sum(exp(z), {axis}, true));
}

Tensor layernorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor xc = x - mean(x, {-1}, true);
  Tensor var = mean(xc * xc, {-1}, true);
  return xc * rsqrt(var + eps) * w + b;
}

Tensor rmsnorm(const Tensor& x, const Tensor& w, double eps) {
  return x * rsqrt(mean(x * x, {-1}, true) + eps) * w;
}

Tensor operator-(const Tensor& x) { return neg(x); }

#define TILEFUSE_DSL_DEFINE_SCALAR_FUNCTION(fn)                                            \
  Tensor fn(const Tensor& a, double b) { return fn(a, constant(a.graph(), b, a.dtype())); } \
  Tensor fn(double a, const Tensor& b) { return fn(constant(b.graph(), a, b.dtype()), b); }
TILEFUSE_DSL_SCALAR_FUNCTIONS(TILEFUSE_DSL_DEFINE_SCALAR_FUNCTION)
#undef TILEFUSE_DSL_DEFINE_SCALAR_FUNCTION

Tensor pow(double a, const Tensor& b) { return pow(constant(b.graph(), a, b.dtype()), b); }
Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, constant(a.graph(), b, a.dtype())); }
Tensor where(const Tensor& cond, double a, const Tensor& b) { return where(cond, constant(b.graph(), a, b.dtype()), b); }
Tensor where(const Tensor& cond, double a, double b, DType dtype) {
  Graph& g = cond.graph();
  // The constants broadcast over cond's shape through where itself.
  return where(cond, constant(g, a, dtype), constant(g, b, dtype));
}

#define TILEFUSE_DSL_SCALAR_OPERATOR(sym, fn)                                                         \
  Tensor operator sym(const Tensor& a, double b) { return fn(a, constant(a.graph(), b, a.dtype())); } \
  Tensor operator sym(double a, const Tensor& b) { return fn(constant(b.graph(), a, b.dtype()), b); }
TILEFUSE_DSL_SCALAR_OPERATOR(+, add)
TILEFUSE_DSL_SCALAR_OPERATOR(-, sub)
TILEFUSE_DSL_SCALAR_OPERATOR(*, mul)
TILEFUSE_DSL_SCALAR_OPERATOR(/, div)
TILEFUSE_DSL_SCALAR_OPERATOR(<, lt)
TILEFUSE_DSL_SCALAR_OPERATOR(<=, le)
TILEFUSE_DSL_SCALAR_OPERATOR(>, gt)
TILEFUSE_DSL_SCALAR_OPERATOR(>=, ge)
#undef TILEFUSE_DSL_SCALAR_OPERATOR

}  // namespace tilefuse::dsl
