#include "compiler/tile/interpret.h"

#include <fmt/format.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "compiler/graph/reference.h"
#include "compiler/support/error.h"

namespace tilefuse::tir {
namespace {

// A value: an index (or ticket) in `i`; a scalar's one element or a tile's elements (row-major
// over its shape) in `t`, each an f32 value held exactly (a bool as 0 or 1).
struct Val {
  int64_t i = 0;
  std::vector<double> t;
};

double to_f32(double x) { return static_cast<double>(static_cast<float>(x)); }

double read_element(const uint8_t* at, DType dt) {
  switch (dt) {
    case DType::F32: {
      float f;
      std::memcpy(&f, at, 4);
      return f;
    }
    case DType::BF16: {
      uint16_t b;
      std::memcpy(&b, at, 2);
      return bf16_bits_to_float(b);
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      return f16_bits_to_float(h);
    }
    case DType::Bool:
      return *at != 0;
  }
  return 0;
}

void write_element(uint8_t* at, DType dt, double x) {
  const float f = static_cast<float>(x);
  switch (dt) {
    case DType::F32:
      std::memcpy(at, &f, 4);
      return;
    case DType::BF16: {
      const uint16_t b = float_to_bf16_bits(f);
      std::memcpy(at, &b, 2);
      return;
    }
    case DType::F16: {
      const uint16_t h = float_to_f16_bits(f);
      std::memcpy(at, &h, 2);
      return;
    }
    case DType::Bool:
      *at = x != 0.0;
      return;
  }
}

// acc + a·b (a [m, k], b [k, n], row-major): the operands rounded to their dtypes as the tensor
// cores read them, the products exact, their sum added in f32.
std::vector<double> product(std::vector<double> acc, const std::vector<double>& a, DType a_dtype,
                            const std::vector<double>& b, DType b_dtype, int64_t m, int64_t k, int64_t n) {
  std::vector<double> x(a.size()), y(b.size());
  for (size_t j = 0; j < a.size(); ++j) x[j] = rounded(a_dtype, a[j]);
  for (size_t j = 0; j < b.size(); ++j) y[j] = rounded(b_dtype, b[j]);
  std::vector<double> sums(static_cast<size_t>(n));
  for (int64_t r = 0; r < m; ++r) {  // (each row's sums along k in order, a row of B at a time)
    std::fill(sums.begin(), sums.end(), 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const double a_rj = x[static_cast<size_t>(r * k + j)];
      const double* b_j = &y[static_cast<size_t>(j * n)];
      for (int64_t c = 0; c < n; ++c) sums[static_cast<size_t>(c)] += a_rj * b_j[c];
    }
    for (int64_t c = 0; c < n; ++c)
      acc[static_cast<size_t>(r * n + c)] = to_f32(acc[static_cast<size_t>(r * n + c)] + sums[static_cast<size_t>(c)]);
  }
  return acc;
}

// A stage's mbarrier: the phases it has completed; for a full barrier the current phase's own
// arrival (its producer's, expecting the stage's bytes) and the 128-byte panels landed in it; for
// an empty one its arrivals (a consumer group's, of every block of a cluster).
struct StageBarrier {
  int64_t completed = 0;
  bool expected = false;
  int64_t landed = 0;
  int arrivals = 0;
};

// A block's shared memory: per ring, each stage's tile (row-major over the ring's tile, whatever
// its storage order), the row a bulk ring's stage holds, and the stages' barriers; the turns
// handed to each of two consumer groups.
struct BlockMemory {
  explicit BlockMemory(const Program& p) {
    for (const SharedRing& r : p.shared) {
      const size_t stages = static_cast<size_t>(r.stages);
      rings.emplace_back(stages, std::vector<double>(static_cast<size_t>(num_elements(r.tile)), NAN));
      stage_rows.emplace_back(stages, -1);  // (-1: never filled)
      full.emplace_back(stages);
      empty.emplace_back(stages);
    }
  }
  std::vector<std::vector<std::vector<double>>> rings;
  std::vector<std::vector<int64_t>> stage_rows;
  std::vector<std::vector<StageBarrier>> full, empty;
  int turns[2] = {0, 0};
};

// A cluster's blocks (one where there are no clusters): their memories — a multicast copy lands
// in each, a release arrives at each — and their exchanges (every block's values written, all
// blocks wait, all read, all wait).
struct Cluster {
  Cluster(const Program& p, int n)
      : blocks(static_cast<size_t>(n), BlockMemory(p)), slots(static_cast<size_t>(n)), slot_inst(static_cast<size_t>(n)) {}
  std::vector<BlockMemory> blocks;
  std::vector<std::vector<double>> slots;
  std::vector<const Inst*> slot_inst;  // the exchange each block's slot is for
  int waiting = 0, left = 0;
  uint64_t generation = 0;
};

// What a launch's blocks and threads share: the parameters' memory, and one lock under which
// counters, barriers, turns and exchanges change (a cluster's blocks, and a specialized block's
// producer and consumers, run on threads of their own). The first failure is kept; a thread
// waiting on others gives up when one has failed, or when every thread waits (a deadlock: what
// each waits for is said).
struct Launch {
  Launch(const Program& p, const std::vector<HostArg>& args, int64_t blocks, uint32_t epoch)
      : p(p), args(args), blocks(blocks), epoch(epoch) {}
  const Program& p;
  const std::vector<HostArg>& args;
  const int64_t blocks;
  const uint32_t epoch;  // stamped into the workspace's words (Publish)
  std::mutex m;
  std::condition_variable cv;
  std::exception_ptr first;
  int running = 1;  // threads not waiting (the caller's first)
  // Each waiting thread's wait: what for, and whether it has come (a thread woken but not yet
  // running again is not stuck).
  struct Waiter {
    std::string what;
    std::function<bool()> ready;
  };
  std::list<Waiter> waits;

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> l(m);
    fail_locked(e);
  }
  void fail_locked(std::exception_ptr e) {
    if (!first) first = e;
    cv.notify_all();
  }
  void rethrow() {
    std::lock_guard<std::mutex> l(m);
    if (first) std::rethrow_exception(first);
  }
  // Waits (holding `l`) until `ready`; `what` says what for.
  template <typename Ready>
  void wait(std::unique_lock<std::mutex>& l, Ready ready, const std::string& what) {
    if (ready()) return;
    const auto mine = waits.insert(waits.end(), Waiter{what, ready});
    if (--running == 0) deadlock();
    cv.wait(l, [&] { return ready() || first; });
    waits.erase(mine);
    ++running;
    if (!ready()) std::rethrow_exception(first);  // (the failure that woke it)
  }
  // A thread of the launch has ended (its other threads may now all wait).
  void ended() {
    std::lock_guard<std::mutex> l(m);
    if (--running == 0) deadlock();
    cv.notify_all();
  }
  // No thread runs: unless one's wait has come, none ever will again.
  void deadlock() {
    std::vector<std::string> stuck;
    for (const Waiter& w : waits) {
      if (w.ready()) return;
      stuck.push_back(w.what);
    }
    if (stuck.empty()) return;
    fail_locked(std::make_exception_ptr(
        Error(fmt::format("kernel {}: a deadlock (a hang on the GPU): {}", p.name, fmt::join(stuck, "; ")))));
  }
};

// Runs `f(k)` for k < parts each on a thread of its own (the caller waits for them), then
// rethrows the launch's first failure.
template <typename F>
void side_by_side(Launch& l, int parts, F f) {
  {
    std::lock_guard<std::mutex> lock(l.m);
    l.running += parts - 1;
  }
  std::vector<std::thread> threads;
  for (int k = 0; k < parts; ++k)
    threads.emplace_back([&, k] {
      try {
        f(k);
      } catch (...) {
        l.fail(std::current_exception());
      }
      l.ended();
    });
  for (std::thread& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(l.m);
    l.running++;
  }
  l.rethrow();
}

// One thread of a block: the block's own, or — past Specialize — its producer's or a consumer
// group's, each with its own values (the body's so far, copied).
class Exec {
 public:
  Exec(Launch& l, Cluster& c, int rank, int64_t id)
      : p_(l.p), l_(l), c_(c), rank_(rank), id_(id), mem_(c.blocks.at(static_cast<size_t>(rank))), v_(p_.types.size()) {}
  void run() { region(p_.body); }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("kernel {}, block {}: {}", p_.name, id_, what));
  }
  const Type& type(int v) const { return p_.types.at(static_cast<size_t>(v)); }
  int64_t idx(int v) const { return v_.at(static_cast<size_t>(v)).i; }
  const std::vector<double>& elems(int v) const { return v_.at(static_cast<size_t>(v)).t; }
  double one(int v) const { return elems(v).at(0); }
  Val& out(const Inst& i, size_t k = 0) { return v_.at(static_cast<size_t>(i.results.at(k))); }
  static int64_t rows_of(const Type& t) { return t.shape.empty() ? 1 : t.shape[0]; }
  static int64_t cols_of(const Type& t) { return t.shape.size() < 2 ? 1 : t.shape[1]; }
  static int64_t count(const Type& t) { return t.is_tile() ? num_elements(t.shape) : 1; }
  // Element (r, c) of value v, broadcast along its axes of extent 1 (a scalar everywhere).
  double at(int v, int64_t r, int64_t c) const { return view(v)(r, c); }
  // Value v's elements by (row, column), broadcast along its axes of extent 1.
  struct View {
    const double* data;
    int64_t row_step, col_step;
    double operator()(int64_t r, int64_t c) const { return data[r * row_step + c * col_step]; }
  };
  View view(int v) const {
    const Type& t = type(v);
    if (!t.is_tile()) return {elems(v).data(), 0, 0};
    return {elems(v).data(), rows_of(t) == 1 ? 0 : cols_of(t), cols_of(t) == 1 ? 0 : 1};
  }
  // The thread along a row that holds column c of a blocked tile, and its warp among the row's.
  int64_t thread_of(int64_t c) const {
    const Layout& l = p_.layout;
    return c / l.per_thread[1] % l.threads[1];
  }

  void region(const Region& r) {
    for (const Inst& i : r.body) {
      if (i.opcode == Opcode::Yield) {
        yielded_.clear();
        for (int a : i.args) yielded_.push_back(v_.at(static_cast<size_t>(a)));
        return;
      }
      inst(i);
    }
  }

  void inst(const Inst& i) {
    if (syncs_block(p_, i, group_ >= 0)) read_since_barrier_.clear();
    switch (i.opcode) {
      case Opcode::ProgramId:
        out(i).i = id_;
        return;
      case Opcode::NumPrograms:
        out(i).i = l_.blocks;
        return;
      case Opcode::Const:
        if (type(i.results[0]).kind == Type::Kind::Index)
          out(i).i = static_cast<int64_t>(i.value);
        else  // (as codegen's constants: rounded to the dtype)
          out(i).t.assign(static_cast<size_t>(count(type(i.results[0]))), rounded(type(i.results[0]).dtype, i.value));
        return;
      case Opcode::IndexMul:
        out(i).i = index_result(i, idx(i.args[0]) * idx(i.args[1]));
        return;
      case Opcode::IndexAdd:
        out(i).i = index_result(i, idx(i.args[0]) + idx(i.args[1]));
        return;
      case Opcode::IndexSub:
        out(i).i = index_result(i, idx(i.args[0]) - idx(i.args[1]));
        return;
      case Opcode::IndexDiv:
      case Opcode::IndexRem: {
        const int64_t d = idx(i.args[1]);
        if (d <= 0) fail(fmt::format("an index divided by {}", d));
        out(i).i = i.opcode == Opcode::IndexDiv ? idx(i.args[0]) / d : idx(i.args[0]) % d;
        return;
      }
      case Opcode::IndexMin:
        out(i).i = std::min(idx(i.args[0]), idx(i.args[1]));
        return;
      case Opcode::IndexLess:
        out(i).t = {idx(i.args[0]) < idx(i.args[1]) ? 1.0 : 0.0};
        return;
      case Opcode::IndexCeil: {
        const double x = one(i.args[0]);
        out(i).i = !(x > 0) ? 0 : static_cast<int64_t>(std::min(std::ceil(x), 2147483520.0));  // (codegen's clamp)
        return;
      }
      case Opcode::Splat:
        out(i).t.assign(static_cast<size_t>(count(type(i.results[0]))), one(i.args[0]));
        return;
      case Opcode::Iota:
      case Opcode::InBounds:
      case Opcode::InWindow:
        return positions(i);
      case Opcode::Compute:
        return compute(i);
      case Opcode::Reduce:
        return reduce(i);
      case Opcode::Spread:
        return spread(i);
      case Opcode::GatherWarps:
        for (size_t k = 0; k < i.args.size(); ++k) out(i, k).t = elems(i.args[k]);
        return;
      case Opcode::GatherBlocks:
      case Opcode::ClusterValues:
        return exchange(i);
      case Opcode::Load:
        return load(i);
      case Opcode::Store:
        return store(i);
      case Opcode::For:
        return for_loop(i);
      case Opcode::While:
        return while_loop(i);
      case Opcode::If:
        if (one(i.args[0]) != 0) region(i.regions.at(0));
        return;
      case Opcode::LastArrival: {
        std::lock_guard<std::mutex> lock(l_.m);
        const uint32_t c = counter(i) + 1;
        set_counter(i, c);
        out(i).t = {c == static_cast<uint32_t>(idx(i.args[1])) ? 1.0 : 0.0};
        return;
      }
      case Opcode::ResetCount: {
        std::lock_guard<std::mutex> lock(l_.m);
        set_counter(i, 0);
        return;
      }
      case Opcode::Claim: {
        const bool keeps = i.args.size() > 2 && idx(i.args[3]) >= idx(i.args[2]);
        if (keeps) {
          out(i).i = idx(i.args[3]);
          return;
        }
        std::lock_guard<std::mutex> lock(l_.m);
        const uint32_t c = counter(i);
        set_counter(i, c + 1);
        out(i).i = idx(i.args[1]) + c;
        return;
      }
      case Opcode::FillStage:
        return fill_stage(i);
      case Opcode::Publish:
        return publish(i);
      case Opcode::GatherParts:
        return gather_parts(i);
      case Opcode::FetchParts:  // (the row: the gather that starts from it loads the words again)
        out(i).t = {static_cast<double>(idx(i.args[0]))};
        return;
      case Opcode::StageRow:
        out(i).i = mem_.stage_rows.at(static_cast<size_t>(i.ring)).at(static_cast<size_t>(stage(i, idx(i.args[0]))));
        if (out(i).i < 0) fail(fmt::format("stage_row of stage {} of @{}, never filled", idx(i.args[0]), p_.shared[static_cast<size_t>(i.ring)].name));
        return;
      case Opcode::CopyAsync:
        return copy_async(i);
      case Opcode::LoadShared:
        return load_shared(i);
      case Opcode::StoreShared:
        return store_shared(i);
      case Opcode::Dot:
        return dot(i);
      case Opcode::Convert:
        return convert(i);
      case Opcode::DotAsync:
        return dot_async(i);
      case Opcode::DotWait:  // (a product's value is complete when issued here; its reads of its stages end now)
        while (in_flight_.size() > static_cast<size_t>(i.value)) in_flight_.pop_front();
        for (size_t k = 0; k < i.args.size(); ++k) out(i, k) = v_.at(static_cast<size_t>(i.args[k]));
        return;
      case Opcode::Specialize:
        return specialize(i);
      case Opcode::AwaitTurn:
      case Opcode::HandOff:
        return take_turn(i);
      case Opcode::TmaLoad:
        return tma_load(i);
      case Opcode::WaitFull:
      case Opcode::WaitEmpty:
        return wait_stage(i);
      case Opcode::Release:
        return release(i);
      case Opcode::TmaStore:
        return tma_store(i);
      case Opcode::CommitGroup:
        copy_groups_.push_back(std::move(open_copies_));
        open_copies_.clear();
        return;
      case Opcode::WaitGroup:
        return wait_group(i);
      case Opcode::WaitStores:  // (stores are done when issued here)
      case Opcode::Barrier:     // (a block's or consumer group's threads are one here)
      case Opcode::FenceAsync:
        return;
      case Opcode::Yield:  // (a region's end: region() takes its values)
        break;
    }
    fail(fmt::format("the interpreter has no {}", opcode_name(i.opcode)));
  }

  // Iota and InBounds: the offset plus each element's position along the axis; InWindow: whether
  // the element's window column is one of its row's.
  void positions(const Inst& i) {
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(t), cols = cols_of(t);
    std::vector<double>& o = out(i).t;
    o.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        double x;
        if (i.opcode == Opcode::InWindow) {
          const int64_t row = idx(i.args[0]) + r, width = idx(i.args[2]);
          const int64_t col = idx(i.args[1]) + c - window_shift(row, width, i.window);
          x = col >= 0 && col < width;
        } else if (i.opcode == Opcode::Iota && i.args.size() == 2) {  // the linear form
          const int64_t row = idx(i.args[0]) + r;
          int64_t at = row * i.iota_stride + idx(i.args[1]) + c;
          if (i.window > 0) at -= window_shift(row, i.iota_stride, i.window);
          x = to_f32(static_cast<double>(at / i.iota_div % i.iota_mod));
        } else {
          const int64_t at = idx(i.args[0]) + (i.axis == 0 ? r : c);
          x = i.opcode == Opcode::Iota ? to_f32(static_cast<double>(at)) : at < idx(i.args[1]);
        }
        o[static_cast<size_t>(r * cols + c)] = x;
      }
  }

  void compute(const Inst& i) {
    const Type& t = type(i.results[0]);
    const int64_t rows = t.is_tile() ? rows_of(t) : 1, cols = t.is_tile() ? cols_of(t) : 1;
    std::vector<double> o(static_cast<size_t>(rows * cols));
    const bool reciprocal = i.op == Op::Div && t.is_tile() && count(type(i.args[1])) < count(t);
    const View x0 = view(i.args[0]);
    const View x1 = i.args.size() > 1 ? view(i.args[1]) : x0, x2 = i.args.size() > 2 ? view(i.args[2]) : x0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const double a = x0(r, c);
        double x;
        switch (i.op) {
          case Op::Where:
            x = a != 0 ? x1(r, c) : x2(r, c);
            break;
          case Op::Fma:
            x = to_f32(std::fma(a, x1(r, c), x2(r, c)));
            break;
          case Op::Cast:
            x = rounded(t.dtype, a);
            break;
          default:
            if (i.args.size() == 1) {
              x = to_f32(reference_unary(i.op, a));
              if (i.flush_subnormal && std::fabs(x) < std::ldexp(1.0, -126)) x = 0;
            } else if (reciprocal) {  // a divisor broadcast over the result: its reciprocal times each
              x = to_f32(a * to_f32(1.0 / x1(r, c)));
            } else {
              x = to_f32(reference_binary(i.op, a, x1(r, c)));
            }
        }
        o[static_cast<size_t>(r * cols + c)] = x;
      }
    out(i).t = std::move(o);
  }

  // Along axis 1 into a one-column tile, a lanes tile (each thread's elements of a row), or a warps
  // tile (each warp's); a lanes tile's rows into warps; a warp_lanes tile's columns into one; or
  // along axis 0 each column. Elements a mask excludes count as the identity. In f32, in about
  // codegen's order (rounding apart, the same): each thread's elements in turn, the threads'
  // partials pairwise within each warp as shuffles combine them, then the warps' in order — a sum
  // of 40000 elements in one running f32 sum strayed ten times further than the GPU's. (An
  // accumulator's rows are combined pairwise over their columns, not by quads.)
  void reduce(const Inst& i) {
    const Type& in = type(i.args[0]);
    const Type& rt = type(i.results[0]);
    const int64_t rows = rows_of(in), cols = cols_of(in), out_cols = cols_of(rt);
    const bool blocked = in.frag == Frag::None && cols == p_.layout.extent(1);
    // Each result element's partials: how many, and which one an element (r, c) adds to.
    int64_t parts = 1;
    if (i.axis == 1 && out_cols == 1)
      parts = blocked ? p_.layout.threads[1] : cols;
    else if (i.axis == 1 && (in.frag == Frag::Lanes || rt.frag == Frag::Warps))
      parts = 32;
    auto part = [&](int64_t c) -> int64_t {
      if (parts == 1) return 0;
      const int64_t holder = in.frag == Frag::None ? (blocked ? thread_of(c) : c) : c;
      return parts == 32 ? holder % 32 : holder;
    };
    const Op combine = combine_of(i.op);
    const int64_t out_size = count(rt);
    std::vector<double> acc(static_cast<size_t>(out_size * parts), identity_of(i.op));
    const bool masked = i.args.size() > 1;
    const View mask = view(i.args[masked ? 1 : 0]);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        if (masked && mask(r, c) == 0) continue;
        int64_t into;
        if (i.axis == 0) {
          into = c;
        } else if (out_cols == 1) {
          into = r;
        } else if (in.frag == Frag::Lanes) {  // into warps
          into = r * out_cols + c / 32;
        } else if (rt.frag == Frag::Lanes) {
          into = r * out_cols + thread_of(c);
        } else if (rt.frag == Frag::Warps) {
          into = r * out_cols + thread_of(c) / 32;
        } else {
          fail(fmt::format("a reduction of a {} tile into a {} tile", frag_name(in.frag), frag_name(rt.frag)));
        }
        double& a = acc[static_cast<size_t>(into * parts + part(c))];
        a = to_f32(reference_binary(combine, a, elems(i.args[0])[static_cast<size_t>(r * cols + c)]));
      }
    // A row's threads (lanes) combine within each warp pairwise, then the warps' values in order.
    const int64_t group = parts > 32 && parts % 32 == 0 && (blocked || in.frag == Frag::Lanes) ? 32 : parts;
    std::vector<double> o(static_cast<size_t>(out_size));
    for (int64_t k = 0; k < out_size; ++k) {
      double* x = &acc[static_cast<size_t>(k * parts)];
      for (int64_t g = 0; g < parts; g += group)
        for (int64_t step = 1; step < group; step *= 2)
          for (int64_t j = g; j + step < g + group; j += 2 * step) x[j] = to_f32(reference_binary(combine, x[j], x[j + step]));
      for (int64_t g = group; g < parts; g += group) x[0] = to_f32(reference_binary(combine, x[0], x[g]));
      o[static_cast<size_t>(k)] = x[0];
    }
    if (cols == 1 && i.axis == 1 && out_cols > 1)  // (a one-column tile: every thread holds its rows' values)
      for (int64_t k = 0; k < out_size; ++k) o[static_cast<size_t>(k)] = o[static_cast<size_t>(k / out_cols * out_cols)];
    out(i).t = std::move(o);
  }

  // A lanes or warps tile's values over the blocked elements of the threads (warps) holding them.
  void spread(const Inst& i) {
    const Type& from = type(i.args[0]);
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(t), cols = cols_of(t);
    std::vector<double> o(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t holder = cols_of(from) == 1 ? 0 : from.frag == Frag::Warps ? thread_of(c) / 32 : thread_of(c);
        o[static_cast<size_t>(r * cols + c)] = at(i.args[0], r, holder);
      }
    out(i).t = std::move(o);
  }

  // The cluster's blocks' values of each arg: gather_blocks, column b of result a block b's;
  // cluster_values, result a·n + b block b's value of arg a.
  void exchange(const Inst& i) {
    const int n = p_.cluster_blocks;
    if (n == 1) fail(fmt::format("{} outside a cluster", opcode_name(i.opcode)));
    std::vector<double> mine;
    for (int a : i.args) mine.insert(mine.end(), elems(a).begin(), elems(a).end());
    const std::vector<std::vector<double>> all = exchanged(i, std::move(mine));
    size_t first = 0;
    for (size_t a = 0; a < i.args.size(); ++a) {
      const size_t rows = elems(i.args[a]).size();
      for (int b = 0; b < n; ++b) {
        const std::vector<double>& theirs = all[static_cast<size_t>(b)];
        if (i.opcode == Opcode::ClusterValues) {
          out(i, a * static_cast<size_t>(n) + static_cast<size_t>(b)).t.assign(theirs.begin() + static_cast<long>(first),
                                                                             theirs.begin() + static_cast<long>(first + rows));
          continue;
        }
        std::vector<double>& o = out(i, a).t;
        o.resize(rows * static_cast<size_t>(n));
        for (size_t r = 0; r < rows; ++r) o[r * static_cast<size_t>(n) + static_cast<size_t>(b)] = theirs[first + r];
      }
      first += rows;
    }
  }
  // Every block's `mine`, in rank order: written, a cluster barrier, read, a cluster barrier.
  // (Every block at the same exchange: blocks at different ones would read each other's values
  // as theirs.)
  std::vector<std::vector<double>> exchanged(const Inst& i, std::vector<double> mine) {
    std::unique_lock<std::mutex> l(l_.m);
    c_.slots[static_cast<size_t>(rank_)] = std::move(mine);
    c_.slot_inst[static_cast<size_t>(rank_)] = &i;
    cluster_barrier(l);
    for (size_t b = 0; b < c_.slots.size(); ++b)
      if (c_.slot_inst[b] != &i || c_.slots[b].size() != c_.slots[static_cast<size_t>(rank_)].size())
        fail(fmt::format("exchanges values at one {} while block {} of its cluster is at another", opcode_name(i.opcode), b));
    std::vector<std::vector<double>> all = c_.slots;
    cluster_barrier(l);
    return all;
  }
  void cluster_barrier(std::unique_lock<std::mutex>& l) {
    if (c_.left > 0) fail("exchanges values with its cluster after another block of it finished");
    const uint64_t generation = c_.generation;
    if (++c_.waiting == p_.cluster_blocks) {
      c_.waiting = 0;
      ++c_.generation;
      l_.cv.notify_all();
      return;
    }
    l_.wait(l, [&] { return c_.generation != generation || c_.left > 0; },
            fmt::format("block {} waits at a cluster exchange", id_));
    if (c_.generation == generation) fail("waits at a cluster exchange that another block of it finished without");
  }

  // ---- memory ----

  const Param& param(const Inst& i) const { return p_.params.at(static_cast<size_t>(i.param)); }
  // How far indices along axis d run: the view's extent, or the domain's rows where the
  // parameter's rows split into the domain's dimensions.
  static int64_t index_extent(const Param& prm, size_t d) {
    return d == 0 && !prm.row_dims.empty() ? num_elements(prm.row_dims) : prm.view.at(d);
  }
  // Whether index x along axis d of a load or store lies where its masks allow.
  // An index along an unmasked axis past the view's extent (where it is not broadcast, and the
  // parameter is not read element by element: there an element past the domain is one the
  // program does not use) is an error: codegen would read or write another row's element.
  bool inside(const Inst& i, size_t d, int64_t x) const {
    if (d >= i.masked.size() || !i.masked[d]) {
      const Param& prm = param(i);
      if (prm.view.at(d) != 1 && prm.elem_dims.empty() && x >= index_extent(prm, d))
        fail(fmt::format("{} of '{}' at index {} along axis {}, past its extent {} and not masked", opcode_name(i.opcode),
                         prm.name, x, d, index_extent(prm, d)));
      return true;
    }
    const int limit = d < i.limits.size() ? i.limits[d] : -1;
    const int64_t hi = limit >= 0 ? idx(limit) : index_extent(param(i), d);
    return x >= 0 && x < hi;
  }
  // The element offset of (row, col) in a parameter (codegen's offset(): column-major groups,
  // rows split over the domain's dimensions, or the domain's elements in order).
  static int64_t offset(const Param& prm, int64_t row, int64_t col) {
    if (prm.col_major) {
      const int64_t g = prm.group_rows;
      return row / g * g * prm.view[1] + (prm.view[1] == 1 ? 0 : col * g) + row % g;
    }
    if (!prm.elem_dims.empty()) {
      const int64_t e = row * prm.view[1] + col, inner = prm.elem_dims.back();
      int64_t r = e / inner, off = 0, stride = prm.elem_view.back();
      for (size_t d = prm.elem_dims.size() - 1; d-- > 0;) {
        if (prm.elem_view[d] != 1) off += r % prm.elem_dims[d] * stride;
        r /= prm.elem_dims[d];
        stride *= prm.elem_view[d];
      }
      return prm.elem_view.back() != 1 ? off + e % inner : off;
    }
    int64_t off = 0;
    if (prm.view[0] != 1) {
      if (prm.row_dims.empty()) {
        off = row * prm.view[1];
      } else {
        int64_t r = row, stride = prm.view[1];
        for (size_t d = prm.row_dims.size(); d-- > 0;) {
          if (prm.row_view[d] != 1) off += r % prm.row_dims[d] * stride;
          r /= prm.row_dims[d];
          stride *= prm.row_view[d];
        }
      }
    }
    return prm.view[1] != 1 ? off + col : off;
  }
  uint8_t* element(const Inst& i, int64_t off, const char* what) const {
    const Param& prm = param(i);
    const HostArg& a = l_.args.at(static_cast<size_t>(i.param));
    const size_t size = dtype_size(prm.workspace ? DType::F32 : prm.dtype);
    const int64_t in_bytes = static_cast<int64_t>(a.bytes / size);
    const int64_t elements = prm.workspace ? std::min(num_elements(prm.view), in_bytes) : in_bytes;
    if (off < 0 || off >= elements)
      fail(fmt::format("{} of '{}' at element {}, outside its {} elements", what, prm.name, off, elements));
    return a.data + static_cast<size_t>(off) * size;
  }
  // Stamped word `w` of the workspace (Opcode::Publish): the value's f32 bits, then the epoch.
  uint8_t* word_at(const Inst& i, int64_t w) const {
    const HostArg& a = l_.args.at(static_cast<size_t>(i.param));
    if (w < 0 || static_cast<size_t>(w + 1) * 8 > a.bytes)
      fail(fmt::format("stamped word {} of '{}' outside its workspace of {} bytes", w, param(i).name, a.bytes));
    return a.data + static_cast<size_t>(w) * 8;
  }
  void publish(const Inst& i) {
    const int64_t n = static_cast<int64_t>(i.args.size()) - 1, task = idx(i.args[0]);
    std::lock_guard<std::mutex> l(l_.m);
    for (int64_t a = 0; a < n; ++a) {
      const float v = static_cast<float>(one(i.args[static_cast<size_t>(a + 1)]));
      uint8_t* w = word_at(i, task * n + a);
      std::memcpy(w, &v, 4);
      std::memcpy(w + 4, &l_.epoch, 4);
    }
    l_.cv.notify_all();
  }
  // Waits until every word of the row's parts carries this launch's epoch (another block's
  // publish: the blocks of such a program run side by side).
  void gather_parts(const Inst& i) {
    const PartsGather g = parts_gather(p_, i);
    for (size_t w = 0; w < g.warps.size(); ++w)  // (behind the same barrier)
      out(i, i.results.size() - g.warps.size() + w).t = elems(g.warps[w]);
    const int64_t n = static_cast<int64_t>(i.results.size() - g.warps.size()), parts = static_cast<int64_t>(i.value);
    if (g.from >= 0 && static_cast<int64_t>(one(g.from)) != idx(g.row))
      fail(fmt::format("gather_parts of row {} starts from the words of row {}", idx(g.row), one(g.from)));
    if (g.when >= 0 && one(g.when) == 0) {  // (nobody waits; the values are unspecified)
      for (int64_t a = 0; a < n; ++a) out(i, static_cast<size_t>(a)).t.assign(static_cast<size_t>(parts), NAN);
      return;
    }
    const int64_t first = idx(i.args[0]) * parts * n;
    word_at(i, first);  // (every word in the workspace: the wait below must not throw)
    word_at(i, first + parts * n - 1);
    auto stamped = [&] {
      for (int64_t w = first; w < first + parts * n; ++w) {
        uint32_t e;
        std::memcpy(&e, word_at(i, w) + 4, 4);
        if (e != l_.epoch) return false;
      }
      return true;
    };
    std::unique_lock<std::mutex> l(l_.m);
    l_.wait(l, stamped, fmt::format("block {} waits for the parts of row {}", id_, idx(i.args[0])));
    for (int64_t a = 0; a < n; ++a) {
      std::vector<double> t(static_cast<size_t>(parts));
      for (int64_t q = 0; q < parts; ++q) {
        float v;
        std::memcpy(&v, word_at(i, first + q * n + a), 4);
        t[static_cast<size_t>(q)] = v;
      }
      out(i, static_cast<size_t>(a)).t = std::move(t);
    }
  }
  // The u32 counter `slot` (arg 0) after the workspace's f32 view.
  uint8_t* counter_at(const Inst& i) const {
    const Param& ws = param(i);
    const HostArg& a = l_.args.at(static_cast<size_t>(i.param));
    const int64_t slot = idx(i.args[0]);
    const size_t at = static_cast<size_t>(num_elements(ws.view)) * 4 + static_cast<size_t>(slot) * 4;
    if (slot < 0 || at + 4 > a.bytes) fail(fmt::format("counter {} of '{}' outside its workspace", slot, ws.name));
    return a.data + at;
  }
  uint32_t counter(const Inst& i) const {
    uint32_t c;
    std::memcpy(&c, counter_at(i), 4);
    return c;
  }
  void set_counter(const Inst& i, uint32_t c) const { std::memcpy(counter_at(i), &c, 4); }
  // An index op's result: not negative (codegen's are unsigned), and within 32 bits unless the
  // program's indices are 64-bit.
  int64_t index_result(const Inst& i, int64_t x) const {
    if (x < 0 || (!p_.wide_indices && x > int64_t{0xffffffff}))
      fail(fmt::format("{} gives {}, outside the program's {}-bit unsigned indices", opcode_name(i.opcode), x,
                       p_.wide_indices ? 64 : 32));
    return x;
  }
  DType dtype_of(const Param& prm) const { return prm.workspace ? DType::F32 : prm.dtype; }

  // A windowed row's column c of row `row` as the parameter's column (Inst::window).
  int64_t window_column(const Inst& i, int64_t row, int64_t c) const {
    return i.window > 0 ? c - window_shift(row, param(i).view[1], i.window) : c;
  }
  // Each element of the result's shape at the offsets plus its position; where a mask excludes
  // it, NaN (codegen reads some element in bounds there: a value the program must not use).
  void load(const Inst& i) {
    const Param& prm = param(i);
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(t), cols = cols_of(t);
    std::vector<double> o(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t row = idx(i.args[0]) + (rows == 1 ? 0 : r);
        const int64_t col = window_column(i, row, idx(i.args[1]) + (cols == 1 ? 0 : c));
        double& x = o[static_cast<size_t>(r * cols + c)];
        const bool past_domain = !prm.elem_dims.empty() && row * prm.view[1] + col >= num_elements(prm.elem_dims);
        x = inside(i, 0, row) && inside(i, 1, col) && !past_domain
                ? read_element(element(i, offset(prm, row, col), "a load"), dtype_of(prm))
                : NAN;
      }
    out(i).t = std::move(o);
  }

  void store(const Inst& i) {
    const Param& prm = param(i);
    const int v = i.args.back();
    const Type& t = type(v);
    const int64_t rows = rows_of(t), cols = cols_of(t);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t row = idx(i.args[0]) + (rows == 1 ? 0 : r);
        const int64_t col = window_column(i, row, idx(i.args[1]) + (cols == 1 ? 0 : c));
        if (!inside(i, 0, row) || !inside(i, 1, col)) continue;
        if (!prm.output && !prm.workspace) fail(fmt::format("a store to input '{}'", prm.name));
        uint8_t* e = element(i, offset(prm, row, col), "a store");
        if (i.reduce_add) {  // (other blocks add into the same elements)
          std::lock_guard<std::mutex> lock(l_.m);
          write_element(e, DType::F32, read_element(e, DType::F32) + static_cast<float>(at(v, r, c)));
        } else {
          write_element(e, dtype_of(prm), at(v, r, c));
        }
      }
  }

  int64_t stage(const Inst& i, int64_t s) const { return stage_of(p_.shared.at(static_cast<size_t>(i.ring)), s); }
  std::vector<double>& stage_tile(const Inst& i, int64_t s) {
    return mem_.rings.at(static_cast<size_t>(i.ring)).at(static_cast<size_t>(stage(i, s)));
  }

  // One row of the ring's tile from the parameter at (row, col), or — at or past the rows — the
  // end mark: the stage then holds the rows as its row.
  void fill_stage(const Inst& i) {
    const Param& prm = param(i);
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const int64_t row = idx(i.args[0]), col = idx(i.args[1]), rows = idx(i.args[3]);
    std::vector<double>& tile = stage_tile(i, idx(i.args[2]));
    const size_t s = static_cast<size_t>(idx(i.args[2]));
    if (read_since_barrier_.count({i.ring, static_cast<int64_t>(s)}))
      fail(fmt::format("refills stage {} of @{} with no block barrier since the block's threads read it (one may "
                       "still be reading it)",
                       s, ring.name));
    mem_.stage_rows[static_cast<size_t>(i.ring)][s] = std::min(row, rows);
    if (row < rows)
      for (int64_t c = 0; c < ring.tile.back(); ++c)
        tile[static_cast<size_t>(c)] = read_element(element(i, offset(prm, row, col + c), "a stage's fill"), dtype_of(prm));
    std::lock_guard<std::mutex> l(l_.m);  // (the copy complete: the stage's phase with it)
    mem_.full[static_cast<size_t>(i.ring)][s].completed++;
    l_.cv.notify_all();
  }

  // The parameter's tile at the offsets, zero where masked, bound for a stage: it lands there
  // when a WaitGroup has waited for the group CommitGroup closes it into (until then the stage
  // holds what it held).
  void copy_async(const Inst& i) {
    const Param& prm = param(i);
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const int64_t rows = ring.tile[0], cols = ring.tile[1];
    Copy copy{i.ring, stage(i, idx(i.args[2])), std::vector<double>(static_cast<size_t>(rows * cols))};
    check_not_in_flight(i.ring, copy.stage, "copies into");
    // (Until the copy lands the stage holds nothing the program may read: a read there races it.)
    std::fill(mem_.rings.at(static_cast<size_t>(i.ring)).at(static_cast<size_t>(copy.stage)).begin(),
              mem_.rings.at(static_cast<size_t>(i.ring)).at(static_cast<size_t>(copy.stage)).end(), NAN);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t row = idx(i.args[0]) + r, col = idx(i.args[1]) + c;
        copy.tile[static_cast<size_t>(r * cols + c)] =
            inside(i, 0, row) && inside(i, 1, col)
                ? read_element(element(i, offset(prm, row, col), "an asynchronous copy"), dtype_of(prm))
                : 0.0;
      }
    open_copies_.push_back(std::move(copy));
  }
  void wait_group(const Inst& i) {
    while (copy_groups_.size() > static_cast<size_t>(i.value)) {
      for (Copy& c : copy_groups_.front())
        mem_.rings.at(static_cast<size_t>(c.ring)).at(static_cast<size_t>(c.stage)) = std::move(c.tile);
      copy_groups_.pop_front();
    }
  }

  // The result's tile from a stage at (row, col) within it (or within its transpose).
  void load_shared(const Inst& i) {
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    check_read(i.ring, idx(i.args[0]));
    if (ring.bulk) read_since_barrier_.insert({i.ring, idx(i.args[0])});
    const std::vector<double>& tile = stage_tile(i, idx(i.args[0]));
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(t), cols = cols_of(t), r0 = idx(i.args[1]), c0 = idx(i.args[2]);
    const int64_t ring_rows = ring.tile[ring.tile.size() - 2], ring_cols = ring.tile.back();
    std::vector<double> o(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t at_row = i.transposed ? c0 + c : r0 + r, at_col = i.transposed ? r0 + r : c0 + c;
        if (at_row >= ring_rows || at_col >= ring_cols)
          fail(fmt::format("a read of ring @{} at ({}, {}), outside its stage of {}", ring.name, at_row,
                           at_col, shape_str(ring.tile)));
        o[static_cast<size_t>(r * cols + c)] = tile[static_cast<size_t>(at_row * ring_cols + at_col)];
      }
    out(i).t = std::move(o);
  }

  // The tile, rounded to the ring's dtype, as the whole stage (or its transpose).
  void store_shared(const Inst& i) {
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const int64_t s = stage(i, idx(i.args[0]));
    check_not_in_flight(i.ring, s, "writes");
    std::vector<double>& tile = stage_tile(i, s);
    const int64_t rows = rows_of(type(i.args[1])), cols = cols_of(type(i.args[1]));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t at_row = i.transposed ? c : r, at_col = i.transposed ? r : c;
        tile[static_cast<size_t>(at_row * ring.tile[1] + at_col)] = rounded(ring.dtype, at(i.args[1], r, c));
      }
  }

  void dot(const Inst& i) {
    const Type &a = type(i.args[0]), &b = type(i.args[1]), &acc = type(i.args[2]);
    out(i).t = product(elems(i.args[2]), elems(i.args[0]), a.dtype, elems(i.args[1]), b.dtype, rows_of(acc), cols_of(a),
                       cols_of(acc));
  }

  void convert(const Inst& i) {
    const Type& acc = type(i.args[0]);
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(acc), first = static_cast<int64_t>(i.value) * 16;
    std::vector<double> o(static_cast<size_t>(rows * 16));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 16; ++c) o[static_cast<size_t>(r * 16 + c)] = rounded(t.dtype, at(i.args[0], r, first + c));
    out(i).t = std::move(o);
  }

  // ---- warpgroup MMA, TMA and warp specialization ----

  // acc (arg 1) + A·B: B the whole stage of ring_b ([k, n]); A that stage of `ring` ([m, k]; a
  // ring of one stage its only one) or the fragments args 2… ([m, 16] each, side by side along k).
  void dot_async(const Inst& i) {
    const int64_t s = idx(i.args[0]);
    const SharedRing& rb = p_.shared.at(static_cast<size_t>(i.ring_b));
    std::vector<std::pair<int, int64_t>> reads = {{i.ring_b, s}};
    if (i.ring >= 0) reads.push_back({i.ring, p_.shared.at(static_cast<size_t>(i.ring)).stages == 1 ? 0 : s});
    for (const auto& [r, st] : reads) check_read(r, st);
    in_flight_.push_back(reads);
    std::vector<double> b =
        mem_.rings.at(static_cast<size_t>(i.ring_b)).at(static_cast<size_t>(stage_of(rb, s)));
    const int64_t k = rb.tile[i.transposed ? 1 : 0], width = rb.tile[i.transposed ? 0 : 1];
    const Type& acc = type(i.args[1]);
    const int64_t n = cols_of(acc);  // B's columns b_col … b_col + n − 1
    if (i.b_col + n > width)
      fail(fmt::format("dot_async of B's columns {} to {} of {}", i.b_col, i.b_col + n, width));
    {  // B[r][c] is the stage's [r][b_col + c], or transposed its [b_col + c][r]
      std::vector<double> t(static_cast<size_t>(k * n));
      for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c)
          t[static_cast<size_t>(r * n + c)] =
              b[static_cast<size_t>(i.transposed ? (i.b_col + c) * k + r : r * width + i.b_col + c)];
      b = std::move(t);
    }
    const int64_t m = rows_of(acc);
    std::vector<double> a(static_cast<size_t>(m * k));
    if (i.ring >= 0) {
      const SharedRing& ra = p_.shared.at(static_cast<size_t>(i.ring));
      const bool t = i.a_transposed;  // (A is the stage's transpose)
      if (ra.tile[t ? 1 : 0] != m || ra.tile[t ? 0 : 1] != k)
        fail(fmt::format("dot_async of A tile {}{} for {}×{}", shape_str(ra.tile), t ? " transposed" : "", m,
                         k));
      // (A ring of one stage — attention's Q — is read there at every step.)
      const std::vector<double>& stored = mem_.rings.at(static_cast<size_t>(i.ring))
                                              .at(static_cast<size_t>(ra.stages == 1 ? 0 : stage_of(ra, s)));
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < k; ++c)
          a[static_cast<size_t>(r * k + c)] = stored[static_cast<size_t>(t ? c * m + r : r * k + c)];
    } else {
      if (static_cast<int64_t>(i.args.size() - 2) * 16 != k) fail(fmt::format("dot_async of {} A fragments for k {}", i.args.size() - 2, k));
      for (size_t f = 2; f < i.args.size(); ++f)
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = 0; c < 16; ++c)
            a[static_cast<size_t>(r * k + static_cast<int64_t>(f - 2) * 16 + c)] = at(i.args[f], r, c);
    }
    const DType a_dtype = i.ring >= 0 ? p_.shared[static_cast<size_t>(i.ring)].dtype : type(i.args.at(2)).dtype;
    out(i).t = product(elems(i.args[1]), a, a_dtype, b, rb.dtype, m, k, n);
  }
  int64_t stage_of(const SharedRing& r, int64_t s) const {
    if (s < 0 || s >= r.stages) fail(fmt::format("stage {} of ring @{} of {} stages", s, r.name, r.stages));
    return s;
  }

  // The producer (region 0) and each consumer group (region 1, given its group) on threads of
  // their own, each with the body's values so far.
  void specialize(const Inst& i) {
    side_by_side(l_, 1 + p_.consumer_groups, [&](int k) {
      Exec e = *this;
      e.group_ = k - 1;
      const Region& r = i.regions.at(k == 0 ? 0 : 1);
      if (k > 0) e.v_.at(static_cast<size_t>(r.args.at(0))).i = k - 1;
      e.region(r);
    });
    if (mem_.turns[0] + mem_.turns[1] > 0) fail("leaves a turn handed over and never taken");
  }

  // Turns between two consumer groups: each AwaitTurn takes one that the other group handed over
  // (as the named barriers pair each wait with an arrival). Turns at steps are between one
  // group's two warpgroups, which are one thread here.
  void take_turn(const Inst& i) {
    if (!i.args.empty()) return;
    if (group_ < 0 || p_.consumer_groups != 2) fail(fmt::format("{} outside two consumer groups", opcode_name(i.opcode)));
    std::unique_lock<std::mutex> l(l_.m);
    if (i.opcode == Opcode::HandOff) {
      // (A named barrier pairs each wait with one arrival: a second hand-off before the other
      // group took the first would meet no wait, or the wrong one.)
      if (mem_.turns[1 - group_] > 0) fail(fmt::format("hands group {} a turn before it took the last", 1 - group_));
      mem_.turns[1 - group_]++;
      l_.cv.notify_all();
      return;
    }
    l_.wait(l, [&] { return mem_.turns[group_] > 0; }, fmt::format("block {}'s consumer group {} awaits its turn", id_, group_));
    mem_.turns[group_]--;
  }

  // The parameter's box at (batch, row, col) into a stage, zero past the batch's rows or the
  // columns, a 128-byte panel (along the ring's stored rows) at a time: all of them, or — a
  // multicast in a cluster — this block's share (panels rank, rank + n, …) into every block's
  // stage. Each block's full barrier completes its phase once its own producer has issued its
  // load and all the panels have landed.
  void tma_load(const Inst& i) {
    const Param& prm = param(i);
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const int64_t batch = idx(i.args[0]), row0 = idx(i.args[1]), col0 = idx(i.args[2]);
    const size_t s = static_cast<size_t>(stage_of(ring, idx(i.args[3])));
    const int64_t rows = ring.tile[0], cols = ring.tile[1];
    const int64_t per_panel = 128 / static_cast<int64_t>(dtype_size(ring.dtype));
    const int64_t panels = (ring.col_major ? rows : cols) / per_panel;
    const int n = p_.cluster_blocks;
    std::lock_guard<std::mutex> l(l_.m);
    StageBarrier& own = mem_.full[static_cast<size_t>(i.ring)][s];
    if (own.expected) fail(fmt::format("a second tma_load into stage {} of @{} in one phase", s, ring.name));
    // (The fill after n fills follows this thread's wait for the n-th release: a fresh stage's
    // wait passes at once.)
    const auto waited = waited_empty_.find({i.ring, static_cast<int64_t>(s)});
    if (waited == waited_empty_.end() || waited->second < own.completed)
      fail(fmt::format("fills stage {} of @{} without waiting for its last fill's release", s, ring.name));
    own.expected = true;
    for (int64_t panel = 0; panel < panels; ++panel) {
      if (i.multicast && panel % n != rank_) continue;
      for (int b = 0; b < n; ++b) {
        if (!i.multicast && b != rank_) continue;
        BlockMemory& to = c_.blocks[static_cast<size_t>(b)];
        StageBarrier &full = to.full[static_cast<size_t>(i.ring)][s], &empty = to.empty[static_cast<size_t>(i.ring)][s];
        // (Each fill of a stage after the first waits for its last to be released everywhere.)
        if (empty.completed < full.completed)
          fail(fmt::format("fills stage {} of @{} in block {} of its cluster before its last fill was released", s,
                           ring.name, c_.blocks.size() == 1 ? id_ : id_ - rank_ + b));
        if (full.landed >= panels) fail(fmt::format("lands more panels in stage {} of @{} than it has", s, ring.name));
        std::vector<double>& tile = to.rings[static_cast<size_t>(i.ring)][s];
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            if ((ring.col_major ? r : c) / per_panel != panel) continue;
            const int64_t row = row0 + r, col = col0 + c;
            const bool inside = row < prm.tma_rows && col < prm.view[1] && batch * prm.tma_rows + row < index_extent(prm, 0);
            tile[static_cast<size_t>(r * cols + c)] =
                inside ? read_element(element(i, offset(prm, batch * prm.tma_rows + row, col), "a TMA load"), dtype_of(prm))
                       : 0.0;
          }
        full.landed++;
        complete_full(full, panels);
      }
    }
    complete_full(own, panels);
  }
  void complete_full(StageBarrier& f, int64_t panels) {
    if (!f.expected || f.landed < panels) return;
    f.completed++;
    f.expected = false;
    f.landed = 0;
    l_.cv.notify_all();
  }

  // Until the stage's full (empty) barrier has completed the phase of the given parity: its
  // completed phases' parity is no longer that one (a fresh barrier's phase of parity 1 counts
  // as complete).
  void wait_stage(const Inst& i) {
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const size_t s = static_cast<size_t>(stage_of(ring, idx(i.args[0])));
    const int64_t parity = idx(i.args[1]);
    const bool full = i.opcode == Opcode::WaitFull;
    StageBarrier& b = (full ? mem_.full : mem_.empty)[static_cast<size_t>(i.ring)][s];
    std::unique_lock<std::mutex> l(l_.m);
    l_.wait(l, [&] { return b.completed % 2 != parity; },
            fmt::format("block {} waits for stage {} of @{} {} (parity {})", id_, s, ring.name, full ? "full" : "empty", parity));
    (full ? waited_ : waited_empty_)[{i.ring, static_cast<int64_t>(s)}] = b.completed;
  }
  // A read of a stage that a barrier guards (a TMA or bulk ring's) follows this thread's wait for
  // the fill it reads, with no fill since and no release of its own in between; a read of a
  // stage an unfinished product reads is fine.
  void check_read(int ring, int64_t s) {
    const SharedRing& r = p_.shared.at(static_cast<size_t>(ring));
    if (!r.tma && !r.bulk) return;
    std::lock_guard<std::mutex> l(l_.m);
    const auto it = waited_.find({ring, s});
    if (it == waited_.end())
      fail(fmt::format("reads stage {} of @{} without waiting for its fill (or after releasing it)", s, r.name));
    if (it->second != mem_.full.at(static_cast<size_t>(ring)).at(static_cast<size_t>(s)).completed)
      fail(fmt::format("reads stage {} of @{}, filled again since its wait", s, r.name));
  }
  // A stage may not be released or written while a product issued by this thread reads it (its
  // dot_wait not yet past it: wgmma reads shared memory until then).
  void check_not_in_flight(int ring, int64_t s, const char* what) const {
    for (const auto& reads : in_flight_)
      for (const auto& [r, st] : reads)
        if (r == ring && st == s)
          fail(fmt::format("{} stage {} of @{} while a product reading it is in flight (before its dot_wait)", what, s,
                           p_.shared.at(static_cast<size_t>(ring)).name));
  }

  // A consumer group's release of a stage: an arrival at its empty barrier — in a cluster at
  // every block's (their copies land in each other's stages), which empties once all have.
  void release(const Inst& i) {
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const size_t s = static_cast<size_t>(stage_of(ring, idx(i.args[0])));
    const int n = p_.cluster_blocks;
    check_not_in_flight(i.ring, static_cast<int64_t>(s), "releases");
    waited_.erase({i.ring, static_cast<int64_t>(s)});
    std::lock_guard<std::mutex> l(l_.m);
    for (int b = 0; b < n; ++b) {
      StageBarrier& e = c_.blocks[static_cast<size_t>(b)].empty[static_cast<size_t>(i.ring)][s];
      if (++e.arrivals == n) {
        e.arrivals = 0;
        e.completed++;
        l_.cv.notify_all();
      }
    }
  }

  // Tile arg 3 to the parameter at (batch, row, col), nothing past the batch's rows or the columns.
  // With an epilogue region: the tile rounded to the output's dtype, then chunk by chunk what
  // the region makes of each chunk.
  void tma_store(const Inst& i) {
    const Param& prm = param(i);
    const int v = i.args[3];
    const int64_t batch = idx(i.args[0]), row0 = idx(i.args[1]), col0 = idx(i.args[2]);
    const int64_t rows = rows_of(type(v)), cols = cols_of(type(v));
    // (Into a column-major parameter the tile's rows are its stored rows: the view's columns.)
    const int64_t rows_end = prm.col_major ? prm.view[1] : prm.tma_rows,
                  cols_end = prm.col_major ? prm.group_rows : prm.view[1];
    auto write = [&](int64_t r, int64_t c, double x) {
      const int64_t row = row0 + r, col = col0 + c;
      if (row >= rows_end || col >= cols_end) return;
      const int64_t view_row = batch * prm.tma_rows + (prm.col_major ? col : row),
                    view_col = prm.col_major ? row : col;
      if (view_row >= index_extent(prm, 0)) return;
      uint8_t* e = element(i, offset(prm, view_row, view_col), "a TMA store");
      if (!i.reduce_add) return write_element(e, dtype_of(prm), x);
      std::lock_guard<std::mutex> lock(l_.m);  // (other blocks add into the same elements)
      write_element(e, DType::F32, read_element(e, DType::F32) + static_cast<float>(x));
    };
    if (i.regions.empty()) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) write(r, c, at(v, r, c));
      return;
    }
    const Region& body = i.regions[0];
    const int64_t chunk_rows = rows_of(type(body.args[0])), chunk_cols = cols_of(type(body.args[0]));
    for (int64_t c0 = 0; c0 < cols; c0 += chunk_cols)
      for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
        Val chunk;
        for (int64_t r = 0; r < chunk_rows; ++r)
          for (int64_t c = 0; c < chunk_cols; ++c)
            chunk.t.push_back(rounded(prm.dtype, at(v, r0 + r, c0 + c)));
        v_.at(static_cast<size_t>(body.args[0])) = std::move(chunk);
        v_.at(static_cast<size_t>(body.args[1])).i = r0;
        v_.at(static_cast<size_t>(body.args[2])).i = c0;
        region(body);
        const int y = body.body.back().args.at(0);
        for (int64_t r = 0; r < chunk_rows; ++r)
          for (int64_t c = 0; c < chunk_cols; ++c) write(r0 + r, c0 + c, at(y, r, c));
      }
  }

  // ---- loops ----

  void assign(const std::vector<int>& ids, const std::vector<Val>& values) {
    for (size_t k = 0; k < ids.size(); ++k) v_.at(static_cast<size_t>(ids[k])) = values.at(k);
  }
  std::vector<Val> values(std::vector<int>::const_iterator first, std::vector<int>::const_iterator last) const {
    std::vector<Val> out;
    for (auto it = first; it != last; ++it) out.push_back(v_.at(static_cast<size_t>(*it)));
    return out;
  }

  void for_loop(const Inst& i) {
    const Region& body = i.regions.at(0);
    const int64_t lo = idx(i.args[0]), hi = idx(i.args[1]), step = idx(i.args[2]);
    if (step <= 0) fail(fmt::format("a loop of step {}", step));
    std::vector<Val> carried = values(i.args.begin() + 3, i.args.end());
    for (int64_t iv = lo; iv < hi; iv += step) {
      v_.at(static_cast<size_t>(body.args.at(0))).i = iv;
      assign(std::vector<int>(body.args.begin() + 1, body.args.end()), carried);
      region(body);
      carried = std::move(yielded_);
    }
    assign(i.results, carried);
  }

  void while_loop(const Inst& i) {
    const Region &cond = i.regions.at(0), &body = i.regions.at(1);
    std::vector<Val> carried = values(i.args.begin(), i.args.end());
    for (;;) {
      assign(cond.args, carried);
      region(cond);
      if (yielded_.at(0).t.at(0) == 0) break;
      region(body);
      carried = std::move(yielded_);
    }
    assign(i.results, carried);
  }

  const Program& p_;
  Launch& l_;
  Cluster& c_;
  const int rank_;  // in its cluster
  const int64_t id_;
  BlockMemory& mem_;
  int group_ = -1;  // past Specialize: the consumer group (-1: the producer, or not specialized)
  std::vector<Val> v_;
  std::vector<Val> yielded_;  // the last Yield's values
  // Asynchronous copies issued and not yet committed, and the committed groups not yet waited for.
  struct Copy {
    int ring;
    int64_t stage;
    std::vector<double> tile;
  };
  std::vector<Copy> open_copies_;
  std::deque<std::vector<Copy>> copy_groups_;
  // Products issued and not yet waited for: the (ring, stage)s each reads.
  std::deque<std::vector<std::pair<int, int64_t>>> in_flight_;
  // Per (ring, stage) of a barrier-guarded ring: its full barrier's completed phases when this
  // thread last waited for it.
  std::map<std::pair<int, int64_t>, int64_t> waited_;
  // The same of the empty barriers (the producer's waits for the stages' releases).
  std::map<std::pair<int, int64_t>, int64_t> waited_empty_;
  // The (ring, stage)s of bulk rings the block's threads read since their last block barrier
  // (a thread here is the block's threads at once: on the GPU another may still be reading).
  std::set<std::pair<int, int64_t>> read_since_barrier_;
};

}  // namespace

std::string not_interpretable(const Program& p) {
  if (p.grid.size() != 1) return fmt::format("a grid of {} axes", p.grid.size());
  return "";
}

// Whether a region gathers a row's parts from other blocks' publishes (all blocks resident).
static bool gathers_parts(const Region& r) {
  for (const Inst& i : r.body) {
    if (i.opcode == Opcode::GatherParts) return true;
    for (const Region& inner : i.regions)
      if (gathers_parts(inner)) return true;
  }
  return false;
}

void interpret(const Program& p, const std::vector<HostArg>& args, int64_t blocks, uint32_t epoch) {
  if (std::string why = not_interpretable(p); !why.empty())
    throw UnsupportedError(fmt::format("kernel {} cannot be interpreted: {}", p.name, why));
  if (args.size() != p.params.size())
    throw Error(fmt::format("kernel {}: {} arguments for {} parameters", p.name, args.size(), p.params.size()));
  Launch launch(p, args, blocks > 0 ? blocks : p.grid[0], epoch);
  const int n = p.cluster_blocks;
  if (gathers_parts(p.body)) {  // (a persistent grid: every block resident, each on a thread)
    if (launch.blocks > 256)
      throw Error(fmt::format("kernel {}: {} blocks, each a thread of the host, for a persistent grid; give fewer",
                              p.name, launch.blocks));
    std::vector<Cluster> each(static_cast<size_t>(launch.blocks), Cluster(p, 1));
    side_by_side(launch, static_cast<int>(launch.blocks),
                 [&](int b) { Exec(launch, each[static_cast<size_t>(b)], 0, b).run(); });
    return;
  }
  if (launch.blocks % n != 0)
    throw Error(fmt::format("kernel {}: {} blocks are not whole clusters of {}", p.name, launch.blocks, n));
  for (int64_t first = 0; first < launch.blocks; first += n) {
    Cluster cluster(p, n);
    if (n == 1) {
      Exec(launch, cluster, 0, first).run();
      continue;
    }
    side_by_side(launch, n, [&](int rank) {
      Exec(launch, cluster, rank, first + rank).run();
      std::lock_guard<std::mutex> l(launch.m);
      ++cluster.left;  // (a block still waiting to exchange with it learns so)
      launch.cv.notify_all();
    });
  }
}

}  // namespace tilefuse::tir
