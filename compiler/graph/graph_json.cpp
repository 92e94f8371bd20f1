#include "compiler/graph/graph_json.h"

#include <cmath>

#include "compiler/support/json.h"

namespace tilefuse {

std::string graph_json(const Graph& g) {
  JsonWriter j;
  j.begin_object().field("name", g.name());
  j.key("nodes").begin_array();
  for (const Node& n : g.nodes()) {
    j.begin_object().field("id", n.id).field("op", op_info(n.op).name);
    j.array("operands", n.operands).array("shape", n.shape).field("dtype", dtype_name(n.dtype));
    if (n.op == Op::Input) j.field("name", n.name);
    if (n.op == Op::Constant) {
      if (std::isfinite(n.value))
        j.field("value", n.value);
      else
        j.field("value", std::isnan(n.value) ? "nan" : n.value > 0 ? "inf" : "-inf");
    }
    if (op_info(n.op).kind == OpKind::Reduce || n.op == Op::Iota || n.op == Op::WriteAt) j.array("axes", n.axes).field("keepdim", n.keepdim);
    if (n.op == Op::MatMul) j.field("transpose_a", n.transpose_a).field("transpose_b", n.transpose_b);
    j.end_object();
  }
  j.end_array();
  j.key("outputs").begin_array();
  for (const GraphOutput& o : g.outputs()) j.begin_object().field("name", o.name).field("node", o.node).end_object();
  j.end_array();
  j.end_object();
  return j.str() + "\n";
}

}  // namespace tilefuse
