#include "compiler/tile/ir.h"

#include <algorithm>

#include <fmt/format.h>

#include "compiler/support/error.h"

namespace tilefuse::tir {

const char* frag_name(Frag f) {
  switch (f) {
    case Frag::None:
      return "blocked";
    case Frag::A:
      return "mma_a";
    case Frag::B:
      return "mma_b";
    case Frag::Acc:
      return "mma_acc";
    case Frag::Lanes:
      return "lanes";
    case Frag::Warps:
      return "warps";
    case Frag::WarpLanes:
      return "warp_lanes";
  }
  return "?";
}

double identity_of(Op reduction) {
  return reduction == Op::ReduceSum ? 0.0 : reduction == Op::ReduceMax ? -INFINITY : INFINITY;
}
Op combine_of(Op reduction) {
  return reduction == Op::ReduceSum ? Op::Add : reduction == Op::ReduceMax ? Op::Max : Op::Min;
}

int Layout::block_threads() const {
  int n = 1;
  for (int t : threads) n *= t;
  return n;
}

std::string layout_str(const Layout& l) {
  return fmt::format("blocked<per_thread [{}], threads [{}], reps [{}]>", fmt::join(l.per_thread, ", "),
                     fmt::join(l.threads, ", "), fmt::join(l.reps, ", "));
}

std::string type_str(const Type& t) {
  switch (t.kind) {
    case Type::Kind::Index:
      return "index";
    case Type::Kind::Ticket:
      return "ticket";
    case Type::Kind::Words:
      return fmt::format("words<{}x{}>", t.shape.at(0), t.shape.at(1));
    case Type::Kind::Scalar:
      return dtype_name(t.dtype);
    case Type::Kind::Tile:
      return fmt::format("tile<{}x{}{}{}>", fmt::join(t.shape, "x"), dtype_name(t.dtype),
                         t.space == Space::Shared ? ", smem" : "",
                         t.frag == Frag::None ? "" : fmt::format(", {}", frag_name(t.frag)));
  }
  return "?";
}

const char* opcode_name(Opcode o) {
  switch (o) {
    case Opcode::ProgramId:
      return "program_id";
    case Opcode::Const:
      return "const";
    case Opcode::IndexMul:
      return "muli";
    case Opcode::IndexAdd:
      return "addi";
    case Opcode::IndexDiv:
      return "divui";
    case Opcode::IndexRem:
      return "remui";
    case Opcode::IndexMin:
      return "minui";
    case Opcode::IndexSub:
      return "subi";
    case Opcode::IndexCeil:
      return "ceili";
    case Opcode::InBounds:
      return "in_bounds";
    case Opcode::InWindow:
      return "in_window";
    case Opcode::Iota:
      return "iota";
    case Opcode::If:
      return "if";
    case Opcode::LastArrival:
      return "last_arrival";
    case Opcode::ResetCount:
      return "reset_count";
    case Opcode::Dot:
      return "dot";
    case Opcode::CopyAsync:
      return "copy_async";
    case Opcode::CommitGroup:
      return "commit_group";
    case Opcode::WaitGroup:
      return "wait_group";
    case Opcode::Barrier:
      return "barrier";
    case Opcode::DotAsync:
      return "dot_async";
    case Opcode::DotWait:
      return "dot_wait";
    case Opcode::FenceAsync:
      return "fence_async";
    case Opcode::Specialize:
      return "specialize";
    case Opcode::AwaitTurn:
      return "await_turn";
    case Opcode::HandOff:
      return "hand_off";
    case Opcode::IndexLess:
      return "ltui";
    case Opcode::TmaLoad:
      return "tma_load";
    case Opcode::WaitFull:
      return "wait_full";
    case Opcode::WaitEmpty:
      return "wait_empty";
    case Opcode::Release:
      return "release";
    case Opcode::TmaStore:
      return "tma_store";
    case Opcode::WaitStores:
      return "wait_stores";
    case Opcode::LoadShared:
      return "load";
    case Opcode::StoreShared:
      return "store";
    case Opcode::Load:
      return "load";
    case Opcode::Store:
      return "store";
    case Opcode::Splat:
      return "splat";
    case Opcode::Compute:
      return "compute";
    case Opcode::Reduce:
      return "reduce";
    case Opcode::Spread:
      return "spread";
    case Opcode::GatherWarps:
      return "gather_warps";
    case Opcode::GatherBlocks:
      return "gather_blocks";
    case Opcode::ClusterValues:
      return "cluster_values";
    case Opcode::Convert:
      return "convert";
    case Opcode::For:
      return "for";
    case Opcode::Yield:
      return "yield";
    case Opcode::NumPrograms:
      return "num_programs";
    case Opcode::FillStage:
      return "fill_stage";
    case Opcode::StageRow:
      return "stage_row";
    case Opcode::Claim:
      return "claim";
    case Opcode::While:
      return "while";
    case Opcode::Publish:
      return "publish";
    case Opcode::GatherParts:
      return "gather_parts";
    case Opcode::FetchParts:
      return "fetch_parts";
  }
  return "?";
}

bool is_index_arithmetic(Opcode o) {
  return o == Opcode::IndexMul || o == Opcode::IndexAdd || o == Opcode::IndexDiv || o == Opcode::IndexRem ||
         o == Opcode::IndexMin || o == Opcode::IndexSub;
}

bool exact_in_dtype(const Inst& def) {
  return def.opcode == Opcode::Load || def.opcode == Opcode::LoadShared || def.opcode == Opcode::Const ||
         (def.opcode == Opcode::Compute && def.op == Op::Cast);
}

bool syncs_block(const Program& p, const Inst& i, bool in_consumer_group) {
  const int t = p.layout.threads.size() == 2 ? p.layout.threads[1] : 1;
  switch (i.opcode) {
    case Opcode::Reduce: {
      const Type& in = p.types.at(static_cast<size_t>(i.args[0]));
      const bool whole_warps = t % 32 == 0 && t > 32 && i.axis == 1 && in.shape[1] != 1;
      const Frag to = p.types.at(static_cast<size_t>(i.results[0])).frag;
      return whole_warps && (in.frag == Frag::Lanes || in.frag == Frag::None) && to != Frag::Lanes && to != Frag::Warps;
    }
    case Opcode::GatherWarps:
    case Opcode::GatherParts:
      return true;
    case Opcode::Barrier:
    case Opcode::LastArrival:
    case Opcode::ClusterValues:
    case Opcode::GatherBlocks:
      return !in_consumer_group;
    default:
      return false;
  }
}

int Builder::emit(Inst i, std::optional<Type> result) {
  int id = -1;
  if (result) {
    id = p_.add_value(*result);
    i.results = {id};
  }
  r_->body.push_back(std::move(i));
  return id;
}

int Builder::program_id(int axis) {
  Inst i;
  i.opcode = Opcode::ProgramId;
  i.axis = axis;
  return emit(i, Type::index());
}

int Builder::index(int64_t v) {
  Inst i;
  i.opcode = Opcode::Const;
  i.value = static_cast<double>(v);
  return emit(i, Type::index());
}

int Builder::scalar(double v, DType t) {
  Inst i;
  i.opcode = Opcode::Const;
  i.value = v;
  return emit(i, Type::scalar(t));
}

int Builder::tile_const(double v, DType t, const Shape& shape, Frag frag) {
  Inst i;
  i.opcode = Opcode::Const;
  i.value = v;
  return emit(i, Type::tile(t, shape, Space::Reg, frag));
}

int Builder::mul(int a, int b) {
  Inst i;
  i.opcode = Opcode::IndexMul;
  i.args = {a, b};
  return emit(i, Type::index());
}

int Builder::add(int a, int b) {
  Inst i;
  i.opcode = Opcode::IndexAdd;
  i.args = {a, b};
  return emit(i, Type::index());
}

int Builder::div(int a, int b) {
  Inst i;
  i.opcode = Opcode::IndexDiv;
  i.args = {a, b};
  return emit(i, Type::index());
}

int Builder::rem(int a, int b) {
  Inst i;
  i.opcode = Opcode::IndexRem;
  i.args = {a, b};
  return emit(i, Type::index());
}

int Builder::min(int a, int b) {
  Inst i;
  i.opcode = Opcode::IndexMin;
  i.args = {a, b};
  return emit(i, Type::index());
}

int Builder::ceil_index(int x) {
  Inst i;
  i.opcode = Opcode::IndexCeil;
  i.args = {x};
  return emit(i, Type::index());
}

int Builder::broadcast_index(int flat, const Shape& dims, const Shape& own) {
  Shape padded(dims.size() - std::min(dims.size(), own.size()), 1);
  padded.insert(padded.end(), own.begin(), own.end());
  if (padded == dims) return flat;
  int rest = flat, at = index(0);
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (padded[d] != 1) at = add(at, mul(rem(rest, index(dims[d])), index(stride)));
    if (d > 0) rest = div(rest, index(dims[d]));
    stride *= padded[d];
  }
  return at;
}

int Builder::sub(int a, int b) {
  Inst i;
  i.opcode = Opcode::IndexSub;
  i.args = {a, b};
  return emit(i, Type::index());
}

int Builder::in_bounds(int offset, int limit, int axis, const Shape& shape, Frag frag) {
  Inst i;
  i.opcode = Opcode::InBounds;
  i.args = {offset, limit};
  i.axis = axis;
  return emit(i, Type::tile(DType::Bool, shape, Space::Reg, frag));
}

int Builder::in_window(int row, int col, int width, int vec, const Shape& shape) {
  Inst i;
  i.opcode = Opcode::InWindow;
  i.args = {row, col, width};
  i.window = vec;
  return emit(i, Type::tile(DType::Bool, shape));
}

int Builder::iota(int offset, int axis, const Shape& shape, Frag frag) {
  Inst i;
  i.opcode = Opcode::Iota;
  i.args = {offset};
  i.axis = axis;
  return emit(i, Type::tile(DType::F32, shape, Space::Reg, frag));
}

int Builder::linear_iota(int row0, int col0, int64_t stride, int64_t div, int64_t mod, const Shape& shape, int window) {
  Inst i;
  i.opcode = Opcode::Iota;
  i.args = {row0, col0};
  i.window = window;
  i.iota_stride = stride;
  i.iota_div = div;
  i.iota_mod = mod;
  return emit(i, Type::tile(DType::F32, shape, Space::Reg, Frag::None));
}

int Builder::last_arrival(int workspace_param, int slot, int arrivals) {
  Inst i;
  i.opcode = Opcode::LastArrival;
  i.param = workspace_param;
  i.args = {slot, arrivals};
  return emit(i, Type::scalar(DType::Bool));
}

void Builder::reset_count(int workspace_param, int slot) {
  Inst i;
  i.opcode = Opcode::ResetCount;
  i.param = workspace_param;
  i.args = {slot};
  emit(i, std::nullopt);
}

void Builder::when(int cond, const std::function<void(Builder&)>& body) {
  Inst i;
  i.opcode = Opcode::If;
  i.args = {cond};
  Region r;
  Builder inner(p_, r);
  body(inner);
  i.regions.push_back(std::move(r));
  r_->body.push_back(std::move(i));
}

// A load's or store's masks, padded to its rank, and their limits (-1: the view's extent).
static void set_masks(Inst& i, size_t rank, const std::vector<bool>& masked, const std::vector<int>& limits) {
  if (masked.empty()) return;
  i.masked = masked;
  i.limits = limits;
  i.limits.resize(rank, -1);
}

int Builder::load(int param, const std::vector<int>& offsets, const Shape& shape, const std::vector<bool>& masked,
                  const std::vector<int>& limits, Frag frag) {
  Inst i;
  i.opcode = Opcode::Load;
  i.param = param;
  i.args = offsets;
  set_masks(i, offsets.size(), masked, limits);
  return emit(i, Type::tile(p_.params.at(static_cast<size_t>(param)).dtype, shape, Space::Reg, frag));
}

int Builder::load_window(int param, int row, int col, const Shape& shape, int vec, bool rows_masked) {
  const int v = load(param, {row, col}, shape, {rows_masked, true});
  r_->body.back().window = vec;
  return v;
}

int Builder::dot(int a, int b, int acc) {
  Inst i;
  i.opcode = Opcode::Dot;
  i.args = {a, b, acc};
  return emit(i, p_.types.at(static_cast<size_t>(acc)));
}

void Builder::copy_async(int param, const std::vector<int>& offsets, int ring, int stage,
                         const std::vector<bool>& masked, const std::vector<int>& limits) {
  Inst i;
  i.opcode = Opcode::CopyAsync;
  i.param = param;
  i.ring = ring;
  i.args = offsets;
  i.args.push_back(stage);
  set_masks(i, offsets.size(), masked, limits);
  emit(i, std::nullopt);
}

void Builder::commit_group() {
  Inst i;
  i.opcode = Opcode::CommitGroup;
  emit(i, std::nullopt);
}

void Builder::wait_group(int pending) {
  Inst i;
  i.opcode = Opcode::WaitGroup;
  i.value = pending;
  emit(i, std::nullopt);
}

void Builder::barrier() {
  Inst i;
  i.opcode = Opcode::Barrier;
  emit(i, std::nullopt);
}

int Builder::load_shared(int ring, int stage, const std::vector<int>& offsets, const Shape& shape, Frag frag,
                         bool transposed) {
  Inst i;
  i.opcode = Opcode::LoadShared;
  i.ring = ring;
  i.transposed = transposed;
  i.args = {stage};
  i.args.insert(i.args.end(), offsets.begin(), offsets.end());
  return emit(i, Type::tile(p_.shared.at(static_cast<size_t>(ring)).dtype, shape, Space::Reg, frag));
}

int Builder::dot_async(int ring_a, int ring_b, int stage, int acc, bool b_transposed, int64_t b_col,
                       bool a_transposed) {
  Inst i;
  i.opcode = Opcode::DotAsync;
  i.ring = ring_a;
  i.ring_b = ring_b;
  i.transposed = b_transposed;
  i.a_transposed = a_transposed;
  i.b_col = b_col;
  i.args = {stage, acc};
  return emit(i, p_.types.at(static_cast<size_t>(acc)));
}

int Builder::dot_async(const std::vector<int>& a, int ring_b, int stage, int acc, bool b_transposed) {
  Inst i;
  i.opcode = Opcode::DotAsync;
  i.ring_b = ring_b;
  i.transposed = b_transposed;
  i.args = {stage, acc};
  i.args.insert(i.args.end(), a.begin(), a.end());
  return emit(i, p_.types.at(static_cast<size_t>(acc)));
}

std::vector<int> Builder::dot_wait(const std::vector<int>& accs, int pending, bool pinned) {
  Inst i;
  i.opcode = Opcode::DotWait;
  i.args = accs;
  i.value = pending;
  i.pinned = pinned;
  for (int a : accs) i.results.push_back(p_.add_value(p_.types.at(static_cast<size_t>(a))));
  std::vector<int> out = i.results;
  r_->body.push_back(std::move(i));
  return out;
}

void Builder::fence_async() {
  Inst i;
  i.opcode = Opcode::FenceAsync;
  emit(i, std::nullopt);
}

void Builder::specialize(const std::function<void(Builder&)>& producer,
                         const std::function<void(Builder&, int group)>& consumers) {
  Inst i;
  i.opcode = Opcode::Specialize;
  Region produce, consume;
  Builder in_producer(p_, produce);
  producer(in_producer);
  consume.args = {p_.add_value(Type::index())};
  Builder in_consumers(p_, consume);
  consumers(in_consumers, consume.args[0]);
  i.regions.push_back(std::move(produce));
  i.regions.push_back(std::move(consume));
  r_->body.push_back(std::move(i));
}

void Builder::await_turn(int step) {
  Inst i;
  i.opcode = Opcode::AwaitTurn;
  if (step >= 0) i.args = {step};
  emit(i, std::nullopt);
}
void Builder::hand_off(int step, int steps) {
  Inst i;
  i.opcode = Opcode::HandOff;
  if (step >= 0) i.args = {step, steps};
  emit(i, std::nullopt);
}
int Builder::less(int a, int b) {
  Inst i;
  i.opcode = Opcode::IndexLess;
  i.args = {a, b};
  return emit(i, Type::scalar(DType::Bool));
}

int Builder::num_programs(int axis) {
  Inst i;
  i.opcode = Opcode::NumPrograms;
  i.axis = axis;
  return emit(i, Type::index());
}

void Builder::fill_stage(int param, int row, int col, int ring, int stage, int rows) {
  Inst i;
  i.opcode = Opcode::FillStage;
  i.param = param;
  i.ring = ring;
  i.args = {row, col, stage, rows};
  emit(i, std::nullopt);
}

int Builder::stage_row(int ring, int stage) {
  Inst i;
  i.opcode = Opcode::StageRow;
  i.ring = ring;
  i.args = {stage};
  return emit(i, Type::index());
}

int Builder::claim(int workspace_param, int slot, int dealt, int rows, int ticket) {
  Inst i;
  i.opcode = Opcode::Claim;
  i.param = workspace_param;
  i.args = {slot, dealt};
  if (ticket >= 0) i.args.insert(i.args.end(), {rows, ticket});
  return emit(i, Type::ticket());
}

int Builder::load_stage(int ring, int stage, int col, const Shape& shape) {
  Inst i;
  i.opcode = Opcode::LoadShared;
  i.ring = ring;
  i.args = {stage, index(0), col};
  return emit(i, Type::tile(p_.shared.at(static_cast<size_t>(ring)).dtype, shape));
}

void Builder::tma_load(int param, int batch, int row, int col, int ring, int stage, bool multicast) {
  Inst i;
  i.opcode = Opcode::TmaLoad;
  i.multicast = multicast;
  i.param = param;
  i.ring = ring;
  i.args = {batch, row, col, stage};
  emit(i, std::nullopt);
}

static Inst stage_sync(Opcode o, int ring, std::vector<int> args) {
  Inst i;
  i.opcode = o;
  i.ring = ring;
  i.args = std::move(args);
  return i;
}
void Builder::wait_full(int ring, int stage, int parity) {
  emit(stage_sync(Opcode::WaitFull, ring, {stage, parity}), std::nullopt);
}
void Builder::wait_empty(int ring, int stage, int parity) {
  emit(stage_sync(Opcode::WaitEmpty, ring, {stage, parity}), std::nullopt);
}
void Builder::release(int ring, int stage) { emit(stage_sync(Opcode::Release, ring, {stage}), std::nullopt); }
std::pair<int, int> Builder::ring_stage(int step, int64_t stages, bool emptied) {
  const int n = index(stages);
  int use = div(step, n);
  if (emptied) use = add(use, index(1));
  return {rem(step, n), rem(use, index(2))};
}
void Builder::tma_store(int param, int batch, int row, int col, int tile, int ring, const Shape& chunk,
                        const ChunkBody& body) {
  tma_store(param, batch, row, col, tile, ring);
  Region r;
  const DType dt = p_.params.at(static_cast<size_t>(param)).dtype;
  r.args = {p_.add_value(Type::tile(dt, chunk)), p_.add_value(Type::index()), p_.add_value(Type::index())};
  Builder inner(p_, r);
  Inst yield;
  yield.opcode = Opcode::Yield;
  yield.args = {body(inner, r.args[0], r.args[1], r.args[2])};
  r.body.push_back(yield);
  r_->body.back().regions.push_back(std::move(r));
}
void Builder::tma_store(int param, int batch, int row, int col, int tile, int ring, bool reduce_add,
                        bool by_warpgroup) {
  Inst i;
  i.opcode = Opcode::TmaStore;
  i.param = param;
  i.ring = ring;
  i.reduce_add = reduce_add;
  i.by_warpgroup = by_warpgroup;
  i.args = {batch, row, col, tile};
  emit(i, std::nullopt);
}
void Builder::wait_stores() {
  Inst i;
  i.opcode = Opcode::WaitStores;
  emit(i, std::nullopt);
}

void Builder::store(int param, const std::vector<int>& offsets, int tile, const std::vector<bool>& masked,
                    const std::vector<int>& limits) {
  Inst i;
  i.opcode = Opcode::Store;
  i.param = param;
  i.args = offsets;
  i.args.push_back(tile);
  set_masks(i, offsets.size(), masked, limits);
  emit(i, std::nullopt);
}

void Builder::store_add(int param, const std::vector<int>& offsets, int tile, const std::vector<bool>& masked,
                        const std::vector<int>& limits) {
  store(param, offsets, tile, masked, limits);
  r_->body.back().reduce_add = true;
}

void Builder::store_shared(int ring, int stage, int tile, bool transposed) {
  Inst i;
  i.opcode = Opcode::StoreShared;
  i.ring = ring;
  i.transposed = transposed;
  i.args = {stage, tile};
  emit(i, std::nullopt);
}

void Builder::store_window(int param, int row, int col, int tile, int vec, bool rows_masked) {
  store(param, {row, col}, tile, {rows_masked, true});
  r_->body.back().window = vec;
}

// The numpy broadcast of the tile arguments' shapes (scalars broadcast to anything).
static Shape broadcast_of(const Program& p, const std::vector<int>& args) {
  Shape out;
  for (int a : args) {
    const Type& t = p.types.at(static_cast<size_t>(a));
    if (!t.is_tile()) continue;
    out = out.empty() ? t.shape : broadcast_shapes(out, t.shape, "tile op");
  }
  return out;
}

int Builder::splat(int scalar, const Shape& shape, Frag frag) {
  Inst i;
  i.opcode = Opcode::Splat;
  i.args = {scalar};
  return emit(i, Type::tile(p_.types.at(static_cast<size_t>(scalar)).dtype, shape, Space::Reg, frag));
}

int Builder::softmax_exp2(int x) {
  const int e = compute(Op::Exp2, {x}, DType::F32);
  r_->body.back().flush_subnormal = true;
  return e;
}

int Builder::lazy_rescale(int x, int factor) {
  const int y = compute(Op::Mul, {x, factor}, DType::F32);
  r_->body.back().skip_ones = true;
  return y;
}

int Builder::score_tanh(int x) {
  const int t = compute(Op::Tanh, {x}, DType::F32);
  r_->body.back().absolute_error = true;
  return t;
}

int Builder::compute(Op op, const std::vector<int>& args, DType dtype, bool nonpositive_arg) {
  Inst i;
  i.opcode = Opcode::Compute;
  i.op = op;
  i.args = args;
  i.nonpositive_arg = nonpositive_arg;
  Shape shape = broadcast_of(p_, args);
  Frag frag = Frag::None;  // the operands' layout (the verifier checks they agree)
  for (int a : args)
    if (p_.types.at(static_cast<size_t>(a)).is_tile() && p_.types.at(static_cast<size_t>(a)).frag != Frag::None)
      frag = p_.types.at(static_cast<size_t>(a)).frag;
  return emit(i, shape.empty() ? Type::scalar(dtype) : Type::tile(dtype, shape, Space::Reg, frag));
}

int Builder::reduce(Op op, int tile, int axis, int mask) {
  Inst i;
  i.opcode = Opcode::Reduce;
  i.op = op;
  i.axis = axis;
  i.args = {tile};
  if (mask >= 0) i.args.push_back(mask);
  Type t = p_.types.at(static_cast<size_t>(tile));
  t.shape.at(static_cast<size_t>(axis)) = 1;
  if (per_thread_columns(t.frag)) t.frag = Frag::None;  // (one column: blocked and lanes alike)
  return emit(i, t);
}

int Builder::reduce_warps(Op op, int tile, int mask) {
  return reduce_along_row(op, tile, mask, Frag::Warps, p_.layout.threads.at(1) / 32);
}

std::vector<int> Builder::exchange(Opcode opcode, const std::vector<int>& args, int per_arg,
                                   const std::function<Type(Type)>& result) {
  Inst i;
  i.opcode = opcode;
  i.args = args;
  for (int v : args)
    for (int r = 0; r < per_arg; ++r) i.results.push_back(p_.add_value(result(p_.types.at(static_cast<size_t>(v)))));
  r_->body.push_back(i);
  return i.results;
}

std::vector<int> Builder::gather_warps(const std::vector<int>& warps) {
  return exchange(Opcode::GatherWarps, warps, 1, [](Type t) {
    t.frag = Frag::WarpLanes;
    return t;
  });
}

std::vector<int> Builder::gather_blocks(const std::vector<int>& per_row) {
  return exchange(Opcode::GatherBlocks, per_row, 1, [&](Type t) {
    t.shape.at(1) = p_.cluster_blocks;
    t.frag = Frag::WarpLanes;
    return t;
  });
}

std::vector<int> Builder::cluster_values(const std::vector<int>& per_row) {
  return exchange(Opcode::ClusterValues, per_row, p_.cluster_blocks, [](Type t) { return t; });
}

void Builder::publish(int workspace_param, int task, const std::vector<int>& values) {
  Inst i;
  i.opcode = Opcode::Publish;
  i.param = workspace_param;
  i.args = {task};
  i.args.insert(i.args.end(), values.begin(), values.end());
  emit(i, std::nullopt);
}

static Inst parts_of_row(Opcode op, int workspace_param, int row, int parts) {
  Inst i;
  i.opcode = op;
  i.param = workspace_param;
  i.value = parts;
  i.args = {row};
  return i;
}

std::vector<int> Builder::gather_parts(int workspace_param, int row, int parts, int values) {
  Inst i = parts_of_row(Opcode::GatherParts, workspace_param, row, parts);
  for (int a = 0; a < values; ++a)
    i.results.push_back(p_.add_value(Type::tile(DType::F32, {1, parts}, Space::Reg, Frag::WarpLanes)));
  r_->body.push_back(i);
  return i.results;
}

int Builder::fetch_parts(int workspace_param, int row, int parts, int values) {
  return emit(parts_of_row(Opcode::FetchParts, workspace_param, row, parts), Type::words(parts, values));
}

PartsGather parts_gather(const Program& p, const Inst& i) {
  PartsGather g;
  g.row = i.args.at(0);
  for (size_t a = 1; a < i.args.size(); ++a) {
    const Type& t = p.types.at(static_cast<size_t>(i.args[a]));
    if (t.kind == Type::Kind::Words)
      g.from = i.args[a];
    else if (t.kind == Type::Kind::Scalar && t.dtype == DType::Bool)
      g.when = i.args[a];
    else
      g.warps.push_back(i.args[a]);
  }
  return g;
}

int Builder::reduce_lanes(Op op, int tile, int mask) {
  return reduce_along_row(op, tile, mask, Frag::Lanes, p_.layout.threads.at(1));
}

int Builder::reduce_along_row(Op op, int tile, int mask, Frag into, int columns) {
  Inst i;
  i.opcode = Opcode::Reduce;
  i.op = op;
  i.axis = 1;
  i.args = {tile};
  if (mask >= 0) i.args.push_back(mask);
  Type t = p_.types.at(static_cast<size_t>(tile));
  t.shape.at(1) = columns;
  t.frag = into;
  return emit(i, t);
}

int Builder::spread(int lanes, const Shape& shape) {
  Inst i;
  i.opcode = Opcode::Spread;
  i.args = {lanes};
  return emit(i, Type::tile(p_.types.at(static_cast<size_t>(lanes)).dtype, shape));
}

int Builder::convert(int acc, int chunk, DType dtype) {
  Inst i;
  i.opcode = Opcode::Convert;
  i.value = chunk;
  i.args = {acc};
  const Type& t = p_.types.at(static_cast<size_t>(acc));
  return emit(i, Type::tile(dtype, {t.shape.at(0), 16}, Space::Reg, Frag::A));
}

std::vector<int> Builder::for_loop(int lo, int hi, int step, const std::vector<int>& inits, const LoopBody& body) {
  Inst loop;
  loop.opcode = Opcode::For;
  loop.args = {lo, hi, step};
  loop.args.insert(loop.args.end(), inits.begin(), inits.end());
  Region r;
  const int iv = p_.add_value(Type::index());
  r.args.push_back(iv);
  std::vector<int> carried;
  for (int v : inits) {
    carried.push_back(p_.add_value(p_.types.at(static_cast<size_t>(v))));
    r.args.push_back(carried.back());
  }
  Builder inner(p_, r);
  std::vector<int> next = body(inner, iv, carried);
  Inst yield;
  yield.opcode = Opcode::Yield;
  yield.args = next;
  r.body.push_back(yield);
  for (int v : inits) loop.results.push_back(p_.add_value(p_.types.at(static_cast<size_t>(v))));
  loop.regions.push_back(std::move(r));
  r_->body.push_back(std::move(loop));
  return r_->body.back().results;
}

std::vector<int> Builder::while_loop(const std::vector<int>& inits, const LoopCondition& cond, const WhileBody& body) {
  Inst loop;
  loop.opcode = Opcode::While;
  loop.args = inits;
  Region before, after;
  std::vector<int> carried;
  for (int v : inits) {
    carried.push_back(p_.add_value(p_.types.at(static_cast<size_t>(v))));
    before.args.push_back(carried.back());
  }
  Builder head(p_, before);
  Inst test;
  test.opcode = Opcode::Yield;
  test.args = {cond(head, carried)};
  before.body.push_back(test);
  Builder inner(p_, after);
  Inst yield;
  yield.opcode = Opcode::Yield;
  yield.args = body(inner, carried);
  after.body.push_back(yield);
  for (int v : inits) loop.results.push_back(p_.add_value(p_.types.at(static_cast<size_t>(v))));
  loop.regions.push_back(std::move(before));
  loop.regions.push_back(std::move(after));
  r_->body.push_back(std::move(loop));
  return r_->body.back().results;
}

}  // namespace tilefuse::tir
