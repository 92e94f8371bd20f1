#pragma once
// Contraction chains: how fusion finds attention in a plain graph (DESIGN.md, "Contraction
// chains"). A matmul S = Q·Kᵀ (contracting d) reaches O = P·V (contracting S's last axis n) only
// through
//   X = f(S)              elementwise ops whose other operands are constants (a scale, a
//                         softcap's tanh), or masks and biases computed from iotas along the
//                         queries and the keys (causal: where(i_q + offset ≥ i_k, s, −inf),
//                         windows: where(i_q − i_k < W, s, −inf)) and from tensors that
//                         broadcast into the scores (ALiBi's slope per head, a padding mask
//                         per key, a bias per query and key, a length per sequence)
//   c = shift(max_n X)    the row max (a reduction over n, keepdim), or softmax's guarded form
//                         where(max > −inf, max, 0): c is the max wherever that is finite
//   E = exp(X − c)
//   P = E / h(Σ_n E)      the row sum (keepdim) through row ops with constants (max(Σ, 1))
//   O = cast(P)·V         P maybe cast to V's dtype
// and no node but O is used outside the chain. Then one loop over n tiles computes O: the max is
// a running max m, the sum an online sum rescaled by α = e^(m − c(m')) when the max grows, P·V
// an online vector sum with the same factor, and the division by h(Σ) sinks below P·V (it is per
// row, and the contraction runs along the row). The scores never reach memory. Anything else is
// left to the ordinary decisions, which write the scores; the match says why it failed.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"

namespace tilefuse {

struct ContractionChain {
  NodeId scores = -1;               // S = Q·Kᵀ
  std::vector<NodeId> score_ops;    // X = f(S), in order (empty: X is S)
  std::vector<NodeId> index_ops;    // f's masks and biases: iotas and what is computed from them
                                    // (with constants and `tensors`), in order
  std::vector<NodeId> tensors;      // tensors f reads (a bias, a mask, lengths): each broadcast into
                                    // the scores, read from memory a tile at a time
  NodeId row_max = -1;              // max_n X
  std::vector<NodeId> shift_ops;    // c from the max, in order (empty: c is the max)
  NodeId shifted = -1, exp = -1;    // X − c, its exp E
  NodeId row_sum = -1;              // Σ_n E
  std::vector<NodeId> divisor_ops;  // h(Σ), in order (empty: the sum itself)
  // Elementwise ops outside the softmax computed only from row values and constants, in order —
  // a log-sum-exp L = c + ln h, which a training forward saves for its backward: one value a row,
  // computed after the loop and written beside O instead of by a kernel of their own.
  std::vector<NodeId> row_ops;
  NodeId probs = -1, cast = -1;     // P = E / h(Σ); P in V's dtype, or -1
  NodeId output = -1;               // O = P·V
  NodeId q = -1, k = -1, v = -1;
  int64_t batch = 1, n_q = 0, n_kv = 0, d = 0;  // batch: the product of Q's leading axes
  // Q's leading (batch, head) axes, and K's and V's: each Q's or 1 — K/V heads broadcast over
  // query heads (grouped-query attention: K [B, Hkv, 1, n, d] for Q [B, Hkv, G, n, d]; MQA: one
  // K/V head for all).
  Shape lead, kv_lead;
  // Set when X is where(i_q + offset ≥ i_k, ·, −inf) (a causal mask): query i sees no key past
  // i + offset, so the kernel skips the key tiles wholly past its block's last query.
  std::optional<int64_t> causal_offset;
  NodeId causal_mask = -1;  // the where(condition, ·, −inf) it was read from
  // Set when X is where((i_q + c) − i_k < W, ·, −inf) (a sliding window): query i sees no key
  // before i + window_offset, so the kernel skips the key tiles wholly before its block's first
  // query's window, and the mask's where passes the scores on in tiles inside every row's window.
  std::optional<int64_t> window_offset;
  NodeId window_mask = -1;
  // Set when X is where(i_k < T, ·, −inf) (maybe inside a causal mask's where) with T computed
  // from `tensors` broadcast along the queries and the keys (a length per sequence) and
  // constants: each block ends its loop at the key tile holding key ⌈T⌉ − 1 of its head — one
  // compiled kernel serves every length. key_limit is T; key_limit_ops the index_ops computing
  // it; key_limit_tensors the tensors they read.
  NodeId key_limit = -1;
  std::vector<NodeId> key_limit_ops, key_limit_tensors;
  NodeId x() const { return score_ops.empty() ? scores : score_ops.back(); }
  // One value per query row the kernel can write beside O (from its final running max and sum):
  // the max, the shift's ops, the sum, the divisor's ops and the row ops — a log-sum-exp's parts
  // and the log-sum-exp.
  bool row_value(NodeId n) const {
    return n == row_max || n == row_sum || std::count(shift_ops.begin(), shift_ops.end(), n) ||
           std::count(divisor_ops.begin(), divisor_ops.end(), n) ||
           std::count(row_ops.begin(), row_ops.end(), n);
  }
  std::vector<NodeId> nodes() const;  // every node, sorted
};

// X's masks: X = where(m₁, where(m₂, …, −inf), −inf), outermost first, each where one of
// `score_ops` (the scores flow through its second operand; its condition is its first).
std::vector<NodeId> score_masks(const Graph& g, NodeId x, const std::vector<NodeId>& score_ops);

// Whether node `id` is the constant v.
bool is_constant_value(const Graph& g, NodeId id, double v);
// Whether `id` is computed without the scores: from iotas along its last two axes (queries,
// keys), constants and tensors computed outside (`leaves`, read from memory) — a mask or bias
// the kernel computes from its tiles' positions and tiles of those tensors; its nodes (not the
// constants, not the tensors) go into `nodes`.
bool index_only(const Graph& g, NodeId id, std::set<NodeId>* nodes, std::set<NodeId>* leaves);

// A mask condition i_q + c ≥ i_k (or i_k ≤ i_q + c), c a whole number from 0 to n_kv − 1: c.
std::optional<int64_t> causal_mask_offset(const Graph& g, NodeId condition, int64_t n_kv);

// Whether `id` is an iota along the queries (from_end 2) or the keys (1) of the scores.
bool iota_along(const Graph& g, NodeId id, int from_end);

// Whether score op `tanh` (an f32 tanh of chain c) may be computed with an absolute error bound
// instead of a relative one (math::tanh_absolute: ≤ 2^-20). P is rounded to 16 bits before P·V,
// and an absolute error δ in X multiplies P's term by e^δ: a relative error δ. The tanh's result
// must reach X only through adds, subtractions, negations, masks' wheres and products or
// quotients by constants, whose factors together are at most 256 — so δ ≤ 2^-12, an eighth of
// P's rounding (a softcap's c·tanh(s/c) up to c = 256).
bool absolute_error_suffices(const Graph& g, const ContractionChain& c, NodeId tanh);

// The chain whose O is matmul `out`, or nullopt. `why` is set when a softmax's probabilities
// reach `out` (an attention's shape) but something breaks the rule; left empty when `out` is no
// such matmul at all.
std::optional<ContractionChain> match_contraction_chain(const Graph& g, NodeId out, std::string* why);

// An attention kernel's O: the last of its matmuls (its other outputs are row values).
NodeId attention_output(const Graph& g, const Kernel& k);

// Kernel k (nodes, inputs, outputs set) as one attention kernel writing only O: its kind,
// domain, schedule, registers and cost; or false with the reason in `why`. hints.pack_heads asks
// for a group's query heads in one block where the chain allows it (heads_per_group).
bool attention_kernel(const Graph& g, Kernel& k, const DeviceProfile& p, const ScheduleHints& hints, std::string* why);

// Blocks per SM that the attention kernel asks of ptxas (and split-KV takes): two of one
// warpgroup (64 query rows), one of two.
constexpr int attention_blocks_per_sm(int64_t block_m) { return block_m > 64 ? 1 : 2; }

// Query heads per K/V head when K's and V's head axes `kv_lead` are q's `lead` with a trailing run
// of them broadcast (1): that run's product, the query heads whose rows are consecutive for one
// K/V head; 1 when K/V are broadcast along an axis before one they have (or not at all).
int64_t trailing_broadcast_group(const std::vector<int64_t>& lead, const std::vector<int64_t>& kv_lead);

// The query heads whose rows one attention block can hold (1 where it cannot): with one query
// per head, the group of query heads that share a K/V head — K's and V's heads broadcast along a
// trailing run of Q's head axes, so that a K/V head's query rows are consecutive — where the
// length that ends the loop (a key limit) is the same for the whole group.
int64_t heads_per_group(const Graph& g, const ContractionChain& c);

// An attention kernel's cost: its bytes at copy bandwidth against its two products on mma.sync
// plus the softmax's instructions per score (not overlapped on this schedule), and a launch.
void estimate_attention_cost(const Graph& g, Kernel& k, const DeviceProfile& p);

// Whether an overlapped TMA attention kernel pins P·V's wait below the softmax (dot_wait …
// pinned): where its cost has the softmax over 1.25× the products.
bool attention_pins_pv_wait(const Kernel& k);

// The persistent causal grid's static order: position t of the order (block b takes positions b,
// b + blocks, …) → its head and query tile. Under the causal triangle each head's tiles pair up —
// its j-th longest (the last queries) with its j-th shortest — and waves of `blocks` pairs take
// 2 × blocks positions, the pairs' long tiles first, so that in each full wave every block takes
// a long tile and then its complement (a last, partial wave's short tiles go round the blocks as
// they come): the blocks' work stays level, and the heads in flight are the few of one
// wave, their K and V in L2 (with groups of 8 heads each longest first, blocks drifted apart over
// ~30 heads, 60 MB of K and V: bench/NOTES.md). An odd count's middle tiles come after all the
// pairs. A sliding window's tiles, of nearly equal work and a window's keys each, keep groups of 8
// heads, each group's tiles longest first.
struct QueryTilePlace {
  int64_t head, tile;
};
QueryTilePlace causal_tile_place(int64_t t, int64_t m_blocks, int64_t heads, int64_t blocks, bool window);

}  // namespace tilefuse
