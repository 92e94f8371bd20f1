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
};

enum class OpKind { Leaf, Unary, Binary, Compare, Select, Reduce, Contract };

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
  std::vector<int> axes;  // Reduce*: reduced axes of the operand, ascending; Iota: {its axis}
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
// A readable listing of the graph.
std::string print_graph(const Graph& g);

}  // namespace tilefuse
