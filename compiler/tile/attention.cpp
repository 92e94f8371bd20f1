#include "compiler/tile/attention.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "compiler/fusion/contraction_chain.h"
#include "compiler/support/error.h"
#include "compiler/tile/build_support.h"
#include "compiler/tile/ir_verify.h"

namespace tilefuse::tir {

namespace {

// Ping-pong (TMA): the key loop's step t of `steps`, at which the two warpgroups take turns
// issuing their products; step −1: no turns.
struct Turn {
  int step = -1, steps = -1;
};
// How a key step's tile lies: whether a mask may reach it, and whether it is in the block's main
// loop — its unmasked tiles, or every tile where none is known to be unmasked — rather than at
// an edge (a window's lower edge, the causal diagonal, the keys' partial last tile).
struct TileKind {
  bool masked, main;
};

class AttentionProgram {
 public:
  explicit AttentionProgram(const AttentionShape& s) : s_(s) {}

  Program build(const std::string& name) {
    check();
    const int warps = s_.block_m / 16;
    p_.name = name;
    p_.layout = {{1, 1}, {1, 32 * warps}, {1, 1}};
    p_.mma = MmaConfig{warps, 1, 16, s_.block_n};
    p_.grid = {persistent() ? s_.persistent_blocks : query_tiles() * s_.kv_splits};
    // Two blocks per SM (one of two warpgroups): left to itself ptxas caps a d 64 kernel at 168
    // registers (three blocks) and spills where f reads tensors (ALiBi: 16 bytes). At d 128 the
    // code is the same either way (242 registers).
    p_.min_blocks_per_sm = attention_blocks_per_sm(s_.block_m);
    p_.wide_indices = s_.batch_heads * std::max(s_.n_q, s_.n_kv) * s_.d >= (int64_t{1} << 31) ||
                      s_.kv_splits * s_.batch_heads * s_.n_q * (dp() + 2) >= (int64_t{1} << 31);
    add_params();
    p_.shared.push_back({"k_ring", s_.dtype, stages(), {dp(), s_.block_n}, true, s_.wgmma, s_.tma});
    p_.shared.push_back({"v_ring", s_.dtype, stages(), {s_.block_n, dp()}, false, s_.wgmma, s_.tma});
    if (q_shared() || q_in_ring())
      p_.shared.push_back({"q_tile", s_.dtype, 1, {s_.block_m, dp()}, false, q_in_ring(), q_by_tma()});
    if (s_.tma) p_.split_registers();
    Builder b(p_, p_.body);
    zero_ = b.index(0);
    const int pid = b.program_id(0);
    if (s_.tma && persistent()) {
      // The producer and the consumers each walk the block's query tiles, counting the key steps
      // before each tile's so that their ring stages follow on: the producer fills the next
      // tile's first stages while the consumers finish this one's.
      b.specialize(
          [&](Builder& in) {
            over_query_tiles(in, pid, [&](Builder& t, int lo, int hi, int first, int count) {
              produce_keys(t, lo, hi, first, count);
            });
          },
          [&](Builder& in, int) {
            over_query_tiles(in, pid, [&](Builder& t, int lo, int hi, int first, int count) {
              consume_keys(t, lo, hi, first, count);
            });
          });
    } else if (s_.tma) {  // (the key range, a length read at run time, before the roles split)
      place_block(b, pid);
      const auto [lo, hi] = key_range(b);
      b.specialize([&](Builder& in) { produce_keys(in, lo, hi, zero_, zero_); },
                   [&](Builder& in, int) { consume_keys(in, lo, hi, zero_, zero_); });
    } else {
      place_block(b, pid);
      const auto [lo, hi] = key_range(b);
      load_q(b);
      load_key_constant_tensors(b);
      const std::vector<int> carried = key_loop(b, lo, hi);
      b.wait_group(0);  // nothing in flight when the block ends
      finish(b, tile_, carried);
    }
    verify_program(p_);
    return std::move(p_);
  }

 private:
  // The block's query tile `tile` (a head's, or — heads packed — a K/V head's): its head, first
  // query and rows. Causal tiles differ in work: on a persistent grid they come in
  // causal_tile_place's order; otherwise each head's longest (last queries) first, so that the
  // last wave is of short ones.
  void place(Builder& b, int tile) {
    tile_ = tile;
    int mt;
    if (persistent() && s_.causal_offset) {
      std::tie(bh_, mt) = causal_place(b, tile);
    } else {
      bh_ = b.div(tile, b.index(m_blocks()));
      mt = b.rem(tile, b.index(m_blocks()));
      if (s_.causal_offset) mt = b.sub(b.index(m_blocks() - 1), mt);
    }
    kv_bh_ = s_.group > 1 ? bh_ : kv_head(b);
    const int first_row = b.mul(bh_, b.index(head_rows()));
    const int block_row0 = b.mul(mt, b.index(s_.block_m));
    query0_ = s_.group > 1 ? zero_ : block_row0;  // packed heads: every row is its head's query 0
    row0_ = b.add(first_row, block_row0);
    row_end_ = b.add(first_row, b.index(head_rows()));
  }
  // causal_tile_place's order (compiler/fusion/contraction_chain.h) in index arithmetic: tile →
  // (head, query tile). Past the pairs (t ≥ 2·pairs) the middle tiles of an odd count, a head
  // each; 0/1 flags select by product.
  std::pair<int, int> causal_place(Builder& b, int t) {
    if (s_.window_offset) {  // groups of 8 heads, longest first
      const int64_t g = std::min<int64_t>(8, block_heads());
      const int per_group = b.index(g * m_blocks());
      const int group = b.div(t, per_group), within = b.rem(t, per_group);
      const int heads = b.min(b.index(g), b.sub(b.index(block_heads()), b.mul(group, b.index(g))));
      return {b.add(b.mul(group, b.index(g)), b.rem(within, heads)),
              b.sub(b.index(m_blocks() - 1), b.div(within, heads))};
    }
    const int64_t m = m_blocks(), half = m / 2, pairs = block_heads() * half, blocks = s_.persistent_blocks;
    auto idx = [&](int64_t v) { return b.index(v); };
    if (pairs == 0) return {t, idx(half)};  // (one query tile a head)
    const int tp = b.min(t, idx(2 * pairs - 1));
    const int wave = b.div(tp, idx(2 * blocks)), r = b.sub(tp, b.mul(wave, idx(2 * blocks)));
    const int first = b.mul(wave, idx(blocks)), n = b.min(idx(blocks), b.sub(idx(pairs), first));
    const int is_short = b.min(idx(1), b.div(r, n));
    const int pair = b.add(first, b.sub(r, b.mul(is_short, n)));
    const int j = b.rem(pair, idx(half)), head = b.div(pair, idx(half));
    // long: m − 1 − j; short: j
    const int tile = b.add(j, b.mul(b.sub(idx(1), is_short), b.sub(idx(m - 1), b.mul(idx(2), j))));
    if (m % 2 == 0) return {head, tile};
    const int single = b.min(idx(1), b.div(t, idx(2 * pairs)));  // 1 past the pairs
    const int paired = b.sub(idx(1), single);
    const int single_head = b.sub(b.max(t, idx(2 * pairs)), idx(2 * pairs));
    return {b.add(b.mul(paired, head), b.mul(single, single_head)),
            b.add(b.mul(paired, tile), b.mul(single, idx(half)))};
  }
  // A block per query tile (and key split): program id `pid`'s.
  void place_block(Builder& b, int pid) {
    place(b, s_.kv_splits > 1 ? b.div(pid, b.index(s_.kv_splits)) : pid);
    split_ = s_.kv_splits > 1 ? b.rem(pid, b.index(s_.kv_splits)) : zero_;
  }
  // A persistent block's query tiles pid, pid + persistent_blocks, …: `body` on each, placed,
  // given its key tiles [lo, hi), the count of key steps on the block's rings before them and
  // the count of the block's query tiles before it (Q's ring's uses).
  using QueryTileBody = std::function<void(Builder&, int lo, int hi, int first_step, int tiles_before)>;
  void over_query_tiles(Builder& b, int pid, const QueryTileBody& body) {
    split_ = zero_;
    const int every = b.index(s_.persistent_blocks);
    b.for_loop(pid, b.index(query_tiles()), every, {zero_}, [&](Builder& in, int tile, const std::vector<int>& c) {
      place(in, tile);
      const auto [lo, hi] = key_range(in);
      body(in, lo, hi, c[0], in.div(in.sub(tile, pid), every));
      return std::vector<int>{in.add(c[0], in.sub(hi, lo))};
    });
  }
  bool persistent() const { return s_.persistent_blocks > 0; }
  // The consumers' part of a TMA block's query tile: Q in its ring, the key loop, the outputs.
  void consume_keys(Builder& b, int lo, int hi, int first_step, int tiles_before) {
    if (q_by_tma()) {
      const auto [stage, parity] = b.ring_stage(tiles_before, 1, false);
      b.wait_full(kQRing, stage, parity);
    } else {
      load_q(b);
    }
    load_key_constant_tensors(b);
    finish(b, tile_, s_.overlap ? tma_overlapped_loop(b, lo, hi, first_step, loop_init(b))
                                : tma_key_loop(b, lo, hi, first_step, loop_init(b)));
  }
  // Q's ring handed back to the producer once the tile's last S = Q·Kᵀ is done.
  void release_q(Builder& b) {
    if (q_by_tma()) b.release(kQRing, zero_);
  }
  int64_t query_tiles() const { return m_blocks() * block_heads(); }

  void check() const {
    if (s_.dtype != DType::BF16 && s_.dtype != DType::F16)
      throw Error(fmt::format("attention on tensor cores takes bf16 or f16, not {}", dtype_name(s_.dtype)));
    if (s_.d < 16 || s_.d > 256 || s_.d % 16 != 0)
      throw Error(fmt::format("attention's head dimension must be a multiple of 16 from 16 to 256, not {}", s_.d));
    if (s_.block_m % 16 != 0 || s_.block_m < 16 || s_.block_m > 128 || s_.block_n % 16 != 0 || s_.block_n < 16 ||
        s_.block_n > 128)
      throw Error(fmt::format("attention tiles of {}×{}: rows and keys per tile are multiples of 16 up to 128",
                              s_.block_m, s_.block_n));
    if (s_.group < 1 || s_.batch_heads % s_.group != 0 || (s_.group > 1 && (s_.n_q != 1 || trailing_broadcast_group(s_.lead, s_.kv_lead) != s_.group)))
      throw Error(fmt::format("attention: {} query heads of {} queries cannot be packed {} to a block over {} K/V heads",
                              s_.batch_heads, s_.n_q, s_.group, kv_heads()));
    if (s_.kv_splits < 1 || s_.kv_splits > steps())
      throw Error(fmt::format("attention: {} key splits of {} key tiles", s_.kv_splits, steps()));
    if (s_.overlap && !s_.wgmma) throw Error("attention: the overlapped loop is wgmma's");
    if (s_.tma && !s_.wgmma) throw Error("attention: TMA key tiles need wgmma");
    if (s_.overlap && dp() > 128 && !s_.tma)
      throw Error(fmt::format(
          "attention: the overlapped loop's three stages by cp.async hold d ≤ 128, not {}", s_.d));
    if (s_.pin_pv_wait && !(s_.overlap && s_.tma)) throw Error("attention: P·V's wait is pinned in the overlapped TMA loop");
    if (s_.persistent_blocks < 0 || (persistent() && (!s_.tma || s_.kv_splits > 1 || s_.key_limit)))
      throw Error(fmt::format("attention: a persistent grid ({} blocks) is TMA's without split keys or a key limit",
                              s_.persistent_blocks));
    if (s_.warpgroup_turns && (!s_.tma || s_.block_m != 128))
      throw Error(fmt::format("attention: turns are between the two warpgroups of a TMA block of 128 rows, not {}{}",
                              s_.block_m, s_.tma ? "" : " without TMA"));
    if (s_.n_q < 1 || s_.n_kv < 1 || s_.batch_heads < 1)
      throw Error(fmt::format("attention over {} heads of {} queries and {} keys", s_.batch_heads, s_.n_q, s_.n_kv));
    int64_t heads = 1;
    const std::vector<int64_t>& kv = s_.kv_lead.empty() ? s_.lead : s_.kv_lead;  // empty: q's heads
    bool broadcast = s_.lead.size() == kv.size();
    for (size_t d = 0; broadcast && d < s_.lead.size(); ++d) {
      heads *= s_.lead[d];
      broadcast = kv[d] == s_.lead[d] || kv[d] == 1;
    }
    if (!broadcast || (!s_.lead.empty() && heads != s_.batch_heads))
      throw Error(fmt::format("attention's K/V heads [{}] do not broadcast to its {} query heads [{}]",
                              fmt::join(s_.kv_lead, ", "), s_.batch_heads, fmt::join(s_.lead, ", ")));
  }
  // A block's head: a query head, or (packed) a K/V head and its group of query heads' rows.
  int64_t head_rows() const { return s_.group * s_.n_q; }
  int64_t block_heads() const { return s_.batch_heads / s_.group; }
  int64_t m_blocks() const { return (head_rows() + s_.block_m - 1) / s_.block_m; }
  // Past d 128 Q's fragments would take d/2 registers of each thread beside the output's d: Q
  // stays in shared memory and each step reads its fragments (ldmatrix), as FA2 does at d 256.
  // (On TMA, Q in its ring is read by wgmma there.)
  bool q_shared() const { return s_.d > 128 && !s_.tma; }
  // On TMA blocks Q waits in a ring of its own, laid out for wgmma, which reads it there as S's A
  // operand (FlashAttention-3's): the d/2 registers its fragments would take go to S, P and O,
  // which at 128 keys a step with the softmax overlapped do not fit beside them.
  bool q_in_ring() const { return s_.tma; }
  // Copied there by the producer's TMA (a box of the head's rows, zero past them), once the
  // consumers have released the previous tile's — on a persistent grid while they finish that
  // tile — unless the block's rows are several heads' (packed).
  bool q_by_tma() const { return s_.tma && s_.group == 1; }
  static constexpr int kQRing = 2;
  // Three stages overlapped or on TMA, but two past d 128 (64 KiB each at d 256, beside Q's 64).
  int stages() const { return (s_.overlap || s_.tma) && dp() <= 128 ? 3 : 2; }
  // An A fragment of zeros: Q past the head dimension where it is padded (d 96 in 128).
  int zero_fragment(Builder& b) { return b.tile_const(0, s_.dtype, {s_.block_m, 16}, Frag::A); }
  // A score tile of zeros: the overlapped loop's P before its first step.
  int zero_scores(Builder& b) { return b.tile_const(0, DType::F32, {s_.block_m, s_.block_n}, Frag::Acc); }
  // A head dimension that is not a power of two (96) is padded to one in the rings and the output
  // accumulator, the padding zero-filled by the copies (so it adds nothing to either product) and
  // never stored.
  int64_t dp() const { return padded_head_dim(s_.d); }
  bool padded() const { return dp() != s_.d; }
  int64_t kv_heads() const {
    int64_t n = 1;
    for (int64_t e : s_.kv_lead) n *= e;
    return s_.kv_lead.empty() ? s_.batch_heads : n;
  }
  // The K/V head of query head bh_ (the same unless K and V are broadcast over query heads).
  int kv_head(Builder& b) const { return s_.kv_lead.empty() ? bh_ : b.broadcast_index(bh_, s_.lead, s_.kv_lead); }
  int64_t steps() const { return (s_.n_kv + s_.block_n - 1) / s_.block_n; }

  // q and o as [batch_heads·n_q, d] rows; v as [batch_heads·n_kv, d]; k read as Kᵀ, a
  // column-major [batch_heads·d, n_kv] (each head's d rows one group). Inputs in the order
  // s_.position gives, then o.
  void add_params() {
    int* role_param[3] = {&q_param_, &k_param_, &v_param_};
    const Shape views[3] = {{s_.batch_heads * s_.n_q, s_.d}, {kv_heads() * s_.d, s_.n_kv}, {kv_heads() * s_.n_kv, s_.d}};
    tensor_param_.assign(s_.tensors.size(), -1);
    key_constant_tensors_.assign(s_.tensors.size(), -1);
    for (int at = 0; at < 3 + static_cast<int>(s_.tensors.size()); ++at) {
      for (int role = 0; role < 3; ++role) {
        if (s_.position[static_cast<size_t>(role)] != at) continue;
        Param prm;
        prm.name = s_.names[static_cast<size_t>(role)];
        prm.dtype = s_.dtype;
        prm.view = views[role];
        prm.col_major = role == 1;
        prm.group_rows = role == 1 ? s_.d : 0;
        if (s_.tma && role > 0) prm.tma_rows = role == 1 ? s_.d : s_.n_kv;  // a K/V head's stored rows
        if (role == 0 && q_by_tma()) prm.tma_rows = s_.n_q;                 // a query head's
        *role_param[role] = static_cast<int>(p_.params.size());
        p_.params.push_back(prm);
      }
      for (size_t t = 0; t < s_.tensors.size(); ++t)
        if (s_.tensors[t].position == at) {
          tensor_param_[t] = static_cast<int>(p_.params.size());
          p_.params.push_back(tensor_param(s_.tensors[t]));
        }
    }
    for (int id : tensor_param_)
      if (id < 0) throw Error("attention: a tensor of the scores' function has no input position");
    row_param_.assign(s_.row_outputs.size(), -1);
    for (int at = 0; at <= static_cast<int>(s_.row_outputs.size()); ++at) {
      if (at == s_.o_position) {
        Param o;
        o.name = s_.names[3];
        o.dtype = s_.out_dtype.value_or(s_.dtype);
        o.view = {s_.batch_heads * s_.n_q, s_.d};
        o.output = true;
        o_param_ = static_cast<int>(p_.params.size());
        p_.params.push_back(o);
      }
      for (size_t r = 0; r < s_.row_outputs.size(); ++r)
        if (s_.row_outputs[r].position == at) {
          Param prm;
          prm.name = s_.row_outputs[r].name;
          prm.dtype = s_.row_outputs[r].dtype;
          prm.view = {s_.batch_heads * s_.n_q, 1};
          prm.output = true;
          row_param_[r] = static_cast<int>(p_.params.size());
          p_.params.push_back(prm);
        }
    }
    if (o_param_ < 0 || std::count(row_param_.begin(), row_param_.end(), -1) > 0)
      throw Error("attention: the outputs' positions are not 0, 1, … once each");
    if (s_.kv_splits > 1) {  // each split's rows: O's padded width, then m and l
      Param ws;
      ws.name = "workspace";
      ws.view = {s_.kv_splits * s_.batch_heads * s_.n_q, dp() + 2};
      ws.workspace = true;
      workspace_ = static_cast<int>(p_.params.size());
      p_.params.push_back(ws);
    }
  }

  // A tensor of the scores' function over the score rows (head and query: the rows of q, split
  // into their axes where it is broadcast along some) and the keys.
  Param tensor_param(const AttentionShape::Tensor& t) const {
    const size_t lead = s_.lead.empty() ? 1 : s_.lead.size();
    if (t.shape.size() != lead + 2)
      throw Error(fmt::format("attention: tensor {} of shape [{}] is not aligned to the scores", t.name,
                              fmt::join(t.shape, ", ")));
    Param prm;
    prm.name = t.name;
    prm.dtype = t.dtype;
    prm.row_dims = s_.lead.empty() ? Shape{s_.batch_heads} : Shape(s_.lead.begin(), s_.lead.end());
    prm.row_dims.push_back(s_.n_q);
    prm.row_view.assign(t.shape.begin(), t.shape.end() - 1);
    for (size_t d = 0; d < prm.row_dims.size(); ++d)
      if (prm.row_view[d] != 1 && prm.row_view[d] != prm.row_dims[d])
        throw Error(fmt::format("attention: tensor {} of shape [{}] does not broadcast into the scores", t.name,
                                fmt::join(t.shape, ", ")));
    if (t.shape.back() != 1 && t.shape.back() != s_.n_kv)
      throw Error(fmt::format("attention: tensor {} has {} keys, the scores {}", t.name, t.shape.back(), s_.n_kv));
    prm.view = {num_elements(prm.row_view), t.shape.back()};
    return prm;
  }

  // Key tile j's K and V into stage `stage` of their rings (keys past n_kv zero-filled).
  void copy_keys(Builder& b, int j, int stage) {
    const int key0 = b.mul(j, b.index(s_.block_n));
    const int v_row0 = b.add(b.mul(kv_bh_, b.index(s_.n_kv)), key0);
    const int v_end = b.add(b.mul(kv_bh_, b.index(s_.n_kv)), b.index(s_.n_kv));
    const int k_row0 = b.mul(kv_bh_, b.index(s_.d));  // (rows past the head's d zero-filled)
    b.copy_async(k_param_, {k_row0, key0}, 0, stage, {padded(), true},
                 {padded() ? b.add(k_row0, b.index(s_.d)) : -1, -1});
    b.copy_async(v_param_, {v_row0, zero_}, 1, stage, {true, padded()}, {v_end, -1});
    b.commit_group();
  }

  // Q's fragments in registers, or (d past 128) Q's tile copied into a ring with the first key
  // tile's group and read from it each step.
  void load_q(Builder& b) {
    if (q_shared() || q_in_ring()) {
      // (On a persistent grid, once both warpgroups are past their last products on the previous
      // tile's Q.)
      if (persistent()) b.barrier();
      b.copy_async(q_param_, {row0_, zero_}, kQRing, zero_, {true, padded()}, {row_end_, -1});
      if (q_in_ring()) {  // in place before the first product: copied, visible to wgmma, by every thread
        b.commit_group();
        b.wait_group(0);
        b.fence_async();
        b.barrier();
      }
      return;
    }
    for (int64_t kk = 0; kk < s_.d; kk += 16)
      q_.push_back(b.load(q_param_, {row0_, b.index(kk)}, {s_.block_m, 16}, {true, false}, {row_end_, -1}, Frag::A));
  }

  // The outputs from the final (O, m, l) — or, split, this block's partials, and in the last
  // block of the query tile to arrive the merge.
  void finish(Builder& b, int tile, const std::vector<int>& loop_out) {
    const std::vector<int> carried = settled(b, loop_out);
    if (s_.kv_splits == 1) return write_outputs(b, carried[0], carried[1], carried[2]);
    for (int v = 0; v < 3; ++v) store_partial(b, split_, v, carried[static_cast<size_t>(v)]);
    b.when(b.last_arrival(workspace_, tile, b.index(s_.kv_splits)), [&](Builder& in) {
      merge_partials(in);
      in.reset_count(workspace_, tile);
    });
  }

  // (O, m, l, u) before the first key tile: zeros, −inf, zeros, −inf. u is the running max O and l
  // are shifted by: m itself, or with a lazy rescale m as it was when u last moved.
  std::vector<int> loop_init(Builder& b) {
    const Shape rows = {s_.block_m, 1}, out = {s_.block_m, dp()};
    const int ninf = b.tile_const(-std::numeric_limits<double>::infinity(), DType::F32, rows, Frag::Acc);
    return {b.tile_const(0, DType::F32, out, Frag::Acc), ninf, b.tile_const(0, DType::F32, rows, Frag::Acc),
            ninf};
  }
  // The loop's (O, m, l, u) as (O, m, l) shifted by m's shift: with a lazy rescale, O and l times
  // e^(u − c(m)) (0 where u is −inf: O and l are 0 there).
  std::vector<int> settled(Builder& b, const std::vector<int>& c) {
    if (!s_.lazy_rescale) return {c[0], c[1], c[2]};
    const int alpha =
        exp2_fma(b, c[3], b.scalar(M_LOG2E, DType::F32), minus_log2e_times(b, shift_of(b, c[1])));
    return {b.compute(Op::Mul, {c[0], alpha}, DType::F32), c[1],
            b.compute(Op::Mul, {c[2], alpha}, DType::F32)};
  }

  // The producer: the tile's Q, once the consumers have released the last one; then key tile j's
  // K (its head's d stored rows of keys key0 on) and V (keys key0 on, all of d) by TMA, each into
  // its ring's stage once the consumers have emptied that. K's stage is emptied at S, about half a
  // step before V's at P·V: K is loaded first rather than behind V's wait. The tensor maps' bounds
  // zero what lies past the head's queries, keys or d.
  void produce_keys(Builder& b, int lo, int hi, int first_step, int tiles_before) {
    if (q_by_tma()) {
      const auto [stage, parity] = b.ring_stage(tiles_before, 1, true);
      b.wait_empty(kQRing, stage, parity);
      b.tma_load(q_param_, bh_, query0_, zero_, kQRing, stage);
    }
    b.for_loop(lo, hi, b.index(1), {}, [&](Builder& in, int j, const std::vector<int>&) {
      const auto [stage, parity] = in.ring_stage(in.add(first_step, in.sub(j, lo)), stages(), true);
      const int key0 = in.mul(j, in.index(s_.block_n));
      in.wait_empty(0, stage, parity);
      in.tma_load(k_param_, kv_bh_, zero_, key0, 0, stage);
      in.wait_empty(1, stage, parity);
      in.tma_load(v_param_, kv_bh_, key0, zero_, 1, stage);
      return std::vector<int>{};
    });
  }
  // The consumers: each key tile's K stage waited for, the step run on it (V's waited for before
  // P·V; both products waited for inside; K's stage and at the last step Q's released once S is
  // done), V's stage released.
  std::vector<int> tma_key_loop(Builder& b, int lo, int hi, int first_step, const std::vector<int>& init) {
    const int steps = s_.warpgroup_turns ? b.sub(hi, lo) : -1;
    const std::vector<int> out = over_key_tiles(b, lo, hi, init, [&](Builder& in, int j, const std::vector<int>& c,
                                                                     TileKind kind) {
      const int t = in.sub(j, lo);
      const auto [stage, parity] = in.ring_stage(in.add(first_step, t), stages(), false);
      in.wait_full(0, stage, parity);
      std::vector<int> out = step(in, j, stage, c, kind.masked, turn(t, steps), hi, parity);
      in.release(1, stage);
      return out;
    });
    release_q_without_keys(b, lo, hi);
    return out;
  }

  // The loop over key tiles [lo, hi) as up to three: those a window's mask reaches (its lower
  // edge), those no mask reaches — wholly below the causal diagonal, inside every row's window
  // and within the keys, whose scores skip the masks — then the rest. `body` is step j's, given
  // the carried values and how its tile lies (TileKind).
  using TileStep = std::function<std::vector<int>(Builder&, int j, const std::vector<int>& c, TileKind kind)>;
  std::vector<int> over_key_tiles(Builder& b, int lo, int hi, const std::vector<int>& init, const TileStep& body) {
    auto loop = [&](int from, int to, const std::vector<int>& c, TileKind kind) {
      return b.for_loop(from, to, b.index(1), c,
                        [&](Builder& in, int j, const std::vector<int>& cj) { return body(in, j, cj, kind); });
    };
    const TileKind edge = {true, false}, inner = {false, true};
    int mid = unmasked_end(b, lo, hi);
    if (!s_.window_offset) return mid < 0 ? loop(lo, hi, init, {true, true}) : loop(mid, hi, loop(lo, mid, init, inner), edge);
    // Tiles from the one holding the last query's first key on are inside every row's window.
    const int inside = b.min(hi, b.max(lo, b.div(b.add(first_key(b, last_query(b)), b.index(s_.block_n - 1)),
                                                 b.index(s_.block_n))));
    mid = mid < 0 ? hi : b.max(inside, mid);
    return loop(mid, hi, loop(inside, mid, loop(lo, inside, init, edge), inner), edge);
  }
  // The block's last query (within its head; 0 where every row is query 0: heads packed).
  int last_query(Builder& b) { return s_.group > 1 ? zero_ : b.add(query0_, b.index(s_.block_m - 1)); }
  // The first key query `q` sees through the window's mask: q + window_offset, at least 0.
  int first_key(Builder& b, int q) {
    const int64_t w = *s_.window_offset;
    return w >= 0 ? b.add(q, b.index(w)) : b.sub(q, b.min(q, b.index(-w)));
  }
  // The end of the key tiles from lo that no mask reaches, within [lo, hi): those before the one
  // holding key query0 + offset + 1 (causal) and before the one holding the last key (where the
  // last tile is partial); −1 where neither mask is there.
  int unmasked_end(Builder& b, int lo, int hi) {
    int end = -1;
    if (s_.causal_offset) end = b.div(b.add(query0_, b.index(*s_.causal_offset + 1)), b.index(s_.block_n));
    if (s_.n_kv % s_.block_n != 0) {
      const int whole = b.index(s_.n_kv / s_.block_n);
      end = end < 0 ? whole : b.min(end, whole);
    }
    if (end < 0) return -1;
    return b.min(hi, b.max(lo, end));
  }

  // The overlapped loop on TMA stages. Its first step (count t from lo) starts S = Q·Kₗₒᵀ alone
  // and runs its softmax (there is no P before it). Each later step waits for Kⱼ and V_{j−1} — a
  // V only at the step after its K, whose stage the producer fills a step later — starts S =
  // Q·Kⱼᵀ and P_{j−1}·V_{j−1} onto O rescaled by α_{j−1}, waits for S alone and releases Kⱼ's
  // stage (the producer may refill it a step before V's), runs the softmax while P·V is in
  // flight, waits for P·V — pinned below the softmax where it outweighs the products — and
  // releases V_{j−1}'s. Q is released at the last S. After the loop the carried P meets the last
  // tile's V, waited for and then released; where the range was empty that product read no tile
  // of the block's and O stays.
  std::vector<int> tma_overlapped_loop(Builder& b, int lo, int hi, int first_step, const std::vector<int>& init) {
    const int one = b.index(1), steps = s_.warpgroup_turns ? b.sub(hi, lo) : -1;
    std::vector<int> carried = init;
    append_alpha_and_zero_p(b, &carried);
    const int second = b.min(hi, b.add(lo, one));
    // (A loop of one step or none, split by over_key_tiles as the rest are: the masks it needs.)
    carried = over_key_tiles(b, lo, second, carried,
                             [&](Builder& in, int j, const std::vector<int>& c, TileKind kind) {
                               const auto [stage, parity] = in.ring_stage(first_step, stages(), false);
                               in.wait_full(0, stage, parity);
                               return leading_step(in, j, stage, c, kind, turn(zero_, steps), hi);
                             });
    const std::vector<int> out = over_key_tiles(
        b, second, hi, carried, [&](Builder& in, int j, const std::vector<int>& c, TileKind kind) {
          const int t = in.sub(j, lo);
          const auto [stage, parity] = in.ring_stage(in.add(first_step, t), stages(), false);
          const auto [before, before_parity] =
              in.ring_stage(in.add(first_step, in.sub(t, one)), stages(), false);
          in.wait_full(0, stage, parity);
          in.wait_full(1, before, before_parity);
          const std::vector<int> out = overlapped_step(in, j, stage, before, c, kind, turn(t, steps), hi);
          in.release(1, before);
          return out;
        });
    const auto [last, last_parity] = b.ring_stage(b.add(first_step, b.sub(hi, second)), stages(), false);
    const int visited = b.less(lo, hi);
    release_q_without_keys(b, lo, hi);
    b.when(visited, [&, last = last, parity = last_parity](Builder& w) { w.wait_full(1, last, parity); });
    const int o = b.dot_wait({p_times_v(b, out, last, rescaled_o(b, out, 0))}, 0)[0];
    b.when(visited, [&](Builder& w) { w.release(1, last); });
    return {b.compute(Op::Where, {visited, o, out[0]}, DType::F32), out[1], out[2], out[3]};
  }

  // The block's key tiles [lo, hi): all, or up to the one holding key query0 + block_m − 1 +
  // offset (causal), or up to the head's length (read at run time); under split-KV the block's
  // share of those.
  std::pair<int, int> key_range(Builder& b) {
    // The tiles to visit: all, or up to the one holding key query0 + block_m − 1 + offset.
    int hi = b.index(steps());
    if (s_.causal_offset) {  // (packed heads: every row is query 0)
      const int64_t last = s_.group > 1 ? 0 : s_.block_m - 1;
      hi = b.min(hi, b.div(b.add(query0_, b.index(last + 1 + *s_.causal_offset + s_.block_n - 1)), b.index(s_.block_n)));
    }
    if (s_.key_limit) {  // the head's length, read now: up to its tile
      const int limit = b.ceil_index(s_.key_limit(b, [&](size_t t) {
        return b.load(tensor_param_.at(t), {row0_, zero_}, {1, 1}, {false, false}, {-1, -1}, Frag::None);
      }));
      hi = b.min(hi, b.div(b.add(limit, b.index(s_.block_n - 1)), b.index(s_.block_n)));
    }
    // A window: from the tile holding the first query's first key (at most hi: none where the
    // mask's end comes first).
    int lo = s_.window_offset ? b.min(hi, b.div(first_key(b, query0_), b.index(s_.block_n))) : zero_;
    // Split: the block's share of those tiles (cut at run time, after the mask's and the length's
    // end, so that a short sequence still spreads over every split).
    if (s_.kv_splits > 1) {
      const int per = b.div(b.add(b.sub(hi, lo), b.index(s_.kv_splits - 1)), b.index(s_.kv_splits));
      lo = b.min(hi, b.add(lo, b.mul(split_, per)));
      hi = b.min(hi, b.add(lo, per));
    }
    return {lo, hi};
  }

  // The loop over key tiles [lo, hi) through cp.async stages: (O, m, l) after the last.
  std::vector<int> key_loop(Builder& b, int lo, int hi) {
    if (s_.overlap) return overlapped_loop(b, lo, hi, loop_init(b));
    const int two = b.index(2);
    copy_keys(b, lo, b.rem(lo, two));
    return over_key_tiles(b, lo, hi, loop_init(b), [&](Builder& in, int j, const std::vector<int>& c, TileKind kind) {
      // Tile j's copies done, and every thread past its reads of the other stage.
      in.wait_group(0);
      if (s_.wgmma) in.fence_async();  // the copies, before wgmma reads them
      in.barrier();
      const int next = in.add(j, in.index(1));
      copy_keys(in, next, in.rem(next, two));
      return step(in, j, in.rem(j, two), c, kind.masked);
    });
  }

  Turn turn(int t, int steps) const { return s_.warpgroup_turns ? Turn{t, steps} : Turn{}; }
  // The products `issue` starts, in the warpgroup's turn at step `turn` (or at once).
  template <typename F>
  auto in_turn(Builder& b, Turn turn, F issue) {
    if (turn.step >= 0) b.await_turn(turn.step);
    auto started = issue();
    if (turn.step >= 0) b.hand_off(turn.step, turn.steps);
    return started;
  }

  // `hi`: the TMA loop's end, where Kⱼ's stage is released at S and Q's at the last S (-1: the
  // caller releases them); `v_parity`: V's stage waited for (that parity) only before P·V (-1:
  // the caller waited for it).
  std::vector<int> step(Builder& b, int j, int stage, const std::vector<int>& c, bool masked, Turn turn = {},
                        int hi = -1, int v_parity = -1) {
    const Shape scores = {s_.block_m, s_.block_n};
    int s = b.tile_const(0, DType::F32, scores, Frag::Acc);
    if (s_.wgmma)  // Q's whole (padded) head dimension against the K stage
      s = b.dot_wait({in_turn(b, turn, [&] { return q_times_k(b, stage, s); })}, 0)[0];
    if (hi >= 0) {
      b.release(0, stage);
      release_q_at(b, j, hi);
    }
    for (int64_t kk = 0; !s_.wgmma && kk < s_.d / 16; ++kk) {
      const int k = b.load_shared(0, stage, {b.index(16 * kk), zero_}, {16, s_.block_n}, Frag::B);
      s = b.dot(q_at(b, kk), k, s);
    }
    const Online on = online(b, j, s, c, masked);
    int o = rescaled(b, c[0], on.alpha);
    if (v_parity >= 0) b.wait_full(1, stage, v_parity);
    if (s_.wgmma) {  // P's fragments against the V stage; waited for before the next step's O·α
      return {b.dot_wait({b.dot_async(p_fragments(b, on.p), 1, stage, o)}, 0)[0], on.m, on.l, on.u};
    }
    for (int64_t kk = 0; kk < s_.block_n; kk += 16) {
      const int pa = b.convert(on.p, static_cast<int>(kk / 16), s_.dtype);
      const int v = b.load_shared(1, stage, {b.index(kk), zero_}, {16, dp()}, Frag::B);
      o = b.dot(pa, v, o);
    }
    return {o, on.m, on.l, on.u};
  }
  // O times the rows' rescale factors α (with a lazy rescale mostly 1: Builder::lazy_rescale).
  int rescaled(Builder& b, int o, int alpha) {
    return s_.lazy_rescale ? b.lazy_rescale(o, alpha) : b.compute(Op::Mul, {o, alpha}, DType::F32);
  }

  // Q's A fragment kk (16 of the head dimension): held in registers, or read from its ring.
  int q_at(Builder& b, int64_t kk) {
    return q_shared() ? b.load_shared(kQRing, zero_, {zero_, b.index(16 * kk)}, {s_.block_m, 16}, Frag::A)
                      : q_[static_cast<size_t>(kk)];
  }
  // S = Q·Kᵀ started on wgmma from K's stage `stage` into `acc`: Q from its ring or its fragments.
  int q_times_k(Builder& b, int stage, int acc) {
    return q_in_ring() ? b.dot_async(kQRing, 0, stage, acc) : b.dot_async(q_fragments(b), 0, stage, acc);
  }
  // Q's fragments over the padded head dimension (zeros past d), for wgmma.
  std::vector<int> q_fragments(Builder& b) {
    std::vector<int> q;
    for (int64_t kk = 0; kk < dp() / 16; ++kk) q.push_back(kk < s_.d / 16 ? q_at(b, kk) : zero_fragment(b));
    return q;
  }
  // The overlapped loops carry, after (O, m, l, u), the last step's α (O is rescaled by it only
  // under the next S = Q·Kᵀ, FlashAttention-3's order, not between P·V's wait and the next
  // products, where the tensor cores would idle for it) and P as its A fragments, rounded (half
  // the registers of its f32 tile across the loop's back edge): 1 and zeros before the first step.
  void append_alpha_and_zero_p(Builder& b, std::vector<int>* carried) {
    carried->push_back(b.tile_const(1, DType::F32, {s_.block_m, 1}, Frag::Acc));
    for (int64_t kk = 0; kk < s_.block_n; kk += 16) carried->push_back(b.tile_const(0, s_.dtype, {s_.block_m, 16}, Frag::A));
  }
  static int carried_alpha(const std::vector<int>& c) { return c[4]; }
  static std::vector<int> carried_p(const std::vector<int>& c) {
    return std::vector<int>(c.begin() + 5, c.end());
  }
  // O rescaled by the carried α_{j−1}, `newer` product groups having started since O's (S's in a
  // step). O was waited for before the back edge; waiting for it again here costs nothing, but
  // without it ptxas cannot see that across the loop and waits for S before the rescale (C7517).
  int rescaled_o(Builder& b, const std::vector<int>& c, int newer) {
    const int o = newer > 0 ? b.dot_wait({c[0]}, newer)[0] : c[0];
    return rescaled(b, o, carried_alpha(c));
  }
  // P_{j−1}·V_{j−1} from ring stage `stage` started onto O (rescaled).
  int p_times_v(Builder& b, const std::vector<int>& c, int stage, int o) { return b.dot_async(carried_p(c), 1, stage, o); }
  // P's tile as A fragments of 16 keys each, rounded to the inputs' dtype.
  std::vector<int> p_fragments(Builder& b, int p) {
    std::vector<int> pa;
    for (int64_t kk = 0; kk < s_.block_n; kk += 16) pa.push_back(b.convert(p, static_cast<int>(kk / 16), s_.dtype));
    return pa;
  }

  // Tensor t's tile for the key tile from key0 — a [rows, 1] or [1, keys] one where it is
  // broadcast along the keys or the rows (rows past the head and keys past n_kv clamped); one row
  // where it is broadcast along the queries and the block's rows are one head's (ALiBi's slope per
  // head).
  int load_tensor(Builder& b, size_t t, int key0) {
    const Param& prm = p_.params[static_cast<size_t>(tensor_param_[t])];
    const bool per_row = prm.view[0] != 1, keys = prm.view[1] != 1;
    const bool rows = per_row && !(prm.row_view.back() == 1 && s_.group == 1);
    return b.load(tensor_param_[t], {per_row ? row0_ : zero_, keys ? key0 : zero_},
                  {rows ? s_.block_m : 1, keys ? s_.block_n : 1}, {rows, keys}, {rows ? row_end_ : -1, -1},
                  Frag::Acc);
  }
  // The tiles of the tensors constant along the keys, loaded once before the key loop (−1 for
  // the others): what f(S) computes from them alone stays out of the loop too (ALiBi's
  // slope·(key positions within a tile)).
  void load_key_constant_tensors(Builder& b) {
    key_constant_tensors_.assign(s_.tensors.size(), -1);
    for (size_t t = 0; t < s_.tensors.size(); ++t)
      if (p_.params[static_cast<size_t>(tensor_param_[t])].view[1] == 1)
        key_constant_tensors_[t] = load_tensor(b, t, zero_);
  }

  // Key tile j's raw scores S through the chain's f(S) and the key mask, then the online
  // softmax's step from the carried (O, m, l, u, …): the new running max m and the max u the
  // terms are shifted by (m, or with a lazy rescale m where it passed the old u by more than
  // 8·ln 2, else the old u), the rescale factor α of what was summed before (exactly 1 where u
  // stayed), P and the new running sum l. `masked` false: neither the causal mask nor the keys'
  // end reaches the tile (over_key_tiles), whose scores skip both.
  struct Online {
    int m, u, alpha, p, l;
  };
  Online online(Builder& b, int j, int s, const std::vector<int>& c, bool masked) {
    const int m_before = c[1], l_before = c[2], u_before = c[3];
    const Shape scores = {s_.block_m, s_.block_n};
    const int key0 = b.mul(j, b.index(s_.block_n));
    std::vector<int> tensors = key_constant_tensors_;
    for (size_t t = 0; t < s_.tensors.size(); ++t)
      if (tensors[t] < 0) tensors[t] = load_tensor(b, t, key0);
    // X = f(S); where f is S·scale with a positive scale, X is left to the exponent (below) and
    // its row max is the raw scores' times the scale (rounding is monotonic: the same value).
    const bool scaled = (!s_.scores || s_.scores_unscaled) && s_.scale > 0;
    int row_part = -1;  // X = s + row_part where ≥ 0 (AttentionShape::ScoreTile)
    if (s_.scores) {
      const AttentionShape::ScoreTile x = s_.scores(b, s, s_.group > 1 ? -1 : query0_, key0, tensors, masked);
      s = x.x;
      row_part = x.row;
    } else if (!scaled)
      s = b.compute(Op::Mul, {s, b.scalar(s_.scale, DType::F32)}, DType::F32);
    const int ninf = b.scalar(-std::numeric_limits<double>::infinity(), DType::F32);
    if (masked && s_.n_kv % s_.block_n != 0)
      s = b.compute(Op::Where, {b.in_bounds(key0, b.index(s_.n_kv), 1, scores, Frag::Acc), s, ninf}, DType::F32);
    int tile_max = b.reduce(Op::ReduceMax, s, 1);
    if (scaled) tile_max = b.compute(Op::Mul, {tile_max, b.scalar(s_.scale, DType::F32)}, DType::F32);
    if (row_part >= 0) tile_max = b.compute(Op::Add, {tile_max, row_part}, DType::F32);
    const int m = b.compute(Op::Max, {m_before, tile_max}, DType::F32);
    // Lazily: u moves to m where m − u > 8·ln 2 (also where u is −inf and m is not; where both
    // are, the difference is NaN and u stays).
    int moved = -1, u = m;
    if (s_.lazy_rescale) {
      moved =
          b.compute(Op::Gt, {b.compute(Op::Sub, {m, u_before}, DType::F32), b.scalar(8 * M_LN2, DType::F32)},
                    DType::Bool);
      u = b.compute(Op::Where, {moved, m, u_before}, DType::F32);
    }
    // The shift: the running max where it is finite (by default 0 while a row has seen no finite
    // score, so that e^(−inf − 0) = 0). α = e^(u' − c) rather than e^(c' − c): the two agree where
    // u' is finite, and where it is not, O and l are still 0 and α must only not be NaN.
    // The chain's shift (a plain max: −inf while the row has seen only masked keys) guarded the
    // same way: a row whose first tiles are masked would otherwise take e^(−inf + inf) = NaN.
    const int shift = shift_of(b, u);
    // e^(u·k − c) as 2^(u·(k·log2 e) − c·log2 e): an fma and an ex2.approx per score, −c·log2 e
    // once per row (P is rounded to 16 bits before P·V; the f32 sum keeps ex2's 2 ulp).
    const int log2e = b.scalar(M_LOG2E, DType::F32);
    const int minus_shift2 = minus_log2e_times(b, shift);
    int alpha = exp2_fma(b, u_before, log2e, minus_shift2);
    if (moved >= 0) alpha = b.compute(Op::Where, {moved, alpha, b.scalar(1, DType::F32)}, DType::F32);
    // (e^(s + r − c) = 2^(s·log2 e − (c − r)·log2 e))
    const int p =
        exp2_fma(b, s, scaled ? b.scalar(s_.scale * M_LOG2E, DType::F32) : log2e,
                 row_part < 0 ? minus_shift2
                              : minus_log2e_times(b, b.compute(Op::Sub, {shift, row_part}, DType::F32)));
    const int l = b.compute(Op::Add, {b.compute(Op::Mul, {l_before, alpha}, DType::F32), b.reduce(Op::ReduceSum, p, 1)},
                            DType::F32);
    return {m, u, alpha, p, l};
  }

  // The overlapped loop (wgmma, three stages). Step j starts S = Q·Kⱼᵀ, then P_{j−1}·V_{j−1}
  // onto O rescaled by α_{j−1}, waits for S alone (the older group), runs the softmax of S while
  // P·V is in flight, waits for P·V, and refills the stage of tile j − 1 (its K and V both read
  // now) with tile j + 2. P_{j−1} is carried in registers; before the first step it is zeros
  // against a stage of zeros (a tile past the keys, whose copies read nothing), and after the
  // last the carried P meets its V once more.
  std::vector<int> overlapped_loop(Builder& b, int lo, int hi, const std::vector<int>& init) {
    const int three = b.index(3), two = b.index(2);
    copy_keys(b, lo, b.rem(lo, three));
    copy_keys(b, b.index(steps()), b.rem(b.add(lo, two), three));  // zeros: keys from n_kv on
    copy_keys(b, b.add(lo, b.index(1)), b.rem(b.add(lo, b.index(1)), three));
    std::vector<int> carried = init;
    append_alpha_and_zero_p(b, &carried);
    const std::vector<int> out = over_key_tiles(b, lo, hi, carried, [&](Builder& in, int j, const std::vector<int>& c,
                                                                        TileKind kind) {
      in.wait_group(1);  // tile j's copies (and before the first step the stage of zeros) done
      in.fence_async();
      in.barrier();
      const int stage = in.rem(j, three), before = in.rem(in.add(j, two), three);
      const std::vector<int> out = overlapped_step(in, j, stage, before, c, kind);
      copy_keys(in, in.add(j, two), before);
      return out;
    });
    // The last P·V: its tile's stage, or the stage of zeros when the range was empty (waited for
    // and fenced here then).
    b.wait_group(0);
    b.fence_async();
    b.barrier();
    const int o = b.dot_wait({p_times_v(b, out, b.rem(b.add(hi, two), three), rescaled_o(b, out, 0))}, 0)[0];
    return {o, out[1], out[2], out[3]};
  }

  // One step of an overlapped loop: S = Q·Kⱼᵀ from stage `stage` and the carried P_{j−1} times
  // stage `before`'s V onto O·α_{j−1} started together, S waited for alone (the older group), the
  // softmax run while P·V is in flight, then O waited for: (O, m, l, α, P's fragments). O is
  // rescaled while S's product runs in the main loop; at the edges and where the warpgroups take
  // turns it is rescaled first, since ptxas ran out of registers with S in flight there (where an
  // edge step stands alone — the last of N 4097's keys, a tile LLVM peels — it serialized every
  // wgmma of the kernel; with turns on the persistent grid it spilled).
  std::vector<int> overlapped_step(Builder& b, int j, int stage, int before, const std::vector<int>& c,
                                   TileKind kind, Turn turn = {}, int hi = -1) {
    const int s0 = zero_scores(b);
    const bool first = !kind.main || turn.step >= 0;
    const int o_first = first ? rescaled_o(b, c, 0) : -1;
    const auto [scores, o_flight] = in_turn(b, turn, [&] {
      const int s = q_times_k(b, stage, s0);
      return std::pair{s, p_times_v(b, c, before, first ? o_first : rescaled_o(b, c, 1))};
    });
    const int s = b.dot_wait({scores}, 1)[0];
    if (s_.tma) b.release(0, stage);  // S, the only reader of Kⱼ, is done
    release_q_at(b, j, hi);
    const Online on = online(b, j, s, c, kind.masked);
    std::vector<int> out = {b.dot_wait({o_flight}, 0, s_.pin_pv_wait)[0], on.m, on.l, on.u, on.alpha};
    const std::vector<int> pa = p_fragments(b, on.p);
    out.insert(out.end(), pa.begin(), pa.end());
    return out;
  }

  // The overlapped loop's first step: S = Q·Kⱼᵀ alone, Kⱼ's stage released, the softmax run on
  // it (O is still zero: nothing to rescale or add).
  std::vector<int> leading_step(Builder& b, int j, int stage, const std::vector<int>& c, TileKind kind,
                                Turn turn, int hi) {
    const int s = b.dot_wait({in_turn(b, turn, [&] { return q_times_k(b, stage, zero_scores(b)); })}, 0)[0];
    b.release(0, stage);
    release_q_at(b, j, hi);
    const Online on = online(b, j, s, c, kind.masked);
    std::vector<int> out = {c[0], on.m, on.l, on.u, on.alpha};
    const std::vector<int> pa = p_fragments(b, on.p);
    out.insert(out.end(), pa.begin(), pa.end());
    return out;
  }
  // Q's ring handed back at key tile j's S where j is the last before hi (the TMA loops; hi -1:
  // by the caller instead).
  void release_q_at(Builder& b, int j, int hi) {
    if (hi >= 0 && q_by_tma()) b.when(b.less(hi, b.add(j, b.index(2))), [&](Builder& w) { release_q(w); });
  }
  // Q's ring handed back after a TMA loop over no key tiles [lo, hi), which had no S to do it at.
  void release_q_without_keys(Builder& b, int lo, int hi) {
    b.when(b.less(hi, b.add(lo, b.index(1))), [&](Builder& w) { release_q(w); });
  }

  // The shift c of running max m: the chain's (m by default), 0 where m is −inf.
  int shift_of(Builder& b, int m) {
    const int nothing_seen = b.compute(Op::Eq, {m, b.scalar(-std::numeric_limits<double>::infinity(), DType::F32)}, DType::Bool);
    return b.compute(Op::Where, {nothing_seen, b.scalar(0, DType::F32), s_.shift ? s_.shift(b, m) : m}, DType::F32);
  }

  // Split-KV: value v (0 O, 1 m, 2 l) of this block's key range, at its split's rows of the
  // workspace (O in columns [0, dp), m in dp, l in dp + 1).
  std::vector<int> partial_at(Builder& b, int split) {
    const int base = b.mul(split, b.index(s_.batch_heads * s_.n_q));
    return {b.add(base, row0_), b.add(base, row_end_)};
  }
  void store_partial(Builder& b, int split, int v, int tile) {
    const std::vector<int> rows = partial_at(b, split);
    b.store(workspace_, {rows[0], v == 0 ? zero_ : b.index(dp() + v - 1)}, tile, {true, false}, {rows[1], -1});
  }
  int load_partial(Builder& b, int split, int v) {
    const std::vector<int> rows = partial_at(b, split);
    return b.load(workspace_, {rows[0], v == 0 ? zero_ : b.index(dp() + v - 1)},
                  {s_.block_m, v == 0 ? dp() : 1}, {true, false}, {rows[1], -1}, Frag::Acc);
  }

  // The last block of a query tile: every split's O, m and l rescaled to the shift of the
  // overall max (a split that saw no finite score weighs 0), summed, and written as one. Two
  // loops over the splits (the max, then the sums), so that the registers do not grow with
  // their count (unrolled, 60 splits took 255 registers and spilled 1.7 KB).
  void merge_partials(Builder& b) {
    const int ninf = b.scalar(-std::numeric_limits<double>::infinity(), DType::F32);
    const int splits = b.index(s_.kv_splits), one = b.index(1);
    const int m = b.for_loop(one, splits, one, {load_partial(b, zero_, 1)},
                             [&](Builder& in, int sp, const std::vector<int>& c) {
                               return std::vector<int>{in.compute(Op::Max, {c[0], load_partial(in, sp, 1)}, DType::F32)};
                             })[0];
    const int log2e = b.scalar(M_LOG2E, DType::F32);
    const int minus_shift2 = minus_log2e_times(b, shift_of(b, m));
    const int o0 = b.tile_const(0, DType::F32, {s_.block_m, dp()}, Frag::Acc);
    const int l0 = b.tile_const(0, DType::F32, {s_.block_m, 1}, Frag::Acc);
    const std::vector<int> sums = b.for_loop(
        zero_, splits, one, {o0, l0}, [&](Builder& in, int sp, const std::vector<int>& c) {
          const int ms = load_partial(in, sp, 1);
          const int e = exp2_fma(in, ms, log2e, minus_shift2);
          const int w = in.compute(Op::Where, {in.compute(Op::Eq, {ms, ninf}, DType::Bool), in.scalar(0, DType::F32), e},
                                   DType::F32);
          return std::vector<int>{
              in.compute(Op::Add, {c[0], in.compute(Op::Mul, {load_partial(in, sp, 0), w}, DType::F32)}, DType::F32),
              in.compute(Op::Add, {c[1], in.compute(Op::Mul, {load_partial(in, sp, 2), w}, DType::F32)}, DType::F32)};
        });
    write_outputs(b, sums[0], m, sums[1]);
  }

  // O and the row values, from the final O, m and l.
  void write_outputs(Builder& b, int o, int m, int l) {
    store_output(b, o, l);
    for (size_t r = 0; r < s_.row_outputs.size(); ++r) {
      int y = s_.row_outputs[r].value(b, m, l);
      if (s_.row_outputs[r].dtype != DType::F32) y = b.compute(Op::Cast, {y}, s_.row_outputs[r].dtype);
      b.store(row_param_[r], {row0_, zero_}, y, {true, false}, {row_end_, -1});
    }
  }

  // O / divisor(l) — by default 0 where l is 0 (a row with no finite score) — in the output's
  // dtype, as O times the divisor's reciprocal: a division per row, not per element (an IEEE
  // division is a reciprocal, its refinement and a range check: ~500 instructions a thread per
  // tile at d 128 as 64 divisions); within an ulp of O / divisor.
  void store_output(Builder& b, int o, int l) {
    int divisor;
    if (s_.divisor) {
      divisor = s_.divisor(b, l);
    } else {
      const int empty = b.compute(Op::Eq, {l, b.scalar(0, DType::F32)}, DType::Bool);
      divisor = b.compute(Op::Where, {empty, b.scalar(1, DType::F32), l}, DType::F32);
    }
    int y = b.compute(Op::Mul, {o, b.compute(Op::Div, {b.scalar(1, DType::F32), divisor}, DType::F32)}, DType::F32);
    if (const DType out = s_.out_dtype.value_or(s_.dtype); out != DType::F32) y = b.compute(Op::Cast, {y}, out);
    b.store(o_param_, {row0_, zero_}, y, {true, padded()}, {row_end_, -1});
  }

  const AttentionShape s_;
  Program p_;
  std::vector<int> q_;  // Q's fragments, 16 of d each
  int q_param_ = -1, k_param_ = -1, v_param_ = -1, o_param_ = -1;
  std::vector<int> tensor_param_, row_param_, key_constant_tensors_;
  int zero_ = -1, tile_ = -1, bh_ = -1, kv_bh_ = -1, query0_ = -1, row0_ = -1, row_end_ = -1, split_ = -1, workspace_ = -1;
};

}  // namespace

Program attention_program(const AttentionShape& s, const std::string& name) {
  return AttentionProgram(s).build(name);
}

namespace {

// The values of node id's operands: from `val`, or made by `constant` for a constant.
template <typename V, typename F>
std::vector<V> operand_values(const Graph& g, NodeId id, const std::map<NodeId, V>& val, F constant) {
  std::vector<V> out;
  for (NodeId o : g.node(id).operands) {
    if (val.count(o))
      out.push_back(val.at(o));
    else if (g.node(o).op == Op::Constant)
      out.push_back(constant(g.node(o)));
    else
      throw CodegenError(fmt::format("attention: %{} reads %{}, which the kernel does not have", id, o));
  }
  return out;
}

// The chain's nodes from `ops`, in order: `val` holds the value each starts from. `typed`: each
// in its graph dtype, casts rounding as in every kernel, constants of their own dtype (a key
// limit, as a pointwise kernel computes it); else every value f32 and casts left out (the row
// values the online recurrence holds in f32).
int evaluate(Builder& b, const Graph& g, const std::vector<NodeId>& ops, std::map<NodeId, int>& val,
             NodeId last, bool typed) {
  for (NodeId id : ops) {
    const Node& n = g.node(id);
    const std::vector<int> args = operand_values(
        g, id, val, [&](const Node& c) { return b.scalar(c.value, typed ? c.dtype : DType::F32); });
    if (!typed && n.op == Op::Cast)
      val[id] = args.at(0);
    else
      val[id] = b.compute(n.op, args,
                          typed                                   ? n.dtype
                          : op_info(n.op).kind == OpKind::Compare ? DType::Bool
                                                                  : DType::F32);
  }
  return val.at(last);
}

// A score chain's value as the kernel holds it: f + r, r constant along the keys (a [rows, 1] or
// one-element tile, or −1: none), f anything else (or −1: none); f may be a product a·b not yet computed
// (`fa` ≥ 0), kept for the sum that uses it to make one fma.
struct ScoreValue {
  int f = -1, r = -1, fa = -1, fb = -1;
};

// The chain's X = f(S) as the kernel computes it (its nodes from `ops`, in order; `val` holds the
// scores and the tensors' tiles): each in its graph dtype, casts rounding as in every kernel,
// constants of their own dtype, as a pointwise kernel computes it — but for the roundings of f32
// sums and products, which are the kernel's to choose (the scores never reach memory; as the
// exponent's fold of the scale does):
// - X's part constant along the keys is kept apart (ScoreValue::r) through sums, differences,
//   negations, products and quotients by values constant along the keys (constants, one-element
//   tiles, row parts) and masks' where(c, ·, −inf): the kernel adds it to each tile's row max and
//   takes it from the exponent's shift, once a row a tile, where it cancels in P (ALiBi's
//   slope·(i_k − i_q) is slope·(key offsets), the same in every tile, plus slope·(key0 − i_q) a
//   row: one fma a score on S);
// - an f32 product used only by an f32 sum is one fma with it (`contracted`).
// An iota is the tile's query or key positions (ScoreChain::iota). A node of `pass` takes the value of the
// node it names (a mask that holds throughout); a tanh of `absolute` is computed where only its absolute
// error counts (Builder::score_tanh).
struct Positions {
  int query0 = -1, key0 = -1;
  Shape scores;  // the score tile's shape
  bool key_offsets_apart = false;
};
class ScoreChain {
 public:
  ScoreChain(Builder& b, const Graph& g, const std::vector<NodeId>& ops, const std::set<NodeId>& absolute)
      : b_(b), g_(g), absolute_(absolute) {
    std::map<NodeId, int> uses;
    for (NodeId id : ops)
      for (NodeId o : g.node(id).operands) ++uses[o];
    for (NodeId id : ops) {
      const Node& n = g.node(id);
      if (n.op == Op::Add && n.dtype == DType::F32)
        for (NodeId o : n.operands)
          if (g.node(o).op == Op::Mul && g.node(o).dtype == DType::F32 && uses[o] == 1) contracted_.insert(o);
    }
  }
  AttentionShape::ScoreTile evaluate(const std::vector<NodeId>& ops, std::map<NodeId, ScoreValue> val,
                                     NodeId last, const Positions& at, const std::map<NodeId, NodeId>& pass) {
    for (NodeId id : ops) {
      if (const auto p = pass.find(id); p != pass.end())
        val[id] = val.at(p->second);  // a mask known to pass its operand on
      else
        val[id] = node(id, val, at);
    }
    const ScoreValue x = val.at(last);
    const bool apart = x.r >= 0 && (x.f >= 0 || x.fa >= 0);
    int f = apart ? computed(x) : joined(x);
    if (g_.node(last).dtype != DType::F32) f = b_.compute(Op::Cast, {f}, DType::F32);
    return {f, apart ? x.r : -1};
  }

 private:
  ScoreValue node(NodeId id, const std::map<NodeId, ScoreValue>& val, const Positions& at) {
    const Node& n = g_.node(id);
    if (n.op == Op::Iota) return iota(id, at);
    const std::vector<ScoreValue> a =
        operand_values(g_, id, val, [&](const Node& c) { return ScoreValue{b_.scalar(c.value, c.dtype)}; });
    if (n.dtype == DType::F32) {
      switch (n.op) {
        case Op::Add:
        case Op::Sub:
          return sum(n.op, a[0], a[1]);
        case Op::Neg:
          return {neg(computed(a[0])), neg(a[0].r)};
        case Op::Mul:
        case Op::Div:  // by a value constant along the keys: (f + r)·u = f·u + r·u
          for (int side : {1, 0}) {
            if (n.op == Op::Div && side == 0) break;  // (a divisor, not a dividend)
            const ScoreValue& v = a[static_cast<size_t>(1 - side)];
            const int u = along_rows(a[static_cast<size_t>(side)]);
            if (u < 0 || v.fa >= 0) continue;
            if (n.op == Op::Mul && contracted_.count(id) && v.f >= 0)
              return {-1, scaled(n.op, v.r, u), v.f, u};
            return {scaled(n.op, v.f, u), scaled(n.op, v.r, u)};
          }
          break;
        case Op::Where:  // a mask's where(c, ·, −inf): the row part passes it
          if (const Node& e = g_.node(n.operands[2]);
              e.op == Op::Constant && std::isinf(e.value) && e.value < 0 && a[1].f >= 0)
            return {b_.compute(Op::Where, {joined(a[0]), computed(a[1]), a[2].f}, DType::F32), a[1].r};
          break;
        default:
          break;
      }
    }
    std::vector<int> args;
    for (const ScoreValue& v : a) args.push_back(joined(v));
    if (absolute_.count(id)) return {b_.score_tanh(args.at(0))};
    return {b_.compute(n.op, args, n.dtype)};
  }
  // The tile's positions, integers below 2^24 (exact in f32, and so are their sums and
  // differences); every row query 0 where query0 is −1. Where `key_offsets_apart`, the key
  // positions are the tile's first key (r, uniform) plus each key's offset from it (f, [1, keys]:
  // the same in every tile, so that what f(S) makes of it alone is computed once a block) and the
  // query positions are each row's (r, [rows, 1]); else the key positions are f and the query
  // positions the block's first query (f, uniform) plus each row's offset from it (r). Either way
  // ALiBi's slope·(i_k − i_q) is a product of small exact differences near the diagonal.
  ScoreValue iota(NodeId id, const Positions& at) {
    const bool keys = iota_along(g_, id, 1);
    const Shape rows = {at.scores[0], 1}, key_row = {1, at.scores[1]};
    ScoreValue v;
    if (keys && at.key_offsets_apart)
      v = {b_.iota(b_.index(0), 1, key_row, Frag::Acc), b_.iota(at.key0, 1, {1, 1}, Frag::Acc)};
    else if (keys)
      v.f = b_.iota(at.key0, 1, key_row, Frag::Acc);
    else if (at.query0 < 0)
      v.r = b_.tile_const(0, DType::F32, rows, Frag::Acc);
    else if (at.key_offsets_apart)
      v.r = b_.iota(at.query0, 0, rows, Frag::Acc);
    else
      v = {b_.iota(at.query0, 0, {1, 1}, Frag::Acc), b_.iota(b_.index(0), 0, rows, Frag::Acc)};
    const DType dt = g_.node(id).dtype;
    if (dt != DType::F32) return {b_.compute(Op::Cast, {joined(v)}, dt)};
    return v;
  }
  // f computed where it is a product kept for a sum.
  int computed(const ScoreValue& v) {
    return v.fa >= 0 ? b_.compute(Op::Mul, {v.fa, v.fb}, DType::F32) : v.f;
  }
  // The value whole: f + r.
  int joined(const ScoreValue& v) {
    const int f = computed(v);
    if (v.r < 0) return f;
    return f < 0 ? v.r : b_.compute(Op::Add, {f, v.r}, DType::F32);
  }
  // v's value where it is constant along the keys (a row part alone, a scalar or a one-element
  // tile), else −1.
  int along_rows(const ScoreValue& v) const {
    if (v.fa >= 0) return -1;
    if (v.f < 0) return v.r;
    const Type& t = b_.program().types[static_cast<size_t>(v.f)];
    return v.r < 0 && (!t.is_tile() || (t.shape[0] == 1 && t.shape[1] == 1)) ? v.f : -1;
  }
  int neg(int v) { return v < 0 ? -1 : b_.compute(Op::Neg, {v}, DType::F32); }
  int scaled(Op op, int v, int u) { return v < 0 ? -1 : b_.compute(op, {v, u}, DType::F32); }
  ScoreValue sum(Op op, const ScoreValue& x, const ScoreValue& y) {
    auto part = [&](int p, int q) {
      if (q < 0) return p;
      if (p < 0) return op == Op::Sub ? neg(q) : q;
      return b_.compute(op, {p, q}, DType::F32);
    };
    ScoreValue out;
    // A product into the sum: one fma with the other term (of two, the one with more elements a
    // thread — S·scale rather than a key tile's slope·i_k).
    const bool x_fused = x.fa >= 0 && (y.fa < 0 || elements(x) >= elements(y));
    const ScoreValue& p = x_fused ? x : y;
    const int other = computed(x_fused ? y : x);
    if (op == Op::Add && p.fa >= 0 && other >= 0)
      out.f = b_.compute(Op::Fma, {p.fa, p.fb, other}, DType::F32);
    else
      out.f = part(computed(x), computed(y));
    out.r = part(x.r, y.r);
    return out;
  }
  // The elements of a product kept for a sum (its operands broadcast).
  int64_t elements(const ScoreValue& v) const {
    int64_t rows = 1, cols = 1;
    for (int a : {v.fa, v.fb}) {
      const Type& t = b_.program().types[static_cast<size_t>(a)];
      if (t.is_tile()) rows = std::max(rows, t.shape[0]), cols = std::max(cols, t.shape[1]);
    }
    return rows * cols;
  }

  Builder& b_;
  const Graph& g_;
  const std::set<NodeId>& absolute_;
  std::set<NodeId> contracted_;
};

// Row value `id` of chain c (its max, a shift op, its sum, a divisor op or a row op) from the
// final running max m and sum l, through the chain's ops up to it: the shift's and the divisor's
// in f32 (as the loop computes them), the row ops in their graph dtypes (as a kernel of their own
// would: a cast among them rounds).
int row_value(Builder& b, const Graph& g, const ContractionChain& c, NodeId id, int m, int l) {
  std::map<NodeId, int> val = {{c.row_max, m}, {c.row_sum, l}};
  if (val.count(id)) return val.at(id);
  auto upto = [&](std::vector<NodeId> ops) {  // (each list in graph order: its ops up to id)
    ops.erase(std::remove_if(ops.begin(), ops.end(), [&](NodeId n) { return n > id; }), ops.end());
    return ops;
  };
  std::vector<NodeId> chain_ops = upto(c.shift_ops), row_ops = upto(c.row_ops);
  const std::vector<NodeId> divisor_ops = upto(c.divisor_ops);
  chain_ops.insert(chain_ops.end(), divisor_ops.begin(), divisor_ops.end());
  const bool in_chain = std::count(chain_ops.begin(), chain_ops.end(), id) > 0;
  if (!in_chain && std::count(row_ops.begin(), row_ops.end(), id) == 0)
    throw CodegenError(
        fmt::format("attention: %{} is not a row value of the chain ending at %{}", id, c.output));
  if (!chain_ops.empty()) evaluate(b, g, chain_ops, val, chain_ops.back(), false);
  if (in_chain) return val.at(id);
  for (auto& [n, v] : val)  // the row values as a kernel of their own would read them
    if (g.node(n).dtype != DType::F32) v = b.compute(Op::Cast, {v}, g.node(n).dtype);
  return evaluate(b, g, row_ops, val, id, true);
}

// The ops of `ops` (in order) that `last` needs where mask `mask` passes its scores operand on:
// without what computes only its condition.
std::vector<NodeId> without_mask(const Graph& g, const std::vector<NodeId>& ops, NodeId mask, NodeId last) {
  std::set<NodeId> needed = {last};
  for (auto at = ops.rbegin(); at != ops.rend(); ++at) {
    if (!needed.count(*at)) continue;
    const Node& n = g.node(*at);
    if (*at == mask) needed.insert(n.operands[1]);
    else needed.insert(n.operands.begin(), n.operands.end());
  }
  std::vector<NodeId> out;
  for (NodeId id : ops)
    if (needed.count(id)) out.push_back(id);
  return out;
}

// The chain's X = f(S) as the kernel computes it: S rounded to its dtype as the matmul would
// write it, f(S) in the graph's dtypes (the masks' nodes among them, in topological order), X in
// f32.
// `product` (≥ 0): the product S·k whose k the kernel folds into its exponent, passing S on here.
AttentionShape::ScoresFn scores_of(const Graph& g, const ContractionChain& c, int64_t block_m,
                                   int64_t block_n, bool offsets_fit, NodeId product = -1) {
  std::vector<NodeId> ops = c.score_ops;
  ops.insert(ops.end(), c.index_ops.begin(), c.index_ops.end());
  std::sort(ops.begin(), ops.end());
  // Below the diagonal the causal mask's condition holds throughout: its where passes the scores
  // on, and what computed the condition is left out.
  // So does a window's inside every row's window.
  std::vector<NodeId> below = ops;
  std::map<NodeId, NodeId> unscaled, pass;  // (masked tiles, unmasked tiles)
  std::set<NodeId> absolute;
  for (NodeId id : c.score_ops)
    if (absolute_error_suffices(g, c, id)) absolute.insert(id);
  if (product >= 0) unscaled[product] = pass[product] = c.scores;
  for (NodeId mask : {c.causal_mask, c.window_mask})
    if (mask >= 0) {
      below = without_mask(g, below, mask, c.x());
      pass[mask] = g.node(mask).operands[1];
    }
  // Key positions held apart where X computes with them, not only compares them (ALiBi; a
  // mask's condition gains little: the causal one is computed on the diagonal's tiles only), and
  // where the registers allow (`offsets_fit`).
  const bool key_offsets_apart =
      offsets_fit && std::any_of(below.begin(), below.end(), [&](NodeId id) {
        const Node& n = g.node(id);
        return op_info(n.op).kind != OpKind::Compare &&
               std::any_of(n.operands.begin(), n.operands.end(),
                           [&](NodeId o) { return iota_along(g, o, 1); });
      });
  return [&g, c, ops, below, unscaled, pass, absolute, block_m, block_n, key_offsets_apart](
             Builder& b, int acc, int query0, int key0, const std::vector<int>& tensors, bool masked) {
    const DType sd = g.node(c.scores).dtype;
    std::map<NodeId, ScoreValue> val = {
        {c.scores, {sd == DType::F32 ? acc : b.compute(Op::Cast, {acc}, sd)}}};
    for (size_t t = 0; t < tensors.size(); ++t) {  // (a tile constant along the keys is a row part)
      const Type& tt = b.program().types[static_cast<size_t>(tensors[t])];
      val[c.tensors[t]] = tt.shape[0] > 1 && tt.shape[1] == 1 && g.node(c.tensors[t]).dtype == DType::F32
                              ? ScoreValue{-1, tensors[t]}
                              : ScoreValue{tensors[t]};
    }
    const Positions at = {query0, key0, {block_m, block_n}, key_offsets_apart};
    const std::vector<NodeId>& chain_ops = masked ? ops : below;
    return ScoreChain(b, g, chain_ops, absolute)
        .evaluate(chain_ops, val, c.x(), at, masked ? unscaled : pass);
  };
}

// k where the chain's X is f32 S·k, k a positive constant, maybe inside masks where(m, ·, −inf)
// (causal, windows, lengths; their conditions never read S): X = k·X', X' the same masks over S
// itself, since k·(−inf) is −inf. *mul is the product S·k.
std::optional<double> positive_scale(const Graph& g, const ContractionChain& c, NodeId* mul) {
  const std::vector<NodeId> wheres = score_masks(g, c.x(), c.score_ops);
  const NodeId product = wheres.empty() ? c.x() : g.node(wheres.back()).operands[1];
  if (c.score_ops.size() != wheres.size() + 1) return std::nullopt;  // nothing but the masks and the product
  const Node& x = g.node(product);
  if (x.op != Op::Mul || x.dtype != DType::F32 || g.node(c.scores).dtype != DType::F32) return std::nullopt;
  if (x.operands[0] != c.scores && x.operands[1] != c.scores) return std::nullopt;
  const NodeId other = x.operands[0] == c.scores ? x.operands[1] : x.operands[0];
  const Node& k = g.node(other);
  if (k.op != Op::Constant || !(k.value > 0) || std::isinf(k.value)) return std::nullopt;
  *mul = product;
  return k.value;
}

}  // namespace

Program attention_kernel_program(const Graph& g, const Kernel& k) {
  std::string why;
  const std::optional<ContractionChain> c = match_contraction_chain(g, attention_output(g, k), &why);
  if (!c) throw CodegenError(fmt::format("kernel {}: not a contraction chain: {}", k.name, why));
  AttentionShape s;
  s.batch_heads = c->batch;
  s.lead = c->lead;
  s.kv_lead = c->kv_lead;
  s.n_q = c->n_q;
  s.n_kv = c->n_kv;
  s.d = c->d;
  s.dtype = g.node(c->q).dtype;
  s.out_dtype = g.node(c->output).dtype;
  s.block_m = k.schedule.block_m;
  s.group = k.schedule.heads_per_block;
  s.kv_splits = k.schedule.kv_splits;
  s.block_n = k.schedule.block_n;
  s.wgmma = k.schedule.wgmma;
  s.tma = k.schedule.wgmma && k.schedule.tma;
  s.overlap = k.schedule.wgmma && k.schedule.overlap;
  s.pin_pv_wait = attention_pins_pv_wait(k);
  s.warpgroup_turns = s.tma && k.schedule.warpgroup_turns;
  s.lazy_rescale = k.schedule.lazy_rescale;
  s.persistent_blocks = s.tma ? k.schedule.tile_blocks : 0;
  s.causal_offset = c->causal_offset;
  s.window_offset = c->window_offset;
  if (c->key_limit >= 0)
    s.key_limit = [&g, c = *c](Builder& b, const AttentionShape::TensorLoader& load) {
      std::map<NodeId, int> val;
      for (size_t t = 0; t < c.tensors.size(); ++t)
        if (std::count(c.key_limit_tensors.begin(), c.key_limit_tensors.end(), c.tensors[t])) val[c.tensors[t]] = load(t);
      return c.key_limit_ops.empty() ? val.at(c.key_limit)
                                     : evaluate(b, g, c.key_limit_ops, val, c.key_limit, true);
    };
  const NodeId roles[3] = {c->q, c->k, c->v};
  for (int r = 0; r < 3; ++r) {
    const NodeId id = roles[r];
    s.position[static_cast<size_t>(r)] =
        static_cast<int>(std::find(k.inputs.begin(), k.inputs.end(), id) - k.inputs.begin());
    s.names[static_cast<size_t>(r)] = tensor_name(g.node(id));
  }
  const Shape& scores_shape = g.node(c->scores).shape;
  for (NodeId id : c->tensors) {
    AttentionShape::Tensor t;
    const Node& n = g.node(id);
    t.name = tensor_name(n);
    t.dtype = n.dtype;
    t.position = static_cast<int>(std::find(k.inputs.begin(), k.inputs.end(), id) - k.inputs.begin());
    // Aligned to the scores, the leading axes as the kernel's (one merged axis without `lead`).
    Shape aligned(scores_shape.size() - n.shape.size(), 1);
    aligned.insert(aligned.end(), n.shape.begin(), n.shape.end());
    if (c->lead.empty()) aligned.insert(aligned.begin(), 1);
    t.shape.assign(aligned.begin(), aligned.end());
    s.tensors.push_back(std::move(t));
  }
  auto name_of = [&](NodeId id) {
    for (const GraphOutput& o : g.outputs())
      if (o.node == id) return o.name;
    return fmt::format("%{}", id);
  };
  s.names[3] = name_of(c->output);
  for (size_t at = 0; at < k.outputs.size(); ++at) {
    const NodeId id = k.outputs[at];
    if (id == c->output) {
      s.o_position = static_cast<int>(at);
      continue;
    }
    AttentionShape::RowOutput r;
    r.name = name_of(id);
    r.dtype = g.node(id).dtype;
    r.position = static_cast<int>(at);
    r.value = [&g, c = *c, id](Builder& b, int m, int l) { return row_value(b, g, c, id, m, l); };
    s.row_outputs.push_back(std::move(r));
  }
  NodeId product = -1;
  // A key tile's offsets held through the loop (ScoreChain::iota) take block_n / 4 registers a
  // thread: at 128 keys ALiBi spilled 504 bytes beside S and O; at 64 none on wgmma, 12 on
  // mma.sync (sm_80, at 255 registers).
  const bool offsets_fit = s.wgmma && s.block_n <= 64;
  if (const std::optional<double> scale = positive_scale(g, *c, &product)) {  // X = masks(S)·scale: see online()
    s.scale = *scale;
    if (product != c->x()) {
      s.scores = scores_of(g, *c, s.block_m, s.block_n, offsets_fit, product);
      s.scores_unscaled = true;
    }
  } else {
    s.scores = scores_of(g, *c, s.block_m, s.block_n, offsets_fit);
  }
  s.shift = [&](Builder& b, int m) {
    std::map<NodeId, int> val = {{c->row_max, m}};
    return evaluate(b, g, c->shift_ops, val, c->shift_ops.empty() ? c->row_max : c->shift_ops.back(), false);
  };
  s.divisor = [&](Builder& b, int l) {
    std::map<NodeId, int> val = {{c->row_sum, l}};
    return evaluate(b, g, c->divisor_ops, val, c->divisor_ops.empty() ? c->row_sum : c->divisor_ops.back(), false);
  };
  return attention_program(s, k.name);
}

}  // namespace tilefuse::tir
