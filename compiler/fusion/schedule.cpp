#include "compiler/fusion/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>

#include "compiler/support/error.h"

namespace tilefuse {

// The attention backward's two kernels (or the one that adds dQ up).
static std::string describe_attention_backward(const TileSchedule& s) {
  const bool keys = s.attention_backward != 2, sums = s.attention_backward == 3;
  return fmt::format(
      "attention backward, {}: {} {} per block ({} warps of 16, {}), a loop over {}{} {} {} at a time "
      "recomputing P from the rows' log-sum-exp and carrying {}; the block's {} in shared "
      "memory, "
      "the {} tiles through 2 shared-memory stages ({}, {}: each stage read transposed for the "
      "scores "
      "and as it is for the gradient's product; {} KiB each); {} blocks over {} heads{}{}",
      sums   ? "dK, dV and dQ"
      : keys ? "dK and dV"
             : "dQ",
      s.block_m, keys ? "keys" : "queries", s.block_m / 16,
      s.wgmma ? "wgmma m64nNk16, P and dS from registers" : "mma.sync m16n8k16",
      keys && s.heads_per_block > 1
          ? fmt::format("each of the {} query heads sharing its K/V head's ", s.heads_per_block)
          : "",
      keys ? s.n / s.heads_per_block : s.n, keys ? "queries" : "keys", s.block_n, keys ? "dK and dV" : "dQ",
      keys ? "K and V" : "Q and dO", keys ? "queries' Q and dO" : "keys' K and V",
      s.tma ? "TMA from a producer warpgroup, mbarriers full and empty per stage" : "cp.async",
      s.wgmma ? "read by wgmma" : "ldmatrix", s.stage_bytes / 1024, s.grid(), s.batch,
      s.causal_offset >= 0
          ? fmt::format("; causal (query i sees keys up to i + {}): the tiles past the diagonal "
                        "skipped, the rest masked",
                        s.causal_offset)
          : "",
      !sums ? ""
      : s.tma ? "; each step's dQᵀ = Kᵀ·dSᵀ (dSᵀ through 2 shared stages, each warpgroup 64 of d) staged "
                "as f32 panels and added into dQ's sums in the workspace by TMA (cp.reduce.async.bulk), "
                "the last block of a K/V head converting its query heads' dQ"
              : "; each step's dS·K added into dQ's f32 sums in the workspace (red.global.add), the last "
                "block of a K/V head converting its query heads' dQ");
}

// The attention forward: its loop, rings, grid and masks.
static std::string describe_attention(const TileSchedule& s) {
    return fmt::format(
        "attention: {} query rows per block ({} warps of 16, {}), a loop over {} keys {} at a time{} "
        "carrying the output, the row max and the row sum{}; K and V tiles through {} shared-memory stages "
        "({}, {}; {} KiB each); {} over {} heads{}",
        s.block_m, s.warps_m,
        !s.wgmma ? "mma.sync m16n8k16"
        : s.tma  ? "wgmma m64nNk16 with Q from its shared-memory tile and P from registers"
               : "wgmma m64nNk16 with Q and P from registers",
        s.n, s.block_n,
        s.keys_for_score_tile ? " (not 128: f(S) adds a term of its own across queries and keys, which spilled "
                              "or ran slower at 128)"
                            : "",
        s.lazy_rescale
            ? " (the max raised lazily: O rescaled only where a row's max passes its terms' shift by more "
              "than 8·ln 2)"
            : "",
        s.stages,
        s.tma ? fmt::format("TMA from a producer warpgroup, mbarriers full and empty per stage, the consumers' "
                          "warpgroups releasing each{}",
                          s.warpgroup_turns ? " and issuing their products in turns (ping-pong)" : "")
            : "cp.async",
        s.wgmma ? (s.overlap ? "read by wgmma; the softmax overlapped with the previous tile's P·V"
                         : "read by wgmma")
              : "ldmatrix",
        s.stage_bytes / 1024,
        s.tile_blocks > 0 ? fmt::format("{} persistent blocks taking {} query tiles in turn{}, the most loaded "
                                      "block {:.3f}× the mean",
                                      s.tile_blocks, s.batch * s.m_blocks(),
                                      s.causal_offset < 0 ? ""
                                      : s.window_offset   ? " longest first"
                                                        : " in pairs of a long and a short tile",
                                      s.tile_balance)
        : s.tile_balance > 1.02
            ? fmt::format("{} blocks (a persistent grid's static order would load one block {:.2f}× "
                          "the mean)",
                          s.grid(), s.tile_balance)
        : s.middle_tiles_declined
            ? fmt::format("{} blocks (a persistent grid's pairs would leave each head's middle query "
                          "tile to a last round)",
                          s.grid())
            : fmt::format("{} blocks", s.grid()),
        s.batch,
        (s.heads_per_block > 1
             ? fmt::format(" of K and V, each block the {} query heads that share one (one query each)",
                           s.heads_per_block)
             : "") +
            (s.causal_offset >= 0
                 ? fmt::format("; causal (query i sees keys up to i + {}): key tiles past a block's last "
                               "query skipped",
                               s.causal_offset)
                 : "") +
            (s.window_offset
                 ? fmt::format("; a sliding window (query i sees keys from i {} {}): key tiles before a "
                               "block's first query's first key skipped",
                               *s.window_offset < 0 ? "−" : "+", std::llabs(*s.window_offset))
                 : "") +
            (s.key_limit ? "; a key limit per head read at run time (a length): the tiles past it skipped"
                       : "") +
            (s.kv_splits > 1
                 ? fmt::format("; the keys split {} ways (split-KV), each part's output, max and sum merged "
                               "by the last block of its query tile through the workspace",
                               s.kv_splits)
                 : "") +
            (s.block_slots > 0
                 ? fmt::format("; split-KV for the device: {} blocks of heads and query tiles for its {} "
                               "block slots{}",
                               s.batch * s.m_blocks(), s.block_slots,
                               s.kv_splits > 1 ? fmt::format(", split into {}", s.grid()) : ": not split")
                 : ""));
}

// A matmul: its tiles, k loop, grid and epilogue; operands copied or split.
static std::string describe_matmul(const TileSchedule& s) {
  std::string operand_notes;  // copies into a padded pitch, split-K
  for (int i = 0; i < 2; ++i)
    if (s.operand_pitch[i] > 0)
      operand_notes += fmt::format("; {} copied first into rows of {} elements (its rows of {} are not whole 16-byte chunks)",
                            i == 0 ? "A" : "B", s.operand_pitch[i], s.operand_run[i]);
  if (s.k_splits > 1)
    operand_notes += fmt::format("; k split {} ways ({} steps each): each block's partial product stored in the workspace, "
                          "summed by the last block of its tile, which runs the epilogue",
                          s.k_splits, s.k_steps_per_split());
  if (s.wgmma)
    return fmt::format(
               "matmul tiles of {}×{} ({} warpgroups, each {}×{} in wgmma m64n{}k16 accumulators), k in "
               "steps of {} through {} "
               "shared-memory stages ({}, 128-byte swizzle; {} KiB each) read by wgmma, {}{}",
               s.block_m, s.block_n, s.block_m / 64, 64, s.block_n, s.block_n, s.block_k, s.stages,
               s.tma ? "TMA from a producer warpgroup, mbarriers full and empty per stage" : "cp.async",
               s.stage_bytes / 1024,
               s.tile_blocks > 0
                   ? fmt::format(
                         "{} persistent blocks over {} tiles{}", s.tile_blocks, s.tiles(),
                         std::string(s.consumer_groups > 1 ? " (two consumer warpgroups on tiles of their "
                                                           "own, their k loops taking turns: ping-pong)"
                                                         : "") +
                             (s.cluster_blocks > 1 ? fmt::format(", in clusters of {} on adjacent tile rows "
                                                               "(B's tile multicast)",
                                                               s.cluster_blocks)
                                                 : ""))
                   : fmt::format("{} blocks", s.grid()),
               s.batch > 1 ? fmt::format(" over {} batches", s.batch) : "") +
           (s.group > 1 ? fmt::format(", taken {} tile rows at a time", s.group) : "") +
           (s.tma_store
                ? fmt::format(
                      "; the output stored by TMA, a 128-byte panel of columns at a time through {} KiB "
                      "of shared memory, the consumers going on while it writes",
                      s.staging_bytes(s.consumer_groups) / 1024)
                : "") +
           (s.rolled_epilogue
                ? "; the epilogue computed on each staged panel in a loop over chunks of 32 rows (one "
                  "chunk's code to compile, not one per element)"
                : "") +
           operand_notes;
  return fmt::format(
             "matmul tiles of {}×{} ({}×{} warps, each {}×{} in mma.sync m16n8k16 fragments), k in steps of {}{}, {} "
        "blocks{}",
        s.block_m, s.block_n, s.warps_m, s.warps_n, s.block_m / s.warps_m, s.block_n / s.warps_n, s.block_k,
        s.stages > 0 ? fmt::format(" through {} shared-memory stages (cp.async, ldmatrix; {} KiB each)", s.stages,
                                 s.stage_bytes / 1024)
                   : " loaded straight from global memory",
        s.grid(), s.batch > 1 ? fmt::format(" over {} batches", s.batch) : "") +
        (s.group > 1 ? fmt::format(", taken {} tile rows at a time", s.group) : "") + operand_notes;
}

// A column reduction: its tiles, parts and grid.
static std::string describe_columns(const TileSchedule& s) {
  return fmt::format(
        "column tiles of {} ({}×{} threads, {}×{} per loop step), {} reduced rows{} in {} part{} of {} rows each "
        "({} blocks){}, {}-wide vectors",
        s.tile_cols(), s.thread_rows, s.threads_per_row, s.tile_rows(), s.tile_cols(), s.rows,
        s.outer > 1 ? fmt::format(" for each of {} column sets", s.outer) : "", s.split_blocks, s.split_blocks == 1 ? "" : "s",
        s.split_rows, s.grid(), s.split_blocks > 1 ? "; the parts meet in the workspace, added up by each tile's last block" : "",
        s.vec);
}

// A write in place (a cache's slices at positions read at run time).
static std::string describe_in_place(const TileSchedule& s) {
  return fmt::format("in place: {} slices of {} elements written into the cache at the positions read at run time, "
                       "{} threads × {}-wide vectors per slice ({} blocks); nothing else of the cache moves",
                       s.rows, s.cols, s.threads_per_row, s.vec, s.grid());
}

// Pointwise and row kernels.
static std::string describe_rows(const TileSchedule& s) {
  const char* rows_word = s.rows_per_thread == 1 ? "row" : "rows";
  std::string per_thread = s.chunks_per_thread > 1
                               ? fmt::format("{} {} × {}×{} cols", s.rows_per_thread, rows_word, s.chunks_per_thread, s.vec)
                               : fmt::format("{} {} × {} cols", s.rows_per_thread, rows_word, s.vec);
  std::string loop =
      s.col_iters > 1 ? fmt::format(", a loop of {} column tiles of {}", s.col_iters, s.iter_cols()) : "";
  if (s.looped_parts())
    loop += fmt::format(", each row in {} parts of that loop, a block each, their reductions meeting in the workspace",
                        s.col_blocks());
  if (s.cluster_blocks > 1)
    loop += fmt::format(", clusters of {} blocks per row{}", s.cluster_blocks, s.cluster_online ? " (an exchange a pass)" : "");
  if (s.block_online) loop += ", a block barrier a pass";
  if (s.split_blocks > 1)
    loop += fmt::format(", rows split into {} parts that meet in global memory", s.split_blocks);
  if (s.min_blocks_per_sm > 0) loop += fmt::format(", {} blocks per SM", s.min_blocks_per_sm);
  if (s.stages > 0)
    loop +=
        fmt::format(", persistent: {} {}{} ahead in shared memory by bulk copies ({} KiB per stage)", s.stages,
                    s.split_blocks > 1 ? "part" : "row", s.stages == 1 ? "" : "s", s.stage_bytes / 1024);
  if (s.claims_rows()) loop += fmt::format(", rows after the first {} rounds claimed from a counter", s.stages);
  if (s.refill_at_read) loop += ", each stage refilled as soon as read";
  if (s.split_blocks > 1 && s.fetch_parts_early) loop += ", the pending part's words fetched at the top of each task";
  // A persistent grid launches as many blocks as the device holds; the tiles are its work.
  std::string blocks = s.stages > 0 ? fmt::format("{} tiles", s.grid()) : fmt::format("{} blocks", s.grid());
  if (s.window)
    loop += fmt::format(", rows read as {}-aligned windows (a width of {} is not a multiple of {}: the ends masked)", s.vec,
                        s.cols, s.vec);
  if (!s.elem_dims.empty())
    loop += fmt::format(", flat: the {} elements of {} in order (rows of {} are not whole vectors)", num_elements(s.elem_dims),
                        shape_str(s.elem_dims), s.elem_dims.back());
  if (s.col_iters > 1) loop += ", one partial a thread carried";
  return fmt::format("tile {}×{} ({} per thread, {}×{} threads, {}){}, {}-wide vectors", s.tile_rows(),
                     s.tile_cols(), per_thread, s.thread_rows, s.threads_per_row, blocks, loop, s.vec);
}

std::string TileSchedule::describe() const {
  if (reduces_columns) return describe_columns(*this);
  if (writes_in_place) return describe_in_place(*this);
  if (attention_backward > 0) return describe_attention_backward(*this);
  if (attention) return describe_attention(*this);
  if (contracts) return describe_matmul(*this);
  return describe_rows(*this);
}

// A wgmma tile's width: 256, or 128 where that pads n less (a product 128 wide is not computed
// 256 wide: attention's backward dV = Pᵀ·dO at d 128) or where the epilogue reads whole tiles
// (their registers); 64 for n ≤ 64.
static int wgmma_block_n(int64_t n, bool tile_operands) {
  if (n <= 64) return 64;
  if (tile_operands || n <= 128) return 128;
  return (n + 255) / 256 * 256 <= (n + 127) / 128 * 128 ? 256 : 128;
}

TileSchedule choose_matmul_schedule(int64_t batch, int64_t m, int64_t n, int64_t k, const int64_t runs[2],
                                    const bool copyable[2], bool wgmma, bool tile_operands,
                                    const ScheduleHints& hints, int sm_count) {
  TileSchedule s;
  s.contracts = true;
  // A run of whole 16-byte chunks as stored, or as copied into a padded pitch.
  int64_t pitch[2] = {0, 0};
  for (int i = 0; i < 2; ++i)
    if (runs[i] % 8 != 0 && copyable[i] && hints.pitch_copy != 0 && hints.stages != 0) pitch[i] = (runs[i] + 7) / 8 * 8;
  const int64_t a_run = pitch[0] ? pitch[0] : runs[0], b_run = pitch[1] ? pitch[1] : runs[1];
  // wgmma where its k loop has at least 3 steps of 64: at k 128 (attention's backward products
  // with their epilogues) the 4-stage pipeline never fills, and mma.sync measured faster (9.05
  // against 11.88 ms, 11.47 against 13.54; bench/NOTES.md).
  const bool staged = hints.stages != 0 && a_run % 8 == 0 && b_run % 8 == 0;
  if (staged && m <= 64 && hints.gemm_wgmma != 1 && !hints.gemm_block_m && !hints.gemm_block_n) {
    // Few rows: B streamed through 128-column tiles, the rows rounded up to 16, 32 or 64 (no
    // tile of 128 rows mostly padding), four warps across the columns.
    s.block_m = m <= 16 ? 16 : m <= 32 ? 32 : 64;
    s.block_n = 128;
    s.block_k = 32;
    s.warps_m = s.block_m == 64 ? 2 : 1;
    s.warps_n = 4;
    s.stages = hints.stages > 0 ? std::max(2, hints.stages) : 4;
    s.stage_bytes = int64_t{s.block_m + s.block_n} * s.block_k * 2;
  } else if (wgmma && hints.gemm_wgmma != 0 && staged && (k > 128 || hints.gemm_wgmma == 1)) {
    s.wgmma = true;
    const bool pingpong = hints.gemm_pingpong == 1 && hints.gemm_tma != 0 && hints.gemm_persistent != 0;
    s.block_m = hints.gemm_block_m ? std::max(64, hints.gemm_block_m) : m <= 64 || pingpong ? 64 : 128;
    s.block_n = hints.gemm_block_n ? hints.gemm_block_n : wgmma_block_n(n, tile_operands);
    s.block_k = 64;
    s.warps_m = s.block_m / 16;
    s.warps_n = 1;
    s.stage_bytes = int64_t{s.block_m + s.block_n} * s.block_k * 2;
    s.tma = hints.gemm_tma != 0;
    s.tma_store = s.tma && hints.gemm_tma_store != 0;
    // The stages that fit beside the TMA stores' staging slots (at least 3; else no TMA stores),
    // 1 KiB left for the static shared memory (mbarriers, flags) and the rings' alignment.
    const int64_t room = 227 * 1024 - 1024;
    int fit = static_cast<int>((room - s.staging_bytes(pingpong ? 2 : 1)) / s.stage_bytes);
    if (fit < 3 && s.tma_store) {
      s.tma_store = false;
      fit = static_cast<int>(room / s.stage_bytes);
    }
    s.stages = hints.stages > 0 ? std::max(3, std::min(hints.stages, fit)) : std::min(4, fit);
  } else if (staged) {
    s.block_m = hints.gemm_block_m ? hints.gemm_block_m : 128;
    s.block_n = hints.gemm_block_n ? hints.gemm_block_n : 128;
    s.block_k = 32;
    s.warps_m = 2;
    s.warps_n = 4;
    s.stages = hints.stages > 0 ? std::max(2, hints.stages) : 3;
    s.stage_bytes = int64_t{s.block_m + s.block_n} * s.block_k * 2;
  }
  if (s.stages > 0) {  // (the direct schedule reads the operands in place)
    std::copy(pitch, pitch + 2, s.operand_pitch);
    std::copy(runs, runs + 2, s.operand_run);
  }
  // wgmma's tiles 8 tile rows at a time: the blocks running at once share operand tiles in L2
  // (bf16 8192³: 634 TFLOP/s against 609 row by row, bench/NOTES.md "wgmma"; 16 measured better
  // in one call and worse in the next: "Fewer instructions per step").
  s.group = std::max(1, hints.gemm_group ? hints.gemm_group : s.wgmma ? 8 : 1);
  s.batch = batch;
  s.m = m;
  s.n = n;
  s.k = k;
  s.dims = {batch * m, n};
  s.rows = batch * m;
  s.cols = n;
  s.threads_per_row = 32 * s.warps_m * s.warps_n;
  // Split-K where the tiles would leave SMs idle: the fewest ranges (a power of two) that fill
  // them, each at least 8 steps long. (bf16 16×8192×8192: 4 ranges, 256 blocks, 0.0378 ms; 8
  // ranges 0.0430, 16 0.0494, none 0.0647; bench/NOTES.md, "Few rows".)
  const int64_t tiles = s.batch * s.m_blocks() * s.n_blocks();
  if (hints.gemm_k_splits > 1 && s.stages > 0) {
    s.k_splits = std::min<int64_t>(hints.gemm_k_splits, s.k_steps());
  } else if (hints.gemm_k_splits == 0 && s.stages > 0) {
    while (tiles * s.k_splits < sm_count && s.k_steps() >= 16 * s.k_splits) s.k_splits *= 2;
  }
  s.k_splits = (s.k_steps() + s.k_steps_per_split() - 1) / s.k_steps_per_split();  // no empty range
  if (s.tma && s.k_splits == 1 && hints.gemm_persistent != 0 && tiles > sm_count) s.tile_blocks = sm_count;
  // Clusters of two blocks on vertically adjacent tiles, B's tile multicast: its 128-byte panels
  // shared out over the pair.
  // (The default: clusters measured 0.95–1.05× cuBLAS at 8192³ against 0.91–1.00× without, and
  // no slower elsewhere; bench/NOTES.md, "Clusters measured". Ping-pong, asked for, goes without.)
  const bool pingpong_asked = hints.gemm_pingpong == 1 && s.block_m == 64;
  if (s.tile_blocks > 0 && hints.gemm_cluster == 2 && !pingpong_asked && sm_count % 2 == 0 && s.block_n / 64 % 2 == 0)
    s.cluster_blocks = 2;
  // Ping-pong: a warpgroup per tile, two taking turns, where each block has tiles for both.
  if (s.tile_blocks > 0 && s.cluster_blocks == 1 && hints.gemm_pingpong == 1 && s.block_m == 64 && tiles >= 2 * sm_count)
    s.consumer_groups = 2;
  return s;
}

static int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// Threads per block for `chunks` vectors each, `blocks` blocks covering `vecs` vectors: whole
// warps, not a power of two. A windowed row is a few vectors longer than a power of two (4097
// bf16 elements: 513 vectors), where a power of two of threads left a third of them idle, holding
// registers (bench/NOTES.md, "Odd widths measured").
static int warps_covering(int64_t vecs, int64_t blocks, int chunks) {
  const int64_t per_block = (vecs + blocks * chunks - 1) / (blocks * chunks);
  return static_cast<int>((per_block + 31) / 32 * 32);
}

// An operand's size along domain dim d (right-aligned, 1 where absent).
static int64_t dim_of(const Shape& domain, const Shape& s, size_t d) {
  size_t off = domain.size() - s.size();
  return d < off ? 1 : s[d - off];
}

// Collapses domain dims [begin, end): drops size-1 dims and merges neighbours that every
// operand treats alike (both full or both broadcast).
static void collapse_range(const Shape& domain, const std::vector<Shape>& operands, size_t begin, size_t end,
                           Shape* dom, std::vector<Shape>* views) {
  bool first = true;
  size_t prev = 0;
  for (size_t d = begin; d < end; ++d) {
    if (domain[d] == 1) continue;
    bool merge = !first;
    for (const Shape& s : operands)
      if (merge && (dim_of(domain, s, d) == 1) != (dim_of(domain, s, prev) == 1)) merge = false;
    if (merge) {
      dom->back() *= domain[d];
      for (size_t i = 0; i < operands.size(); ++i) (*views)[i].back() *= dim_of(domain, operands[i], d);
    } else {
      dom->push_back(domain[d]);
      for (size_t i = 0; i < operands.size(); ++i) (*views)[i].push_back(dim_of(domain, operands[i], d));
    }
    first = false;
    prev = d;
  }
}

// Pointwise: the whole domain collapses freely. Row reduction: the row dims collapse among
// themselves and the reduced dims must become one column dim. Returns nullopt (with the reason)
// when they cannot: an operand broadcast along some reduced axes but not others (a group-norm
// weight [G, 1] under a reduction over [G, K]) has no one contiguous row.
static std::optional<std::vector<Shape>> collapse_shapes(const Shape& domain, int split,
                                                         const std::vector<Shape>& operands, Shape* collapsed,
                                                         std::string* why) {
  std::vector<Shape> views(operands.size());
  collapsed->clear();
  size_t end = split < 0 ? domain.size() : static_cast<size_t>(split);
  collapse_range(domain, operands, 0, end, collapsed, &views);
  if (split >= 0) {
    Shape cols;
    std::vector<Shape> col_views(operands.size());
    collapse_range(domain, operands, end, domain.size(), &cols, &col_views);
    if (cols.size() > 1) {
      if (why)
        *why = fmt::format("an operand is broadcast along some of the reduced axes of {} but not others",
                           shape_str(domain));
      return std::nullopt;
    }
    collapsed->push_back(cols.empty() ? 1 : cols[0]);
    for (size_t i = 0; i < operands.size(); ++i)
      views[i].push_back(col_views[i].empty() ? 1 : col_views[i][0]);
  }
  if (collapsed->empty()) {  // a scalar domain
    *collapsed = {1};
    for (Shape& s : views) s = {1};
  }
  return views;
}

std::vector<Shape> operand_views(const TileSchedule& s, const Shape& domain, int split,
                                 const std::vector<Shape>& operands) {
  Shape collapsed;
  std::string why;
  auto views = collapse_shapes(domain, split, operands, &collapsed, &why);
  if (!views)  // the schedule was chosen from the same shapes, which collapsed then
    throw Error(fmt::format("operand_views: {}", why));
  if (!s.elem_dims.empty()) {  // flat: every operand but a scalar runs over the domain's elements
    for (Shape& v : *views) v = num_elements(v) == 1 ? Shape{1, 1} : s.dims;
    return *views;
  }
  if (collapsed.size() == 1 && s.dims.size() == 2)  // the contiguous domain split into rows
    for (Shape& v : *views) v = v[0] == 1 ? Shape{1, 1} : s.dims;
  return *views;
}

std::vector<Shape> element_views(const TileSchedule& s, const Shape& domain, const std::vector<Shape>& operands) {
  Shape collapsed;
  std::string why;
  auto views = collapse_shapes(domain, -1, operands, &collapsed, &why);
  if (!views || collapsed != s.elem_dims)
    throw Error(fmt::format("element_views: the operands do not collapse to {} ({})", shape_str(s.elem_dims), why));
  return *views;
}

std::vector<Shape> column_views(const Shape& domain, int split, int end, const std::vector<Shape>& operands) {
  std::vector<Shape> views;
  for (const Shape& o : operands) {
    Shape aligned(domain.size() - std::min(domain.size(), o.size()), 1);
    aligned.insert(aligned.end(), o.begin(), o.end());
    auto extent = [&](size_t b, size_t e) {
      int64_t n = 1;
      for (size_t d = b; d < e; ++d) n *= aligned[d];
      return n;
    };
    views.push_back({extent(0, static_cast<size_t>(end)), extent(static_cast<size_t>(end), domain.size())});
  }
  return views;
}

static int vector_width(int64_t cols, const std::vector<DType>& dtypes) {
  size_t widest = 1;
  for (DType t : dtypes) widest = std::max(widest, dtype_size(t));
  int vec = static_cast<int>(16 / widest);
  while (vec > 1 && cols % vec != 0) vec /= 2;
  return vec;
}

TileSchedule choose_pointwise_schedule(const Shape& domain, const std::vector<Shape>& operands,
                                       const std::vector<DType>& dtypes, const ScheduleHints& hints) {
  TileSchedule s;
  auto views = collapse_shapes(domain, -1, operands, &s.dims, nullptr);  // a pointwise domain always collapses
  // A fully contiguous domain has no row structure; give it rows so each thread owns several
  // vectors (independent loads in flight) without index division.
  if (s.dims.size() == 1) {
    int64_t n = s.dims[0];
    int64_t c = 4096;
    while (c > 1 && n % c != 0) c /= 2;
    if (c >= 256 && n / c > 1) s.dims = {n / c, c};
  }
  // Rows not a multiple of the vector width (an odd or prime width): run over the domain's
  // elements in order instead, where they are, so that the operands spanning the whole domain are
  // read in whole vectors; the broadcast ones are then read an element at a time (from cache).
  // An element count that is not a whole number of vectors either (an odd count) runs as one row
  // whose last vector is read and written element by element (--window 0 turns it off:
  // off_prime_3d_bf16 0.063 → 0.045 ms, bench/NOTES.md "Odd widths measured").
  const int full = vector_width(int64_t{1} << 20, dtypes);
  const int64_t n = num_elements(s.dims);
  bool spans = false;
  for (const Shape& v : views ? *views : std::vector<Shape>{}) spans |= v == s.dims;
  const bool odd_rows = vector_width(s.dims.back(), dtypes) < full;
  const bool odd_count = odd_rows && n % full != 0 && hints.window != 0;
  bool one_row = false;  // the odd count's one row of vectors
  if (s.dims.size() >= 2 && odd_rows && spans && (n % full == 0 || odd_count)) {
    int64_t c = 4096;
    while (n % c != 0) c /= 2;
    s.elem_dims = s.dims;
    one_row = odd_count;
    s.dims = one_row ? Shape{1, n} : Shape{n / c, c};
  } else if (s.dims.size() == 1 && odd_count) {
    one_row = true;
    s.dims = {1, n};
  }
  s.cols = s.dims.back();
  s.rows = num_elements(s.dims) / s.cols;
  s.vec = one_row ? full : vector_width(s.cols, dtypes);
  const int threads = hints.block_threads ? hints.block_threads : 256;
  s.threads_per_row = static_cast<int>(std::min<int64_t>(threads, pow2_ceil((s.cols + s.vec - 1) / s.vec)));
  s.thread_rows = threads / s.threads_per_row;
  if (s.thread_rows > s.rows) s.thread_rows = static_cast<int>(pow2_ceil(s.rows));
  // Two 16-byte vectors per thread per operand measured best on the H200 (bench/NOTES.md): two
  // rows, or two vectors of the one row.
  int rpt = hints.rows_per_thread ? hints.rows_per_thread : 2;
  s.rows_per_thread =
      static_cast<int>(std::clamp<int64_t>((s.rows + s.thread_rows - 1) / s.thread_rows, 1, rpt));
  if (one_row)
    s.chunks_per_thread = static_cast<int>(std::clamp<int64_t>((s.cols + s.vec * s.threads_per_row - 1) / (s.vec * s.threads_per_row), 1, rpt));
  return s;
}

// Whether every input laid out along the rows holds 16-bit (or narrower) elements.
static bool narrow_rows(const std::vector<Shape>& views, const std::vector<DType>& dtypes, size_t num_inputs) {
  bool any = false;
  for (size_t i = 0; i < num_inputs && i < views.size(); ++i) {
    if (views[i].back() == 1) continue;
    if (dtype_size(dtypes[i]) > 2) return false;
    any = true;
  }
  return any;
}

// Rows a block holds (or its parts of a cluster's, exchanged a pass at a time:
// cluster_online) over two or more whole warps: one block barrier a pass where the hint asks for
// it (TileSchedule::block_online).
static bool online_in_block(const TileSchedule& s, const ScheduleHints& hints) {
  return (hints.block_online == 1 || (hints.block_online < 0 && !s.window)) &&
         (s.cluster_blocks == 1 || s.cluster_online) &&
         s.threads_per_row % 32 == 0 && s.threads_per_row >= 64;
}

// The stages of a persistent row kernel whose blocks of `threads` hold `part` columns of each
// staged input: every input that spans rows and columns is copied in, each part a whole
// 16-byte multiple. A block gets its share of the SM's shared memory (blocks_per_sm blocks),
// less the system's 1 KiB and its reductions' slots and mbarriers. False when none fits.
static bool plan_stages(TileSchedule& s, const std::vector<Shape>& views, const std::vector<DType>& dtypes,
                        size_t num_inputs, int64_t part, int blocks_per_sm, const ScheduleHints& hints,
                        const DeviceProfile& device) {
  int64_t stage_bytes = 0;
  for (size_t i = 0; i < num_inputs; ++i) {
    if (!view_spans_rows(views[i]) || !view_spans_cols(views[i])) continue;
    const int64_t size = static_cast<int64_t>(dtype_size(dtypes[i]));
    if ((part * size) % 16 != 0 || (s.cols * size) % 16 != 0) return false;
    stage_bytes += part * size;
  }
  if (stage_bytes == 0) return false;
  const int64_t per_block =
      std::min(device.max_shared_bytes_per_block, device.shared_bytes_per_sm / blocks_per_sm - 1024) - 4096;
  int64_t stages = std::min<int64_t>(per_block / stage_bytes, 4);
  if (hints.stages > 0) stages = std::min<int64_t>(stages, hints.stages);
  if (stages < 1) return false;
  s.min_blocks_per_sm = blocks_per_sm;
  s.stages = static_cast<int>(stages);
  s.stage_bytes = stage_bytes;
  return true;
}

// Rows whose parts are whole 16-byte multiples, on a device with bulk copies: blocks of 1024
// threads (32 elements each in registers, one block per SM), as many as the row needs in one
// cluster, persistent over rows, each with `stages` rows' parts in shared memory ahead of it.
static bool stage_rows(TileSchedule& s, const std::vector<Shape>& views, const std::vector<DType>& dtypes,
                       size_t num_inputs, int max_elems, int max_cluster, const ScheduleHints& hints,
                       const DeviceProfile& device) {
  if (!device.bulk_copies || hints.stages == 0) return false;
  const int64_t vecs = s.cols / s.vec;
  if (s.cols % s.vec != 0) return false;
  const int threads = hints.block_threads ? hints.block_threads : 1024;
  const int64_t chunks = std::max(1, max_elems / s.vec);
  const int64_t blocks = (vecs + threads * chunks - 1) / (threads * chunks);
  if (blocks > std::max(1, max_cluster)) return false;
  const int64_t balanced = (vecs + blocks * threads - 1) / (blocks * threads);
  if (blocks * threads * balanced != vecs) return false;  // a part that is not whole
  // 64 registers per thread (32 elements and their arithmetic) fit 1024 threads per SM: one
  // block of 1024 threads, or two of 512, …
  if (!plan_stages(s, views, dtypes, num_inputs, threads * balanced * s.vec, std::max(1, 1024 / threads),
                   hints, device))
    return false;
  s.threads_per_row = threads;
  s.chunks_per_thread = static_cast<int>(balanced);
  s.cluster_blocks = static_cast<int>(blocks);
  if (s.claims_rows() && hints.stages < 0) {
    // Claimed rows: one stage being read plus as few as cover the memory latency. Every stage
    // is filled at once when the kernel starts, so more stages only delay the first row's
    // bytes (bf16 4096×32768: two stages of 64 KiB 1.3% faster than three; bench/NOTES.md v9).
    const double needed = device.hbm_bytes_per_s * device.memory_latency_s / device.sm_count;
    const int cover = static_cast<int>(std::ceil(needed / static_cast<double>(s.stage_bytes)));
    s.stages = std::min(s.stages, 1 + cover);
  }
  return true;
}

// Rows of two or more whole parts of 64 KiB (by default blocks of 1024 threads, one an SM): each
// part is a task of the persistent grid, staged like a row, and a block holds two parts at once
// (the one it reduces and the one it writes). A thread holds 16 elements of an f32 part, 32 of a
// 16-bit one (ScheduleHints::part_elements: more a thread take blocks of fewer threads, as many
// an SM as their registers allow; 16 of a 16-bit part make it 32 KiB). A task carries its part
// to the next iteration in registers: an f32 part's exps; a 16-bit part itself, half their
// registers, its exps made again (pipeline_part_gathers). Fewer parts a row, fewer siblings to
// wait for: on the H200, bf16 softmax over 262144 columns in 16 parts of 16384 took 1.075 of
// the first IR's time (8 parts of 32768) whatever the block's shape
// (bench/results/2026-12-05-h200-part-elements).
static bool split_rows(TileSchedule& s, const std::vector<Shape>& views, const std::vector<DType>& dtypes,
                       size_t num_inputs, const ScheduleHints& hints, const DeviceProfile& device) {
  if (!device.bulk_copies || hints.stages == 0 || hints.split == 0) return false;
  size_t widest = 1;
  for (DType t : dtypes) widest = std::max(widest, dtype_size(t));
  const bool narrow = widest <= 2;
  const int elems = hints.part_elements ? hints.part_elements : narrow ? 32 : 16;
  const int threads =
      hints.block_threads ? hints.block_threads : std::min(1024, static_cast<int>(65536 / widest) / elems);
  if (elems % s.vec != 0 || threads <= 32 || threads > 1024) return false;  // (staged: warps of a block)
  const int64_t chunks = elems / s.vec;
  const int64_t part = int64_t{threads} * elems;
  // One warp merges a row's parts: at most 32.
  if (s.cols % part != 0 || s.cols / part < 2 || s.cols / part > 32) return false;
  const int registers = (narrow ? elems : 2 * elems) + 32;  // (about: a 16-bit part carried in pairs)
  const int blocks_per_sm =
      std::clamp(device.blocks_by_registers(registers, threads), 1, std::max(1, 2048 / threads));
  TileSchedule t = s;
  if (!plan_stages(t, views, dtypes, num_inputs, part, blocks_per_sm, hints, device)) return false;
  s = t;
  s.threads_per_row = threads;
  s.chunks_per_thread = static_cast<int>(chunks);
  s.split_blocks = static_cast<int>(s.cols / part);
  s.block_online = true;  // (one block barrier a pass whatever the hint says)
  s.fetch_parts_early = hints.fetch_parts_early == 1 || (hints.fetch_parts_early < 0 && narrow);
  return true;
}

std::optional<TileSchedule> choose_column_schedule(const Shape& domain, int split, int end,
                                                   const std::vector<Shape>& operands,
                                                   const std::vector<DType>& dtypes, size_t num_inputs,
                                                   const ScheduleHints& hints, const DeviceProfile& device,
                                                   std::string* why) {
  TileSchedule s;
  s.reduces_columns = true;
  auto product = [&](size_t b, size_t e) {
    int64_t n = 1;
    for (size_t d = b; d < e; ++d) n *= domain[d];
    return n;
  };
  s.outer = product(0, static_cast<size_t>(split));
  s.rows = product(static_cast<size_t>(split), static_cast<size_t>(end));
  s.cols = product(static_cast<size_t>(end), domain.size());
  s.dims = {s.outer, s.rows, s.cols};
  // Every operand must be one view of [outer, rows, cols]: full or broadcast along each.
  for (const Shape& o : operands) {
    Shape aligned(domain.size() - std::min(domain.size(), o.size()), 1);
    aligned.insert(aligned.end(), o.begin(), o.end());
    for (auto [b, e] : {std::pair<size_t, size_t>{0, static_cast<size_t>(split)},
                        {static_cast<size_t>(split), static_cast<size_t>(end)}, {static_cast<size_t>(end), domain.size()}}) {
      bool all = true, none = true;
      for (size_t d = b; d < e; ++d) {
        all &= aligned[d] == domain[d];
        none &= aligned[d] == 1;
      }
      if (!all && !none && e - b > 1) {
        if (why)
          *why = fmt::format("an operand {} is broadcast along some of the axes the column reduction merges but not others",
                             shape_str(o));
        return std::nullopt;
      }
    }
  }
  s.vec = vector_width(s.cols, dtypes);
  const int threads = hints.block_threads ? hints.block_threads : 128;
  s.threads_per_row = static_cast<int>(std::min<int64_t>(threads, pow2_ceil((s.cols + s.vec - 1) / s.vec)));
  s.thread_rows = 1;
  // Eight 16-byte vectors per thread per loop step (16 KB in flight per block of 128 threads),
  // no more rows than there are: bf16 8192² took 0.0450 ms at 8 rows against 0.0505 at 4 and
  // 0.0512 at 16 (168 registers); f32 was the same at 8 and 16 (bench/NOTES.md, columns).
  const int rows_per_step = 8;
  s.rows_per_thread = static_cast<int>(std::min<int64_t>(hints.rows_per_thread ? hints.rows_per_thread : rows_per_step, s.rows));
  // Four blocks per SM (their loads cover the memory latency), each at least eight loop steps:
  // the rows are split into that many parts, which the last block of a column tile adds up.
  const int64_t tiles = s.outer * s.col_blocks();
  const int64_t wanted = int64_t{device.sm_count} * 4;
  const int64_t most = std::max<int64_t>(1, s.rows / (8 * s.tile_rows()));
  const int64_t parts = std::clamp<int64_t>((wanted + tiles - 1) / tiles, 1, std::min<int64_t>(most, 256));
  s.split_rows = (s.rows + parts - 1) / parts;
  s.split_rows = (s.split_rows + s.tile_rows() - 1) / s.tile_rows() * s.tile_rows();
  s.split_blocks = static_cast<int>((s.rows + s.split_rows - 1) / s.split_rows);
  (void)num_inputs;
  return s;
}

// Rows too few to give every SM two blocks (a whole tensor's sum: one row of all its elements)
// split their column tiles into parts of at least four tiles, a block each; each part's
// reductions go to the workspace, and the row's last block to arrive reduces them (at most a
// loop tile's columns of parts, so that one load reads them all). Before, such a sum was one
// block reading the whole tensor (fuzz seed 409: 16 MB, predicted 0.82 ms).
static void split_loop_into_parts(TileSchedule& s, int part_sums, const DeviceProfile& device) {
  const int64_t wanted = 2 * int64_t{device.sm_count};
  if (s.rows >= wanted || s.tile_rows() != 1) return;
  const int64_t most = std::min(s.col_iters / 4, s.iter_cols());
  const int64_t parts = std::min((wanted + s.rows - 1) / s.rows, most);
  if (parts < 2) return;
  s.col_iters = (s.col_iters + parts - 1) / parts;
  s.partial_sums = part_sums;
}

std::optional<TileSchedule> choose_row_schedule(const Shape& domain, int split,
                                                const std::vector<Shape>& operands,
                                                const std::vector<DType>& dtypes, size_t num_inputs,
                                                bool splittable, int part_sums, int held_tiles,
                                                int scratch_regs, const ScheduleHints& hints,
                                                const DeviceProfile& device, std::string* why) {
  TileSchedule s;
  std::optional<std::vector<Shape>> collapsed = collapse_shapes(domain, split, operands, &s.dims, why);
  if (!collapsed) return std::nullopt;
  const std::vector<Shape>& views = *collapsed;
  s.cols = s.dims.back();
  s.rows = num_elements(s.dims) / s.cols;
  s.vec = vector_width(s.cols, dtypes);
  // A width that is not a multiple of the vector width (4097, a 50257 vocabulary): windowed rows
  // keep 16-byte accesses where the row is held in registers (one block or a cluster; the staged,
  // split and looped schedules take whole vectors or elements). Not by default where more than
  // one tensor along the row is laid out otherwise (weights shared by the rows): each is read
  // as two vectors shifted in registers, and layernorm's w and b ran slower windowed (2999 bf16
  // columns: 0.076 ms against 0.066 element by element), RMSNorm's one w faster (5003 bf16
  // columns: 0.097 against 0.105; bench/NOTES.md, "Odd widths: fewer instructions").
  const int full = vector_width(int64_t{1} << 20, dtypes);
  int weights_along_row = 0;
  for (const Shape& v : views) {
    weights_along_row += v.back() != 1 && v != s.dims;
  }
  if (s.vec < full && s.cols >= 4 * full && (hints.window == 1 || (hints.window < 0 && weights_along_row <= 1))) {
    s.vec = full;
    s.window = true;
  }
  // About four 16-byte vectors of each row per thread (16 f32 or 32 bf16 elements): several
  // loads in flight, and fewer threads per row for 16-bit rows, so fewer warps meet at each
  // reduction's barrier. With more than two tensors along the row (layernorm's x, w, b, y)
  // each holds registers: at most 16 elements per thread.
  int along_row = 0;
  for (const Shape& v : views) along_row += v.back() != 1;
  const int max_elems = along_row > 2 ? 16 : 32;
  int64_t per_thread = along_row > 2 ? std::max(1, 16 / s.vec) : 4;
  int64_t vecs = (s.covered_cols() + s.vec - 1) / s.vec;
  int64_t per_row = std::clamp<int64_t>(pow2_ceil((vecs + per_thread - 1) / per_thread), 1, 1024);
  int max_cluster = hints.max_cluster_blocks ? std::min(hints.max_cluster_blocks, device.max_cluster_blocks)
                                             : device.max_cluster_blocks;
  // A staged row's tensor shared by every row (RMSNorm's w) is loaded after its reductions, one
  // vector at a time, so it holds no registers through them: x and y with one such tensor fit
  // 32 elements per thread in 64 registers. (Layernorm's x − mean, w and b spill in f32.)
  int per_row_tensors = 0;
  for (const Shape& v : views) per_row_tensors += v.back() != 1 && view_spans_rows(v);
  const int staged_elems = per_row_tensors <= 2 && along_row <= 3 ? 32 : 16;
  // A row that one block holds (32 elements per thread, or what a staged row holds) stays in one
  // block: its rounds cost one block barrier, where a split row's tasks each add a merge
  // (bench/NOTES.md v8). Longer rows are split rather than spread over a cluster, so that every
  // SM takes part.
  const int64_t one_block = int64_t{hints.block_threads ? hints.block_threads : 1024} * std::max(max_elems, staged_elems);
  // Persistent kernels count rows (and a row's ≤ 32 parts) in 32 bits.
  const bool persistent_ok = s.rows <= INT32_MAX / 32;
  if (per_row > 512 && persistent_ok && splittable && !s.window && s.cols > one_block &&
      split_rows(s, views, dtypes, num_inputs, hints, device)) {
    return s;
  }
  if (per_row > 512 && persistent_ok && !s.window &&
      stage_rows(s, views, dtypes, num_inputs, staged_elems, max_cluster, hints, device)) {
    // (One block a row claimed, or a cluster's taken grid-stride.) A cluster's staged rows: one
    // exchange a pass and each stage refilled at its read (ScheduleHints::refill_at_read).
    s.cluster_online = s.cluster_blocks > 1 && hints.cluster_online != 0;
    s.block_online = online_in_block(s, hints);
    s.refill_at_read = hints.refill_at_read == 1 || (hints.refill_at_read < 0 && s.cluster_blocks > 1);
    return s;
  }
  // A row with no tensor along it but x, y and one weight shared by every row (RMSNorm's w, loaded
  // after the reductions) holds 32 elements a thread, as staged rows do: one block of up to 512
  // threads then holds a row that 16 a thread would spread over a cluster, whose blocks hold
  // one row an SM between them and expose each row's load (4096 × 12288 bf16 RMSNorm: 0.093 ms
  // in clusters of two 512-thread blocks, 0.082 in one 1024-thread block, against 0.047 for
  // its bytes; bench/NOTES.md, "Long RMSNorm rows in one block").
  if (per_row > 512 && staged_elems > max_elems && !hints.block_threads) {
    const int64_t wider = std::max(1, staged_elems / s.vec);
    if (const int64_t threads = pow2_ceil((vecs + wider - 1) / wider); threads <= 512) {
      per_thread = wider;
      per_row = threads;
    }
  }
  if (per_row > 512 && max_cluster > 1) {
    // A row that wants more than half an SM's threads: blocks of 512 threads holding 32 elements
    // each (two blocks per SM, so one loads while the other reduces), as many as the row needs,
    // in one cluster.
    int threads = hints.block_threads ? hints.block_threads : 512;
    // Windowed rows of two tensors held at once (cross-entropy's logits and targets) keep 24
    // elements of each per thread: at 28 f32 the pair spilled 64 bytes at 64 registers.
    int inputs_along_row = 0;
    for (size_t i = 0; i < num_inputs; ++i) inputs_along_row += views[i].back() != 1;
    const int held = s.window && inputs_along_row >= 2 ? 24 : max_elems;
    int64_t chunks = std::max(1, held / s.vec);
    int64_t blocks = (vecs + threads * chunks - 1) / (threads * chunks);
    // Windowed rows: blocks of 256 threads where a cluster of at most 8 (the portable size) holds
    // the row — four blocks an SM where two of 512 were: a 50257-wide log_softmax ran 0.961 (bf16)
    // and 0.976 (f32) of its time in 7 blocks of 256; the cross-entropy's pair of rows would need
    // 9 and ran 1.077 (bench/NOTES.md, "Vocabulary rows in blocks of 256").
    if (s.window && !hints.block_threads) {
      const int64_t smaller = (vecs + 256 * chunks - 1) / (256 * chunks);
      if (smaller <= std::min(8, max_cluster)) {
        threads = 256;
        blocks = smaller;
      }
    }
    // As few blocks as hold the row at 32 elements per thread: a thread's elements are the SM's
    // bytes in flight (1024 threads each), so more blocks of fewer elements starve it (a 50257
    // bf16 vocabulary: 0.352 ms in 4 blocks of 25 elements per thread, 116 bytes spilled, against
    // 0.512 in 8 blocks of 13; bench/NOTES.md, "Odd widths measured").
    if (blocks <= max_cluster) {
      s.threads_per_row = threads;
      s.chunks_per_thread = static_cast<int>((vecs + blocks * threads - 1) / (blocks * threads));
      if (s.window && !hints.block_threads)  // each block as few threads as cover its part
        s.threads_per_row = warps_covering(vecs, blocks, s.chunks_per_thread);
      s.cluster_blocks = static_cast<int>(s.col_blocks());
      s.min_blocks_per_sm = std::max(1, 1024 / threads);
      // Windowed 16-bit rows: one exchange a pass (ScheduleHints::cluster_online).
      s.cluster_online = s.cluster_blocks > 1 &&
                         (hints.cluster_online == 1 || (hints.cluster_online < 0 && s.window && narrow_rows(views, dtypes, num_inputs)));
      s.block_online = online_in_block(s, hints);
      return s;
    }
  }
  s.threads_per_row = static_cast<int>(per_row);
  s.chunks_per_thread = static_cast<int>((vecs + per_row - 1) / per_row);
  if (per_row >= 32 && !hints.block_threads && per_thread * s.vec <= max_elems &&
      warps_covering(vecs, 1, static_cast<int>(per_thread)) <= 1024) {
    // Whole warps cover the row: of per_thread/2..per_thread vectors a thread, the count that
    // leaves the fewest vectors past it (threads there load and compute for nothing: 4097 bf16
    // columns in 160 threads of 4 are 5120, in 192 of 3 4608), the larger on a tie. A row of
    // whole vectors takes it only where it leaves fewer than the power of two of threads does
    // (4100 f32 columns: 1025 vectors in 352 threads of 3, not 512 of 3).
    int best = static_cast<int>(per_thread);
    for (int c = best - 1; c >= std::max(1, static_cast<int>(per_thread) / 2); --c)
      if (const int64_t threads = warps_covering(vecs, 1, c);
          threads <= 1024 && threads * c < int64_t{warps_covering(vecs, 1, best)} * best)
        best = c;
    const int64_t covering = warps_covering(vecs, 1, best);
    if (s.window || covering * best < per_row * s.chunks_per_thread) {
      s.chunks_per_thread = best;
      s.threads_per_row = static_cast<int>(covering);
    }
  }
  if (s.chunks_per_thread * s.vec > 32) {
    // Too long for registers: a loop over column tiles, four 16-byte vectors per thread per tile
    // so that enough bytes are in flight with one row per block.
    if (s.window) {
      s.window = false;
      s.vec = vector_width(s.cols, dtypes);
      vecs = (s.cols + s.vec - 1) / s.vec;
    }
    s.threads_per_row = hints.block_threads ? hints.block_threads : 256;
    s.chunks_per_thread = 4;
    s.col_iters = (vecs + s.threads_per_row * s.chunks_per_thread - 1) / (s.threads_per_row * s.chunks_per_thread);
    if (part_sums > 0) split_loop_into_parts(s, part_sums, device);
    return s;
  }
  int threads = std::max<int>(hints.block_threads ? hints.block_threads : 256, s.threads_per_row);
  s.thread_rows = std::max(1, threads / s.threads_per_row);
  if (s.thread_rows > s.rows) s.thread_rows = static_cast<int>(pow2_ceil(s.rows));
  s.block_online = online_in_block(s, hints);
  if (s.window && weights_along_row == 0) {
    // ptxas left alone gave a 4097-wide bf16 softmax 56 registers (6 blocks of 192 an SM); asked
    // for the blocks that a thread's elements and 16 more registers allow, it fits in 40 unspilled
    // (8 blocks). (Not with weights along the row: their
    // shifted loads' pairs of vectors spilled an RMSNorm's 5003-wide f32 rows at that cap.)
    // A thread holding more than its row across a reduction (x and x's own chain to an output
    // beside x − max) needs each of them, and the temporaries of two elements in evaluation: at
    // the one-row cap a fuzz graph's 16 elements a thread (log-softmax beside pow(|x| + 0.5,
    // tanh x)) spilled 352 bytes at 32 registers and took 64 without spills.
    // The row's inputs are loaded before their first use, all at once: three f32 tensors of 12
    // elements a thread (x·(y − z)) spilled 128 bytes at 32 registers and took 48 unspilled.
    const int e = s.elems_per_thread();
    int loaded_words = 0;
    for (size_t i = 0; i < num_inputs && i < views.size(); ++i)
      if (views[i].back() != 1) loaded_words += (e * static_cast<int>(dtype_size(dtypes[i])) + 3) / 4;
    const int held = std::max(std::max(1, held_tiles) * e, loaded_words);
    const int need = held + 16 + (held_tiles >= 2 ? 8 * scratch_regs : 0);
    s.min_blocks_per_sm = device.blocks_by_registers(need, s.block_threads());
  }
  return s;
}

}  // namespace tilefuse
