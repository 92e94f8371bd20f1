#pragma once
// Tile parameters of a kernel: the schedule half of the algorithm/schedule split.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/fusion/device_profile.h"
#include "compiler/graph/graph.h"

namespace tilefuse {

// The head dimension as an attention kernel's rings and output accumulator hold it: the power of
// two at or above d, at least 16 (the rings' swizzle takes a power of two of 16-byte chunks per row).
inline int64_t padded_head_dim(int64_t d) {
  int64_t p = 16;
  while (p < d) p *= 2;
  return p;
}

// A kernel iterates over its domain viewed as rows × cols (adjacent dimensions with the same
// broadcast pattern in every operand are collapsed; cols is the innermost; a row-reduction
// kernel's cols are exactly its reduced axes). A block of thread_rows × threads_per_row threads
// covers a tile of tile_rows() × tile_cols(); each thread owns rows_per_thread rows and, in each,
// chunks_per_thread vectors of vec contiguous columns, threads_per_row vectors apart (so a warp's
// accesses are contiguous). A pointwise tile has one chunk per thread, and an operand broadcast
// along rows (a bias) is loaded once per thread and reused for all its rows. A row-reduction
// tile spans whole rows, held in registers, reduced with warp shuffles and shared memory.
// A row longer than one block should hold is split over a cluster of cluster_blocks blocks (the
// grid's column blocks, co-scheduled on one GPC): each holds its part in registers and the
// partial reductions meet in distributed shared memory, so the row is still read once.
// A staged schedule (stages > 0) is persistent: the grid holds as many blocks (clusters) as fit
// on the device at once, each walks rows grid-stride, and its part of the rows ahead arrives in
// shared memory by bulk copies, `stages` rows deep, while it reduces and writes the current one
// from registers — so no SM waits for a row between rows. Blocks of one (claims_rows()) take
// their rows from a counter in global memory, one at a time, so an SM that runs slower than its
// peers takes fewer rows and all finish within a row of each other; clusters take rows
// grid-stride (their blocks must agree on the row).
// A split schedule (split_blocks > 1) is staged too, but a row's parts are tasks for any blocks
// of the persistent grid rather than for one cluster: each block reduces its part to a (max,
// sum) pair, publishes it in global memory, and writes the part one task later, once every part
// of the row has published — so rows of any length use every SM, the last round is a round of
// parts rather than of rows, and no block waits for its peers.
struct TileSchedule {
  Shape dims;  // collapsed domain; dims.back() is cols
  // A flat pointwise schedule (non-empty): the collapsed domain, whose rows are not a multiple of
  // the vector width, run over its elements in order as `dims` = [N / cols, cols], so that the
  // operands that span it are read in 16-byte vectors whatever the row width; the others
  // (broadcast along some of these dimensions) are indexed element by element.
  Shape elem_dims;
  int64_t rows = 1, cols = 1;
  int vec = 1;  // elements per vector access along cols
  // Windowed rows (a row kernel held in registers whose width is not a multiple of the vector
  // width): each row is read as the vec-aligned vectors that overlap it, starting at the aligned
  // element at or before its first, so the tensors laid out like the domain move in 16-byte
  // vectors whatever the width; the window's elements outside the row are masked in registers
  // and not stored (the vectors at the row's ends are written element by element).
  bool window = false;
  int threads_per_row = 1;
  int thread_rows = 1;
  int rows_per_thread = 1;
  int chunks_per_thread = 1;
  int64_t col_iters = 1;      // > 1: a row too long for registers, visited in column tiles by a loop
  int cluster_blocks = 1;     // > 1: the col_blocks() blocks of a row form one thread-block cluster
  // Rows a cluster holds: each pass over the row one exchange of the blocks' values,
  // an online sum of exp(u − c(max)) exchanged with its max and each block's sum rescaled
  // (ScheduleHints::cluster_online); otherwise an exchange per reduction.
  bool cluster_online = false;
  // Rows a block holds (or its parts of a cluster's, with cluster_online) over two or
  // more whole warps: each pass over the row one block barrier — each warp reduces its part, an
  // online sum of exp(u − c(max)) with the warp's max, then the warps' values are gathered into
  // every warp and combined there, each warp's sum and terms rescaled to the row's max
  // (ScheduleHints::block_online); otherwise a barrier per reduction.
  bool block_online = false;
  // Staged rows: each stage refilled right after its reads, behind a block barrier
  // of its own (ScheduleHints::refill_at_read), not at the first reduction's barrier.
  bool refill_at_read = false;
  // Split rows: each task's loop iteration fetches the pending task's parts' words at its top and
  // gathers them behind the warps' gather's barrier (ScheduleHints::fetch_parts_early), not
  // behind a barrier of their own after the publish (pipeline_part_gathers).
  bool fetch_parts_early = false;
  int min_blocks_per_sm = 0;  // > 0: registers are capped so that this many blocks fit on an SM
  int stages = 0;             // > 0: persistent, rows prefetched into shared memory this deep
  int64_t stage_bytes = 0;    // shared memory of one stage: the block's part of every staged row
  int split_blocks = 1;       // > 1: the col_blocks() parts of a row are tasks of a persistent grid
  // Column reductions: the domain is [outer, rows, cols] with rows reduced. Each block takes a
  // tile of columns and a part of the rows (split_blocks parts of split_rows rows), looping over
  // them tile_rows() at a time; the parts meet in the workspace, where the last block of a
  // column tile to finish adds them up.
  bool reduces_columns = false;
  int64_t outer = 1;
  int64_t split_rows = 0;
  int partial_sums = 1;  // the kernel's reductions: each has its parts in the workspace
  // Matmul ([batch, m, k] · [batch, k, n]): each block computes a block_m × block_n tile of the
  // product, its warps_m × warps_n warps each a (block_m / warps_m) × (block_n / warps_n) piece
  // in mma.sync m16n8k16 fragments, in a loop over k block_k at a time; the epilogue runs on the
  // accumulator's fragments. (threads_per_row holds the block's threads.) Staged (stages > 0):
  // operand tiles pass through shared memory, `stages` k steps deep, stage_bytes each.
  // Attention (contracts too): each block takes block_m query rows of one of `batch` heads
  // (m queries, n keys, head dimension k) and loops over the keys block_n at a time, K and V
  // tiles through `stages` shared-memory stages; 4 warps of 16 rows, warps_n 1.
  // A causal mask (causal_offset ≥ 0: query i sees no key past i + causal_offset) ends each
  // block's loop at the key tile holding its last query's last key.
  bool contracts = false, attention = false;
  // The attention backward (contracts too; fusion/attention_backward.h): 1, dK and dV — each block
  // block_m keys of one of `batch` heads (m keys, n queries, head dimension k), looping over the
  // queries block_n at a time; 2, dQ — block_m queries, looping over the n keys; 3, all three —
  // 1's blocks, each adding its dS·K into dQ's f32 sums in the workspace. 0: none.
  int attention_backward = 0;
  int64_t causal_offset = -1;
  // A sliding window (query i sees no key before i + window_offset) starts each block's loop at
  // the key tile holding its first query's first key.
  std::optional<int64_t> window_offset;
  bool key_limit = false;  // each block's loop also ends at its head's length, read at run time
  // 64 keys a step rather than 128 because f(S) adds a term of its own across queries and keys
  // (adds_a_score_tile; for the report).
  bool keys_for_score_tile = false;
  // Query heads whose rows one block holds (GQA and MQA with one query per head: the query heads
  // of a K/V head, which then is read once, not once per query head). batch counts K/V heads and
  // m their queries (heads_per_block of them) then.
  int64_t heads_per_block = 1;
  // > 1: the keys split into this many ranges of whole key tiles, a block each (split-KV: more
  // blocks where heads × query tiles are fewer than the SMs, as in decode); each block writes its
  // unnormalized output, max and sum to the workspace, and the last of a tile's blocks to arrive
  // merges them and writes O.
  int64_t kv_splits = 1;
  int64_t block_slots = 0;  // split-KV chosen for the device: the block slots the splits fill (for the report)
  // An in-place write (ScheduleKind::Write): `rows` slices of `cols` elements, each a row of
  // blocks (col_blocks() of them), stored at the row of the cache its position gives.
  bool writes_in_place = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int block_m = 64, block_n = 64, block_k = 16;
  int warps_m = 2, warps_n = 2;
  int group = 1;  // tile rows taken together (ScheduleHints::gemm_group)
  // Matmul on warpgroup MMA (sm_90a wgmma) straight from the shared-memory stages: warps_m warps
  // of 16 rows (block_m / 64 warpgroups), each thread holding its rows' block_n columns; k in
  // steps of 64 (one 128-byte swizzle panel per operand row). Attention: both products on wgmma,
  // Q and P as register operands, K and V from the rings.
  bool wgmma = false;
  // On wgmma, warp-specialized: a producer warpgroup's one thread copies the operand tiles into
  // the rings by TMA (tensor maps, mbarriers full and empty per stage) while the warpgroups of
  // block_threads() consume them; the launch has 128 threads more.
  bool tma = false;
  // Attention on wgmma: each step's softmax run while the previous step's P·V is in flight
  // (three K/V stages; AttentionShape::overlap).
  bool overlap = false;
  // TMA attention: the two consumer warpgroups issue each step's products in turns (ping-pong;
  // AttentionShape::warpgroup_turns).
  bool warpgroup_turns = false;
  // Attention: the running max raised lazily, O rescaled only when it moves by more than 8·ln 2
  // (AttentionShape::lazy_rescale).
  bool lazy_rescale = false;
  // TMA matmuls: the epilogue's outputs (16- or 32-bit, rows of whole 16 bytes) stored by TMA,
  // each 128-byte panel of columns written from the accumulators into one of two shared-memory
  // slots per consumer group and copied out by the group's first thread while the consumers go
  // on (staging_bytes() of shared memory, set aside from the stages).
  bool tma_store = false;
  // TMA stores: the epilogue computed on the staged output a chunk of 32 rows at a time in a
  // loop, not on every accumulator element in straight-line code (Opcode::TmaStore's region):
  // LLVM compiles one chunk's chain instead of one per element.
  bool rolled_epilogue = false;
  int64_t staging_bytes(int groups) const { return tma_store ? int64_t{2} * 128 * block_m * groups : 0; }
  // TMA matmuls and attention: > 0, a persistent grid of this many blocks (one per SM) looping
  // over the tiles (pid, pid + tile_blocks, …): the producer fills the next tile's stages during
  // a tile's epilogue. 0: a block per tile.
  int64_t tile_blocks = 0;
  // Attention on a persistent grid: the most loaded block's work against the mean under the
  // grid's static order of query tiles (key steps plus a tile's start), as the planner weighed
  // it; 0 where no persistent grid was weighed.
  double tile_balance = 0;
  // Causal attention (no window) with an odd count of 3 or more query tiles a head: a
  // persistent grid's pairs of a long and a short tile leave each head's middle one to a round
  // after them.
  bool middle_tiles_last() const {
    return causal_offset >= 0 && !window_offset && m_blocks() > 1 && m_blocks() % 2 == 1;
  }
  // The persistent grid balanced the blocks and would have been chosen but for
  // middle_tiles_last() (the report says so).
  bool middle_tiles_declined = false;
  int64_t tiles() const { return batch * m_blocks() * n_blocks(); }
  // Persistent TMA matmuls: 2 (ping-pong) runs two groups of block_threads() consumers, each on
  // tiles of its own (the block's tiles alternately), their k loops taking turns so that one
  // group's epilogue runs under the other's k loop; 1: the consumers share each tile.
  int consumer_groups = 1;
  // Matmul operands (A, B) copied, before the kernel, into rows of this many elements — their
  // own, then zeros — because their rows as stored are not whole 16-byte chunks, which the staged
  // schedules copy (cp.async): the kernel reads the copy. 0: read in place.
  int64_t operand_pitch[2] = {0, 0};
  int64_t operand_run[2] = {0, 0};  // their stored rows' length
  bool copies_operands() const { return operand_pitch[0] > 0 || operand_pitch[1] > 0; }
  // Matmul split-K: each tile's k steps split into k_splits ranges of k_steps_per_split steps
  // (the last may be shorter), a block each; each block stores its f32 partial product in the
  // workspace, and the last of a tile's blocks to arrive sums them and runs the epilogue.
  int64_t k_splits = 1;
  int64_t k_steps() const { return (k + block_k - 1) / block_k; }
  int64_t k_steps_per_split() const { return (k_steps() + k_splits - 1) / k_splits; }
  int64_t m_blocks() const { return (m + block_m - 1) / block_m; }
  int64_t n_blocks() const { return (n + block_n - 1) / block_n; }
  // A matmul's epilogue operands loaded before each tile's k loop and held through it, their
  // latency under the product: where the accumulator leaves room (at most 64 f32 a thread: at
  // 128×256 a bias held through the loop spilled 144 bytes), without split-K or a rolled epilogue.
  bool loads_epilogue_early() const {
    return k_splits <= 1 && !rolled_epilogue && block_m * block_n / block_threads() <= 64;
  }

  int block_threads() const { return threads_per_row * thread_rows; }
  int64_t tile_rows() const { return int64_t{thread_rows} * rows_per_thread; }
  int64_t iter_cols() const { return int64_t{threads_per_row} * vec * chunks_per_thread; }
  int64_t tile_cols() const { return iter_cols() * col_iters; }
  int64_t row_blocks() const { return (rows + tile_rows() - 1) / tile_rows(); }
  // The columns the tiles must cover: a windowed row starts up to vec − 1 elements into its
  // first vector.
  int64_t covered_cols() const { return window ? (cols + 2 * int64_t{vec} - 2) / vec * vec : cols; }
  int64_t col_blocks() const { return (covered_cols() + tile_cols() - 1) / tile_cols(); }
  // Blocks the tiles need; a staged (persistent) kernel launches fewer and loops.
  int64_t grid() const {
    if (attention || attention_backward > 0)
      return tile_blocks > 0 ? tile_blocks : batch * m_blocks() * kv_splits;
    if (contracts) return tile_blocks > 0 ? tile_blocks : tiles() * k_splits;
    return reduces_columns ? outer * col_blocks() * split_blocks : row_blocks() * col_blocks();
  }
  int64_t dynamic_shared_bytes() const { return stages * stage_bytes; }
  // A looped row split into col_blocks() parts of col_iters column tiles, a block each, meeting in
  // the workspace (Tile IR v2's row_loop).
  bool looped_parts() const { return col_iters > 1 && col_blocks() > 1 && !reduces_columns && !contracts; }
  bool claims_rows() const { return stages > 0 && split_blocks == 1 && cluster_blocks == 1 && !contracts; }
  // Global memory the kernel keeps between launches (codegen): split rows, each part's (max,
  // sum) pair as two 8-byte words; claimed rows, the row counter and the count of finished blocks.
  // Column reductions split over blocks: each part's f32 sums, then a u32 count of the parts
  // done per column tile (the last block of a tile zeroes it again).
  int64_t workspace_bytes() const {
    if (attention_backward == 3)  // dQ's f32 sums of every query row, a counter per K/V head
      return (batch * n * k + batch) * 4;
    if (attention && kv_splits > 1)  // each split's rows of O (its padded width), m and l; a counter per tile
      return (kv_splits * batch * m * (padded_head_dim(k) + 2) + batch * m_blocks()) * 4;
    if (contracts && k_splits > 1)  // each split's partial product; a counter per tile
      return (k_splits * batch * m * n + batch * m_blocks() * n_blocks()) * 4;
    if (reduces_columns)
      return split_blocks > 1 ? (partial_sums * outer * split_blocks * cols + outer * col_blocks()) * 4 : 0;
    if (looped_parts())  // each part's f32 result of each reduction; a counter per row
      return (partial_sums * rows * col_blocks() + rows) * 4;
    return split_blocks > 1 ? rows * split_blocks * 16 : claims_rows() ? 8 : 0;
  }
  int elems_per_thread() const { return rows_per_thread * vec * chunks_per_thread; }
  // Whether a row or column index (up to the tiles' padded extent) can pass 2^31 − 1: codegen
  // then computes element indices in 64 bits (else 32, which is cheaper).
  bool wide_indices() const {
    if (contracts)
      return batch * std::max(m, k) + block_m + block_k > INT32_MAX || n + block_n > INT32_MAX ||
             k_splits * batch * m * n > INT32_MAX;
    return outer * (row_blocks() * tile_rows()) > INT32_MAX || col_blocks() * tile_cols() > INT32_MAX ||
           int64_t{partial_sums} * outer * split_blocks * cols > INT32_MAX;
  }
  bool exact() const { return !window && rows % tile_rows() == 0 && cols % tile_cols() == 0; }
  std::string describe() const;
};

// Each operand's shape aligned to the schedule's dims: 1 where the operand is broadcast.
// Operands are right-aligned to the domain (numpy). `split` is the first reduced axis of a
// row-reduction domain (no dimension is merged across it), or -1 for a pointwise domain.
std::vector<Shape> operand_views(const TileSchedule& s, const Shape& domain, int split,
                                 const std::vector<Shape>& operands);
// A flat schedule's operands along its domain's collapsed dimensions (s.elem_dims): each one's own
// extents there, 1 where it is broadcast.
std::vector<Shape> element_views(const TileSchedule& s, const Shape& domain, const std::vector<Shape>& operands);
// A column reduction's operands (of domain [P…, R…, C…], axes [split, end) reduced) as
// [rows, cols] views: rows P·R, P or R (or 1) as the operand spans them, cols C or 1.
std::vector<Shape> column_views(const Shape& domain, int split, int end, const std::vector<Shape>& operands);

// Whether an operand view varies along the tile's rows / columns (else it is broadcast).
inline bool view_spans_rows(const Shape& view) { return num_elements(view) != view.back(); }
inline bool view_spans_cols(const Shape& view) { return view.back() != 1; }

// Schedule overrides from the user (0, or -1 where 0 has a meaning of its own: let tilefuse choose).
struct ScheduleHints {
  int block_threads = 0;       // power of two, 32..1024
  int rows_per_thread = 0;     // 1..16
  int max_cluster_blocks = 0;  // 1..16; 1: no clusters (also implied by a device without them)
  int stages = -1;             // rows prefetched into shared memory; 0: none; -1: tilefuse chooses
  int split = -1;              // 0: no split rows (parts meeting in global memory); -1: tilefuse chooses
  // Matmul tiles (staged): block_m × block_n of the product per block of 2 × 4 warps; 0: 128 × 128.
  int gemm_block_m = 0, gemm_block_n = 0;  // 64, 128 or 256
  // Blocks take their tiles in groups of this many tile rows, column by column within a group
  // (blocks running at once then share operand tiles in L2); 1: row by row; 0: tilefuse chooses
  // (8 on wgmma, else row by row).
  int gemm_group = 0;
  // Rows whose width is not a multiple of the vector width, and pointwise domains of an odd
  // element count: 1 reads them as aligned windows (TileSchedule::window), 0 element by element;
  // -1 (the default) windows except rows that read more than one tensor along the row laid out
  // otherwise than the domain (layernorm's w and b), which measured slower windowed.
  int window = -1;
  // 1: attention with one query per head and K/V heads broadcast over a group of query heads
  // (GQA or MQA decode) holds a group's query heads as one block's rows
  // (TileSchedule::heads_per_block), the default; 0: a block per query head.
  int pack_heads = 1;
  // Attention's keys split into this many ranges, a block each, merged by the last (split-KV;
  // TileSchedule::kv_splits); -1: as many as fill the SMs' block slots where the heads and query
  // tiles leave them idle (decode), the default; 0 or 1: none.
  int kv_splits = -1;
  // Matmul tiles on warpgroup MMA (wgmma, sm_90a) where the device has it and the operands allow
  // (16-bit, rows of whole 16-byte chunks): 1 always, 0 never (mma.sync), -1 (the default) where
  // the k loop has at least 3 steps of 64 (choose_matmul_schedule).
  int gemm_wgmma = -1;
  // Attention's two products on warpgroup MMA (wgmma, sm_90a; Q and P from registers, K and V
  // from the rings) where the device has it and the head dimension pads to 64 or more: 1, the
  // default (1.32× mma.sync at B4 H16 N4096 d128, bench/NOTES.md); 0: mma.sync.
  int attention_wgmma = 1;
  // On wgmma, each step's softmax run while the previous step's P·V is in flight (three K/V
  // stages; head dimensions up to 128): 1 always, 0 never (each product waited for where it is
  // issued), -1 (the default) where the products bound the kernel — prefill, not decode
  // (B4 H16 N4096 d128: 1.309 ms against 1.353; decode 2–4% slower; bench/NOTES.md).
  int attention_overlap = -1;
  // TMA attention: the running max raised lazily, O and l rescaled only where a row's max passes
  // the shift its terms use by more than 8·ln 2 (TileSchedule::lazy_rescale; FlashAttention-4's):
  // 1; 0 every step; -1 (the default) but for the overlapped loop with a run-time key limit.
  // Never on cp.async or mma.sync loops, whose Q lives in registers (ptxas clobbered it there:
  // contraction_chain.cpp).
  int attention_lazy_rescale = -1;
  // Query rows per attention block on wgmma: 64 (one warpgroup; two blocks per SM), or 128 (two
  // warpgroups over one K/V ring: each key tile read once for twice the queries; one block per
  // SM); 0: the default (64).
  int attention_block_m = 0;
  // The attention backward's dQ: 1 summed across the key blocks in the dK/dV kernel (one kernel,
  // reduce-adds into an f32 workspace; wgmma, d 64 or 128), 0 its own kernel over the key tiles
  // (deterministic), -1 (the default) whichever the cost model predicts faster.
  int attention_dq_sums = -1;
  // dQ summed across the key blocks by TMA's reductions (cp.reduce.async.bulk from staged f32
  // panels, FlashAttention-3's form) rather than every thread's red.global: 1 where it fits (d
  // 128, 128 keys a block, a query count a multiple of 4); 0 (the default: on an H100 the one
  // kernel so formed took 12.35 ms against the two kernels' 10.81, bench/NOTES.md 2026-12-08).
  int attention_dq_tma = 0;
  // Keys per block of the attention backward's dK/dV kernel on wgmma: 64 (one warpgroup; two
  // blocks per SM) or 128 (two warpgroups sharing each streamed Q and dO stage: half the stream
  // for the same products; one block per SM); 0: the default (64).
  int attention_backward_rows = 0;
  // The attention backward's two kernels on wgmma fed by TMA from a producer warpgroup
  // (AttentionBackwardShape::tma): 1 (the default); 0 every thread's cp.async.
  int attention_backward_tma = 1;
  // Matmul operands whose rows are not whole 16-byte chunks (a K or N not a multiple of 8 in
  // 16-bit): 1 copied first into a padded pitch so that the staged schedules can read them
  // (TileSchedule::operand_pitch); 0 read in place by the direct schedule; -1 (the default)
  // whichever the cost model predicts faster (the copies cost bytes and launches).
  int pitch_copy = -1;
  // Matmul split-K (TileSchedule::k_splits, staged schedules): 0 (the default) where the tiles
  // leave the device idle; 1 never; n > 1: n ranges (at most one per k step).
  int gemm_k_splits = 0;
  // Matmul tiles on wgmma copied into shared memory by TMA from a producer warpgroup
  // (TileSchedule::tma): 1 or -1 (the default), 0 by every thread's cp.async.
  int gemm_tma = -1;
  // TMA matmuls on a persistent grid of one block per SM (TileSchedule::tile_blocks) where the
  // tiles outnumber the SMs: 1 or -1 (the default); 0: a block per tile.
  int gemm_persistent = -1;
  // Persistent TMA matmuls as two consumer warpgroups taking turns on 64-row tiles of their own
  // (TileSchedule::consumer_groups): 1; 0 (the default): both on each 128-row tile.
  int gemm_pingpong = 0;
  // Persistent TMA matmuls in clusters of this many blocks (2, the default, where B is stored
  // along N and the tile has an even count of its 128-byte panels; TileSchedule::cluster_blocks)
  // taking vertically adjacent tiles, B's tile copied once for both (TMA multicast); 1: none.
  int gemm_cluster = 2;
  // TMA matmuls' outputs stored by TMA through shared memory (TileSchedule::tma_store): 1 or -1
  // (the default); 0 by every thread's stores from its accumulators.
  int gemm_tma_store = -1;
  // TMA-stored matmuls with an epilogue: 1 computes it on the staged output in a rolled loop
  // (TileSchedule::rolled_epilogue) wherever it can — one output, its dtype the product's, one
  // consumer group, no split-K; -1 where the epilogue evaluates a transcendental function; 0 (the
  // default) never.
  int rolled_epilogue = 0;
  // Attention on wgmma warp-specialized: 128-row blocks of two consumer warpgroups fed Q, K and
  // V tiles by TMA from a producer warpgroup (TileSchedule::tma, AttentionShape::tma): 1;
  // 0 every thread's cp.async; -1 (the default) TMA where the products bound the kernel
  // (prefill, not decode). (bench/NOTES.md, "Attention's default is FlashAttention-3's".)
  int attention_tma = -1;
  // Keys per attention step (TileSchedule::block_n) at d ≤ 128: 64 or 128; 0 (the default) 128
  // on TMA, 64 otherwise.
  int attention_block_n = 0;
  // TMA attention: the two consumer warpgroups issue their products in turns, so that one's
  // softmax runs under the other's products (FlashAttention-3's ping-pong;
  // TileSchedule::warpgroup_turns): 1; 0 (the default) each as soon as its tile is in (with
  // the softmax overlapped, measured 1–2% faster than turns: bench/NOTES.md).
  int attention_pingpong = 0;
  // TMA attention without split keys on a persistent grid of one block per SM looping over the
  // query tiles (TileSchedule::tile_blocks, AttentionShape::persistent_blocks): 1; 0 a block per
  // query tile; -1 (the default) persistent where its static order of tiles balances the blocks'
  // work within 2% (TileSchedule::tile_balance; bench/NOTES.md, "The attention family"), but not
  // for a causal mask's odd count of 3 or more query tiles a head (middle_tiles_last).
  int attention_persistent = -1;
  // Rows a cluster holds: 1, each pass over the row in one exchange of the cluster's blocks'
  // values — a softmax's max and sum together, each block's sum of exp(x − c(m_b)) and what uses
  // its terms rescaled by exp(c(m_b) − c(M)) to the row's max M; 0, an exchange per reduction, in
  // order; -1, the default: one exchange a pass for a cluster's staged rows and windowed rows of
  // 16-bit elements, an exchange per reduction for the rest. Measured on the H200 (bench/NOTES.md,
  // "One exchange a pass"): the single exchange ran 2–5% slower on f32 and 16-bit softmaxes and
  // f32 vocabulary rows (the rescale's instructions cost more than the cluster barrier it saves),
  // 1.011 of the time of the merged exchange before it against 1.058 for an exchange per
  // reduction on a 50257-wide bf16 log_softmax.
  int cluster_online = -1;
  // Rows a block holds over two or more whole warps, staged or not, and a block's parts of rows a
  // cluster holds with cluster_online 1: 1, each pass over the row in one block barrier — a
  // softmax's max and sum together, each warp's sum of exp(x − c(m_w)) and what uses its terms
  // rescaled by exp(c(m_w) − c(M)) to the row's max M; 0, a barrier per reduction; -1, the
  // default: 1 but for windowed rows (level on the H200 with a barrier per reduction on resident
  // rows, and 1–1.8% faster on claimed f32 rows; windowed rows of several a block spill at their
  // register cap with it). Split rows take one barrier a pass whatever this says.
  int block_online = -1;
  // Rows staged through shared memory: 1, each stage refilled as soon as every thread has read
  // it, behind a block barrier of its own; 0, at the first reduction's block barrier (one barrier
  // fewer a row, the copy issued that much later); -1, the default: 1 for a cluster's rows, 0
  // for rows claimed one a block (level either way on an H100: 0.995–1.004; a cluster's rows
  // refilled at the first reduction ran 1.10× the time of the earlier lowerer that refilled at
  // the read on the H200: bench/NOTES.md, "Staged rows on Tile IR v2").
  int refill_at_read = -1;
  // Split rows: 1, the pending task's parts' words loaded at the top of each task's iteration
  // (their L2 round trip under the stage's wait and the reduction) and gathered behind the
  // warps' gather's barrier, one block barrier a task; 0, gathered after the publish behind a
  // barrier of their own; -1, the default: 1 for 16-bit rows, 0 for f32 (on the H200,
  // softmax_256k_bf16 0.588 ms against 0.609, softmax_256k f32 1.095 against 1.059: there the
  // gather's wait for the other blocks' parts, now before the task's publish, delays every
  // block's; bench/NOTES.md, "The parts' words fetched early").
  int fetch_parts_early = -1;
  // Split rows: the elements each thread holds of a part of 64 KiB (16, 32 or 64; whole
  // vectors); 0, the default: 16 for f32, 32 for 16-bit rows (a 16-bit part is carried to the
  // next task in pairs, its exps made again: ptxas' 64 registers for bf16's 32, 121 for 64). The
  // part's E·T elements take blocks of T threads, as many an SM as the registers allow (about
  // 2E + 32 a thread for f32, E + 32 for 16-bit rows).
  int part_elements = 0;
};

// Chooses vector width and tile for `domain` given every tensor the kernel reads or writes.
TileSchedule choose_pointwise_schedule(const Shape& domain, const std::vector<Shape>& operands,
                                       const std::vector<DType>& dtypes, const ScheduleHints& hints = {});

// Column reduction of `domain` over axes [split, end): blocks of threads along the columns, each
// holding rows_per_thread rows × a vector of columns per loop step (no thread shares a column,
// so the reduction of a tile needs no exchange), the rows split over enough blocks to fill the
// device. `operands` as for choose_row_schedule (aligned to the domain).
std::optional<TileSchedule> choose_column_schedule(const Shape& domain, int split, int end,
                                                   const std::vector<Shape>& operands,
                                                   const std::vector<DType>& dtypes, size_t num_inputs,
                                                   const ScheduleHints& hints, const DeviceProfile& device,
                                                   std::string* why);

// A matmul of [batch, m, k] by [batch, k, n]. On warpgroup MMA where `wgmma` (the device has
// it, the operands are 16-bit) and each operand's rows are whole 16-byte chunks: 128×256 tiles
// of two warpgroups (128×128 where the epilogue reads whole tiles of its own, `tile_operands`,
// which it holds beside the accumulator; the gemm_block hints: 64–256 rows and columns), k in steps of 64
// through 4 stages (the stages hint, at least 3) filled by cp.async. Else on mma.sync: staged
// where the rows allow, 128×128 block tiles of 2×4 warps, k in steps of 32 through a ring of
// `stages` (3; the stages hint, at least 2) shared-memory tiles filled by cp.async and read by
// ldmatrix; otherwise (or with stages 0) 64×64 tiles of 2×2 warps loading their fragments
// straight from global memory, k in steps of 16. `runs` are the operands' contiguous extents (K
// or M for A, N or K for B, as they are stored); an operand whose run is not whole 16-byte chunks
// and whose stored rows may be padded (`copyable`: row-major, or transposed and unbatched) is
// copied into a padded pitch first (TileSchedule::operand_pitch; the pitch_copy hint) where that
// lets the schedule be staged.
// A product of few rows (m ≤ 64: memory-bound whatever the schedule) streams B on mma.sync
// tiles of m rounded up to 16, 32 or 64 rows by 128 columns, staged four steps deep. Where the
// tiles are too few to fill the device's `sm_count` SMs, k is split (TileSchedule::k_splits;
// the gemm_k_splits hint) into ranges of at least 8 steps.
TileSchedule choose_matmul_schedule(int64_t batch, int64_t m, int64_t n, int64_t k, const int64_t runs[2],
                                    const bool copyable[2], bool wgmma, bool tile_operands,
                                    const ScheduleHints& hints, int sm_count);

// Row reduction over axes [split, rank) of `domain`: whole rows held in registers where they fit
// (32 elements per thread at most) — in one block, or split over a cluster of at most the
// device's `max_cluster_blocks` blocks, staged through shared memory where the device has bulk
// copies and the row's parts are whole 16-byte multiples — else one row per block visited by a
// loop over column tiles, or, where the rows are too few to fill the device and the kernel
// allows it (`part_sums`), each row's column tiles split into parts, a block each, whose partial
// reductions meet in the workspace (Tile IR v2).
// `operands` are the kernel's inputs (the first `num_inputs`), then its outputs. `splittable`:
// the kernel's reductions are one max and the online sum of its exps and it writes whole rows,
// so a long row may be split into parts that meet once through global memory. `part_sums`: the
// number of reductions of a kernel with one pass over its rows, no online sum and only per-row
// outputs (0: not such a kernel). `held_tiles`: row-sized values held across a reduction
// (row_tiles_held), and `scratch_regs` the kernel's largest per-element temporaries: they bound
// the blocks an SM that windowed rows ask ptxas for.
// Returns nullopt (with the reason) when the reduced axes do not collapse to one contiguous row
// in every operand.
std::optional<TileSchedule> choose_row_schedule(const Shape& domain, int split,
                                                const std::vector<Shape>& operands,
                                                const std::vector<DType>& dtypes, size_t num_inputs,
                                                bool splittable, int part_sums, int held_tiles,
                                                int scratch_regs, const ScheduleHints& hints,
                                                const DeviceProfile& device, std::string* why);

}  // namespace tilefuse
