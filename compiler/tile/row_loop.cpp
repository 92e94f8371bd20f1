// Row kernels whose rows are visited by a loop over column tiles (TileSchedule::col_iters > 1):
// few long rows in parts, a block each, enough to fill the device (TileSchedule::looped_parts: a
// whole tensor's sum is one row of all its elements), and rows too long for a block's registers
// where there are no clusters, staged or split rows (sm_80).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/row_passes.h"
#include "compiler/graph/sign.h"
#include "compiler/support/error.h"
#include "compiler/tile/build_support.h"
#include "compiler/tile/ir_verify.h"

namespace tilefuse::tir {

namespace {

// Block (row, part) visits its part of the row — the whole row where there is one part — a
// column tile at a time, once per pass over the row (fusion/row_passes.h). Each pass is a `for`
// loop carrying the partials of each reduction it completes, in f32, one value per thread (a
// lanes tile: each thread's elements of the step reduced within the thread, then combined with
// its running value). After the loop the partials are reduced along the row's threads. A sum
// of exp(u − c(m)) completed in its max m's pass (an online sum) carries m's running value
// beside its own: each step computes c of the thread's new running max once, spreads it over
// the thread's elements for the step's terms, and rescales the running sum by
// exp(c(m_old) − c(m_new)); after the loop each thread's sum is brought to the row's max before
// they are added. Full-size outputs are stored in the last pass, per-row outputs after it. With
// several parts (one pass, plain reductions, per-row outputs) each part's results go to the
// workspace ([reduction·rows + row, part]), and the row's last block to arrive reduces them —
// one load of the row of parts — and finishes the row.
class RowLoop {
 public:
  RowLoop(const Graph& g, const Kernel& k)
      : g_(g), k_(k), s_(k.schedule), passes_(analyze_row_passes(g, k.nodes, k.outputs, k.domain)) {}

  Program build() {
    if (s_.tile_rows() != 1 || s_.col_iters < 2)
      throw CodegenError(fmt::format("kernel {}: Tile IR v2 loops over column tiles of one row a block, not {}",
                                     k_.name, s_.describe()));
    p_ = program_of(k_);
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
    std::map<NodeId, int> results;  // each reduction's f32 result ([1, 1])
    for (int pass = 1; pass <= passes_.passes; ++pass) {
      for (const auto& [r, v] : run_pass(b, pass, c0, c1)) results[r] = v;
      if (s_.col_blocks() == 1) know(b, results);
    }
    if (s_.col_blocks() == 1) {
      store_per_row_outputs(b, known_);
    } else {
      for (size_t i = 0; i < reductions_.size(); ++i)
        b.store(workspace_, {slot_row(b, i), part}, results.at(reductions_[i]));
      const int last = b.last_arrival(workspace_, row_, parts);
      b.when(last, [&](Builder& in) {
        std::map<NodeId, int> saved = known_;
        know(in, add_parts(in));
        store_per_row_outputs(in, known_);
        known_ = std::move(saved);
        in.reset_count(workspace_, row_);
      });
    }
    verify_program(p_);
    return std::move(p_);
  }

 private:
  Shape loop_tile() const { return {1, s_.iter_cols()}; }
  // The carried partials: one per thread (a lanes tile).
  Shape carried_tile() const { return Shape{1, p_.layout.threads.at(1)}; }
  bool spans_cols(NodeId id) const { return spans_.count(id) > 0; }
  bool cols_masked() const { return s_.cols % s_.iter_cols() != 0; }
  bool reduces_along_row(NodeId id) const {
    const Node& n = g_.node(id);
    return op_info(n.op).kind == OpKind::Reduce && spans_cols(n.operands[0]);
  }
  // A sum of exp(u − c(m)) completed in its max's pass, that max running along the row (one of a
  // value constant along the row is known: the sum is a plain one).
  bool online(NodeId r) const {
    return passes_.online_with.count(r) > 0 && reduces_along_row(passes_.online_with.at(r));
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
      if (n.op == Op::Iota)  // (planning keeps iotas to pointwise and attention kernels)
        throw CodegenError(fmt::format("kernel {}: an iota in rows visited by a loop over column tiles", k_.name));
      if (op_info(n.op).kind != OpKind::Reduce)
        for (NodeId o : n.operands)
          if (spans_cols(o)) spans_.insert(id);
    }
    for (NodeId id : k_.nodes)
      if (reduces_along_row(id)) reductions_.push_back(id);
    if (s_.col_blocks() == 1) return;
    if (passes_.passes != 1)
      throw CodegenError(fmt::format("kernel {}: a row in parts needs one pass over it, not {}", k_.name, passes_.passes));
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
      out = as_used(b, g_, k_, id, n.op == Op::ReduceSum ? times_width(b, x, s_.cols, n.dtype) : x);
    } else {
      std::vector<int> args;
      for (NodeId o : n.operands) args.push_back(eval(b, o, v));
      out = compute_node(b, g_, k_, id, args);
    }
    return v[id] = out;
  }
  // e^(u − c) of a 16-bit result, u along the row and c per row (softmax's exps): the difference
  // u − c, or null.
  const Node* shifted(const Node& n) const {
    return shifted_exp_arg(g_, k_, n, [&](NodeId o) { return spans_cols(o); });
  }
  // Node `id` as f32 where a reduction adds it up: a shifted exp unrounded (the sum of the f32
  // terms).
  int eval_f32(Builder& b, NodeId id, std::map<NodeId, int>& v) {
    const Node* d = shifted(g_.node(id));
    return d ? shifted_exp2(b, eval(b, d->operands[0], v), eval(b, d->operands[1], v)) : as_f32(b, eval(b, id, v));
  }
  // Node `id` with the max reduction m taking the f32 value `m_value` (a thread's running max or
  // the row's), from `v`'s values that do not depend on m.
  int eval_with(Builder& b, NodeId id, NodeId m, int m_value, const std::map<NodeId, int>& v) {
    std::map<NodeId, int> with = v;
    with[m] = as_used(b, g_, k_, m, m_value);  // (as know())
    return eval(b, id, with);
  }
  // The running partial `acc` of reduction `op` combined with the step's values x (f32, the
  // loop's tile).
  int combined(Builder& b, Op op, int acc, int x) const {
    return b.compute(combine_of(op), {acc, b.reduce_lanes(op, x)}, DType::F32);
  }

  // One pass: the loop over [c0, c1), then the row's threads' partials of each reduction it
  // completes (f32 [1, 1]).
  std::map<NodeId, int> run_pass(Builder& b, int pass, int c0, int c1) {
    std::vector<NodeId> reds;
    for (NodeId r : reductions_)
      if (passes_.pass_of.at(r) == pass) reds.push_back(r);
    std::vector<NodeId> stores;
    for (NodeId o : k_.outputs)
      if (spans_cols(o) && pass == passes_.passes) stores.push_back(o);
    if (reds.empty() && stores.empty()) return {};
    auto index_of = [&](NodeId r) { return static_cast<size_t>(std::find(reds.begin(), reds.end(), r) - reds.begin()); };
    std::vector<int> inits;
    for (NodeId r : reds)
      inits.push_back(b.tile_const(online(r) ? 0.0 : identity_of(g_.node(r).op), DType::F32, carried_tile(), Frag::Lanes));
    const int cols = b.index(s_.cols);
    std::vector<int> carried = b.for_loop(c0, c1, b.index(s_.iter_cols()), inits, [&](Builder& in, int col, const std::vector<int>& acc) {
      std::map<NodeId, int> v = known_;
      for (NodeId id : k_.inputs)
        if (spans_cols(id)) {
          const Param& prm = p_.params[static_cast<size_t>(param_index(id))];
          v[id] = in.load(param_index(id), {offset_row(prm), col}, loop_tile(), {false, cols_masked()});
        }
      const int ok = cols_masked() ? in.in_bounds(col, cols, 1, loop_tile()) : -1;
      auto masked = [&](int x, double identity) {
        return ok < 0 ? x : in.compute(Op::Where, {ok, x, in.scalar(identity, DType::F32)}, DType::F32);
      };
      std::vector<int> next = acc;
      for (NodeId r : reds)
        if (!online(r)) {
          const Op op = g_.node(r).op;
          const size_t i = index_of(r);
          next[i] = combined(in, op, acc[i], masked(eval_f32(in, g_.node(r).operands[0], v), identity_of(op)));
        }
      for (NodeId r : reds)
        if (online(r)) {
          const NodeId m = passes_.online_with.at(r), c = passes_.shift_of.at(r);
          const size_t i = index_of(r), j = index_of(m);
          const int c_old = eval_with(in, c, m, acc[j], v), c_new = eval_with(in, c, m, next[j], v);
          std::map<NodeId, int> with = v;  // the step's terms exp(u − c(m_new))
          with[c] = in.spread(c_new, loop_tile());
          const int term = masked(eval_f32(in, g_.node(r).operands[0], with), 0.0);
          const int sum = in.compute(Op::Add, {rescaled(in, acc[i], c_old, c_new), in.reduce_lanes(Op::ReduceSum, term)},
                                     DType::F32);
          // A thread whose elements so far are all −inf adds nothing to the row's sum, whatever
          // its terms' −inf − (−inf) make of them (the row's max is at least theirs).
          const int seen = in.compute(Op::Ne, {next[j], in.scalar(-INFINITY, DType::F32)}, DType::Bool);
          next[i] = in.compute(Op::Where, {seen, sum, in.scalar(0.0, DType::F32)}, DType::F32);
        }
      for (NodeId o : stores) {
        const size_t param = k_.inputs.size() + static_cast<size_t>(std::find(k_.outputs.begin(), k_.outputs.end(), o) -
                                                                    k_.outputs.begin());
        in.store(static_cast<int>(param), {offset_row(p_.params[param]), col}, eval(in, o, v), {false, cols_masked()});
      }
      return next;
    });
    std::map<NodeId, int> out;
    for (NodeId r : reds)
      if (!online(r)) out[r] = b.reduce(g_.node(r).op, carried[index_of(r)], 1);
    for (NodeId r : reds)
      if (online(r)) {  // each thread's sum brought to the row's max
        const NodeId m = passes_.online_with.at(r), c = passes_.shift_of.at(r);
        const int c_thread = eval_with(b, c, m, carried[index_of(m)], known_);
        const int c_row = eval_with(b, c, m, out.at(m), known_);
        out[r] = b.reduce(Op::ReduceSum, rescaled(b, carried[index_of(r)], c_thread, c_row), 1);
      }
    return out;
  }

  // The row's last block: each reduction's parts, one load of the row of them, reduced.
  std::map<NodeId, int> add_parts(Builder& b) {
    std::map<NodeId, int> out;
    const int parts = b.index(s_.col_blocks());
    for (size_t i = 0; i < reductions_.size(); ++i) {
      const Op op = g_.node(reductions_[i]).op;
      int v = b.load(workspace_, {slot_row(b, i), zero_}, loop_tile(), {false, true});
      v = b.compute(Op::Where, {b.in_bounds(zero_, parts, 1, loop_tile()), v, b.scalar(identity_of(op), DType::F32)},
                    DType::F32);
      out[reductions_[i]] = b.reduce(op, v, 1);
    }
    return out;
  }

  // Reductions' results as the values their uses read: f32, rounded to a 16-bit dtype only where
  // their uses see memory (an f32 operand of 16-bit arithmetic is taken as it is).
  void know(Builder& b, const std::map<NodeId, int>& results) {
    for (const auto& [r, v] : results)
      if (!known_.count(r)) known_[r] = as_used(b, g_, k_, r, v);
  }

  void store_per_row_outputs(Builder& b, std::map<NodeId, int> v) {
    for (size_t i = 0; i < k_.outputs.size(); ++i) {
      const NodeId o = k_.outputs[i];
      if (spans_cols(o)) continue;
      const int param = static_cast<int>(k_.inputs.size() + i);
      int x = eval(b, o, v);
      const Param& prm = p_.params[static_cast<size_t>(param)];
      if (p_.types[static_cast<size_t>(x)].dtype != prm.dtype) x = b.compute(Op::Cast, {x}, prm.dtype);
      if (!p_.types[static_cast<size_t>(x)].is_tile()) x = b.splat(x, {1, 1});
      b.store(param, {offset_row(prm), zero_}, x);
    }
  }

  const Graph& g_;
  const Kernel& k_;
  const TileSchedule& s_;
  const RowPasses passes_;
  Program p_;
  std::set<NodeId> spans_;          // inputs and nodes that run along the row
  std::vector<NodeId> reductions_;  // of values that run along the row
  std::map<NodeId, int> known_;     // per-row inputs and the reductions' results so far
  int workspace_ = -1, row_ = -1, zero_ = -1;
};

}  // namespace

Program row_loop(const Graph& g, const Kernel& k) { return RowLoop(g, k).build(); }

}  // namespace tilefuse::tir
