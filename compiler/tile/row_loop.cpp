// Few long rows visited by a loop over column tiles in parts, a block each, enough to fill the
// device (TileSchedule::looped_parts: a whole tensor's sum is one row of all its elements). Rows
// looped whole, one block each, are still the first Tile IR's (codegen/lower_looped.cpp): built
// here, an online sum's running max and sum per lane ran 7–37% slower than its pair per thread
// (bench/NOTES.md, "Few long rows in parts").
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "compiler/fusion/cost_model.h"
#include "compiler/graph/sign.h"
#include "compiler/support/error.h"
#include "compiler/tile/build_support.h"
#include "compiler/tile/ir_verify.h"

namespace tilefuse::tir {

namespace {

// Block (row, part) visits its part of the row a column tile at a time in a `for` loop carrying,
// per reduction, an f32 tile of partials (each lane's own columns combined), reduced along the
// row's threads after the loop. The kernel has one pass over its rows, plain reductions and
// per-row outputs (the scheduler's condition): each part's results go to the workspace
// ([reduction·rows + row, part]), and the row's last block to arrive reduces them — one load of
// the row of parts — and computes and stores the per-row values after the reductions.
class RowLoop {
 public:
  RowLoop(const Graph& g, const Kernel& k) : g_(g), k_(k), s_(k.schedule) {}

  Program build() {
    if (s_.tile_rows() != 1 || !s_.looped_parts())
      throw CodegenError(fmt::format("kernel {}: Tile IR v2 loops over column tiles only in parts of one row, not {}",
                                     k_.name, s_.describe()));
    p_.name = k_.name;
    p_.layout = layout_of(s_);
    p_.grid = {s_.grid()};
    p_.wide_indices = s_.wide_indices();
    add_params();
    Builder b(p_, p_.body);
    const int pid = b.program_id(0);
    const int parts = b.index(s_.col_blocks());
    row_ = b.div(pid, parts);
    zero_ = b.index(0);
    const int part = b.rem(pid, parts);
    const int c0 = b.mul(part, b.index(s_.tile_cols()));
    const int c1 = b.min(b.add(c0, b.index(s_.tile_cols())), b.index(s_.cols));
    load_per_row_inputs(b);
    const std::vector<int> partials = sum_columns(b, c0, c1);
    for (size_t i = 0; i < reductions_.size(); ++i) b.store(workspace_, {slot_row(b, i), part}, partials[i]);
    const int last = b.last_arrival(workspace_, row_, parts);
    b.when(last, [&](Builder& in) {
      std::map<NodeId, int> v = known_;
      const std::vector<int> sums = add_parts(in);
      for (size_t i = 0; i < reductions_.size(); ++i) {
        const DType dt = g_.node(reductions_[i]).dtype;
        v[reductions_[i]] = dt == DType::F32 ? sums[i] : in.compute(Op::Cast, {sums[i]}, dt);
      }
      store_per_row_outputs(in, v);
      in.reset_count(workspace_, row_);
    });
    verify_program(p_);
    return std::move(p_);
  }

 private:
  Shape loop_tile() const { return {1, s_.iter_cols()}; }
  bool spans_cols(NodeId id) const { return spans_.count(id) > 0; }
  bool cols_masked() const { return s_.cols % s_.iter_cols() != 0; }
  bool reduces_along_row(NodeId id) const {
    const Node& n = g_.node(id);
    return op_info(n.op).kind == OpKind::Reduce && spans_cols(n.operands[0]);
  }
  int param_index(NodeId input) const {
    return static_cast<int>(std::find(k_.inputs.begin(), k_.inputs.end(), input) - k_.inputs.begin());
  }
  int offset_row(const Param& prm) const { return prm.view[0] == 1 ? zero_ : row_; }

  void add_params() {
    std::vector<Shape> shapes;
    for (NodeId id : k_.inputs) shapes.push_back(g_.node(id).shape);
    for (NodeId id : k_.outputs) shapes.push_back(aligned_shape(g_, id, k_));
    std::vector<Shape> views = operand_views(s_, k_.domain, k_.split, shapes);
    for (size_t i = 0; i < k_.inputs.size(); ++i) {
      p_.params.push_back(param_of(g_, k_.inputs[i], false, views[i], s_));
      if (views[i].back() != 1) spans_.insert(k_.inputs[i]);
    }
    for (size_t i = 0; i < k_.outputs.size(); ++i)
      p_.params.push_back(param_of(g_, k_.outputs[i], true, views[k_.inputs.size() + i], s_));
    for (NodeId id : k_.nodes) {
      const Node& n = g_.node(id);
      if (n.op == Op::Iota)
        throw CodegenError(fmt::format("kernel {}: an iota in rows visited by a loop over column tiles", k_.name));
      if (op_info(n.op).kind != OpKind::Reduce)
        for (NodeId o : n.operands)
          if (spans_cols(o)) spans_.insert(id);
    }
    for (NodeId id : k_.nodes)
      if (reduces_along_row(id)) reductions_.push_back(id);
    for (NodeId o : k_.outputs)
      if (spans_cols(o))
        throw CodegenError(fmt::format("kernel {}: a row in parts writes one value per row, not %{}", k_.name, o));
    Param ws;
    ws.name = "workspace";
    ws.view = {static_cast<int64_t>(reductions_.size()) * s_.rows, s_.col_blocks()};
    ws.workspace = true;
    if ((num_elements(ws.view) + s_.rows) * 4 > s_.workspace_bytes())  // the parts, then a counter per row
      throw CodegenError(fmt::format("kernel {}: {} reductions' parts and {} counters outgrow its workspace of {} bytes",
                                     k_.name, reductions_.size(), s_.rows, s_.workspace_bytes()));
    workspace_ = static_cast<int>(p_.params.size());
    p_.params.push_back(ws);
  }

  int slot_row(Builder& b, size_t i) { return b.add(b.index(static_cast<int64_t>(i) * s_.rows), row_); }

  void load_per_row_inputs(Builder& b) {
    for (NodeId id : k_.inputs) {
      if (spans_cols(id)) continue;
      const Param& prm = p_.params[static_cast<size_t>(param_index(id))];
      known_[id] = b.load(param_index(id), {offset_row(prm), zero_}, {1, 1});
    }
  }

  // Node `id` from the values in `v` (inputs loaded, reductions known), computing what it needs
  // and recording it there. A reduction of a value constant along the row is that value (a sum:
  // times the row's width).
  int eval(Builder& b, NodeId id, std::map<NodeId, int>& v) {
    if (auto it = v.find(id); it != v.end()) return it->second;
    const Node& n = g_.node(id);
    int out;
    if (n.op == Op::Constant) {
      out = b.scalar(n.value, n.dtype);
    } else if (n.op == Op::Input || reduces_along_row(id)) {
      throw CodegenError(fmt::format("kernel {}: %{} is used where it is not yet known", k_.name, id));
    } else if (op_info(n.op).kind == OpKind::Reduce) {
      const int x = eval(b, n.operands[0], v);
      out = n.op == Op::ReduceSum ? times_width(b, x, s_.cols, n.dtype) : x;
      if (rounds_where_computed(g_, k_, id)) out = b.compute(Op::Cast, {out}, n.dtype);
    } else {
      std::vector<int> args;
      for (NodeId o : n.operands) args.push_back(eval(b, o, v));
      out = compute_node(b, g_, k_, id, args);
    }
    return v[id] = out;
  }
  // The loop over the part's column tiles [c0, c1): loads, the nodes that run along the row, and
  // each reduction's partial (columns past the row contribute its identity); then each
  // reduction's tile reduced along the row's threads (f32 [1, 1]).
  std::vector<int> sum_columns(Builder& b, int c0, int c1) {
    std::vector<int> inits;
    for (NodeId r : reductions_) inits.push_back(b.tile_const(identity_of(g_.node(r).op), DType::F32, loop_tile()));
    const int cols = b.index(s_.cols);
    std::vector<int> carried = b.for_loop(c0, c1, b.index(s_.iter_cols()), inits, [&](Builder& in, int col, const std::vector<int>& acc) {
      std::map<NodeId, int> v = known_;
      for (NodeId id : k_.inputs)
        if (spans_cols(id)) {
          const Param& prm = p_.params[static_cast<size_t>(param_index(id))];
          v[id] = in.load(param_index(id), {offset_row(prm), col}, loop_tile(), {false, cols_masked()});
        }
      const int ok = cols_masked() ? in.in_bounds(col, cols, 1, loop_tile()) : -1;
      std::vector<int> next = acc;
      for (size_t i = 0; i < reductions_.size(); ++i) {
        const Op op = g_.node(reductions_[i]).op;
        int x = as_f32(in, eval(in, g_.node(reductions_[i]).operands[0], v));
        if (ok >= 0) x = in.compute(Op::Where, {ok, x, in.scalar(identity_of(op), DType::F32)}, DType::F32);
        next[i] = in.compute(combine_of(op), {acc[i], x}, DType::F32);
      }
      return next;
    });
    std::vector<int> out;
    for (size_t i = 0; i < reductions_.size(); ++i) out.push_back(b.reduce(g_.node(reductions_[i]).op, carried[i], 1));
    return out;
  }

  // The row's last block: each reduction's parts, one load of the row of them, reduced.
  std::vector<int> add_parts(Builder& b) {
    std::vector<int> out;
    const int parts = b.index(s_.col_blocks());
    for (size_t i = 0; i < reductions_.size(); ++i) {
      const Op op = g_.node(reductions_[i]).op;
      int v = b.load(workspace_, {slot_row(b, i), zero_}, loop_tile(), {false, true});
      v = b.compute(Op::Where, {b.in_bounds(zero_, parts, 1, loop_tile()), v, b.scalar(identity_of(op), DType::F32)},
                    DType::F32);
      out.push_back(b.reduce(op, v, 1));
    }
    return out;
  }

  void store_per_row_outputs(Builder& b, std::map<NodeId, int> v) {
    for (size_t i = 0; i < k_.outputs.size(); ++i) {
      const NodeId o = k_.outputs[i];
      if (spans_cols(o)) continue;
      const int param = static_cast<int>(k_.inputs.size() + i);
      int x = eval(b, o, v);
      if (!p_.types[static_cast<size_t>(x)].is_tile()) x = b.splat(x, {1, 1});
      b.store(param, {offset_row(p_.params[static_cast<size_t>(param)]), zero_}, x);
    }
  }

  const Graph& g_;
  const Kernel& k_;
  const TileSchedule& s_;
  Program p_;
  std::set<NodeId> spans_;          // inputs and nodes that run along the row
  std::vector<NodeId> reductions_;  // of values that run along the row
  std::map<NodeId, int> known_;     // per-row inputs
  int workspace_ = -1, row_ = -1, zero_ = -1;
};

}  // namespace

Program row_loop(const Graph& g, const Kernel& k) { return RowLoop(g, k).build(); }

}  // namespace tilefuse::tir
