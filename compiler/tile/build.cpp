#include "compiler/tile/build.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "compiler/fusion/cost_model.h"
#include "compiler/graph/sign.h"
#include "compiler/support/error.h"
#include "compiler/tile/attention.h"
#include "compiler/tile/attention_backward.h"
#include "compiler/tile/build_support.h"
#include "compiler/tile/ir_verify.h"
#include "compiler/tile/write_at.h"

namespace tilefuse::tir {

namespace {

Program pointwise(const Graph& g, const Kernel& k) {
  const TileSchedule& s = k.schedule;
  Program p = program_of(k);
  for (NodeId id : k.nodes)  // an iota's linear index runs over the domain's elements
    p.wide_indices |= g.node(id).op == Op::Iota && num_elements(k.domain) > INT32_MAX;
  std::vector<Shape> shapes;
  for (NodeId id : k.inputs) shapes.push_back(g.node(id).shape);
  for (NodeId id : k.outputs) shapes.push_back(g.node(id).shape);
  std::vector<Shape> views = operand_views(s, k.domain, k.split, shapes);
  for (size_t i = 0; i < k.inputs.size(); ++i) p.params.push_back(param_of(g, k.inputs[i], false, views[i], s));
  for (size_t i = 0; i < k.outputs.size(); ++i)
    p.params.push_back(param_of(g, k.outputs[i], true, views[k.inputs.size() + i], s));
  if (!s.elem_dims.empty()) {  // flat: what does not span the whole domain is indexed per element
    const std::vector<Shape> along = element_views(s, k.domain, shapes);
    for (size_t i = 0; i < p.params.size(); ++i) {
      Param& prm = p.params[i];
      prm.row_dims.clear();
      prm.row_view.clear();
      if (num_elements(along[i]) != 1 && along[i] != s.elem_dims) {
        prm.elem_dims = s.elem_dims;
        prm.elem_view = along[i];
      }
    }
  }

  Builder b(p, p.body);
  // Program id → (row block, column block); the tile's first element.
  const int pid = b.program_id(0);
  const int col_blocks = b.index(s.col_blocks());
  const int row0 = b.mul(b.div(pid, col_blocks), b.index(s.tile_rows()));
  const int col0 = b.mul(b.rem(pid, col_blocks), b.index(s.tile_cols()));
  const std::vector<bool> masked = {s.rows % s.tile_rows() != 0, s.cols % s.tile_cols() != 0};
  auto tile_shape = [&](const Param& prm) {
    return Shape{prm.view[0] == 1 ? 1 : s.tile_rows(), prm.view[1] == 1 ? 1 : s.tile_cols()};
  };
  const int zero = b.index(0);
  auto offsets = [&](const Param& prm) {
    return std::vector<int>{prm.view[0] == 1 ? zero : row0, prm.view[1] == 1 ? zero : col0};
  };
  auto masks = [&](const Param& prm) {
    return std::vector<bool>{masked[0] && prm.view[0] != 1, masked[1] && prm.view[1] != 1};
  };
  // Every input is loaded first, so that all its bytes are in flight at once: the tiles read a
  // vector at a time before those read an element at a time (a flat domain's broadcast operands,
  // whose loads branch where a run wraps into the next row).
  std::map<NodeId, int> value_of;
  for (bool gathered : {false, true})
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      const Param& prm = p.params[i];
      if (prm.elem_dims.empty() == !gathered)
        value_of[k.inputs[i]] = b.load(static_cast<int>(i), offsets(prm), tile_shape(prm), masks(prm));
    }
  for (NodeId id : k.nodes) {
    const Node& n = g.node(id);
    if (n.op == Op::Iota) {
      value_of[id] = iota_of(b, k, n, row0, col0);
      continue;
    }
    std::vector<int> args;
    for (NodeId o : n.operands) {
      if (!value_of.count(o)) value_of[o] = b.scalar(g.node(o).value, g.node(o).dtype);  // constants
      args.push_back(value_of.at(o));
    }
    value_of[id] = compute_node(b, g, k, id, args);
  }
  if (NodeId bad = store_outputs(b, k, value_of, tile_shape, offsets, masks); bad >= 0)
    throw CodegenError(fmt::format("kernel {}: output %{} is not a tile of its view", k.name, bad));
  verify_program(p);
  return p;
}

// A column reduction of [P, R, C] (R reduced): block (p, part, column tile) loops over its part
// of the rows a tile at a time, carrying one f32 partial tile per reduction; the tile's rows are
// then reduced. With one part, the values after the reductions (one per column) are computed
// and stored at once; with several, each part's sums go to the workspace, and the last block of
// the column tile to arrive adds them up, in part order, and computes the rest.
class ColumnReduction {
 public:
  ColumnReduction(const Graph& g, const Kernel& k) : g_(g), k_(k), s_(k.schedule) {}

  Program build() {
    p_ = program_of(k_);
    classify();
    add_params();
    Builder b(p_, p_.body);
    const int pid = b.program_id(0);
    const int col_blocks = b.index(s_.col_blocks()), parts = b.index(s_.split_blocks);
    const int tile = b.rem(pid, col_blocks), rest = b.div(pid, col_blocks);
    part_ = b.rem(rest, parts);
    outer_ = b.div(rest, parts);
    col0_ = b.mul(tile, b.index(s_.tile_cols()));
    zero_ = b.index(0);
    const int first = b.mul(outer_, b.index(s_.rows));
    const int r0 = b.add(first, b.mul(part_, b.index(s_.split_rows)));
    const int r1 = b.min(b.add(r0, b.index(s_.split_rows)), b.add(first, b.index(s_.rows)));
    std::vector<int> sums = sum_rows(b, r0, r1);
    if (s_.split_blocks == 1) {
      after_reductions(b, sums);
    } else {
      for (size_t i = 0; i < sums.size(); ++i)
        b.store(workspace_, {b.add(slot_row(b, i), part_), col0_}, sums[i], {false, cols_masked()});
      const int slot = b.add(b.mul(outer_, col_blocks), tile);
      const int last = b.last_arrival(workspace_, slot, parts);
      b.when(last, [&](Builder& in) {
        after_reductions(in, add_parts(in));
        in.reset_count(workspace_, slot);
      });
    }
    verify_program(p_);
    return std::move(p_);
  }

 private:
  Shape loop_tile() const { return {s_.tile_rows(), s_.tile_cols()}; }
  bool cols_masked() const { return s_.cols % s_.tile_cols() != 0; }

  // Which nodes run inside the loop (before any reduction's result) and which inputs each side reads.
  void classify() {
    for (NodeId n : k_.nodes) {
      const Node& node = g_.node(n);
      bool uses = false;
      for (NodeId o : node.operands) uses |= after_.count(o) > 0;
      if (op_info(node.op).kind == OpKind::Reduce) reductions_.push_back(n);
      if (uses || op_info(node.op).kind == OpKind::Reduce) after_.insert(n);
      for (NodeId o : node.operands)
        if (std::binary_search(k_.inputs.begin(), k_.inputs.end(), o)) (uses ? epilogue_inputs_ : loop_inputs_).insert(o);
    }
  }

  void add_params() {
    std::vector<Shape> shapes;
    for (NodeId id : k_.inputs) shapes.push_back(g_.node(id).shape);
    for (NodeId id : k_.outputs) shapes.push_back(aligned_shape(g_, id, k_));
    std::vector<Shape> views = column_views(k_.domain, k_.split, k_.reduce_end, shapes);
    auto add = [&](NodeId id, bool output, size_t operand) {
      const Shape& view = views[operand];
      Param prm = param_of(g_, id, output, view, s_);
      prm.view = view;
      prm.row_dims.clear();
      prm.row_view.clear();
      // In the loop's [P·R, C] view an operand that spans one of P and R splits its rows.
      const bool in_loop = output ? !after_.count(id) : loop_inputs_.count(id) > 0;
      if (in_loop && view[0] != 1 && view[0] != s_.outer * s_.rows) {
        const Shape& shape = shapes[operand];
        Shape aligned(k_.domain.size() - std::min(k_.domain.size(), shape.size()), 1);
        aligned.insert(aligned.end(), shape.begin(), shape.end());
        int64_t spans_outer = 1;
        for (int d = 0; d < k_.split; ++d) spans_outer *= aligned[static_cast<size_t>(d)];
        prm.row_dims = {s_.outer, s_.rows};
        prm.row_view = {spans_outer, view[0] / spans_outer};
      }
      param_of_[id] = static_cast<int>(p_.params.size());
      p_.params.push_back(prm);
    };
    for (size_t i = 0; i < k_.inputs.size(); ++i) add(k_.inputs[i], false, i);
    for (size_t i = 0; i < k_.outputs.size(); ++i) add(k_.outputs[i], true, k_.inputs.size() + i);
    if (s_.split_blocks > 1) {
      Param ws;
      ws.name = "workspace";
      ws.view = {static_cast<int64_t>(reductions_.size()) * s_.outer * s_.split_blocks, s_.cols};
      ws.workspace = true;
      workspace_ = static_cast<int>(p_.params.size());
      p_.params.push_back(ws);
    }
  }

  // The workspace row of reduction i's first part for this block's P index.
  int slot_row(Builder& b, size_t i) {
    return b.mul(b.add(b.index(static_cast<int64_t>(i) * s_.outer), outer_), b.index(s_.split_blocks));
  }

  int constant(Builder& b, NodeId c) { return b.scalar(g_.node(c).value, g_.node(c).dtype); }

  // The loop over rows [r0, r1): loads, the nodes before the reductions, full-size outputs, and
  // each reduction's partial (rows past r1 contribute its identity); then the tile's rows reduced.
  std::vector<int> sum_rows(Builder& b, int r0, int r1) {
    std::vector<int> inits;
    for (NodeId r : reductions_) inits.push_back(b.tile_const(identity_of(g_.node(r).op), DType::F32, loop_tile()));
    const bool rows_masked = s_.rows % s_.tile_rows() != 0 || s_.split_rows * s_.split_blocks != s_.rows;
    std::vector<int> partial = b.for_loop(r0, r1, b.index(s_.tile_rows()), inits, [&](Builder& in, int row, const std::vector<int>& acc) {
      std::map<NodeId, int> value;
      for (NodeId id : loop_inputs_) {
        const Param& prm = p_.params[static_cast<size_t>(param_of_.at(id))];
        const Shape shape = {prm.view[0] == 1 ? 1 : s_.tile_rows(), prm.view[1] == 1 ? 1 : s_.tile_cols()};
        value[id] = in.load(param_of_.at(id), {prm.view[0] == 1 ? zero_ : row, prm.view[1] == 1 ? zero_ : col0_}, shape,
                            {rows_masked && prm.view[0] != 1, cols_masked() && prm.view[1] != 1});
      }
      std::vector<int> next = acc;
      for (NodeId id : k_.nodes) {
        const Node& n = g_.node(id);
        if (after_.count(id) && op_info(n.op).kind != OpKind::Reduce) continue;
        std::vector<int> args;
        for (NodeId o : n.operands) args.push_back(value.count(o) ? value.at(o) : constant(in, o));
        if (op_info(n.op).kind != OpKind::Reduce) {
          value[id] = compute_node(in, g_, k_, id, args);
          continue;
        }
        const size_t i = static_cast<size_t>(std::find(reductions_.begin(), reductions_.end(), id) - reductions_.begin());
        int v = args[0];
        if (g_.node(n.operands[0]).dtype != DType::F32) v = in.compute(Op::Cast, {v}, DType::F32);
        const int ok = in.in_bounds(row, r1, 0, {s_.tile_rows(), 1});
        v = in.compute(Op::Where, {ok, v, in.scalar(identity_of(n.op), DType::F32)}, DType::F32);
        next[i] = in.compute(combine_of(n.op), {acc[i], v}, DType::F32);
      }
      for (NodeId o : k_.outputs)
        if (!after_.count(o))
          in.store(param_of_.at(o), {row, col0_}, value.at(o), {true, cols_masked()}, {r1, -1});
      return next;
    });
    std::vector<int> sums;
    for (size_t i = 0; i < reductions_.size(); ++i)
      sums.push_back(b.reduce(g_.node(reductions_[i]).op, partial[i], 0));
    return sums;
  }

  // The last block of a column tile: each reduction's parts, in order, reduced again.
  std::vector<int> add_parts(Builder& b) {
    std::vector<int> sums;
    for (size_t i = 0; i < reductions_.size(); ++i) {
      const Op op = g_.node(reductions_[i]).op;
      const int first = slot_row(b, i), end = b.add(first, b.index(s_.split_blocks));
      const int init = b.tile_const(identity_of(op), DType::F32, loop_tile());
      std::vector<int> acc = b.for_loop(first, end, b.index(s_.tile_rows()), {init}, [&](Builder& in, int row, const std::vector<int>& carried) {
        int v = in.load(workspace_, {row, col0_}, loop_tile(), {true, cols_masked()}, {end, -1});
        const int ok = in.in_bounds(row, end, 0, {s_.tile_rows(), 1});
        v = in.compute(Op::Where, {ok, v, in.scalar(identity_of(op), DType::F32)}, DType::F32);
        return std::vector<int>{in.compute(combine_of(op), {carried[0], v}, DType::F32)};
      });
      sums.push_back(b.reduce(op, acc[0], 0));
    }
    return sums;
  }

  // Each reduction's result (rounded to its dtype: its f32 sums become a value of the node's
  // dtype, runtime/check.cpp's plan_rounding says so too), the nodes after it, and the outputs of
  // one value per column.
  void after_reductions(Builder& b, const std::vector<int>& sums) {
    std::map<NodeId, int> value;
    for (size_t i = 0; i < reductions_.size(); ++i) {
      const DType dt = g_.node(reductions_[i]).dtype;
      value[reductions_[i]] = dt == DType::F32 ? sums[i] : b.compute(Op::Cast, {sums[i]}, dt);
    }
    for (NodeId id : epilogue_inputs_) {
      const Param& prm = p_.params[static_cast<size_t>(param_of_.at(id))];
      const Shape shape = {1, prm.view[1] == 1 ? 1 : s_.tile_cols()};
      value[id] = b.load(param_of_.at(id), {prm.view[0] == 1 ? zero_ : outer_, prm.view[1] == 1 ? zero_ : col0_}, shape,
                         {false, cols_masked() && prm.view[1] != 1});
    }
    for (NodeId id : k_.nodes) {
      const Node& n = g_.node(id);
      if (!after_.count(id) || op_info(n.op).kind == OpKind::Reduce) continue;
      std::vector<int> args;
      for (NodeId o : n.operands) args.push_back(value.count(o) ? value.at(o) : constant(b, o));
      value[id] = compute_node(b, g_, k_, id, args);
    }
    for (NodeId o : k_.outputs) {
      if (!after_.count(o)) continue;
      const Param& prm = p_.params[static_cast<size_t>(param_of_.at(o))];
      int v = value.at(o);
      const Shape shape = {1, prm.view[1] == 1 ? 1 : s_.tile_cols()};
      if (!p_.types[static_cast<size_t>(v)].is_tile()) v = b.splat(v, shape);
      b.store(param_of_.at(o), {prm.view[0] == 1 ? zero_ : outer_, prm.view[1] == 1 ? zero_ : col0_}, v,
              {false, cols_masked() && prm.view[1] != 1});
    }
  }

  const Graph& g_;
  const Kernel& k_;
  const TileSchedule& s_;
  Program p_;
  std::set<NodeId> after_, loop_inputs_, epilogue_inputs_;
  std::vector<NodeId> reductions_;
  std::map<NodeId, int> param_of_;
  int workspace_ = -1, part_ = -1, outer_ = -1, col0_ = -1, zero_ = -1;
};

// A matmul [batch, M, K] · [batch, K, N]: block (batch, row tile, column tile) of the product
// loops over K a step at a time, loading its A and B tiles straight into mma.sync fragments and
// accumulating into an f32 accumulator tile it carries; the epilogue's operands are loaded in
// the accumulator's layout, and its outputs stored from it. Tiles past M, N or K are masked; a
// K step past K is zeroed in both operands, so the padding adds nothing even where the clamped
// loads read an inf.
class MatMulProgram {
 public:
  MatMulProgram(const Graph& g, const Kernel& k)
      : g_(g), k_(k), s_(k.schedule), mm_(g.node(contraction(g, k))) {}

  Program build() {
    p_.name = k_.name;
    p_.layout = {{1, 1}, {1, s_.block_threads()}, {1, 1}};
    p_.mma = MmaConfig{s_.warps_m, s_.warps_n, s_.block_m / s_.warps_m, s_.block_n / s_.warps_n};
    p_.grid = {s_.grid()};
    p_.wide_indices = s_.wide_indices();
    add_params();
    if (s_.rolled_epilogue) chunk_layout();
    Builder b(p_, p_.body);
    const int pid = b.program_id(0);
    zero_ = b.index(0);
    // Split-K: consecutive blocks take one tile's k ranges.
    const int tile = split_k() ? b.div(pid, b.index(s_.k_splits)) : pid;
    int split = -1;
    if (!split_k()) {
      k_first_ = zero_;
      k_steps_ = b.index(s_.k_steps());
    } else {
      // This block's k range: steps [first, first + steps), the last range shorter.
      split = b.rem(pid, b.index(s_.k_splits));
      k_first_ = b.mul(split, b.index(s_.k_steps_per_split()));
      k_steps_ = b.min(b.index(s_.k_steps_per_split()), b.sub(b.index(s_.k_steps()), k_first_));
      k_end_ = b.min(b.mul(b.add(k_first_, k_steps_), b.index(s_.block_k)), b.index(s_.k));
    }
    if (s_.tma) {
      add_tma_rings();
      b.specialize(
          [&](Builder& in) {
            over_tiles(in, tile, -1, [&](Builder& l, int, int first) { produce(l, first); });
            if (s_.cluster_blocks > 1) wait_for_last_releases(in, tile);
          },
          [&](Builder& in, int group) {
            if (s_.consumer_groups > 1)
              ping_pong(in, tile, group);
            else
              over_tiles(in, tile, -1, [&](Builder& l, int, int first) { product_and_epilogue(l, tile, split, first); });
            if (staging_ >= 0) in.wait_stores();
          });
    } else {
      place_tile(b, tile);
      product_and_epilogue(b, tile, split, zero_);
    }
    verify_program(p_);
    return std::move(p_);
  }

 private:
  // Runs `body` on the block's tile, given the tile and its first k step counted over the
  // block's tiles; a persistent grid (TileSchedule::tile_blocks) loops over the tiles pid,
  // pid + blocks, … — or, for consumer group `group` (≥ 0) of a ping-pong block, over every
  // other one of them from its group's. In clusters, the clusters loop over their tiles (each a
  // tile per block of the cluster, on adjacent tile rows: the block's rank picks its row).
  void over_tiles(Builder& b, int tile, int group, const std::function<void(Builder&, int, int)>& body) {
    if (s_.tile_blocks == 0) {
      place_tile(b, tile);
      return body(b, tile, zero_);
    }
    const Cluster c = cluster_of(b, tile);
    const int start = group < 0 ? c.first : b.add(c.first, b.mul(group, c.stride));
    const int step = group < 0 ? c.stride : b.mul(c.stride, b.index(s_.consumer_groups));
    b.for_loop(start, b.index(cluster_tiles()), step, {}, [&](Builder& in, int t, const std::vector<int>&) {
      place_tile(in, t, c.rank);
      body(in, t, in.mul(in.div(in.sub(t, c.first), c.stride), k_steps_));
      return std::vector<int>{};
    });
  }
  // A persistent block's place: its cluster's first tile, the stride between its tiles (the
  // clusters' count) and its rank within its cluster (without clusters: pid, the blocks, 0).
  struct Cluster {
    int first, stride, rank;
  };
  Cluster cluster_of(Builder& b, int tile) {
    const int size = b.index(s_.cluster_blocks);
    return {b.div(tile, size), b.index(s_.tile_blocks / s_.cluster_blocks), b.rem(tile, size)};
  }
  // The tiles of the cluster grid (the tiles without clusters).
  int64_t cluster_tiles() const { return s_.batch * cluster_rows() * s_.n_blocks(); }
  // Cluster `cluster` has its last stages emptied by both blocks' consumers before its producer
  // exits: the multicast copies and the other block's releases then reach no block that has
  // left. (Its steps: one count of k steps per tile of the cluster.)
  void wait_for_last_releases(Builder& b, int tile) {
    const int one = b.index(1);
    const Cluster c = cluster_of(b, tile);
    const int count = b.add(b.div(b.sub(b.sub(b.index(cluster_tiles()), one), c.first), c.stride), one);
    const int total = b.mul(count, k_steps_);
    b.for_loop(total, b.add(total, b.index(s_.stages)), one, {}, [&](Builder& in, int kt, const std::vector<int>&) {
      const auto [stage, parity] = in.ring_stage(kt, s_.stages, true);
      in.wait_empty(0, stage, parity);
      in.wait_empty(1, stage, parity);
      return std::vector<int>{};
    });
  }
  // Ping-pong: group g takes the block's tiles g, g + 2, … (tiles pid + j·blocks); its k loop on
  // tile j waits for the turn that the other group hands over after its k loop on tile j − 1,
  // and hands the turn on before its epilogue (if the block has a tile j + 1). So the stages
  // are consumed in the order the producer fills them, one group's at a time.
  void ping_pong(Builder& b, int tile, int group) {
    const int blocks = b.index(s_.tile_blocks), tiles = b.index(s_.tiles());
    over_tiles(b, tile, group, [&](Builder& in, int t, int first) {
      in.when(in.less(tile, t), [](Builder& w) { w.await_turn(); });
      const int acc = tma_product(in, first);
      in.when(in.less(in.add(t, blocks), tiles), [](Builder& w) { w.hand_off(); });
      std::map<NodeId, int> value;
      finish(in, acc, value);
    });
  }

  // Tile `tile`'s batch, rows and columns, and its operands' batches; in a cluster, the tile of
  // its block of rank `rank` (tile row cluster_blocks·row + rank).
  void place_tile(Builder& b, int tile, int rank = -1) {
    int batch, mt, nt;
    tile_of(b, tile, &batch, &mt, &nt);
    if (s_.cluster_blocks > 1) mt = b.add(b.mul(mt, b.index(s_.cluster_blocks)), rank);
    n0_ = b.mul(nt, b.index(s_.block_n));
    batch_ = batch;
    first_row_ = b.mul(batch, b.index(s_.m));
    row0_ = b.add(first_row_, b.mul(mt, b.index(s_.block_m)));
    row_end_ = b.add(first_row_, b.index(s_.m));
    a_batch_ = operand_batch(b, 0, batch);
    b_batch_ = operand_batch(b, 1, batch);
  }

  // The product of the block's k range; then the epilogue, or under split-K the partial product
  // stored and, in the tile's last block to arrive, the partials summed and the epilogue. (TMA:
  // `first` is the tile's first step counted over the block's tiles, which sets its stages.)
  void product_and_epilogue(Builder& b, int tile, int split, int first) {
    std::map<NodeId, int> value;
    load_operands_early(b, value);
    const int acc = product(b, b.mul(b_batch_, b.index(s_.k)), first);
    if (!split_k()) return finish(b, acc, value);
    store_partial(b, split, acc);
    b.when(b.last_arrival(workspace_, tile, b.index(s_.k_splits)), [&](Builder& in) {
      const int one = in.index(1);
      const int sum = in.for_loop(one, in.index(s_.k_splits), one, {load_partial(in, zero_)},
                                  [&](Builder& l, int sp, const std::vector<int>& c) {
                                    return std::vector<int>{
                                        l.compute(Op::Add, {c[0], load_partial(l, sp)}, DType::F32)};
                                  })[0];
      finish(in, sum, value);
      in.reset_count(workspace_, tile);
    });
  }

  // Block pid's batch and tile: row by row of tiles, or — taking `group` tile rows at a time —
  // down each column of the group before the next (the last group may be shorter).
  // (In clusters the tile rows are the clusters' rows of tiles: `cluster_rows()`.)
  void tile_of(Builder& b, int pid, int* batch, int* mt, int* nt) {
    const int n_blocks = b.index(s_.n_blocks()), m_blocks = b.index(cluster_rows());
    if (s_.group <= 1) {
      const int rest = b.div(pid, n_blocks);
      *batch = b.div(rest, m_blocks);
      *nt = b.rem(pid, n_blocks);
      *mt = b.rem(rest, m_blocks);
      return;
    }
    const int per_batch = b.index(cluster_rows() * s_.n_blocks());
    *batch = b.div(pid, per_batch);
    const int t = b.rem(pid, per_batch);
    const int group = b.index(s_.group), per_group = b.index(int64_t{s_.group} * s_.n_blocks());
    const int first = b.mul(b.div(t, per_group), group);
    const int rows = b.min(group, b.sub(m_blocks, first));
    const int local = b.rem(t, per_group);
    *mt = b.add(first, b.rem(local, rows));
    *nt = b.div(local, rows);
  }

  // The product (rounded to its dtype only where rounds_product says so: f32 otherwise, which a
  // 16-bit epilogue node takes as it is); the epilogue on it.
  void finish(Builder& b, int acc, std::map<NodeId, int>& value) {
    value[mm_.id] = rounds_product(g_, k_) ? b.compute(Op::Cast, {acc}, mm_.dtype) : acc;
    epilogue(b, value);
  }

  // Split-K: the partial product of range `split` at its rows of the workspace ([splits · batch
  // · M, N] f32).
  bool split_k() const { return s_.k_splits > 1; }
  std::vector<int> partial_rows(Builder& b, int split) {
    const int base = b.mul(split, b.index(s_.batch * s_.m));
    return {b.add(base, row0_), b.add(base, row_end_)};
  }
  void store_partial(Builder& b, int split, int acc) {
    const std::vector<int> rows = partial_rows(b, split);
    b.store(workspace_, {rows[0], n0_}, acc, {true, cols_masked()}, {rows[1], -1});
  }
  int load_partial(Builder& b, int split) {
    const std::vector<int> rows = partial_rows(b, split);
    return b.load(workspace_, {rows[0], n0_}, {s_.block_m, s_.block_n}, {true, cols_masked()}, {rows[1], -1},
                  Frag::Acc);
  }

  // (A cluster's last tile row may lie past M: m_blocks() is rounded up to whole clusters.)
  bool rows_masked() const {
    return s_.m % s_.block_m != 0 || s_.m_blocks() % s_.cluster_blocks != 0;
  }
  // The rows of tiles clusters take, cluster_blocks tile rows each (1: the tile rows).
  int64_t cluster_rows() const { return (s_.m_blocks() + s_.cluster_blocks - 1) / s_.cluster_blocks; }
  bool cols_masked() const { return s_.n % s_.block_n != 0; }
  bool k_masked() const { return s_.k % s_.block_k != 0; }
  // Matmul operand i's batches: the product's, 1 (one shared by all), or — broadcast along some
  // of the product's batch axes — the product of its own.
  int64_t batches(size_t i) const {
    const Shape& sh = g_.node(mm_.operands[i]).shape;
    return num_elements(Shape(sh.begin(), sh.end() - 2));
  }
  // Operand i's batch for the product's `batch`: its indices along the batch axes it has.
  int operand_batch(Builder& b, size_t i, int batch) {
    if (batches(i) == s_.batch) return batch;
    if (batches(i) == 1) return zero_;
    const Shape& sh = g_.node(mm_.operands[i]).shape;
    return b.broadcast_index(batch, Shape(mm_.shape.begin(), mm_.shape.end() - 2), Shape(sh.begin(), sh.end() - 2));
  }
  // A's first row of this block's tile and the end of its batch's rows.
  int a_rows0(Builder& b) const { return b.add(b.mul(a_batch_, b.index(s_.m)), b.sub(row0_, first_row_)); }
  int a_end(Builder& b) const { return b.add(b.mul(a_batch_, b.index(s_.m)), b.index(s_.m)); }

  // A: [rows, K] (rows = M, per batch or shared), column-major per batch when transposed; B:
  // [rows, N] with rows = K likewise. Epilogue operands and outputs as in a pointwise kernel over
  // the product's [batch·M, N] rows.
  void add_params() {
    TileSchedule domain;
    domain.dims = k_.domain;
    for (NodeId id : k_.inputs) {
      Param prm = param_of(g_, id, false, aligned_shape(g_, id, k_), domain);
      for (size_t i = 0; i < 2; ++i) {
        if (id != mm_.operands[i]) continue;
        const int64_t rows = i == 0 ? s_.m : s_.k, cols = i == 0 ? s_.k : s_.n;
        // An operand copied into a padded pitch first is read there: the elements past its
        // stored rows are zeros, and the other operand's rows or columns that meet them are
        // masked. (A column-major one is unbatched: its pitch stands for its rows' count.)
        const int64_t pitch = s_.operand_pitch[i];
        prm.col_major = i == 0 ? mm_.transpose_a : mm_.transpose_b;
        prm.view = {batches(i) * rows, pitch > 0 && !prm.col_major ? pitch : cols};
        prm.row_dims.clear();
        prm.row_view.clear();
        prm.group_rows = prm.col_major ? (pitch > 0 ? pitch : rows) : 0;
        if (s_.tma) prm.tma_rows = prm.col_major ? prm.group_rows : rows;
        operand_param_[i] = static_cast<int>(p_.params.size());
      }
      param_[id] = static_cast<int>(p_.params.size());
      p_.params.push_back(prm);
    }
    for (NodeId id : k_.outputs) {
      param_[id] = static_cast<int>(p_.params.size());
      p_.params.push_back(param_of(g_, id, true, aligned_shape(g_, id, k_), domain));
      Param& out = p_.params.back();
      if (stored_by_tma(out)) out.tma_rows = s_.m;
    }
    if (split_k()) {  // each k range's partial product, then a counter per tile
      Param ws;
      ws.name = "workspace";
      ws.view = {s_.k_splits * s_.batch * s_.m, s_.n};
      ws.workspace = true;
      workspace_ = static_cast<int>(p_.params.size());
      p_.params.push_back(ws);
    }
  }

  // The K loop: the accumulator tile after every step.
  int product(Builder& b, int k0, int first) {
    if (s_.tma) return tma_product(b, first);
    if (s_.wgmma) return wgmma_product(b, k0);
    return s_.stages > 0 ? staged_product(b, k0) : direct_product(b, k0);
  }

  // The operands' tiles of step kt copied into stage `stage` of the rings, one group (the
  // bounds from ring_bounds).
  // Under split-K the steps count from the block's first, and the copies stop at its range's end.
  void copy_step(Builder& in, int kt, int stage, int k0) {
    const int kk = in.mul(split_k() ? in.add(k_first_, kt) : kt, step_);
    in.copy_async(operand_param_[0], {a_first_, kk}, 0, stage, {rows_masked(), true}, {a_last_, split_k() ? k_end_ : -1});
    in.copy_async(operand_param_[1], {in.add(k0, kk), n0_}, 1, stage, {true, cols_masked()}, {b_last_, -1});
    in.commit_group();
  }
  void ring_bounds(Builder& b, int k0) {
    a_first_ = a_rows0(b);
    a_last_ = a_end(b);
    b_last_ = b.add(k0, split_k() ? k_end_ : b.index(s_.k));
    step_ = b.index(s_.block_k);
  }

  // Warpgroup MMA from the rings (sm_90a): each step waits for its own copies, makes them visible
  // to wgmma (fence, barrier), refills the stage two steps behind it with the step `ahead` in
  // front, and starts its wgmma on the accumulator, leaving it in flight while the previous
  // step's finishes: a stage is refilled only after every warpgroup has waited for the wgmma
  // that read it (the barrier follows each one's wait). So `stages` − 2 steps are copied ahead.
  int wgmma_product(Builder& b, int k0) {
    const int stages = s_.stages, ahead = stages - 2;
    const DType dt = g_.node(mm_.operands[0]).dtype;
    p_.shared.push_back({"a_ring", dt, stages, {s_.block_m, s_.block_k}, mm_.transpose_a, true});
    p_.shared.push_back({"b_ring", dt, stages, {s_.block_k, s_.block_n}, mm_.transpose_b, true});
    ring_bounds(b, k0);
    const int ring_stages = b.index(stages);
    for (int st = 0; st < ahead; ++st) copy_step(b, b.index(st), b.index(st), k0);
    const int steps = k_steps_;
    const int acc = b.tile_const(0, DType::F32, {s_.block_m, s_.block_n}, Frag::Acc);
    const int out = b.for_loop(zero_, steps, b.index(1), {acc}, [&](Builder& in, int kt, const std::vector<int>& c) {
      in.wait_group(ahead - 1);
      in.fence_async();
      in.barrier();
      const int next = in.add(kt, in.index(ahead));
      copy_step(in, next, in.rem(next, ring_stages), k0);
      const int started = in.dot_async(0, 1, in.rem(kt, ring_stages), c[0]);
      return in.dot_wait({started}, 1);
    })[0];
    b.wait_group(0);  // nothing in flight when the block ends
    return b.dot_wait({out}, 0)[0];
  }

  // Warp-specialized wgmma (TileSchedule::tma). The rings, filled by the producer's TMA copies:
  // step kt uses stage kt % stages, filled for the (kt / stages)'th time.
  void add_tma_rings() {
    const DType dt = g_.node(mm_.operands[0]).dtype;
    p_.shared.push_back({"a_ring", dt, s_.stages, {s_.block_m, s_.block_k}, mm_.transpose_a, true, true});
    p_.shared.push_back({"b_ring", dt, s_.stages, {s_.block_k, s_.block_n}, mm_.transpose_b, true, true});
    add_staging_ring();
    p_.consumer_groups = s_.consumer_groups;
    p_.cluster_blocks = s_.cluster_blocks;
    p_.split_registers();
  }
  // The producer: each step's stage, once the consumers have released it, filled with A's tile
  // (its batch's rows from this tile's first, k from the step's) and B's (k rows, this tile's
  // columns). The tensor maps' bounds zero what lies past a batch's rows, K or N.
  void produce(Builder& in, int first) {
    const int a_row = in.sub(row0_, first_row_);
    in.for_loop(zero_, k_steps_, in.index(1), {}, [&](Builder& l, int kt, const std::vector<int>&) {
      const auto [stage, parity] = l.ring_stage(l.add(first, kt), s_.stages, true);
      const int kk = l.mul(split_k() ? l.add(k_first_, kt) : kt, l.index(s_.block_k));
      l.wait_empty(0, stage, parity);
      l.wait_empty(1, stage, parity);
      l.tma_load(operand_param_[0], a_batch_, a_row, kk, 0, stage);
      l.tma_load(operand_param_[1], b_batch_, kk, n0_, 1, stage, s_.cluster_blocks > 1);
      return std::vector<int>{};
    });
  }
  // The consumers: step 0's wgmma started, then each step waits for its stage, starts its wgmma,
  // waits for the one before it and releases that one's stage to the producer; the last step's
  // stage is released once its wgmma is waited for. (Steps count from `first`.)
  int tma_product(Builder& b, int first) {
    const int acc = b.tile_const(0, DType::F32, {s_.block_m, s_.block_n}, Frag::Acc);
    auto start = [&](Builder& in, int kt, int c) {
      const auto [stage, parity] = in.ring_stage(in.add(first, kt), s_.stages, false);
      in.wait_full(0, stage, parity);
      in.wait_full(1, stage, parity);
      return in.dot_async(0, 1, stage, c);
    };
    auto release = [&](Builder& in, int kt) {
      const int stage = in.ring_stage(in.add(first, kt), s_.stages, false).first;
      in.release(0, stage);
      in.release(1, stage);
    };
    const int one = b.index(1);
    const int started = start(b, zero_, acc);
    const int out = b.for_loop(one, k_steps_, one, {started}, [&](Builder& in, int kt, const std::vector<int>& c) {
      const int done = in.dot_wait({start(in, kt, c[0])}, 1)[0];
      release(in, in.sub(kt, in.index(1)));
      return std::vector<int>{done};
    })[0];
    const int product = b.dot_wait({out}, 0)[0];
    release(b, b.sub(k_steps_, one));
    return product;
  }

  // Operand tiles through rings of shared memory: stages − 1 k steps copied ahead (cp.async),
  // each step waiting for its own copies, then — past a barrier that also ends every thread's
  // reads of the previous step — refilling the stage the previous step read with the step
  // stages − 1 ahead, and multiplying fragments read from its own stage (ldmatrix). Copies past
  // K (the tail, and the steps ahead of the last) are zero-filled.
  int staged_product(Builder& b, int k0) {
    const int stages = s_.stages;
    const DType dt = g_.node(mm_.operands[0]).dtype;
    p_.shared.push_back({"a_ring", dt, stages, {s_.block_m, s_.block_k}, mm_.transpose_a});
    p_.shared.push_back({"b_ring", dt, stages, {s_.block_k, s_.block_n}, mm_.transpose_b});
    ring_bounds(b, k0);
    const int ring_stages = b.index(stages);
    for (int st = 0; st + 1 < stages; ++st) copy_step(b, b.index(st), b.index(st), k0);
    const int steps = k_steps_;
    const int acc = b.tile_const(0, DType::F32, {s_.block_m, s_.block_n}, Frag::Acc);
    const int out = b.for_loop(zero_, steps, b.index(1), {acc}, [&](Builder& in, int kt, const std::vector<int>& c) {
      in.wait_group(stages - 2);
      in.barrier();
      const int ahead = in.add(kt, in.index(stages - 1));
      copy_step(in, ahead, in.rem(ahead, ring_stages), k0);
      const int stage = in.rem(kt, ring_stages);
      int sum = c[0];
      for (int64_t kk = 0; kk < s_.block_k; kk += 16) {
        const int a = in.load_shared(0, stage, {zero_, in.index(kk)}, {s_.block_m, 16}, Frag::A);
        const int bt = in.load_shared(1, stage, {in.index(kk), zero_}, {16, s_.block_n}, Frag::B);
        sum = in.dot(a, bt, sum);
      }
      return std::vector<int>{sum};
    })[0];
    b.wait_group(0);  // nothing in flight when the block ends
    return out;
  }

  // Fragments loaded straight from global memory, 16 of K at a time; a step past K zeroed.
  int direct_product(Builder& b, int k0) {
    const Shape a_tile = {s_.block_m, s_.block_k}, b_tile = {s_.block_k, s_.block_n};
    const int a_rows0 = this->a_rows0(b);
    const int a_end = this->a_end(b);
    const int b_end = b.add(k0, b.index(s_.k));
    const int depth = b.index(s_.k);
    const int acc = b.tile_const(0, DType::F32, {s_.block_m, s_.block_n}, Frag::Acc);
    return b.for_loop(zero_, depth, b.index(s_.block_k), {acc}, [&](Builder& in, int kk, const std::vector<int>& c) {
      int a = in.load(operand_param_[0], {a_rows0, kk}, a_tile, {rows_masked(), k_masked()}, {a_end, -1}, Frag::A);
      int bt = in.load(operand_param_[1], {in.add(k0, kk), n0_}, b_tile, {k_masked(), cols_masked()}, {b_end, -1},
                       Frag::B);
      if (k_masked()) {
        const DType dt = g_.node(mm_.operands[0]).dtype;
        const int none = in.scalar(0, dt);
        a = in.compute(Op::Where, {in.in_bounds(kk, depth, 1, a_tile, Frag::A), a, none}, dt);
        bt = in.compute(Op::Where, {in.in_bounds(kk, depth, 0, b_tile, Frag::B), bt, none}, dt);
      }
      return std::vector<int>{in.dot(a, bt, c[0])};
    })[0];
  }

  // A rolled epilogue's chunks (TileSchedule::rolled_epilogue): the blocked layout spreads 128-byte
  // rows of the output over the consumers, 16 bytes a thread — 32 rows of 8 threads for 256.
  void chunk_layout() {
    if (!staging_dtype_ || s_.consumer_groups != 1 || split_k() || mm_.dtype != *staging_dtype_)
      throw CodegenError(
          fmt::format("kernel {}: a rolled epilogue needs one TMA-stored output of the product's "
                      "dtype, one consumer group and no split-K",
                      k_.name));
    const int per_thread = 16 / static_cast<int>(dtype_size(*staging_dtype_));
    p_.layout = {{1, per_thread}, {s_.block_threads() / 8, 8}, {1, 1}};
  }

  // Epilogue operand `id` in the product's `tile` at `offsets` (one wide along an axis its view
  // is one wide along).
  int load_operand(Builder& b, NodeId id, const std::vector<int>& offsets, const Shape& tile, Frag frag) {
    const Param& prm = p_.params[static_cast<size_t>(param_.at(id))];
    const Shape t = {prm.view[0] == 1 ? 1 : tile[0], prm.view[1] == 1 ? 1 : tile[1]};
    const std::vector<int> at = {prm.view[0] == 1 ? zero_ : offsets[0],
                                 prm.view[1] == 1 ? zero_ : offsets[1]};
    const std::vector<bool> masked = {prm.view[0] != 1 && (rows_masked() || s_.batch > 1),
                                      prm.view[1] != 1 && cols_masked()};
    return b.load(param_.at(id), at, t, masked, {row_end_, -1}, frag);
  }
  // The epilogue's operands (a residual, a saved pre-activation, a bias), loaded before the
  // tile's k loop where the schedule says so (TileSchedule::loads_epilogue_early): loaded after
  // it, each tile waited out a DRAM round trip before its epilogue could start (mlp_train's GELU'
  // epilogue: 48 loads a thread after the last wgmma's wait).
  void load_operands_early(Builder& b, std::map<NodeId, int>& value) {
    if (!s_.loads_epilogue_early()) return;
    for (NodeId id : k_.inputs) {
      if (id == mm_.operands[0] || id == mm_.operands[1]) continue;
      value[id] = load_operand(b, id, {row0_, n0_}, {s_.block_m, s_.block_n}, Frag::Acc);
    }
  }

  // The epilogue's nodes on operands loaded at `offsets` in tiles of `tile` (views one wide along
  // an axis keep it one wide) of layout `frag`, given the product's value in `value`.
  void epilogue_nodes(Builder& b, std::map<NodeId, int>& value, const std::vector<int>& offsets,
                      const Shape& tile, Frag frag) {
    for (NodeId id : k_.inputs)
      if (id != mm_.operands[0] && id != mm_.operands[1] && !value.count(id))
        value[id] = load_operand(b, id, offsets, tile, frag);
    for (NodeId id : k_.nodes) {
      if (id == mm_.id) continue;
      const Node& n = g_.node(id);
      std::vector<int> args;
      for (NodeId o : n.operands) {
        if (!value.count(o) && g_.node(o).op != Op::Constant)
          throw CodegenError(
              fmt::format("{}: the epilogue's %{} reads %{}, which the kernel neither loads nor "
                          "computes",
                          k_.name, id, o));
        args.push_back(value.count(o) ? value.at(o) : b.scalar(g_.node(o).value, g_.node(o).dtype));
      }
      value[id] = compute_node(b, g_, k_, id, args);
    }
  }
  // Output `id`'s value `v` spanning the product's `tile` (a view one wide along an axis is M or N
  // of 1, masked there).
  int spanning(Builder& b, NodeId id, int v, const Shape& tile, Frag frag) {
    const Type& t = p_.types[static_cast<size_t>(v)];
    if (t.is_tile() && t.shape == tile) return v;
    return b.compute(Op::Add, {v, b.tile_const(0, g_.node(id).dtype, tile, frag)}, g_.node(id).dtype);
  }

  // The epilogue's operands in the accumulator's layout, its nodes, and the outputs — or, rolled,
  // the product staged for the TMA store and the epilogue computed on it a chunk at a time.
  void epilogue(Builder& b, std::map<NodeId, int>& value) {
    if (s_.rolled_epilogue) {
      const NodeId out = k_.outputs.at(0);
      const Shape chunk = {p_.layout.extent(0), p_.layout.extent(1)};
      b.tma_store(param_.at(out), batch_, b.sub(row0_, first_row_), n0_, value.at(mm_.id), staging_, chunk,
                  [&](Builder& in, int staged, int row, int col) {
                    std::map<NodeId, int> v = {{mm_.id, staged}};
                    epilogue_nodes(in, v, {in.add(row0_, row), in.add(n0_, col)}, chunk, Frag::None);
                    return spanning(in, out, v.at(out), chunk, Frag::None);
                  });
      return;
    }
    const Shape tile = {s_.block_m, s_.block_n};
    epilogue_nodes(b, value, {row0_, n0_}, tile, Frag::Acc);
    for (NodeId id : k_.outputs) {
      const int v = spanning(b, id, value.at(id), tile, Frag::Acc);
      const int param = param_.at(id);
      if (p_.params[static_cast<size_t>(param)].tma_rows > 0)
        b.tma_store(param, batch_, b.sub(row0_, first_row_), n0_, v, staging_);
      else
        b.store(param, {row0_, n0_}, v, {rows_masked() || s_.batch > 1, cols_masked()}, {row_end_, -1});
    }
  }

  // Whether the output is stored by TMA (TileSchedule::tma_store, which the cost model sets only
  // for an epilogue's one output, 16 or 32 bits, of whole 16-byte rows: each panel is stored
  // past barriers and branches, which would keep any other output's tile live across them —
  // two outputs of GELU's backward spilled 52 bytes at 128×128).
  bool stored_by_tma(const Param& out) {
    if (!s_.tma_store) return false;
    const int64_t size = static_cast<int64_t>(dtype_size(out.dtype));
    if (k_.outputs.size() != 1 || out.col_major || !out.row_dims.empty() || !out.elem_dims.empty() || size < 2 ||
        (s_.n * size) % 16 != 0 || (s_.block_n * size) % 128 != 0 || out.view.at(0) != s_.batch * s_.m ||
        out.view.at(1) != s_.n)
      throw CodegenError(fmt::format("kernel {}: the schedule stores {} by TMA, which its view {} of {} does not allow",
                                     k_.name, out.name, shape_str(out.view), dtype_name(out.dtype)));
    staging_dtype_ = out.dtype;
    return true;
  }
  // The staging ring of the TMA stores (after the operands' rings): a 128-byte panel per slot,
  // two slots per consumer group where the tile's panels pair up (each slot then written again
  // two panels later), else one.
  void add_staging_ring() {
    if (!staging_dtype_) return;
    const int64_t size = static_cast<int64_t>(dtype_size(*staging_dtype_)), panels = s_.block_n * size / 128;
    staging_ = static_cast<int>(p_.shared.size());
    SharedRing r{"c_staging", *staging_dtype_, static_cast<int>((panels % 2 == 0 ? 2 : 1) * s_.consumer_groups),
                 {s_.block_m, 128 / size}};
    r.staging = true;
    p_.shared.push_back(r);
  }

  const Graph& g_;
  const Kernel& k_;
  const TileSchedule& s_;
  const Node& mm_;
  Program p_;
  std::map<NodeId, int> param_;
  int operand_param_[2] = {-1, -1};
  int n0_ = -1, row0_ = -1, row_end_ = -1, zero_ = -1, first_row_ = -1, batch_ = -1, a_batch_ = -1, b_batch_ = -1;
  std::optional<DType> staging_dtype_;  // the output stored by TMA (its param's tma_rows)
  int staging_ = -1;                    // and the ring their panels are staged in
  int a_first_ = -1, a_last_ = -1, b_last_ = -1, step_ = -1;  // ring_bounds
  // The block's k steps (split-K: its range's first, count and end in elements), the workspace.
  int k_first_ = -1, k_steps_ = -1, k_end_ = -1, workspace_ = -1;
};

}  // namespace

Program build_program(const Graph& g, const Kernel& k) {
  switch (k.kind) {
    case ScheduleKind::Pointwise:
      return pointwise(g, k);
    case ScheduleKind::RowReduce:
      return k.schedule.col_iters > 1 ? row_loop(g, k) : row_reduction(g, k);
    case ScheduleKind::ColumnReduce:
      return ColumnReduction(g, k).build();
    case ScheduleKind::MatMul:
      return MatMulProgram(g, k).build();
    case ScheduleKind::Attention:
      return attention_kernel_program(g, k);
    case ScheduleKind::AttentionBackward:
      return attention_backward_kernel_program(g, k);
    case ScheduleKind::Write:
      return write_at_program(g, k);
  }
  throw CodegenError(fmt::format("kernel {}: no Tile IR for its kind", k.name));
}

}  // namespace tilefuse::tir
