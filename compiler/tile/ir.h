#pragma once
// Tile IR v2: a kernel is a block-level SSA program. Values are indices (uniform across the
// block), scalars, or tiles — typed by shape, dtype, memory space and layout. Memory is read and
// written a tile at a time at SSA offsets into a parameter's view, with masks where a tile
// crosses the view's edge; loops carry values (tiles too) from one iteration to the next.
//
//   tile.func @bias_gelu_k0(%x: f32[8192, 8192], %b: f32[1, 8192], %y: f32[8192, 8192] out)
//       grid [4096] threads 256 layout blocked<per_thread [1, 4], threads [1, 256], reps [2, 1]> {
//     %0 = program_id 0 : index
//     %1 = const 2 : index
//     %2 = muli %0, %1 : index
//     %3 = const 0 : index
//     %4 = load %x[%2, %3] : tile<2x1024xf32>
//     %5 = load %b[%3, %3] : tile<1x1024xf32>
//     %6 = add %4, %5 : tile<2x1024xf32>
//     %7 = gelu %6 : tile<2x1024xf32>
//     store %y[%2, %3], %7 : tile<2x1024xf32>
//   }
//
// Layouts are data (`Layout`): how a tile's elements are spread over the block's threads. A tile
// of extent 1 along an axis is the same for every thread along it (a per-row vector, a bias row),
// and elementwise ops broadcast such tiles as numpy does. The printer and parser round-trip; the
// verifier (ir_verify.h) checks a program between passes.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/graph/graph.h"

namespace tilefuse::tir {

// How a tile's elements are spread over a block's threads. Blocked: along axis d each thread
// holds per_thread[d] contiguous elements, threads[d] threads hold consecutive runs, and the
// pattern repeats reps[d] times, so the tile spans per_thread·threads·reps elements along d;
// threads are numbered with the last axis fastest (a warp runs along the columns).
struct Layout {
  std::vector<int> per_thread, threads, reps;
  int64_t extent(size_t d) const { return int64_t{per_thread[d]} * threads[d] * reps[d]; }
  int block_threads() const;
  bool operator==(const Layout& o) const {
    return per_thread == o.per_thread && threads == o.threads && reps == o.reps;
  }
  bool operator!=(const Layout& o) const { return !(*this == o); }
};
std::string layout_str(const Layout& l);

enum class Space { Reg, Shared };

// Tensor-core fragments (mma.sync m16n8k16): the program's warps form a grid of warps_m × warps_n,
// each computing warp_m × warp_n of the accumulator in 16×8 pieces. An A tile is [warps_m·warp_m,
// 16] (each warp the rows of its accumulator), a B tile [16, warps_n·warp_n], the accumulator
// [warps_m·warp_m, warps_n·warp_n]; within a warp, lane l holds the elements PTX's fragment
// layout gives it (group l/4, thread l%4 of its group).
struct MmaConfig {
  int warps_m = 2, warps_n = 2;
  int warp_m = 32, warp_n = 32;
  int threads() const { return 32 * warps_m * warps_n; }
  bool operator==(const MmaConfig& o) const {
    return warps_m == o.warps_m && warps_n == o.warps_n && warp_m == o.warp_m && warp_n == o.warp_n;
  }
};
// Lanes: one value per thread along the columns — a [rows, threads[1]] tile whose rows are laid
// out as the blocked layout's and whose column t is thread t's of its row (a thread's partial of
// its own elements: `reduce` within the thread). A tile of extent 1 along the columns is the same
// blocked or lanes.
// Warps: one value per warp along the columns — a [rows, threads[1] / 32] tile (rows of whole
// warps) whose column w is warp w of its row's, which each of the warp's lanes holds (a
// reduction within the warp). WarpLanes: a [rows, n] tile (2 ≤ n ≤ 32, rows of whole warps)
// whose column c is held by lane c of each aligned group of P lanes of every warp of its row (P
// the power of two at or above n; the group's lanes past n hold copies that a reduction does not
// count), so that each warp holds the whole tile and reduces it by shuffles alone: a warps tile
// gathered into every warp (`gather_warps`, one block barrier; n the row's warps), or the
// cluster's blocks' values (`gather_blocks`, one cluster barrier; n the cluster's blocks). A reduction over a row's warps
// (or blocks) in these two steps lets their values be worked on between them (an online sum's
// partials brought to the row's max: one barrier for a max and its sum).
enum class Frag { None, A, B, Acc, Lanes, Warps, WarpLanes };  // None: the program's blocked layout
// One value per thread along the columns (Lanes, Warps, WarpLanes): a thread's elements of a row
// are one.
inline bool per_thread_columns(Frag f) { return f == Frag::Lanes || f == Frag::Warps || f == Frag::WarpLanes; }
const char* frag_name(Frag f);

// Ticket: an index that only the block's first thread holds (a row claimed from a counter by its
// atomic, `claim`): only ops that thread runs for the block (`fill_stage`, `claim`) and loops
// carrying it take one.
// Words: a row's parts' stamped workspace words as warp 0's lanes p < parts first loaded them
// (`fetch_parts`), not yet known to carry the launch's epoch — shape [parts, values]; only
// warp 0's lanes hold them, and only the gather_parts of the same row takes one.
struct Type {
  enum class Kind { Index, Scalar, Tile, Ticket, Words };
  Kind kind = Kind::Index;
  DType dtype = DType::F32;  // Scalar, Tile
  Shape shape;               // Tile: its extent per axis (1: the same along that axis)
  Space space = Space::Reg;  // Tile
  Frag frag = Frag::None;    // Tile: a tensor-core fragment layout, or the blocked one

  static Type index() { return {}; }
  static Type ticket() { return {Kind::Ticket, DType::F32, {}, Space::Reg}; }
  static Type scalar(DType t) { return {Kind::Scalar, t, {}, Space::Reg}; }
  static Type words(int64_t parts, int64_t values) { return {Kind::Words, DType::F32, {parts, values}, Space::Reg}; }
  static Type tile(DType t, Shape s, Space sp = Space::Reg, Frag f = Frag::None) {
    return {Kind::Tile, t, std::move(s), sp, f};
  }
  bool is_tile() const { return kind == Kind::Tile; }
  bool operator==(const Type& o) const {
    return kind == o.kind &&
           (kind == Kind::Index || kind == Kind::Ticket || (kind == Kind::Words && shape == o.shape) ||
            (dtype == o.dtype && shape == o.shape && space == o.space && frag == o.frag));
  }
  bool operator!=(const Type& o) const { return !(*this == o); }
};
std::string type_str(const Type& t);

// A kernel parameter: a tensor in global memory seen through the kernel's view — one extent per
// axis of the kernel's tiles, 1 where it is broadcast. A tensor broadcast along some of the
// domain's row dimensions but not others (a [3, 1, 5] operand of a [3, 4, 5] domain seen as
// [12, 5]) has `row_dims` (the domain's row dimensions, [3, 4]) and `row_view` (its own extents
// along them, [3, 1]): its row indices are the domain's (masked against 12, not 3), and a load
// splits them into those dimensions.
struct Param {
  std::string name;
  DType dtype = DType::F32;
  Shape view;
  bool output = false;
  Shape row_dims, row_view;
  // The kernel's workspace (read and written; kept between launches, zero at the first): this
  // view of f32 values, then u32 counters.
  bool workspace = false;
  // Column-major storage (a matmul operand read transposed): element (r, c) of each group of
  // `group_rows` rows (a batch) lies at group·group_rows·view[1] + c·group_rows + r % group_rows.
  bool col_major = false;
  int64_t group_rows = 0;
  // Indexed element by element through the domain (a flat pointwise schedule: the tiles run over
  // the domain's elements in order, row·view[1] + col, whatever its row width): that position is
  // split into the domain's dimensions `elem_dims`, and the parameter's own extents along them,
  // `elem_view` (1 where it is broadcast), give its offset. Read an element at a time.
  Shape elem_dims, elem_view;
  // Read by TMA (TmaLoad) or written by it (TmaStore) through a tensor map the runtime encodes
  // for each launch and passes after the tensors (and the workspace): the view's rows are
  // batches of this many (a column-major parameter's: its group_rows), so a box past a batch's
  // rows or columns is zero-filled (not written), not read from (written into) the next batch.
  // 0: no tensor map.
  int64_t tma_rows = 0;
};

enum class Opcode {
  ProgramId,  // index: the block's id along grid axis `axis`
  Const,      // index, scalar or tile (every element): `value`
  IndexMul,   // index arithmetic (unsigned)
  IndexAdd,
  IndexDiv,
  IndexRem,
  IndexMin,
  IndexSub,   // args[0] − args[1], args[0] ≥ args[1]
  IndexLess,  // bool scalar: args[0] < args[1]
  IndexCeil,  // index: ⌈x⌉ of a one-element tile's value x (every thread's the same), 0 where x ≤ 0
              // or NaN (a runtime loop bound from a tensor: a sequence's length)
  Load,       // tile of `param` at the element offsets args (one per axis), masked at the edges
  Store,      // args: offsets..., the tile; with `reduce_add` (printed `store_add`), each element is
              // added into the f32 parameter's (a relaxed atomic add: blocks may add into the same
              // elements in any order)
  Splat,      // a tile of the given type, every element the scalar argument
  InBounds,   // bool tile: offset (arg 0) plus each element's position along `axis` < limit (arg 1)
  // Windowed rows (Inst::window): bool tile, args the row and column offsets and the rows' width
  // W: element (i, j) holds where column c + j of row r + i is one of the row's own elements,
  // 0 ≤ c + j − window_shift(r + i, W, window) < W (printed `in_window %r, %c, %w vec V`).
  InWindow,
  Iota,     // f32 tile: offset (arg 0) plus each element's position along `axis` (a graph iota);
            // with two offsets, the linear index (see Inst::iota_stride)
  Compute,  // an elementwise graph op over tiles and scalars, numpy-broadcast
  Reduce,   // tile reduced along `axis` by `op` (ReduceSum, ReduceMax, ReduceMin): extent 1 there;
            // every element counts, or — with a mask (arg 1: a bool tile broadcast to the
            // input's shape; printed `where %m`) — those where it holds (a blocked tile's); a blocked
            // tile's rows also over the threads sharing them (a power of two up to a warp, or
            // whole warps); an accumulator fragment along its columns (warps_n 1): the warp's
            // quads combine. Along axis 1 into a lanes tile (the result's type says so): each
            // thread's own elements of a row only, one value per thread; a lanes tile's rows
            // reduce over their threads as a blocked tile's do. Along axis 1 into a warps tile:
            // a blocked or lanes tile's rows within each warp (shuffles); a warp_lanes tile's
            // rows into one column (shuffles over the row's warps' columns).
  Spread,   // a lanes or warps tile (arg 0) as a blocked tile of the result's type: each of a
            // thread's elements of a row takes the thread's value of that row
  // Warps tiles (args, floating-point) gathered into every warp of their rows (results: WarpLanes tiles of
  // the same shapes, printed `gather_warps %m, %s : …`): the warps' lane 0 write their values to
  // shared memory, a block barrier, each lane reads its column's. One exchange for all its args.
  GatherWarps,
  // The cluster's blocks' values of per-row tiles (args: one-column floating-point tiles, which
  // every thread of a row holds) as WarpLanes tiles [rows, n] (n the program's cluster_blocks, up
  // to 32): column r is block r's value.
  // One exchange for all its args, where cluster_values may stand (printed `gather_blocks %m, %s
  // : …`, the args' types).
  GatherBlocks,
  // The cluster's blocks' values of per-row tiles (args: blocked f32, bf16 or f16 tiles of one
  // column, which every thread of a row holds): result a·n + r is block r's value of arg a (n the
  // program's cluster_blocks), every block getting the same values. One exchange through
  // distributed shared memory for all its args; in the program's body only (printed
  // `cluster_values %m, %s : …`). A reduction over a row the cluster's blocks share is each
  // block's reduction, these, and the combine in rank order.
  ClusterValues,
  // An accumulator's 16 columns from column 16·`value` on, rounded to the result's dtype, as an
  // A fragment: a product's tile fed to the next dot as its left operand (P·V in attention)
  // without leaving registers — the m16n8 accumulator layout of two adjacent column pieces is
  // the m16k16 A layout. Needs warps_n 1 (each warp holds whole rows).
  Convert,
  For,    // results = the carried values after the loop; region args: the induction
          // variable and the carried values; args: lo, hi, step, initial carried values
  Yield,  // the carried values of the next iteration (the For region's terminator)
  If,     // runs its region when the bool scalar arg 0 holds
  // Workspace counters (u32 slots after the workspace parameter's view): LastArrival counts this
  // block in slot arg 0 (releasing its earlier writes) and gives whether it is the arg 1'th,
  // the last (acquiring the others' writes); ResetCount zeroes the slot for the next launch.
  LastArrival,
  ResetCount,
  Dot,  // acc (arg 2) + A (arg 0) · B (arg 1): tensor-core fragments (mma.sync m16n8k16)
  // Shared-memory rings (Program::shared): CopyAsync copies a parameter's tile at (arg 0, arg 1)
  // into stage arg 2 of ring `ring`, the block's threads taking 16-byte chunks (cp.async; masked
  // chunks are zero-filled); CommitGroup closes the thread's copies issued since the last one
  // into a group; WaitGroup waits until at most `value` of its groups are pending; Barrier is
  // the block's barrier; LoadShared reads fragments of stage arg 0 of a ring at (arg 1, arg 2)
  // within its tile (ldmatrix) — or, `transposed`, within the stage's transpose (printed `load
  // @ring[…] transposed`): one stage of a [keys, d] tile is both a product's B operand [16 keys,
  // d] and, transposed, [16 of d, keys] (the attention backward's K, Q and dO).
  // StoreShared writes a register tile (arg 1) rounded to the ring's dtype into the whole stage arg
  // 0 of ring `ring` — or, `transposed`, its transpose (printed `store @ring[…] transposed, %x`):
  // a product's tile made an operand of the next product that registers cannot feed (the
  // attention backward's dSᵀ, the A of dQ's product).
  CopyAsync,
  CommitGroup,
  WaitGroup,
  Barrier,
  LoadShared,
  StoreShared,
  // Warpgroup MMA (sm_90a wgmma): DotAsync starts acc (arg 1) + A·B, B the whole stage arg 0 of
  // ring `ring_b` ([k, n]), A that stage of ring `ring` ([block_m, k]: each warpgroup its 64
  // rows) — or, with `ring` −1, the A fragments args 2… ([block_m, 16] each, in registers, k/16
  // of them: a product fed to the next dot, attention's Q or P); its result is the accumulator in
  // flight, which only a DotWait, another DotAsync on it or a Yield may use. With `transposed`,
  // B is the stage's transpose (printed `@ring[stage] transposed`): a [keys, d] stage is both a
  // product's B [keys, d] and, transposed, the scores' B [d, keys] (the attention backward's). DotWait waits
  // until at most `value` of the warpgroup's DotAsyncs are in flight and gives its args' values usable.
  // B's columns start at `b_col` (printed `@ring[stage] cols N`; a multiple of 64): a product of
  // part of a stage's width (the backward's dQ, [queries, d] in halves of d). With `a_transposed`
  // (printed `dot_async @ring[stage] transposed, …`), A is the stage's transpose, read M-major:
  // a resident [keys, d] stage is the A [d, keys] of dQᵀ = Kᵀ·dSᵀ, each warpgroup its 64 of d.
  // FenceAsync orders the thread's earlier shared-memory writes (cp.async's, once waited for) before reads by
  // the asynchronous proxy (wgmma); a barrier after it makes every thread's writes visible there.
  DotAsync,
  DotWait,
  FenceAsync,
  // Warp specialization (sm_90a). Specialize, the last instruction of the program's body, splits
  // the block: region 0 is run by one thread of a producer warpgroup launched after the layout's
  // threads (its registers lowered to Program::producer_registers), region 1 by the layout's
  // threads, the consumers (raised to consumer_registers; a Barrier there is theirs alone). The
  // rings they share are TMA rings (SharedRing::tma): each stage has a full and an empty
  // mbarrier. TmaLoad (producer) copies the parameter's tile at (batch arg 0, row arg 1, column
  // arg 2) into stage arg 3 of ring `ring` through its tensor map and makes the stage's full
  // barrier expect its bytes; WaitFull (consumers) and WaitEmpty (producer) wait until stage arg
  // 0's full or empty barrier has completed the phase of parity arg 1 (a fresh barrier counts
  // its phase of parity 1 as complete); Release (consumers) arrives on stage arg 0's empty
  // barrier — every consumer thread once, after its last read of the stage (in a cluster:
  // see Program::cluster_blocks).
  // With Program::consumer_groups 2 (ping-pong), the consumers are two groups of the layout's
  // threads, each running region 1 on its own tiles (region 1's argument: the group, 0 or 1) and
  // waiting only on its own stages' barriers (each stage is one group's at a time). AwaitTurn
  // waits until the other group has handed the turn over; HandOff hands it to the other group
  // (the k loops of the two groups' tiles take turns, so each group's epilogue runs under the
  // other's k loop). With one consumer group of two warpgroups, the turns are the warpgroups',
  // taken at steps: AwaitTurn (arg 0 the step) and HandOff (args the step and the steps' count),
  // each warpgroup once a step, warpgroup 0 first — it takes step 0's turn without waiting, and
  // warpgroup 1 hands none on after the last step (both warpgroups run the same steps).
  Specialize,
  AwaitTurn,
  HandOff,
  TmaLoad,
  WaitFull,
  WaitEmpty,
  Release,
  // TMA stores (consumers): TmaStore stores tile arg 3 (an accumulator, whole warpgroups' rows)
  // to the parameter at (batch arg 0, row arg 1, column arg 2) through its tensor map, a 128-byte
  // panel of columns at a time: the group's threads write the panel into the next of the
  // group's slots of staging ring `ring` (SharedRing::staging), and once all have, the group's
  // first thread stores it by a bulk tensor copy and goes on without waiting for it; a slot is
  // written again only after the copy that read it has finished reading. Out-of-bounds rows
  // and columns (past the batch's rows, past N) are not written. WaitStores (the group's first
  // thread, or each warpgroup's where stores are by warpgroup) waits until its stores have
  // completed — before the consumers leave, and before sums added by TMA are counted in
  // (LastArrival) and read.
  // With `reduce_add` (printed `tma_store_add`) the copies add the tile into the parameter's f32
  // elements (an f32 workspace's sums; the reduction is TMA's, in L2). Into a column-major
  // parameter the tile lands in its stored rows: element (r, c) adds into the view's element
  // (batch·group_rows + col + c, row + r) — the tile is the transpose of the view's block.
  // A TmaStore with a region (printed `epilogue(%x : T, %r, %c) { … }`) stages tile arg 3 and
  // computes what it stores a chunk at a time: each panel's slot, once written, is read back in
  // chunks of the program's blocked layout (its rows of 128 bytes, a 16-byte piece a thread),
  // and the region runs once per chunk — rolled, not unrolled per element — given the chunk's
  // staged elements (%x: tile arg 3 rounded to the output's dtype), its first row and column
  // within the tile (%r, %c); what it yields (a tile of the chunk's type) is written over the
  // chunk before the panel is stored. (A GEMM's epilogue: LLVM then sees one chunk's chain, not
  // one per accumulator element.)
  TmaStore,
  WaitStores,
  // Rows staged through shared memory (bulk rings, SharedRing::bulk). NumPrograms: the launch's
  // blocks along grid axis `axis` (a persistent grid's, chosen at launch). FillStage: the block's
  // first thread copies the parameter's tile at (row arg 0, column arg 1) — one row of the ring's
  // tile, contiguous — into stage arg 2 of ring `ring` by one bulk copy, making the stage's full
  // barrier expect its bytes, and records the row as the stage's; a row at or past `limit` (arg
  // 3: the rows) is the end mark, recorded as the limit, the barrier arrived at without bytes.
  // The row may be a ticket. StageRow: the row stage arg 0 of ring `ring` holds (read once its
  // full barrier's phase is waited for: WaitFull). Claim: the block's first thread takes the
  // next row from counter slot arg 0 of the workspace `param` — arg 1 (the rows dealt before
  // the counter) plus the count before its increment — where the ticket arg 3 is below arg 2
  // (the rows), else keeps it; without arg 3, it claims. A ticket.
  NumPrograms,
  FillStage,
  StageRow,
  Claim,
  // Rows split into parts that are tasks of a persistent grid, whose blocks are all resident at
  // once: a row's parts meet in the workspace `param`'s stamped words (8-byte words from its
  // start, each a value's f32 bits and the launch's epoch; such a workspace has no f32 view and no
  // counters). Publish: the block's first thread writes args 1… (one-element f32 tiles, a part's
  // values, which every thread of the block holds) into task arg 0's words — word task·n + a
  // holds arg a's, n the values — each by one 8-byte store. GatherParts: every part's values of
  // row arg 0 — tasks row·parts … row·parts + parts − 1 (`value`: the parts) — once each word
  // carries this launch's epoch; result a is a WarpLanes tile [1, parts] whose column p is part
  // p's value of the a-th published value (printed `gather_parts %argW[%row] parts P : …`, the
  // results' types). One block barrier: every thread of the block takes it (in a branch, on a
  // condition they share). Optional args after the row, told apart by their types: `from %f`, a
  // FetchParts' words of the same row, taken as the first look at the words (their L2 round trip
  // already under way); `if %p`, a bool scalar: where it does not hold nobody waits and the
  // parts' results are unspecified (a pipelined loop's first iteration, with no row pending);
  // `warps %x, …`, warps tiles gathered as GatherWarps' behind the same barrier, their WarpLanes
  // results after the parts' (printed `gather_parts %argW[%row] parts P from %f if %p warps %x :
  // …`). FetchParts: warp 0's lanes p < parts issue the loads of row arg 0's part p's words
  // (`value`: the parts) without waiting for them: a Words value (printed `fetch_parts
  // %argW[%row] parts P : words<PxN>`).
  Publish,
  GatherParts,
  FetchParts,
  // A loop while a condition holds: args the initial carried values; region 0 (args: the
  // carried values) ends with a yield of a bool scalar, the condition; region 1 (no args; it sees
  // region 0's values) runs where it holds and ends with a yield of the next carried values.
  // Results: the carried values when the condition fails.
  While,
};
const char* opcode_name(Opcode o);
struct Program;
struct Inst;
// A GatherParts' args by role (its args after the row are told apart by their types): the row,
// the FetchParts words it starts from and its condition (-1: none), the warps tiles it gathers.
struct PartsGather {
  int row = -1, from = -1, when = -1;
  std::vector<int> warps;
};
PartsGather parts_gather(const Program& p, const Inst& i);
// IndexMul, IndexAdd, IndexDiv, IndexRem, IndexMin, IndexSub: pure index arithmetic.
bool is_index_arithmetic(Opcode o);
// Whether the values `def` makes are exact in their dtype: loaded, a constant or a cast. (Other
// 16-bit values are held in f32 unrounded until stored; the codegen carries exact ones through a
// loop two to a 32-bit register.)
bool exact_in_dtype(const Inst& def);
// Where row `row` of a windowed tensor (rows of `width`, back to back) starts within its aligned
// vector of `vec` (a power of two): (row · width) mod vec, without forming the product.
inline int64_t window_shift(int64_t row, int64_t width, int64_t vec) { return row % vec * (width % vec) % vec; }
// A reduction's (ReduceSum, ReduceMax, ReduceMin) identity — 0, −inf, inf — and the elementwise
// op that combines two of its partials.
double identity_of(Op reduction);
Op combine_of(Op reduction);

struct Region;

struct Inst {
  Opcode opcode = Opcode::Const;
  std::vector<int> results;  // value ids
  std::vector<int> args;     // value ids
  Op op = Op::Add;           // Compute, Reduce: the graph op
  int param = -1;            // Load, Store
  std::vector<bool> masked;  // Load, Store: the axes whose offsets may pass the view's extent
  std::vector<int> limits;   // Load, Store: per masked axis, the bound (a value; -1: the view's extent)
  // Windowed rows (printed `window V`): rows whose width W (the parameter's view[1]) is not a
  // multiple of the vector width V, each read from the aligned vector its first element lies in.
  // A Load or Store's element (i, j) at offsets (r, c) is the parameter's element (r + i, c + j −
  // window_shift(r + i, W, V)) — r + i the domain's row, also where the parameter is broadcast
  // along the rows (a weight shared by them: then each row's tile is shifted by its own place);
  // its columns are masked, and a load's elements outside [0, W) are unspecified (codegen reads
  // whole aligned vectors, the neighbouring rows' elements), a store writes only those inside.
  // The column offset c is a multiple of V (codegen's vector accesses rely on it), and the tile
  // spans the columns. Also InWindow's V, and a linear Iota's whose columns are window columns
  // (InWindow's width and the iota's stride are the rows' W). 0: none.
  int window = 0;
  int axis = 0;              // ProgramId, Reduce
  int ring = -1;             // CopyAsync, LoadShared, DotAsync (A): the shared ring
  int ring_b = -1;           // DotAsync: B's ring
  double value = 0;          // Const; WaitGroup: the groups that may stay pending
  // Iota with two offsets (row, column): each element's linear index (row·iota_stride + column)
  // / iota_div, modulo iota_mod — a graph iota's index along its axis in a domain whose axes the
  // tile's rows and columns merge.
  int64_t iota_stride = 0, iota_div = 1, iota_mod = 0;
  bool nonpositive_arg = false;  // Compute exp: its argument is never positive (graph/sign.h)
  // Compute exp2 of an online softmax's term (printed `exp2 %x ftz`): a result below 2^-126 may
  // be 0. Each row's terms include one of 1 (its max's), so such a term adds nothing the f32
  // sum keeps, and ex2.approx.ftz is one MUFU instruction where ex2.approx is four.
  bool flush_subnormal = false;
  // Compute tanh (f32) of an attention score (printed `tanh %x abs`): only its absolute error
  // counts, the score shifting an exponent whose term is rounded to 16 bits (math::tanh_absolute;
  // fusion/contraction_chain.h, absolute_error_suffices).
  bool absolute_error = false;
  // Compute mul of an f32 tile by a factor tile that is mostly exactly 1 (printed `mul %o, %a
  // lazy`): an online softmax's rescale of O where its max is raised lazily (Builder::
  // lazy_rescale). Each warp skips the products where every factor it holds is 1 — the
  // product's value either way.
  bool skip_ones = false;
  // TmaLoad in a cluster: the stage's 128-byte panels are shared out over the cluster's blocks
  // (block r copies panels r, r + cluster, …), each copy written into every block's stage.
  bool multicast = false;
  // DotWait that stays where it stands (printed `dot_wait … pinned`): the work before it runs
  // while the products are in flight. Without it ptxas may move the wait up past that work — it
  // did past an online softmax, to write the next P's fragments into the registers the product
  // in flight reads — and the work runs after the products instead of under them.
  bool pinned = false;
  // TmaStore (printed `… via @ring by warpgroup`): each warpgroup stages its own 64 rows and its
  // first thread stores them, behind barriers of the warpgroup's alone, every panel of the tile
  // at once where the slots hold them.
  bool by_warpgroup = false;
  bool transposed = false;  // LoadShared, DotAsync (B), StoreShared: the stage's transpose
  bool a_transposed = false;  // DotAsync: A is its ring's stage transposed (read M-major)
  // Store (printed `store_add`), TmaStore (printed `tma_store_add`): added into the parameter's
  // elements.
  bool reduce_add = false;
  int64_t b_col = 0;        // DotAsync: B's first column of its stage
  std::vector<Region> regions;
};

struct Region {
  std::vector<int> args;  // value ids defined on entry (For: induction variable, carried values)
  std::vector<Inst> body;
};

// A ring of shared-memory tiles that asynchronous copies fill and fragment loads (or wgmma) read:
// `stages` tiles of [rows, cols] of one parameter, each stored in that parameter's memory order
// (row by row, or column by column for a column-major one) in 16-byte chunks swizzled so that the
// 8 rows an ldmatrix reads at one column, and the 8 chunks a quarter-warp writes, fall in 8
// different bank groups (shared_chunk in codegen). Stored rows longer than 128 bytes are kept as
// panels of 128-byte rows (every row's first 128 bytes, then the next 128, …), each 8-row group
// swizzled as wgmma's 128-byte mode reads it; a ring wgmma reads starts at a 1024-byte boundary.
struct SharedRing {
  std::string name;
  DType dtype = DType::BF16;
  int stages = 2;
  Shape tile;              // [rows, cols] of one stage
  bool col_major = false;  // stored column by column
  bool wgmma = false;      // read by DotAsync: each stage 1024-byte aligned
  bool tma = false;        // filled by TmaLoad, with a full and an empty mbarrier per stage
  // Written from registers and read by TmaStore's copies: a 128-byte panel of an output's tile
  // per stage (rows of 128 bytes, TMA's 128-byte swizzle), stages/consumer_groups slots per
  // consumer group; each stage 1024-byte aligned.
  bool staging = false;
  // Filled a row at a time by FillStage (bulk copies, no tensor map), a full mbarrier and the
  // row it holds per stage; read back by `load` in the program's blocked layout.
  bool bulk = false;
  int64_t align() const { return wgmma || staging ? 1024 : 128; }
  int64_t stage_bytes() const { return num_elements(tile) * static_cast<int64_t>(dtype_size(dtype)); }
  int64_t bytes() const { return stages * stage_bytes(); }
};

struct Program {
  std::string name;
  std::vector<Param> params;  // inputs first, then outputs
  std::vector<int64_t> grid;  // blocks along each grid axis
  Layout layout;              // of every register tile that is not a tensor-core fragment
  std::optional<MmaConfig> mma;  // the warps' arrangement for fragments
  std::vector<SharedRing> shared;  // laid out one after another in dynamic shared memory
  Region body;
  std::vector<Type> types;    // value id → type
  // Launch attributes codegen honours (they mirror the schedule): registers capped so that this
  // many blocks fit on an SM (0: no cap); element indices in 64 bits (else 32).
  int min_blocks_per_sm = 0;
  bool wide_indices = false;
  // Warp-specialized (a Specialize instruction): a producer warpgroup is launched after the
  // layout's threads; setmaxnreg gives it producer_registers and the consumers
  // consumer_registers. 0: not specialized.
  int producer_registers = 0, consumer_registers = 0;
  // Specialized: the groups of the layout's threads that consume (2: ping-pong on their own
  // tiles), each group's registers consumer_registers.
  int consumer_groups = 1;
  // > 1: launched in clusters of this many consecutive blocks (rank: the block's id modulo it).
  // A specialized program's TMA rings are then the cluster's: a multicast TmaLoad fills every
  // block's stage, a Release arrives on every block's empty barrier (one lane per warp and
  // block), and the producer waits for its last stages to be emptied before it exits.
  int cluster_blocks = 1;

  // The threads the layout spreads tiles over (the consumers, where specialized).
  int block_threads() const { return layout.block_threads(); }
  bool specialized() const { return producer_registers > 0; }
  static constexpr int kProducerThreads = 128;
  int launch_threads() const {
    return specialized() ? block_threads() * consumer_groups + kProducerThreads : block_threads();
  }
  // The registers each thread of a specialized block starts with: ptxas allocates the cap of
  // min_blocks_per_sm blocks (at least one) per SM (64 Ki over their threads, in steps of 8; at
  // most 240). setmaxnreg moves registers within the block, so the producer's and consumers'
  // shares must fit in this many per thread, or the consumers' increase waits forever.
  int entry_registers() const {
    return std::min(240, 65536 / (launch_threads() * entry_blocks_per_sm()) / 8 * 8);
  }
  // The blocks per SM a specialized program's registers are capped for at entry: at least one.
  int entry_blocks_per_sm() const { return std::max(1, min_blocks_per_sm); }
  // Specializes the registers: 24 for the producer, the rest of what the block starts with for
  // the consumers (in steps of 8, at most 240: two warpgroups 240 each, four 112). Needs
  // consumer_groups set.
  void split_registers() {
    producer_registers = 24;
    const int pool = entry_registers() * launch_threads() - kProducerThreads * producer_registers;
    consumer_registers = std::min(240, pool / (block_threads() * consumer_groups) / 8 * 8);
  }
  // Whether wgmma reads any of its rings: the program is then sm_90a's.
  bool uses_wgmma() const {
    for (const SharedRing& r : shared)
      if (r.wgmma) return true;
    return false;
  }
  // Ring i's first byte in the block's dynamic shared memory (rings one after another, each at
  // its alignment), and the bytes of them all.
  int64_t ring_offset(size_t i) const {
    int64_t n = 0;
    for (size_t j = 0;; ++j) {
      n = (n + shared[j].align() - 1) / shared[j].align() * shared[j].align();
      if (j == i) return n;
      n += shared[j].bytes();
    }
  }
  int64_t shared_bytes() const {
    return shared.empty() ? 0 : (ring_offset(shared.size() - 1) + shared.back().bytes() + 127) / 128 * 128;
  }
  // A new value of type t.
  int add_value(const Type& t) {
    types.push_back(t);
    return static_cast<int>(types.size()) - 1;
  }
};

// Whether an instruction (straight in a region, not in its own regions) has a block barrier that
// every thread of the block reaches: a reduction of a row over whole warps, the warps' values
// gathered, a barrier, a counting in, a cluster's exchange (not in a consumer group, whose
// barriers are its own).
bool syncs_block(const Program& p, const Inst& i, bool in_consumer_group);

std::string print_program(const Program& p);
// Parses print_program's text; throws Error with the line and what was expected.
Program parse_program(const std::string& text);

// Appends instructions to a region, allocating their results in the program.
class Builder {
 public:
  Builder(Program& p, Region& r) : p_(p), r_(&r) {}
  Region& region() { return *r_; }
  Program& program() { return p_; }

  int program_id(int axis);
  int index(int64_t v);
  int scalar(double v, DType t);
  int tile_const(double v, DType t, const Shape& shape, Frag frag = Frag::None);
  int mul(int a, int b);
  int add(int a, int b);
  int div(int a, int b);
  int rem(int a, int b);
  int min(int a, int b);
  int max(int a, int b) { return add(a, sub(b, min(b, a))); }  // (unsigned: no index op of its own)
  int ceil_index(int one_element_tile);
  // The index into a tensor broadcast along some of `dims` (its extents `own`, 1 where broadcast;
  // both right-aligned) of element `flat` of `dims` (row-major): the digits of flat along the
  // axes the tensor has. (GQA's K/V head of a query head, a matmul operand's batch.)
  int broadcast_index(int flat, const Shape& dims, const Shape& own);
  int sub(int a, int b);
  int in_bounds(int offset, int limit, int axis, const Shape& shape, Frag frag = Frag::None);
  // Windowed rows (Opcode::InWindow): whether each element at (row, col) is its row's own.
  int in_window(int row, int col, int width, int vec, const Shape& shape);
  int iota(int offset, int axis, const Shape& shape, Frag frag = Frag::None);
  // (row0 + row)·stride + col0 + col of each element, / div, % mod, as f32 (windowed rows of
  // vector `window`: the column less its row's window_shift).
  int linear_iota(int row0, int col0, int64_t stride, int64_t div, int64_t mod, const Shape& shape, int window = 0);
  int last_arrival(int workspace_param, int slot, int arrivals);
  void reset_count(int workspace_param, int slot);
  // Runs `body` (given a builder for the region) when the bool scalar `cond` holds.
  void when(int cond, const std::function<void(Builder&)>& body);
  // `masked`: the axes whose offsets may pass the view's extent (empty: none); `limits`: per
  // axis, a value that bounds it instead (-1: the view's extent).
  int load(int param, const std::vector<int>& offsets, const Shape& shape, const std::vector<bool>& masked = {},
           const std::vector<int>& limits = {}, Frag frag = Frag::None);
  int dot(int a, int b, int acc);
  void copy_async(int param, const std::vector<int>& offsets, int ring, int stage, const std::vector<bool>& masked,
                  const std::vector<int>& limits);
  void commit_group();
  void wait_group(int pending);
  void barrier();
  int load_shared(int ring, int stage, const std::vector<int>& offsets, const Shape& shape, Frag frag,
                  bool transposed = false);
  int dot_async(int ring_a, int ring_b, int stage, int acc, bool b_transposed = false, int64_t b_col = 0,
                bool a_transposed = false);
  // acc + A·B with A the fragments `a` (registers) and B stage `stage` of ring `ring_b`.
  int dot_async(const std::vector<int>& a, int ring_b, int stage, int acc, bool b_transposed = false);
  std::vector<int> dot_wait(const std::vector<int>& accs, int pending, bool pinned = false);
  void fence_async();
  // Warp specialization: `producer` and `consumers` fill Specialize's two regions (the
  // consumers' given their group).
  void specialize(const std::function<void(Builder&)>& producer,
                  const std::function<void(Builder&, int group)>& consumers);
  // Turns (see Opcode::AwaitTurn): between the ping-pong groups without a step, or between one
  // group's two warpgroups at step `step` of `steps`.
  void await_turn(int step = -1);
  void hand_off(int step = -1, int steps = -1);
  int less(int a, int b);  // bool scalar a < b of two indices
  int num_programs(int axis);
  // Rows staged through bulk ring `ring` (Opcode::FillStage, StageRow, Claim).
  void fill_stage(int param, int row, int col, int ring, int stage, int rows);
  int stage_row(int ring, int stage);
  int claim(int workspace_param, int slot, int dealt, int rows = -1, int ticket = -1);
  // A blocked tile of `shape` from stage `stage` of bulk ring `ring`, from column `col` on.
  int load_stage(int ring, int stage, int col, const Shape& shape);
  void tma_load(int param, int batch, int row, int col, int ring, int stage, bool multicast = false);
  void wait_full(int ring, int stage, int parity);
  void wait_empty(int ring, int stage, int parity);
  void release(int ring, int stage);
  // Step `step` of a TMA ring of `stages` stages (the steps counted on from the ring's first use):
  // its stage, and the parity of the phase that fills it (consumers) or — one use later — empties
  // it (`emptied`: the producer; a fresh barrier's phase of parity 1 counts as complete).
  std::pair<int, int> ring_stage(int step, int64_t stages, bool emptied);
  void tma_store(int param, int batch, int row, int col, int tile, int ring, bool reduce_add = false,
                 bool by_warpgroup = false);
  // The same with an epilogue region run per staged chunk (Opcode::TmaStore): `body` gets the
  // chunk's staged tile of `chunk` shape and its row and column within the tile, and returns the
  // tile to store in its place.
  using ChunkBody = std::function<int(Builder&, int staged, int row, int col)>;
  void tma_store(int param, int batch, int row, int col, int tile, int ring, const Shape& chunk,
                 const ChunkBody& body);
  void wait_stores();
  void store(int param, const std::vector<int>& offsets, int tile, const std::vector<bool>& masked = {},
             const std::vector<int>& limits = {});
  // The tile added into an f32 parameter's elements (Inst::reduce_add).
  void store_add(int param, const std::vector<int>& offsets, int tile, const std::vector<bool>& masked = {},
                 const std::vector<int>& limits = {});
  // Tile `tile` (or its transpose) into stage `stage` of `ring` (StoreShared).
  void store_shared(int ring, int stage, int tile, bool transposed = false);
  // Windowed rows of vector `vec` (Inst::window): a load and a store at window columns, their
  // rows masked against the view's where `rows_masked`.
  int load_window(int param, int row, int col, const Shape& shape, int vec, bool rows_masked);
  void store_window(int param, int row, int col, int tile, int vec, bool rows_masked);
  int splat(int scalar, const Shape& shape, Frag frag = Frag::None);
  // `nonpositive_arg`: an exp whose argument is never positive (printed `exp %x nonpositive`).
  int compute(Op op, const std::vector<int>& args, DType dtype, bool nonpositive_arg = false);
  // 2^x (f32) for an online softmax's term, subnormal results flushed (Inst::flush_subnormal).
  int softmax_exp2(int x);
  // tanh (f32) of an attention score, where only its absolute error counts (Inst::absolute_error).
  int score_tanh(int x);
  // x · factor (f32 tiles), factor mostly exactly 1: each warp skips the products where all its
  // factors are (Inst::skip_ones).
  int lazy_rescale(int x, int factor);
  // (`mask` ≥ 0: only the elements where that bool tile holds count; see Opcode::Reduce.)
  int reduce(Op op, int tile, int axis, int mask = -1);
  // A blocked tile's rows reduced within each thread: a lanes tile of one value per thread.
  int reduce_lanes(Op op, int tile, int mask = -1);
  // A blocked or lanes tile's rows reduced within each warp: a warps tile (Frag::Warps).
  int reduce_warps(Op op, int tile, int mask = -1);
  // Warps tiles gathered into every warp of their rows (Opcode::GatherWarps): WarpLanes tiles,
  // which `reduce` takes to one column by shuffles alone.
  std::vector<int> gather_warps(const std::vector<int>& warps);
  // The cluster's blocks' values of each of `per_row` (Opcode::GatherBlocks): a WarpLanes tile
  // each, column r block r's.
  std::vector<int> gather_blocks(const std::vector<int>& per_row);
  // The cluster's blocks' values of each of `per_row` (Opcode::ClusterValues): [a·n + r] is
  // block r's of per_row[a].
  std::vector<int> cluster_values(const std::vector<int>& per_row);
  // A part's values published for task `task` (Opcode::Publish), and row `row`'s parts' values
  // of `values` published values each (Opcode::GatherParts): a WarpLanes tile [1, parts] each.
  void publish(int workspace_param, int task, const std::vector<int>& values);
  std::vector<int> gather_parts(int workspace_param, int row, int parts, int values);
  // Row `row`'s parts' words, `values` a part, loaded by warp 0's lanes without waiting
  // (Opcode::FetchParts): a Words value for a later gather_parts of the row.
  int fetch_parts(int workspace_param, int row, int parts, int values);
  // A lanes or warps tile spread over the blocked tile of `shape` (each thread's value over its
  // elements).
  int spread(int lanes, const Shape& shape);
  // Columns [16·chunk, 16·chunk + 16) of accumulator `acc` as an A fragment of dtype `dtype`.
  int convert(int acc, int chunk, DType dtype);
  // A loop over [lo, hi) by `step` carrying `inits`: `body` fills the loop's region, given a
  // builder for it, the induction variable and the carried values, and returns the values the
  // next iteration carries. Returns the carried values after the loop.
  using LoopBody = std::function<std::vector<int>(Builder&, int iv, const std::vector<int>& carried)>;
  std::vector<int> for_loop(int lo, int hi, int step, const std::vector<int>& inits, const LoopBody& body);
  // A loop while `cond` (given a builder for region 0 and the carried values) gives true: `body`
  // (a builder for region 1, which sees region 0's values) returns the next carried values.
  // Returns the carried values after the loop.
  using LoopCondition = std::function<int(Builder&, const std::vector<int>& carried)>;
  using WhileBody = std::function<std::vector<int>(Builder&, const std::vector<int>& carried)>;
  std::vector<int> while_loop(const std::vector<int>& inits, const LoopCondition& cond, const WhileBody& body);

 private:
  int emit(Inst i, std::optional<Type> result);
  // A tile's rows reduced along axis 1 into a tile of `columns` columns of layout `into` (a value
  // per thread, or per warp).
  int reduce_along_row(Op op, int tile, int mask, Frag into, int columns);
  // An exchange of `args` (gather_warps, gather_blocks, cluster_values): `per_arg` results for
  // each, of the type `result` makes of the arg's.
  std::vector<int> exchange(Opcode opcode, const std::vector<int>& args, int per_arg,
                            const std::function<Type(Type)>& result);
  Program& p_;
  Region* r_;
};

}  // namespace tilefuse::tir
