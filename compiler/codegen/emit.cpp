// Tile IR v2 → LLVM IR: one lowering per instruction. A tile is held as its thread's elements in
// registers (compute precision), in the layout's order: along each axis the thread's
// repetitions of its contiguous run, the first axis outermost.
#include "compiler/codegen/emit.h"

#include <fmt/format.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "compiler/codegen/elementwise.h"
#include "compiler/codegen/llvm_support.h"
#include "compiler/codegen/math.h"
#include "compiler/support/error.h"

namespace tilefuse {

namespace {

using llvm::Value;
using tir::Inst;
using tir::Opcode;
using tir::Program;
using tir::Region;
using tir::Frag;
using tir::Type;
using tir::combine_of;

class Emitter {
 public:
  Emitter(const Program& p, llvm::LLVMContext& ctx)
      : p_(p), l_(p.layout), ctx_(ctx), b_(ctx), m_(std::make_unique<llvm::Module>(p.name, ctx)) {}

  std::unique_ptr<llvm::Module> run() {
    if (l_.threads.size() != 2)
      throw CodegenError(fmt::format("kernel {}: codegen takes two-axis tiles, not {}", p_.name, l_.threads.size()));
    m_->setTargetTriple(llvm::Triple("nvptx64-nvidia-cuda"));
    // Tensors, then — where the program has a workspace — the workspace and the launch's epoch
    // (the runtime passes both to every kernel with a workspace; split rows' words carry it).
    std::vector<llvm::Type*> params;
    for (const tir::Param& prm : p_.params)
      if (!prm.workspace) params.push_back(b_.getPtrTy(1));
    for (const tir::Param& prm : p_.params)
      if (prm.workspace) {
        params.push_back(b_.getPtrTy(1));
        params.push_back(b_.getInt32Ty());
      }
    // Then the tensor maps of the parameters TMA reads, in their order: 128-byte CUtensorMaps
    // passed by value as grid constants (read in place in the parameter space).
    const size_t first_map = params.size();
    for (const tir::Param& prm : p_.params)
      if (prm.tma_rows > 0) params.push_back(b_.getPtrTy());
    fn_ = llvm::Function::Create(llvm::FunctionType::get(b_.getVoidTy(), params, false),
                                 llvm::Function::ExternalLinkage, p_.name, m_.get());
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn_->addFnAttr("nvvm.maxntid", std::to_string(p_.launch_threads()));
    // setmaxnreg needs the registers capped at entry (Program::entry_registers).
    const int min_blocks = p_.specialized() ? p_.entry_blocks_per_sm() : p_.min_blocks_per_sm;
    if (min_blocks > 0) fn_->addFnAttr("nvvm.minctasm", std::to_string(min_blocks));
    auto* map_ty = llvm::ArrayType::get(b_.getInt8Ty(), 128);
    tensor_map_.assign(p_.params.size(), nullptr);
    for (size_t i = 0, at = first_map; i < p_.params.size(); ++i) {
      if (p_.params[i].tma_rows <= 0) continue;
      const unsigned n = static_cast<unsigned>(at++);
      fn_->addParamAttr(n, llvm::Attribute::getWithByValType(ctx_, map_ty));
      fn_->addParamAttr(n, llvm::Attribute::getWithAlignment(ctx_, llvm::Align(64)));
      fn_->addParamAttr(n, llvm::Attribute::get(ctx_, "nvvm.grid_constant"));
      fn_->getArg(n)->setName(fmt::format("map{}", i));
      tensor_map_[i] = fn_->getArg(n);
    }
    for (size_t i = 0, tensors = 0; i < p_.params.size(); ++i) {
      const tir::Param& prm = p_.params[i];
      const unsigned at = prm.workspace ? static_cast<unsigned>(first_map - 2) : static_cast<unsigned>(tensors++);
      llvm::Argument* a = fn_->getArg(at);
      args_.push_back(a);
      a->setName(prm.workspace ? "workspace" : fmt::format("arg{}", i));
      if (prm.workspace) {
        epoch_ = fn_->getArg(at + 1);
        epoch_->setName("epoch");
      }
      a->addAttr(llvm::Attribute::NoAlias);
      if (!prm.workspace) a->addAttr(prm.output ? llvm::Attribute::WriteOnly : llvm::Attribute::ReadOnly);
    }
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
    vals_.resize(p_.types.size());
    uses_.assign(p_.types.size(), 0);
    count_uses(p_.body);
    find_part_made(p_.body);
    find_exact_fragments(p_.body);
    set_thread(b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}));
    // Another block's shared memory may be written only once every block of the cluster runs:
    // each arrives here, and the first exchange waits (cluster_values).
    if (exchanges_over_cluster(p_.body)) cluster_barrier(llvm::Intrinsic::nvvm_barrier_cluster_arrive_relaxed_aligned);
    if (!p_.shared.empty()) {  // the rings, one after another in the block's dynamic shared memory
      auto* bytes = llvm::ArrayType::get(b_.getInt8Ty(), 0);
      shared_ = new llvm::GlobalVariable(*m_, bytes, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                         "shared_rings", nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      shared_->setAlignment(llvm::Align(1024));
      for (size_t r = 0; r < p_.shared.size(); ++r) ring_at_.push_back(p_.ring_offset(r));
      init_stage_barriers();
    }
    region(p_.body);
    b_.CreateRetVoid();
    sink_unpacked_pairs();
    return verified(std::move(m_), p_.name);
  }

 private:
  // The thread's index among the threads the layout spreads tiles over (the block's, or its
  // consumer group's), its coordinates in the layout and, with mma, its warp's place in the
  // warps' grid and its lane's in PTX's fragment layout.
  void set_thread(Value* tid) {
    thread_[1] = b_.CreateURem(tid, b_.getInt32(static_cast<uint32_t>(l_.threads[1])), "tc");
    thread_[0] = b_.CreateUDiv(tid, b_.getInt32(static_cast<uint32_t>(l_.threads[1])), "tr");
    if (p_.mma) {
      Value* lane = b_.CreateURem(tid, b_.getInt32(32));
      Value* warp = b_.CreateUDiv(tid, b_.getInt32(32));
      warp_[0] = b_.CreateUDiv(warp, b_.getInt32(static_cast<uint32_t>(p_.mma->warps_n)), "wm");
      warp_[1] = b_.CreateURem(warp, b_.getInt32(static_cast<uint32_t>(p_.mma->warps_n)), "wn");
      group_ = b_.CreateUDiv(lane, b_.getInt32(4), "group");
      in_group_ = b_.CreateURem(lane, b_.getInt32(4), "tig");
      lane_ = lane;
    }
    tid_ = tid;
  }

  const Type& type(int v) const { return p_.types.at(static_cast<size_t>(v)); }
  llvm::IntegerType* index_ty() { return p_.wide_indices ? b_.getInt64Ty() : b_.getInt32Ty(); }
  Value* index(int64_t v) { return llvm::ConstantInt::get(index_ty(), static_cast<uint64_t>(v)); }
  Value* one(int v) const { return vals_.at(static_cast<size_t>(v)).at(0); }

  // Element (e0, e1) of tile v as an operand of a tile's element (e0, e1): broadcast where v is
  // one wide.
  Value* operand(int v, int e0, int e1) {
    const Type& t = type(v);
    const int a0 = t.shape[0] == 1 ? 0 : e0, a1 = t.shape[1] == 1 ? 0 : e1;
    return vals_[static_cast<size_t>(v)][static_cast<size_t>(a0 * slots(t, 1) + a1)];
  }
  // Element (e0, e1) of v — a 16-bit part a loop carries, or a tile made from it by cheap
  // elementwise ops (part_made_) — made again from the part's words (again_from_word) at each use:
  // else the f32 values made for a use before a reduction stay live until those after it (a
  // softmax's part read for its max, then for its exps: twice the registers of the words).
  // (`made`: what one instruction's elements made again so far, by value and broadcast element.)
  using MadeAgain = std::map<std::tuple<int, int, int>, Value*>;
  Value* again(int v, int e0, int e1, MadeAgain& made) {
    const Type& t = type(v);
    const int a0 = t.shape[0] == 1 ? 0 : e0, a1 = t.shape[1] == 1 ? 0 : e1;
    Value*& x = made[{v, a0, a1}];
    if (x) return x;
    if (carried_16bit_.count(v)) return x = again_from_word(operand(v, e0, e1), t.dtype);
    const Inst& d = *computed_by_.at(v);
    std::vector<Value*> args;
    for (int a : d.args)
      args.push_back(!type(a).is_tile()                               ? one(a)
                     : carried_16bit_.count(a) || part_made_.count(a) ? again(a, e0, e1, made)
                                                                      : operand(a, e0, e1));
    return x = element(b_, d.op, t.dtype, args, p_.name, d.nonpositive_arg, d.absolute_error);
  }
  // The tiles of a carried part's shape made from it (or from each other) by casts, negations,
  // sums, differences, products, fmas, maxima and minima.
  void find_part_made(const Region& r) {
    for (const Inst& i : r.body) {
      for (const Region& inner : i.regions) find_part_made(inner);
      if (i.opcode != Opcode::Compute || i.results.size() != 1) continue;
      const bool cheap =
          !i.flush_subnormal && (i.op == Op::Cast || i.op == Op::Neg || i.op == Op::Add || i.op == Op::Sub ||
                                 i.op == Op::Mul || i.op == Op::Fma || i.op == Op::Max || i.op == Op::Min);
      const Type& t = type(i.results[0]);
      auto from_part = [&](int a) {
        return (carried_16bit_.count(a) || part_made_.count(a)) && type(a).shape == t.shape;
      };
      if (cheap && t.is_tile() && t.frag == Frag::None &&
          std::any_of(i.args.begin(), i.args.end(), from_part))
        part_made_.insert(i.results[0]);
    }
  }

  void count_uses(const Region& r) {
    for (const Inst& i : r.body) {
      for (int a : i.args) uses_[static_cast<size_t>(a)]++;
      for (int v : i.results)
        if (tir::exact_in_dtype(i) && blocked_16bit(type(v))) exact_16bit_.insert(v);
      if (i.opcode == Opcode::Yield)
        for (int a : i.args)
          if (exact_16bit_.count(a)) carried_16bit_.insert(a);
      for (const Region& inner : i.regions) count_uses(inner);
    }
  }
  // The 16-bit A fragments that hold their dtype's values exactly: conversions of accumulators
  // (P in attention), constants, and what loops carry from those into those (P from one loop of
  // key tiles into the next). A loop carries them in pairs, a 32-bit word each, as wgmma and
  // mma.sync read them: carried element by element, ptxas put the halves of each word back
  // together with a PRMT every iteration.
  void find_exact_fragments(const Region& r) {
    for (const Inst& i : r.body) {
      for (const Region& inner : i.regions) find_exact_fragments(inner);
      if ((i.opcode == Opcode::Convert || i.opcode == Opcode::Const) &&
          tile_16bit(type(i.results.at(0)), Frag::A))
        exact_fragments_.insert(i.results[0]);
      if (i.opcode != Opcode::For && i.opcode != Opcode::While) continue;
      const size_t first = i.opcode == Opcode::For ? 3 : 0;
      const Inst& yield = i.regions.back().body.back();
      for (size_t k = 0; k < i.results.size(); ++k)
        if (exact_fragments_.count(i.args.at(first + k)) && exact_fragments_.count(yield.args.at(k)))
          exact_fragments_.insert(i.results[k]);
    }
  }
  // A blocked tile of 16-bit elements (each held in f32: exactly where exact_in_dtype —
  // exact_16bit_ —, else not rounded until stored).
  static bool tile_16bit(const Type& t, Frag frag) {
    return t.is_tile() && t.frag == frag && (t.dtype == DType::BF16 || t.dtype == DType::F16);
  }
  static bool blocked_16bit(const Type& t) { return tile_16bit(t, Frag::None); }

  // Where x is a 16-bit element of a vector widened to f32 (fpext of extractelement at a
  // constant): the vector, of elements of type `half`, and x's place in it.
  static std::optional<std::pair<Value*, uint64_t>> widened_element(Value* x, llvm::Type* half) {
    auto* ext = llvm::dyn_cast<llvm::FPExtInst>(x);
    auto* e = ext ? llvm::dyn_cast<llvm::ExtractElementInst>(ext->getOperand(0)) : nullptr;
    auto* at = e ? llvm::dyn_cast<llvm::ConstantInt>(e->getIndexOperand()) : nullptr;
    if (!at || e->getVectorOperand()->getType()->getScalarType() != half) return std::nullopt;
    return std::pair<Value*, uint64_t>{e->getVectorOperand(), at->getZExtValue()};
  }

  // Element x of a 16-bit tile that a loop carries, made again from the 32-bit word it was loaded
  // in (through a move of its own: else LLVM reuses x). The loop keeps the words live anyway (in
  // pairs); x's f32 value, made for the tile's first use, would stay live until its last (twice
  // their registers: a 16-bit split part's reduction and its exps).
  Value* again_from_word(Value* x, DType dt) {
    llvm::Type* half = storage_type(b_, dt);
    const auto element = widened_element(x, half);
    const auto* vty = element ? llvm::dyn_cast<llvm::FixedVectorType>(element->first->getType()) : nullptr;
    if (!vty || vty->getNumElements() % 2 != 0) return x;
    const uint64_t c = element->second;
    auto* words_ty = llvm::FixedVectorType::get(b_.getInt32Ty(), vty->getNumElements() / 2);
    Value* word =
        own_register(b_, b_.CreateExtractElement(b_.CreateBitCast(element->first, words_ty), c / 2));
    Value* two = b_.CreateBitCast(word, llvm::FixedVectorType::get(half, 2));
    return to_compute(b_, b_.CreateExtractElement(two, c % 2), dt);
  }

  // The thread's elements of a tile: along each axis a number of slots, each at a position within
  // the tile that depends on the thread; a tile one element wide along an axis has one slot there.
  // Blocked: slot s is repetition s / per_thread, element s % per_thread of the thread's run.
  // Fragments (PTX's m16n8k16 layouts, per 16-row or 8-column piece of the warp's tile):
  //   rows of A and of the accumulator: slot (i, h) → warp row + 16i + group + 8h;
  //   columns of the accumulator: slot (j, c) → warp column + 8j + 2·tig + c;
  //   k of A (columns) and of B (rows): slot (kk, c) → 8kk + 2·tig + c;
  //   columns of B: slot j → warp column + 8j + group.
  int slots(const Type& t, size_t d) const {
    if (t.shape[d] == 1 || (per_thread_columns(t.frag) && d == 1)) return 1;
    if (t.frag == Frag::None || per_thread_columns(t.frag)) return l_.reps[d] * l_.per_thread[d];
    const bool k_axis = (t.frag == Frag::A && d == 1) || (t.frag == Frag::B && d == 0);
    if (k_axis) return 4;
    if (d == 0) return p_.mma->warp_m / 16 * 2;
    return t.frag == Frag::B ? warp_cols(t) / 8 : warp_cols(t) / 8 * 2;
  }
  // A B or accumulator fragment's columns per warp (its tile's columns over the warps along them:
  // the program's warp_n for a matmul; an attention's scores and output differ in width).
  int warp_cols(const Type& t) const { return static_cast<int>(t.shape[1] / p_.mma->warps_n); }
  Value* i32(int v) { return b_.getInt32(static_cast<uint32_t>(v)); }
  Value* position(const Type& t, size_t d, int slot) {
    if (t.frag == Frag::None) {
      const int pt = l_.per_thread[d], rep = slot / pt, j = slot % pt;
      Value* run = b_.CreateMul(b_.CreateAdd(thread_[d], i32(rep * l_.threads[d])), i32(pt));
      return j == 0 ? run : b_.CreateAdd(run, i32(j));
    }
    const bool k_axis = (t.frag == Frag::A && d == 1) || (t.frag == Frag::B && d == 0);
    if (k_axis)  // (kk, c)
      return b_.CreateAdd(b_.CreateMul(in_group_, i32(2)), i32(8 * (slot / 2) + slot % 2));
    const int warp_extent = d == 0 ? p_.mma->warp_m : warp_cols(t);
    Value* base = b_.CreateMul(warp_[d], i32(warp_extent));
    if (d == 0)  // (i, h)
      return b_.CreateAdd(base, b_.CreateAdd(group_, i32(16 * (slot / 2) + 8 * (slot % 2))));
    if (t.frag == Frag::B)  // j
      return b_.CreateAdd(base, b_.CreateAdd(group_, i32(8 * slot)));
    return b_.CreateAdd(base, b_.CreateAdd(b_.CreateMul(in_group_, i32(2)), i32(8 * (slot / 2) + slot % 2)));  // (j, c)
  }
  // Runs of consecutive slots that are consecutive elements: their length and axis.
  int run(const Type& t, size_t* axis) const {
    *axis = t.frag == Frag::B ? 0 : 1;
    if (t.shape[*axis] == 1) return 1;
    return t.frag == Frag::None ? l_.per_thread[1] : 2;
  }
  // Element index along axis d: the offset plus the element's position (unless the tile is one
  // element wide there), clamped to 0 where masked and out of the view; `ok` gets the mask.
  Value* coordinate(const Inst& i, const Type& t, size_t d, int slot, Value** ok) {
    Value* at = one(i.args[d]);
    if (t.shape[d] != 1) at = b_.CreateAdd(at, b_.CreateZExt(position(t, d, slot), index_ty()), "", true, true);
    *ok = nullptr;
    if (d < i.masked.size() && i.masked[d]) {
      *ok = inside(i, d, at);
      at = b_.CreateSelect(*ok, at, index(0));
    }
    return at;
  }
  // The elements e < width of a run from index `start` with lo ≤ start + e < hi, as bits (i32):
  // one interval, so 2^min(max(hi − start, 0), width) − 2^min(max(lo − start, 0), width).
  Value* run_bits(Value* start, Value* lo, Value* hi, int width) {
    auto clamped = [&](Value* x) {
      Value* in = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin,
                                           b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, index(0)), index(width));
      return b_.CreateTrunc(in, b_.getInt32Ty());
    };
    return b_.CreateSub(b_.CreateShl(i32(1), clamped(b_.CreateSub(hi, start))),
                        b_.CreateShl(i32(1), clamped(b_.CreateSub(lo, start))));
  }
  // A masked axis's bound: its limit (a value) or the view's extent.
  Value* upper(const Inst& i, size_t d) {
    const int limit = d < i.limits.size() ? i.limits[d] : -1;
    return limit >= 0 ? one(limit) : index(index_extent(p_.params[static_cast<size_t>(i.param)], d));
  }
  // Whether index x along masked axis d lies in its bounds: below upper(i, d).
  Value* inside(const Inst& i, size_t d, Value* x) { return b_.CreateICmpULT(x, upper(i, d)); }

  // How far indices into a parameter run along axis d: its view's extent, or — where its rows are
  // split into the domain's row dimensions — the domain's rows (an index is a domain row there).
  static int64_t index_extent(const tir::Param& prm, size_t d) {
    return d == 0 && !prm.row_dims.empty() ? num_elements(prm.row_dims) : prm.view[d];
  }

  // Element offset of (row, col) in a parameter: its rows split into the domain's dimensions
  // where it is broadcast along some of them.
  Value* offset(const tir::Param& prm, Value* row, Value* col) {
    if (prm.col_major) {  // groups of group_rows rows (a batch), each stored column by column
      Value* r = b_.CreateZExt(row, b_.getInt64Ty());
      Value* g = b_.getInt64(static_cast<uint64_t>(prm.group_rows));
      Value* group = b_.CreateMul(b_.CreateUDiv(r, g), b_.getInt64(static_cast<uint64_t>(prm.group_rows * prm.view[1])));
      Value* c = prm.view[1] == 1 ? b_.getInt64(0) : b_.CreateMul(b_.CreateZExt(col, b_.getInt64Ty()), g);
      return b_.CreateAdd(group, b_.CreateAdd(c, b_.CreateURem(r, g)));
    }
    if (!prm.elem_dims.empty()) {
      // The element's position in the domain (in the index type: 32 bits unless the domain passes
      // 2^31): its row of the domain's last dimension, and its place along that row. (Loads take
      // load_elements; this serves a store to such a parameter, which only hand-written Tile IR has.)
      Value* e = b_.CreateAdd(b_.CreateMul(row, index(prm.view[1])), col);
      const int64_t inner = prm.elem_dims.back();
      Value* r = b_.CreateUDiv(e, index(inner));
      Value* off = outer_offset(prm, r);
      if (prm.elem_view.back() != 1) off = b_.CreateAdd(off, b_.CreateSub(e, b_.CreateMul(r, index(inner))));
      return b_.CreateZExt(off, b_.getInt64Ty());
    }
    Value* off = b_.getInt64(0);
    if (prm.view[0] != 1) {
      Value* r = b_.CreateZExt(row, b_.getInt64Ty());
      if (prm.row_dims.empty()) {
        off = b_.CreateMul(r, b_.getInt64(static_cast<uint64_t>(prm.view[1])), "", true, true);
      } else {
        int64_t stride = prm.view[1];
        for (size_t d = prm.row_dims.size(); d-- > 0;) {
          Value* idx = b_.CreateURem(r, b_.getInt64(static_cast<uint64_t>(prm.row_dims[d])));
          r = b_.CreateUDiv(r, b_.getInt64(static_cast<uint64_t>(prm.row_dims[d])));
          if (prm.row_view[d] != 1) off = b_.CreateAdd(off, b_.CreateMul(idx, b_.getInt64(static_cast<uint64_t>(stride))));
          stride *= prm.row_view[d];
        }
      }
    }
    if (prm.view[1] != 1) off = b_.CreateAdd(off, b_.CreateZExt(col, b_.getInt64Ty()), "", true, true);
    return off;
  }

  // A parameter indexed element by element (Param::elem_dims): the offset of the start of row r
  // of the domain's last dimension, r split into the domain's other dimensions. Every dimension's
  // index is taken modulo its extent, so a row past the domain's end still lands in the parameter.
  Value* outer_offset(const tir::Param& prm, Value* r) {
    Value* off = index(0);
    int64_t stride = prm.elem_view.back();
    for (size_t d = prm.elem_dims.size() - 1; d-- > 0;) {
      if (prm.elem_view[d] != 1) off = b_.CreateAdd(off, b_.CreateMul(b_.CreateURem(r, index(prm.elem_dims[d])), index(stride)));
      if (d > 0) r = b_.CreateUDiv(r, index(prm.elem_dims[d]));
      stride *= prm.elem_view[d];
    }
    return off;
  }

  // A load of a parameter indexed element by element, a run of the thread's consecutive
  // elements at a time: the run's first element is split into the domain's dimensions once, and
  // the others step along the last dimension, wrapping at most once into its next row (that
  // dimension is at least four runs long). A parameter broadcast along the last dimension reads
  // the two rows' elements once and selects between them. One that runs along it reads the run's
  // elements at consecutive offsets from where the run starts, or from the row's last `width`
  // elements where the run passes the row's end; every run is read so first, and only then, in
  // one branch per thread taken where any of its runs wraps (about (width − 1) / inner of the
  // runs), are those runs read again, each element from its own row — so that no branch stands
  // between the tile's loads. An element past the domain's end reads an element in bounds
  // (outer_offset wraps); its store is masked.
  void load_elements(const Inst& i) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const Type& t = type(i.results[0]);
    llvm::Type* ty = storage_type(b_, prm.dtype);
    const int64_t inner = prm.elem_dims.back();
    const bool along = prm.elem_view.back() != 1;
    size_t axis;
    int width = run(t, &axis);
    // (Where the last dimension is under four runs long, many runs would wrap: element by
    // element. A run starts at a multiple of its width: the tile's columns start at multiples.)
    if (axis != 1 || inner < 4 * width) width = 1;
    const bool wraps = inner % width != 0 || prm.view[1] % width != 0;
    Value* base = args_[static_cast<size_t>(i.param)];
    auto read = [&](Value* off) {
      return b_.CreateAlignedLoad(ty, b_.CreateInBoundsGEP(ty, base, b_.CreateZExt(off, b_.getInt64Ty())),
                                  llvm::Align(dtype_size(prm.dtype)));
    };
    auto* vty = llvm::FixedVectorType::get(ty, static_cast<unsigned>(width));
    struct Run {
      Value *here, *next, *c, *v;
      int slot;
    };
    std::vector<Run> runs;
    const int n0 = slots(t, 0), n1 = slots(t, 1);
    for (int e0 = 0; e0 < n0; ++e0)
      for (int e1 = 0; e1 < n1; e1 += width) {
        Value *ok0, *ok1;
        Value* row = coordinate(i, t, 0, e0, &ok0);
        Value* col = coordinate(i, t, 1, e1, &ok1);
        Value* e = b_.CreateAdd(b_.CreateMul(row, index(prm.view[1])), col);
        Value* r = b_.CreateUDiv(e, index(inner));
        Run run{outer_offset(prm, r), nullptr, b_.CreateSub(e, b_.CreateMul(r, index(inner))), llvm::PoisonValue::get(vty),
                e0 * n1 + e1};
        if (wraps) run.next = outer_offset(prm, b_.CreateAdd(r, index(1)));
        if (!along) {
          Value *x = read(run.here), *y = run.next ? read(run.next) : nullptr;
          for (int w = 0; w < width; ++w) {
            Value* wrapped = y && w > 0 ? b_.CreateICmpUGE(b_.CreateAdd(run.c, index(w)), index(inner)) : nullptr;
            run.v = b_.CreateInsertElement(run.v, wrapped ? b_.CreateSelect(wrapped, y, x) : x, static_cast<uint64_t>(w));
          }
        } else {
          Value* first = run.next ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, run.c, index(inner - width)) : run.c;
          first = b_.CreateAdd(run.here, first);
          for (int w = 0; w < width; ++w)
            run.v = b_.CreateInsertElement(run.v, read(w == 0 ? first : b_.CreateAdd(first, index(w))), static_cast<uint64_t>(w));
        }
        runs.push_back(run);
      }
    if (along && wraps) {
      // One branch for all the thread's runs (taken where any of them wraps): a block large
      // enough that ptxas keeps it a branch rather than predicating it into every thread's path.
      auto* split = llvm::BasicBlock::Create(ctx_, "run_wraps", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "run_gathered", fn_);
      llvm::BasicBlock* straight = b_.GetInsertBlock();
      Value* any = b_.getFalse();
      for (const Run& run : runs) any = b_.CreateOr(any, b_.CreateICmpUGT(run.c, index(inner - width)));
      b_.CreateCondBr(any, split, done, llvm::MDBuilder(ctx_).createUnlikelyBranchWeights());
      b_.SetInsertPoint(split);
      std::vector<Value*> split_v;
      for (const Run& run : runs) {
        Value* v = llvm::PoisonValue::get(vty);
        for (int w = 0; w < width; ++w) {
          Value* cw = b_.CreateAdd(run.c, index(w));
          Value* off = b_.CreateSelect(b_.CreateICmpUGE(cw, index(inner)), b_.CreateAdd(run.next, b_.CreateSub(cw, index(inner))),
                                       b_.CreateAdd(run.here, cw));
          v = b_.CreateInsertElement(v, read(off), static_cast<uint64_t>(w));
        }
        split_v.push_back(v);
      }
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
      for (size_t j = 0; j < runs.size(); ++j) {
        llvm::PHINode* phi = b_.CreatePHI(vty, 2);
        phi->addIncoming(runs[j].v, straight);
        phi->addIncoming(split_v[j], split);
        runs[j].v = phi;
      }
    }
    std::vector<Value*> out(static_cast<size_t>(n0 * n1));
    for (const Run& run : runs)
      for (int w = 0; w < width; ++w)
        out[static_cast<size_t>(run.slot + w)] = to_compute(b_, b_.CreateExtractElement(run.v, static_cast<uint64_t>(w)), prm.dtype);
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // Each run of contiguous elements along the last axis is one vector access.
  // Each run of the thread's elements that is contiguous in the parameter's memory is one vector
  // access (along columns for a row-major parameter, rows for a column-major one); otherwise one
  // access per element.
  template <typename F>  // f(the run's elements' indices, row, col, mask, whole)
  void for_each_vector(const Inst& i, const Type& t, F f) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    size_t axis;
    int width = run(t, &axis);
    // (Only along the contiguous axis, and only where every run starts on a multiple of its
    // width: a matmul operand with an odd K is read an element at a time.)
    // (A view of one row has every run where its width divides: the offset is the column.)
    const int64_t contiguous = prm.col_major ? prm.group_rows : prm.view[1];
    const bool one_row = !prm.col_major && prm.view[0] == 1;
    if (axis != (prm.col_major ? 0u : 1u) || (contiguous % width != 0 && !one_row) || !prm.elem_dims.empty()) width = 1;
    const int n0 = slots(t, 0), n1 = slots(t, 1);
    for (int e0 = 0; e0 < n0; e0 += axis == 0 ? width : 1)
      for (int e1 = 0; e1 < n1; e1 += axis == 1 ? width : 1) {
        Value *ok0, *ok1;
        Value* row = coordinate(i, t, 0, e0, &ok0);
        Value* col = coordinate(i, t, 1, e1, &ok1);
        Value* ok = !ok0 ? ok1 : !ok1 ? ok0 : b_.CreateAnd(ok0, ok1);
        std::vector<int> elems;
        for (int w = 0; w < width; ++w) elems.push_back(axis == 0 ? (e0 + w) * n1 + e1 : e0 * n1 + e1 + w);
        f(elems, row, col, ok, straddles(i, axis, width) ? fits(axis == 0 ? row : col, i, axis, width) : nullptr);
      }
  }

  // Whether a run of `width` along a masked axis can pass the view's end there (a flat domain of
  // an odd element count): it is then accessed whole only where it fits, element by element
  // where it does not.
  bool straddles(const Inst& i, size_t axis, int width) const {
    if (width == 1 || axis >= i.masked.size() || !i.masked[axis]) return false;
    const bool limited = axis < i.limits.size() && i.limits[axis] >= 0;
    if (limited || index_extent(p_.params[static_cast<size_t>(i.param)], axis) % width == 0) return false;
    if (axis != 1)
      throw CodegenError(fmt::format("kernel {}: a run of {} down the rows may pass the view's end", p_.name, width));
    return true;
  }
  Value* fits(Value* start, const Inst& i, size_t axis, int width) {
    const int64_t end = index_extent(p_.params[static_cast<size_t>(i.param)], axis);
    return b_.CreateICmpULE(b_.CreateAdd(start, index(width)), index(end));
  }

  // Windowed rows (Inst::window): where row `row` of rows of `width` starts within its aligned
  // vector, (row mod vec)·(width mod vec) mod vec (vec a power of two; no product to overflow).
  Value* window_shift(Value* row, Value* width, int vec) {
    Value* low = index(vec - 1);
    return b_.CreateAnd(b_.CreateMul(b_.CreateAnd(row, low), b_.CreateAnd(width, low)), low);
  }
  // The elements a parameter holds (its own rows, not the domain's, times its row width).
  static int64_t own_elements(const tir::Param& prm) {
    return (prm.row_dims.empty() ? prm.view[0] : num_elements(prm.row_view)) * prm.view[1];
  }
  // A windowed row's load: each run of a thread's consecutive elements of row r from window
  // column c is the parameter's row r from column c − shift(r) on. A tensor laid out as the rows
  // has them at r·W − shift(r) + c (in the index type), the start of an aligned vector: read
  // whole where it lies in the tensor (its elements outside the row are the neighbours', which
  // the program masks) — a run wholly past the tensor's end reads its first vector instead, and
  // where a run may straddle the end (an element count that is not a multiple of the run),
  // that run is read element by element. One laid out otherwise (a weight shared by the rows,
  // or broadcast along some of them) has the two aligned vectors around the run read and
  // shifted in registers (unaligned_vector; zero past the tensor's ends), or — runs of under 4
  // bytes — its elements one at a time.
  void load_window(const Inst& i) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const Type& t = type(i.results[0]);
    size_t axis;
    const int width = run(t, &axis);
    const int64_t size = static_cast<int64_t>(dtype_size(prm.dtype));
    const bool as_rows = prm.view[0] != 1 && prm.row_dims.empty();
    if (axis != 1) throw CodegenError(fmt::format("kernel {}: a windowed load of a column", p_.name));
    const bool words = width * size % 4 == 0;  // (unaligned_vector joins 32-bit words)
    const bool widely_used = uses_[static_cast<size_t>(i.results[0])] > 64;  // (as load())
    llvm::Type* ty = storage_type(b_, prm.dtype);
    Value* base = args_[static_cast<size_t>(i.param)];
    const int64_t total = own_elements(prm);
    const llvm::Align align(static_cast<uint64_t>(size * std::min(width, i.window)));
    const int n1 = slots(t, 1);
    std::vector<Value*> out(static_cast<size_t>(slots(t, 0) * n1));
    const bool may_straddle = total % width != 0 || width > i.window;
    auto* vty = llvm::FixedVectorType::get(ty, static_cast<unsigned>(width));
    for (int e0 = 0; e0 < slots(t, 0); ++e0) {
      Value* ok0;
      Value* row = coordinate(i, t, 0, e0, &ok0);
      Value* shift = window_shift(row, index(prm.view[1]), i.window);
      // The row's window's start: in the index type for a tensor laid out as the rows.
      Value* row_at = as_rows ? b_.CreateSub(b_.CreateMul(row, index(prm.view[1]), "", true, true), shift)
                              : b_.CreateSub(offset(prm, row, index(0)), b_.CreateZExt(shift, b_.getInt64Ty()));
      for (int e1 = 0; e1 < n1; e1 += width) {
        Value* col = b_.CreateAdd(one(i.args[1]), b_.CreateZExt(position(t, 1, e1), index_ty()));
        Value* v;
        if (!as_rows && words) {
          Value* first = b_.CreateAdd(row_at, b_.CreateZExt(col, b_.getInt64Ty()));
          v = unaligned_vector(b_, fn_, base, ty, size, total, first, width, prm.name);
        } else if (!as_rows) {  // (element by element: a negative index is past `total` unsigned)
          v = flat_run(base, ty, b_.CreateAdd(row_at, b_.CreateZExt(col, b_.getInt64Ty())), width, total,
                       b_.getFalse(), align);
        } else {
          Value* first = b_.CreateAdd(row_at, col, "", true, true);
          Value* whole = b_.CreateICmpULE(b_.CreateAdd(first, index(width)), index(total));
          if (may_straddle) {
            v = flat_run(base, ty, b_.CreateZExt(first, b_.getInt64Ty()), width, total, whole, align);
          } else {
            Value* at = b_.CreateZExt(b_.CreateSelect(whole, first, index(0)), b_.getInt64Ty());
            v = b_.CreateAlignedLoad(vty, b_.CreateInBoundsGEP(ty, base, at), align, prm.name);
          }
        }
        for (int c = 0; c < width; ++c) {
          Value* x = to_compute(b_, b_.CreateExtractElement(v, static_cast<uint64_t>(c)), prm.dtype);
          out[static_cast<size_t>(e0 * n1 + e1 + c)] = widely_used && x->getType()->isFloatTy() ? own_register(b_, x) : x;
        }
      }
    }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }
  // A run of `width` elements from flat element `first`: whole where `whole`, else those before
  // `total` one at a time (the rest 0).
  Value* flat_run(Value* base, llvm::Type* ty, Value* first, int width, int64_t total, Value* whole, llvm::Align align) {
    return whole_or_elements(ty, width, whole, b_.CreateInBoundsGEP(ty, base, first), align, [&](int e) {
      Value* at = b_.CreateAdd(first, b_.getInt64(e));
      Value* in = b_.CreateICmpULT(at, b_.getInt64(total));
      return std::make_pair(in, b_.CreateInBoundsGEP(ty, base, b_.CreateSelect(in, at, b_.getInt64(0))));
    });
  }
  // A windowed row's store (to a tensor laid out as the rows): each run whole where all its
  // elements are the row's, else those that are one at a time (the row's two ends).
  void store_window(const Inst& i) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const int v = i.args.back();
    const Type& t = type(v);
    size_t axis;
    const int width = run(t, &axis);
    if (axis != 1) throw CodegenError(fmt::format("kernel {}: a windowed store of a column", p_.name));
    llvm::Type* ty = storage_type(b_, prm.dtype);
    const std::vector<Value*>& values = vals_.at(static_cast<size_t>(v));
    const llvm::Align one_element(dtype_size(prm.dtype));
    // (A view of one row is aligned only at row 0's start: its tile's row offset is not known 0.)
    const llvm::Align align(dtype_size(prm.dtype) * static_cast<size_t>(prm.view[0] == 1 ? 1 : std::min(width, i.window)));
    const int n1 = slots(t, 1);
    for (int e0 = 0; e0 < slots(t, 0); ++e0) {
      Value* ok0;
      Value* row = coordinate(i, t, 0, e0, &ok0);
      Value* shift = window_shift(row, index(prm.view[1]), i.window);
      Value* row_at = b_.CreateSub(offset(prm, row, index(0)), b_.CreateZExt(shift, b_.getInt64Ty()));
      for (int e1 = 0; e1 < n1; e1 += width) {
        Value* col = b_.CreateAdd(one(i.args[1]), b_.CreateZExt(position(t, 1, e1), index_ty()));
        Value* bits = run_bits(b_.CreateSub(col, shift), index(0), index(prm.view[1]), width);
        Value* ptr = b_.CreateInBoundsGEP(ty, args_[static_cast<size_t>(i.param)],
                                          b_.CreateAdd(row_at, b_.CreateZExt(col, b_.getInt64Ty())));
        std::vector<Value*> data;
        for (int e = 0; e < width; ++e)
          data.push_back(to_storage(b_, values[static_cast<size_t>(e0 * n1 + e1 + e)], prm.dtype));
        guarded(ok0, [&] {
          auto* vec_bb = llvm::BasicBlock::Create(b_.getContext(), "window_store", fn_);
          auto* ends = llvm::BasicBlock::Create(b_.getContext(), "window_ends", fn_);
          auto* done = llvm::BasicBlock::Create(b_.getContext(), "window_stored", fn_);
          b_.CreateCondBr(b_.CreateICmpEQ(bits, i32((1 << width) - 1)), vec_bb, ends);
          b_.SetInsertPoint(vec_bb);
          Value* packed = llvm::PoisonValue::get(llvm::FixedVectorType::get(ty, static_cast<unsigned>(width)));
          for (int e = 0; e < width; ++e) packed = b_.CreateInsertElement(packed, data[static_cast<size_t>(e)], static_cast<uint64_t>(e));
          b_.CreateAlignedStore(packed, ptr, align);
          b_.CreateBr(done);
          b_.SetInsertPoint(ends);
          for (int e = 0; e < width; ++e)
            guarded(b_.CreateICmpNE(b_.CreateAnd(bits, i32(1 << e)), i32(0)), [&] {
              b_.CreateAlignedStore(data[static_cast<size_t>(e)], b_.CreateInBoundsGEP(ty, ptr, b_.getInt64(e)), one_element);
            });
          b_.CreateBr(done);
          b_.SetInsertPoint(done);
        });
      }
    }
  }

  void load(const Inst& i) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    if (!prm.elem_dims.empty()) return load_elements(i);
    if (i.window > 0) return load_window(i);
    const Type& t = type(i.results[0]);
    llvm::Type* ty = storage_type(b_, prm.dtype);
    std::vector<Value*> out;
    // An element used by many instructions gets a register of its own: instruction selection
    // otherwise walks the multi-result vector load's whole use list for each of them (quadratic
    // in long fused chains; see bench/NOTES.md, robustness).
    const bool widely_used = uses_[static_cast<size_t>(i.results[0])] > 64;
    out.resize(static_cast<size_t>(slots(t, 0) * slots(t, 1)));
    for_each_vector(i, t, [&](const std::vector<int>& elems, Value* row, Value* col, Value*, Value* whole) {
      const int width = static_cast<int>(elems.size());
      Value* ptr = b_.CreateInBoundsGEP(ty, args_[static_cast<size_t>(i.param)], offset(prm, row, col));
      const llvm::Align align(dtype_size(prm.dtype) * static_cast<size_t>(width));
      if (width == 1) {
        out[static_cast<size_t>(elems[0])] = to_compute(b_, b_.CreateAlignedLoad(ty, ptr, align), prm.dtype);
        return;
      }
      Value* v = whole ? straddling_load(i, args_[static_cast<size_t>(i.param)], ty, row, col, width, whole)
                       : b_.CreateAlignedLoad(llvm::FixedVectorType::get(ty, static_cast<unsigned>(width)), ptr, align);
      for (int c = 0; c < width; ++c) {
        Value* x = to_compute(b_, b_.CreateExtractElement(v, static_cast<uint64_t>(c)), prm.dtype);
        out[static_cast<size_t>(elems[static_cast<size_t>(c)])] =
            widely_used && x->getType()->isFloatTy() ? own_register(b_, x) : x;
      }
    });
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // Two adjacent elements as a vector of the storage type: a 16-bit pair of f32 values rounded
  // by one conversion (cvt.rn.bf16x2.f32 / f16x2: its first operand to the upper half). Rounded
  // one by one (cvt.rn.bf16.f32), a wgmma accumulator's elements make ptxas serialize the
  // kernel's wgmma (C7514; bench/NOTES.md, matmul_odd). A value a cast rounded to this dtype and
  // nothing else has used yet is rounded again from its f32 source (the same bits, and the cast's
  // own conversion is then dead); another 16-bit value (a load's extension, or a cast's value the
  // kernel also computes with) is stored as it is.
  Value* pair_to_storage(Value* lo, Value* hi, DType dtype) {
    auto* elem_ty = storage_type(b_, dtype);
    auto* ty = llvm::FixedVectorType::get(elem_ty, 2);
    auto unrounded = [&](Value* x) {
      auto* ext = llvm::dyn_cast<llvm::FPExtInst>(x);
      auto* trunc = ext && ext->use_empty() ? llvm::dyn_cast<llvm::FPTruncInst>(ext->getOperand(0)) : nullptr;
      return trunc && trunc->getDestTy() == elem_ty && trunc->getOperand(0)->getType()->isFloatTy()
                 ? trunc->getOperand(0)
                 : x;
    };
    lo = unrounded(lo);
    hi = unrounded(hi);
    auto rounded = [](Value* v) { return llvm::isa<llvm::FPExtInst>(v); };
    if ((dtype == DType::BF16 || dtype == DType::F16) && lo->getType()->isFloatTy() && hi->getType()->isFloatTy() &&
        !rounded(lo) && !rounded(hi)) {
      const auto id = dtype == DType::BF16 ? llvm::Intrinsic::nvvm_ff2bf16x2_rn : llvm::Intrinsic::nvvm_ff2f16x2_rn;
      return b_.CreateBitCast(b_.CreateIntrinsic(id, {}, {hi, lo}), ty);
    }
    Value* data = llvm::PoisonValue::get(ty);
    data = b_.CreateInsertElement(data, to_storage(b_, lo, dtype), uint64_t{0});
    return b_.CreateInsertElement(data, to_storage(b_, hi, dtype), uint64_t{1});
  }

  void store(const Inst& i) {
    if (i.window > 0) return store_window(i);
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const int v = i.args.back();
    const Type& t = type(v);
    llvm::Type* ty = storage_type(b_, prm.dtype);
    const std::vector<Value*>& values = vals_.at(static_cast<size_t>(v));
    // 16-bit elements are rounded in pairs (elements 2k and 2k + 1, one conversion each; see
    // pair_to_storage), whatever the vectors they are stored in: a pair is made at its first
    // element's store, which comes first and dominates the second's.
    std::vector<Value*> pairs((values.size() + 1) / 2);
    auto stored = [&](size_t e) -> Value* {
      if (dtype_size(prm.dtype) != 2 || (e | 1) >= values.size() || !values[e ^ 1])
        return to_storage(b_, values[e], prm.dtype);
      Value*& two = pairs[e / 2];
      if (!two) two = pair_to_storage(values[e & ~size_t{1}], values[e | 1], prm.dtype);
      return b_.CreateExtractElement(two, static_cast<uint64_t>(e & 1));
    };
    for_each_vector(i, t, [&](const std::vector<int>& elems, Value* row, Value* col, Value* ok, Value* whole) {
      const int width = static_cast<int>(elems.size());
      Value* data = stored(static_cast<size_t>(elems[0]));
      if (width > 1) {
        Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(ty, static_cast<unsigned>(width)));
        v = b_.CreateInsertElement(v, data, uint64_t{0});
        for (int c = 1; c < width; ++c)
          v = b_.CreateInsertElement(v, stored(static_cast<size_t>(elems[static_cast<size_t>(c)])),
                                     static_cast<uint64_t>(c));
        data = v;
      }
      guarded(ok, [&] {
        Value* ptr = b_.CreateInBoundsGEP(ty, args_[static_cast<size_t>(i.param)], offset(prm, row, col));
        if (i.reduce_add) {
          std::vector<Value*> xs;
          for (int e : elems) xs.push_back(values[static_cast<size_t>(e)]);
          return add_into(ptr, xs,
                          whole ? [&](int e) { return inside(i, 1, b_.CreateAdd(col, index(e))); }
                                : std::function<Value*(int)>());
        }
        if (!whole) {
          b_.CreateAlignedStore(data, ptr, llvm::Align(dtype_size(prm.dtype) * static_cast<size_t>(width)));
          return;
        }
        // The last run of an odd extent: whole where it fits, else its elements inside the view.
        auto* vec_bb = llvm::BasicBlock::Create(b_.getContext(), "run_store", fn_);
        auto* tail = llvm::BasicBlock::Create(b_.getContext(), "tail_store", fn_);
        auto* done = llvm::BasicBlock::Create(b_.getContext(), "run_stored", fn_);
        b_.CreateCondBr(whole, vec_bb, tail);
        b_.SetInsertPoint(vec_bb);
        b_.CreateAlignedStore(data, ptr, llvm::Align(dtype_size(prm.dtype) * static_cast<size_t>(width)));
        b_.CreateBr(done);
        b_.SetInsertPoint(tail);
        for (int e = 0; e < width; ++e)
          guarded(inside(i, 1, b_.CreateAdd(col, index(e))), [&] {
            b_.CreateAlignedStore(b_.CreateExtractElement(data, static_cast<uint64_t>(e)),
                                  b_.CreateInBoundsGEP(ty, ptr, b_.getInt64(e)), llvm::Align(dtype_size(prm.dtype)));
          });
        b_.CreateBr(done);
        b_.SetInsertPoint(done);
      });
    });
  }

  // A run of f32 values added into the elements from `ptr` on by relaxed atomic adds at the GPU's
  // scope — a pair at once where the program is sm_90a's (one that runs wgmma:
  // red.global.add.v2.f32 needs sm_90), else an element at a time; where `inside` is given (a run
  // that may pass the view's end), each element only where it says so.
  void add_into(Value* ptr, const std::vector<Value*>& xs, const std::function<Value*(int)>& inside) {
    if (xs.size() == 2 && !inside && p_.uses_wgmma()) {
      asm_call(b_.getVoidTy(), "red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f,~{memory}",
               {b_.CreatePtrToInt(ptr, b_.getInt64Ty()), xs[0], xs[1]});
      return;
    }
    llvm::SyncScope::ID device = ctx_.getOrInsertSyncScopeID("device");
    for (size_t e = 0; e < xs.size(); ++e) {
      auto add = [&] {
        b_.CreateAtomicRMW(llvm::AtomicRMWInst::FAdd,
                           b_.CreateInBoundsGEP(b_.getFloatTy(), ptr, b_.getInt64(e)), xs[e], llvm::Align(4),
                           llvm::AtomicOrdering::Monotonic, device);
      };
      if (inside)
        guarded(inside(static_cast<int>(e)), add);
      else
        add();
    }
  }

  // A run that may pass the view's end along its columns: whole where it fits, else its elements
  // inside the view (the rest 0).
  Value* straddling_load(const Inst& i, Value* base, llvm::Type* ty, Value* row, Value* col, int width, Value* whole) {
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const llvm::Align align(dtype_size(prm.dtype) * static_cast<size_t>(width));
    return whole_or_elements(ty, width, whole, b_.CreateInBoundsGEP(ty, base, offset(prm, row, col)), align, [&](int e) {
      Value* c = b_.CreateAdd(col, index(e));
      Value* in = inside(i, 1, c);
      return std::make_pair(in, b_.CreateInBoundsGEP(ty, base, offset(prm, row, b_.CreateSelect(in, c, col))));
    });
  }
  // A run of `width` elements of `ty` as one vector value: one load at `at` where `whole`, else
  // element e from where element(e) points, where it says it lies inside (0 elsewhere), met as
  // one vector value (a load used only by extracts would be split into element loads and sunk
  // into the join).
  Value* whole_or_elements(llvm::Type* ty, int width, Value* whole, Value* at, llvm::Align align,
                           const std::function<std::pair<Value*, Value*>(int)>& element) {
    auto* vty = llvm::FixedVectorType::get(ty, static_cast<unsigned>(width));
    auto* vec_bb = llvm::BasicBlock::Create(b_.getContext(), "run_load", fn_);
    auto* tail = llvm::BasicBlock::Create(b_.getContext(), "tail_load", fn_);
    auto* done = llvm::BasicBlock::Create(b_.getContext(), "run_loaded", fn_);
    b_.CreateCondBr(whole, vec_bb, tail);
    b_.SetInsertPoint(vec_bb);
    Value* v = b_.CreateAlignedLoad(vty, at, align);
    b_.CreateBr(done);
    b_.SetInsertPoint(tail);
    Value* parts = llvm::Constant::getNullValue(vty);
    const llvm::Align one(ty->getPrimitiveSizeInBits() / 8);
    for (int e = 0; e < width; ++e) {
      const auto [in, ptr] = element(e);
      Value* x = b_.CreateAlignedLoad(ty, ptr, one);
      parts = b_.CreateInsertElement(parts, b_.CreateSelect(in, x, llvm::Constant::getNullValue(ty)), static_cast<uint64_t>(e));
    }
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    llvm::PHINode* phi = b_.CreatePHI(vty, 2);
    phi->addIncoming(v, vec_bb);
    phi->addIncoming(parts, tail);
    return phi;
  }

  template <typename F>
  void guarded(Value* cond, F body) {
    tilefuse::guarded(b_, fn_, cond, body);
  }

  // Elementwise, broadcasting tiles of extent 1 and scalars. A division by a divisor broadcast
  // over the result (softmax's x / Σ, one value per row) takes one reciprocal per divisor element
  // — correctly rounded for an f32 result (≤ 1.5 ulp with the multiply), a 16-bit division's
  // div.full for a 16-bit one (no IEEE sequence: its slow path is a call, at which ptxas held 55
  // registers where the kernel needs 40, a 4097-wide bf16 softmax) — and a multiply per element
  // instead of a division per element.
  void compute(const Inst& i) {
    if (i.skip_ones && !carried_16bit_.count(i.args[0]) && !part_made_.count(i.args[0]))
      return lazy_rescale(i);
    const Type& t = type(i.results[0]);
    computed_by_[i.results[0]] = &i;
    std::vector<Value*> out;
    const int n0 = t.is_tile() ? slots(t, 0) : 1, n1 = t.is_tile() ? slots(t, 1) : 1;
    const bool broadcast_divisor = i.op == Op::Div && t.is_tile() &&
                                   (!type(i.args[1]).is_tile() || elements(type(i.args[1])) < elements(t));
    std::map<Value*, Value*> reciprocal;
    MadeAgain made;
    for (int e0 = 0; e0 < n0; ++e0)
      for (int e1 = 0; e1 < n1; ++e1) {
        std::vector<Value*> args;
        for (int a : i.args) {
          const Type& at = type(a);
          if (!at.is_tile()) {
            args.push_back(one(a));
            continue;
          }
          args.push_back(carried_16bit_.count(a) || part_made_.count(a) ? again(a, e0, e1, made)
                                                                        : operand(a, e0, e1));
        }
        if (broadcast_divisor) {
          Value*& inv = reciprocal[args[1]];
          if (!inv)
            inv = element(b_, Op::Div, t.dtype, {llvm::ConstantFP::get(b_.getFloatTy(), 1.0), args[1]}, p_.name);
          out.push_back(b_.CreateFMul(args[0], inv));
          continue;
        }
        out.push_back(i.flush_subnormal
                          ? math::exp2_ftz(b_, args[0])
                          : element(b_, i.op, t.dtype, args, p_.name, i.nonpositive_arg, i.absolute_error));
      }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // At a join of two blocks: for each pair of f32 values, the one of the block control came from.
  std::vector<Value*> float_phis(const std::vector<Value*>& a, llvm::BasicBlock* from_a,
                                 const std::vector<Value*>& b, llvm::BasicBlock* from_b) {
    std::vector<Value*> out;
    for (size_t e = 0; e < a.size(); ++e) {
      llvm::PHINode* phi = b_.CreatePHI(b_.getFloatTy(), 2);
      phi->addIncoming(a[e], from_a);
      phi->addIncoming(b[e], from_b);
      out.push_back(phi);
    }
    return out;
  }

  // x · factor where most factors are exactly 1 (Inst::skip_ones): the products behind one
  // branch, which the warp takes where any of its threads holds a factor other than 1
  // (vote.any: a uniform branch); elsewhere x's elements pass on as they are.
  void lazy_rescale(const Inst& i) {
    const Type& t = type(i.results[0]);
    std::vector<Value*> xs, factors;
    Value* differs = b_.getFalse();
    for (int e0 = 0; e0 < slots(t, 0); ++e0)
      for (int e1 = 0; e1 < slots(t, 1); ++e1) {
        xs.push_back(operand(i.args[0], e0, e1));
        factors.push_back(operand(i.args[1], e0, e1));
        if (std::count(factors.begin(), factors.end() - 1, factors.back()) == 0)
          differs = b_.CreateOr(
              differs, b_.CreateFCmpUNE(factors.back(), llvm::ConstantFP::get(b_.getFloatTy(), 1.0)));
      }
    Value* any = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_vote_any_sync, {}, {b_.getInt32(~0u), differs});
    auto* rescale = llvm::BasicBlock::Create(ctx_, "rescale", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "rescaled", fn_);
    llvm::BasicBlock* kept = b_.GetInsertBlock();
    b_.CreateCondBr(any, rescale, done);
    b_.SetInsertPoint(rescale);
    std::vector<Value*> products;
    for (size_t e = 0; e < xs.size(); ++e) products.push_back(b_.CreateFMul(xs[e], factors[e]));
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    vals_[static_cast<size_t>(i.results[0])] = float_phis(xs, kept, products, rescale);
  }

  void inst(const Inst& i) {
    auto set = [&](Value* v) { vals_[static_cast<size_t>(i.results.at(0))] = {v}; };
    switch (i.opcode) {
      case Opcode::ProgramId:
        if (i.axis != 0) throw CodegenError(fmt::format("kernel {}: one grid axis only", p_.name));
        return set(b_.CreateZExt(b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x, {}),
                                 index_ty()));
      case Opcode::Const: {
        const Type& t = type(i.results[0]);
        if (t.kind == Type::Kind::Index) return set(index(static_cast<int64_t>(i.value)));
        Value* c = compute_constant(b_, i.value, t.dtype);
        if (!t.is_tile()) return set(c);
        vals_[static_cast<size_t>(i.results[0])].assign(elements(t), c);
        return;
      }
      case Opcode::Splat: {
        const Type& t = type(i.results[0]);
        vals_[static_cast<size_t>(i.results[0])].assign(elements(t), one(i.args[0]));
        return;
      }
      case Opcode::IndexMul:
        return set(b_.CreateMul(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexAdd:
        return set(b_.CreateAdd(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexDiv:
        return set(b_.CreateUDiv(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexRem:
        return set(b_.CreateURem(one(i.args[0]), one(i.args[1])));
      case Opcode::IndexMin:
        return set(b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, one(i.args[0]), one(i.args[1])));
      case Opcode::IndexSub:
        return set(b_.CreateSub(one(i.args[0]), one(i.args[1]), "", true, true));
      case Opcode::IndexLess:
        return set(b_.CreateICmpULT(one(i.args[0]), one(i.args[1])));
      case Opcode::AwaitTurn:
      case Opcode::HandOff:
        return take_turns(i);
      case Opcode::IndexCeil: {
        // ⌈x⌉ in f32, then to an unsigned index: max(x, 0) first (maxnum drops a NaN), and below
        // 2^31 so that the conversion is defined.
        Value* x = vals_.at(static_cast<size_t>(i.args[0])).at(0);
        if (!x->getType()->isFloatTy()) x = b_.CreateFPExt(x, b_.getFloatTy());
        x = b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
        x = b_.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, x, llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
        x = b_.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, x, llvm::ConstantFP::get(b_.getFloatTy(), 2147483520.0));
        return set(b_.CreateFPToUI(x, index_ty()));
      }
      case Opcode::Iota:
        return iota(i);
      case Opcode::InBounds:
        return in_bounds(i);
      case Opcode::InWindow:
        return in_window(i);
      case Opcode::Reduce:
        return reduce(i);
      case Opcode::Spread:
        return spread(i);
      case Opcode::GatherWarps:
        return gather_warps(i);
      case Opcode::ClusterValues:
      case Opcode::GatherBlocks:
        return cluster_values(i);
      case Opcode::For:
        return loop(i);
      case Opcode::If:
        return when(i);
      case Opcode::LastArrival:
        return last_arrival(i);
      case Opcode::Publish:
        return publish(i);
      case Opcode::GatherParts:
        return gather_parts(i);
      case Opcode::FetchParts:
        return fetch_parts(i);
      case Opcode::Dot:
        return dot(i);
      case Opcode::CopyAsync:
        return copy_async(i);
      case Opcode::LoadShared:
        return load_shared(i);
      case Opcode::StoreShared:
        return store_shared(i);
      case Opcode::DotAsync:
        return dot_async(i);
      case Opcode::DotWait:
        return dot_wait(i);
      case Opcode::FenceAsync:
        asm_call(b_.getVoidTy(), "fence.proxy.async.shared::cta;", "~{memory}", {});
        return;
      case Opcode::CommitGroup:
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_commit_group, llvm::ArrayRef<llvm::Type*>{}, llvm::ArrayRef<Value*>{});
        return;
      case Opcode::WaitGroup:
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_wait_group, {}, {i32(static_cast<int>(i.value))});
        return;
      case Opcode::Barrier:
        return block_barrier();
      case Opcode::Specialize:
        return specialize(i);
      case Opcode::TmaLoad:
        return tma_load(i);
      case Opcode::WaitFull:
      case Opcode::WaitEmpty:
        return wait_stage(i);
      case Opcode::Release:
        return release(i);
      case Opcode::TmaStore:
        return tma_store(i);
      case Opcode::WaitStores:  // every store complete, not just read: nothing left in flight at exit
        guarded(stores_by_warpgroup(p_.body) ? warpgroup_leader() : group_leader(), [&] {
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_bulk_wait_group, {}, {i32(0)});
          // (Sums that other blocks read next: ordered before the block's later generic accesses
          // — the consumers' barrier and thread 0's release in LastArrival.)
          if (adds_by_tma(p_.body)) asm_call(b_.getVoidTy(), "fence.proxy.async.global;", "~{memory}", {});
        });
        return;
      case Opcode::ResetCount:
        return reset_count(i);
      case Opcode::Load:
        return load(i);
      case Opcode::Store:
        return store(i);
      case Opcode::Compute:
        return compute(i);
      case Opcode::Convert:
        return convert(i);
      case Opcode::NumPrograms:
        return set(b_.CreateZExt(b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x, {}),
                                 index_ty()));
      case Opcode::FillStage:
        return fill_stage(i);
      case Opcode::StageRow:
        return set(b_.CreateZExt(b_.CreateAlignedLoad(b_.getInt32Ty(), stage_row_slot(i.ring, one(i.args[0])), llvm::Align(4)),
                                 index_ty()));
      case Opcode::Claim:
        return set(claim(i));
      case Opcode::While:
        return while_loop(i);
      case Opcode::Yield:
        break;
    }
    throw CodegenError(fmt::format("kernel {}: no lowering for {} yet", p_.name, opcode_name(i.opcode)));
  }

  void region(const Region& r) {
    for (const Inst& i : r.body) inst(i);
  }

  size_t elements(const Type& t) const {
    return t.is_tile() ? static_cast<size_t>(slots(t, 0) * slots(t, 1)) : 1;
  }

  // The offset (arg 0) plus each of the result's elements' position along `axis`, as `f` makes
  // it an element.
  template <typename F>
  void positions(const Inst& i, F f) {
    const Type& t = type(i.results[0]);
    const size_t d = static_cast<size_t>(i.axis);
    std::vector<Value*> out;
    for (int e0 = 0; e0 < slots(t, 0); ++e0)
      for (int e1 = 0; e1 < slots(t, 1); ++e1) {
        Value* at = one(i.args[0]);
        if (t.shape[d] != 1) at = b_.CreateAdd(at, b_.CreateZExt(position(t, d, d == 0 ? e0 : e1), index_ty()));
        out.push_back(f(at));
      }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }
  // Whether offset + each element's position along the axis is below the limit (arg 1).
  void in_bounds(const Inst& i) {
    bounds_of_[i.results[0]] = &i;
    positions(i, [&](Value* at) { return b_.CreateICmpULT(at, one(i.args[1])); });
  }
  // Each run of a row's consecutive elements tests its window columns at once: bits of [0, W)
  // from its start less the row's shift (run_bits), the row's runs packed in words of 32 bits as
  // the masked partials take them (run_bits_of_), each element its bit — a register a run, where
  // the elements' columns held to the last use were a register each (and spilled at 64).
  void in_window(const Inst& i) {
    const Type& t = type(i.results[0]);
    bounds_of_[i.results[0]] = &i;
    const int pt = t.shape[1] == 1 ? 1 : l_.per_thread[1];
    if (32 % pt != 0) throw CodegenError(fmt::format("kernel {}: runs of {} in words of 32 bits", p_.name, pt));
    Value* width = one(i.args[2]);
    const int n1 = slots(t, 1);
    std::vector<Value*> out;
    std::vector<Value*>& words = run_bits_of_[i.results[0]];
    for (int e0 = 0; e0 < slots(t, 0); ++e0) {
      Value* from = window_from(i, t, e0);
      for (int e1 = 0; e1 < n1; e1 += pt) {
        Value* start = t.shape[1] == 1 ? from : b_.CreateAdd(from, b_.CreateZExt(position(t, 1, e1), index_ty()));
        Value* bits = run_bits(start, index(0), width, pt);
        const int bit = e1 % 32, word = e0 * ((n1 + 31) / 32) + e1 / 32;
        if (static_cast<int>(words.size()) <= word) words.resize(static_cast<size_t>(word) + 1, i32(0));
        words[static_cast<size_t>(word)] = b_.CreateOr(words[static_cast<size_t>(word)], b_.CreateShl(bits, bit));
        for (int j = 0; j < std::min(pt, n1); ++j) out.push_back(b_.CreateICmpNE(b_.CreateAnd(bits, i32(1 << j)), i32(0)));
      }
    }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }
  // In_window `i`'s tile `t`: the window column of row slot e0's first element less its row's
  // shift (its position in the row, where the column's position is 0).
  Value* window_from(const Inst& i, const Type& t, int e0) {
    Value* row = one(i.args[0]);
    if (t.shape[0] != 1) row = b_.CreateAdd(row, b_.CreateZExt(position(t, 0, e0), index_ty()));
    return b_.CreateSub(one(i.args[1]), window_shift(row, one(i.args[2]), i.window));
  }

  // offset + each element's position along the axis, as f32 (exact below 2^24); the linear form:
  // ((row0 + row)·stride + col0 + col − the row's window shift, where windowed) / div % mod.
  void iota(const Inst& i) {
    if (i.args.size() == 1) {
      positions(i, [&](Value* at) { return b_.CreateUIToFP(at, b_.getFloatTy()); });
      return;
    }
    const Type& t = type(i.results[0]);
    auto constant = [&](int64_t v) { return llvm::ConstantInt::get(index_ty(), static_cast<uint64_t>(v)); };
    std::vector<Value*> out;
    for (int e0 = 0; e0 < slots(t, 0); ++e0)
      for (int e1 = 0; e1 < slots(t, 1); ++e1) {
        Value* row = one(i.args[0]);
        if (t.shape[0] != 1) row = b_.CreateAdd(row, b_.CreateZExt(position(t, 0, e0), index_ty()));
        Value* col = one(i.args[1]);
        if (t.shape[1] != 1) col = b_.CreateAdd(col, b_.CreateZExt(position(t, 1, e1), index_ty()));
        Value* at = b_.CreateAdd(b_.CreateMul(row, constant(i.iota_stride)), col);
        if (i.window > 0) at = b_.CreateSub(at, window_shift(row, constant(i.iota_stride), i.window));
        if (i.iota_div > 1) at = b_.CreateUDiv(at, constant(i.iota_div));
        out.push_back(b_.CreateUIToFP(b_.CreateURem(at, constant(i.iota_mod)), b_.getFloatTy()));
      }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // The thread's own elements combined in order along the axis; where threads share the axis
  // (a row of the blocked layout spread over lanes or warps: axis 1), then the threads' values
  // (reduce_across). An accumulator's rows (the verifier allows axis 1 with warps_n 1): each
  // thread's elements of a row, then its quad's (the four lanes holding that row) by butterfly
  // shuffles. Every element of the tile counts, or with a mask those where it holds
  // (thread_partials).
  void reduce(const Inst& i) {
    const size_t d = static_cast<size_t>(i.axis);
    const Type& in = type(i.args[0]);
    if (in.frag == Frag::Acc) return reduce_rows(i);
    const Frag to = type(i.results[0]).frag;
    if (in.frag == Frag::Lanes || in.frag == Frag::WarpLanes) {  // a value per thread of each row
      std::vector<Value*> rows = vals_[static_cast<size_t>(i.args[0])];
      if (to == Frag::Warps)  // over the warp's lanes
        for (Value*& acc : rows) acc = butterfly(combine_of(i.op), acc, 32);
      else if (in.frag == Frag::WarpLanes)  // over the lanes holding the tile's columns
        for (Value*& acc : rows) acc = over_columns(i.op, acc, static_cast<int>(in.shape[1]));
      else  // over the row's threads
        reduce_across(combine_of(i.op), rows);
      vals_[static_cast<size_t>(i.results[0])] = std::move(rows);
      return;
    }
    // Into a lanes tile: each thread's own elements only. (One element along the axis: every
    // thread's the same.)
    const bool across = l_.threads[d] != 1 && in.shape[d] != 1 && to != Frag::Lanes;
    if (across && d != 1)
      throw CodegenError(fmt::format("kernel {}: a reduction across threads along axis {} is not in Tile IR v2 yet",
                                     p_.name, d));
    if (in.frag != Frag::None)
      throw CodegenError(fmt::format("kernel {}: reducing a {} tile is not in Tile IR v2 yet", p_.name, frag_name(in.frag)));
    const Op combine = combine_of(i.op);
    std::vector<Value*> out = thread_partials(i);
    if (to == Frag::Warps)
      for (Value*& acc : out) acc = butterfly(combine, acc, 32);
    else if (across)
      reduce_across(combine, out);
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // The thread's elements of the reduced tile (arg 0) combined along the axis, each of its rows
  // (axis 1) or columns (axis 0) into one value; with a mask (arg 1), the elements where it fails
  // are the op's identity. A mask of positions in bounds along the reduced columns (in_bounds: a
  // row's edge, a window's row) is one interval, so a thread whose first and last positions lie
  // in it has all its elements in it: such threads (all but those at the edges) take a path
  // without a test or select per element (masked_partials).
  std::vector<Value*> thread_partials(const Inst& i) {
    const size_t d = static_cast<size_t>(i.axis);
    const Type& in = type(i.args[0]);
    const int n1 = slots(in, 1);
    if (i.args.size() < 2) return partials(i, nullptr);
    const int mask = i.args[1];
    const Type& mt = type(mask);
    auto bounds = bounds_of_.find(mask);
    const bool along_columns = bounds != bounds_of_.end() &&
                               (bounds->second->opcode == Opcode::InWindow || bounds->second->axis == 1);
    if (d != 1 || n1 < 2 || mt.shape[1] == 1 || !along_columns)
      return partials(i, [&](int e0, int e1) {
        const int m0 = mt.shape[0] == 1 ? 0 : e0, m1 = mt.shape[1] == 1 ? 0 : e1;
        return vals_[static_cast<size_t>(mask)][static_cast<size_t>(m0 * slots(mt, 1) + m1)];
      });
    return masked_partials(i, *bounds->second);
  }
  // Each row's (axis 1) or column's (axis 0) partial of the thread's elements of arg 0, those
  // where `ok` fails (where given) taken as the op's identity.
  std::vector<Value*> partials(const Inst& i, const std::function<Value*(int e0, int e1)>& ok) {
    const size_t d = static_cast<size_t>(i.axis);
    const std::vector<Value*>& v = vals_[static_cast<size_t>(i.args[0])];
    const Type& in = type(i.args[0]);
    const int n0 = slots(in, 0), n1 = slots(in, 1);
    Value* identity = llvm::ConstantFP::get(b_.getFloatTy(), tir::identity_of(i.op));
    std::vector<Value*> out;
    for (int a = 0; a < (d == 0 ? n1 : n0); ++a) {
      Value* acc = nullptr;
      for (int e = 0; e < (d == 0 ? n0 : n1); ++e) {
        const int e0 = d == 0 ? e : a, e1 = d == 0 ? a : e;
        Value* x = v[static_cast<size_t>(e0 * n1 + e1)];
        if (Value* m = ok ? ok(e0, e1) : nullptr) x = b_.CreateSelect(m, x, identity);
        acc = acc ? element(b_, combine_of(i.op), DType::F32, {acc, x}, p_.name) : x;
      }
      out.push_back(acc);
    }
    return out;
  }
  // A reduction masked by in_bounds or in_window `ib` along the columns, in two paths: threads
  // whose elements all lie in bounds combine them as they are; the others test each element — a
  // window's row by its bit of the row's words in_window packed, else by its position afresh (from
  // an opaque copy of the offset: LLVM would otherwise hold one predicate per element from the
  // mask's definition on). In a window's row, what only this reduction reads (log_softmax's
  // exps: its own chain) is computed again inside each path, each element combined as soon as it
  // is computed, so that none is held over the branch (a 50257-wide bf16 log_softmax: 64
  // registers, not 70; the cross-entropy's f32 rows: none spilled, not 8 bytes); in the masked
  // path from its inputs along the row zeroed outside it (had both paths computed the same
  // values, LLVM would hoist them above the branch). Not for rows masked at their end only: a
  // 2999-wide f32 layernorm's squares computed again held 32 registers, not 44, and ran 6%
  // slower on the H200 (0.105 ms against 0.099).
  std::vector<Value*> masked_partials(const Inst& i, const Inst& ib) {
    const int mask = i.args[1];
    const Type& mt = type(mask);
    const int n1 = slots(type(i.args[0]), 1);
    const bool window = ib.opcode == Opcode::InWindow;
    Value* limit = one(ib.args[window ? 2 : 1]);
    auto inside = [&](Value* offset, int e1) {
      Value* at = b_.CreateAdd(offset, b_.CreateZExt(position(mt, 1, e1), index_ty()));
      return b_.CreateICmpULT(at, limit);
    };
    Value* offset = window ? nullptr : one(ib.args[0]);
    // (A window's rows each from their own start: every row's first and last element.)
    Value* all_inside = b_.getTrue();
    for (int e0 = 0; e0 < (window ? slots(mt, 0) : 1); ++e0) {
      Value* from = window ? window_from(ib, mt, e0) : offset;
      all_inside = b_.CreateAnd(all_inside, b_.CreateAnd(inside(from, 0), inside(from, n1 - 1)));
    }
    const auto runs = run_bits_of_.find(mask);
    const std::vector<const Inst*> chain =
        runs != run_bits_of_.end() ? own_chain(i.args[0]) : std::vector<const Inst*>{};
    auto* whole = llvm::BasicBlock::Create(b_.getContext(), "partial_whole", fn_);
    auto* edge = llvm::BasicBlock::Create(b_.getContext(), "partial_masked", fn_);
    auto* done = llvm::BasicBlock::Create(b_.getContext(), "partial_done", fn_);
    b_.CreateCondBr(all_inside, whole, edge, llvm::MDBuilder(b_.getContext()).createLikelyBranchWeights());
    b_.SetInsertPoint(whole);
    for (const Inst* c : chain) compute(*c);
    std::vector<Value*> unmasked = partials(i, nullptr);
    llvm::BasicBlock* whole_end = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(edge);
    Value* fresh = window ? nullptr : own_register(b_, offset);
    std::map<int, Value*> bits_of;
    auto test = [&](int e0, int e1) {
      if (runs == run_bits_of_.end()) return inside(fresh, e1);
      const int word = (mt.shape[0] == 1 ? 0 : e0) * ((slots(mt, 1) + 31) / 32) + e1 / 32;
      Value*& bits = bits_of[word];
      if (!bits) bits = own_register(b_, runs->second[static_cast<size_t>(word)]);
      return b_.CreateICmpNE(b_.CreateAnd(bits, i32(static_cast<int>(1u << (e1 % 32)))), i32(0));
    };
    std::map<int, std::vector<Value*>> inputs;  // the chain's inputs along the row, as they were
    for (const Inst* c : chain)
      for (int a : c->args)
        if (type(a).is_tile() && type(a).shape[1] != 1 && !inputs.count(a) &&
            std::none_of(chain.begin(), chain.end(), [&](const Inst* m) { return m->results[0] == a; })) {
          // (An input one row high broadcast over a mask of several rows a thread: kept as it
          // is, its elements outside each row selected away by `test` below.)
          if (type(a).shape[0] == 1 && slots(mt, 0) > 1) continue;
          std::vector<Value*>& xs = vals_[static_cast<size_t>(a)];
          inputs[a] = xs;
          for (int a0 = 0; a0 < slots(type(a), 0); ++a0)
            for (int a1 = 0; a1 < slots(type(a), 1); ++a1) {
              Value*& x = xs[static_cast<size_t>(a0 * slots(type(a), 1) + a1)];
              x = b_.CreateSelect(test(a0, a1), x, llvm::Constant::getNullValue(x->getType()));
            }
        }
    for (const Inst* c : chain) compute(*c);
    for (auto& [a, before] : inputs) vals_[static_cast<size_t>(a)] = std::move(before);
    std::vector<Value*> masked = partials(i, test);
    llvm::BasicBlock* edge_end = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    return float_phis(unmasked, whole_end, masked, edge_end);
  }
  // The elementwise instructions whose values only value v's chain reads, v's own included
  // where only one instruction reads it (the reduction), each after those it reads.
  std::vector<const Inst*> own_chain(int v) {
    std::vector<const Inst*> chain;
    std::function<void(int)> visit = [&](int x) {
      auto def = computed_by_.find(x);
      if (def == computed_by_.end() || uses_[static_cast<size_t>(x)] != 1 ||
          std::count(chain.begin(), chain.end(), def->second))
        return;
      for (int a : def->second->args) visit(a);
      chain.push_back(def->second);
    };
    visit(v);
    return chain;
  }
  void cluster_barrier(llvm::Intrinsic::ID id) {
    b_.CreateIntrinsic(id, llvm::ArrayRef<llvm::Type*>{}, llvm::ArrayRef<Value*>{});
  }

  static bool exchanges_over_cluster(Opcode o) { return o == Opcode::ClusterValues || o == Opcode::GatherBlocks; }
  static bool exchanges_over_cluster(const Region& r) {
    for (const Inst& i : r.body) {
      if (exchanges_over_cluster(i.opcode)) return true;
      for (const Region& inner : i.regions)
        if (exchanges_over_cluster(inner)) return true;
    }
    return false;
  }

  // The cluster's blocks' values of per-row tiles, which every thread of a row in the block
  // holds: the row's first `cluster` threads each write the thread's values into the slots of
  // this block's rank in one block's shared memory (thread t into block t's, through mapa), a
  // cluster barrier (release, acquire), then every thread reads its row's slots — all of them
  // (cluster_values), or its lane's column's (gather_blocks: a warp_lanes tile).
  // Each exchange has slots of its own, so no write waits for earlier reads.
  void cluster_values(const Inst& i) {
    const int n = p_.cluster_blocks;
    if (l_.threads[1] < n)
      throw CodegenError(fmt::format("kernel {}: a row over a cluster of {} blocks has {} threads a block", p_.name, n,
                                     l_.threads[1]));
    const std::vector<Value*> mine = args_values(i);
    // In a loop the other blocks write the slots again in the next iteration: past another
    // exchange of this iteration (one follows in the loop's body, and no block writes past its
    // barrier before every block has read), or into the other half of slots doubled by the
    // iteration's parity (straight in the loop's body), or after a cluster barrier of its own.
    const bool doubled = loop_depth_ > 0 && !cluster_after_ && loop_top_ && loop_parity_;
    const RowSlots slots = row_slots("cluster_values", static_cast<int>(mine.size()), doubled ? 2 * n : n);
    Value* first = doubled ? b_.CreateMul(loop_parity_, i32(n)) : i32(0);
    join_cluster();
    Value* rank = b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_cluster_ctarank, {});
    guarded(b_.CreateICmpULT(thread_[1], i32(n)), [&] {
      for (size_t v = 0; v < mine.size(); ++v) {
        Value* theirs = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mapa_shared_cluster, {},
                                           {slot(slots, static_cast<int>(v), b_.CreateAdd(first, rank)), thread_[1]});
        b_.CreateAlignedStore(mine[v], theirs, llvm::Align(4));
      }
    });
    cluster_barrier(llvm::Intrinsic::nvvm_barrier_cluster_arrive_aligned);
    cluster_barrier(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
    if (i.opcode == Opcode::GatherBlocks) {
      Value* column = b_.CreateAdd(first, lane_column(n));
      for (size_t a = 0; a < i.args.size(); ++a) vals_[static_cast<size_t>(i.results[a])] = slot_values(i, a, slots, column);
    } else {
      for (size_t a = 0; a < i.args.size(); ++a)
        for (int r = 0; r < n; ++r)
          vals_[static_cast<size_t>(i.results[a * static_cast<size_t>(n) + static_cast<size_t>(r)])] =
              slot_values(i, a, slots, b_.CreateAdd(first, i32(r)));
    }
    if (loop_depth_ > 0 && !cluster_after_ && !doubled) {
      cluster_barrier(llvm::Intrinsic::nvvm_barrier_cluster_arrive_aligned);
      cluster_barrier(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
    }
  }
  // An exchange's args' values of the thread's rows, one arg after another.
  std::vector<Value*> args_values(const Inst& i) const {
    std::vector<Value*> mine;
    for (int a : i.args) {
      const std::vector<Value*>& v = vals_.at(static_cast<size_t>(a));
      mine.insert(mine.end(), v.begin(), v.end());
    }
    return mine;
  }
  // The wait that pairs with every block's arrival on entry: another block's shared memory is
  // written only once it runs. Before the first exchange — or before the loop that holds it,
  // which waits once, not each iteration.
  void join_cluster() {
    if (cluster_joined_) return;
    cluster_barrier(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned);
    cluster_joined_ = true;
  }

  // Shared f32 slots for `count` values of each of a thread's `values` per-row values, one set
  // per row of threads: slot (a, w) of the thread's row at ((row·values + a)·count + w).
  struct RowSlots {
    llvm::GlobalVariable* array;
    int values, count;
  };
  RowSlots row_slots(const char* name, int values, int count) {
    auto* ty = llvm::ArrayType::get(b_.getFloatTy(), static_cast<uint64_t>(l_.threads[0] * values * count));
    auto* array = new llvm::GlobalVariable(*m_, ty, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(ty),
                                           name, nullptr, llvm::GlobalValue::NotThreadLocal, 3);
    array->setAlignment(llvm::Align(16));
    return {array, values, count};
  }
  Value* slot(const RowSlots& s, int a, Value* w) {
    Value* at = b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(thread_[0], i32(s.values)), i32(a)), i32(s.count)), w);
    return b_.CreateInBoundsGEP(b_.getFloatTy(), s.array, at);
  }
  // Exchange i's arg a's values of the thread's rows (as many as the arg holds: args of one row
  // and of the tile's rows may meet) read from the slots' column `column`; the args' values lie
  // one arg after another (args_values).
  std::vector<Value*> slot_values(const Inst& i, size_t a, const RowSlots& slots, Value* column) {
    size_t first = 0;
    for (size_t b = 0; b < a; ++b) first += vals_.at(static_cast<size_t>(i.args[b])).size();
    std::vector<Value*> out;
    for (size_t e = 0; e < vals_.at(static_cast<size_t>(i.args[a])).size(); ++e)
      out.push_back(b_.CreateAlignedLoad(b_.getFloatTy(), slot(slots, static_cast<int>(first + e), column),
                                         llvm::Align(4)));
    return out;
  }
  // Each of the thread's per-row values: its row's slots combined in order (every thread of the
  // row gets the same bits).
  // (With `first`: the half of doubled slots from first on.)
  void combine_slots(Op combine, const RowSlots& slots, std::vector<Value*>& rows, Value* first = nullptr) {
    for (int a = 0; a < slots.values; ++a) {
      Value* acc = nullptr;
      for (int w = 0; w < (first ? slots.count / 2 : slots.count); ++w) {
        Value* x = b_.CreateAlignedLoad(b_.getFloatTy(), slot(slots, a, first ? b_.CreateAdd(first, i32(w)) : i32(w)),
                                        llvm::Align(4));
        acc = acc ? element(b_, combine, DType::F32, {acc, x}, p_.name) : x;
      }
      rows[static_cast<size_t>(a)] = acc;
    }
  }

  // Warps tiles gathered into every warp of their rows: lane 0 of each warp writes the warp's
  // values into the row's slots, a block barrier, then each lane reads its column's (lane_column:
  // n the row's warps), so that each warp holds every column. Its slots are its own, so no write
  // waits for earlier reads — in a loop, as reduce_across's are.
  void gather_warps(const Inst& i) {
    const WarpSlots w = written_by_warps("gathered_warps", args_values(i));
    Value* column = warps_column(w);
    for (size_t a = 0; a < i.args.size(); ++a) vals_[static_cast<size_t>(i.results[a])] = slot_values(i, a, w.slots, column);
    done_with(w);
  }

  // A lanes or warps tile over a blocked tile's elements: each takes its thread's value of its
  // row.
  void spread(const Inst& i) {
    const Type& t = type(i.results[0]);
    const Type& in = type(i.args[0]);
    const std::vector<Value*>& v = vals_[static_cast<size_t>(i.args[0])];
    std::vector<Value*> out;
    for (int e0 = 0; e0 < slots(t, 0); ++e0)
      for (int e1 = 0; e1 < slots(t, 1); ++e1) out.push_back(v[static_cast<size_t>(in.shape[0] == 1 ? 0 : e0)]);
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // Each of the thread's per-row values combined over the threads that share its row (axis 1:
  // threads[1] consecutive threads, a power of two up to a warp, or whole warps): a butterfly over
  // the row's lanes; for rows of whole warps, then each warp's value through shared memory (lane 0
  // writes it, a block barrier, every thread combines its row's warps in warp order, so all get
  // the same bits). Each reduction has slots of its own, so no write waits for earlier reads —
  // except inside a loop, where a second barrier ends the reads before the next iteration writes.
  void reduce_across(Op combine, std::vector<Value*>& rows) {
    const int t = l_.threads[1];
    const bool whole_warps = t % 32 == 0;
    if (!whole_warps && (t > 32 || (t & (t - 1)) != 0))
      throw CodegenError(fmt::format("kernel {}: a row reduction over {} threads (neither a power of two up to a warp "
                                     "nor whole warps)",
                                     p_.name, t));
    for (Value*& acc : rows) acc = butterfly(combine, acc, std::min(t, 32));
    if (!whole_warps || t == 32) return;
    const WarpSlots w = written_by_warps("row_warp_values", rows);
    combine_slots(combine, w.slots, rows, w.first);
    done_with(w);
  }
  // Each warp's `values` (its lane 0's) written into the row's slots, a column a warp, behind one
  // block barrier. In a loop, the slots are written again in the next iteration: past another
  // block barrier of this iteration (one follows in the loop's body, which every thread reaches
  // after its reads), or into the other half of slots doubled by the iteration's parity (`first`:
  // this iteration's first column; the exchange straight in the loop's body, once an iteration),
  // or after a barrier of its own once they are read (done_with).
  struct WarpSlots {
    RowSlots slots;
    Value* first;  // null: not doubled
  };
  // Slots for `values` values of `columns` columns each, doubled by the iteration's parity where
  // they stand straight in a loop's body with no block barrier after them there.
  WarpSlots loop_slots(const char* name, int values, int columns) {
    const bool doubled = loop_depth_ > 0 && !barrier_after_ && loop_top_ && loop_parity_;
    return {row_slots(name, values, doubled ? 2 * columns : columns),
            doubled ? b_.CreateMul(loop_parity_, i32(columns)) : nullptr};
  }
  WarpSlots written_by_warps(const char* name, const std::vector<Value*>& values) {
    const WarpSlots w = warps_write(name, values);
    block_barrier();
    return w;
  }
  // The warps' lane 0 write their values into slots of the row's warps (no barrier yet).
  WarpSlots warps_write(const char* name, const std::vector<Value*>& values) {
    const int warps = l_.threads[1] / 32, n = static_cast<int>(values.size());
    const auto [slots, first] = loop_slots(name, n, warps);
    Value* warp = b_.CreateUDiv(thread_[1], i32(32));
    if (first) warp = b_.CreateAdd(warp, first);
    guarded(b_.CreateICmpEQ(b_.CreateURem(thread_[1], i32(32)), i32(0)), [&] {
      for (int a = 0; a < n; ++a) b_.CreateAlignedStore(values[static_cast<size_t>(a)], slot(slots, a, warp), llvm::Align(4));
    });
    return {slots, first};
  }
  // The column of the warps' slots each lane reads (lane_column over the row's warps).
  Value* warps_column(const WarpSlots& w) {
    Value* column = lane_column(l_.threads[1] / 32);
    return w.first ? b_.CreateAdd(w.first, column) : column;
  }
  void done_with(const WarpSlots& w) {
    if (loop_depth_ > 0 && !barrier_after_ && !w.first) block_barrier();
  }
  bool has_block_barrier(const Inst& i) const { return syncs_block(p_, i, in_consumers_); }
  // A loop's body region, each instruction told whether a block barrier follows it there and
  // that it stands straight in the loop's body; `parity`: the iteration's parity (i32).
  void loop_body(const Region& r, Value* parity) {
    const bool outer_after = barrier_after_, outer_cluster = cluster_after_, outer_top = loop_top_,
               outer_around = barrier_around_;
    Value* outer_parity = loop_parity_;
    loop_parity_ = parity;
    // Whether a block barrier, or an exchange, follows instruction k: one pass from the end. (And
    // whether one precedes it: a branch's slots are then written again only past a barrier.)
    std::vector<bool> barrier_after(r.body.size(), false), cluster_after(r.body.size(), false);
    for (size_t k = r.body.size(); k-- > 1;) {
      barrier_after[k - 1] = barrier_after[k] || has_block_barrier(r.body[k]);
      cluster_after[k - 1] = cluster_after[k] || exchanges_over_cluster(r.body[k].opcode);
    }
    bool barrier_before = false;
    for (size_t k = 0; k < r.body.size(); ++k) {
      if (r.body[k].opcode == Opcode::Yield) continue;
      barrier_around_ = barrier_before || barrier_after[k];
      barrier_before = barrier_before || has_block_barrier(r.body[k]);
      barrier_after_ = barrier_after[k];
      cluster_after_ = cluster_after[k];
      loop_top_ = true;
      inst(r.body[k]);
    }
    barrier_after_ = outer_after;
    cluster_after_ = outer_cluster;
    loop_top_ = outer_top;
    barrier_around_ = outer_around;
    loop_parity_ = outer_parity;
  }
  // Emits a region that does not stand straight in a loop's body (a branch's, a loop's condition).
  // `between_iterations`: a block barrier of the loop's body outside it runs between any two
  // iterations' runs of it (a branch straight in the body, with a barrier before or after it
  // there), so its slots need no barrier or doubling of their own.
  void nested_region(const Region& r, bool between_iterations = false) {
    const bool outer_after = barrier_after_, outer_cluster = cluster_after_, outer_top = loop_top_;
    barrier_after_ = between_iterations;
    cluster_after_ = loop_top_ = false;
    for (const Inst& i : r.body)
      if (i.opcode != Opcode::Yield) inst(i);
    barrier_after_ = outer_after;
    cluster_after_ = outer_cluster;
    loop_top_ = outer_top;
  }

  // A warp_lanes tile's row of n columns reduced by `reduction` over each aligned group of P lanes
  // (P the power of two at or above n): the group's lanes past n count as the identity.
  Value* over_columns(Op reduction, Value* acc, int n) {
    const int p = lanes_holding(n);
    if (p != n) {
      Value* in_tile = b_.CreateICmpULT(place_in_group(p), i32(n));
      acc = b_.CreateSelect(in_tile, acc, llvm::ConstantFP::get(b_.getFloatTy(), tir::identity_of(reduction)));
    }
    return butterfly(combine_of(reduction), acc, p);
  }
  // The column of a warp_lanes tile of n columns this thread's lane holds: its place in its
  // aligned group of P lanes, less n past the tile (a copy, which reductions do not count).
  Value* lane_column(int n) {
    const int p = lanes_holding(n);
    Value* q = place_in_group(p);
    return p == n ? q : b_.CreateSelect(b_.CreateICmpULT(q, i32(n)), q, b_.CreateSub(q, i32(n)));
  }
  // P: the lanes of a group holding a warp_lanes tile of n columns (the power of two at or above).
  static int lanes_holding(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
  }
  // The thread's lane's place in its aligned group of p lanes.
  Value* place_in_group(int p) { return b_.CreateAnd(b_.CreateURem(thread_[1], i32(32)), i32(p - 1)); }

  // acc combined over each aligned group of `lanes` lanes (a power of two up to 32): butterfly
  // shuffles at offsets 1, 2, …, lanes / 2; every lane of a group gets the same bits.
  Value* butterfly(Op combine, Value* acc, int lanes) {
    for (int offset = 1; offset < lanes; offset *= 2) {
      Value* other = b_.CreateIntrinsic(b_.getFloatTy(), llvm::Intrinsic::nvvm_shfl_sync_bfly_f32,
                                        {b_.getInt32(0xffffffffu), acc, i32(offset), i32(0x1f)});
      acc = element(b_, combine, DType::F32, {acc, other}, p_.name);
    }
    return acc;
  }

  void reduce_rows(const Inst& i) {
    const Type& in = type(i.args[0]);
    const std::vector<Value*>& v = vals_[static_cast<size_t>(i.args[0])];
    const Op combine = combine_of(i.op);
    const int n0 = slots(in, 0), n1 = slots(in, 1);
    std::vector<Value*> out;
    for (int r = 0; r < n0; ++r) {
      Value* acc = v[static_cast<size_t>(r * n1)];
      for (int c = 1; c < n1; ++c) acc = element(b_, combine, DType::F32, {acc, v[static_cast<size_t>(r * n1 + c)]}, p_.name);
      if (in.shape[1] == 1) {  // one column: every lane of the quad holds it already
        out.push_back(acc);
        continue;
      }
      out.push_back(butterfly(combine, acc, 4));
    }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // Columns [16·chunk, 16·chunk + 16) of an accumulator as an A fragment: A's slot (row slot,
  // kk, c) is the accumulator's (row slot, column piece 2·chunk + kk, c) — both hold column
  // 8·piece + 2·tig + c of rows group and group + 8 — rounded to the A dtype.
  void convert(const Inst& i) {
    const Type& in = type(i.args[0]);
    const Type& t = type(i.results[0]);
    const std::vector<Value*>& v = vals_[static_cast<size_t>(i.args[0])];
    const int chunk = static_cast<int>(i.value), n0 = slots(in, 0), n1 = slots(in, 1);
    std::vector<Value*> out;
    // Each pair of adjacent columns rounded by one conversion (cvt.rn.bf16x2.f32: its first
    // operand to the upper half), which pack then takes as the pair's register.
    const auto pair = t.dtype == DType::BF16 ? llvm::Intrinsic::nvvm_ff2bf16x2_rn : llvm::Intrinsic::nvvm_ff2f16x2_rn;
    for (int r = 0; r < n0; ++r)
      for (int kk = 0; kk < 2; ++kk) {
        const size_t at = static_cast<size_t>(r * n1 + (2 * chunk + kk) * 2);
        Value* two = b_.CreateIntrinsic(pair, {}, {v[at + 1], v[at]});
        for (uint64_t c = 0; c < 2; ++c) out.push_back(to_compute(b_, b_.CreateExtractElement(two, c), t.dtype));
      }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // A loop's head (a For's or a While's), entered from `pre`: each carried value's elements as
  // phis (carry: the region's args `args` take them), and the iteration's parity (i32). A tile's
  // 16-bit elements are carried in pairs, a phi of 32 bits each (ptxas gives a 16-bit value a
  // register of its own: a 16-bit part carried element by element takes twice the registers).
  struct LoopHead {
    llvm::BasicBlock* pre;
    std::vector<std::vector<llvm::PHINode*>> carried;
    std::vector<std::optional<DType>> paired;  // (16-bit elements carried in pairs)
    llvm::PHINode* parity;
  };
  LoopHead open_loop(const char* name) {
    LoopHead h{b_.GetInsertBlock(), {}, {}, nullptr};
    auto* head = llvm::BasicBlock::Create(ctx_, name, fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    return h;
  }
  // A loop's carried blocked tile or A fragment of 16-bit elements that are exact in 16 bits both
  // as it enters and as the body yields it, an even count a thread: its dtype (else it is carried
  // in f32).
  std::optional<DType> in_pairs(int init, int next) const {
    const size_t n = vals_[static_cast<size_t>(init)].size();
    const bool blocked = exact_16bit_.count(init) && carried_16bit_.count(next);
    const bool fragment = exact_fragments_.count(init) && exact_fragments_.count(next);
    if (!(blocked || fragment) || n == 0 || n % 2 != 0) return std::nullopt;
    return type(init).dtype;
  }
  std::vector<Value*> packed_pairs(const std::vector<Value*>& v, DType dt) {
    std::vector<Value*> out;
    for (size_t e = 0; e < v.size(); e += 2) out.push_back(pack(v[e], v[e + 1], dt));
    return out;
  }
  // (At the loop's head, each word through a register of its own: else LLVM's PRE would carry
  // the pairs' f32 values made at the loop's end in their place.)
  std::vector<Value*> unpacked_pairs(const std::vector<llvm::PHINode*>& words, DType dt, bool own) {
    std::vector<Value*> out;
    for (llvm::PHINode* w : words) {
      Value* word = w;
      if (own) {
        word = own_register(b_, w);
        unpacked_words_.push_back(llvm::cast<llvm::Instruction>(word));
      }
      Value* two = b_.CreateBitCast(word, llvm::FixedVectorType::get(storage_type(b_, dt), 2));
      for (uint64_t c = 0; c < 2; ++c) out.push_back(to_compute(b_, b_.CreateExtractElement(two, c), dt));
    }
    return out;
  }
  void carry(LoopHead& h, const std::vector<int>& inits, const std::vector<int>& args, const Inst& yield) {
    for (size_t k = 0; k < inits.size(); ++k) {
      const std::vector<Value*>& init = vals_[static_cast<size_t>(inits[k])];
      const std::optional<DType> pairs = in_pairs(inits[k], yield.args.at(k));
      llvm::BasicBlock* at = b_.GetInsertBlock();
      b_.SetInsertPoint(h.pre->getTerminator());
      const std::vector<Value*> in = pairs ? packed_pairs(init, *pairs) : init;
      b_.SetInsertPoint(at);
      std::vector<llvm::PHINode*> ps;
      for (Value* v : in) {
        ps.push_back(b_.CreatePHI(v->getType(), 2));
        ps.back()->addIncoming(v, h.pre);
      }
      h.carried.push_back(std::move(ps));
      h.paired.push_back(pairs);
    }
    h.parity = b_.CreatePHI(b_.getInt32Ty(), 2, "parity");
    h.parity->addIncoming(i32(0), h.pre);
    for (size_t k = 0; k < inits.size(); ++k)  // (after every phi)
      vals_[static_cast<size_t>(args[k])] = carried_values(h, k, true);
  }
  // Each carried word's unpacking (its move, bitcast, elements and their f32 values) moved from
  // the loop's head to the nearest block that dominates every use of its values (the pending
  // task's branch), before the first use there: at the head, the 16-bit part would be unpacked
  // into f32 registers that live across the whole iteration.
  void sink_unpacked_pairs() {
    llvm::DominatorTree dom(*fn_);
    for (llvm::Instruction* word : unpacked_words_) {
      const std::vector<llvm::Instruction*> chain = unpacking(word);
      const std::set<llvm::Instruction*> in_chain(chain.begin(), chain.end());
      std::set<llvm::Instruction*> users;  // (outside the chain, but phis)
      llvm::BasicBlock* to = nullptr;
      bool dominated = true;
      for (llvm::Instruction* c : chain)
        for (llvm::Use& u : c->uses()) {
          auto* i = llvm::cast<llvm::Instruction>(u.getUser());
          if (in_chain.count(i)) continue;
          auto* phi = llvm::dyn_cast<llvm::PHINode>(i);
          llvm::BasicBlock* at = phi ? phi->getIncomingBlock(u) : i->getParent();
          dominated = dominated && dom.isReachableFromEntry(at);  // (else left in place)
          if (dominated) to = !to ? at : dom.findNearestCommonDominator(to, at);
          if (!phi) users.insert(i);
        }
      if (!dominated || !to || to == word->getParent()) continue;
      llvm::Instruction* before = to->getTerminator();
      for (llvm::Instruction& i : *to)
        if (users.count(&i)) {
          before = &i;
          break;
        }
      for (llvm::Instruction* c : chain) c->moveBefore(before->getIterator());
    }
  }
  // A carried word's move and what unpacks it (bitcast, elements, their f32 values), defs first.
  static std::vector<llvm::Instruction*> unpacking(llvm::Instruction* word) {
    std::vector<llvm::Instruction*> chain = {word};
    for (size_t c = 0; c < chain.size(); ++c)
      for (llvm::User* u : chain[c]->users())
        if (auto* i = llvm::dyn_cast<llvm::Instruction>(u);
            i && std::find(chain.begin(), chain.end(), i) == chain.end() &&
            (llvm::isa<llvm::BitCastInst>(i) || llvm::isa<llvm::ExtractElementInst>(i) ||
             llvm::isa<llvm::FPExtInst>(i)))
          chain.push_back(i);
    return chain;
  }
  std::vector<Value*> carried_values(const LoopHead& h, size_t k, bool own) {
    if (h.paired[k]) return unpacked_pairs(h.carried[k], *h.paired[k], own);
    return std::vector<Value*>(h.carried[k].begin(), h.carried[k].end());
  }
  // The latch (the insertion point): the yielded values into the head's phis, back to the head;
  // then the loop's results, the phis, after it at `exit`.
  void close_loop(const LoopHead& h, const Inst& yield, llvm::BasicBlock* exit, const std::vector<int>& results) {
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    h.parity->addIncoming(b_.CreateXor(h.parity, i32(1)), latch);
    for (size_t k = 0; k < h.carried.size(); ++k) {
      const std::vector<Value*>& next = vals_[static_cast<size_t>(yield.args[k])];
      const std::vector<Value*> in = h.paired[k] ? packed_pairs(next, *h.paired[k]) : next;
      for (size_t e = 0; e < h.carried[k].size(); ++e) h.carried[k][e]->addIncoming(in[e], latch);
    }
    b_.CreateBr(h.parity->getParent());
    b_.SetInsertPoint(exit);
    for (size_t k = 0; k < results.size(); ++k)
      vals_[static_cast<size_t>(results[k])] = carried_values(h, k, false);
  }

  // lo ≤ iv < hi by step, the carried values (every element of a carried tile) as PHIs.
  void loop(const Inst& i) {
    const Region& r = i.regions.at(0);
    if (exchanges_over_cluster(r)) join_cluster();
    LoopHead h = open_loop("loop");
    llvm::PHINode* iv = b_.CreatePHI(index_ty(), 2, "iv");
    iv->addIncoming(one(i.args[0]), h.pre);
    vals_[static_cast<size_t>(r.args[0])] = {iv};
    carry(h, std::vector<int>(i.args.begin() + 3, i.args.end()),
          std::vector<int>(r.args.begin() + 1, r.args.end()), r.body.back());
    auto* body = llvm::BasicBlock::Create(ctx_, "loop.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "loop.exit", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(iv, one(i.args[1])), body, exit);
    b_.SetInsertPoint(body);
    ++loop_depth_;
    loop_body(r, h.parity);
    --loop_depth_;
    iv->addIncoming(b_.CreateAdd(iv, one(i.args[2])), b_.GetInsertBlock());
    close_loop(h, r.body.back(), exit, i.results);
  }

  // A loop while region 0's condition holds: the carried values as phis at its head, region 0
  // there, region 1 its body.
  void while_loop(const Inst& i) {
    const Region& head_r = i.regions.at(0);
    const Region& body_r = i.regions.at(1);
    if (exchanges_over_cluster(head_r) || exchanges_over_cluster(body_r)) join_cluster();
    LoopHead h = open_loop("while");
    carry(h, i.args, head_r.args, body_r.body.back());
    auto* body = llvm::BasicBlock::Create(ctx_, "while.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "while.exit", fn_);
    ++loop_depth_;
    nested_region(head_r);
    b_.CreateCondBr(one(head_r.body.back().args.at(0)), body, exit);
    b_.SetInsertPoint(body);
    loop_body(body_r, h.parity);
    --loop_depth_;
    close_loop(h, body_r.body.back(), exit, i.results);
  }

  // Two 16-bit elements of a fragment (held in f32, exactly) packed into an i32 register: the
  // pair a conversion made (convert), or the two rounded and put together.
  Value* pack(Value* lo, Value* hi, DType dt) {
    llvm::Type* half = storage_type(b_, dt);
    auto half_of = [&](Value* x, uint64_t at) -> Value* {
      const auto e = widened_element(x, half);
      const auto* pair = e ? llvm::dyn_cast<llvm::FixedVectorType>(e->first->getType()) : nullptr;
      return pair && pair->getNumElements() == 2 && e->second == at ? e->first : nullptr;
    };
    Value* both = half_of(lo, 0);
    if (both && both == half_of(hi, 1)) return b_.CreateBitCast(both, b_.getInt32Ty());
    Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(half, 2));
    v = b_.CreateInsertElement(v, b_.CreateFPTrunc(lo, half), uint64_t{0});
    v = b_.CreateInsertElement(v, b_.CreateFPTrunc(hi, half), uint64_t{1});
    return b_.CreateBitCast(v, b_.getInt32Ty());
  }

  // The four registers of 16-row piece `im` of an A fragment (slots (i, h, kk, c)): PTX's a0a1 =
  // (h 0, kk 0), a2a3 = (h 1, kk 0), a4a5 = (h 0, kk 1), a6a7 = (h 1, kk 1), two 16-bit halves
  // each — mma.sync's m16k16 layout, and per warp wgmma's m64k16 register one.
  std::vector<Value*> a_registers(const std::vector<Value*>& a, int im, DType dt) {
    auto A = [&](int h, int kk, int cc) { return a[static_cast<size_t>((im * 2 + h) * 4 + kk * 2 + cc)]; };
    std::vector<Value*> regs;
    for (auto [h, kk] : {std::pair{0, 0}, {1, 0}, {0, 1}, {1, 1}}) regs.push_back(pack(A(h, kk, 0), A(h, kk, 1), dt));
    return regs;
  }

  // acc + A·B, one mma.sync m16n8k16 per 16×8 piece of the warp's accumulator. Slots (see slots)
  // map to PTX's registers: a0a1 = (h 0, kk 0), a2a3 = (h 1, kk 0), a4a5 = (h 0, kk 1),
  // a6a7 = (h 1, kk 1); b0b1 = (kk 0), b2b3 = (kk 1); c0c1 = (h 0), c2c3 = (h 1).
  void dot(const Inst& i) {
    const Type &ta = type(i.args[0]), &tc = type(i.args[2]);
    const std::vector<Value*>& a = vals_[static_cast<size_t>(i.args[0])];
    const std::vector<Value*>& bv = vals_[static_cast<size_t>(i.args[1])];
    std::vector<Value*> c = vals_[static_cast<size_t>(i.args[2])];
    const llvm::Intrinsic::ID mma = ta.dtype == DType::BF16 ? llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16
                                                            : llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32;
    const int pieces_m = p_.mma->warp_m / 16, pieces_n = warp_cols(tc) / 8;
    const int acc_cols = slots(tc, 1);
    const Type& tb = type(i.args[1]);
    const int b_cols = slots(tb, 1);
    for (int im = 0; im < pieces_m; ++im) {
      const std::vector<Value*> a_regs = a_registers(a, im, ta.dtype);
      for (int jn = 0; jn < pieces_n; ++jn) {
        auto B = [&](int kk, int cc) { return bv[static_cast<size_t>((kk * 2 + cc) * b_cols + jn)]; };
        auto C = [&](int h, int cc) -> Value*& { return c[static_cast<size_t>((im * 2 + h) * acc_cols + jn * 2 + cc)]; };
        std::vector<Value*> args = a_regs;
        if (ta.dtype == DType::BF16) {
          args.push_back(pack(B(0, 0), B(0, 1), ta.dtype));
          args.push_back(pack(B(1, 0), B(1, 1), ta.dtype));
        } else {  // the f16 form takes <2 x half> registers
          for (Value*& r : args) r = b_.CreateBitCast(r, llvm::FixedVectorType::get(b_.getHalfTy(), 2));
          args.push_back(b_.CreateBitCast(pack(B(0, 0), B(0, 1), ta.dtype), llvm::FixedVectorType::get(b_.getHalfTy(), 2)));
          args.push_back(b_.CreateBitCast(pack(B(1, 0), B(1, 1), ta.dtype), llvm::FixedVectorType::get(b_.getHalfTy(), 2)));
        }
        for (auto [h, cc] : {std::pair{0, 0}, {0, 1}, {1, 0}, {1, 1}}) args.push_back(C(h, cc));
        Value* d = b_.CreateIntrinsic(mma, {}, args);
        int r = 0;
        for (auto [h, cc] : {std::pair{0, 0}, {0, 1}, {1, 0}, {1, 1}}) C(h, cc) = b_.CreateExtractValue(d, {static_cast<unsigned>(r++)});
      }
    }
    vals_[static_cast<size_t>(i.results[0])] = std::move(c);
  }

  // ---- shared rings ----

  // The byte offset in a ring's stage of 16-byte chunk c of stored row o, rows of n chunks (a
  // power of two) and `rows` of them. Rows of 8 chunks or more are stored as panels of 8 chunks
  // (128 bytes: every row's chunks 0–7, then 8–15, …), each chunk XORed with the row's index
  // within its group of 8 — wgmma's 128-byte swizzle; shorter rows share a 128-byte line, which
  // XORs its chunks with the line's index. Either way the 8 rows an ldmatrix reads at one chunk,
  // and 8 consecutive chunks, land in 8 distinct 16-byte bank groups.
  Value* shared_chunk(Value* o, Value* c, int64_t n, int64_t rows) {
    Value* chunk;
    if (n >= 8) {
      Value* seven = i32(7);
      Value* panel = b_.CreateMul(b_.CreateUDiv(c, i32(8)), i32(static_cast<int>(rows * 8)));
      chunk = b_.CreateAdd(b_.CreateAdd(panel, b_.CreateMul(o, i32(8))),
                           b_.CreateXor(b_.CreateAnd(c, seven), b_.CreateAnd(o, seven)));
    } else {
      const int line_rows = static_cast<int>(8 / n);
      Value* line = b_.CreateUDiv(o, i32(line_rows));
      Value* within = b_.CreateAdd(b_.CreateMul(b_.CreateURem(o, i32(line_rows)), i32(static_cast<int>(n))), c);
      chunk = b_.CreateAdd(b_.CreateMul(line, i32(8)), b_.CreateXor(within, b_.CreateAnd(line, i32(7))));
    }
    return b_.CreateMul(chunk, i32(16));
  }
  // A ring's stored rows and their 16-byte chunks.
  static int64_t stored_rows(const tir::SharedRing& r) { return r.tile[r.col_major ? 1 : 0]; }
  static int64_t row_chunks(const tir::SharedRing& r) {
    return r.tile[r.col_major ? 0 : 1] / (16 / static_cast<int64_t>(dtype_size(r.dtype)));
  }
  // The byte offset of a ring's stage in shared memory.
  Value* stage_at(int ring, Value* stage) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(ring)];
    return b_.CreateAdd(i32(static_cast<int>(ring_at_[static_cast<size_t>(ring)])),
                        b_.CreateMul(stage, i32(static_cast<int>(r.stage_bytes()))));
  }
  Value* ring_address(int ring, Value* stage, Value* o, Value* c) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(ring)];
    return b_.CreateInBoundsGEP(b_.getInt8Ty(), shared_,
                                b_.CreateAdd(stage_at(ring, stage), shared_chunk(o, c, row_chunks(r), stored_rows(r))));
  }
  Value* as_i32(Value* v) { return b_.CreateZExtOrTrunc(v, b_.getInt32Ty()); }

  // The element stride of a parameter along axis d where its offset is linear in the index there;
  // 0 where it is not (rows split into broadcast dimensions, element-wise views, a column-major
  // parameter's rows, which restart at each group, a broadcast axis).
  static int64_t linear_stride(const tir::Param& prm, size_t d) {
    if (!prm.elem_dims.empty() || prm.view[d] == 1) return 0;
    if (prm.col_major) return d == 1 ? prm.group_rows : 0;
    return d == 1 ? 1 : prm.row_dims.empty() ? prm.view[1] : 0;
  }
  // The bytes between a ring's chunk (o, c) and (o + rows, c) where they are the same for every o
  // and c (rows a multiple of the swizzle's period of rows: see shared_chunk), else −1.
  static int64_t ring_row_step(int64_t n, int64_t rows) {
    if (n >= 8) return rows % 8 == 0 ? rows * 128 : -1;
    const int64_t line_rows = 8 / n;
    return rows % (8 * line_rows) == 0 ? rows / line_rows * 128 : -1;
  }

  // The block's threads take the tile's 16-byte chunks in turn, consecutive threads along the
  // parameter's contiguous axis; a chunk past a masked axis's limit is zero-filled (cp.async with
  // a source size of 0 reads nothing). Where every thread keeps its chunk of a row from one pass
  // over the tile's rows to the next, and both addresses move by constants between passes, each
  // thread works out its addresses and masks once: a pass is then its copy at immediate offsets
  // from them and one compare of the rows left.
  void copy_async(const Inst& i) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const int64_t elems = 16 / static_cast<int64_t>(dtype_size(r.dtype));
    const size_t along = r.col_major ? 0 : 1, across = 1 - along;
    const int64_t n = r.tile[along] / elems, rows = r.tile[across], threads = p_.block_threads();
    const int64_t pass_rows = threads / n, stride = linear_stride(prm, across);
    const int64_t ring_step = threads % n == 0 ? ring_row_step(n, pass_rows) : -1;
    if (stride == 0 || ring_step < 0) return copy_async_by_chunk(i);
    Value* stage = as_i32(one(i.args[2]));
    Value* o = b_.CreateUDiv(tid_, i32(static_cast<int>(n)));
    Value* c = b_.CreateURem(tid_, i32(static_cast<int>(n)));
    Value* within[2];
    within[along] = b_.CreateMul(c, i32(static_cast<int>(elems)));
    within[across] = o;
    Value* at[2];
    Value* ok_along = nullptr;  // the thread's chunk within the limit along the contiguous axis
    Value* room = nullptr;      // rows from the thread's first to the limit (signed; ≤ 0: none)
    for (size_t d = 0; d < 2; ++d) {
      at[d] = b_.CreateAdd(one(i.args[d]), b_.CreateZExt(within[d], index_ty()));
      if (d >= i.masked.size() || !i.masked[d]) continue;
      const int limit = d < i.limits.size() ? i.limits[d] : -1;
      Value* end = limit >= 0 ? one(limit) : index(index_extent(prm, d));
      if (d == along)
        ok_along = b_.CreateICmpULT(at[d], end);
      else
        room = b_.CreateSub(end, at[d]);
    }
    // Not inbounds: a masked chunk's address may lie past the tensor (nothing is read there).
    llvm::Type* elem = storage_type(b_, prm.dtype);
    Value* src = b_.CreateGEP(elem, args_[static_cast<size_t>(i.param)], offset(prm, at[0], at[1]));
    Value* dst = ring_address(i.ring, stage, o, c);
    for (int64_t pass = 0; pass * pass_rows < rows; ++pass) {
      auto copy = [&] {
        Value* ok = ok_along;
        if (room) {
          Value* in = b_.CreateICmpSGT(room, index(pass * pass_rows));
          ok = ok ? b_.CreateAnd(ok, in) : in;
        }
        Value* from = b_.CreateGEP(elem, src, b_.getInt64(static_cast<uint64_t>(pass * pass_rows * stride)));
        Value* to = b_.CreateInBoundsGEP(b_.getInt8Ty(), dst, b_.getInt64(static_cast<uint64_t>(pass * ring_step)));
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_cg_shared_global_16_s, {},
                           {to, from, ok ? b_.CreateSelect(ok, i32(16), i32(0)) : i32(16)});
      };
      const int64_t left = rows - pass * pass_rows;  // the pass's rows, if fewer than it takes
      if (left >= pass_rows)
        copy();
      else
        guarded(b_.CreateICmpULT(o, i32(static_cast<int>(left))), copy);
    }
  }
  // The same, each chunk's addresses and mask worked out by itself (indices clamped into the
  // view where masked).
  void copy_async_by_chunk(const Inst& i) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const int64_t elems = 16 / static_cast<int64_t>(dtype_size(r.dtype));
    const size_t along = r.col_major ? 0 : 1;
    const int64_t n = r.tile[along] / elems, total = n * r.tile[1 - along], threads = p_.block_threads();
    Value* stage = as_i32(one(i.args[2]));
    for (int64_t first = 0; first < total; first += threads) {
      Value* q = b_.CreateAdd(tid_, i32(static_cast<int>(first)));
      auto copy = [&] {
        Value* o = b_.CreateUDiv(q, i32(static_cast<int>(n)));
        Value* c = b_.CreateURem(q, i32(static_cast<int>(n)));
        Value* within[2];
        within[along] = b_.CreateMul(c, i32(static_cast<int>(elems)));
        within[1 - along] = o;
        Value* ok = nullptr;
        Value* at[2];
        for (size_t d = 0; d < 2; ++d) {
          at[d] = b_.CreateAdd(one(i.args[d]), b_.CreateZExt(within[d], index_ty()));
          if (d < i.masked.size() && i.masked[d]) {
            const int limit = d < i.limits.size() ? i.limits[d] : -1;
            Value* in = b_.CreateICmpULT(at[d], limit >= 0 ? one(limit) : index(index_extent(prm, d)));
            at[d] = b_.CreateSelect(in, at[d], index(0));
            ok = ok ? b_.CreateAnd(ok, in) : in;
          }
        }
        Value* src = b_.CreateInBoundsGEP(storage_type(b_, prm.dtype), args_[static_cast<size_t>(i.param)],
                                          offset(prm, at[0], at[1]));
        Value* size = ok ? b_.CreateSelect(ok, i32(16), i32(0)) : i32(16);
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_cg_shared_global_16_s, {},
                           {ring_address(i.ring, stage, o, c), src, size});
      };
      if (first + threads <= total)
        copy();
      else
        guarded(b_.CreateICmpULT(q, i32(static_cast<int>(total))), copy);
    }
  }

  // Fragments by ldmatrix.x4: four 8×8 matrices, lane l giving the address of row l % 8 of
  // matrix l / 8, each lane receiving two elements of each. A's 16×16 pieces take matrices
  // (rows +0, k +0), (+8, +0), (+0, +8), (+8, +8) — its registers a0a1 … a6a7; B's pairs of 16×8
  // pieces (k +0, n +0), (+8, +0), (+0, +8), (+8, +8) — b0b1, b2b3 of each. Where the stored rows
  // run along the fragment's pairs (a column-major A, a row-major B) the load transposes. A read
  // of the stage's transpose is one of a ring stored the other way: the same stored rows.
  void load_shared(const Inst& i) {
    if (p_.shared[static_cast<size_t>(i.ring)].bulk) return load_stage_row(i);
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const Type& t = type(i.results[0]);
    const bool a = t.frag == Frag::A;
    const size_t stored_along = r.col_major != i.transposed ? 0 : 1, pairs_along = a ? 1 : 0;
    const auto id = stored_along == pairs_along ? llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16
                                                : llvm::Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16;
    Value* stage = as_i32(one(i.args[0]));
    Value* off[2] = {as_i32(one(i.args[1])), as_i32(one(i.args[2]))};
    Value* matrix = b_.CreateUDiv(lane_, i32(8));
    Value* row8 = b_.CreateURem(lane_, i32(8));
    Value* low = b_.CreateURem(matrix, i32(2));
    Value* high = b_.CreateUDiv(matrix, i32(2));
    std::vector<Value*> out(elements(t));
    const int cols = slots(t, 1);
    const int loads = a ? p_.mma->warp_m / 16 : warp_cols(t) / 16;
    for (int piece = 0; piece < loads; ++piece) {
      // The lane's row address: A piece rows + 8·(matrix % 2), k + 8·(matrix / 2); B k + 8·(matrix
      // % 2), n + 8·(matrix / 2); the lane's row of the matrix along the stored rows' axis.
      Value* at[2];
      if (a) {
        at[0] = b_.CreateAdd(b_.CreateMul(warp_[0], i32(p_.mma->warp_m)), b_.CreateAdd(i32(16 * piece), b_.CreateMul(low, i32(8))));
        at[1] = b_.CreateMul(high, i32(8));
      } else {
        at[0] = b_.CreateMul(low, i32(8));
        at[1] = b_.CreateAdd(b_.CreateMul(warp_[1], i32(warp_cols(t))), b_.CreateAdd(i32(16 * piece), b_.CreateMul(high, i32(8))));
      }
      at[1 - stored_along] = b_.CreateAdd(at[1 - stored_along], row8);
      for (size_t d = 0; d < 2; ++d) at[d] = b_.CreateAdd(at[d], off[d]);
      Value* o = at[1 - stored_along];
      Value* c = b_.CreateUDiv(at[stored_along], i32(8));
      Value* address = ring_address(i.ring, stage, o, c);
      Value* regs = b_.CreateIntrinsic(id, {address->getType()}, {address});
      for (int m = 0; m < 4; ++m) {
        llvm::Type* half = storage_type(b_, t.dtype);
        Value* two = b_.CreateBitCast(b_.CreateExtractValue(regs, {static_cast<unsigned>(m)}),
                                      llvm::FixedVectorType::get(half, 2));
        for (int e = 0; e < 2; ++e) {
          const int slot = a ? ((piece * 2 + m % 2) * cols + (m / 2) * 2 + e)
                             : (((m % 2) * 2 + e) * cols + piece * 2 + m / 2);
          out[static_cast<size_t>(slot)] = to_compute(b_, b_.CreateExtractElement(two, static_cast<uint64_t>(e)), t.dtype);
        }
      }
    }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // An accumulator rounded into a ring's whole stage (or its transpose's places, the tile's rows
  // along the stored rows either way: the verifier holds it): by stmatrix (sm_90), four 8×8
  // matrices an instruction — rows +0 and +8 of a warp's 16, at two column pieces — each lane
  // giving one stored row's 16 bytes (row lane % 8 of matrix lane / 8) and holding, as the m16n8
  // accumulator layout does, two elements of each. A thread keeps one address per instruction,
  // not one per pair (loop-invariant, those were hoisted and held: 32 registers where this holds
  // 8, and the one-kernel attention backward spilled 100 bytes).
  void store_shared(const Inst& i) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const Type& t = type(i.args[1]);
    const std::vector<Value*>& values = vals_[static_cast<size_t>(i.args[1])];
    Value* stage = as_i32(one(i.args[0]));
    const int n0 = slots(t, 0), n1 = slots(t, 1);
    Value* matrix = b_.CreateUDiv(lane_, i32(8));
    for (int e0 = 0; e0 < n0; e0 += 2)
      for (int e1 = 0; e1 < n1; e1 += 4) {
        // The lane's stored row: the warp's rows from slot e0's with group lane % 8 (+8 for the
        // odd matrices); its 16-byte piece: column slot e1's, +8 for matrices 2 and 3.
        Value* row = b_.CreateAdd(
            b_.CreateSub(position(t, 0, e0), group_),
            b_.CreateAdd(b_.CreateURem(lane_, i32(8)), b_.CreateMul(b_.CreateURem(matrix, i32(2)), i32(8))));
        Value* col = b_.CreateAdd(b_.CreateSub(position(t, 1, e1), b_.CreateMul(in_group_, i32(2))),
                                  b_.CreateMul(b_.CreateUDiv(matrix, i32(2)), i32(8)));
        Value* at = ring_address(i.ring, stage, row, b_.CreateUDiv(col, i32(8)));
        // (The shared window's address, 32 bits, as the wgmma descriptors take it.)
        std::vector<Value*> args = {b_.CreateTrunc(b_.CreatePtrToInt(at, b_.getInt64Ty()), b_.getInt32Ty())};
        for (int m = 0; m < 4; ++m) {  // matrix m: slot row e0 + m % 2, column pair e1 + 2·(m / 2)
          const size_t at_slot = static_cast<size_t>((e0 + m % 2) * n1 + e1 + 2 * (m / 2));
          args.push_back(b_.CreateBitCast(pair_to_storage(values[at_slot], values[at_slot + 1], r.dtype),
                                          b_.getInt32Ty()));
        }
        asm_call(b_.getVoidTy(), "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};",
                 "r,r,r,r,r,~{memory}", args);
      }
  }

  // ---- warpgroup MMA (wgmma) ----

  Value* asm_call(llvm::Type* result, const std::string& text, const std::string& constraints,
                  const std::vector<Value*>& args) {
    std::vector<llvm::Type*> types;
    for (Value* a : args) types.push_back(a->getType());
    auto* fn = llvm::FunctionType::get(result, types, false);
    return b_.CreateCall(llvm::InlineAsm::get(fn, text, constraints, /*hasSideEffects=*/true), args);
  }
  // `values` through an asm statement that ties each to itself ("=f" … "0" …): `text` then runs
  // where the values are (wgmma reads and writes them), and no use of the results moves above it.
  std::vector<Value*> tied(const std::string& text, const std::vector<Value*>& values,
                           const std::vector<Value*>& extra, const std::string& extra_constraints) {
    const size_t n = values.size();
    std::string constraints;
    for (size_t k = 0; k < n; ++k) constraints += "=f,";
    for (size_t k = 0; k < n; ++k) constraints += fmt::format("{},", k);
    constraints += extra_constraints;
    if (!constraints.empty() && constraints.back() == ',') constraints.pop_back();
    std::vector<Value*> args = values;
    args.insert(args.end(), extra.begin(), extra.end());
    llvm::Type* result = n == 1 ? static_cast<llvm::Type*>(b_.getFloatTy())
                                : llvm::StructType::get(ctx_, std::vector<llvm::Type*>(n, b_.getFloatTy()));
    Value* r = asm_call(n == 0 ? b_.getVoidTy() : result, text, constraints + (n ? ",~{memory}" : "~{memory}"), args);
    std::vector<Value*> out;
    for (size_t k = 0; k < n; ++k) out.push_back(n == 1 ? r : b_.CreateExtractValue(r, {static_cast<unsigned>(k)}));
    return out;
  }

  // A wgmma shared-memory descriptor for a ring's stage: 128-byte swizzle (mode 1, bits 62–63),
  // the start address >> 4 (bits 0–13), the leading and stride byte offsets >> 4 (bits 16–29,
  // 32–45). K-major operands (stored rows along M or N, k along them in 128-byte panels of 64)
  // start at their first row; 8-row groups lie 1024 bytes apart; the leading offset is unused.
  // M/N-major ones (stored rows along k) start at the panel of their first M or N index; panels
  // of 64 lie a panel apart (the leading offset), 8-k groups 1024 bytes apart.
  struct Operand {
    Value* desc;    // i64, for k 0
    bool mn_major;
    int64_t panel;  // bytes of one 128-byte-wide panel of the stage
    // The descriptor's increment (bytes >> 4) from k 0 to k k0 (a multiple of 16).
    uint64_t k_step(int64_t k0) const {
      return static_cast<uint64_t>(mn_major ? k0 * 128 : k0 / 64 * panel + k0 % 64 * 2) >> 4;
    }
  };
  Operand descriptor(int ring, Value* stage, Value* mn0, bool k_along_rows) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(ring)];
    // k_along_rows: the operand's k runs along the stored rows (A row-major, B column-major).
    const bool mn_major = !k_along_rows;
    const int64_t panel = stored_rows(r) * 128;
    Value* at = stage_at(ring, stage);
    at = b_.CreateAdd(at, mn_major ? b_.CreateMul(b_.CreateUDiv(mn0, i32(64)), i32(static_cast<int>(panel)))
                                   : b_.CreateMul(mn0, i32(128)));
    Value* base = b_.CreateTrunc(b_.CreatePtrToInt(shared_, b_.getInt64Ty()), b_.getInt32Ty());
    Value* address = b_.CreateAdd(base, at);
    const uint64_t lbo = mn_major ? static_cast<uint64_t>(panel) : 16, sbo = 1024;
    const uint64_t fields = (lbo >> 4) << 16 | (sbo >> 4) << 32 | uint64_t{1} << 62;
    Value* desc = b_.CreateOr(b_.CreateZExt(b_.CreateLShr(b_.CreateAnd(address, i32(0x3ffff)), i32(4)), b_.getInt64Ty()),
                              b_.getInt64(fields));
    return {desc, mn_major, panel};
  }

  // acc + A·B by wgmma.mma_async m64nNk16, one per 16 of the stage's k, each warpgroup its 64
  // rows of A and the accumulator; A from its ring (a descriptor) or from registers (an A
  // fragment per 16 of k: PTX's m64k16 register layout is, per warp, mma.sync's m16k16 one). The
  // accumulator's slots (h, j, c) are wgmma's registers 4j + 2h + c (both put row group + 8h,
  // column 8j + 2·tig + c of the warp's 16 rows at them).
  void dot_async(const Inst& i) {
    const tir::SharedRing& rb = p_.shared[static_cast<size_t>(i.ring_b)];
    const bool a_in_registers = i.ring < 0;
    const Type& tc = type(i.args[1]);
    const int n = static_cast<int>(tc.shape[1]), regs = n / 2;
    // (Transposed, B is the stage's transpose: k runs along the other axis of the same stored rows.)
    const int64_t depth = rb.tile[i.transposed ? 1 : 0];
    Value* stage = as_i32(one(i.args[0]));
    const Operand bo =
        descriptor(i.ring_b, stage, i32(static_cast<int>(i.b_col)), rb.col_major != i.transposed);
    std::optional<Operand> a;
    if (!a_in_registers) {
      const tir::SharedRing& ra = p_.shared[static_cast<size_t>(i.ring)];
      // (A's ring of one stage — attention's Q — is read there at every step.)
      // (Transposed, A is the stage's transpose: its k runs across the stored rows.)
      a = descriptor(i.ring, ra.stages == 1 ? i32(0) : stage,
                     b_.CreateMul(b_.CreateUDiv(tid_, i32(128)), i32(64)), ra.col_major == i.a_transposed);
    }
    // wgmma's register of each accumulator slot (h, j, c): 4j + 2h + c.
    std::vector<size_t> reg_of;
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < n / 8; ++j)
        for (int c = 0; c < 2; ++c) reg_of.push_back(static_cast<size_t>(4 * j + 2 * h + c));
    const std::vector<Value*>& in = vals_[static_cast<size_t>(i.args[1])];
    std::vector<Value*> acc(static_cast<size_t>(regs));
    for (size_t slot = 0; slot < reg_of.size(); ++slot) acc[reg_of[slot]] = in[slot];
    const char* type = rb.dtype == DType::BF16 ? "bf16" : "f16";
    std::string regs_list;
    for (int k = 0; k < regs; ++k) regs_list += fmt::format("{}${}", k ? ", " : "", k);
    // Every step in one asm after the fence, the accumulators tied through it once: as an asm a
    // step, LLVM carried the accumulators through each (an extractvalue per register and step;
    // the same SASS, attention's cold compile 126 → 77 ms, bench/NOTES.md). Operands after
    // the tied accumulators: A's descriptor or each step's four registers, B's descriptor, and
    // the first step's scale-d (0: an accumulator of zeros is not read, D = A·B).
    const int64_t steps = depth / 16;
    const int a_at = 2 * regs, b_at = a_at + (a_in_registers ? 4 * static_cast<int>(steps) : 1),
              first_at = b_at + 1;
    const std::string trans = a_in_registers ? fmt::format("{}", bo.mn_major ? 1 : 0)
                                             : fmt::format("{}, {}", a->mn_major ? 1 : 0, bo.mn_major ? 1 : 0);
    // A step's descriptors are the k-0 ones plus an immediate, added inside the asm: as operands
    // of their own they were loop-invariant values LLVM hoisted and kept, two registers a step.
    std::string text = fmt::format(
        "wgmma.fence.sync.aligned;\n{{\n.reg .pred p, on;\n.reg .b64 da, db;\nsetp.ne.b32 p, ${}, 0;\n"
        "setp.eq.b32 on, ${}, ${};\n",
        first_at, first_at, first_at);
    for (int64_t kk = 0; kk < steps; ++kk) {
      const uint64_t a_step = a_in_registers ? 0 : a->k_step(16 * kk), b_step = bo.k_step(16 * kk);
      const int r = a_at + 4 * static_cast<int>(kk);
      std::string a_operand = a_in_registers ? fmt::format("{{${}, ${}, ${}, ${}}}", r, r + 1, r + 2, r + 3)
                                             : fmt::format("${}", a_at);
      std::string b_operand = fmt::format("${}", b_at);
      if (a_step) text += fmt::format("add.s64 da, {}, {};\n", a_operand, a_step), a_operand = "da";
      if (b_step) text += fmt::format("add.s64 db, {}, {};\n", b_operand, b_step), b_operand = "db";
      text += fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}.{} {{{}}}, {}, {}, {}, 1, 1, {};\n",
                          n, type, type, regs_list, a_operand, b_operand, kk == 0 ? "p" : "on", trans);
    }
    text += "}";
    // The steps' operands (A's registers packed before the asm: registers written between
    // wgmmas make ptxas insert a warpgroup.arrive before each). The fence inside the asm: the
    // copies LLVM makes of its tied accumulators (of a constant, or of a value used again) then
    // come before it; a separate fence let them fall between it and the wgmma, and ptxas
    // serialized the kernel's wgmma (C7511).
    const bool from_zero = std::all_of(in.begin(), in.end(), [](Value* v) {
      auto* c = llvm::dyn_cast<llvm::ConstantFP>(v);
      return c && c->isZero() && !c->isNegative();
    });
    if (from_zero) std::fill(acc.begin(), acc.end(), llvm::PoisonValue::get(b_.getFloatTy()));
    std::vector<Value*> operands;
    std::string constraints;
    for (int64_t kk = 0; kk < steps && a_in_registers; ++kk) {
      const std::vector<Value*> four =
          a_registers(vals_[static_cast<size_t>(i.args[static_cast<size_t>(2 + kk)])], 0, rb.dtype);
      operands.insert(operands.end(), four.begin(), four.end());
      constraints += "r,r,r,r,";
    }
    if (!a_in_registers) operands.push_back(a->desc), constraints += "l,";
    operands.push_back(bo.desc);
    operands.push_back(i32(from_zero ? 0 : 1));
    acc = tied(text, acc, operands, constraints + "l,r");
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_wgmma_commit_group_sync_aligned, llvm::ArrayRef<llvm::Type*>{}, llvm::ArrayRef<Value*>{});
    std::vector<Value*> out(acc.size());
    for (size_t slot = 0; slot < reg_of.size(); ++slot) out[slot] = acc[reg_of[slot]];
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }

  // wgmma.wait_group with every waited accumulator tied through it.
  void dot_wait(const Inst& i) {
    std::vector<Value*> all;
    for (int a : i.args) {
      const std::vector<Value*>& v = vals_[static_cast<size_t>(a)];
      all.insert(all.end(), v.begin(), v.end());
    }
    // Pinned: a CTA fence first, which ptxas does not move the wait across (the consumers have
    // no memory access in flight there: it costs a few cycles).
    if (i.pinned) asm_call(b_.getVoidTy(), "fence.acq_rel.cta;", "~{memory}", {});
    std::vector<Value*> out = tied(fmt::format("wgmma.wait_group.sync.aligned {};", static_cast<int>(i.value)), all, {}, "");
    size_t at = 0;
    for (size_t k = 0; k < i.args.size(); ++k) {
      const size_t count = vals_[static_cast<size_t>(i.args[k])].size();
      vals_[static_cast<size_t>(i.results[k])] = std::vector<Value*>(out.begin() + static_cast<long>(at),
                                                                   out.begin() + static_cast<long>(at + count));
      at += count;
    }
  }

  void when(const Inst& i) {
    const bool between_iterations = loop_top_ && barrier_around_;
    guarded(one(i.args[0]), [&] { nested_region(i.regions.at(0), between_iterations); });
  }

  Value* leader() {
    Value* tid = b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {});
    return b_.CreateICmpEQ(tid, b_.getInt32(0));
  }
  // The block's barrier; in a Specialize's consumer region, the consumers' own (barrier 1 of
  // their threads: the producer takes no part).
  void block_barrier() {
    if (in_consumers_) {  // barrier 1 + the group's
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count, {},
                         {b_.CreateAdd(consumer_group_, i32(1)), i32(p_.block_threads())});
      return;
    }
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all, {}, {b_.getInt32(0)});
  }

  // ---- rows staged through bulk rings ----

  // The thread's elements of a row of a bulk ring's stage from column arg 2 on, a run of the
  // layout's contiguous elements at a time (the stage's row is stored as in memory).
  void load_stage_row(const Inst& i) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const Type& t = type(i.results[0]);
    llvm::Type* ty = storage_type(b_, r.dtype);
    const int size = static_cast<int>(dtype_size(r.dtype));
    Value* base = b_.CreateInBoundsGEP(b_.getInt8Ty(), shared_, stage_at(i.ring, as_i32(one(i.args[0]))));
    Value* col0 = as_i32(one(i.args[2]));
    const int n1 = slots(t, 1);
    const int width = t.shape[1] == 1 ? 1 : l_.per_thread[1];
    const bool widely_used = uses_[static_cast<size_t>(i.results[0])] > 64;
    std::vector<Value*> out(static_cast<size_t>(n1));
    for (int e1 = 0; e1 < n1; e1 += width) {
      Value* col = t.shape[1] == 1 ? col0 : b_.CreateAdd(col0, position(t, 1, e1));
      Value* at = b_.CreateInBoundsGEP(b_.getInt8Ty(), base, b_.CreateMul(col, i32(size)));
      const llvm::Align align(static_cast<uint64_t>(std::min(16, size * width)));
      if (width == 1) {
        out[static_cast<size_t>(e1)] = to_compute(b_, b_.CreateAlignedLoad(ty, at, align), r.dtype);
        continue;
      }
      Value* v = b_.CreateAlignedLoad(llvm::FixedVectorType::get(ty, static_cast<unsigned>(width)), at, align);
      for (int c = 0; c < width; ++c) {
        Value* x = to_compute(b_, b_.CreateExtractElement(v, static_cast<uint64_t>(c)), r.dtype);
        out[static_cast<size_t>(e1 + c)] = widely_used && x->getType()->isFloatTy() ? own_register(b_, x) : x;
      }
    }
    vals_[static_cast<size_t>(i.results[0])] = std::move(out);
  }
  // The i32 slot beside a bulk ring's stage that holds the stage's row.
  Value* stage_row_slot(int ring, Value* stage) {
    return b_.CreateInBoundsGEP(b_.getInt32Ty(), stage_rows_.at(static_cast<size_t>(ring)), as_i32(stage));
  }
  // The block's first thread: the row (an index or its ticket) is the stage's, or — at or past
  // the rows — the end mark (the rows); a row is copied by one bulk copy that the stage's full
  // barrier expects, the end mark arrives without bytes.
  void fill_stage(const Inst& i) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    Value* row = one(i.args[0]);
    Value* stage = as_i32(one(i.args[2]));
    Value* rows = one(i.args[3]);
    guarded(leader(), [&] {
      Value* real = b_.CreateICmpULT(row, rows);
      b_.CreateAlignedStore(as_i32(b_.CreateSelect(real, row, rows)), stage_row_slot(i.ring, stage), llvm::Align(4));
      Value* full = stage_barrier(i.ring, true, stage);
      auto* copy = llvm::BasicBlock::Create(ctx_, "fill", fn_);
      auto* mark = llvm::BasicBlock::Create(ctx_, "end.mark", fn_);
      auto* done = llvm::BasicBlock::Create(ctx_, "filled", fn_);
      b_.CreateCondBr(real, copy, mark);
      b_.SetInsertPoint(copy);
      const int bytes = static_cast<int>(r.stage_bytes());
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_arrive_expect_tx_scope_cta_space_cta, {}, {full, i32(bytes)});
      Value* src = b_.CreateInBoundsGEP(storage_type(b_, prm.dtype), args_[static_cast<size_t>(i.param)],
                                        offset(prm, row, one(i.args[1])));
      // The block's own shared memory, addressed in the cluster's window (addrspace 7).
      Value* dst = b_.CreateAddrSpaceCast(b_.CreateInBoundsGEP(b_.getInt8Ty(), shared_, stage_at(i.ring, stage)),
                                          b_.getPtrTy(7));
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_bulk_global_to_shared_cluster, {},
                         {dst, full, src, i32(bytes), b_.getInt16(0), b_.getInt64(0), b_.getFalse(), b_.getFalse()});
      b_.CreateBr(done);
      b_.SetInsertPoint(mark);
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_arrive_scope_cta_space_cta, {}, {full, i32(1)});
      b_.CreateBr(done);
      b_.SetInsertPoint(done);
    });
  }
  // The block's first thread's next row: the rows dealt plus the counter's value before its
  // increment — unless its ticket is already past the rows (kept: every later stage is an end
  // mark). Other threads hold no ticket (poison).
  Value* claim(const Inst& i) {
    llvm::SyncScope::ID device = ctx_.getOrInsertSyncScopeID("device");
    Value* dealt = one(i.args[1]);
    const bool keeps = i.args.size() > 2;
    llvm::BasicBlock* from = b_.GetInsertBlock();
    auto* lead = llvm::BasicBlock::Create(ctx_, "claim.lead", fn_);
    auto* take = llvm::BasicBlock::Create(ctx_, "claim", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "claimed", fn_);
    b_.CreateCondBr(leader(), lead, done);
    b_.SetInsertPoint(lead);
    if (keeps)
      b_.CreateCondBr(b_.CreateICmpULT(one(i.args[3]), one(i.args[2])), take, done);
    else
      b_.CreateBr(take);
    b_.SetInsertPoint(take);
    Value* before = b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, counter(i), b_.getInt32(1), llvm::Align(4),
                                       llvm::AtomicOrdering::Monotonic, device);
    Value* claimed = b_.CreateAdd(dealt, b_.CreateZExt(before, index_ty()));
    llvm::BasicBlock* took = b_.GetInsertBlock();
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    llvm::PHINode* t = b_.CreatePHI(index_ty(), 3, "ticket");
    t->addIncoming(llvm::PoisonValue::get(index_ty()), from);
    t->addIncoming(claimed, took);
    if (keeps) t->addIncoming(one(i.args[3]), lead);
    return t;
  }

  // ---- warp specialization and TMA rings ----

  // Each TMA ring's full and empty mbarriers, a stage each, and each bulk ring's full ones (and
  // the rows its stages hold): thread 0 sets them up (full: the producer's or the first thread's
  // one arrival with the stage's bytes; empty: every consumer's) before the block's first barrier.
  void init_stage_barriers() {
    stage_barriers_.assign(p_.shared.size(), nullptr);
    stage_rows_.assign(p_.shared.size(), nullptr);
    bool any = false;
    for (size_t r = 0; r < p_.shared.size(); ++r) {
      if (p_.shared[r].bulk) {  // and the row each stage holds
        auto* ty = llvm::ArrayType::get(b_.getInt32Ty(), static_cast<uint64_t>(p_.shared[r].stages));
        stage_rows_[r] = new llvm::GlobalVariable(*m_, ty, false, llvm::GlobalValue::InternalLinkage,
                                                  llvm::UndefValue::get(ty), "rows_" + p_.shared[r].name, nullptr,
                                                  llvm::GlobalValue::NotThreadLocal, 3);
        stage_rows_[r]->setAlignment(llvm::Align(4));
      }
      if (!p_.shared[r].tma && !p_.shared[r].bulk) continue;
      auto* ty = llvm::ArrayType::get(b_.getInt64Ty(), static_cast<uint64_t>(2 * p_.shared[r].stages));
      auto* g = new llvm::GlobalVariable(*m_, ty, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(ty),
                                         "stages_" + p_.shared[r].name, nullptr, llvm::GlobalValue::NotThreadLocal, 3);
      g->setAlignment(llvm::Align(8));
      stage_barriers_[r] = g;
      any = true;
    }
    if (!any) return;
    guarded(leader(), [&] {
      for (size_t r = 0; r < p_.shared.size(); ++r) {
        if (!stage_barriers_[r]) continue;
        for (int st = 0; st < p_.shared[r].stages; ++st) {
          b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_init_shared, {},
                             {stage_barrier(static_cast<int>(r), true, i32(st)), i32(1)});
          if (p_.shared[r].tma)
            b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_init_shared, {},
                               {stage_barrier(static_cast<int>(r), false, i32(st)), i32(empty_arrivals())});
        }
      }
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_fence_mbarrier_init_release_cluster, llvm::ArrayRef<llvm::Type*>{}, llvm::ArrayRef<Value*>{});
    });
    // (Bulk rings' barriers are the block's own: only its copies complete on them.)
    const bool tma = std::any_of(p_.shared.begin(), p_.shared.end(), [](const tir::SharedRing& r) { return r.tma; });
    if (p_.cluster_blocks == 1 || !tma) return block_barrier();
    // The cluster's blocks see each other's barriers set up before any copy or arrival reaches them.
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cluster_arrive_aligned, llvm::ArrayRef<llvm::Type*>{},
                       llvm::ArrayRef<Value*>{});
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cluster_wait_aligned, llvm::ArrayRef<llvm::Type*>{},
                       llvm::ArrayRef<Value*>{});
  }
  // Arrivals that empty a stage: every consumer thread of the block; in a cluster one lane of
  // each consumer warp of every block (a group's warps: one group reads a stage at a time).
  int empty_arrivals() const {
    return p_.cluster_blocks == 1 ? p_.block_threads() : p_.block_threads() / 32 * p_.cluster_blocks;
  }
  // Release (consumers): the stage's empty barrier arrived at — in a cluster, lane r of each
  // warp arrives at block r's (its copies multicast into this block's stage too).
  void release(const Inst& i) {
    Value* empty = stage_barrier(i.ring, false, one(i.args[0]));
    if (p_.cluster_blocks == 1) {
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_arrive_scope_cta_space_cta, {}, {empty, i32(1)});
      return;
    }
    // At CTA scope, as CUTLASS's cluster barriers arrive: nothing the producer does next reads
    // what this thread wrote (its wgmma's reads of the stage are complete once waited for), and a
    // release at cluster scope makes each arrival wait on a memory barrier first — 64% of the
    // consumers' stalls, the GEMM 1.5–1.8× slower than without clusters (bench/NOTES.md,
    // "Clusters measured").
    Value* lane = b_.CreateURem(tid_, i32(32));
    guarded(b_.CreateICmpULT(lane, i32(p_.cluster_blocks)), [&] {
      Value* theirs = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mapa_shared_cluster, {}, {empty, lane});
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_arrive_scope_cta_space_cluster, {}, {theirs, i32(1)});
    });
  }
  Value* stage_barrier(int ring, bool full, Value* stage) {
    Value* slot = b_.CreateAdd(as_i32(stage), i32(full ? 0 : p_.shared[static_cast<size_t>(ring)].stages));
    return b_.CreateInBoundsGEP(b_.getInt64Ty(), stage_barriers_.at(static_cast<size_t>(ring)), slot);
  }

  // The producer warpgroup (the threads after the consumers') lowers its registers, and its
  // first thread runs region 0; the consumers raise theirs and run region 1, each group with its
  // threads numbered from 0 and its index as the region's argument.
  void specialize(const Inst& i) {
    const int consumers = p_.block_threads() * p_.consumer_groups;
    Value* tid = tid_;
    Value* producer = b_.CreateICmpUGE(tid, i32(consumers));
    auto* produce = llvm::BasicBlock::Create(ctx_, "producer", fn_);
    auto* consume = llvm::BasicBlock::Create(ctx_, "consumers", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "specialized", fn_);
    b_.CreateCondBr(producer, produce, consume);
    b_.SetInsertPoint(produce);
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_setmaxnreg_dec_sync_aligned_u32, {}, {i32(p_.producer_registers)});
    guarded(b_.CreateICmpEQ(tid, i32(consumers)), [&] { region(i.regions.at(0)); });
    b_.CreateBr(done);
    b_.SetInsertPoint(consume);
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_setmaxnreg_inc_sync_aligned_u32, {}, {i32(p_.consumer_registers)});
    consumer_group_ = b_.CreateUDiv(tid, i32(p_.block_threads()), "consumer_group");
    vals_[static_cast<size_t>(i.regions.at(1).args.at(0))] = {b_.CreateZExt(consumer_group_, index_ty())};
    if (p_.consumer_groups > 1) set_thread(b_.CreateURem(tid, i32(p_.block_threads())));
    in_consumers_ = true;
    region(i.regions.at(1));
    in_consumers_ = false;
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  // Turns between the consumers' two warpgroups: named barrier 3 + w is warpgroup w's turn, which
  // it waits on (AwaitTurn) and the other arrives on (HandOff) — each side's 128 threads. At
  // steps (args: the step and, for HandOff, their count) warpgroup 0 takes the first turn without
  // waiting and warpgroup 1 hands none on after the last, so that every wait meets one arrival.
  void take_turns(const Inst& i) {
    // (With two groups tid_ counts within its group: the group is the party.)
    Value* party = p_.consumer_groups > 1 ? consumer_group_ : b_.CreateUDiv(tid_, i32(128), "warpgroup");
    const bool await = i.opcode == Opcode::AwaitTurn;
    auto turn = [&] {
      b_.CreateIntrinsic(await ? llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count
                               : llvm::Intrinsic::nvvm_barrier_cta_arrive_aligned_count,
                         {}, {await ? b_.CreateAdd(party, i32(3)) : b_.CreateSub(i32(4), party), i32(2 * 128)});
    };
    if (i.args.empty()) return turn();
    Value* step = one(i.args[0]);
    Value* skip = await ? b_.CreateAnd(b_.CreateICmpEQ(party, i32(0)), b_.CreateICmpEQ(step, index(0)))
                        : b_.CreateAnd(b_.CreateICmpEQ(party, i32(1)),
                                       b_.CreateICmpEQ(b_.CreateAdd(step, index(1)), one(i.args[1])));
    guarded(b_.CreateNot(skip), turn);
  }

  // The stage's full barrier expects its bytes; then one box per 128-byte panel of the stage's
  // stored rows (lines of 64 elements across the ring's stored rows, at the tensor map's
  // coordinates: the element along the stored rows, the line, the batch), each landing where
  // the ring keeps that panel — TMA's 128-byte swizzle is the ring's (shared_chunk).
  void tma_load(const Inst& i) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    Value* stage = as_i32(one(i.args[3]));
    Value* full = stage_barrier(i.ring, true, stage);
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_arrive_expect_tx_scope_cta_space_cta, {},
                       {full, i32(static_cast<int>(r.stage_bytes()))});
    Value* batch = as_i32(one(i.args[0]));
    Value* along = as_i32(one(i.args[r.col_major ? 1 : 2]));
    Value* line = as_i32(one(i.args[r.col_major ? 2 : 1]));
    const int64_t lines = stored_rows(r), panels = row_chunks(r) / 8;
    // Multicast: this block's share of the panels, each written into every block of the cluster
    // (at the same offset, completing on each one's full barrier).
    Value* rank = i.multicast ? b_.CreateIntrinsic(b_.getInt32Ty(), llvm::Intrinsic::nvvm_read_ptx_sreg_cluster_ctarank, {})
                              : nullptr;
    const uint16_t everyone = static_cast<uint16_t>((1u << p_.cluster_blocks) - 1);
    for (int64_t panel = 0; panel < panels; ++panel) {
      auto copy = [&] {
        Value* at = b_.CreateAdd(stage_at(i.ring, stage), i32(static_cast<int>(panel * lines * 128)));
        Value* dst = b_.CreateAddrSpaceCast(b_.CreateInBoundsGEP(b_.getInt8Ty(), shared_, at), b_.getPtrTy(7));
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_bulk_tensor_g2s_tile_3d, {},
                           {dst, full, tensor_map_.at(static_cast<size_t>(i.param)),
                            b_.CreateAdd(along, i32(static_cast<int>(panel * 64))), line, batch,
                            b_.getInt16(i.multicast ? everyone : 0), b_.getInt64(0), b_.getInt1(i.multicast),
                            b_.getFalse(), i32(0)});
      };
      if (!i.multicast) {
        copy();
        continue;
      }
      guarded(b_.CreateICmpEQ(rank, i32(static_cast<int>(panel % p_.cluster_blocks))), copy);
    }
  }

  // TmaStore: panel by panel (128 bytes of columns; with reduce_add, added into the parameter's
  // elements by the copies), the group's threads write their accumulator
  // elements in the panel into the next of the group's staging slots — row r's 16-byte chunk c
  // at chunk c ^ (r % 8), TMA's 128-byte swizzle, so a warp's 8 rows × 16 bytes fill 32 banks —
  // and fence them for the async proxy; past the group's barrier its first thread stores the
  // slot through the tensor map (a box of the panel's columns and the tile's rows) and commits
  // it as a bulk group. Before a slot is written again, that thread waits until at most the
  // other slots' stores are still reading (wait_group.read), and the barrier passes that on.
  void tma_store(const Inst& i) {
    if (i.by_warpgroup) return tma_store_by_warpgroup(i);
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const int v = i.args[3];
    const Type& t = type(v);
    const std::vector<Value*>& values = vals_.at(static_cast<size_t>(v));
    const int size = static_cast<int>(dtype_size(prm.dtype)), per_panel = 128 / size;
    const int panels = static_cast<int>(t.shape[1]) / per_panel, group_slots = r.stages / p_.consumer_groups;
    Value* batch = as_i32(one(i.args[0]));
    Value* row = as_i32(one(i.args[1]));
    Value* col = as_i32(one(i.args[2]));
    Value* first_slot = p_.consumer_groups == 1 ? i32(0) : b_.CreateMul(consumer_group_, i32(group_slots));
    // Rolled, every pair is rounded and packed before the first panel: the accumulators are then
    // dead before any epilogue loop runs (else the chunks' temporaries beside the later panels'
    // accumulators made ptxas serialize the wgmmas: warning C7514).
    std::vector<Value*> pairs(values.size());
    auto pair = [&](size_t e) {
      if (!pairs[e]) pairs[e] = pair_to_storage(values[e], values[e + 1], prm.dtype);
      return pairs[e];
    };
    if (!i.regions.empty())
      for (size_t e = 0; e < values.size(); e += 2) pair(e);
    for (int panel = 0; panel < panels; ++panel) {
      Value* slot = b_.CreateAdd(first_slot, i32(panel % group_slots));
      guarded(group_leader(), [&] {
        b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_bulk_wait_group_read, {}, {i32(group_slots - 1)});
      });
      block_barrier();
      stage_panel(i, panel, slot, pair);
      if (!i.regions.empty()) {
        block_barrier();
        staged_epilogue(i, slot, panel * per_panel);
      }
      asm_call(b_.getVoidTy(), "fence.proxy.async.shared::cta;", "~{memory}", {});
      block_barrier();
      guarded(group_leader(), [&] {
        copy_panel(i, stage_at(i.ring, slot), b_.CreateAdd(col, i32(panel * per_panel)), row, batch);
      });
    }
  }
  // The thread's accumulator pairs (args[3]'s, rounded and packed by `pair`) in panel `panel` (128
  // bytes of columns) written into `slot` of the TmaStore's staging ring at their rows: row r's
  // 16-byte chunk c at chunk c ^ (r % 8). Accumulator slots (j, c) hold columns 8j + 2·tig + c:
  // pairs in panel 8j / per_panel.
  void stage_panel(const Inst& i, int panel, Value* slot, const std::function<Value*(size_t)>& pair) {
    const Type& t = type(i.args[3]);
    const int size = static_cast<int>(dtype_size(p_.params[static_cast<size_t>(i.param)].dtype));
    const int per_panel = 128 / size, n0 = slots(t, 0), n1 = slots(t, 1);
    for (int e0 = 0; e0 < n0; ++e0)
      for (int e1 = 0; e1 < n1; e1 += 2) {
        if (8 * (e1 / 2) / per_panel != panel) continue;
        Value* byte = b_.CreateMul(b_.CreateSub(position(t, 1, e1), i32(panel * per_panel)), i32(size));
        Value* at = ring_address(i.ring, slot, position(t, 0, e0), b_.CreateUDiv(byte, i32(16)));
        at = b_.CreateInBoundsGEP(b_.getInt8Ty(), at, b_.CreateURem(byte, i32(16)));
        b_.CreateAlignedStore(pair(static_cast<size_t>(e0 * n1 + e1)), at,
                              llvm::Align(2 * static_cast<uint64_t>(size)));
      }
  }
  // One staged panel (at byte `at` of shared memory) stored — or added, `reduce_add` — through the
  // parameter's tensor map at (col, row, batch) by a bulk tensor copy, committed as its own group.
  void copy_panel(const Inst& i, Value* at, Value* col, Value* row, Value* batch) {
    Value* src = b_.CreateInBoundsGEP(b_.getInt8Ty(), shared_, at);
    b_.CreateIntrinsic(i.reduce_add ? llvm::Intrinsic::nvvm_cp_async_bulk_tensor_reduce_add_tile_3d
                                    : llvm::Intrinsic::nvvm_cp_async_bulk_tensor_s2g_tile_3d,
                       {},
                       {src, tensor_map_.at(static_cast<size_t>(i.param)), col, row, batch, b_.getInt64(0),
                        b_.getFalse()});
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_bulk_commit_group, llvm::ArrayRef<llvm::Type*>{},
                       llvm::ArrayRef<Value*>{});
  }
  // TmaStore by warpgroup: each warpgroup writes its 64 rows of as many panels as there are slots
  // into its rows of the slots (as tma_store writes them), fences them for the async proxy behind
  // a barrier of its own 128 threads (named barrier 5 + its index), and its first thread stores
  // each slot's 64 rows by one bulk tensor copy — no barrier the other warpgroup waits at. Before
  // a round of writes that thread waits until its copies have all finished reading the slots.
  void tma_store_by_warpgroup(const Inst& i) {
    const tir::SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const Type& t = type(i.args[3]);
    const std::vector<Value*>& values = vals_.at(static_cast<size_t>(i.args[3]));
    const int size = static_cast<int>(dtype_size(prm.dtype)), per_panel = 128 / size;
    const int panels = static_cast<int>(t.shape[1]) / per_panel, slot_count = r.stages;
    Value* batch = as_i32(one(i.args[0]));
    Value* col = as_i32(one(i.args[2]));
    Value* warpgroup = b_.CreateUDiv(tid_, i32(128));
    Value* row = b_.CreateAdd(as_i32(one(i.args[1])), b_.CreateMul(warpgroup, i32(64)));
    Value* rows_at = b_.CreateMul(warpgroup, i32(64 * 128));  // (its rows' bytes within a slot)
    auto barrier = [&] {
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count, {},
                         {b_.CreateAdd(warpgroup, i32(5)), i32(128)});
    };
    auto pair = [&](size_t e) { return pair_to_storage(values[e], values[e + 1], prm.dtype); };
    for (int first = 0; first < panels; first += slot_count) {
      const int n = std::min(slot_count, panels - first);
      // (Every round starts at slot 0: all of the warpgroup's copies done reading first.)
      guarded(warpgroup_leader(),
              [&] { b_.CreateIntrinsic(llvm::Intrinsic::nvvm_cp_async_bulk_wait_group_read, {}, {i32(0)}); });
      barrier();
      for (int panel = first; panel < first + n; ++panel) stage_panel(i, panel, i32(panel - first), pair);
      asm_call(b_.getVoidTy(), "fence.proxy.async.shared::cta;", "~{memory}", {});
      barrier();
      guarded(warpgroup_leader(), [&] {
        for (int panel = first; panel < first + n; ++panel)
          copy_panel(i, b_.CreateAdd(stage_at(i.ring, i32(panel - first)), rows_at),
                     b_.CreateAdd(col, i32(panel * per_panel)), row, batch);
      });
    }
  }

  // A TmaStore's epilogue region over the panel in `slot` (columns from `col` of the tile): a
  // loop, kept rolled, over its chunks of the layout's rows — each thread reading its 16-byte
  // piece of a row (row r's piece c at c ^ (r % 8), as written), the region computing on it, the
  // result written back in its place.
  void staged_epilogue(const Inst& i, Value* slot, int col) {
    const tir::Region& r = i.regions.at(0);
    const tir::Param& prm = p_.params[static_cast<size_t>(i.param)];
    const Type& ct = type(r.args[0]);
    const int chunk_rows = static_cast<int>(ct.shape[0]), per_thread = l_.per_thread[1];
    const int chunks = static_cast<int>(type(i.args[3]).shape[0]) / chunk_rows;
    llvm::Type* half = storage_type(b_, prm.dtype);
    auto* piece_ty = llvm::FixedVectorType::get(half, static_cast<unsigned>(per_thread));
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* head = llvm::BasicBlock::Create(ctx_, "chunk", fn_);
    auto* body = llvm::BasicBlock::Create(ctx_, "chunk.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "chunk.exit", fn_);
    b_.CreateBr(head);
    b_.SetInsertPoint(head);
    llvm::PHINode* k = b_.CreatePHI(b_.getInt32Ty(), 2, "chunk");
    k->addIncoming(i32(0), pre);
    b_.CreateCondBr(b_.CreateICmpULT(k, i32(chunks)), body, exit);
    b_.SetInsertPoint(body);
    Value* first_row = b_.CreateMul(k, i32(chunk_rows));
    Value* at = ring_address(i.ring, slot, b_.CreateAdd(first_row, thread_[0]), thread_[1]);  // its 16 bytes
    Value* piece = b_.CreateAlignedLoad(piece_ty, at, llvm::Align(16));
    std::vector<Value*> staged;
    for (int e = 0; e < per_thread; ++e)
      staged.push_back(to_compute(b_, b_.CreateExtractElement(piece, static_cast<uint64_t>(e)), prm.dtype));
    vals_[static_cast<size_t>(r.args[0])] = std::move(staged);
    vals_[static_cast<size_t>(r.args[1])] = {b_.CreateZExtOrTrunc(first_row, index_ty())};
    vals_[static_cast<size_t>(r.args[2])] = {index(col)};
    nested_region(r);
    const std::vector<Value*>& out = vals_.at(static_cast<size_t>(r.body.back().args.at(0)));
    Value* result = llvm::PoisonValue::get(piece_ty);
    for (int e = 0; e < per_thread; e += 2) {
      Value* pair = pair_to_storage(out[static_cast<size_t>(e)], out[static_cast<size_t>(e + 1)], prm.dtype);
      for (int h = 0; h < 2; ++h)
        result = b_.CreateInsertElement(result, b_.CreateExtractElement(pair, static_cast<uint64_t>(h)),
                                        static_cast<uint64_t>(e + h));
    }
    b_.CreateAlignedStore(result, at, llvm::Align(16));
    k->addIncoming(b_.CreateAdd(k, i32(1)), b_.GetInsertBlock());
    llvm::BranchInst* latch = b_.CreateBr(head);
    // (Unrolled, the loop would give LLVM back the straight line it exists to avoid.)
    llvm::MDNode* disable = llvm::MDNode::get(ctx_, llvm::MDString::get(ctx_, "llvm.loop.unroll.disable"));
    llvm::MDNode* loop_id = llvm::MDNode::getDistinct(ctx_, {nullptr, disable});
    loop_id->replaceOperandWith(0, loop_id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, loop_id);
    b_.SetInsertPoint(exit);
  }
  // Whether a region holds a TmaStore that `pred` holds for, at any depth.
  template <typename Pred>
  static bool has_tma_store(const tir::Region& r, Pred pred) {
    for (const Inst& i : r.body) {
      if (i.opcode == Opcode::TmaStore && pred(i)) return true;
      for (const tir::Region& inner : i.regions)
        if (has_tma_store(inner, pred)) return true;
    }
    return false;
  }
  static bool adds_by_tma(const tir::Region& r) {
    return has_tma_store(r, [](const Inst& i) { return i.reduce_add; });
  }
  static bool stores_by_warpgroup(const tir::Region& r) {
    return has_tma_store(r, [](const Inst& i) { return i.by_warpgroup; });
  }
  // The first thread of each warpgroup.
  Value* warpgroup_leader() { return b_.CreateICmpEQ(b_.CreateURem(tid_, i32(128)), i32(0)); }
  // The first thread of the consumer group (of the block, unspecialized).
  Value* group_leader() { return b_.CreateICmpEQ(tid_, i32(0)); }

  // Spins on the stage's full or empty barrier until the phase of the given parity completes.
  void wait_stage(const Inst& i) {
    Value* barrier = stage_barrier(i.ring, i.opcode == Opcode::WaitFull, one(i.args[0]));
    Value* parity = as_i32(one(i.args[1]));
    auto* wait = llvm::BasicBlock::Create(ctx_, "stage.wait", fn_);
    auto* ready = llvm::BasicBlock::Create(ctx_, "stage.ready", fn_);
    b_.CreateBr(wait);
    b_.SetInsertPoint(wait);
    // (In a cluster the other block's consumers arrive at the empty barriers too; they pass on
    // no data — their reads of the stage are complete — so the wait stays at CTA scope.)
    Value* done = b_.CreateIntrinsic(llvm::Intrinsic::nvvm_mbarrier_try_wait_parity_scope_cta_space_cta, {},
                                     {barrier, parity});
    b_.CreateCondBr(done, ready, wait);
    b_.SetInsertPoint(ready);
  }
  // The u32 counter `slot` after the workspace's f32 view.
  Value* counter(const Inst& i) {
    const tir::Param& ws = p_.params[static_cast<size_t>(i.param)];
    Value* base = b_.CreateInBoundsGEP(b_.getFloatTy(), args_[static_cast<size_t>(i.param)],
                                       b_.getInt64(static_cast<uint64_t>(num_elements(ws.view))));
    return b_.CreateInBoundsGEP(b_.getInt32Ty(), base, b_.CreateZExt(one(i.args[0]), b_.getInt64Ty()));
  }

  // ---- a row's parts meeting in the workspace (split rows) ----

  // Stamped word `w` (i64) of the workspace: an 8-byte word, a value's f32 bits then the epoch,
  // stored and loaded whole at device scope — a reader that sees the epoch sees the value, with no
  // fence or counter.
  Value* stamped_word(const Inst& i, Value* w) {
    return b_.CreateInBoundsGEP(b_.getInt64Ty(), args_[static_cast<size_t>(i.param)], w);
  }
  void publish(const Inst& i) {
    const uint64_t n = i.args.size() - 1;
    Value* stamp = b_.CreateShl(b_.CreateZExt(epoch_, b_.getInt64Ty()), b_.getInt64(32));
    Value* first = b_.CreateMul(b_.CreateZExt(one(i.args[0]), b_.getInt64Ty()), b_.getInt64(n));
    guarded(leader(), [&] {
      for (uint64_t a = 0; a < n; ++a) {
        Value* bits = b_.CreateZExt(b_.CreateBitCast(one(i.args[a + 1]), b_.getInt32Ty()), b_.getInt64Ty());
        auto* st = b_.CreateAlignedStore(b_.CreateOr(bits, stamp),
                                         stamped_word(i, b_.CreateAdd(first, b_.getInt64(a))), llvm::Align(8));
        st->setAtomic(llvm::AtomicOrdering::Monotonic, ctx_.getOrInsertSyncScopeID("device"));
      }
    });
  }
  // Row arg 0's parts' words (i64), `n` a part: thread p < parts (warp 0's lanes) loads part p's,
  // at device scope.
  std::vector<Value*> part_words(const Inst& i, int parts, int n) {
    Value* task = b_.CreateAdd(b_.CreateMul(b_.CreateZExt(one(i.args[0]), b_.getInt64Ty()), b_.getInt64(parts)),
                               b_.CreateZExt(thread_[1], b_.getInt64Ty()));
    Value* word0 = b_.CreateMul(task, b_.getInt64(static_cast<uint64_t>(n)));
    std::vector<Value*> w;
    for (int a = 0; a < n; ++a) {
      auto* ld = b_.CreateAlignedLoad(b_.getInt64Ty(), stamped_word(i, b_.CreateAdd(word0, b_.getInt64(a))),
                                      llvm::Align(8), "part_word");
      ld->setAtomic(llvm::AtomicOrdering::Monotonic, ctx_.getOrInsertSyncScopeID("device"));
      w.push_back(ld);
    }
    return w;
  }
  // The loads of the row's parts' words issued, not waited for: warp 0's lanes p < parts hold
  // them (the others 0), for the gather of the row that starts from them.
  void fetch_parts(const Inst& i) {
    const int parts = static_cast<int>(i.value);
    const int n = static_cast<int>(type(i.results[0]).shape.at(1));
    llvm::BasicBlock* from = b_.GetInsertBlock();
    auto* fetch = llvm::BasicBlock::Create(ctx_, "parts.fetch", fn_);
    auto* fetched = llvm::BasicBlock::Create(ctx_, "parts.fetched", fn_);
    b_.CreateCondBr(b_.CreateICmpULT(thread_[1], i32(parts)), fetch, fetched);
    b_.SetInsertPoint(fetch);
    const std::vector<Value*> w = part_words(i, parts, n);
    llvm::BasicBlock* loaded = b_.GetInsertBlock();
    b_.CreateBr(fetched);
    b_.SetInsertPoint(fetched);
    std::vector<Value*>& out = vals_[static_cast<size_t>(i.results[0])];
    out.clear();
    for (Value* x : w) {
      llvm::PHINode* phi = b_.CreatePHI(b_.getInt64Ty(), 2);
      phi->addIncoming(x, loaded);
      phi->addIncoming(b_.getInt64(0), from);
      out.push_back(phi);
    }
  }
  // The row's parts' values: thread p < parts (warp 0's lanes) loads part p's words (or starts
  // from a fetch_parts' words) until each carries the launch's epoch (sleeping between tries) and
  // writes them into the block's slots, a block barrier, every lane reads its column's (a
  // warp_lanes tile). With a condition, only where it holds. Warps tiles gathered with them are
  // written into their slots before the same barrier (as gather_warps'). In a loop the slots are
  // written again as written_by_warps' are.
  void gather_parts(const Inst& i) {
    const tir::PartsGather g = tir::parts_gather(p_, i);
    const int parts = static_cast<int>(i.value), n = static_cast<int>(i.results.size() - g.warps.size());
    const WarpSlots w = loop_slots("part_values", n, parts);
    std::optional<WarpSlots> ws;
    if (!g.warps.empty()) {
      std::vector<Value*> mine;
      for (int a : g.warps) mine.push_back(one(a));
      ws = warps_write("gathered_warps", mine);
    }
    const RowSlots& slots = w.slots;
    Value* first = w.first ? w.first : i32(0);
    Value* fetches = b_.CreateICmpULT(thread_[1], i32(parts));
    if (g.when >= 0) fetches = b_.CreateAnd(fetches, one(g.when));
    guarded(fetches, [&] {
      const std::vector<Value*> initial = g.from >= 0 ? vals_.at(static_cast<size_t>(g.from)) : part_words(i, parts, n);
      llvm::BasicBlock* from = b_.GetInsertBlock();
      auto* check = llvm::BasicBlock::Create(ctx_, "parts.check", fn_);
      auto* reload = llvm::BasicBlock::Create(ctx_, "parts.reload", fn_);
      auto* ready = llvm::BasicBlock::Create(ctx_, "parts.ready", fn_);
      b_.CreateBr(check);
      b_.SetInsertPoint(check);
      std::vector<llvm::PHINode*> words;
      for (int a = 0; a < n; ++a) {
        words.push_back(b_.CreatePHI(b_.getInt64Ty(), 2));
        words.back()->addIncoming(initial[static_cast<size_t>(a)], from);
      }
      Value* stamped = b_.getTrue();
      for (llvm::PHINode* x : words)
        stamped = b_.CreateAnd(
            stamped, b_.CreateICmpEQ(b_.CreateTrunc(b_.CreateLShr(x, b_.getInt64(32)), b_.getInt32Ty()), epoch_));
      b_.CreateCondBr(stamped, ready, reload);
      b_.SetInsertPoint(reload);
      b_.CreateIntrinsic(llvm::Intrinsic::nvvm_nanosleep, {}, {b_.getInt32(32)});
      const std::vector<Value*> again = part_words(i, parts, n);
      for (int a = 0; a < n; ++a) words[static_cast<size_t>(a)]->addIncoming(again[static_cast<size_t>(a)], b_.GetInsertBlock());
      b_.CreateBr(check);
      b_.SetInsertPoint(ready);
      for (int a = 0; a < n; ++a)
        b_.CreateAlignedStore(b_.CreateBitCast(b_.CreateTrunc(words[static_cast<size_t>(a)], b_.getInt32Ty()), b_.getFloatTy()),
                              slot(slots, a, b_.CreateAdd(first, thread_[1])), llvm::Align(4));
    });
    block_barrier();
    Value* column = b_.CreateAdd(first, lane_column(parts));
    for (int a = 0; a < n; ++a)
      vals_[static_cast<size_t>(i.results[static_cast<size_t>(a)])] = {
          b_.CreateAlignedLoad(b_.getFloatTy(), slot(slots, a, column), llvm::Align(4))};
    if (ws) {
      Value* wcol = warps_column(*ws);
      for (size_t a = 0; a < g.warps.size(); ++a)
        vals_[static_cast<size_t>(i.results[static_cast<size_t>(n) + a])] = {
            b_.CreateAlignedLoad(b_.getFloatTy(), slot(ws->slots, static_cast<int>(a), wcol), llvm::Align(4))};
    }
    done_with(w);  // (the warps' slots are doubled, or not, as the parts' are)
  }

  // Every thread's earlier writes reach the block barrier; thread 0 releases them at device
  // scope and counts the block in; the block that brings the count to `arrivals` acquires the
  // others' writes (thread 0's acquire, passed on by the second barrier) and learns it is last.
  // (LLVM 22 emits an acq_rel atomicrmw as a relaxed one, so the fences are explicit.)
  void last_arrival(const Inst& i) {
    llvm::SyncScope::ID device = ctx_.getOrInsertSyncScopeID("device");
    auto* flag_ty = llvm::ArrayType::get(b_.getInt32Ty(), 1);
    auto* flag = new llvm::GlobalVariable(*m_, flag_ty, false, llvm::GlobalValue::InternalLinkage,
                                          llvm::UndefValue::get(flag_ty), "last_block", nullptr,
                                          llvm::GlobalValue::NotThreadLocal, 3);
    block_barrier();
    Value* slot = counter(i);
    Value* arrivals = b_.CreateTrunc(one(i.args[1]), b_.getInt32Ty());
    guarded(leader(), [&] {
      b_.CreateFence(llvm::AtomicOrdering::Release, device);
      Value* before = b_.CreateAtomicRMW(llvm::AtomicRMWInst::Add, slot, b_.getInt32(1), llvm::Align(4),
                                         llvm::AtomicOrdering::Monotonic, device);
      Value* last = b_.CreateICmpEQ(b_.CreateAdd(before, b_.getInt32(1)), arrivals);
      guarded(last, [&] { b_.CreateFence(llvm::AtomicOrdering::Acquire, device); });
      b_.CreateAlignedStore(b_.CreateZExt(last, b_.getInt32Ty()), flag, llvm::Align(4));
    });
    block_barrier();
    Value* last = b_.CreateICmpNE(b_.CreateAlignedLoad(b_.getInt32Ty(), flag, llvm::Align(4)), b_.getInt32(0));
    vals_[static_cast<size_t>(i.results[0])] = {last};
  }

  void reset_count(const Inst& i) {
    llvm::SyncScope::ID device = ctx_.getOrInsertSyncScopeID("device");
    Value* slot = counter(i);
    guarded(leader(), [&] {
      auto* st = b_.CreateAlignedStore(b_.getInt32(0), slot, llvm::Align(4));
      st->setAtomic(llvm::AtomicOrdering::Monotonic, device);
    });
  }

  const Program& p_;
  const tir::Layout& l_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  std::unique_ptr<llvm::Module> m_;
  llvm::Function* fn_ = nullptr;
  Value* thread_[2] = {nullptr, nullptr};  // the thread's coordinate along each axis (i32)
  Value* warp_[2] = {nullptr, nullptr};    // mma: the warp's row and column in the warps' grid
  Value* group_ = nullptr;                 // mma: lane / 4
  Value* in_group_ = nullptr;              // mma: lane % 4
  Value* lane_ = nullptr;                  // mma: the thread's lane
  Value* tid_ = nullptr;                   // the thread's index in the block
  llvm::GlobalVariable* shared_ = nullptr;  // the shared rings
  Value* epoch_ = nullptr;                  // the launch's (with a workspace)
  std::vector<int64_t> ring_at_;           // each ring's first byte in it
  std::vector<std::vector<Value*>> vals_;  // value id → the thread's elements
  std::vector<llvm::Instruction*> unpacked_words_;  // carried 16-bit pairs' words at their loop's head
  std::vector<int> uses_;                  // value id → instructions using it
  std::set<int> exact_16bit_;              // blocked 16-bit tiles exact in 16 bits (blocked_16bit)
  std::set<int> carried_16bit_;            // of them, those a loop yields (carried in pairs)
  std::set<int> exact_fragments_;          // 16-bit A fragments exact in 16 bits (carried in pairs)
  std::set<int> part_made_;                // tiles made cheaply from them (find_part_made)
  std::map<int, const Inst*> bounds_of_;   // an in_bounds tile's value id → its instruction
  std::map<int, std::vector<Value*>> run_bits_of_;  // an in_window tile → its rows' bits (words)
  std::map<int, const Inst*> computed_by_;           // an elementwise value's id → its instruction
  std::vector<llvm::Argument*> args_;      // param → its kernel argument
  std::vector<llvm::Argument*> tensor_map_;  // param → its tensor map (TMA), or null
  std::vector<llvm::GlobalVariable*> stage_barriers_;  // ring → its stages' full, then empty, mbarriers
  std::vector<llvm::GlobalVariable*> stage_rows_;      // bulk ring → the row each stage holds (i32)
  bool in_consumers_ = false;              // emitting a Specialize's consumer region
  int loop_depth_ = 0;                     // For regions being emitted around the current instruction
  bool barrier_after_ = false;             // a block barrier follows it in its loop's body
  bool barrier_around_ = false;            // another instruction of its loop's body has one
  bool cluster_after_ = false;             // an exchange over the cluster follows it there
  bool loop_top_ = false;                  // it stands straight in a loop's body
  Value* loop_parity_ = nullptr;           // there: the iteration's parity (i32)
  bool cluster_joined_ = false;            // the wait for the cluster's blocks to run is behind us
  Value* consumer_group_ = nullptr;        // there: the thread's consumer group (i32)
};

}  // namespace

std::unique_ptr<llvm::Module> emit_program(const tir::Program& p, llvm::LLVMContext& ctx) {
  return Emitter(p, ctx).run();
}

}  // namespace tilefuse
