#include "compiler/tile/attention_backward.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>
#include <vector>

#include "compiler/fusion/attention_backward.h"
#include "compiler/support/error.h"
#include "compiler/tile/build_support.h"
#include "compiler/tile/ir_verify.h"

namespace tilefuse::tir {

namespace {

using Part = AttentionBackwardShape::Part;

class AttentionBackwardProgram {
  using Grad = AttentionBackwardShape::Grad;

 public:
  explicit AttentionBackwardProgram(const AttentionBackwardShape& s) : s_(s) {}

  Program build(const std::string& name) {
    check();
    const int warps = s_.block_rows / 16;
    p_.name = name;
    p_.layout = {{1, 1}, {1, 32 * warps}, {1, 1}};
    p_.mma = MmaConfig{warps, 1, 16, s_.block_cols};
    p_.grid = {(queries() ? s_.batch_heads : kv_heads()) * row_tiles()};
    p_.min_blocks_per_sm = s_.block_rows > 64 ? 1 : 2;  // (two warpgroups: up to 255 registers a thread)
    p_.wide_indices = s_.batch_heads * std::max(s_.n_q, s_.n_kv) * s_.d >= (int64_t{1} << 31);
    add_params();
    // The block's rows' two operands (one stage each), then the other side's two rings.
    for (const char* ring : {"a1_tile", "a2_tile"})
      p_.shared.push_back({ring, s_.dtype, 1, {s_.block_rows, s_.d}, false, s_.wgmma, tma()});
    for (const char* ring : {"b1_ring", "b2_ring"})
      p_.shared.push_back({ring, s_.dtype, 2, {s_.block_cols, s_.d}, false, s_.wgmma, tma()});
    // dS [queries, keys] for dQ's product, stored as its transpose dSᵀ is held: a key's queries in
    // each stored row (column-major), wgmma's A read M-major. Summed by TMA, dSᵀ [keys, queries]
    // as held, dQᵀ's B, in two stages (the two warpgroups' halves of one step's tile are read by
    // both, and the next step's stores go to the other stage), then dQᵀ's f32 panels staged for
    // TMA's reductions.
    ds_ring_ = static_cast<int>(p_.shared.size());
    if (tma_sums()) {
      p_.shared.push_back({"ds_tile", s_.dtype, 2, {s_.block_rows, s_.block_cols}, false, true});
      SharedRing staging{"dq_staging", DType::F32, 2, {s_.d, 32}};
      staging.staging = true;
      staging_ring_ = static_cast<int>(p_.shared.size());
      p_.shared.push_back(staging);
    } else if (all()) {
      p_.shared.push_back({"ds_tile", s_.dtype, 1, {s_.block_cols, s_.block_rows}, true, true});
    }
    if (tma()) p_.split_registers();
    Builder b(p_, p_.body);
    zero_ = b.index(0);
    place(b, b.program_id(0));
    const auto [lo, hi] = col_range(b);
    const Steps steps = steps_of(b, lo, hi);
    if (tma()) {
      b.specialize([&](Builder& in) { produce(in, steps); },
                   [&](Builder& in, int) {
                     for (int a = 0; a < 2; ++a) {
                       const auto [stage, parity] = in.ring_stage(zero_, 1, false);
                       in.wait_full(a, stage, parity);
                     }
                     if (queries()) load_row_statistics(in);
                     store_gradients(in, col_loop(in, steps));
                     if (all()) {  // (every reduction of the block complete before it counts in)
                       in.wait_stores();
                       convert_dq(in);
                     }
                   });
    } else {
      for (int a = 0; a < 2; ++a)
        b.copy_async(a_param_[a], {row0_, zero_}, a, zero_, {true, false}, {row_end_, -1});
      if (queries()) load_row_statistics(b);
      const std::vector<int> grads = col_loop(b, steps);
      b.wait_group(0);  // nothing in flight when the block ends
      store_gradients(b, grads);
      if (all()) convert_dq(b);
    }
    verify_program(p_);
    return std::move(p_);
  }

 private:
  bool queries() const { return s_.part == Part::Queries; }
  bool all() const { return s_.part == Part::All; }
  bool tma() const { return s_.tma; }
  // dQ summed by TMA's reductions from staged panels (FlashAttention-3's form): dQᵀ = Kᵀ·dSᵀ a
  // step, each warpgroup its 64 of d, into a column-major workspace (dQᵀ's rows are its stored
  // rows), the math warps going on while the copies add.
  bool tma_sums() const { return all() && tma(); }
  int64_t kv_heads() const { return s_.batch_heads / s_.group; }
  int64_t rows() const { return queries() ? s_.n_q : s_.n_kv; }
  int64_t cols() const { return queries() ? s_.n_kv : s_.n_q; }
  int64_t row_tiles() const { return (rows() + s_.block_rows - 1) / s_.block_rows; }
  int64_t col_tiles() const { return (cols() + s_.block_cols - 1) / s_.block_cols; }

  void check() const {
    if (s_.dtype != DType::BF16 && s_.dtype != DType::F16)
      throw Error(fmt::format("the attention backward on tensor cores takes bf16 or f16, not {}",
                              dtype_name(s_.dtype)));
    if (s_.d != 16 && s_.d != 32 && s_.d != 64 && s_.d != 128)
      throw Error(
          fmt::format("the attention backward's head dimension must be 16, 32, 64 or 128, not {}", s_.d));
    if (s_.block_rows % 16 != 0 || s_.block_rows < 16 || s_.block_rows > 128 || s_.block_cols % 16 != 0 ||
        s_.block_cols < 16 || s_.block_cols > 128)
      throw Error(fmt::format("attention backward tiles of {}×{}: multiples of 16 up to 128", s_.block_rows,
                              s_.block_cols));
    if (s_.wgmma && (s_.d < 64 || s_.block_rows % 64 != 0))
      throw Error(
          fmt::format("the attention backward on wgmma takes d 64 or 128 and warpgroups of 64 rows, not d {} "
                      "and {} rows",
                      s_.d, s_.block_rows));
    if (all() && !tma() && (!s_.wgmma || s_.block_rows != 64 || s_.block_cols != 64))
      throw Error(
          fmt::format("the attention backward adds dQ up across key blocks on wgmma with 64×64 tiles, not "
                      "{}{}×{}",
                      s_.wgmma ? "" : "mma.sync, ", s_.block_rows, s_.block_cols));
    // (dQᵀ's rows are d, one warpgroup's 64 each; TMA's rows of queries need 16-byte strides.)
    if (tma_sums() && (s_.block_rows != 128 || s_.block_cols != 64 || s_.d != 128 || s_.n_q % 4 != 0))
      throw Error(
          fmt::format("the attention backward sums dQ by TMA at d 128 with 128×64 tiles and queries a "
                      "multiple of 4, not d {}, {}×{} and {} queries",
                      s_.d, s_.block_rows, s_.block_cols, s_.n_q));
    if (s_.tma && !s_.wgmma) throw Error("the attention backward's TMA copies feed wgmma");
    if (s_.group < 1 || s_.batch_heads % s_.group != 0)
      throw Error(
          fmt::format("attention backward: {} query heads in groups of {}", s_.batch_heads, s_.group));
    if (s_.n_q < 1 || s_.n_kv < 1 || s_.batch_heads < 1)
      throw Error(fmt::format("attention backward over {} heads of {} queries and {} keys", s_.batch_heads,
                              s_.n_q, s_.n_kv));
  }

  // The inputs in their positions, then the gradients. The row statistics are [batch_heads·n_q,
  // 1] to the queries kernel (a value per row of its tiles) and [batch_heads, n_q] to the keys
  // kernel (a row of values across each query tile, its columns).
  void add_params() {
    const Shape q_rows = {s_.batch_heads * s_.n_q, s_.d}, kv_rows = {kv_heads() * s_.n_kv, s_.d};
    const Shape stats = queries() ? Shape{s_.batch_heads * s_.n_q, 1} : Shape{s_.batch_heads, s_.n_q};
    auto add = [&](const std::string& name, DType dtype, const Shape& view, bool output) {
      Param prm;
      prm.name = name;
      prm.dtype = dtype;
      prm.view = view;
      prm.output = output;
      p_.params.push_back(prm);
      return static_cast<int>(p_.params.size()) - 1;
    };
    std::array<int, 6> param{};
    for (int at = 0; at < 6; ++at)
      for (size_t i = 0; i < 6; ++i)
        if (s_.position[i] == at)
          param[i] = add(s_.names[i], i < 4 ? s_.dtype : DType::F32,
                         i == 0 || i == 3 ? q_rows
                         : i < 3          ? kv_rows
                                          : stats,
                         false);
    if (p_.params.size() != 6)
      throw Error("attention backward: the inputs' positions are not 0 to 5 once each");
    a_param_ = queries() ? std::vector<int>{param[0], param[3]} : std::vector<int>{param[1], param[2]};
    b_param_ = queries() ? std::vector<int>{param[1], param[2]} : std::vector<int>{param[0], param[3]};
    if (tma()) {  // (TMA boxes stop at a head's rows: what lies past them is zero-filled)
      for (int a : a_param_) p_.params[static_cast<size_t>(a)].tma_rows = rows();
      for (int b : b_param_) p_.params[static_cast<size_t>(b)].tma_rows = cols();
    }
    lse_param_ = param[4];
    delta_param_ = param[5];
    using Output = AttentionBackwardShape::Output;
    std::vector<Output> outputs = s_.outputs;
    if (outputs.empty())
      outputs = queries() ? std::vector<Output>{{Grad::Q, "dq"}}
                : all()   ? std::vector<Output>{{Grad::K, "dk"}, {Grad::V, "dv"}, {Grad::Q, "dq"}}
                          : std::vector<Output>{{Grad::K, "dk"}, {Grad::V, "dv"}};
    for (const Output& o : outputs) {
      if (!all() && (o.grad == Grad::Q) != queries())
        throw Error(fmt::format("attention backward: the {} kernel does not compute {}",
                                queries() ? "queries'" : "keys'", o.name));
      const int param = add(o.name, s_.dtype, o.grad == Grad::Q ? q_rows : kv_rows, true);
      if (all() && o.grad == Grad::Q)
        dq_param_ = param;  // (added up in the workspace, not carried by the loop)
      else
        grads_.push_back({o.grad, param});
    }
    if (all()) {
      if (dq_param_ < 0) throw Error("attention backward: the part All computes dq");
      Param ws;
      ws.name = "dq_sums";
      ws.view = q_rows;
      ws.workspace = true;
      if (tma_sums()) {  // dQᵀ: each query head's [d, n_q] sums, its queries along the stored rows
        ws.col_major = true;
        ws.group_rows = ws.tma_rows = s_.n_q;
      }
      workspace_ = static_cast<int>(p_.params.size());
      p_.params.push_back(ws);
    }
  }

  // Program id `pid`'s head (a query head, or the keys kernel's K/V head) and row tile: its first
  // row (of the head's), its rows in the parameters' views and their end.
  void place(Builder& b, int pid) {
    bh_ = b.div(pid, b.index(row_tiles()));
    first_row_ = b.mul(b.rem(pid, b.index(row_tiles())), b.index(s_.block_rows));
    row0_ = b.add(b.mul(bh_, b.index(rows())), first_row_);
    row_end_ = b.add(b.mul(bh_, b.index(rows())), b.index(rows()));
  }

  // The queries kernel's −L·log2 e and D, once: [rows, 1] each.
  void load_row_statistics(Builder& b) {
    const Shape shape = {s_.block_rows, 1};
    auto load = [&](int param) {
      return b.load(param, {row0_, zero_}, shape, {true, false}, {row_end_, -1}, Frag::Acc);
    };
    minus_lse2_ = minus_lse2(b, load(lse_param_));
    delta_ = load(delta_param_);
  }
  // The keys kernel's L and D of the query tile from q0 of query head `query_head`, as loaded:
  // [1, cols] each (none past the head's queries).
  std::vector<int> load_col_statistics(Builder& b, int query_head, int q0) {
    std::vector<int> raw;
    for (int param : {lse_param_, delta_param_})
      raw.push_back(b.load(param, {query_head, q0}, {1, s_.block_cols}, {false, true}, {}, Frag::Acc));
    return raw;
  }
  // From them −L·log2 e and D. Past the queries L and D are taken as 0: there Q's and dO's rows
  // are zeros, so P is 1 and dP − D 0, and both products add nothing.
  std::pair<int, int> col_statistics(Builder& b, const std::vector<int>& raw, int q0) {
    const int in = b.in_bounds(q0, b.index(s_.n_q), 1, {1, s_.block_cols}, Frag::Acc);
    auto inside = [&](int x, double outside) {
      return b.compute(Op::Where, {in, x, b.scalar(outside, DType::F32)}, DType::F32);
    };
    return {minus_lse2(b, inside(raw[0], 0)), inside(raw[1], 0)};
  }
  // The keys kernel on wgmma loads the next step's L and D while its gradients' products run
  // and carries them into that step (32 registers a thread at 64 columns): loaded at their use,
  // their latency from L2 was the kernel's largest stall (Nsight Compute, bench/NOTES.md).
  bool prefetched() const { return s_.wgmma && s_.part == Part::Keys; }
  // −L·log2 e, the exponent's shift in base 2, from L as given.
  int minus_lse2(Builder& b, int lse) const { return s_.lse_scaled ? lse : minus_log2e_times(b, lse); }

  // The column tiles the block's rows see: all of them, or under a causal mask from the first
  // query that sees the block's first key (keys kernel) or to the tile of the last key its last
  // query sees (queries kernel).
  std::pair<int, int> col_range(Builder& b) {
    const int tiles = b.index(col_tiles()), bc = b.index(s_.block_cols);
    if (!s_.causal_offset) return {zero_, tiles};
    const int64_t off = *s_.causal_offset;
    if (queries()) {  // keys [0, last query + off], none where that is negative
      const int last = b.add(first_row_, b.index(s_.block_rows));  // one past the block's last query
      const int seen = shifted(b, last, off);
      return {zero_, b.min(tiles, b.div(b.add(seen, b.index(s_.block_cols - 1)), bc))};
    }
    // queries from the block's first key − off on
    return {b.min(tiles, b.div(shifted(b, first_row_, -off), bc)), tiles};
  }
  // Index a + delta, or 0 where that is negative (indices are unsigned).
  static int shifted(Builder& b, int a, int64_t delta) {
    return delta >= 0 ? b.add(a, b.index(delta)) : b.sub(a, b.min(a, b.index(-delta)));
  }

  // The other side's head of the block's group's `head`-th (keys kernel: a query head of the
  // block's K/V head's group; queries kernel: the block's query head's K/V head).
  int col_head(Builder& b, int head) {
    if (queries()) return s_.group == 1 ? bh_ : b.div(bh_, b.index(s_.group));
    return s_.group == 1 ? bh_ : b.add(b.mul(bh_, b.index(s_.group)), head);
  }

  // Column tile j of the other side's head `head` (col_head): its B₁ and B₂ into stage `stage` of
  // their rings (past the head's rows zero-filled: their products add nothing).
  void copy_cols(Builder& b, int head, int j, int stage) {
    const int first_row = b.mul(head, b.index(cols()));
    const int first = b.add(first_row, b.mul(j, b.index(s_.block_cols)));
    const int end = b.add(first_row, b.index(cols()));
    for (int r = 0; r < 2; ++r)
      b.copy_async(b_param_[r], {first, zero_}, 2 + r, stage, {true, false}, {end, -1});
    b.commit_group();
  }

  // The keys kernel of a K/V head shared by `group` query heads: its steps go over each of them.
  bool grouped() const { return !queries() && s_.group > 1; }
  // Step t of the loop: the other side's head and its column tile. Grouped, each tile of [lo, hi)
  // for each query head in turn (tile-major: the tiles a causal mask reaches are the first steps,
  // one range); otherwise step t is tile t. (The step after the last, whose tile the loop's last
  // step copies unread by cp.async, lies past the columns: its copies are zeros.)
  std::pair<int, int> at_step(Builder& b, int t, int lo) {
    if (!grouped()) return {col_head(b, zero_), t};
    const int group = b.index(s_.group);
    return {col_head(b, b.rem(t, group)), b.add(lo, b.div(t, group))};
  }

  // The loop's column tiles [lo, hi) and its steps [from, to) (grouped, a step per tile and
  // query head, from 0; at_step).
  struct Steps {
    int lo, hi, from, to;
  };
  Steps steps_of(Builder& b, int lo, int hi) {
    if (!grouped()) return {lo, hi, lo, hi};
    return {lo, hi, zero_, b.mul(b.sub(hi, lo), b.index(s_.group))};
  }

  // Where the causal mask splits the steps: the keys kernel's tiles from it on and the queries
  // kernel's before it are seen whole by every row of the block; −1 where no mask is there. On
  // mma.sync, and in the kernel adding dQ up, the two loops' code spilled (4–36 bytes): one
  // masked loop there.
  int unmasked_bound(Builder& b, const Steps& st) {
    if (!s_.causal_offset || !s_.wgmma || all()) return -1;
    const int64_t off = *s_.causal_offset;
    const int bc = b.index(s_.block_cols);
    // The queries kernel's key tile j is seen whole when its last key j·bc + bc − 1 ≤ q0 + off;
    // the keys kernel's query tile j sees the whole block when j·bc ≥ k0 + rows − 1 − off.
    const int bound = queries()
                          ? b.div(shifted(b, b.add(first_row_, b.index(1)), off), bc)
                          : b.div(shifted(b, first_row_, s_.block_rows - 1 + s_.block_cols - 1 - off), bc);
    const int tile = b.min(st.hi, b.max(st.lo, bound));
    return grouped() ? b.mul(b.sub(tile, st.lo), b.index(s_.group)) : tile;
  }

  // The loop over the column tiles [lo, hi) (of each query head of the group), two stages: each
  // step waits for its tile — by TMA, its stages' full barriers; otherwise its copies (the first
  // with the resident operands'), then starts the next tile's — and runs on its own. Under a
  // causal mask it is two loops, the tiles the mask reaches and those it does not (their scores
  // skip it): the keys kernel's masked tiles first, the queries kernel's last.
  std::vector<int> col_loop(Builder& b, const Steps& st) {
    const auto [head0, j0] = at_step(b, st.from, st.lo);
    if (!tma()) copy_cols(b, head0, j0, b.rem(st.from, b.index(2)));
    std::vector<int> init;
    for (size_t g = 0; g < grads_.size(); ++g)
      init.push_back(b.tile_const(0, DType::F32, {s_.block_rows, s_.d}, Frag::Acc));
    if (prefetched()) {
      const std::vector<int> raw = load_col_statistics(b, head0, b.mul(j0, b.index(s_.block_cols)));
      init.insert(init.end(), raw.begin(), raw.end());
    }
    auto loop = [&](int from, int to, const std::vector<int>& carried, bool masked) {
      return b.for_loop(from, to, b.index(1), carried, [&](Builder& in, int t, const std::vector<int>& c) {
        int stage, next_head = -1, next_j = -1;  // (the next step's tile: its copies', its statistics')
        const int next = in.add(t, in.index(1));
        if (!tma() || prefetched()) std::tie(next_head, next_j) = at_step(in, next, st.lo);
        if (tma()) {
          int parity;
          std::tie(stage, parity) = in.ring_stage(in.sub(t, st.from), 2, false);
          for (int r = 2; r < 4; ++r) in.wait_full(r, stage, parity);
        } else {
          in.wait_group(0);
          if (s_.wgmma) in.fence_async();  // the copies, before wgmma reads them
          in.barrier();  // tile t in place, and every thread past its reads of the other stage
          copy_cols(in, next_head, next_j, in.rem(next, in.index(2)));
          stage = in.rem(t, in.index(2));
        }
        const auto [head, j] = at_step(in, t, st.lo);
        const std::vector<int> acc(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(grads_.size()));
        std::vector<int> raw(c.begin() + static_cast<std::ptrdiff_t>(grads_.size()), c.end());
        // (The last step's next tile lies past the columns: its statistics are loaded from the last
        // tile instead, unused, so that every tile's loads are in bounds where the column count is
        // a multiple of the tile's, their checks fold away and they share one address.)
        const auto prefetch = [&] {
          const int next_tile = in.min(next_j, in.index(col_tiles() - 1));
          return load_col_statistics(in, next_head, in.mul(next_tile, in.index(s_.block_cols)));
        };
        std::vector<int> out = step(in, head, j, stage, acc, raw, prefetch, masked);
        if (tma())  // (every product of the step waited for)
          for (int r = 2; r < 4; ++r) in.release(r, stage);
        return out;
      });
    };
    const int bound = unmasked_bound(b, st);
    std::vector<int> out = bound < 0   ? loop(st.from, st.to, init, s_.causal_offset.has_value())
                           : queries() ? loop(bound, st.to, loop(st.from, bound, init, false), true)
                                       : loop(bound, st.to, loop(st.from, bound, init, true), false);
    out.resize(grads_.size());
    return out;
  }

  // The producer (TMA): the block's A₁ and A₂ once, then each step's B₁ and B₂ into its stage
  // once the consumers have released it. The tensor maps' bounds zero what lies past a head's
  // rows.
  void produce(Builder& b, const Steps& st) {
    for (int a = 0; a < 2; ++a) {
      const auto [stage, parity] = b.ring_stage(zero_, 1, true);
      b.wait_empty(a, stage, parity);
      b.tma_load(a_param_[a], bh_, first_row_, zero_, a, stage);
    }
    b.for_loop(st.from, st.to, b.index(1), {}, [&](Builder& in, int t, const std::vector<int>&) {
      const auto [stage, parity] = in.ring_stage(in.sub(t, st.from), 2, true);
      const auto [head, j] = at_step(in, t, st.lo);
      const int c0 = in.mul(j, in.index(s_.block_cols));
      for (int r = 0; r < 2; ++r) {
        in.wait_empty(2 + r, stage, parity);
        in.tma_load(b_param_[r], head, c0, zero_, 2 + r, stage);
      }
      return std::vector<int>{};
    });
  }

  // A_a·B_bᵀ over the head dimension, B's stage read transposed, onto `start` ([rows, 1] or
  // [1, cols], broadcast; none: zeros). A start takes no registers of its own while the product is
  // in flight. (On wgmma only a product that starts with nothing else in flight may have one:
  // LLVM sinks the start's moves to the product, and ptxas waits for the product before it, C7517.)
  int scores(Builder& b, int a, int stage, int start = -1) {
    const Shape shape = {s_.block_rows, s_.block_cols};
    int acc = b.tile_const(start < 0 ? 0 : 1, DType::F32, shape, Frag::Acc);
    if (start >= 0) acc = b.compute(Op::Mul, {acc, start}, DType::F32);
    if (s_.wgmma) return b.dot_async(a, 2 + a, stage, acc, true);  // (in flight: waited for by the caller)
    for (int64_t kk = 0; kk < s_.d; kk += 16) {
      const int af = b.load_shared(a, zero_, {zero_, b.index(kk)}, {s_.block_rows, 16}, Frag::A);
      const int bf = b.load_shared(2 + a, stage, {b.index(kk), zero_}, {16, s_.block_cols}, Frag::B, true);
      acc = b.dot(af, bf, acc);
    }
    return acc;
  }
  // acc + x·B_r: x's columns (the stage's rows) as A fragments in the inputs' dtype.
  int accumulate(Builder& b, int acc, int x, int ring, int stage) {
    if (s_.wgmma) {  // (in flight: waited for by the caller)
      std::vector<int> xa;
      for (int64_t kk = 0; kk < s_.block_cols; kk += 16)
        xa.push_back(b.convert(x, static_cast<int>(kk / 16), s_.dtype));
      return b.dot_async(xa, ring, stage, acc);
    }
    for (int64_t kk = 0; kk < s_.block_cols; kk += 16) {
      const int xa = b.convert(x, static_cast<int>(kk / 16), s_.dtype);
      const int bf = b.load_shared(ring, stage, {b.index(kk), zero_}, {16, s_.d}, Frag::B);
      acc = b.dot(xa, bf, acc);
    }
    return acc;
  }

  // One column tile: the scores again, P, dP − D and dS, and the gradients' products.
  // Prefetched, `raw` holds the step's L and D, and `prefetch` loads the next step's: the step
  // returns them after the gradients.
  std::vector<int> step(Builder& b, int head, int j, int stage, const std::vector<int>& acc,
                        const std::vector<int>& raw, const std::function<std::vector<int>()>& prefetch,
                        bool masked) {
    const int c0 = b.mul(j, b.index(s_.block_cols));
    int minus_lse2 = minus_lse2_, delta = delta_;
    if (!queries())
      std::tie(minus_lse2, delta) =
          col_statistics(b, prefetched() ? raw : load_col_statistics(b, head, c0), c0);
    bool ds_needed = false;
    for (const Gradient& g : grads_) ds_needed |= g.grad != Grad::V;
    if (s_.wgmma) return paired_step(b, stage, c0, minus_lse2, delta, ds_needed, head, acc, prefetch, masked);
    const int p = probabilities(b, scores(b, 0, stage), minus_lse2, c0, masked);
    std::vector<int> out = acc;
    // dV's product first: dP's tile is not live yet beside the two accumulators (the other order
    // spilled ~500 bytes at d 128).
    for (size_t g = 0; g < grads_.size(); ++g)
      if (grads_[g].grad == Grad::V) out[g] = accumulate(b, acc[g], p, 3, stage);  // dV += Pᵀ·dO
    if (!ds_needed) return out;
    const int ds =
        b.compute(Op::Mul, {p, b.compute(Op::Sub, {scores(b, 1, stage), delta}, DType::F32)}, DType::F32);
    for (size_t g = 0; g < grads_.size(); ++g)
      if (grads_[g].grad != Grad::V) out[g] = accumulate(b, acc[g], ds, 2, stage);  // dQ += dS·K, dK += dSᵀ·Q
    return out;
  }

  // The step on wgmma. The keys kernel starts dP's product first, from −D (its result dP − D, D's
  // registers free while it runs), then the scores', waits for both, and starts dV's and dK's
  // products on P and dS, waited for at the step's end. The queries kernel, with no dV to start,
  // starts the scores' product first and computes P while dP's runs. (Each order in the other
  // kernel ran slower or spilled: the queries kernel 6% slower, the keys kernel at d 128 32 bytes.)
  std::vector<int> paired_step(Builder& b, int stage, int c0, int minus_lse2, int delta, bool ds_needed,
                               int head, const std::vector<int>& acc,
                               const std::function<std::vector<int>()>& prefetch, bool masked) {
    int p = -1, ds = -1;
    if (queries()) {
      const int s = scores(b, 0, stage), dp = scores(b, 1, stage);
      p = probabilities(b, b.dot_wait({s}, 1)[0], minus_lse2, c0, masked);
      ds = b.compute(Op::Mul, {p, b.compute(Op::Sub, {b.dot_wait({dp}, 0)[0], delta}, DType::F32)},
                     DType::F32);
    } else {
      std::vector<int> flight;
      if (ds_needed)
        flight.push_back(
            scores(b, 1, stage, b.compute(Op::Mul, {delta, b.scalar(-1, DType::F32)}, DType::F32)));
      flight.push_back(scores(b, 0, stage));
      const std::vector<int> waited = b.dot_wait(flight, 0);
      p = probabilities(b, waited.back(), minus_lse2, c0, masked);
      if (ds_needed) ds = b.compute(Op::Mul, {p, waited[0]}, DType::F32);
    }
    std::vector<int> out = acc;
    for (size_t g = 0; g < grads_.size(); ++g)
      if (grads_[g].grad == Grad::V) out[g] = accumulate(b, acc[g], p, 3, stage);  // dV += Pᵀ·dO
    if (ds_needed) {
      if (all()) {  // dSᵀ to shared memory first: its f32 tile then dies before dK's product starts
        b.store_shared(ds_ring_, tma_sums() ? stage : zero_, ds, !tma_sums());
        b.fence_async();
      }
      for (size_t g = 0; g < grads_.size(); ++g)
        if (grads_[g].grad != Grad::V) out[g] = accumulate(b, acc[g], ds, 2, stage);  // dQ += dS·K, dK += dSᵀ·Q
    }
    const std::vector<int> next = prefetched() ? prefetch() : std::vector<int>{};
    if (tma_sums()) {
      out = sum_dq_by_tma(b, head, c0, stage, out);
    } else {
      if (all()) add_dq(b, head, c0);  // (its products issued behind the gradients')
      out = b.dot_wait(out, 0);
    }
    out.insert(out.end(), next.begin(), next.end());
    return out;
  }

  // dQᵀ = Kᵀ·dSᵀ of the step's query tile (from c0 of query head `head`), its product issued
  // behind the gradients' once both warpgroups have stored their keys' dSᵀ (the consumers'
  // barrier), then added into the sums by TMA through the staging panels, each warpgroup its own
  // rows behind barriers of its own (the consumers' barrier is the step's only one that both
  // warpgroups wait at; with both panels in one round, two of the warpgroup's). The next step stores
  // into the other stage; the step after stores into this one again only past the next step's
  // barrier, which each warpgroup reaches after waiting for this product. Returns the gradients,
  // waited for.
  std::vector<int> sum_dq_by_tma(Builder& b, int head, int c0, int stage, std::vector<int> grads) {
    b.barrier();
    const int zero = b.tile_const(0, DType::F32, {s_.d, s_.block_cols}, Frag::Acc);
    grads.push_back(b.dot_async(0, ds_ring_, stage, zero, false, 0, true));
    grads = b.dot_wait(grads, 0);
    const int dq = grads.back();
    grads.pop_back();
    b.tma_store(workspace_, head, zero_, c0, dq, staging_ring_, true, true);
    return grads;
  }

  // P = e^(S·scale − L) = 2^(S·(scale·log2 e) − L·log2 e); on a masked tile 0 where the causal
  // mask hides the key.
  int probabilities(Builder& b, int s, int minus_lse2, int c0, bool masked) {
    const int p = exp2_fma(b, s, b.scalar(s_.scale * M_LOG2E, DType::F32), minus_lse2);
    if (!masked) return p;
    return b.compute(Op::Where, {visible(b, c0), p, b.scalar(0, DType::F32)}, DType::F32);
  }

  // dS·K of the step's query tile (from c0 of query head `head`) added into dQ's sums: per 64 of d
  // a product of dS read from the shared tile dSᵀ was stored to (A M-major) and K's resident
  // stage, waited for and added by red.global.add. The block's barrier here makes every thread's
  // stores whole before wgmma reads them; the loop's barrier at the next step's top keeps the next
  // stores from overwriting the tile while it is read (each product is waited for within its step).
  void add_dq(Builder& b, int head, int c0) {
    b.barrier();
    const int first = b.mul(head, b.index(s_.n_q));
    const int row = b.add(first, c0), end = b.add(first, b.index(s_.n_q));
    for (int64_t col = 0; col < s_.d; col += 64) {
      const int zero = b.tile_const(0, DType::F32, {s_.block_cols, 64}, Frag::Acc);
      const int part = b.dot_wait({b.dot_async(ds_ring_, 0, zero_, zero, false, col)}, 0)[0];
      b.store_add(workspace_, {row, b.index(col)}, part, {true, false}, {end, -1});
    }
  }

  // In the last of a K/V head's key blocks to finish: its query heads' dQ from the sums, ·scale in
  // the inputs' dtype, and the sums and the head's counter zeroed for the next launch.
  void convert_dq(Builder& b) {
    const int64_t rows = s_.group * s_.n_q, tile = s_.block_rows;  // (a row of 16 a warp)
    b.when(b.last_arrival(workspace_, bh_, b.index(row_tiles())), [&](Builder& in) {
      const int first = in.mul(bh_, in.index(rows)), end = in.add(first, in.index(rows));
      const Shape shape = {tile, s_.d};
      in.for_loop(
          zero_, in.index((rows + tile - 1) / tile), in.index(1), {},
          [&](Builder& l, int t, const std::vector<int>&) {
            const int r = l.add(first, l.mul(t, l.index(tile)));
            const int sums = l.load(workspace_, {r, zero_}, shape, {true, false}, {end, -1}, Frag::Acc);
            const int dq = l.compute(Op::Mul, {sums, l.scalar(s_.scale, DType::F32)}, DType::F32);
            l.store(dq_param_, {r, zero_}, l.compute(Op::Cast, {dq}, s_.dtype), {true, false}, {end, -1});
            l.store(workspace_, {r, zero_}, l.tile_const(0, DType::F32, shape, Frag::Acc), {true, false},
                    {end, -1});
            return std::vector<int>{};
          });
      in.reset_count(workspace_, bh_);
    });
  }
  // Where each query of the tile sees its key: key ≤ query + offset.
  int visible(Builder& b, int c0) {
    const Shape shape = {s_.block_rows, s_.block_cols};
    const int row = b.iota(first_row_, 0, shape, Frag::Acc), col = b.iota(c0, 1, shape, Frag::Acc);
    const int query = queries() ? row : col, key = queries() ? col : row;
    const int reach =
        b.compute(Op::Add, {query, b.scalar(static_cast<double>(*s_.causal_offset), DType::F32)}, DType::F32);
    return b.compute(Op::Le, {key, reach}, DType::Bool);
  }

  // dK·scale and dV, or dQ·scale, in the inputs' dtype.
  void store_gradients(Builder& b, const std::vector<int>& acc) {
    for (size_t g = 0; g < grads_.size(); ++g) {
      int y = acc[g];
      if (grads_[g].grad != Grad::V) y = b.compute(Op::Mul, {y, b.scalar(s_.scale, DType::F32)}, DType::F32);
      b.store(grads_[g].param, {row0_, zero_}, b.compute(Op::Cast, {y}, s_.dtype), {true, false},
              {row_end_, -1});
    }
  }

  struct Gradient {
    Grad grad;
    int param;
  };
  const AttentionBackwardShape s_;
  Program p_;
  std::vector<int> a_param_, b_param_;
  std::vector<Gradient> grads_;
  int lse_param_ = -1, delta_param_ = -1, dq_param_ = -1, workspace_ = -1, ds_ring_ = -1, staging_ring_ = -1;
  int zero_ = -1, bh_ = -1, first_row_ = -1, row0_ = -1, row_end_ = -1, minus_lse2_ = -1, delta_ = -1;
};

}  // namespace

Program attention_backward_program(const AttentionBackwardShape& s, const std::string& name) {
  return AttentionBackwardProgram(s).build(name);
}

Program attention_backward_kernel_program(const Graph& g, const Kernel& k) {
  bool keys = false;
  const BackwardChain c = backward_chain_of(g, k, &keys);
  AttentionBackwardShape s;
  s.batch_heads = c.batch;
  s.group = c.group;
  s.n_q = c.n_q;
  s.n_kv = c.n_kv;
  s.d = c.d;
  s.dtype = g.node(c.q).dtype;
  s.scale = c.scale;
  s.part = k.schedule.attention_backward == 3 ? AttentionBackwardShape::Part::All
           : keys                             ? AttentionBackwardShape::Part::Keys
                                              : AttentionBackwardShape::Part::Queries;
  s.block_rows = k.schedule.block_m;
  s.block_cols = k.schedule.block_n;
  s.wgmma = k.schedule.wgmma;
  s.tma = k.schedule.tma;
  s.causal_offset = c.causal_offset;
  s.lse_scaled = c.lse_scaled;
  const NodeId inputs[6] = {c.q, c.k, c.v, c.d_o, c.lse, c.delta};
  for (size_t i = 0; i < 6; ++i) {
    const auto at = std::find(k.inputs.begin(), k.inputs.end(), inputs[i]);
    if (at == k.inputs.end())
      throw CodegenError(fmt::format("kernel {}: %{} is not among its inputs", k.name, inputs[i]));
    s.position[i] = static_cast<int>(at - k.inputs.begin());
    s.names[i] = tensor_name(g.node(inputs[i]));
  }
  for (NodeId o : k.outputs) {
    std::string name = fmt::format("%{}", o);
    for (const GraphOutput& out : g.outputs())
      if (out.node == o) name = out.name;
    using Grad = AttentionBackwardShape::Grad;
    s.outputs.push_back({o == c.dq ? Grad::Q : o == c.dk ? Grad::K : Grad::V, name});
  }
  return attention_backward_program(s, k.name);
}

}  // namespace tilefuse::tir
