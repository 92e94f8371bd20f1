#pragma once
// The attention loop in Tile IR v2: O = softmax(Q·Kᵀ·scale)·V with the scores never leaving
// registers (FlashAttention-2 on mma.sync m16n8k16). Each block holds BM query rows of one
// (batch, head) — a warp per 16 rows, its Q fragments loaded once — and loops over the keys BN
// at a time, K and V tiles staged through two-stage shared rings (cp.async), carrying the output
// accumulator O, the running row max m and the running row sum l:
//
//   s = Q·Kⱼᵀ·scale (masked to −inf past the last key);  m' = max(m, rowmax s)
//   c = m' (0 while m' is −inf);  α = e^(m − c);  p = e^(s − c)
//   (p as 2^fma(Q·Kⱼᵀ, scale·log2 e, −c·log2 e), rowmax s as scale·rowmax Q·Kⱼᵀ, where the
//   scale is positive and nothing but masks to −inf is applied to the scores)
//   l' = l·α + rowsum p;  O' = O·α + bf16(p)·Vⱼ  (p stays in registers: the accumulator's
//   layout of two 8-column pieces is the next dot's A fragment — `convert`)
//
// and stores O / l (0 for a row with no finite score, as softmax gives). The fusion pass makes
// such kernels from contraction chains (compiler/fusion/contraction_chain.h), with the chain's
// own f(S), shift and divisor; tests build them from a shape.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/fusion/plan.h"
#include "compiler/graph/dtype.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

struct AttentionShape {
  int64_t batch_heads = 1;  // B·H: q and o are [batch_heads, n_q, d], k and v [batch_heads, n_kv, d]
  // Broadcast K/V heads (GQA, MQA): q's leading axes and k's and v's (each q's or 1), whose
  // product is batch_heads and k's and v's count of heads; empty: k and v have q's heads.
  std::vector<int64_t> lead, kv_lead;
  int64_t n_q = 0, n_kv = 0, d = 64;
  DType dtype = DType::BF16;  // of q, k and v: bf16 or f16
  std::optional<DType> out_dtype;  // of o (default: the inputs')
  double scale = 0.125;
  int block_m = 64, block_n = 64;  // query rows per block (16 per warp), keys per loop step
  // Both products on warpgroup MMA (sm_90a): Q·Kᵀ with Q's fragments and P·V with P's from
  // registers, K and V read from their rings by wgmma (the head dimension padded to 64 or more).
  bool wgmma = false;
  // On wgmma: each step starts S = Q·Kⱼᵀ and the previous step's P·V together, and runs its
  // softmax while P·V is in flight (FlashAttention-3's overlap within a warpgroup); the K and V
  // tiles through three stages then, a stage refilled once the P·V that read it is done.
  bool overlap = false;
  // Overlapped on TMA: P·V's wait pinned below the softmax (dot_wait … pinned), so that ptxas
  // does not move it up to write the next P's fragments early — the softmax then runs under P·V
  // in the SASS too, at a fence's cost (chosen where the softmax outweighs the products).
  bool pin_pv_wait = false;
  // On wgmma, warp-specialized: a producer warpgroup's one thread copies each key tile's K and V
  // by TMA into rings of three stages (two past d 128) with a full and an empty mbarrier each,
  // while the block's warpgroups (the consumers) wait for a stage to be full, run the step on it
  // and release it — no thread copies or waits at a block barrier in the loop. Q waits in a ring
  // of its own, copied there by the producer too (unless the rows are several heads'), S's A
  // operand read there by wgmma, released once the tile's last S is done.
  bool tma = false;
  // On TMA without split keys or a key limit, > 0: a persistent grid of this many blocks, block
  // b taking query tiles b, b + persistent_blocks, … (causal: in causal_tile_place's order,
  // compiler/fusion/contraction_chain.h), its rings' stages following on from tile to tile, so
  // that the producer fills the next tile's first stages while the consumers finish this one's.
  int64_t persistent_blocks = 0;
  // On TMA: the two consumer warpgroups issue each step's products in turns — one waits until
  // the other has issued its own — so that one's softmax runs while the other's products hold
  // the tensor cores (FlashAttention-3's ping-pong).
  bool warpgroup_turns = false;
  // The running max raised lazily (FlashAttention-4's rescale): a row's exponent's shift u stays
  // where it is until the row's max passes it by more than 8·ln 2 (its terms then at most 2⁸), and
  // O and l are rescaled only when it moves — by a branch each warp skips where none of its rows'
  // shifts moved (Builder::lazy_rescale), which after a row's first tiles is nearly every step.
  // After the loop O and l are rescaled once to the exact max's shift. (Planned on TMA only:
  // TileSchedule::lazy_rescale.)
  bool lazy_rescale = false;
  // Query heads whose rows a block holds (n_q 1, K/V heads broadcast along a trailing run of
  // `lead`: a K/V head's `group` query heads are consecutive rows): blocks go over the
  // batch_heads / group K/V heads, every row's query position is 0, K and V are read once.
  int64_t group = 1;
  // > 1: the key tiles split into this many ranges, a block each (split-KV); each writes its
  // unnormalized O, m and l to the workspace, and the last block of a query tile to arrive merges
  // them (O = Σ Oₛ·e^(mₛ − c), l = Σ lₛ·e^(mₛ − c), c the shift of max mₛ) and writes the outputs.
  int64_t kv_splits = 1;
  // Query i sees no key past i + causal_offset (the scores' mask says so): each block's loop ends
  // at the key tile of its last query's last key.
  std::optional<int64_t> causal_offset;
  // Query i sees no key before i + window_offset (a sliding window's mask): each block's loop
  // starts at the key tile of its first query's first key, and the tiles before the one of its
  // last query's first key are masked (`scores` told so).
  std::optional<int64_t> window_offset;
  // A key limit per head (a sequence's length, read at run time): given a loader of `tensors`'
  // one-element tiles at the block's head, the limit as a one-element tile; the block's loop ends
  // at the key tile holding key ⌈limit⌉ − 1.
  using TensorLoader = std::function<int(size_t tensor)>;
  std::function<int(Builder&, const TensorLoader&)> key_limit;
  // The parameters: q, k, v (in the order `position` gives them: position[0] is q's) and o.
  std::array<std::string, 4> names = {"q", "k", "v", "o"};
  std::array<int, 3> position = {0, 1, 2};
  // Tensors the scores' function reads (masks, biases, lengths), broadcast into the scores
  // [lead…, n_q, n_kv]: its extents there, 1 where it is broadcast (`shape`, as many as lead has
  // plus two). Each key step reads a score tile's worth of each, in the accumulator's layout.
  struct Tensor {
    std::string name;
    DType dtype = DType::F32;
    int position = 3;
    std::vector<int64_t> shape;
  };
  std::vector<Tensor> tensors;
  // Row values written beside o, one per query row ([batch_heads·n_q, 1]): the chain's max, its
  // shift, its sum or divisor — what a log-sum-exp is made of — each computed from the final
  // running max m and sum l. `position` orders the outputs (o's is o_position).
  struct RowOutput {
    std::string name;
    DType dtype = DType::F32;
    int position = 1;
    std::function<int(Builder&, int m, int l)> value;
  };
  std::vector<RowOutput> row_outputs;
  int o_position = 0;
  // Row values and scores as the kernel computes them (f32 tiles in the accumulator layout),
  // each given a builder and its argument: X from the raw scores S (default S·scale), given also
  // the tile's first query (within its head; −1 where every row is query 0: heads packed, group
  // > 1) and first key (indices, for masks), the tiles of `tensors` and whether the causal or the
  // window's mask may reach the tile (false: it is wholly below the diagonal and inside every
  // row's window, both masks true throughout); the
  // shift c from the running max m, equal to m wherever m is finite (default: m; the kernel
  // takes 0 where m is −inf whatever the shift); the divisor from the final sum (default: 1
  // where the sum is 0).
  // X as `x` and, where `row` ≥ 0, X = x + row with `row` a [rows, 1] or one-element tile (this
  // key tile's): X's part constant along the keys, which cancels in P — the kernel adds it to the
  // tile's row max and takes it from the exponent's shift (a value a row, not a score).
  struct ScoreTile {
    int x = -1, row = -1;
  };
  using RowFn = std::function<int(Builder&, int)>;
  using ScoresFn = std::function<ScoreTile(Builder&, int scores, int query0, int key0,
                                           const std::vector<int>& tensors, bool masked)>;
  ScoresFn scores;
  // `scores` gives X / scale, not X: X is its value times the positive `scale` (masks where(m, ·,
  // −inf) over S·scale, applied to S itself), which the kernel folds into the exponent as it does
  // without a scores function.
  bool scores_unscaled = false;
  RowFn shift, divisor;
};

// Throws Error naming what is unsupported (d other than 16, 32, 64, 128, 256; f32; tiles).
Program attention_program(const AttentionShape& s, const std::string& name = "attention");

// The program of an attention kernel of a plan (ScheduleKind::Attention): its contraction
// chain's f(S), shift and divisor evaluated on the kernel's tiles.
Program attention_kernel_program(const Graph& g, const Kernel& k);

}  // namespace tilefuse::tir
