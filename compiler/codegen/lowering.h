#pragma once
// The state and helpers of the Tile IR → LLVM IR lowering (lower_to_llvm.h), shared by its
// files: the common parts and rows held in registers (lower_to_llvm.cpp), persistent rows
// staged through shared memory (lower_staged.cpp), rows split into parts that meet in global
// memory (lower_split.cpp). (Rows visited by a loop over column tiles are Tile IR v2's:
// compiler/tile/row_loop.cpp.)
// Internal to compiler/codegen.
#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/codegen/llvm_support.h"
#include "compiler/support/error.h"
#include "compiler/tile/tile_ir.h"

namespace tilefuse {

using llvm::Value;

class Lowering {
 public:
  Lowering(const TileProgram& p, llvm::LLVMContext& ctx)
      : p_(p), s_(p.schedule), ctx_(ctx), b_(ctx), m_(std::make_unique<llvm::Module>(p.name, ctx)) {}

  std::unique_ptr<llvm::Module> run();

 private:
  using Regs = std::vector<Value*>;

  int rows_of(const TileType& t) const { return t.rows ? s_.rows_per_thread : 1; }
  int cols_of(const TileType& t) const { return t.cols ? s_.vec * s_.chunks_per_thread : 1; }
  Value* at(int v, int r, int c) const {
    const TileType& t = types_[v];
    return values_[v][(t.rows ? r : 0) * cols_of(t) + (t.cols ? c : 0)];
  }

  llvm::Type* storage_type(DType t);

  Value* sreg(llvm::Intrinsic::ID id) { return b_.CreateIntrinsic(b_.getInt32Ty(), id, {}); }
  // Element indices along rows and columns: i32, or i64 where the schedule's extent needs it
  // (TileSchedule::wide_indices); `index` is a constant and `to_index` a widened u32 of that type.
  llvm::IntegerType* index_ty() { return s_.wide_indices() ? b_.getInt64Ty() : b_.getInt32Ty(); }
  Value* index(int64_t v) { return llvm::ConstantInt::get(index_ty(), static_cast<uint64_t>(v)); }
  Value* to_index(Value* u32) { return b_.CreateZExt(u32, index_ty()); }
  // A call of a non-overloaded intrinsic.
  Value* intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<Value*> args = {}) {
    return b_.CreateIntrinsic(id, llvm::ArrayRef<llvm::Type*>{}, args);
  }

  // Thread → (row, col) of its elements; masks only when tiles do not cover the domain.
  void prologue();

  // Element offset of (row r of this thread, first column of its chunk k) in a parameter's view.
  Value* offset(const Shape& view, bool spans_rows, bool spans_cols, int r, int k) {
    Value* off = row_offset(view, spans_rows, r);
    if (!spans_cols) return off;
    return b_.CreateAdd(off, b_.CreateZExt(cols_[k], b_.getInt64Ty()), "", true, true);
  }
  // Element offset of the start of row r of this thread in a parameter's view (0 if it does
  // not span rows).
  Value* row_offset(const Shape& view, bool spans_rows, int r);
  // Whether a view's rows lie where the domain's do (row i at i · cols): it spans every row dimension.
  bool laid_out_as_domain(const Shape& view) const;

  // ---- windowed rows (TileSchedule::window; lower_window.cpp) ----

  // Chunk k's vector starts at window column window(k) of the row's aligned start row_start_ (an
  // i64 element offset: the row's first element less its shift, a multiple of vec). Which of the
  // thread's elements lie in the row is one bit each of window_bits_; each use tests its bit
  // afresh, so a row's masks cost one register however many reductions and stores read them.
  void window_columns(Value* col0);
  Value* window(int k) { return b_.CreateAdd(window0_, index(int64_t{k} * s_.threads_per_row * s_.vec)); }
  // Whether chunk k's vector holds any of the row.
  Value* window_any(int k) { return b_.CreateICmpULT(window(k), b_.CreateAdd(row_shift_, index(s_.cols))); }
  Value* in_row(int k, int e);
  // Whether all the thread's elements lie in the row (all but the threads at its two ends).
  Value* whole_window();
  // Whether the threads whose elements all lie in the row take their reductions' partials without
  // masks (thread_partial): windowed 16-bit rows (8 elements a vector), whose instructions weigh
  // twice what f32 rows' do per byte. There the mask tests cost 12–18% (softmax over 4097 bf16
  // columns 0.086 → 0.070 ms without them); f32 rows gained nothing and the vocabulary's lost
  // 4% (bench/NOTES.md, "Odd widths: fewer instructions").
  bool unmasked_partials() const { return s_.window && s_.vec >= 8; }
  // Element e of chunk k's column in the row (0 where it is outside).
  Value* row_column(int k, int e) {
    return b_.CreateSelect(in_row(k, e), b_.CreateSub(b_.CreateAdd(window(k), index(e)), row_shift_), index(0));
  }
  void load_window(const TileInst& i);
  Value* unaligned_vector(int param, Value* first, const std::string& name);
  void store_window(const TileInst& i);
  Value* window0_ = nullptr;
  Value* row_start_ = nullptr;
  Value* row_shift_ = nullptr;
  Value* window_bits_ = nullptr;

  Value* to_compute(Value* v, DType t);
  Value* to_storage(Value* v, DType t);

  void lower(const TileInst& i);

  void load(const TileInst& i);

  // `vec` contiguous elements of type `dtype` at `ptr` (global or shared), in compute precision;
  // `widely_used`: the value feeds many instructions, so each element gets its own register.
  void load_vector(Value* ptr, DType dtype, int vec, const std::string& name, bool widely_used, Regs* regs);
  bool widely_used(int v) const {
    int uses = 0;
    for (const TileInst& i : p_.body) uses += static_cast<int>(std::count(i.args.begin(), i.args.end(), v));
    return uses > 64;
  }

  // Runs `body` only where `cond` holds (nullptr: always).
  template <typename F>
  void guarded(Value* cond, F body) {
    tilefuse::guarded(b_, fn_, cond, body);
  }

  Value* both(Value* a, Value* b) { return !a ? b : !b ? a : b_.CreateAnd(a, b); }

  void store(const TileInst& i);

  Value* combine(Op op, Value* a, Value* b);

  // Whether no instruction of the body but `user` reads value v.
  bool used_only_by(int v, int user) const;

  // This thread's share of row r of value v (masked columns contribute the identity).
  Value* thread_partial(Op op, int v, int r);

  static double identity_of(Op op) {
    return op == Op::ReduceSum ? 0.0 : op == Op::ReduceMax ? -INFINITY : INFINITY;
  }

  // A fresh shared-memory array per reduction, so no slot is ever reused (no barrier to
  // protect a second use).
  llvm::GlobalVariable* shared_slots(uint64_t n, const char* name);

  void block_barrier() {
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {}, {b_.getInt32(0)});
  }

  // Shared slots for one value per warp (or cluster rank) per row: in a persistent loop two
  // sets alternate by row, so that a row's writes need no barrier after the last row's reads
  // (a row's reads end before the next row's barrier, which precedes the row after's writes).
  Value* row_slots(uint64_t n, const char* name) {
    if (!row_parity_) return shared_slots(n, name);
    return slots_at_parity(shared_slots(2 * n, name), row_parity_, static_cast<uint32_t>(n));
  }

  // Combines the row's threads: butterfly shuffles within a warp, then — for rows wider than a
  // warp — shared memory, one slot per warp; then, for a row split over a cluster, the blocks.
  Value* allreduce(Op op, Value* acc, int r) {
    acc = block_allreduce(op, acc, r);
    return s_.cluster_blocks > 1 ? cluster_allreduce(op, acc) : acc;
  }

  // Butterfly shuffles over `lanes` lanes: every lane gets the same total.
  Value* warp_allreduce(Op op, Value* acc, int lanes);

  Value* block_allreduce(Op op, Value* acc, int r);

  // Every block of the cluster holds its part's values (all its threads do). Thread t pushes
  // them into slot [rank] of block t's arrays; after the cluster barrier (release/acquire)
  // every block's arrays hold all ranks' values. Returns one array per value. A persistent
  // kernel alternates two sets of arrays by row: a block may push the next row's values while
  // a slower peer still reads this row's, but not two rows ahead (that needs the peer at the
  // next row's barrier, after its reads).
  std::vector<Value*> cluster_exchange(const std::vector<Value*>& mine);

  Value* slot(Value* slots, Value* rank) {
    return b_.CreateAlignedLoad(b_.getFloatTy(), b_.CreateInBoundsGEP(b_.getFloatTy(), slots, rank),
                                llvm::Align(4));
  }

  // Combined in rank order, so every block gets bit-identical totals.
  Value* cluster_allreduce(Op op, Value* acc);

  // ---- rows held in registers (lower_to_llvm.cpp, with everything not marked otherwise) ----

  // Body instructions [begin, end) for a row held in registers (staged loads already there).
  void lower_resident(size_t begin = 0, size_t end = SIZE_MAX);

  // ---- persistent rows staged through shared memory (lower_staged.cpp) ----

  bool staged(const TileInst& i) const { return i.opcode == TileOpcode::Load && i.type.rows && i.type.cols; }

  // Byte offset of each staged parameter's part within a stage.
  std::map<int, int64_t> stage_layout() const;

  // The stages' mbarriers (one per stage, expecting its bytes) and the dynamic shared memory
  // that holds them; thread 0 initializes the mbarriers before a block barrier.
  void init_stages();

  Value* leader() { return b_.CreateICmpEQ(sreg(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x), b_.getInt32(0)); }
  Value* stage_barrier(Value* stage) { return b_.CreateInBoundsGEP(b_.getInt64Ty(), stage_full_, stage); }
  Value* stage_at(Value* stage, int param);
  // Iteration `it` of a persistent loop uses stage it % stages, whose mbarrier then completes
  // phase (it / stages) mod 2.
  Value* stage_of(Value* it) { return b_.CreateURem(it, b_.getInt32(s_.stages), "stage"); }
  Value* phase_of(Value* it) {
    return b_.CreateAnd(b_.CreateUDiv(it, b_.getInt32(s_.stages)), b_.getInt32(1), "phase");
  }

  // Thread's release of its earlier accesses and a relaxed increment of the u32 at `at` (an
  // acquirer adds its own fence); returns the value before. (LLVM 22 emits an acq_rel
  // atomicrmw as a relaxed atom, so the fences are explicit.)
  Value* release_increment(Value* at, llvm::SyncScope::ID scope) {
    b_.CreateFence(llvm::AtomicOrdering::Release, scope);
    return b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, at, b_.getInt32(1), llvm::Align(4),
                              llvm::AtomicOrdering::Monotonic, scope);
  }

  // Thread 0: the block's part `part` (its column block) of `row` into `stage`, by one bulk copy
  // per staged tensor, completing on the stage's mbarrier.
  void fill_stage(Value* stage, Value* row, Value* part);

  // Every thread waits for the stage's mbarrier to complete `phase`, then copies its columns of
  // the staged tensors into registers.
  void load_stage(Value* stage, Value* phase) {
    wait_stage(stage, phase);
    read_stage(stage);
  }
  void wait_stage(Value* stage, Value* phase);
  void read_stage(Value* stage);

  // Rows of a cluster's blocks (rows claimed one a block are Tile IR v2's). The grid holds
  // as many row groups (clusters) as fit at once; group g reduces rows g, g + groups, … Thread 0 keeps
  // `stages` rows ahead in flight. Every thread waits on the stage's mbarrier (its phase flips once per use),
  // copies the part into registers, and after a block barrier (all have read it) thread 0 refills the stage
  // with the row `stages` ahead; the row is then reduced and written from registers while that copy is in
  // flight.
  void lower_staged();

  // ---- split rows: a row's parts are tasks of the persistent grid (lower_split.cpp) ----

  // The online sum that completes the row's reductions (the schedule admits only a max and its
  // online sum), and the values computed before it that the rest of the body uses: loads and the
  // sum's exps are carried to the next iteration; the rest is recomputed from them.
  int split_sum() const;
  // With `recompute`, the exps are recomputed too (from the carried loads, with the row's max).
  std::vector<int> carried_after(int r, bool recompute) const;

  // The columns of this thread in part `part` of a row.
  void set_part(Value* part);

  // The pairs of split rows in global memory: a pair is two 8-byte words, (max, epoch) and
  // (sum, epoch), each stored and loaded whole at device scope, so a reader needs no fence or
  // counter: a word with this launch's epoch (the last parameter; launch n of the kernel passes
  // n) carries its value. Warp 0's lanes i < P fetch a row's pairs (lane i: part i) into shared
  // slots, two sets alternating by iteration.
  struct PairExchange;

  // Task t is part t % P of row t / P, and block b takes tasks b, b + G, … (G blocks, all
  // resident: a cooperative launch). In each iteration the block
  //   1. warp 0 starts loading the previous task's row — its P published pairs — while the
  //      block waits for this task's stage, copies the part into registers and takes each
  //      warp's (max, sum of exps) pair into shared slots; warp 0 then checks that every pair
  //      it loaded is this launch's (reloading any that is not yet) and puts them in shared
  //      slots too;
  //   2. meets at one block barrier; with 16 elements per thread, thread 0 refills this task's
  //      stage;
  //   3. merges the warps' pairs into the part's pair, which thread 0 publishes;
  //   4. writes the previous task: its row's pairs merged into (M, S); with 16 elements per
  //      thread its warps' exps, kept in registers, rescaled by exp(c(m_w) − c(M)); with 32,
  //      the part read again from its stage (the last warp to read it refills it) and its exps
  //      recomputed with M; the rest of the body computed from them and stored.
  // A block thus never waits for its peers on the task it has just reduced: a row's parts are
  // published an iteration before anyone needs them. The last task is written after the loop.
  void lower_split();

  // ---- the online sum and its pairs ----

  // Drops every elementwise value after `m` (value ids are body indices), so that what depended
  // on m is recomputed from its current value when next needed.
  void forget_computed_after(int m) {
    for (size_t k = static_cast<size_t>(m) + 1; k < values_.size(); ++k)
      if (p_.body[k].opcode == TileOpcode::Compute) values_[k].clear();
  }

  // Per-row value `id` with max reduction `m` taken to be `v`; other values are left as they were.
  Value* per_row_with(int id, int m, Value* v);

  // Softmax's sum of exp(u − c(m)) with max m, for a row of whole warps: each warp takes its
  // own max m_w and sum s_w of exp(u − c(m_w)) with shuffles alone; the pairs then merge level
  // by level — the block's warps through shared memory, a cluster's blocks through distributed
  // shared memory — each merge one barrier: M = max m_i, S = Σ s_i · exp(c(m_i) − c(M)). So a
  // row takes one block barrier (and one cluster barrier) instead of one per reduction per
  // level. The warp's exp values are rescaled by exp(c(m_w) − c(M)) rather than recomputed;
  // everything else that used m_w is recomputed with M.
  void online_sum(const TileInst& r);
  // Completes online sum r with the row's (M, S) = (m_row, s_row): the warp's exps, computed
  // with its own max m_w (c(m_w) = c_warp, sum s_warp), rescaled by exp(c(m_w) − c(M)); what
  // else used the max is recomputed with M.
  void settle_online_sum(const TileInst& r, Value* c_warp, Value* s_warp, Value* m_row, Value* s_row);
  // Slots [parity·n, parity·n + n) of a shared array of 2n.
  Value* slots_at_parity(llvm::GlobalVariable* a, Value* parity, uint32_t n) {
    return b_.CreateInBoundsGEP(b_.getFloatTy(), a, b_.CreateMul(parity, b_.getInt32(n)));
  }

  // The (max, sum) pairs of `n` ≤ 32 parts, in slots [0, n): lane i takes part i's pair and a
  // butterfly over the warp combines them (the same order in every warp of every block, so all
  // get bit-identical totals): one exp per thread instead of one per part.
  std::pair<Value*, Value*> merge_pairs(int m, int c, Value* max_slots, Value* sum_slots, int n);

  // Whether max reduction `m` and its online sum take the warp-pair path: one row per block of
  // whole warps, and no other reduction between them (it would see a warp's max, not the row's).
  bool pairs_path(int m) const;

  void reduce(const TileInst& i);

  // The reduction over this thread's warp only (one row per block of whole warps).
  void warp_reduce(const TileInst& i) {
    types_[i.result] = i.type;
    values_[i.result] = {warp_allreduce(i.op, thread_partial(i.op, i.args[0], 0), 32)};
  }

  // ---- values: evaluation and elementwise ops ----

  const TileInst& inst_of(int id) const { return p_.body[static_cast<size_t>(id)]; }  // ids are body indices

  // Computes value `id` (and what it needs) in the current context; completed reductions and
  // values set by the caller are kept.
  void ensure(int id);

  // Whether value v is x − c with c one value per row (broadcast along the columns).
  bool row_subtrahend(int v) const;

  void compute(const TileInst& i);

  Value* f32(double v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); }

  Value* element(const TileInst& i, const std::vector<Value*>& a);

  static std::string sanitize(const std::string& s);

  const TileProgram& p_;
  const TileSchedule& s_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  std::unique_ptr<llvm::Module> m_;
  llvm::Function* fn_ = nullptr;
  Value* tc_ = nullptr;          // thread's position along the row
  Value* tr_ = nullptr;          // thread's row within the block
  Value* rank_ = nullptr;        // block's column block (i32): its rank in a row's cluster
  bool cluster_joined_ = false;  // the cluster's start barrier has been waited on
  Value* row_parity_ = nullptr;        // persistent kernels: the parity of the block's row count
  std::vector<Value*> cols_, col_ok_;  // per chunk: column indices (index_ty) and their masks
  std::vector<Value*> rows_, row_ok_;  // per row of the thread: row indices (index_ty), masks
  std::vector<Regs> values_;
  std::vector<TileType> types_;
  // Per-row factors that rescale a row's values (folded into a later per-row divisor).
  std::set<Value*> row_factors_;
  // Staged rows: stage → byte offset per parameter, the stages' mbarriers and buffer.
  std::map<int, int64_t> layout_;
  llvm::GlobalVariable* stage_full_ = nullptr;
  llvm::GlobalVariable* stage_rows_ = nullptr;
};

}  // namespace tilefuse
