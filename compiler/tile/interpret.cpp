#include "compiler/tile/interpret.h"

#include <fmt/format.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
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

double rounded(DType dt, double x) {
  switch (dt) {
    case DType::BF16:
      return round_to_bf16(static_cast<float>(x));
    case DType::F16:
      return round_to_f16(static_cast<float>(x));
    case DType::Bool:
      return x != 0.0;
    case DType::F32:
      break;
  }
  return to_f32(x);
}

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

bool supported(Opcode o) {
  switch (o) {
    case Opcode::DotAsync:
    case Opcode::DotWait:
    case Opcode::Specialize:
    case Opcode::AwaitTurn:
    case Opcode::HandOff:
    case Opcode::TmaLoad:
    case Opcode::WaitEmpty:
    case Opcode::Release:
    case Opcode::TmaStore:
    case Opcode::WaitStores:
      return false;
    default:
      return true;
  }
}

std::string first_unsupported(const Region& r) {
  for (const Inst& i : r.body) {
    if (!supported(i.opcode)) return opcode_name(i.opcode);
    for (const Region& inner : i.regions)
      if (std::string op = first_unsupported(inner); !op.empty()) return op;
  }
  return "";
}

// Where a cluster's blocks meet: each exchange is every block's values written, a barrier, all
// of them read, a barrier. A block that fails, or leaves while others wait, breaks it.
class Rendezvous {
 public:
  explicit Rendezvous(int blocks) : blocks_(blocks), slots_(static_cast<size_t>(blocks)) {}

  std::vector<std::vector<double>> exchange(int rank, std::vector<double> mine) {
    slots_[static_cast<size_t>(rank)] = std::move(mine);
    wait();
    std::vector<std::vector<double>> all = slots_;
    wait();
    return all;
  }
  void leave() {
    std::lock_guard<std::mutex> l(m_);
    ++left_;
    if (waiting_ > 0) break_locked("a block of the cluster finished while others waited to exchange values with it");
  }
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> l(m_);
    break_locked(why);
  }

 private:
  void wait() {
    std::unique_lock<std::mutex> l(m_);
    if (!why_.empty()) throw Error(why_);
    if (left_ > 0) {
      break_locked("a block of the cluster exchanged values after another had finished");
      throw Error(why_);
    }
    const uint64_t generation = generation_;
    if (++waiting_ == blocks_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(l, [&] { return generation_ != generation || !why_.empty(); });
    if (generation_ == generation) throw Error(why_);
  }
  void break_locked(const std::string& why) {
    if (why_.empty()) why_ = why;
    cv_.notify_all();
  }

  const int blocks_;
  std::vector<std::vector<double>> slots_;
  std::mutex m_;
  std::condition_variable cv_;
  int waiting_ = 0, left_ = 0;
  uint64_t generation_ = 0;
  std::string why_;
};

// What the launch's blocks share: the parameters' memory (the counters under a lock: a
// cluster's blocks run at once).
struct Launch {
  const Program& p;
  const std::vector<HostArg>& args;
  int64_t blocks;
  std::mutex counters;
};

class Block {
 public:
  Block(Launch& l, int64_t id, Rendezvous* cluster)
      : p_(l.p), l_(l), id_(id), cluster_(cluster), v_(p_.types.size()) {
    for (const SharedRing& r : p_.shared) {
      rings_.emplace_back(static_cast<size_t>(r.stages), std::vector<double>(static_cast<size_t>(num_elements(r.tile)), NAN));
      stage_rows_.emplace_back(static_cast<size_t>(r.stages), 0);
    }
  }
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
  double at(int v, int64_t r, int64_t c) const {
    const Type& t = type(v);
    if (!t.is_tile()) return one(v);
    return elems(v)[static_cast<size_t>((rows_of(t) == 1 ? 0 : r) * cols_of(t) + (cols_of(t) == 1 ? 0 : c))];
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
        else
          out(i).t.assign(static_cast<size_t>(count(type(i.results[0]))), i.value);
        return;
      case Opcode::IndexMul:
        out(i).i = idx(i.args[0]) * idx(i.args[1]);
        return;
      case Opcode::IndexAdd:
        out(i).i = idx(i.args[0]) + idx(i.args[1]);
        return;
      case Opcode::IndexSub:
        out(i).i = idx(i.args[0]) - idx(i.args[1]);
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
        out(i).i = !(x > 0) ? 0 : static_cast<int64_t>(std::ceil(x));
        return;
      }
      case Opcode::Splat:
        out(i).t.assign(static_cast<size_t>(count(type(i.results[0]))), one(i.args[0]));
        return;
      case Opcode::Iota:
      case Opcode::InBounds:
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
        std::lock_guard<std::mutex> lock(l_.counters);
        uint32_t& c = counter(i);
        out(i).t = {++c == static_cast<uint32_t>(idx(i.args[1])) ? 1.0 : 0.0};
        return;
      }
      case Opcode::ResetCount: {
        std::lock_guard<std::mutex> lock(l_.counters);
        counter(i) = 0;
        return;
      }
      case Opcode::Claim: {
        const bool keeps = i.args.size() > 2 && idx(i.args[3]) >= idx(i.args[2]);
        if (keeps) {
          out(i).i = idx(i.args[3]);
          return;
        }
        std::lock_guard<std::mutex> lock(l_.counters);
        out(i).i = idx(i.args[1]) + counter(i)++;
        return;
      }
      case Opcode::FillStage:
        return fill_stage(i);
      case Opcode::StageRow:
        out(i).i = stage_rows_.at(static_cast<size_t>(i.ring)).at(static_cast<size_t>(stage(i, idx(i.args[0]))));
        return;
      case Opcode::CopyAsync:
        return copy_async(i);
      case Opcode::LoadShared:
        return load_shared(i);
      case Opcode::Dot:
        return dot(i);
      case Opcode::Convert:
        return convert(i);
      case Opcode::WaitFull:  // (copies are done when issued here)
      case Opcode::CommitGroup:
      case Opcode::WaitGroup:
      case Opcode::Barrier:
      case Opcode::FenceAsync:
        return;
      default:
        throw UnsupportedError(fmt::format("kernel {}: the interpreter has no {}", p_.name, opcode_name(i.opcode)));
    }
  }

  // Iota and InBounds: the offset plus each element's position along the axis.
  void positions(const Inst& i) {
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(t), cols = cols_of(t);
    std::vector<double>& o = out(i).t;
    o.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        double x;
        if (i.opcode == Opcode::Iota && i.args.size() == 2) {  // the linear form
          int64_t at = (idx(i.args[0]) + r) * i.iota_stride + idx(i.args[1]) + c;
          x = static_cast<double>(at / i.iota_div % i.iota_mod);
        } else {
          const int64_t at = idx(i.args[0]) + (i.axis == 0 ? r : c);
          if (i.opcode == Opcode::Iota) {
            x = static_cast<double>(at);
          } else {
            const int64_t lo = i.args.size() == 3 ? idx(i.args[2]) : 0;
            x = static_cast<uint64_t>(at - lo) < static_cast<uint64_t>(idx(i.args[1]) - lo);
          }
        }
        o[static_cast<size_t>(r * cols + c)] = x;
      }
  }

  void compute(const Inst& i) {
    const Type& t = type(i.results[0]);
    const int64_t rows = t.is_tile() ? rows_of(t) : 1, cols = t.is_tile() ? cols_of(t) : 1;
    std::vector<double> o(static_cast<size_t>(rows * cols));
    const bool reciprocal = i.op == Op::Div && t.is_tile() && count(type(i.args[1])) < count(t);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const double a = at(i.args[0], r, c);
        double x;
        switch (i.op) {
          case Op::Where:
            x = a != 0 ? at(i.args[1], r, c) : at(i.args[2], r, c);
            break;
          case Op::Fma:
            x = to_f32(std::fma(a, at(i.args[1], r, c), at(i.args[2], r, c)));
            break;
          case Op::Cast:
            x = rounded(t.dtype, a);
            break;
          default:
            if (i.args.size() == 1) {
              x = to_f32(reference_unary(i.op, a));
              if (i.flush_subnormal && std::fabs(x) < std::ldexp(1.0, -126)) x = 0;
            } else if (reciprocal) {  // a divisor broadcast over the result: its reciprocal times each
              x = to_f32(a * to_f32(1.0 / at(i.args[1], r, c)));
            } else {
              x = to_f32(reference_binary(i.op, a, at(i.args[1], r, c)));
            }
        }
        o[static_cast<size_t>(r * cols + c)] = x;
      }
    out(i).t = std::move(o);
  }

  // Along axis 1 into a one-column tile, a lanes tile (each thread's elements of a row), or a warps
  // tile (each warp's); a lanes tile's rows into warps; a warp_lanes tile's columns into one; or
  // along axis 0 each column. Elements a mask excludes count as the identity. In f32, in
  // codegen's order: each thread's elements in turn, then the threads' partials (lanes', warps')
  // pairwise, as shuffles combine them — a sum of 40000 elements in one running f32 sum strays
  // ten times further.
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
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        if (masked && at(i.args[1], r, c) == 0) continue;
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
    std::vector<double> o(static_cast<size_t>(out_size));
    for (int64_t k = 0; k < out_size; ++k) {
      double* x = &acc[static_cast<size_t>(k * parts)];
      for (int64_t step = 1; step < parts; step *= 2)
        for (int64_t j = 0; j + step < parts; j += 2 * step) x[j] = to_f32(reference_binary(combine, x[j], x[j + step]));
      o[static_cast<size_t>(k)] = x[0];
    }
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
    if (!cluster_) fail(fmt::format("{} outside a cluster", opcode_name(i.opcode)));
    std::vector<double> mine;
    for (int a : i.args) mine.insert(mine.end(), elems(a).begin(), elems(a).end());
    const std::vector<std::vector<double>> all = cluster_->exchange(static_cast<int>(id_ % n), std::move(mine));
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

  // ---- memory ----

  const Param& param(const Inst& i) const { return p_.params.at(static_cast<size_t>(i.param)); }
  // How far indices along axis d run: the view's extent, or the domain's rows where the
  // parameter's rows split into the domain's dimensions.
  static int64_t index_extent(const Param& prm, size_t d) {
    return d == 0 && !prm.row_dims.empty() ? num_elements(prm.row_dims) : prm.view.at(d);
  }
  // Whether index x along axis d of a load or store lies where its masks allow.
  bool inside(const Inst& i, size_t d, int64_t x) const {
    if (d >= i.masked.size() || !i.masked[d]) return true;
    const int limit = d < i.limits.size() ? i.limits[d] : -1;
    const int64_t hi = limit >= 0 ? idx(limit) : index_extent(param(i), d);
    const int64_t lo = d < i.lower.size() && i.lower[d] >= 0 ? idx(i.lower[d]) : 0;
    return x >= lo && x < hi;
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
    const int64_t elements = prm.workspace ? num_elements(prm.view) : static_cast<int64_t>(a.bytes / size);
    if (off < 0 || off >= elements)
      fail(fmt::format("{} of '{}' at element {}, outside its {} elements", what, prm.name, off, elements));
    return a.data + static_cast<size_t>(off) * size;
  }
  uint32_t& counter(const Inst& i) {
    const Param& ws = param(i);
    const HostArg& a = l_.args.at(static_cast<size_t>(i.param));
    const int64_t slot = idx(i.args[0]);
    const size_t at = static_cast<size_t>(num_elements(ws.view)) * 4 + static_cast<size_t>(slot) * 4;
    if (slot < 0 || at + 4 > a.bytes) fail(fmt::format("counter {} of '{}' outside its workspace", slot, ws.name));
    return *reinterpret_cast<uint32_t*>(a.data + at);
  }
  DType dtype_of(const Param& prm) const { return prm.workspace ? DType::F32 : prm.dtype; }

  // Each element of the result's shape at the offsets plus its position; where a mask excludes
  // it, NaN (codegen reads some element in bounds there: a value the program must not use),
  // except a shifted load's (zero outside the view).
  void load(const Inst& i) {
    const Param& prm = param(i);
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(t), cols = cols_of(t);
    std::vector<double> o(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t row = idx(i.args[0]) + (rows == 1 ? 0 : r);
        int64_t col = idx(i.args[1]) + (cols == 1 ? 0 : c);
        double& x = o[static_cast<size_t>(r * cols + c)];
        if (i.shift >= 0) {
          col -= idx(i.shift);
          x = col >= 0 && col < prm.view[1] ? read_element(element(i, offset(prm, row, col), "a load"), dtype_of(prm)) : 0.0;
          continue;
        }
        x = inside(i, 0, row) && inside(i, 1, col)
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
        const int64_t row = idx(i.args[0]) + (rows == 1 ? 0 : r), col = idx(i.args[1]) + (cols == 1 ? 0 : c);
        if (!inside(i, 0, row) || !inside(i, 1, col)) continue;
        if (!prm.output && !prm.workspace) fail(fmt::format("a store to input '{}'", prm.name));
        write_element(element(i, offset(prm, row, col), "a store"), dtype_of(prm), at(v, r, c));
      }
  }

  int64_t stage(const Inst& i, int64_t s) const {
    const SharedRing& r = p_.shared.at(static_cast<size_t>(i.ring));
    if (s < 0 || s >= r.stages) fail(fmt::format("stage {} of ring @{} of {} stages", s, r.name, r.stages));
    return s;
  }
  std::vector<double>& stage_tile(const Inst& i, int64_t s) {
    return rings_.at(static_cast<size_t>(i.ring)).at(static_cast<size_t>(stage(i, s)));
  }

  // One row of the ring's tile from the parameter at (row, col), or — at or past the rows — the
  // end mark: the stage then holds the rows as its row.
  void fill_stage(const Inst& i) {
    const Param& prm = param(i);
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const int64_t row = idx(i.args[0]), col = idx(i.args[1]), rows = idx(i.args[3]);
    std::vector<double>& tile = stage_tile(i, idx(i.args[2]));
    stage_rows_[static_cast<size_t>(i.ring)][static_cast<size_t>(idx(i.args[2]))] = std::min(row, rows);
    if (row >= rows) return;
    for (int64_t c = 0; c < ring.tile.back(); ++c)
      tile[static_cast<size_t>(c)] = read_element(element(i, offset(prm, row, col + c), "a stage's fill"), dtype_of(prm));
  }

  // The parameter's tile at the offsets into a stage, zero where masked.
  void copy_async(const Inst& i) {
    const Param& prm = param(i);
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    std::vector<double>& tile = stage_tile(i, idx(i.args[2]));
    const int64_t rows = ring.tile[0], cols = ring.tile[1];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t row = idx(i.args[0]) + r, col = idx(i.args[1]) + c;
        tile[static_cast<size_t>(r * cols + c)] =
            inside(i, 0, row) && inside(i, 1, col)
                ? read_element(element(i, offset(prm, row, col), "an asynchronous copy"), dtype_of(prm))
                : 0.0;
      }
  }

  // The result's tile from a stage at (row, col) within it.
  void load_shared(const Inst& i) {
    const SharedRing& ring = p_.shared.at(static_cast<size_t>(i.ring));
    const std::vector<double>& tile = stage_tile(i, idx(i.args[0]));
    const Type& t = type(i.results[0]);
    const int64_t rows = rows_of(t), cols = cols_of(t), r0 = idx(i.args[1]), c0 = idx(i.args[2]);
    const int64_t ring_rows = ring.tile[ring.tile.size() - 2], ring_cols = ring.tile.back();
    std::vector<double> o(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        if (r0 + r >= ring_rows || c0 + c >= ring_cols)
          fail(fmt::format("a read of ring @{} at ({}, {}), outside its stage of {}", ring.name, r0 + r, c0 + c,
                           shape_str(ring.tile)));
        o[static_cast<size_t>(r * cols + c)] = tile[static_cast<size_t>((r0 + r) * ring_cols + c0 + c)];
      }
    out(i).t = std::move(o);
  }

  // acc + A·B: the products exact, their sum in f32 (as mma's).
  void dot(const Inst& i) {
    const Type& a = type(i.args[0]);
    const Type& acc = type(i.args[2]);
    const int64_t m = rows_of(acc), n = cols_of(acc), k = cols_of(a);
    std::vector<double> o = elems(i.args[2]);
    const std::vector<double>&x = elems(i.args[0]), &y = elems(i.args[1]);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (int64_t j = 0; j < k; ++j) s += x[static_cast<size_t>(r * k + j)] * y[static_cast<size_t>(j * n + c)];
        o[static_cast<size_t>(r * n + c)] = to_f32(o[static_cast<size_t>(r * n + c)] + s);
      }
    out(i).t = std::move(o);
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
  const int64_t id_;
  Rendezvous* cluster_;
  std::vector<Val> v_;
  std::vector<Val> yielded_;  // the last Yield's values
  std::vector<std::vector<std::vector<double>>> rings_;  // per ring, per stage: its tile
  std::vector<std::vector<int64_t>> stage_rows_;        // per ring, per stage: the row it holds
};

}  // namespace

std::string not_interpretable(const Program& p) {
  if (p.grid.size() != 1) return fmt::format("a grid of {} axes", p.grid.size());
  if (std::string op = first_unsupported(p.body); !op.empty()) return fmt::format("its {} op", op);
  return "";
}

void interpret(const Program& p, const std::vector<HostArg>& args, int64_t blocks) {
  if (std::string why = not_interpretable(p); !why.empty())
    throw UnsupportedError(fmt::format("kernel {} cannot be interpreted: {}", p.name, why));
  if (args.size() != p.params.size())
    throw Error(fmt::format("kernel {}: {} arguments for {} parameters", p.name, args.size(), p.params.size()));
  Launch launch{p, args, blocks > 0 ? blocks : p.grid[0], {}};
  const int n = p.cluster_blocks;
  if (launch.blocks % n != 0)
    throw Error(fmt::format("kernel {}: {} blocks are not whole clusters of {}", p.name, launch.blocks, n));
  if (n == 1) {
    for (int64_t b = 0; b < launch.blocks; ++b) Block(launch, b, nullptr).run();
    return;
  }
  for (int64_t first = 0; first < launch.blocks; first += n) {
    Rendezvous cluster(n);
    std::vector<std::exception_ptr> failed(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          Block(launch, first + r, &cluster).run();
          cluster.leave();
        } catch (const std::exception& e) {
          failed[static_cast<size_t>(r)] = std::current_exception();
          cluster.fail(e.what());
        }
      });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : failed)
      if (e) std::rethrow_exception(e);
  }
}

}  // namespace tilefuse::tir
