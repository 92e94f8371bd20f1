#pragma once
// Graph IR: target-neutral, small. A node has an op, operands, a shape and a dtype.
// Nodes are appended in dependency order, so the node list is a topological order.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "compiler/graph/dtype.h"

namespace tilefuse {

using NodeId = int32_t;

enum class Op {
  Input,
  Constant,
  // unary
  Neg,
  Abs,
  Exp,
  Exp2,
  Log,
  Sqrt,
  Rsqrt,
  Tanh,
  Erf,
  Sigmoid,
  Relu,
  Gelu,
  GeluTanh,
  Cast,
  // binary
  Add,
  Sub,
  Mul,
  Div,
  Max,
  Min,
  Pow,
  // comparisons (result: bool)
  Lt,
  Le,
  Gt,
  Ge,
  Eq,
  Ne,
  // where(cond, a, b)
  Where,
  // fma(a, b, c): a·b + c, rounded once
  Fma,
  // reductions over `axes` (keepdim keeps them as size-1 dimensions)
  ReduceSum,
  ReduceMax,
  ReduceMin,
  // iota: a tensor whose value at every index is that index along axes[0] (masks: causal, lengths)
  Iota,
  // matmul(a, b): numpy's matmul of a [..., M, K] and b [..., K, N] (each read transposed when
  // its flag says so) into [..., M, N], batch axes broadcast; accumulated in f32 (float64 in
  // the reference) and rounded to the node's dtype
  MatMul,
  // write_at(cache, value, position), axes {axis}: the cache with value's n slices along `axis`
  // written at positions p … p + n − 1, p = ⌈position⌉ (0 where position ≤ 0 or NaN), position f32
  // broadcast over the axes before `axis`; slices that would land at or past the cache's extent
  // are not written. In place: the cache is a graph input that nothing else reads, and the result
  // is stored in the input's memory (a KV cache's new token, written before attention reads it).
  WriteAt,
};

enum class OpKind { Leaf, Unary, Binary, Compare, Select, Ternary, Reduce, Contract, Update };

struct OpInfo {
  const char* name;
  OpKind kind;
  // Extra registers per element live while the op is evaluated (polynomial temporaries).
  int scratch_regs;
};
const OpInfo& op_info(Op op);

struct Node {
  NodeId id = -1;
  Op op = Op::Input;
  std::vector<NodeId> operands;
  Shape shape;
  DType dtype = DType::F32;
  std::string name;       // Input: the input's name
  double value = 0.0;     // Constant: the value
  std::vector<int> axes;  // Reduce*: reduced axes of the operand, ascending; Iota, WriteAt: {its axis}
  bool keepdim = false;   // Reduce*: reduced axes kept as size 1
  bool transpose_a = false, transpose_b = false;  // MatMul: operands stored as [..., K, M], [..., N, K]
};

struct GraphOutput {
  std::string name;
  NodeId node;
};

class Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const;
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  std::vector<NodeId> inputs() const;
  // users()[n] lists the nodes that use n, in order, once per use.
  std::vector<std::vector<NodeId>> users() const;
  bool is_output(NodeId id) const;
  // live()[n]: whether an output depends on node n, or n writes a cache in place (write_at: the
  // caller's memory, read or not) or one of those depends on it.
  std::vector<bool> live() const;

  // Appends a node whose operands, shape and dtype have been checked by the caller (the DSL);
  // verify() re-checks the whole graph.
  NodeId append(Node n);
  void add_output(const std::string& name, NodeId id);

 private:
  std::string name_;
  std::vector<Node> nodes_;
  std::vector<GraphOutput> outputs_;
};

// numpy broadcasting of two shapes; throws ShapeError naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Why checked_num_elements(s) refuses s: a dimension that is not positive, or too many elements.
std::string shape_problem(const Shape& s);
// True when `from` broadcasts to exactly `to`.
bool broadcasts_to(const Shape& from, const Shape& to);

// The shape a reduction of `in` over `axes` (ascending, valid) produces.
Shape reduced_shape(const Shape& in, const std::vector<int>& axes, bool keepdim);

// The shape of matmul(a, b) with its transpose flags; throws ShapeError naming the problem
// (an operand of rank < 2, contraction lengths that differ, batch axes that do not broadcast).
Shape matmul_shape(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b);
// A matmul operand's (rows, cols) as the product sees them: (M, K) for a, (K, N) for b.
std::pair<int64_t, int64_t> matmul_operand_dims(const Shape& s, bool transpose);

// Checks every invariant of the IR; throws GraphError with the offending node.
void verify(const Graph& g);
// What is wrong with write_at node n (its shapes, dtypes, position, and the in-place rule), or "".
std::string write_at_problem(const Graph& g, const Node& n);
// The node whose memory holds n's value: a write_at's cache input (written in place), else n.
inline NodeId storage_of(const Graph& g, NodeId n) {
  return g.node(n).op == Op::WriteAt ? g.node(n).operands[0] : n;
}
// How reports, kernels and their parameters name node n's tensor: an input's own name, else %id.
std::string tensor_name(const Node& n);
// A readable listing of the graph.
std::string print_graph(const Graph& g);

}  // namespace tilefuse
