#pragma once
// The DSL: build a Graph with tensor handles and C++ operators.
//
//   Graph g("bias_gelu");
//   Tensor x = input(g, "x", {8192, 8192});
//   Tensor b = input(g, "b", {8192});
//   output("y", gelu(x + b));
//
// Shapes broadcast as in numpy. Two tensors of different dtypes never mix silently: insert
// cast(t, dtype). A C++ number next to a tensor becomes a constant of the tensor's dtype.
#include <optional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace tilefuse::dsl {

class Tensor {
 public:
  Tensor(Graph* g, NodeId id) : g_(g), id_(id) {}
  Graph& graph() const { return *g_; }
  NodeId id() const { return id_; }
  // Valid until the graph grows: copy what must outlive the next op.
  const Node& node() const { return g_->node(id_); }
  // By value: a reference into the graph would dangle once another node is appended.
  Shape shape() const { return node().shape; }
  DType dtype() const { return node().dtype; }

 private:
  Graph* g_;
  NodeId id_;
};

Tensor input(Graph& g, const std::string& name, const Shape& shape, DType dtype = DType::F32);
Tensor constant(Graph& g, double value, DType dtype = DType::F32);
// A tensor of `shape` whose value at every index is that index along `axis` (negative counts
// from the end): iota(g, {n, n}, 0) >= iota(g, {n, n}, 1) is a causal mask.
Tensor iota(Graph& g, const Shape& shape, int axis, DType dtype = DType::F32);
void output(const std::string& name, const Tensor& t);

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor exp2(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApprox { None, Tanh };
// GELU: exact x·Φ(x) (erf form), or the tanh approximation.
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::None);
Tensor cast(const Tensor& x, DType to);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor max(const Tensor& a, const Tensor& b);
Tensor min(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
// where(cond, a, b): cond must be bool (the result of a comparison).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// fma(a, b, c): a·b + c rounded once (one instruction; a·b then + c rounds twice).
Tensor fma(const Tensor& a, const Tensor& b, const Tensor& c);

// The binary functions and where with a C++ number in place of a tensor: the number becomes a
// constant of the other tensor's dtype (where of two numbers: of `dtype`, over cond's shape).
// They and the math functions above coexist with <cmath> and <algorithm> under `using namespace
// std` (tests/dsl_test.cpp compiles that way).
#define TILEFUSE_DSL_SCALAR_FUNCTIONS(X) X(max) X(min) X(lt) X(le) X(gt) X(ge) X(eq) X(ne)
#define TILEFUSE_DSL_DECLARE_SCALAR_FUNCTION(fn) \
  Tensor fn(const Tensor& a, double b);          \
  Tensor fn(double a, const Tensor& b);
TILEFUSE_DSL_SCALAR_FUNCTIONS(TILEFUSE_DSL_DECLARE_SCALAR_FUNCTION)
#undef TILEFUSE_DSL_DECLARE_SCALAR_FUNCTION
Tensor pow(double a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
Tensor where(const Tensor& cond, double a, double b, DType dtype = DType::F32);

// numpy's matmul: a [..., M, K] · b [..., K, N] → [..., M, N], batch axes broadcast; an operand
// stored the other way round ([..., K, M] for a, [..., N, K] for b: q·kᵀ, x·Wᵀ) is read
// transposed. f16/bf16/f32 operands of one dtype, accumulated in f32; the result has `out`
// dtype (default: the operands').
struct MatMulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  std::optional<DType> out;
};
Tensor matmul(const Tensor& a, const Tensor& b, const MatMulOptions& options = {});

// The cache with `value`'s slices along `axis` written at `position` (a whole number per slice,
// f32; broadcast over the axes before `axis`): a decode step's new keys and values appended to
// its KV cache. The write is in place — the cache is a graph input that nothing but this write
// reads, and the result lives in the input's memory (Executable::run_on_device updates the
// caller's cache) — and the result is what attention reads. Slices that would land at or past the
// cache's extent are not written. Throws GraphError naming what does not fit.
Tensor write_at(const Tensor& cache, const Tensor& value, const Tensor& position, int axis);

// Reductions over `axes` (negative counts from the end); keepdim keeps them as size 1 so the
// result broadcasts back over x.
Tensor sum(const Tensor& x, const std::vector<int>& axes, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int>& axes, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int>& axes, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& axes, bool keepdim = false);

// Composites, built from the primitives above so that fusion — not a hand-written kernel —
// makes them one kernel.
// softmax along `axis`, stable: exp(x − max) / sum. A row whose entries are all −inf gives 0
// everywhere (not NaN): its max is replaced by 0 and its zero sum by 1.
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);
// softmax(q·kᵀ·scale)·v for q [..., N, d], k [..., Nk, d], v [..., Nk, dv] of one 16-bit dtype:
// the scores in f32, the probabilities cast to v's dtype before the second product, O in v's
// dtype. Causal: query i sees keys up to i + Nk − N (the queries are the last N of the keys'
// positions), the other scores −inf through where(iota ≥ iota, s, −inf). A composite, like
// softmax: the plain graph, which fusion turns into one attention kernel
// (compiler/fusion/contraction_chain.h).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal = false);
// The same, with each query row's log-sum-exp of its scaled scores, lse = c + log Σ exp(s − c)
// (c the row max, 0 for a fully masked row: lse −inf there), f32 [..., N, 1] — what the backward
// pass and split-KV merges need. The attention kernel writes c and the sum beside O; lse is a
// pointwise kernel over them.
struct AttentionWithLse {
  Tensor o, lse;
};
AttentionWithLse attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                    bool causal = false);
// Over the last axis: (x − mean) / sqrt(var + eps) · w + b, var the biased variance.
Tensor layernorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5);
// Over the last axis: x / sqrt(mean(x²) + eps) · w.
Tensor rmsnorm(const Tensor& x, const Tensor& w, double eps = 1e-6);

Tensor operator-(const Tensor& x);
#define TILEFUSE_DSL_BINARY_OPERATOR(sym, fn)                                       \
  inline Tensor operator sym(const Tensor& a, const Tensor& b) { return fn(a, b); } \
  Tensor operator sym(const Tensor& a, double b);                                   \
  Tensor operator sym(double a, const Tensor& b);
TILEFUSE_DSL_BINARY_OPERATOR(+, add)
TILEFUSE_DSL_BINARY_OPERATOR(-, sub)
TILEFUSE_DSL_BINARY_OPERATOR(*, mul)
TILEFUSE_DSL_BINARY_OPERATOR(/, div)
TILEFUSE_DSL_BINARY_OPERATOR(<, lt)
TILEFUSE_DSL_BINARY_OPERATOR(<=, le)
TILEFUSE_DSL_BINARY_OPERATOR(>, gt)
TILEFUSE_DSL_BINARY_OPERATOR(>=, ge)
#undef TILEFUSE_DSL_BINARY_OPERATOR

}  // namespace tilefuse::dsl
