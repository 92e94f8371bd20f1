#include "compiler/tile/lower_kernel.h"

#include <fmt/format.h>

#include <map>

#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/row_passes.h"
#include "compiler/graph/sign.h"

namespace tilefuse {

TileProgram lower_kernel(const Graph& g, const Kernel& k) {
  TileProgram p;
  p.name = k.name;
  p.schedule = k.schedule;
  std::vector<Shape> shapes;
  auto add_param = [&](NodeId id, bool output) {
    const Node& n = g.node(id);
    std::string name = tensor_name(n);
    if (output)
      for (const GraphOutput& o : g.outputs())
        if (o.node == id) name = o.name;
    p.params.push_back({name, id, n.dtype, {}, output});
    shapes.push_back(output ? aligned_shape(g, id, k) : n.shape);
  };
  for (NodeId id : k.inputs) add_param(id, false);
  for (NodeId id : k.outputs) add_param(id, true);
  std::vector<Shape> views = operand_views(k.schedule, k.domain, k.split, shapes);
  for (size_t i = 0; i < p.params.size(); ++i) p.params[i].view = views[i];

  RowPasses rp;
  if (k.kind == ScheduleKind::RowReduce) rp = analyze_row_passes(g, k.nodes, k.outputs, k.domain);
  p.passes = rp.passes;
  std::map<NodeId, int> value_of;  // what uses of a node read
  std::map<NodeId, int> computed;  // the instruction computing it (a reduction's, for online sums)
  auto emit = [&](TileInst inst) {
    if (inst.opcode != TileOpcode::Store) inst.result = p.num_values++;
    p.body.push_back(inst);
    return inst.result;
  };
  // Tensors that run along the kernel's rows are loaded first, so all their bytes are in
  // flight at once. In a row reduction, a tensor shared by every row (layernorm's w and b) is
  // loaded where it is first used: usually after the reductions, so its registers are not
  // held through them (it is small and comes from L2).
  std::map<NodeId, size_t> deferred;
  auto load = [&](size_t i) {
    TileInst ld(TileOpcode::Load);
    ld.param = static_cast<int>(i);
    ld.type = {p.params[i].dtype, view_spans_rows(views[i]), view_spans_cols(views[i])};
    value_of[k.inputs[i]] = emit(ld);
  };
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    if (k.kind == ScheduleKind::RowReduce && !view_spans_rows(views[i]))
      deferred[k.inputs[i]] = i;
    else
      load(i);
  }
  for (NodeId id : k.nodes) {
    const Node& n = g.node(id);
    bool reduce = op_info(n.op).kind == OpKind::Reduce;
    TileInst c(reduce ? TileOpcode::Reduce : TileOpcode::Compute);
    c.op = n.op;
    c.nonpositive_arg = exp_of_nonpositive(g, n);
    c.type = {n.dtype, false, false};
    for (NodeId o : n.operands) {
      if (!value_of.count(o) && deferred.count(o)) load(deferred.at(o));
      if (!value_of.count(o)) {  // only constants are neither loaded nor computed here
        TileInst cst(TileOpcode::Constant);
        cst.value = g.node(o).value;
        cst.type = {g.node(o).dtype, false, false};
        value_of[o] = emit(cst);
      }
      const TileType& t = p.body[value_of[o]].type;  // value ids are body indices until stores
      c.type.rows |= t.rows;
      c.type.cols |= t.cols;
      c.args.push_back(value_of[o]);
    }
    if (reduce) {
      c.type.cols = false;
      c.pass = rp.pass_of.at(id);
      if (rp.online_with.count(id)) {
        // A sum of exp(u − c(m)) with m the max it shares a pass with (fusion/row_passes.h).
        c.online_with = computed.at(rp.online_with.at(id));
        c.online_shift = value_of.at(rp.shift_of.at(id));
      }
    }
    value_of[id] = computed[id] = emit(c);
    if (rounds_where_computed(g, k, id)) {  // its uses here see the value that reaches memory
      TileInst r(TileOpcode::Compute);
      r.op = Op::Cast;
      r.type = c.type;
      r.args = {computed[id]};
      value_of[id] = emit(r);
    }
  }
  for (size_t i = k.inputs.size(); i < p.params.size(); ++i) {
    TileInst st(TileOpcode::Store);
    st.param = static_cast<int>(i);
    st.args = {value_of.at(p.params[i].node)};
    st.type = {p.params[i].dtype, view_spans_rows(views[i]), view_spans_cols(views[i])};
    emit(st);
  }
  return p;
}

}  // namespace tilefuse
