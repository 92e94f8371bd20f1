#include "compiler/graph/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "compiler/support/error.h"

namespace tilefuse {

const OpInfo& op_info(Op op) {
  // scratch: temporaries held while an element is evaluated (register estimate).
  static const OpInfo table[] = {
      {"input", OpKind::Leaf, 0},        {"constant", OpKind::Leaf, 0},     {"neg", OpKind::Unary, 0},
      {"abs", OpKind::Unary, 0},         {"exp", OpKind::Unary, 2},         {"exp2", OpKind::Unary, 0},
      {"log", OpKind::Unary, 1},         {"sqrt", OpKind::Unary, 1},        {"rsqrt", OpKind::Unary, 1},
      {"tanh", OpKind::Unary, 3},        {"erf", OpKind::Unary, 3},         {"sigmoid", OpKind::Unary, 2},
      {"relu", OpKind::Unary, 0},        {"gelu", OpKind::Unary, 3},        {"gelu_tanh", OpKind::Unary, 3},
      {"cast", OpKind::Unary, 0},        {"add", OpKind::Binary, 0},        {"sub", OpKind::Binary, 0},
      {"mul", OpKind::Binary, 0},        {"div", OpKind::Binary, 2},        {"max", OpKind::Binary, 0},
      {"min", OpKind::Binary, 0},        {"pow", OpKind::Binary, 2},        {"lt", OpKind::Compare, 0},
      {"le", OpKind::Compare, 0},        {"gt", OpKind::Compare, 0},        {"ge", OpKind::Compare, 0},
      {"eq", OpKind::Compare, 0},        {"ne", OpKind::Compare, 0},        {"where", OpKind::Select, 0},
      {"fma", OpKind::Ternary, 0},
      {"reduce_sum", OpKind::Reduce, 1}, {"reduce_max", OpKind::Reduce, 1}, {"reduce_min", OpKind::Reduce, 1},
      {"iota", OpKind::Leaf, 0},         {"matmul", OpKind::Contract, 0},   {"write_at", OpKind::Update, 0},
  };
  static_assert(sizeof(table) / sizeof(table[0]) == static_cast<size_t>(Op::WriteAt) + 1);
  return table[static_cast<size_t>(op)];
}

const Node& Graph::node(NodeId id) const {
  if (id < 0 || static_cast<size_t>(id) >= nodes_.size())
    throw GraphError(fmt::format("graph '{}': node %{} does not exist (the graph has {} nodes)", name_, id,
                                 nodes_.size()));
  return nodes_[id];
}

std::vector<NodeId> Graph::inputs() const {
  std::vector<NodeId> ids;
  for (const Node& n : nodes_)
    if (n.op == Op::Input) ids.push_back(n.id);
  return ids;
}

std::vector<std::vector<NodeId>> Graph::users() const {
  std::vector<std::vector<NodeId>> u(nodes_.size());
  for (const Node& n : nodes_)
    for (NodeId o : n.operands) u[o].push_back(n.id);
  return u;
}

std::vector<bool> Graph::live() const {
  std::vector<bool> live(nodes_.size());
  for (const GraphOutput& o : outputs_) live[o.node] = true;
  for (const Node& n : nodes_)
    if (n.op == Op::WriteAt) live[n.id] = true;
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it)
    if (live[it->id])
      for (NodeId o : it->operands) live[o] = true;
  return live;
}

bool Graph::is_output(NodeId id) const {
  return std::any_of(outputs_.begin(), outputs_.end(), [&](const GraphOutput& o) { return o.node == id; });
}

NodeId Graph::append(Node n) {
  n.id = static_cast<NodeId>(nodes_.size());
  for (NodeId o : n.operands) node(o);  // operands must already exist
  if (checked_num_elements(n.shape) < 0)
    throw ShapeError(fmt::format("graph '{}': %{} {} would have shape {}: {}", name_, n.id, op_info(n.op).name,
                                 shape_str(n.shape), shape_problem(n.shape)));
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

void Graph::add_output(const std::string& name, NodeId id) {
  if (id < 0 || static_cast<size_t>(id) >= nodes_.size())
    throw GraphError(fmt::format(
        "output '{}': node %{} is not in graph '{}'; pass a tensor built in this graph", name, id, name_));
  for (const GraphOutput& o : outputs_)
    if (o.name == name)
      throw GraphError(
          fmt::format("output '{}' is already defined in graph '{}' (as %{}); "
                      "give each output its own name",
                      name, name_, o.node));
  outputs_.push_back({name, id});
}

std::string shape_problem(const Shape& s) {
  for (int64_t d : s)
    if (d <= 0) return "a dimension is not positive; every dimension must be at least 1";
  return fmt::format("more than 2^48 elements; tilefuse's tensors hold at most {} elements", kMaxElements);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(
          fmt::format("{}: shapes {} and {} do not broadcast (dimension {} of the result: {} vs {}); "
                      "numpy rules: trailing dimensions must be equal or 1 — reshape or slice an operand",
                      op, shape_str(a), shape_str(b), i, da, db));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape reduced_shape(const Shape& in, const std::vector<int>& axes, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    bool reduced = std::count(axes.begin(), axes.end(), static_cast<int>(d)) > 0;
    if (!reduced)
      out.push_back(in[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

std::pair<int64_t, int64_t> matmul_operand_dims(const Shape& s, bool transpose) {
  const int64_t r = s[s.size() - 2], c = s[s.size() - 1];
  return transpose ? std::make_pair(c, r) : std::make_pair(r, c);
}

Shape matmul_shape(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b) {
  if (a.size() < 2 || b.size() < 2)
    throw ShapeError(fmt::format(
        "matmul: operands {} and {} need at least two axes each ([..., M, K] and [..., K, N]); give a "
        "vector a size-1 axis",
        shape_str(a), shape_str(b)));
  auto [m, k] = matmul_operand_dims(a, transpose_a);
  auto [k2, n] = matmul_operand_dims(b, transpose_b);
  if (k != k2)
    throw ShapeError(fmt::format(
        "matmul: a {}{} contracts {} values but b {}{} has {}; the inner lengths must match", shape_str(a),
        transpose_a ? " (transposed)" : "", k, shape_str(b), transpose_b ? " (transposed)" : "", k2));
  Shape batch = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2), "matmul (batch axes)");
  batch.push_back(m);
  batch.push_back(n);
  return batch;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i]) return false;
  return true;
}

std::string write_at_problem(const Graph& g, const Node& n) {
  const Node &cache = g.node(n.operands[0]), &value = g.node(n.operands[1]), &position = g.node(n.operands[2]);
  const size_t rank = cache.shape.size();
  if (n.axes.size() != 1 || n.axes[0] < 0 || static_cast<size_t>(n.axes[0]) >= rank)
    return fmt::format("write_at needs one axis of the cache {}", shape_str(cache.shape));
  const size_t axis = static_cast<size_t>(n.axes[0]);
  if (n.shape != cache.shape || n.dtype != cache.dtype)
    return fmt::format("its type {}{} is not the cache's {}{}", dtype_name(n.dtype), shape_str(n.shape),
                       dtype_name(cache.dtype), shape_str(cache.shape));
  if (value.dtype != cache.dtype || !is_float(cache.dtype))
    return fmt::format("writes {} values into a {} cache: cast them to the cache's float dtype", dtype_name(value.dtype),
                       dtype_name(cache.dtype));
  bool fits = value.shape.size() == rank && value.shape[axis] >= 1 && value.shape[axis] <= cache.shape[axis];
  for (size_t d = 0; fits && d < rank; ++d) fits = d == axis || value.shape[d] == cache.shape[d];
  if (!fits)
    return fmt::format("values {} do not fit the cache {} along axis {}: the same extents elsewhere, 1 to {} there",
                       shape_str(value.shape), shape_str(cache.shape), axis, cache.shape[axis]);
  bool per_slice = position.dtype == DType::F32 && position.shape.size() <= rank;
  for (size_t i = 0; per_slice && i < position.shape.size(); ++i) {
    const size_t d = rank - position.shape.size() + i;
    per_slice = position.shape[i] == 1 || (d < axis && position.shape[i] == cache.shape[d]);
  }
  if (!per_slice)
    return fmt::format("position {}{} must be f32 (whole numbers to 2^24), one per slice: extent 1 along axis {} and after it, the cache's "
                       "{} or 1 before",
                       dtype_name(position.dtype), shape_str(position.shape), axis, shape_str(cache.shape));
  if (position.op == Op::Constant)
    return "its position is a constant: give it as a tensor (an input, or computed), one per slice";
  if (cache.op != Op::Input)
    return fmt::format("writes in place into %{} {}, which is not a graph input (the cache must be one)", cache.id,
                       op_info(cache.op).name);
  if (value.id == cache.id || position.id == cache.id)
    return fmt::format("reads the cache '{}' it writes in place as its value or position", cache.name);
  for (const Node& u : g.nodes())
    if (u.id != n.id && std::count(u.operands.begin(), u.operands.end(), cache.id))
      return fmt::format("the cache '{}' is also read by %{} {}: it is written in place, so only the write may read "
                         "it (read the write's result instead)",
                         cache.name, u.id, op_info(u.op).name);
  if (g.is_output(cache.id))
    return fmt::format("the cache '{}' is also a graph output: output the write's result instead", cache.name);
  return "";
}

void verify(const Graph& g) {
  auto fail = [&](const Node& n, const std::string& what) {
    throw GraphError(fmt::format("graph '{}', node %{} ({}): {}", g.name(), n.id, op_info(n.op).name, what));
  };
  std::set<std::string> input_names;
  for (const Node& n : g.nodes()) {
    for (NodeId o : n.operands)
      if (o < 0 || o >= n.id) fail(n, fmt::format("operand %{} does not precede it", o));
    if (checked_num_elements(n.shape) < 0)
      fail(n, fmt::format("shape {}: {}", shape_str(n.shape), shape_problem(n.shape)));
    const OpInfo& info = op_info(n.op);
    size_t arity = info.kind == OpKind::Leaf                                   ? 0
                   : info.kind == OpKind::Unary || info.kind == OpKind::Reduce ? 1
                   : info.kind == OpKind::Select || info.kind == OpKind::Ternary || info.kind == OpKind::Update ? 3
                                                                               : 2;  // binary, compare, contract
    if (n.operands.size() != arity)
      fail(n, fmt::format("expects {} operands, has {}", arity, n.operands.size()));
    if (n.op == Op::Input) {
      if (n.name.empty()) fail(n, "input has no name");
      if (!input_names.insert(n.name).second) fail(n, fmt::format("input name '{}' is used twice", n.name));
      continue;
    }
    if (n.op == Op::Iota) {
      if (n.axes.size() != 1 || n.axes[0] < 0 || n.axes[0] >= static_cast<int>(n.shape.size()))
        fail(n, fmt::format("iota needs one axis of its shape {}", shape_str(n.shape)));
      if (!is_float(n.dtype)) fail(n, "iota's values are float");
      continue;
    }
    if (info.kind == OpKind::Leaf) continue;
    if (n.op == Op::WriteAt) {
      if (std::string problem = write_at_problem(g, n); !problem.empty()) fail(n, problem);
      continue;
    }
    if (info.kind == OpKind::Contract) {
      const Node& a = g.node(n.operands[0]);
      const Node& b = g.node(n.operands[1]);
      Shape expect;
      try {
        expect = matmul_shape(a.shape, b.shape, n.transpose_a, n.transpose_b);
      } catch (const ShapeError& e) {
        fail(n, e.what());
      }
      if (expect != n.shape)
        fail(n, fmt::format("shape {} is not the product's {}", shape_str(n.shape), shape_str(expect)));
      if (a.dtype != b.dtype || !is_float(a.dtype) || !is_float(n.dtype))
        fail(n, fmt::format("needs float operands of one dtype (has {}, {}) and a float result",
                            dtype_name(a.dtype), dtype_name(b.dtype)));
      continue;
    }
    if (info.kind == OpKind::Reduce) {
      const Node& in = g.node(n.operands[0]);
      bool ascending = !n.axes.empty() && std::is_sorted(n.axes.begin(), n.axes.end()) &&
                       std::adjacent_find(n.axes.begin(), n.axes.end()) == n.axes.end();
      if (!ascending || n.axes.front() < 0 || n.axes.back() >= static_cast<int>(in.shape.size()))
        fail(n, fmt::format("axes [{}] are not distinct, ascending axes of {}", fmt::join(n.axes, ", "),
                            shape_str(in.shape)));
      if (n.shape != reduced_shape(in.shape, n.axes, n.keepdim))
        fail(n, fmt::format("shape {} is not {} reduced over [{}]", shape_str(n.shape), shape_str(in.shape),
                            fmt::join(n.axes, ", ")));
      if (in.dtype != n.dtype || !is_float(n.dtype)) fail(n, "reduces a float operand to its own dtype");
      continue;
    }
    Shape expect = g.node(n.operands[0]).shape;
    for (size_t i = 1; i < n.operands.size(); ++i)
      expect = broadcast_shapes(expect, g.node(n.operands[i]).shape, info.name);
    if (expect != n.shape)
      fail(n, fmt::format("shape {} is not the broadcast of its operands ({})", shape_str(n.shape),
                          shape_str(expect)));
    auto dt = [&](size_t i) { return g.node(n.operands[i]).dtype; };
    switch (info.kind) {
      case OpKind::Unary:
        if (n.op != Op::Cast && (dt(0) != n.dtype || !is_float(n.dtype)))
          fail(n, fmt::format("needs a float operand of its own dtype {}, has {}", dtype_name(n.dtype),
                              dtype_name(dt(0))));
        break;
      case OpKind::Binary:
        if (dt(0) != n.dtype || dt(1) != n.dtype || !is_float(n.dtype))
          fail(n, fmt::format("operand dtypes {}, {} do not match result {}", dtype_name(dt(0)),
                              dtype_name(dt(1)), dtype_name(n.dtype)));
        break;
      case OpKind::Compare:
        if (dt(0) != dt(1) || n.dtype != DType::Bool)
          fail(n, "comparison needs operands of one dtype and a bool result");
        break;
      case OpKind::Select:
        if (dt(0) != DType::Bool || dt(1) != n.dtype || dt(2) != n.dtype)
          fail(n, "where needs a bool condition and two operands of the result dtype");
        break;
      case OpKind::Ternary:
        if (dt(0) != n.dtype || dt(1) != n.dtype || dt(2) != n.dtype || !is_float(n.dtype))
          fail(n, fmt::format("operand dtypes {}, {}, {} do not match result {}", dtype_name(dt(0)),
                              dtype_name(dt(1)), dtype_name(dt(2)), dtype_name(n.dtype)));
        break;
      case OpKind::Leaf:
      case OpKind::Reduce:
      case OpKind::Contract:
      case OpKind::Update:
        break;
    }
  }
  std::set<std::string> out_names;
  for (const GraphOutput& o : g.outputs()) {
    g.node(o.node);
    if (!out_names.insert(o.name).second)
      throw GraphError(fmt::format("graph '{}': output '{}' is defined twice", g.name(), o.name));
  }
  if (g.outputs().empty())
    throw GraphError(fmt::format("graph '{}' has no outputs; mark results with output(name, t)", g.name()));
}

std::string tensor_name(const Node& n) { return n.op == Op::Input ? n.name : fmt::format("%{}", n.id); }

std::string print_graph(const Graph& g) {
  std::string s = fmt::format("graph {}\n", g.name());
  for (const Node& n : g.nodes()) {
    std::string type = fmt::format("{}{}", dtype_name(n.dtype), shape_str(n.shape));
    if (n.op == Op::Input)
      s += fmt::format("  %{} = input \"{}\" : {}\n", n.id, n.name, type);
    else if (n.op == Op::Constant)
      s += fmt::format("  %{} = constant {} : {}\n", n.id, n.value, type);
    else if (op_info(n.op).kind == OpKind::Reduce)
      s += fmt::format("  %{} = {} %{} axes [{}]{} : {}\n", n.id, op_info(n.op).name, n.operands[0],
                       fmt::join(n.axes, ", "), n.keepdim ? " keepdim" : "", type);
    else if (n.op == Op::Iota)
      s += fmt::format("  %{} = iota axis {} : {}\n", n.id, n.axes[0], type);
    else if (n.op == Op::WriteAt)
      s += fmt::format("  %{} = write_at %{}, %{} at %{} axis {} : {}\n", n.id, n.operands[0], n.operands[1],
                       n.operands[2], n.axes[0], type);
    else if (n.op == Op::MatMul)
      s += fmt::format("  %{} = matmul %{}{}, %{}{} : {}\n", n.id, n.operands[0], n.transpose_a ? "ᵀ" : "",
                       n.operands[1], n.transpose_b ? "ᵀ" : "", type);
    else {
      std::vector<std::string> ops;
      for (NodeId o : n.operands) ops.push_back(fmt::format("%{}", o));
      s += fmt::format("  %{} = {} {} : {}\n", n.id, op_info(n.op).name, fmt::join(ops, ", "), type);
    }
  }
  for (const GraphOutput& o : g.outputs()) s += fmt::format("  output \"{}\" = %{}\n", o.name, o.node);
  return s;
}

}  // namespace tilefuse
