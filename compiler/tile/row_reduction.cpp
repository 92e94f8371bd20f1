// Row kernels held in one block's or one cluster's registers (no loop over column tiles): block b holds rows
// [b·tile_rows, (b + 1)·tile_rows), each spread over threads_per_row threads — or, in a cluster
// (TileSchedule::cluster_blocks), block b holds columns [rank·tile_cols, (rank + 1)·tile_cols) of row b /
// cluster_blocks, rank = b mod cluster_blocks, each reduction reduced over the block's threads, then
// exchanged (`cluster_values`) and combined in rank order — one exchange a reduction, or one a pass over the
// row with online sums rescaled (TileSchedule::cluster_online, over_cluster). A block's rows (or its part of
// a cluster's, exchanged a pass at a time) over whole warps take each reduction behind a block barrier of its
// own, or each pass behind one: the warps' values gathered into every warp, online sums rescaled
// (TileSchedule::block_online, warps_pass). The tensors along the rows are loaded first; a tensor shared by
// every row (layernorm's w) where it is first used. Each reduction reduces along axis 1 over the row's
// threads (and the cluster's blocks), only the row's columns counting (a mask); what uses it broadcasts the
// [rows, 1] result. A 16-bit exp of u − c (softmax's exps) is one fma and one ex2 an element (shifted_exp2).
// Over warps, a max or min of a row scaled by a positive constant is the row's, scaled (scaled_extreme).
//
// Windowed rows (TileSchedule::window: a width W that is not a multiple of the vector width)
// are read and written at window columns (`load … window V`, Inst::window): each row of the
// tile from the aligned vector its first element lies in, r·W − (r·W mod V) (plus the rank's
// columns in a cluster), so a tensor laid out as the rows is read in whole vectors but at its
// end; an element is its row's where its window column less the row's shift lies in [0, W)
// (`in_window`): reductions mask the others, and stores write only the row's. A tensor along
// the rows laid out otherwise (a weight shared by them, or broadcast along some) is read from
// the same columns, each row's run shifted by that row's place (two aligned vectors joined and
// shifted in registers). A block may hold several rows, each with its own shift.
//
// Rows staged through shared memory (TileSchedule::stages, a persistent grid): each tensor along
// the rows has a bulk ring of `stages` rows (in a cluster, of the block's part of a row). The
// block's first thread fills the stages with rows dealt grid-stride (group g of blocks — a
// block, or a cluster — rows g, g + groups, …), and the block loops while the row its next
// stage holds is a row (not the end mark): it waits for the stage, reads its part from it, and,
// past the first reduction's block barrier (every thread has read the stage; with
// TileSchedule::refill_at_read, a barrier of its own right after the reads), the first thread
// refills the stage — with the row `stages` ahead, or, claimed (TileSchedule::claims_rows: one
// block a row), with a row it claimed from a counter ahead of need, and claims the next, so
// that a block takes rows as fast as it finishes them; the last block to finish zeroes the
// counters. Rows split into parts (TileSchedule::split_blocks) are staged tasks
// whose one pass ends in the row's parts met through the workspace (split_rows), pipelined by
// pipeline_part_gathers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "compiler/fusion/cost_model.h"
#include "compiler/fusion/row_passes.h"
#include "compiler/graph/dtype.h"
#include "compiler/support/error.h"
#include "compiler/tile/build_support.h"
#include "compiler/tile/fold_factors.h"
#include "compiler/tile/ir_verify.h"
#include "compiler/tile/pipeline.h"
#include "compiler/tile/sink.h"

namespace tilefuse::tir {

namespace {

class RowReduction {
 public:
  RowReduction(const Graph& g, const Kernel& k)
      : g_(g),
        k_(k),
        s_(k.schedule),
        cluster_(s_.cluster_blocks > 1),
        window_(s_.window),
        staged_(s_.stages > 0),
        split_(s_.split_blocks > 1),
        passes_(analyze_row_passes(g, k.nodes, k.outputs, k.domain)) {}

  Program build() {
    if ((s_.stages > 0 && (window_ || s_.tile_rows() != 1)) || (split_ && (!staged_ || cluster_ || !s_.block_online)) ||
        s_.col_iters > 1 || s_.col_blocks() != (split_ ? s_.split_blocks : s_.cluster_blocks) ||
        (cluster_ && s_.tile_rows() != 1) ||
        !s_.elem_dims.empty() || (s_.block_online && cluster_ && !s_.cluster_online))
      throw CodegenError(fmt::format(
          "kernel {}: Tile IR v2 builds only rows one block or cluster holds, staged or not, or split into staged "
          "parts, not {}",
          k_.name, s_.describe()));
    p_ = program_of(k_);
    p_.cluster_blocks = s_.cluster_blocks;
    p_.min_blocks_per_sm = s_.min_blocks_per_sm;
    add_params();
    Builder b(p_, p_.body);
    if (split_) {
      add_rings();
      split_rows(b);
    } else if (staged_) {
      add_rings();
      staged_rows(b);
    } else {
      place(b);
      row(b);
    }
    fold_row_factors(p_);
    sink_to_uses(p_);
    if (split_) pipeline_part_gathers(p_, s_.fetch_parts_early);  // (sinking again after it took 4 more registers)
    verify_program(p_);
    return std::move(p_);
  }

 private:
  // The block's row (row0_, col0_ placed): its tensors along the rows loaded, its nodes computed,
  // its outputs stored.
  void row(Builder& b) {
    masked_ = {s_.rows % s_.tile_rows() != 0, window_ || s_.cols % s_.tile_cols() != 0};
    for (size_t i = 0; i < k_.inputs.size(); ++i)
      if (p_.params[i].view[0] != 1) load(b, i);
    if (staged_ && s_.refill_at_read) {  // (every thread has read the stage before the barrier)
      b.barrier();
      refill(b);
    }
    compute_nodes(b);
    store(b);
  }

  // ---- rows staged through bulk rings ----

  // A bulk ring of `stages` parts of rows for each input along the rows and columns, and —
  // claimed — the workspace's two counters (the next row, the blocks finished).
  void add_rings() {
    ring_of_.assign(k_.inputs.size(), -1);
    int64_t bytes = 0;
    for (size_t i = 0; i < k_.inputs.size(); ++i) {
      const Param& prm = p_.params[i];
      if (prm.view[0] == 1 || prm.view[1] == 1) continue;
      SharedRing r;
      r.name = fmt::format("rows{}", i);
      r.dtype = prm.dtype;
      r.stages = s_.stages;
      r.tile = {1, s_.tile_cols()};
      r.bulk = true;
      bytes += r.stage_bytes();
      ring_of_[i] = static_cast<int>(p_.shared.size());
      p_.shared.push_back(r);
    }
    if (bytes != s_.stage_bytes || p_.shared.empty() || s_.threads_per_row <= 32)
      throw CodegenError(fmt::format("kernel {}: its staged rows take {} bytes a stage, the schedule planned {}, in "
                                     "rows of {} threads",
                                     k_.name, bytes, s_.stage_bytes, s_.threads_per_row));
    if (!s_.claims_rows() && !split_) return;
    Param ws;
    ws.name = "workspace";
    ws.view = {0, 0};  // (no f32 values: the u32 counters only, or a split row's stamped words)
    ws.workspace = true;
    workspace_ = static_cast<int>(p_.params.size());
    p_.params.push_back(ws);
  }

  // The stages filled with rows dealt grid-stride (and, claimed, a row claimed ahead); then,
  // while the next stage holds a row, that row (refilled past the first reduction: refill);
  // claimed, the last block to finish zeroes the counters for the next launch.
  void staged_rows(Builder& b) {
    const bool claimed = s_.claims_rows();
    const int block = b.program_id(0), blocks = b.num_programs(0);
    zero_ = b.index(0);
    col0_ = zero_;
    int group = block, groups = blocks;
    if (cluster_) {  // block b holds part b mod n of the rows of group b / n
      const int n = b.index(s_.cluster_blocks);
      group = b.div(block, n);
      groups = b.div(blocks, n);
      col0_ = b.mul(b.rem(block, n), b.index(s_.tile_cols()));
    }
    rows_ = b.index(s_.rows);
    const int stages = b.index(s_.stages);
    dealt_ = b.mul(groups, stages);
    for (int k = 0; k < s_.stages; ++k) {
      const int dealt = k == 0 ? group : b.add(group, b.mul(groups, b.index(k)));
      for (size_t i = 0; i < ring_of_.size(); ++i)
        if (ring_of_[i] >= 0) b.fill_stage(static_cast<int>(i), dealt, col0_, ring_of_[i], b.index(k), rows_);
    }
    std::vector<int> carried = {zero_};
    if (claimed) carried.push_back(b.claim(workspace_, zero_, dealt_));
    int parity = -1;
    b.while_loop(
        carried,
        [&](Builder& h, const std::vector<int>& c) {  // (the body sees the stage and the parity)
          stage_ = h.rem(c[0], stages);
          parity = h.rem(h.div(c[0], stages), h.index(2));
          h.wait_full(0, stage_, parity);
          row0_ = h.stage_row(0, stage_);
          return h.less(row0_, rows_);
        },
        [&](Builder& body, const std::vector<int>& c) {
          for (int r = 1; r < static_cast<int>(p_.shared.size()); ++r) body.wait_full(r, stage_, parity);
          refill_row_ = claimed ? c[1] : body.add(row0_, dealt_);  // (grid-stride: the row `stages` ahead)
          refilled_ = false;
          value_of_.clear();
          in_row_ = -1;
          row(body);
          if (!refilled_) {  // (no reduction passed a block barrier)
            body.barrier();
            refill(body);
          }
          std::vector<int> next = {body.add(c[0], body.index(1))};
          if (claimed) next.push_back(next_ticket_);
          return next;
        });
    if (!claimed) return;
    const int last = b.last_arrival(workspace_, b.index(1), blocks);
    b.when(last, [&](Builder& w) {
      w.reset_count(workspace_, w.index(0));
      w.reset_count(workspace_, w.index(1));
    });
  }

  // Rows split into parts (TileSchedule::split_blocks): each part of each row is a task of the
  // persistent grid, task t the part t mod parts of row t / parts, dealt grid-stride (block b
  // takes b, b + blocks, …) and staged as rows are. A task's pass publishes the part's values of
  // its reductions and gathers the row's parts' (gather_parts: it waits for the other blocks'
  // publishes, every block resident), so a row's reductions take one pass over it.
  void split_rows(Builder& b) {
    for (const auto& [id, pass] : passes_.pass_of)  // (a task's parts meet once: one exchange)
      if (pass > 1)
        throw CodegenError(fmt::format("kernel {}: split rows reduce in one pass over the row; %{} needs pass {}",
                                       k_.name, id, pass));
    const int block = b.program_id(0), blocks = b.num_programs(0);
    zero_ = b.index(0);
    rows_ = b.index(s_.rows);
    parts_ = b.index(s_.split_blocks);
    const int tasks = b.index(s_.rows * s_.split_blocks), part_cols = b.index(s_.tile_cols());
    // Task t's row and its part's first column.
    auto place = [&](Builder& in, int t) {
      return std::pair<int, int>{in.div(t, parts_), in.mul(in.rem(t, parts_), part_cols)};
    };
    for (int k = 0; k < s_.stages; ++k) {
      const auto [row, col] = place(b, k == 0 ? block : b.add(block, b.mul(blocks, b.index(k))));
      for (size_t i = 0; i < ring_of_.size(); ++i)
        if (ring_of_[i] >= 0) b.fill_stage(static_cast<int>(i), row, col, ring_of_[i], b.index(k), rows_);
    }
    const int ahead = b.mul(blocks, b.index(s_.stages));
    b.while_loop(
        {zero_, block}, [&](Builder& h, const std::vector<int>& c) { return h.less(c[1], tasks); },
        [&](Builder& body, const std::vector<int>& c) {
          int parity;
          std::tie(stage_, parity) = body.ring_stage(c[0], s_.stages, false);
          for (int r = 0; r < static_cast<int>(p_.shared.size()); ++r) body.wait_full(r, stage_, parity);
          task_ = c[1];
          std::tie(row0_, col0_) = place(body, task_);
          // (The next iteration's values first: the row's parts' gather and what follows it move to
          // the next iteration — pipeline_part_gathers.)
          const std::vector<int> carried_next = {body.add(c[0], body.index(1)), body.add(task_, blocks)};
          // (A task past the last: the end mark.)
          std::tie(refill_row_, refill_col_) = place(body, body.add(task_, ahead));
          refilled_ = false;
          value_of_.clear();
          in_row_ = -1;
          row(body);
          if (!refilled_) {
            body.barrier();
            refill(body);
          }
          return carried_next;
        });
  }

  // The stage just read gets its next row (or the end mark) — claimed, the row claimed ahead, and
  // the next is claimed: after a block barrier that follows every thread's reads of the stage.
  void refill(Builder& b) {
    for (size_t i = 0; i < ring_of_.size(); ++i)
      if (ring_of_[i] >= 0)
        b.fill_stage(static_cast<int>(i), refill_row_, split_ ? refill_col_ : col0_, ring_of_[i], stage_, rows_);
    if (s_.claims_rows()) next_ticket_ = b.claim(workspace_, zero_, dealt_, rows_, refill_row_);
    refilled_ = true;
  }

  void add_params() {
    std::vector<Shape> shapes;
    for (NodeId id : k_.inputs) shapes.push_back(g_.node(id).shape);
    for (NodeId id : k_.outputs) shapes.push_back(aligned_shape(g_, id, k_));
    std::vector<Shape> views = operand_views(s_, k_.domain, k_.split, shapes);
    for (size_t i = 0; i < k_.inputs.size(); ++i) p_.params.push_back(param_of(g_, k_.inputs[i], false, views[i], s_));
    for (size_t i = 0; i < k_.outputs.size(); ++i)
      p_.params.push_back(param_of(g_, k_.outputs[i], true, views[k_.inputs.size() + i], s_));
    if (!window_) return;
    for (const Param& prm : p_.params)
      if (prm.output && prm.view[1] != 1 && (prm.view != Shape{s_.rows, s_.cols} || !prm.row_dims.empty()))
        throw CodegenError(
            fmt::format("kernel {}: {} runs along a windowed row laid out unlike the rows", k_.name, prm.name));
    p_.wide_indices |= s_.rows * s_.cols + s_.col_blocks() * s_.tile_cols() > INT32_MAX;
  }

  // The block's first row and column (a windowed row's: its window column).
  void place(Builder& b) {
    const int pid = b.program_id(0);
    if (cluster_) {
      const int blocks = b.index(s_.cluster_blocks);
      row0_ = b.div(pid, blocks);
      col0_ = b.mul(b.rem(pid, blocks), b.index(s_.tile_cols()));
    } else {
      row0_ = b.mul(pid, b.index(s_.tile_rows()));
    }
    zero_ = b.index(0);
    if (!cluster_) col0_ = zero_;
  }

  // (A windowed row's tensor along it has a tile of the block's rows: each is shifted by its own.)
  Shape tile_shape(const Param& prm) const {
    return Shape{prm.view[0] == 1 && !windowed(prm) ? 1 : s_.tile_rows(), prm.view[1] == 1 ? 1 : s_.tile_cols()};
  }
  bool windowed(const Param& prm) const { return window_ && prm.view[1] != 1; }
  std::vector<int> offsets(const Param& prm) const {
    return std::vector<int>{prm.view[0] == 1 ? zero_ : row0_, prm.view[1] == 1 ? zero_ : col0_};
  }
  std::vector<bool> masks(const Param& prm) const {
    return std::vector<bool>{masked_[0] && prm.view[0] != 1, masked_[1] && prm.view[1] != 1};
  }

  void load(Builder& b, size_t i) {
    const Param& prm = p_.params[i];
    if (staged_ && ring_of_[i] >= 0) {
      value_of_[k_.inputs[i]] = b.load_stage(ring_of_[i], stage_, zero_, tile_shape(prm));
      return;
    }
    value_of_[k_.inputs[i]] =
        windowed(prm) ? b.load_window(static_cast<int>(i), row0_, col0_, tile_shape(prm), s_.vec, masks(prm)[0])
                      : b.load(static_cast<int>(i), offsets(prm), tile_shape(prm), masks(prm));
  }

  // A 16-bit exp of u − c, u along the row and c per row (softmax's exps), or null; the difference,
  // where nothing else uses it, is dropped by sinking.
  const Node* shifted(const Node& n) const {
    return shifted_exp_arg(g_, k_, n, [&](NodeId o) {
      const Shape& sh = g_.node(o).shape;
      return !sh.empty() && sh.back() != 1;
    });
  }

  // Whether online sum id's terms are a shifted exp's (shifted_exp2): its rescale factors are
  // then ex2's too (shift_factor).
  bool fast_factor(NodeId id) const { return shifted(g_.node(g_.node(id).operands[0])) != nullptr; }

  void compute_nodes(Builder& b) {
    for (NodeId id : k_.nodes) eval(b, id, value_of_);
  }

  // Node id's value in `v` (value_of_, or a copy in which a max reduction takes a block's value),
  // computing what it needs there. A tensor shared by every row is loaded where first used, a
  // constant is a scalar; a reduction over a cluster completes its pass (over_cluster).
  int eval(Builder& b, NodeId id, std::map<NodeId, int>& v) {
    if (auto it = v.find(id); it != v.end()) return it->second;
    const Node& n = g_.node(id);
    int out;
    if (const auto in = std::find(k_.inputs.begin(), k_.inputs.end(), id); in != k_.inputs.end()) {
      if (!value_of_.count(id)) load(b, static_cast<size_t>(in - k_.inputs.begin()));
      out = value_of_.at(id);
    } else if (n.op == Op::Constant) {
      out = b.scalar(n.value, n.dtype);
    } else if (const Node* d = shifted(n)) {
      out = as_used(b, g_, k_, id, shifted_exp2(b, eval(b, d->operands[0], v), eval(b, d->operands[1], v)));
    } else if (n.op == Op::Iota) {
      out = iota_of(b, k_, n, row0_, col0_, window_ ? s_.vec : 0);
    } else if (op_info(n.op).kind == OpKind::Reduce && ((cluster_ && s_.cluster_online) || split_)) {
      if (!value_of_.count(id)) over_cluster(b, passes_.pass_of.at(id));
      out = value_of_.at(id);
    } else if (op_info(n.op).kind == OpKind::Reduce && !cluster_ && s_.block_online) {
      if (!value_of_.count(id)) over_warps(b, passes_.pass_of.at(id));
      out = value_of_.at(id);
    } else if (op_info(n.op).kind == OpKind::Reduce) {
      out = reduce(b, id, eval(b, n.operands[0], v));
    } else {
      std::vector<int> args;
      for (NodeId o : n.operands) args.push_back(eval(b, o, v));
      out = compute_node(b, g_, k_, id, args);
    }
    return v[id] = out;
  }

  // Node id with max reduction m taking the value m_value (a block's max, or a cluster block's);
  // what does not depend on m is kept for later uses.
  int eval_with(Builder& b, NodeId id, NodeId m, int m_value) {
    std::map<NodeId, int> with = with_max(b, m, m_value);
    const int out = eval(b, id, with);
    keep_independent(with, m);
    return out;
  }
  std::map<NodeId, int> with_max(Builder& b, NodeId m, int m_value) {
    std::map<NodeId, int> with = value_of_;
    with[m] = as_used(b, g_, k_, m, m_value);
    return with;
  }
  void keep_independent(const std::map<NodeId, int>& with, NodeId m) {
    const std::set<NodeId> after = dependents(m);
    for (const auto& [n, x] : with)
      if (!after.count(n)) value_of_.emplace(n, x);
  }
  // m and the kernel's nodes computed from it.
  std::set<NodeId> dependents(NodeId m) const {
    std::set<NodeId> out = {m};
    for (NodeId id : k_.nodes)
      for (NodeId o : g_.node(id).operands)
        if (out.count(o)) out.insert(id);
    return out;
  }

  // The mask of the row's columns (or a window's row's), where the tile runs past them.
  int row_mask(Builder& b) {
    if (!masked_[1]) return -1;
    if (in_row_ < 0)
      in_row_ = window_ ? b.in_window(row0_, col0_, b.index(s_.cols), s_.vec, {s_.tile_rows(), s_.tile_cols()})
                        : b.in_bounds(col0_, b.index(s_.cols), 1, {1, s_.tile_cols()});
    return in_row_;
  }
  // x constant along the row (not a tile along it): its own reduction's value.
  static bool along_row(const Program& p, int x) {
    const Type& t = p.types[static_cast<size_t>(x)];
    return t.is_tile() && t.shape[1] != 1;
  }
  int own_reduction(Builder& b, NodeId id, int x) {
    const Node& n = g_.node(id);
    return as_used(b, g_, k_, id, n.op == Op::ReduceSum ? times_width(b, x, s_.cols, n.dtype) : x);
  }

  // Reduction `id` of x along the row: only the columns in the row (or in a window's row) count;
  // in a cluster, the block's value and then the blocks' in rank order. Rounded to its dtype where
  // its uses see memory.
  int reduce(Builder& b, NodeId id, int x) {
    if (!along_row(p_, x)) return own_reduction(b, id, x);
    const Op op = g_.node(id).op;
    int r = block_reduce(b, op, x);
    if (cluster_) r = in_rank_order(b, op, b.cluster_values({r}));
    return as_used(b, g_, k_, id, r);
  }

  // x reduced along the row over the block's threads (its row's columns only); staged, the first
  // such reduction is followed by the stage's refill (its block barrier follows every thread's
  // reads of the stage).
  int block_reduce(Builder& b, Op op, int x) {
    const int r = b.reduce(op, x, 1, row_mask(b));
    if (staged_ && !refilled_) refill(b);
    return r;
  }

  // The cluster's blocks' values of a reduction combined in rank order (every block gets the same
  // bits).
  int in_rank_order(Builder& b, Op reduction, const std::vector<int>& blocks) {
    int acc = blocks[0];
    for (size_t r = 1; r < blocks.size(); ++r)
      acc = b.compute(combine_of(reduction), {acc, blocks[r]}, p_.types[static_cast<size_t>(acc)].dtype);
    return acc;
  }

  // A pass's reductions (fusion/row_passes.h) along the row reduced over the block: each one's
  // block value (before rounding); each online sum's terms, and — reduced over warps — each
  // warp's factor to the block's max (a warps tile; -1: none).
  struct BlockPass {
    std::vector<NodeId> ids;
    std::vector<int> values;
    struct Terms {
      int terms, factor;
    };
    std::map<NodeId, Terms> online;
    size_t index(NodeId id) const { return static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin()); }
    int value(NodeId id) const { return values[index(id)]; }
  };

  // The reductions of pass `pass`: those reduced as they are, and the online sums (of
  // exp(u − c(m)), completed in their max m's pass). (A reduction of a value constant along the
  // row is its own: along_row_operand. An online sum whose max is its own is reduced as it is.)
  std::pair<std::vector<NodeId>, std::vector<NodeId>> reductions_of(int pass) const {
    std::vector<NodeId> plain, online;
    for (NodeId id : k_.nodes)
      if (op_info(g_.node(id).op).kind == OpKind::Reduce && passes_.pass_of.at(id) == pass)
        (passes_.online_with.count(id) ? online : plain).push_back(id);
    return {plain, online};
  }
  // A max or min of u·c or c·u (u along the row, c a constant positive and finite in its dtype)
  // as the warps' extreme of u times c, rounded as the product is where used: the same value
  // (rounding u·c is monotonic in u), from u's values (a 16-bit part's own, not products a split
  // part would hold in f32 beside the next part: a bf16 softmax of x·0.5 spilled 96 bytes at 64
  // registers in parts of 32 a thread). -1 where it is not one.
  int scaled_extreme(Builder& b, NodeId id) {
    const Node& n = g_.node(id);
    if (n.op != Op::ReduceMax && n.op != Op::ReduceMin) return -1;
    const Node& product = g_.node(n.operands[0]);
    if (product.op != Op::Mul ||
        k_.inputs.end() != std::find(k_.inputs.begin(), k_.inputs.end(), n.operands[0]))
      return -1;
    for (int side = 0; side < 2; ++side) {
      const Node& c = g_.node(product.operands[static_cast<size_t>(side)]);
      if (c.op != Op::Constant) continue;
      if (const double held = rounded(c.dtype, c.value); !(held > 0) || !std::isfinite(held)) continue;
      const int u = eval(b, product.operands[static_cast<size_t>(1 - side)], value_of_);
      if (!along_row(p_, u)) return -1;
      const int extreme = b.reduce_warps(n.op, u, row_mask(b));
      return as_used(b, g_, k_, n.operands[0],
                     b.compute(Op::Mul, {extreme, b.scalar(c.value, c.dtype)}, product.dtype));
    }
    return -1;
  }

  // Reduction id's operand along the row, or -1 where it is constant along the row (the
  // reduction then its own).
  int along_row_operand(Builder& b, NodeId id) {
    const int x = eval(b, g_.node(id).operands[0], value_of_);
    if (along_row(p_, x)) return x;
    value_of_[id] = own_reduction(b, id, x);
    return -1;
  }

  // Each reduction of the pass its own block barrier (block_reduce). An online sum's terms are
  // exp(u − c(m_b)) with the block's max m_b (m 0 in its place where m_b is −inf: the terms are
  // 0, not −inf − (−inf), where the block's elements are −inf), its block value their sum (0
  // where m_b is −inf).
  BlockPass block_pass(Builder& b, int pass) {
    const auto [plain, online] = reductions_of(pass);
    BlockPass bp;
    auto reduced = [&](NodeId id) {
      if (const int x = along_row_operand(b, id); x >= 0) {
        bp.ids.push_back(id);
        bp.values.push_back(block_reduce(b, g_.node(id).op, x));
      }
    };
    for (NodeId id : plain) reduced(id);
    for (NodeId id : online) {
      const NodeId m = passes_.online_with.at(id), e = g_.node(id).operands[0];
      if (value_of_.count(m)) {
        reduced(id);
        continue;
      }
      const int m_b = bp.value(m), seen = seen_max(b, m_b);
      const int terms = eval_with(b, e, m, finite_max(b, m_b, seen));
      const int s_b = block_reduce(b, Op::ReduceSum, as_f32(b, terms));
      bp.ids.push_back(id);
      bp.values.push_back(b.compute(Op::Where, {seen, s_b, b.scalar(0.0, DType::F32)}, DType::F32));
      bp.online[id] = {terms, -1};
    }
    return bp;
  }

  // (TileSchedule::block_online.) The pass's reductions over the block's whole warps behind one
  // block barrier: each warp reduces its part of the row (a warps tile), `gather_warps` gives
  // every warp all the warps' values, and each warp reduces them by shuffles (every thread gets
  // the same bits). An online sum of exp(u − c(m)) is each warp's sum of its terms with its own
  // max m_w (as a block's, above), brought to the block's max M_b by exp(c(m_w) − c(M_b))
  // before the warps' sums are added; that factor is the warp's for what uses the terms.
  BlockPass warps_pass(Builder& b, int pass) {
    const auto [plain, online] = reductions_of(pass);
    BlockPass bp;
    std::vector<int> partials;  // each reduction's warps tile
    auto reduced = [&](NodeId id) {
      if (const int scaled = scaled_extreme(b, id); scaled >= 0) {
        bp.ids.push_back(id);
        partials.push_back(scaled);
      } else if (const int x = along_row_operand(b, id); x >= 0) {
        bp.ids.push_back(id);
        partials.push_back(b.reduce_warps(g_.node(id).op, x, row_mask(b)));
      }
    };
    for (NodeId id : plain) reduced(id);
    struct Warps {
      int seen, shift;  // whether m_w is finite; c(m_w) (f32)
    };
    std::map<NodeId, Warps> warps;
    for (NodeId id : online) {
      const NodeId m = passes_.online_with.at(id), e = g_.node(id).operands[0], c = passes_.shift_of.at(id);
      if (value_of_.count(m)) {
        reduced(id);
        continue;
      }
      const int m_w = partials[bp.index(m)];
      const int seen = seen_max(b, m_w), finite = finite_max(b, m_w, seen);
      const int64_t rows = p_.types[static_cast<size_t>(m_w)].shape[0];
      const int terms = eval_with(b, e, m, b.spread(finite, {rows, s_.tile_cols()}));
      const int s_w = b.reduce_warps(Op::ReduceSum, as_f32(b, terms), row_mask(b));
      bp.ids.push_back(id);
      partials.push_back(b.compute(Op::Where, {seen, s_w, b.scalar(0.0, DType::F32)}, DType::F32));
      bp.online[id] = {terms, -1};
      warps[id] = {seen, as_f32(b, eval_with(b, c, m, finite))};
    }
    if (bp.ids.empty()) return bp;
    const std::vector<int> gathered = b.gather_warps(partials);
    if (staged_ && !refilled_) refill(b);  // (every thread has read the stage before the barrier)
    bp.values.assign(bp.ids.size(), -1);
    for (size_t k = 0; k < bp.ids.size(); ++k)
      if (!bp.online.count(bp.ids[k])) bp.values[k] = b.reduce(g_.node(bp.ids[k]).op, gathered[k], 1);
    for (size_t k = 0; k < bp.ids.size(); ++k) {
      const NodeId id = bp.ids[k];
      if (!bp.online.count(id)) continue;
      const NodeId m = passes_.online_with.at(id), c = passes_.shift_of.at(id);
      const int c_block = as_f32(b, eval_with(b, c, m, bp.value(m)));
      const int c_lane = as_f32(b, eval_with(b, c, m, gathered[bp.index(m)]));  // (each lane's warp's)
      bp.values[k] = b.reduce(Op::ReduceSum, rescaled(b, gathered[k], c_lane, c_block, fast_factor(id)), 1);
      bp.online[id].factor = b.compute(
          Op::Where, {warps[id].seen, shift_factor(b, warps[id].shift, c_block, fast_factor(id)), b.scalar(0.0, DType::F32)},
          DType::F32);
    }
    return bp;
  }

  // Rows one block holds (block_online): the pass over the warps, its values the row's, an online
  // sum's terms brought to the row's max by their warp's factor (one multiply an element).
  void over_warps(Builder& b, int pass) {
    const BlockPass bp = warps_pass(b, pass);
    for (size_t k = 0; k < bp.ids.size(); ++k) value_of_[bp.ids[k]] = as_used(b, g_, k_, bp.ids[k], bp.values[k]);
    for (const auto& [id, t] : bp.online) {
      const NodeId e = g_.node(id).operands[0];
      const Type terms = p_.types[static_cast<size_t>(t.terms)];  // (a copy: the builder adds types)
      value_of_[e] = as_used(b, g_, k_, e, b.compute(Op::Mul, {t.terms, b.spread(t.factor, terms.shape)}, terms.dtype));
    }
  }

  // (TileSchedule::cluster_online.) The pass's reductions over a row the cluster's blocks share,
  // in one exchange: each block reduces its columns (a barrier a reduction, or with block_online
  // one a pass), cluster_values gives every block each block's values, and each reduction
  // combines them in rank order — or, with block_online, gather_blocks gives each warp's lane r
  // block r's and the warp combines them by shuffles, one rescale a lane (either way every block
  // gets the same bits). An online sum's block values are brought to the row's max M by
  // exp(c(m_b) − c(M)) before they are added; what uses the terms takes the block's times that
  // factor (times its warp's, over warps: one multiply an element). A split row's parts are
  // combined the same way, each block a part: publish and gather_parts in place of gather_blocks.
  void over_cluster(Builder& b, int pass) {
    const BlockPass bp = s_.block_online ? warps_pass(b, pass) : block_pass(b, pass);
    if (bp.ids.empty()) return;
    const size_t n = static_cast<size_t>(split_ ? s_.split_blocks : s_.cluster_blocks);
    const bool by_lane = s_.block_online;
    std::vector<int> all;
    if (split_) {  // (the row's parts: other blocks' tasks; f32 words)
      if (s_.rows * s_.split_blocks * static_cast<int64_t>(bp.values.size()) * 8 > s_.workspace_bytes())
        throw CodegenError(fmt::format("kernel {}: a part's {} values take more than its {} bytes of the workspace",
                                       k_.name, bp.values.size(), s_.workspace_bytes() / (s_.rows * s_.split_blocks)));
      std::vector<int> f32s;
      for (int v : bp.values) f32s.push_back(as_f32(b, v));
      b.publish(workspace_, task_, f32s);
      all = b.gather_parts(workspace_, row0_, s_.split_blocks, static_cast<int>(bp.values.size()));
    } else {
      all = by_lane ? b.gather_blocks(bp.values) : b.cluster_values(bp.values);
    }
    auto values_of = [&](NodeId id) {
      const size_t a = bp.index(id);
      return std::vector<int>(all.begin() + static_cast<std::ptrdiff_t>(a * n),
                              all.begin() + static_cast<std::ptrdiff_t>((a + 1) * n));
    };
    std::map<NodeId, int> row;  // each plain reduction's combined value, before rounding
    for (NodeId id : bp.ids) {
      if (bp.online.count(id)) continue;
      const Op op = g_.node(id).op;
      row[id] = by_lane ? b.reduce(op, all[bp.index(id)], 1) : in_rank_order(b, op, values_of(id));
      value_of_[id] = as_used(b, g_, k_, id, row[id]);
    }
    for (const auto& [id, t] : bp.online) {
      const NodeId m = passes_.online_with.at(id), c = passes_.shift_of.at(id);
      const int c_row = as_f32(b, eval_with(b, c, m, row.at(m)));
      int acc = -1;
      if (by_lane) {
        const int c_lane = as_f32(b, eval_with(b, c, m, all[bp.index(m)]));  // (each lane's block's)
        acc = b.reduce(Op::ReduceSum, rescaled(b, all[bp.index(id)], c_lane, c_row, fast_factor(id)), 1);
      } else {
        const std::vector<int> maxes = values_of(m), sums = values_of(id);
        for (size_t r = 0; r < n; ++r) {
          const int term = rescaled(b, sums[r], as_f32(b, eval_with(b, c, m, maxes[r])), c_row, fast_factor(id));
          acc = acc < 0 ? term : b.compute(Op::Add, {acc, term}, DType::F32);
        }
      }
      value_of_[id] = as_used(b, g_, k_, id, acc);
      // The block's factor (0 where none of the block's elements counted), times the warp's.
      const int m_b = bp.value(m), seen = seen_max(b, m_b);
      const int c_b = as_f32(b, eval_with(b, c, m, finite_max(b, m_b, seen)));
      int factor =
          b.compute(Op::Where, {seen, shift_factor(b, c_b, c_row, fast_factor(id)), b.scalar(0.0, DType::F32)}, DType::F32);
      const Type terms = p_.types[static_cast<size_t>(t.terms)];  // (a copy: the builder adds types)
      if (t.factor >= 0) factor = b.spread(b.compute(Op::Mul, {t.factor, factor}, DType::F32), terms.shape);
      const NodeId e = g_.node(id).operands[0];
      value_of_[e] = as_used(b, g_, k_, e, b.compute(Op::Mul, {t.terms, factor}, terms.dtype));
    }
  }

  // Whether a max's partial m (a block's or a warp's) is finite; m where it is, 0 where not.
  int seen_max(Builder& b, int m) {
    return b.compute(Op::Ne, {as_f32(b, m), b.scalar(-INFINITY, DType::F32)}, DType::Bool);
  }
  int finite_max(Builder& b, int m, int seen) {
    const DType dt = p_.types[static_cast<size_t>(m)].dtype;
    return b.compute(Op::Where, {seen, m, b.scalar(0.0, dt)}, dt);
  }

  // Each output at its offsets; a windowed row's elements only (one value per row as usual).
  void store(Builder& b) {
    auto shape = [&](const Param& prm) { return tile_shape(prm); };
    auto one = [&](int param, int v) {
      const Param& prm = p_.params[static_cast<size_t>(param)];
      if (windowed(prm))
        b.store_window(param, row0_, col0_, v, s_.vec, masks(prm)[0]);
      else
        b.store(param, offsets(prm), v, masks(prm));
    };
    if (NodeId bad = store_outputs(b, k_, value_of_, shape, one); bad >= 0)
      throw CodegenError(fmt::format("kernel {}: output %{} is not a tile of its view", k_.name, bad));
  }

  const Graph& g_;
  const Kernel& k_;
  const TileSchedule& s_;
  const bool cluster_, window_, staged_, split_;
  const RowPasses passes_;
  Program p_;
  std::vector<bool> masked_;
  std::map<NodeId, int> value_of_;
  int row0_ = -1, col0_ = -1, zero_ = -1, in_row_ = -1;
  // Staged rows: each input's bulk ring (-1: none), the workspace (claimed), the rows, the rows
  // dealt before the loop (groups × stages), the stage of this iteration, the row its refill puts
  // there (the claimed ticket, or the row `stages` ahead) and the next ticket (claimed).
  std::vector<int> ring_of_;
  int workspace_ = -1, rows_ = -1, dealt_ = -1, stage_ = -1, refill_row_ = -1, next_ticket_ = -1;
  // Split rows: the parts of a row, the block's task, and the column its stage's refill takes.
  int parts_ = -1, task_ = -1, refill_col_ = -1;
  bool refilled_ = false;
};

}  // namespace

Program row_reduction(const Graph& g, const Kernel& k) { return RowReduction(g, k).build(); }

}  // namespace tilefuse::tir
