#include "compiler/tile/ir_verify.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "compiler/support/error.h"

namespace tilefuse::tir {

namespace {

class Verifier {
  // The threads running the instructions being checked: the whole block, or one side of a
  // Specialize.
  enum class Role { Block, Producer, Consumers };

 public:
  explicit Verifier(const Program& p) : p_(p) {}

  std::vector<std::string> run() {
    if (p_.grid.empty()) problem("the program has no grid");
    for (int64_t g : p_.grid)
      if (g <= 0) problem(fmt::format("grid extent {} is not positive", g));
    const size_t rank = p_.layout.threads.size();
    if (rank == 0 || p_.layout.per_thread.size() != rank || p_.layout.reps.size() != rank)
      problem("the layout's lists are empty or of different lengths");
    if (p_.block_threads() > 1024) problem(fmt::format("{} threads per block, more than 1024", p_.block_threads()));
    if (p_.mma && p_.mma->threads() != p_.block_threads())
      problem(fmt::format("the mma arrangement has {} threads, the layout {}", p_.mma->threads(), p_.block_threads()));
    for (size_t i = 0; i < p_.params.size(); ++i) {
      const Param& prm = p_.params[i];
      if (prm.view.size() != rank)
        problem(fmt::format("%arg{}'s view {} is not of the layout's rank {}", i, shape_str(prm.view), rank));
      if (prm.row_dims.size() != prm.row_view.size() || !broadcasts_to(prm.row_view, prm.row_dims) ||
          (!prm.row_dims.empty() && num_elements(prm.row_view) != prm.view.at(0)))
        problem(fmt::format("%arg{}'s rows {} as {} do not split its view {}", i, shape_str(prm.row_dims),
                            shape_str(prm.row_view), shape_str(prm.view)));
      if (prm.elem_dims.size() != prm.elem_view.size() || !broadcasts_to(prm.elem_view, prm.elem_dims) ||
          (!prm.elem_dims.empty() && (num_elements(prm.elem_dims) != num_elements(prm.view) || !prm.row_dims.empty())))
        problem(fmt::format("%arg{}'s elements {} as {} do not cover its view {}", i, shape_str(prm.elem_dims),
                            shape_str(prm.elem_view), shape_str(prm.view)));
    }
    specialization();
    std::set<int> scope;
    region(p_.body, scope, false);
    bool sums_in_flight = false;
    sums_waited(p_.body, &sums_in_flight);
    return problems_;
  }

 private:
  void problem(std::string s) { problems_.push_back(std::move(s)); }
  const Type& type(int v) const { return p_.types.at(static_cast<size_t>(v)); }
  std::string where(const Inst& i) const {
    return fmt::format("{}{}", i.results.empty() ? "" : fmt::format("%{} = ", i.results[0]),
                       i.opcode == Opcode::Compute || i.opcode == Opcode::Reduce ? op_info(i.op).name : opcode_name(i.opcode));
  }

  bool is_index(int v) const { return type(v).kind == Type::Kind::Index; }

  // Sums added by TMA (TmaStore reduce_add) are complete only once waited for (WaitStores): none
  // may be in flight where the block counts itself in (LastArrival) and the last block reads
  // them. In program order, loops' bodies as they stand.
  void sums_waited(const Region& r, bool* in_flight) {
    for (const Inst& i : r.body) {
      if (i.opcode == Opcode::TmaStore && i.reduce_add) *in_flight = true;
      if (i.opcode == Opcode::WaitStores) *in_flight = false;
      if (i.opcode == Opcode::LastArrival && *in_flight)
        problem(fmt::format("{}: counts the block in with its sums by TMA not waited for (wait_stores)",
                            where(i)));
      for (const Region& inner : i.regions) sums_waited(inner, in_flight);
    }
  }

  // A fragment's extents: the warps' tile of its kind (or 1 along an axis of an accumulator).
  void check_fragment(const Inst& i, const Type& t) {
    if (!p_.mma) {
      problem(fmt::format("{}: a {} tile in a program without an mma arrangement", where(i), frag_name(t.frag)));
      return;
    }
    const MmaConfig& m = *p_.mma;
    const int64_t rows = int64_t{m.warps_m} * m.warp_m, cols = int64_t{m.warps_n} * m.warp_n;
    const Shape want = t.frag == Frag::A ? Shape{rows, 16} : t.frag == Frag::B ? Shape{16, cols} : Shape{rows, cols};
    bool fits = t.shape.size() == 2;
    for (size_t d = 0; fits && d < 2; ++d)
      fits = t.shape[d] == want[d] || (t.frag == Frag::Acc && t.shape[d] == 1);
    // B and accumulator tiles may span other widths than the program's warp_n (an attention's
    // scores and output): whole 16-column pieces (B: an ldmatrix.x4 pair) or 8 (an accumulator)
    // per warp.
    if (!fits && t.shape.size() == 2 && t.shape[0] == want[0] && t.frag != Frag::A)
      fits = t.shape[1] % (int64_t{m.warps_n} * (t.frag == Frag::B ? 16 : 8)) == 0;
    if (!fits) problem(fmt::format("{}: {} is not a {} tile of {}", where(i), type_str(t), frag_name(t.frag), shape_str(want)));
  }

  // A register tile must cover the layout's tile along each axis, or be 1 (the same along it).
  void check_tile_shape(const Inst& i, const Type& t) {
    if (!t.is_tile()) return;
    if (per_thread_columns(t.frag)) {  // rows as the blocked layout's, a column per thread or warp
      const int threads = p_.layout.threads.size() == 2 ? p_.layout.threads[1] : 0;
      const bool lanes = t.frag == Frag::Lanes;
      int64_t columns = threads;  // lanes: a column a thread
      if (t.frag == Frag::Warps) columns = threads / 32;
      if (t.frag == Frag::WarpLanes)  // the row's warps or a cluster's blocks, over a warp's lanes
        columns = t.shape.size() == 2 ? t.shape[1] : 0;
      const bool warps_ok = threads % 32 == 0 && columns >= 2 && columns <= 32;
      if (t.shape.size() != 2 || (t.shape[0] != 1 && t.shape[0] != p_.layout.extent(0)) || t.shape[1] != columns ||
          t.space != Space::Reg || (!lanes && !warps_ok))
        problem(fmt::format("{}: {} is not a {} tile of the layout ([1 or {}, {}]{})", where(i), type_str(t),
                            frag_name(t.frag), p_.layout.extent(0), columns,
                            lanes ? "" : ", 2 to 32 columns, rows of whole warps"));
      return;
    }
    if (t.frag != Frag::None) return check_fragment(i, t);
    if (t.shape.size() != p_.layout.threads.size()) {
      problem(fmt::format("{}: {} is not of the layout's rank", where(i), type_str(t)));
      return;
    }
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (t.space == Space::Reg && t.shape[d] != 1 && t.shape[d] != p_.layout.extent(d))
        problem(fmt::format("{}: {} spans {} along axis {}, the layout's tile {}", where(i), type_str(t), t.shape[d], d,
                            p_.layout.extent(d)));
  }

  void memory(const Inst& i, bool store) {
    if (i.param < 0 || i.param >= static_cast<int>(p_.params.size())) {
      problem(fmt::format("{}: no parameter %arg{}", where(i), i.param));
      return;
    }
    const Param& prm = p_.params[static_cast<size_t>(i.param)];
    if (prm.output != store && !prm.workspace)
      problem(fmt::format("{}: %arg{} is {}", where(i), i.param, prm.output ? "an output" : "an input"));
    for (int limit : i.limits)
      if (limit >= 0 && !is_index(limit)) problem(fmt::format("{}: a mask's limit %{} is not an index", where(i), limit));
    if (i.window != 0) window(i, prm, store);
    const size_t offsets = i.args.size() - (store ? 1 : 0);
    if (!i.masked.empty() && i.masked.size() != offsets)
      problem(fmt::format("{}: masks {} axes of {}", where(i), i.masked.size(), offsets));
    if (offsets != prm.view.size())
      problem(fmt::format("{}: {} offsets into a view of rank {}", where(i), offsets, prm.view.size()));
    for (size_t k = 0; k < offsets && k < i.args.size(); ++k)
      if (!is_index(i.args[k])) problem(fmt::format("{}: offset {} is not an index", where(i), k));
    const Type& t = store ? type(i.args.back()) : type(i.results.at(0));
    if (!t.is_tile() || t.dtype != prm.dtype) {
      problem(fmt::format("{}: {} is not a tile of %arg{}'s dtype {}", where(i), type_str(t), i.param, dtype_name(prm.dtype)));
      return;
    }
    check_tile_shape(i, t);
    // (A tile may pass a view one element wide where it is masked there: a matmul's K of 1.)
    for (size_t d = 0; d < t.shape.size() && d < prm.view.size(); ++d)
      if (prm.view[d] == 1 && t.shape[d] != 1 && !(d < i.masked.size() && i.masked[d]) && !(d == 0 && i.window))
        problem(fmt::format("{}: %arg{} is broadcast along axis {}, but the tile spans {}", where(i), i.param, d, t.shape[d]));
  }

  // A windowed row's load or store: a row-major view of rows at least a vector wide, its columns
  // masked against the row's own (no other limit); a store's tensor laid out like the rows
  // (whole vectors at the windows' aligned starts; a view of one row, a tile of one row).
  void window(const Inst& i, const Param& prm, bool store) {
    const bool columns = i.masked.size() == 2 && i.masked[1] && (i.limits.size() < 2 || i.limits[1] < 0);
    if (prm.view.size() != 2 || prm.view[1] < i.window || prm.col_major || !prm.elem_dims.empty() || !columns ||
        prm.workspace)
      problem(fmt::format("{}: a window of {} needs a row-major view of rows at least that wide and its columns "
                          "masked against the row's",
                          where(i), i.window));
    if (i.args.empty() || (!store && i.results.empty())) return;
    const Type& t = store ? type(i.args.back()) : type(i.results[0]);
    if (!t.is_tile() || t.shape.size() != 2 || t.shape[1] == 1)
      problem(fmt::format("{}: a windowed row's tile spans its columns", where(i)));
    else if (store && (!prm.row_dims.empty() || (prm.view[0] == 1 && t.shape[0] != 1)))
      problem(fmt::format("{}: a windowed store to %arg{}, which is not laid out as the rows", where(i), i.param));
  }

  const SharedRing* ring_of(const Inst& i) {
    if (i.ring < 0 || i.ring >= static_cast<int>(p_.shared.size())) {
      problem(fmt::format("{}: no shared ring {}", where(i), i.ring));
      return nullptr;
    }
    const SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    if (r.staging != (i.opcode == Opcode::TmaStore))
      problem(fmt::format("{}: @{} is {}a staging ring", where(i), r.name, r.staging ? "" : "not "));
    return &r;
  }

  // The parameter a copy into ring `r` reads (an input of the ring's dtype and layout), or null.
  const Param* input_of(const Inst& i, const SharedRing& r) {
    if (i.param < 0 || i.param >= static_cast<int>(p_.params.size())) {
      problem(fmt::format("{}: no parameter %arg{}", where(i), i.param));
      return nullptr;
    }
    const Param& prm = p_.params[static_cast<size_t>(i.param)];
    if (prm.output || prm.workspace) problem(fmt::format("{}: %arg{} is not an input", where(i), i.param));
    if (prm.dtype != r.dtype || prm.col_major != r.col_major)
      problem(fmt::format("{}: @{} holds {}{} tiles, %arg{} is {}{}", where(i), r.name, dtype_name(r.dtype),
                          r.col_major ? " column-major" : "", i.param, dtype_name(prm.dtype),
                          prm.col_major ? " column-major" : ""));
    return &prm;
  }

  // A copy of a tile of an input into a ring stage: whole 16-byte chunks along the memory's
  // contiguous axis, in the ring's order, aligned in the parameter.
  void copy_async(const Inst& i) {
    const SharedRing* r = ring_of(i);
    if (!r) return;
    const Param* in = input_of(i, *r);
    if (!in) return;
    const Param& prm = *in;
    if (i.args.size() != 3) {
      problem(fmt::format("{}: needs a row, a column and a stage", where(i)));
      return;
    }
    for (int a : i.args)
      if (!is_index(a)) problem(fmt::format("{}: %{} is not an index", where(i), a));
    const int64_t chunk = 16 / static_cast<int64_t>(dtype_size(r->dtype));
    const int64_t along = r->tile.at(r->col_major ? 0 : 1), run = prm.col_major ? prm.group_rows : prm.view.at(1);
    if (along % chunk != 0 || run % chunk != 0)
      problem(fmt::format("{}: copies 16-byte chunks, but @{}'s rows hold {} elements and %arg{}'s {}", where(i),
                          r->name, along, i.param, run));
  }

  // A specialized program ends its body with its one Specialize, and its TMA rings are read
  // nowhere else; TMA rings exist only there, and the registers split as setmaxnreg allows (24
  // to 256, multiples of 8, within the SM's 64 Ki registers for one block).
  void specialization() {
    const std::vector<Inst>& body = p_.body.body;
    size_t count = 0;
    for (const Inst& i : body) count += i.opcode == Opcode::Specialize;
    const bool last = !body.empty() && body.back().opcode == Opcode::Specialize;
    if (p_.specialized() && count == 0) problem("registers are split for a producer, but the body does not specialize");
    if (!p_.specialized() && count > 0) problem("the body specializes, but the program sets no producer and consumer registers");
    if (count > 1 || (count == 1 && !last)) problem("a warp-specialized program ends its body with its one specialize");
    bool tma_rings = false;
    for (const SharedRing& r : p_.shared) tma_rings |= r.tma;
    if (tma_rings && !p_.specialized()) problem("TMA rings need a warp-specialized program");
    for (const SharedRing& r : p_.shared)
      if (r.staging && (r.tma || r.wgmma || r.col_major || !p_.specialized()))
        problem(fmt::format("@{}: a staging ring is only TmaStore's, in a warp-specialized program", r.name));
    // (A row shared by a cluster's blocks: up to 16, the non-portable size the H200 allows.)
    if (p_.cluster_blocks < 1 || p_.cluster_blocks > (p_.specialized() ? 8 : 16) ||
        (p_.cluster_blocks > 1 && !p_.grid.empty() && p_.grid[0] % p_.cluster_blocks != 0))
      problem(fmt::format("clusters of {} blocks: 2 to 8 (a specialized program's) or 16 dividing its grid",
                          p_.cluster_blocks));
    if (p_.consumer_groups > 1 && p_.cluster_blocks > 1)
      problem("ping-pong consumer groups in clusters: not supported (the groups' tiles are the block's, not the cluster's)");
    if (p_.consumer_groups != 1 && (p_.consumer_groups != 2 || !p_.specialized()))
      problem(fmt::format("{} consumer groups: a specialized program has 1, or 2 taking turns", p_.consumer_groups));
    if (!p_.specialized()) return;
    for (int regs : {p_.producer_registers, p_.consumer_registers})
      if (regs < 24 || regs > 256 || regs % 8 != 0)
        problem(fmt::format("setmaxnreg takes 24 to 256 registers in steps of 8, not {}", regs));
    if (p_.block_threads() % Program::kProducerThreads != 0 ||
        int64_t{p_.producer_registers} * Program::kProducerThreads +
                int64_t{p_.consumer_registers} * p_.block_threads() * p_.consumer_groups >
            int64_t{p_.entry_registers()} * p_.launch_threads())
      problem(fmt::format("{} consumer threads (whole warpgroups) at {} registers and a producer warpgroup at {} "
                          "exceed the block's {} ({} threads at {} each)",
                          p_.block_threads() * p_.consumer_groups, p_.consumer_registers, p_.producer_registers,
                          p_.entry_registers() * p_.launch_threads(), p_.launch_threads(), p_.entry_registers()));
  }
  const SharedRing* tma_ring_of(const Inst& i) {
    const SharedRing* r = ring_of(i);
    if (r && !r->tma) problem(fmt::format("{}: @{} is not a TMA ring", where(i), r->name));
    return r;
  }
  void role(const Inst& i, Role want) {
    if (role_ != want)
      problem(fmt::format("{}: runs in the {} region only", where(i), want == Role::Producer ? "producer" : "consumers'"));
  }

  // A TMA copy of an input's tile into a TMA ring's stage: boxes of 128-byte lines (64 16-bit
  // elements) across the ring's stored rows, at most 256 of them, in a tensor map of batches of
  // tma_rows rows whose strides are whole 16 bytes.
  void tma_load(const Inst& i) {
    role(i, Role::Producer);
    const SharedRing* r = tma_ring_of(i);
    if (!r) return;
    const Param* in = input_of(i, *r);
    if (!in) return;
    const Param& prm = *in;
    if (dtype_size(prm.dtype) != 2) problem(fmt::format("{}: TMA rings hold 16-bit tiles", where(i)));
    if (i.args.size() != 4) {
      problem(fmt::format("{}: needs a batch, a row, a column and a stage", where(i)));
      return;
    }
    for (int a : i.args)
      if (!is_index(a)) problem(fmt::format("{}: %{} is not an index", where(i), a));
    const int64_t line = r->tile.at(r->col_major ? 0 : 1), lines = r->tile.at(r->col_major ? 1 : 0);
    const int64_t run = prm.col_major ? prm.group_rows : prm.view.at(1);
    if (line % 64 != 0 || lines > 256 || lines % 8 != 0)
      problem(fmt::format("{}: @{}'s stored rows are {} elements, {} of them: TMA boxes need whole 64-element lines "
                          "and at most 256 rows, a multiple of 8",
                          where(i), r->name, line, lines));
    // (A column-major operand copied into a padded pitch has fewer rows than its pitch.)
    const int64_t panels = line / 64;
    if (i.multicast && (p_.cluster_blocks < 2 || panels % p_.cluster_blocks != 0))
      problem(fmt::format("{}: multicast shares @{}'s {} panels out over a cluster of {} blocks", where(i), r->name,
                          panels, p_.cluster_blocks));
    if (prm.tma_rows <= 0 || (prm.view.at(0) % prm.tma_rows != 0 && prm.view.at(0) > prm.tma_rows) || (prm.col_major && prm.group_rows != prm.tma_rows) ||
        run % 8 != 0)
      problem(fmt::format("{}: %arg{} has no tensor map of whole batches with 16-byte strides (tma_rows {}, view {})",
                          where(i), i.param, prm.tma_rows, shape_str(prm.view)));
  }
  // A TMA store of an accumulator tile (a warpgroup's 64 rows at a time, whole 128-byte panels
  // of columns) to an output through staging slots of its dtype, a panel each, split evenly
  // over the consumer groups; the output's tensor map of whole batches with 16-byte strides.
  void tma_store(const Inst& i) {
    role(i, Role::Consumers);
    const SharedRing* r = ring_of(i);
    if (!r) return;
    if (i.param < 0 || i.param >= static_cast<int>(p_.params.size())) {
      problem(fmt::format("{}: no parameter %arg{}", where(i), i.param));
      return;
    }
    if (i.args.size() != 4) {
      problem(fmt::format("{}: needs a batch, a row, a column and a tile", where(i)));
      return;
    }
    for (size_t a = 0; a < 3; ++a)
      if (!is_index(i.args[a])) problem(fmt::format("{}: %{} is not an index", where(i), i.args[a]));
    const Param& prm = p_.params[static_cast<size_t>(i.param)];
    const Type& t = type(i.args[3]);
    const int64_t size = static_cast<int64_t>(dtype_size(prm.dtype));
    if (i.by_warpgroup && (!i.regions.empty() || p_.consumer_groups != 1))
      problem(
          fmt::format("{}: a store by warpgroup has no epilogue region and one consumer group", where(i)));
    // (Added into: an f32 workspace, whose stored rows may be its view's columns.)
    const bool sums = i.reduce_add && prm.workspace && prm.dtype == DType::F32;
    if (i.reduce_add && !sums)
      problem(fmt::format("{}: %arg{} is not an f32 workspace to add into", where(i), i.param));
    if ((!prm.output && !sums) || (prm.col_major && !sums) || !prm.row_dims.empty() ||
        !prm.elem_dims.empty() || size == 1 || size > 4)
      problem(fmt::format("{}: %arg{} is not a row-major output of 16- or 32-bit elements", where(i), i.param));
    if (!r->staging || r->dtype != prm.dtype || r->tile.at(1) * size != 128 || r->stages % p_.consumer_groups != 0)
      problem(fmt::format("{}: @{} is not a staging ring of 128-byte {} rows, its slots shared evenly by the groups",
                          where(i), r->name, dtype_name(prm.dtype)));
    // (Each panel waits until at most the group's other slots are still read: a slot is written
    // again only after its last copy read it where the panels take the slots in turn evenly.)
    const int64_t group_slots = std::max(1, r->stages / p_.consumer_groups);
    if (!i.by_warpgroup && t.shape.size() == 2 && (t.shape[1] * size / 128) % group_slots != 0)
      problem(fmt::format("{}: {} panels through {} slots a group: a slot would be written while read",
                          where(i), t.shape[1] * size / 128, group_slots));
    if (t.frag != Frag::Acc || !p_.mma || p_.mma->warps_n != 1 || t.shape.size() != 2 || t.shape[0] % 64 != 0 ||
        t.shape[0] != r->tile.at(0) || t.shape[1] * size % 128 != 0 || t.shape[0] > 256)
      problem(fmt::format("{}: stores {} through @{}: an accumulator of warpgroups (64-row slabs, at most 256 rows, "
                          "the ring's), whole 128-byte panels wide",
                          where(i), type_str(t), r->name));
    const int64_t run = prm.col_major ? prm.group_rows : prm.view.at(1);
    if (prm.tma_rows <= 0 || (prm.view.at(0) % prm.tma_rows != 0 && prm.view.at(0) > prm.tma_rows) ||
        (prm.col_major && prm.group_rows != prm.tma_rows) || run * size % 16 != 0)
      problem(fmt::format("{}: %arg{} has no tensor map of whole batches with 16-byte strides (tma_rows {}, view {})",
                          where(i), i.param, prm.tma_rows, shape_str(prm.view)));
  }
  // A TmaStore's epilogue region: a staged chunk (a blocked tile of the output's dtype, rows of
  // 128 bytes a 16-byte piece a thread) and its row and column; it yields a tile of that type.
  void staged_epilogue(const Inst& i) {
    const Region& r = i.regions[0];
    const Param* prm = i.param >= 0 && i.param < static_cast<int>(p_.params.size())
                           ? &p_.params[static_cast<size_t>(i.param)]
                           : nullptr;
    if (i.regions.size() != 1 || r.args.size() != 3 || !prm || r.body.empty() ||
        r.body.back().opcode != Opcode::Yield || r.body.back().args.size() != 1) {
      problem(fmt::format(
          "{}: an epilogue region takes a staged chunk, its row and column, and yields one tile", where(i)));
      return;
    }
    const Type& t = type(r.args[0]);
    const int64_t size = static_cast<int64_t>(dtype_size(prm->dtype));
    const Layout& l = p_.layout;
    if (!t.is_tile() || t.frag != Frag::None || t.dtype != prm->dtype || t.shape.size() != 2 ||
        l.per_thread.size() != 2 || l.per_thread[0] != 1 || l.per_thread[1] * size != 16 ||
        l.threads[1] != 8 || l.reps != std::vector<int>{1, 1} || p_.consumer_groups != 1 ||
        t.shape[0] != l.extent(0) || t.shape[1] != l.extent(1))
      problem(
          fmt::format("{}: the staged chunk {} is not a blocked tile of {} rows of 128 bytes, 16 bytes a "
                      "thread, of one consumer group",
                      where(i), type_str(t), dtype_name(prm->dtype)));
    if (!is_index(r.args[1]) || !is_index(r.args[2]))
      problem(fmt::format("{}: the chunk's row and column are indices", where(i)));
    const Type& y = type(r.body.back().args[0]);
    if (y != t)
      problem(
          fmt::format("{}: the epilogue yields {}, not the chunk's {}", where(i), type_str(y), type_str(t)));
  }
  // Turns between two consumer groups (no args), or at steps between one group's two
  // warpgroups (the step, and for HandOff the steps' count).
  void turns(const Inst& i) {
    role(i, Role::Consumers);
    if (i.args.empty()) {
      if (p_.consumer_groups != 2) problem(fmt::format("{}: needs two consumer groups", where(i)));
      return;
    }
    if (i.args.size() != (i.opcode == Opcode::AwaitTurn ? 1u : 2u))
      problem(fmt::format("{}: needs a step{}", where(i), i.opcode == Opcode::AwaitTurn ? "" : " and the steps' count"));
    if (p_.consumer_groups != 1 || p_.block_threads() != 256)
      problem(fmt::format("{}: turns at steps are between one consumer group's two warpgroups", where(i)));
    for (int a : i.args)
      if (!is_index(a)) problem(fmt::format("{}: %{} is not an index", where(i), a));
  }
  void stage_sync(const Inst& i) {
    const bool bulk = i.opcode == Opcode::WaitFull && i.ring >= 0 && i.ring < static_cast<int>(p_.shared.size()) &&
                      p_.shared[static_cast<size_t>(i.ring)].bulk;
    if (bulk) {  // (the block waits for a row its first thread filled)
      if (p_.specialized()) problem(fmt::format("{}: waits for a bulk ring's row in a specialized program", where(i)));
    } else {
      role(i, i.opcode == Opcode::WaitEmpty ? Role::Producer : Role::Consumers);
      tma_ring_of(i);
    }
    if (i.args.size() != (i.opcode == Opcode::Release ? 1u : 2u)) {
      problem(fmt::format("{}: needs a stage{}", where(i), i.opcode == Opcode::Release ? "" : " and a parity"));
      return;
    }
    for (int a : i.args)
      if (!is_index(a)) problem(fmt::format("{}: %{} is not an index", where(i), a));
  }
  // The producer only counts, waits and copies.
  void producer_inst(const Inst& i) {
    switch (i.opcode) {
      case Opcode::Const:
      case Opcode::IndexMul:
      case Opcode::IndexAdd:
      case Opcode::IndexDiv:
      case Opcode::IndexRem:
      case Opcode::IndexMin:
      case Opcode::IndexSub:
      case Opcode::For:
      case Opcode::Yield:
      case Opcode::TmaLoad:
      case Opcode::WaitEmpty:
        if (i.opcode != Opcode::Const || type(i.results.at(0)).kind == Type::Kind::Index) return;
        break;
      default:
        break;
    }
    problem(fmt::format("{}: the producer region only computes indices, loops, waits for empty stages and copies",
                        where(i)));
  }

  void load_shared(const Inst& i) {
    const SharedRing* r = ring_of(i);
    const Type& t = type(i.results.at(0));
    if (!r) return;
    if (r->bulk) {  // a row of the stage in the blocked layout, from a column on
      if (t.frag != Frag::None || t.space != Space::Reg || t.dtype != r->dtype || t.shape.size() != 2 ||
          t.shape[0] != 1 || t.shape[1] > r->tile.at(1))
        problem(fmt::format("{}: {} from @{}'s rows of {} {}", where(i), type_str(t), r->name, r->tile.at(1),
                            dtype_name(r->dtype)));
      if (i.args.size() != 3) problem(fmt::format("{}: needs a stage, a row and a column", where(i)));
      for (int a : i.args)
        if (!is_index(a)) problem(fmt::format("{}: %{} is not an index", where(i), a));
      check_tile_shape(i, t);
      return;
    }
    if (t.frag != Frag::A && t.frag != Frag::B)
      problem(fmt::format("{}: loads mma_a or mma_b fragments from shared memory, not {}", where(i), type_str(t)));
    if (t.dtype != r->dtype || dtype_size(r->dtype) != 2)
      problem(fmt::format("{}: {} from @{} of {}", where(i), type_str(t), r->name, dtype_name(r->dtype)));
    if (i.args.size() != 3) problem(fmt::format("{}: needs a stage, a row and a column", where(i)));
    for (int a : i.args)
      if (!is_index(a)) problem(fmt::format("{}: %{} is not an index", where(i), a));
    check_tile_shape(i, t);
    if (i.transposed && r->tile.size() != 2)
      problem(fmt::format("{}: a transposed read of @{}", where(i), r->name));
    for (size_t d = 0; d < 2 && d < t.shape.size(); ++d)
      if (t.shape[d] > r->tile.at(i.transposed ? 1 - d : d))
        problem(fmt::format("{}: {} is larger than @{}'s tile {}", where(i), type_str(t), r->name, shape_str(r->tile)));
  }

  // A register tile of the stage's shape (or, transposed, its transpose's), a 16-bit ring's whole
  // stage: an accumulator whose rows lie along the stored rows (a row-major ring written as it
  // is, a column-major one transposed), in whole 16-column pieces, in a program on wgmma — codegen
  // writes it by stmatrix (sm_90).
  void store_shared(const Inst& i) {
    if (i.ring < 0 || i.ring >= static_cast<int>(p_.shared.size()) || i.args.size() != 2) {
      problem(fmt::format("{}: needs a ring, a stage and a tile", where(i)));
      return;
    }
    const SharedRing& r = p_.shared[static_cast<size_t>(i.ring)];
    const Type& t = type(i.args[1]);
    if (!is_index(i.args[0])) problem(fmt::format("{}: the stage is not an index", where(i)));
    const bool fits = t.is_tile() && t.space == Space::Reg && t.shape.size() == 2 && r.tile.size() == 2 &&
                      t.shape[0] == r.tile[i.transposed ? 1 : 0] &&
                      t.shape[1] == r.tile[i.transposed ? 0 : 1];
    if (!fits || t.frag != Frag::Acc || dtype_size(r.dtype) != 2 || r.tma || r.bulk || r.staging ||
        r.col_major != i.transposed || t.shape[1] % 16 != 0 || !p_.uses_wgmma())
      problem(fmt::format(
          "{}: {} into @{}'s stage of {} {}{} (an accumulator of whole 16-column pieces, its rows "
          "along the stored rows, in a program on wgmma)",
          where(i), type_str(t), r.name, shape_str(r.tile), dtype_name(r.dtype),
          i.transposed ? " (transposed)" : ""));
  }

  // A reduction's mask: a blocked bool tile broadcast to the reduced (blocked) tile's shape.
  void reduce_mask(const Inst& i, const Type& t) {
    const Type& m = type(i.args[1]);
    bool ok = m.is_tile() && m.dtype == DType::Bool && m.frag == Frag::None && t.frag == Frag::None &&
              m.shape.size() == t.shape.size();
    for (size_t d = 0; ok && d < m.shape.size(); ++d) ok = m.shape[d] == t.shape[d] || m.shape[d] == 1;
    if (!ok) problem(fmt::format("{}: mask {} does not broadcast to {}", where(i), type_str(m), type_str(t)));
  }

  void compute(const Inst& i) {
    const Type& r = type(i.results.at(0));
    const OpInfo& info = op_info(i.op);
    size_t arity = info.kind == OpKind::Unary ? 1 : info.kind == OpKind::Select || info.kind == OpKind::Ternary ? 3 : 2;
    if (info.kind == OpKind::Reduce || info.kind == OpKind::Leaf || info.kind == OpKind::Contract) {
      problem(fmt::format("{}: not an elementwise op", where(i)));
      return;
    }
    if (i.nonpositive_arg && i.op != Op::Exp)
      problem(fmt::format("{}: only exp takes 'nonpositive'", where(i)));
    if (i.flush_subnormal && (i.op != Op::Exp2 || type(i.results[0]).dtype != DType::F32))
      problem(fmt::format("{}: only an f32 exp2 takes 'ftz'", where(i)));
    if (i.absolute_error && (i.op != Op::Tanh || type(i.results[0]).dtype != DType::F32))
      problem(fmt::format("{}: only an f32 tanh takes 'abs'", where(i)));
    if (i.skip_ones && (i.op != Op::Mul || r.dtype != DType::F32 || i.args.size() != 2 ||
                        !type(i.args[0]).is_tile() || !type(i.args[1]).is_tile()))
      problem(fmt::format("{}: only an f32 mul of two tiles takes 'lazy'", where(i)));
    if (i.args.size() != arity) {
      problem(fmt::format("{}: {} operands, needs {}", where(i), i.args.size(), arity));
      return;
    }
    Shape shape;
    for (int a : i.args) {
      const Type& t = type(a);
      if (t.kind == Type::Kind::Index) problem(fmt::format("{}: operand %{} is an index", where(i), a));
      if (!t.is_tile()) continue;
      // A one-column tile is the same blocked or a value per thread (lanes, warps, warp_lanes).
      const bool one_column = t.shape.size() == 2 && t.shape[1] == 1;
      const bool per_thread_pair = (per_thread_columns(t.frag) && r.frag == Frag::None) ||
                                   (t.frag == Frag::None && per_thread_columns(r.frag));
      if (r.is_tile() && t.frag != r.frag && !(per_thread_pair && one_column))
        problem(fmt::format("{}: operand %{} is {}, the result {}", where(i), a, frag_name(t.frag), frag_name(r.frag)));
      if (r.is_tile() && per_thread_columns(r.frag) && t.frag == Frag::None && !one_column && t.shape.size() == 2)
        problem(fmt::format("{}: a blocked operand %{} of a {} result spans the columns", where(i), a,
                            frag_name(r.frag)));
      try {
        shape = shape.empty() ? t.shape : broadcast_shapes(shape, t.shape, "tile op");
      } catch (const ShapeError& e) {
        problem(fmt::format("{}: {}", where(i), e.what()));
      }
    }
    if ((shape.empty() ? !(r.kind == Type::Kind::Scalar) : !(r.is_tile() && r.shape == shape)))
      problem(fmt::format("{}: result {} is not the broadcast of its operands", where(i), type_str(r)));
    auto dt = [&](size_t k) { return type(i.args[k]).dtype; };
    // 16-bit values are held and computed in f32 (rounded where cast or stored), so an f32
    // operand of a 16-bit result is taken as it is (a reduction's f32 sum, a row's width).
    auto held = [](DType d) { return dtype_size(d) == 2 ? DType::F32 : d; };
    auto fits = [&](size_t k) { return dt(k) == r.dtype || (dt(k) == DType::F32 && held(r.dtype) == DType::F32); };
    bool ok = true;
    switch (info.kind) {
      case OpKind::Unary:
        ok = i.op == Op::Cast || fits(0);
        break;
      case OpKind::Binary:
        ok = fits(0) && fits(1);
        break;
      case OpKind::Compare:
        ok = held(dt(0)) == held(dt(1)) && r.dtype == DType::Bool;
        break;
      case OpKind::Select:
        ok = dt(0) == DType::Bool && fits(1) && fits(2);
        break;
      case OpKind::Ternary:
        ok = fits(0) && fits(1) && fits(2);
        break;
      default:
        break;
    }
    if (!ok) problem(fmt::format("{}: operand dtypes do not fit {}", where(i), type_str(r)));
    check_tile_shape(i, r);
  }

  void loop(const Inst& i, std::set<int> scope) {
    if (i.regions.size() != 1 || i.args.size() < 3) {
      problem(fmt::format("{}: needs bounds, a step and one region", where(i)));
      return;
    }
    for (size_t k = 0; k < 3; ++k)
      if (!is_index(i.args[k])) problem(fmt::format("{}: bound or step %{} is not an index", where(i), i.args[k]));
    const Region& r = i.regions[0];
    const size_t carried = i.args.size() - 3;
    if (r.args.size() != carried + 1 || i.results.size() != carried) {
      problem(fmt::format("{}: {} initial values, {} region arguments, {} results", where(i), carried, r.args.size(), i.results.size()));
      return;
    }
    if (!is_index(r.args[0])) problem(fmt::format("{}: the induction variable is not an index", where(i)));
    for (size_t k = 0; k < carried; ++k)
      if (type(i.args[3 + k]) != type(r.args[1 + k]) || type(r.args[1 + k]) != type(i.results[k]))
        problem(fmt::format("{}: carried value {} changes type", where(i), k));
    for (int a : r.args) scope.insert(a);
    region(r, scope, true);
    if (r.body.empty() || r.body.back().opcode != Opcode::Yield) {
      problem(fmt::format("{}: its region does not end with a yield", where(i)));
      return;
    }
    const Inst& y = r.body.back();
    if (y.args.size() != carried) {
      problem(fmt::format("{}: yields {} values for {} carried", where(i), y.args.size(), carried));
      return;
    }
    for (size_t k = 0; k < carried; ++k)
      if (type(y.args[k]) != type(r.args[1 + k]))
        problem(fmt::format("{}: yields {} for carried value {} of {}", where(i), type_str(type(y.args[k])), k,
                            type_str(type(r.args[1 + k]))));
  }

  // A ticket (the block's first thread's) goes only where that thread runs for the block — the
  // row of a fill_stage, the ticket a claim keeps — or around a loop.
  void tickets(const Inst& i) {
    for (size_t k = 0; k < i.args.size(); ++k) {
      if (type(i.args[k]).kind != Type::Kind::Ticket) continue;
      const bool ok = (i.opcode == Opcode::FillStage && k == 0) || (i.opcode == Opcode::Claim && k == 3) ||
                      i.opcode == Opcode::Yield || i.opcode == Opcode::While || (i.opcode == Opcode::For && k >= 3);
      if (!ok) problem(fmt::format("{}: takes ticket %{}, which only the block's first thread holds", where(i), i.args[k]));
    }
  }
  bool is_row(int v) const { return is_index(v) || type(v).kind == Type::Kind::Ticket; }

  const SharedRing* bulk_ring_of(const Inst& i) {
    const SharedRing* r = ring_of(i);
    if (r && (!r->bulk || r->tile.size() != 2 || r->tile[0] != 1))
      problem(fmt::format("{}: @{} is not a bulk ring of one row a stage", where(i), r->name));
    return r && r->bulk ? r : nullptr;
  }
  // One row of an input (whole 16-byte chunks) into a bulk ring's stage, outside a specialized
  // program: a row (an index or a ticket), a column, a stage and the rows.
  void fill_stage(const Inst& i) {
    if (p_.specialized())
      problem(fmt::format("{}: fills a bulk ring's stage in a specialized program (the block's first thread fills it)",
                          where(i)));
    const SharedRing* r = bulk_ring_of(i);
    if (!r) return;
    const Param* prm = input_of(i, *r);
    if (i.args.size() != 4 || !is_row(i.args[0])) {
      problem(fmt::format("{}: needs a row, a column, a stage and the rows", where(i)));
      return;
    }
    for (size_t k = 1; k < 4; ++k)
      if (!is_index(i.args[k])) problem(fmt::format("{}: %{} is not an index", where(i), i.args[k]));
    if (r->stage_bytes() % 16 != 0) problem(fmt::format("{}: @{}'s rows are not whole 16-byte chunks", where(i), r->name));
    // (A row of a tensor broadcast along some of the domain's row dimensions is contiguous too.)
    if (prm && (prm->view.size() != 2 || prm->view[1] % r->tile[1] != 0 || !prm->elem_dims.empty()))
      problem(fmt::format("{}: %arg{}'s rows {} are not whole stages of @{}", where(i), i.param, shape_str(prm->view), r->name));
  }
  void claim(const Inst& i) {
    if (i.param < 0 || i.param >= static_cast<int>(p_.params.size()) || !p_.params[static_cast<size_t>(i.param)].workspace)
      problem(fmt::format("{}: %arg{} is not the workspace", where(i), i.param));
    if ((i.args.size() != 2 && i.args.size() != 4) || !is_index(i.args[0]) || !is_index(i.args[1]) ||
        (i.args.size() == 4 && (!is_index(i.args[2]) || type(i.args[3]).kind != Type::Kind::Ticket)) ||
        type(i.results.at(0)).kind != Type::Kind::Ticket)
      problem(fmt::format("{}: needs a counter slot and the rows dealt (then the rows and a ticket); gives a ticket",
                          where(i)));
  }
  // A row's parts meeting in the workspace's stamped words (no f32 view, no counters), in a
  // program of one row a block outside clusters and specialization: publish a task and one-element
  // f32 tiles, gather_parts a row and a warp_lanes f32 tile [1, parts] per value, 1 < parts ≤ 32
  // (a warp's lanes fetch them), as many values everywhere. (Its block barrier needs every thread: in a branch, on a
  // condition the block's threads share — pipeline_part_gathers' pending task.) A gather may
  // start from a fetch_parts' words of its row, take a bool scalar condition and gather warps
  // tiles behind its barrier (their warp_lanes results after the parts'); fetch_parts gives
  // words<parts x values>.
  void parts(const Inst& i) {
    const bool gather = i.opcode == Opcode::GatherParts, fetch = i.opcode == Opcode::FetchParts;
    const Param* ws = i.param >= 0 && i.param < static_cast<int>(p_.params.size())
                          ? &p_.params[static_cast<size_t>(i.param)]
                          : nullptr;
    if (!ws || !ws->workspace || num_elements(ws->view) != 0)
      problem(fmt::format("{}: %arg{} is not a workspace of stamped words only", where(i), i.param));
    if (p_.cluster_blocks > 1 || p_.specialized() || p_.layout.threads.size() != 2 || p_.layout.extent(0) != 1)
      problem(fmt::format("{}: meets a row's parts in a program of one row a block (no clusters, no specialization)",
                          where(i)));
    const PartsGather g = gather ? parts_gather(p_, i) : PartsGather{};
    const size_t warps = g.warps.size();
    if (i.args.empty() || !is_index(i.args[0]) ||
        (gather ? i.results.size() <= warps : fetch ? i.args.size() != 1 || i.results.size() != 1 : i.args.size() < 2)) {
      problem(fmt::format("{}: needs {}", where(i), gather  ? "a row and gives a value per published value"
                                                    : fetch ? "a row and gives its words"
                                                            : "a task and the values it publishes"));
      return;
    }
    if (fetch && type(i.results[0]).kind != Type::Kind::Words) {
      problem(fmt::format("{}: gives %{} of {}, not words", where(i), i.results[0], type_str(type(i.results[0]))));
      return;
    }
    // (A task's words are its values one after another: every publish and gather of a workspace
    // must agree on how many.)
    const size_t values = gather ? i.results.size() - warps
                          : fetch ? static_cast<size_t>(type(i.results[0]).shape.at(1))
                                  : i.args.size() - 1;
    if (const auto [at, fresh] = values_of_words_.emplace(i.param, values); !fresh && at->second != values)
      problem(fmt::format("{}: {} values a task in %arg{}'s words, where another takes {}", where(i), values, i.param,
                          at->second));
    if (!gather && !fetch) {
      if (!i.results.empty()) problem(fmt::format("{}: publish gives no values", where(i)));
      for (size_t a = 1; a < i.args.size(); ++a)
        if (const Type& t = type(i.args[a]);
            !t.is_tile() || t.dtype != DType::F32 || t.frag != Frag::None || num_elements(t.shape) != 1)
          problem(fmt::format("{}: publishes %{} of {}, not a one-element f32 tile", where(i), i.args[a], type_str(t)));
      return;
    }
    const int64_t n = static_cast<int64_t>(i.value);
    if (i.value != static_cast<double>(n) || n < 2 || n > 32)
      problem(fmt::format("{}: {} parts, not from 2 to 32", where(i), i.value));
    else if (p_.layout.threads.size() == 2 && p_.layout.threads[1] < n)
      problem(fmt::format("{}: {} parts for a row of {} threads (a thread fetches each)", where(i), n,
                          p_.layout.threads[1]));
    if (fetch) {
      if (type(i.results[0]).shape.at(0) != n)
        problem(fmt::format("{}: gives {} for {} parts", where(i), type_str(type(i.results[0])), n));
      return;
    }
    if (g.from >= 0 && type(g.from) != Type::words(n, static_cast<int64_t>(values)))
      problem(fmt::format("{}: starts from %{} of {}, not words<{}x{}>", where(i), g.from, type_str(type(g.from)), n,
                          values));
    if (g.from >= 0) {  // (the fetch's row must be the gather's)
      const auto at = fetched_row_.find(g.from);
      if (at != fetched_row_.end() && at->second != g.row)
        problem(fmt::format("{}: starts from words fetched for row %{}, not %{}", where(i), at->second, g.row));
    }
    for (size_t r = 0; r < values; ++r)
      if (const int v = i.results[r]; type(v) != Type::tile(DType::F32, {1, n}, Space::Reg, Frag::WarpLanes))
        problem(fmt::format("{}: gives %{} of {}, not an f32 warp_lanes tile [1, {}]", where(i), v, type_str(type(v)), n));
    for (size_t w = 0; w < warps; ++w) {
      const Type& t = type(g.warps[w]);
      Type want = t;
      want.frag = Frag::WarpLanes;
      if (!t.is_tile() || t.frag != Frag::Warps || t.dtype == DType::Bool)
        problem(fmt::format("{}: gathers %{} of {}, not a floating-point warps tile", where(i), g.warps[w], type_str(t)));
      else if (type(i.results[values + w]) != want)
        problem(fmt::format("{}: %{} gathered is {}, not {}", where(i), g.warps[w], type_str(type(i.results[values + w])),
                            type_str(want)));
    }
  }
  // Carried values of one type each from the initial value through region 0's args to the
  // results; region 0 yields a bool scalar, region 1 (seeing region 0's values) the next values.
  void while_loop(const Inst& i, std::set<int> scope) {
    if (i.regions.size() != 2 || i.regions[0].args.size() != i.args.size() || i.results.size() != i.args.size() ||
        !i.regions[1].args.empty()) {
      problem(fmt::format("{}: needs two regions and as many carried values as initial values and results", where(i)));
      return;
    }
    const Region& head = i.regions[0];
    const Region& body = i.regions[1];
    for (size_t k = 0; k < i.args.size(); ++k)
      if (type(i.args[k]) != type(head.args[k]) || type(head.args[k]) != type(i.results[k]))
        problem(fmt::format("{}: carried value {} changes type", where(i), k));
    for (int a : head.args) scope.insert(a);
    region(head, scope, true);
    if (head.body.empty() || head.body.back().opcode != Opcode::Yield || head.body.back().args.size() != 1 ||
        type(head.body.back().args[0]) != Type::scalar(DType::Bool))
      problem(fmt::format("{}: its condition region does not end with a yield of a bool scalar", where(i)));
    region(body, scope, true);
    if (body.body.empty() || body.body.back().opcode != Opcode::Yield || body.body.back().args.size() != i.args.size()) {
      problem(fmt::format("{}: its body does not end with a yield of the {} carried values", where(i), i.args.size()));
      return;
    }
    for (size_t k = 0; k < i.args.size(); ++k)
      if (type(body.body.back().args[k]) != type(head.args[k]))
        problem(fmt::format("{}: yields {} for carried value {} of {}", where(i),
                            type_str(type(body.body.back().args[k])), k, type_str(type(head.args[k]))));
  }

  // Exchanges. cluster_values and gather_blocks: per-row floating-point tiles of the blocked
  // layout (one column), in the body of a program launched in clusters, or straight in a loop's
  // body there: every block of the cluster takes each exchange once, its slots are its own (in a
  // loop, written again past a later exchange, or doubled by the iteration's parity), and the
  // first waits for the blocks to run; cluster_values gives each block's value of each arg,
  // gather_blocks a warp_lanes tile of the cluster's blocks' columns (up to 32 of them).
  // gather_warps: floating-point warps tiles, each gathered into a warp_lanes tile of the row's
  // warps' columns. None in a specialized program.
  void exchange(const Inst& i, bool in_loop) {
    const bool warps = i.opcode == Opcode::GatherWarps, each_block = i.opcode == Opcode::ClusterValues;
    const size_t n = static_cast<size_t>(std::max(p_.cluster_blocks, 1));
    if (warps && p_.specialized())
      problem(fmt::format("{}: gathers warps' values, which a specialized program does not", where(i)));
    if (!warps && (p_.cluster_blocks < 2 || p_.specialized() || (depth_ > 1 && !in_loop)))
      problem(fmt::format("{}: exchanges values in the body of a program launched in clusters or of a loop there "
                          "(not in a branch or a specialized program)",
                          where(i)));
    const size_t per_arg = each_block ? n : 1;
    if (i.args.empty() || i.results.size() != i.args.size() * per_arg) {
      problem(fmt::format("{}: gives {} value(s) for each of its {} args, not {} values", where(i), per_arg,
                          i.args.size(), i.results.size()));
      return;
    }
    for (size_t a = 0; a < i.args.size(); ++a) {
      const Type& t = type(i.args[a]);
      const bool floating = t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16;
      const bool one_column = t.frag == Frag::None && t.shape.size() == 2 && t.shape[1] == 1;
      if (!t.is_tile() || t.space != Space::Reg || !floating || !(warps ? t.frag == Frag::Warps : one_column)) {
        problem(fmt::format("{}: %{} is {}, not a floating-point {}", where(i), i.args[a], type_str(t),
                            warps ? "warps tile" : "tile of one column"));
        continue;
      }
      Type want = t;
      if (!each_block) {
        want.frag = Frag::WarpLanes;
        if (!warps) want.shape[1] = static_cast<int64_t>(n);
        check_tile_shape(i, want);
      }
      for (size_t r = 0; r < per_arg; ++r)
        if (const Type& got = type(i.results[a * per_arg + r]); got != want)
          problem(each_block ? fmt::format("{}: block {}'s value of %{} is {}, not its {}", where(i), r, i.args[a],
                                           type_str(got), type_str(want))
                             : fmt::format("{}: %{} gathered is {}, not {}", where(i), i.args[a], type_str(got),
                                           type_str(want)));
    }
  }

  void region(const Region& r, std::set<int>& scope, bool in_loop) {
    ++depth_;
    for (size_t n = 0; n < r.body.size(); ++n) {
      const Inst& i = r.body[n];
      if (role_ == Role::Producer) producer_inst(i);
      auto defined = [&](int a) {  // (-1: no value)
        if (a >= 0 && !scope.count(a)) problem(fmt::format("{}: %{} is used before it is defined", where(i), a));
      };
      for (const std::vector<int>* uses : {&i.args, &i.limits})
        for (int a : *uses) defined(a);
      tickets(i);
      const bool windowed = i.opcode == Opcode::Load || i.opcode == Opcode::Store || i.opcode == Opcode::InWindow ||
                            (i.opcode == Opcode::Iota && i.args.size() == 2);
      if (i.window != 0 && (!windowed || i.window < 2 || i.window > 16 || (i.window & (i.window - 1)) != 0))
        problem(fmt::format("{}: a window of {} on a {} (a power of two to 16, on a load, a store, in_window or a "
                            "linear iota)",
                            where(i), i.window, opcode_name(i.opcode)));
      switch (i.opcode) {
        case Opcode::ProgramId:
          if (i.axis < 0 || i.axis >= static_cast<int>(p_.grid.size()))
            problem(fmt::format("{}: no grid axis {}", where(i), i.axis));
          break;
        case Opcode::Const:
          check_tile_shape(i, type(i.results.at(0)));
          break;
        case Opcode::IndexMul:
        case Opcode::IndexAdd:
        case Opcode::IndexDiv:
        case Opcode::IndexRem:
        case Opcode::IndexMin:
        case Opcode::IndexSub:
          if (i.args.size() != 2 || !is_index(i.args[0]) || !is_index(i.args[1]))
            problem(fmt::format("{}: needs two indices", where(i)));
          break;
        case Opcode::IndexLess:
          if (i.args.size() != 2 || !is_index(i.args[0]) || !is_index(i.args[1]) ||
              type(i.results.at(0)) != Type::scalar(DType::Bool))
            problem(fmt::format("{}: compares two indices into a bool scalar", where(i)));
          break;
        case Opcode::AwaitTurn:
        case Opcode::HandOff:
          turns(i);
          break;
        case Opcode::TmaStore:
          tma_store(i);
          if (!i.regions.empty()) {
            std::set<int> inner = scope;
            inner.insert(i.regions[0].args.begin(), i.regions[0].args.end());
            staged_epilogue(i);
            region(i.regions[0], inner, true);  // (run once per chunk, ending in its yield)
          }
          break;
        case Opcode::WaitStores:
          role(i, Role::Consumers);
          break;
        case Opcode::IndexCeil: {
          const Type& x = type(i.args.at(0));
          if (i.args.size() != 1 || !x.is_tile() || num_elements(x.shape) != 1 || x.frag != Frag::None ||
              !(x.dtype == DType::F32 || x.dtype == DType::BF16 || x.dtype == DType::F16))
            problem(fmt::format("{}: needs a one-element floating-point tile", where(i)));
          break;
        }
        case Opcode::Load:
        case Opcode::Store: {
          memory(i, i.opcode == Opcode::Store);
          const int tile = i.opcode == Opcode::Store ? i.args.back() : i.results.at(0);
          if (i.reduce_add && (p_.params.at(static_cast<size_t>(i.param)).dtype != DType::F32 ||
                               type(tile).dtype != DType::F32 || i.window != 0))
            problem(fmt::format("{}: adds f32 tiles into an f32 parameter", where(i)));
          if (per_thread_columns(type(tile).frag))
            problem(fmt::format("{}: a {} tile is not loaded or stored (spread or reduce it first)", where(i),
                                frag_name(type(tile).frag)));
          if (i.window != 0 && type(tile).frag != Frag::None)
            problem(fmt::format("{}: a windowed row's tile is a blocked one", where(i)));
          break;
        }
        case Opcode::Spread: {
          const Type& out = type(i.results.at(0));
          const Type& in = type(i.args.at(0));
          if ((in.frag != Frag::Lanes && in.frag != Frag::Warps) || !out.is_tile() || out.frag != Frag::None ||
              out.dtype != in.dtype || out.shape.size() != 2 || out.shape[0] != in.shape[0] ||
              out.shape[1] != p_.layout.extent(1))
            problem(fmt::format("{}: spreads a lanes or warps tile over the blocked tile of its rows, not {} into {}",
                                where(i), type_str(in), type_str(out)));
          check_tile_shape(i, out);
          break;
        }
        case Opcode::Splat: {
          const Type& out = type(i.results.at(0));
          if (i.args.size() != 1 || type(i.args[0]).kind != Type::Kind::Scalar || !out.is_tile() ||
              out.dtype != type(i.args[0]).dtype)
            problem(fmt::format("{}: needs a scalar of the tile's dtype", where(i)));
          check_tile_shape(i, out);
          break;
        }
        case Opcode::Compute:
          compute(i);
          break;
        case Opcode::Reduce: {
          const Type& t = type(i.args.at(0));
          const Type& out = type(i.results.at(0));
          Shape expect = t.shape;
          if (i.axis >= 0 && static_cast<size_t>(i.axis) < expect.size()) expect[static_cast<size_t>(i.axis)] = 1;
          // Within each thread (a blocked tile's rows into a lanes tile), within each warp (a
          // blocked or lanes tile's rows into a warps tile), or a lanes or warp_lanes tile's rows
          // over their threads (into one column, blocked). A warps tile is gathered first.
          const bool within = out.frag == Frag::Lanes && t.frag == Frag::None && i.axis == 1;
          const bool in_warps = out.frag == Frag::Warps && (t.frag == Frag::None || t.frag == Frag::Lanes) &&
                                i.axis == 1 && t.shape.size() == 2 && t.shape[1] != 1;  // (spread over the row's threads)
          if (within) expect[1] = p_.layout.threads.at(1);
          if (in_warps) expect[1] = p_.layout.threads.at(1) / 32;
          const Frag frag = within      ? Frag::Lanes
                            : in_warps  ? Frag::Warps
                            : (t.frag == Frag::Lanes || t.frag == Frag::WarpLanes) ? Frag::None
                                                                                   : t.frag;
          if (!t.is_tile() || !out.is_tile() || out.shape != expect || out.dtype != t.dtype || out.frag != frag ||
              op_info(i.op).kind != OpKind::Reduce || (per_thread_columns(t.frag) && i.axis != 1) ||
              t.frag == Frag::Warps)
            problem(fmt::format("{}: {} along axis {} does not give {}{}", where(i), type_str(t), i.axis, type_str(out),
                                t.frag == Frag::Warps ? " (a warps tile is gathered before it is reduced)" : ""));
          if (within || in_warps) check_tile_shape(i, out);
          if (i.args.size() > 2) problem(fmt::format("{}: takes a tile and at most a mask", where(i)));
          if (i.args.size() == 2) reduce_mask(i, t);
          if (t.frag == Frag::A || t.frag == Frag::B || (t.frag == Frag::Acc && (i.axis != 1 || !p_.mma || p_.mma->warps_n != 1)))
            problem(fmt::format("{}: of fragments, only an accumulator's rows reduce (along axis 1, with warps_n 1)", where(i)));
          break;
        }
        case Opcode::GatherWarps:
        case Opcode::ClusterValues:
        case Opcode::GatherBlocks:
          exchange(i, in_loop);
          break;
        case Opcode::Convert: {
          const Type& t = type(i.args.at(0));
          const Type& out = type(i.results.at(0));
          if (t.frag != Frag::Acc || out.frag != Frag::A || (out.dtype != DType::BF16 && out.dtype != DType::F16) ||
              t.shape.size() != 2 || out.shape != Shape{t.shape[0], 16})
            problem(fmt::format("{}: takes an accumulator to a bf16 or f16 A fragment of its rows", where(i)));
          else if (!p_.mma || p_.mma->warps_n != 1)
            problem(fmt::format("{}: needs warps_n 1 (each warp holding whole rows)", where(i)));
          else if (i.value < 0 || i.value != static_cast<int>(i.value) || 16 * (i.value + 1) > static_cast<double>(t.shape[1]))
            problem(fmt::format("{}: chunk {} is not a 16-column piece of {}", where(i), i.value, type_str(t)));
          check_tile_shape(i, t);
          check_tile_shape(i, out);
          break;
        }
        case Opcode::For:
          loop(i, scope);
          break;
        case Opcode::InBounds: {
          const Type& out = type(i.results.at(0));
          if (i.args.size() != 2 || !is_index(i.args[0]) || !is_index(i.args[1]) || !out.is_tile() ||
              out.dtype != DType::Bool || i.axis < 0 || static_cast<size_t>(i.axis) >= out.shape.size())
            problem(fmt::format("{}: needs an offset, a limit and a bool tile along one of its axes", where(i)));
          if (per_thread_columns(out.frag))
            problem(fmt::format("{}: positions of a {} tile are not elements'", where(i), frag_name(out.frag)));
          check_tile_shape(i, out);
          break;
        }
        case Opcode::InWindow: {
          const Type& out = type(i.results.at(0));
          if (i.args.size() != 3 || !is_index(i.args[0]) || !is_index(i.args[1]) || !is_index(i.args[2]) ||
              !out.is_tile() || out.dtype != DType::Bool || out.shape.size() != 2 || out.frag != Frag::None ||
              i.window == 0)
            problem(fmt::format("{}: needs row and column offsets, the rows' width, a vector and a blocked bool tile",
                                where(i)));
          check_tile_shape(i, out);
          break;
        }
        case Opcode::Iota: {
          const Type& out = type(i.results.at(0));
          const bool linear = i.args.size() == 2 && is_index(i.args[0]) && is_index(i.args[1]) && i.iota_stride >= 1 &&
                              i.iota_div >= 1 && i.iota_mod >= 1 && out.is_tile() && out.shape.size() == 2 &&
                              out.frag == Frag::None;
          const bool along = i.args.size() == 1 && is_index(i.args[0]) && i.axis >= 0 &&
                             static_cast<size_t>(i.axis) < out.shape.size();
          if ((!linear && !along) || !out.is_tile() || out.dtype != DType::F32)
            problem(fmt::format("{}: needs an offset and an f32 tile along one of its axes, or row and column offsets "
                                "with a stride, a divisor and a modulus of at least 1",
                                where(i)));
          if (per_thread_columns(out.frag))
            problem(fmt::format("{}: positions of a {} tile are not elements'", where(i), frag_name(out.frag)));
          check_tile_shape(i, out);
          break;
        }
        case Opcode::If: {
          if (i.args.size() != 1 || type(i.args[0]).kind != Type::Kind::Scalar || type(i.args[0]).dtype != DType::Bool ||
              i.regions.size() != 1)
            problem(fmt::format("{}: needs a bool scalar and one region", where(i)));
          std::set<int> inner = scope;
          if (!i.regions.empty()) region(i.regions[0], inner, false);
          break;
        }
        case Opcode::Dot: {
          if (i.args.size() != 3) {
            problem(fmt::format("{}: needs A, B and an accumulator", where(i)));
            break;
          }
          const Type &a = type(i.args[0]), &b = type(i.args[1]), &c = type(i.args[2]), &out = type(i.results.at(0));
          if (a.frag != Frag::A || b.frag != Frag::B || c.frag != Frag::Acc || out != c)
            problem(fmt::format("{}: needs mma_a, mma_b and mma_acc tiles (an accumulator of the result's type)", where(i)));
          if (a.dtype != b.dtype || (a.dtype != DType::BF16 && a.dtype != DType::F16) || c.dtype != DType::F32)
            problem(fmt::format("{}: multiplies bf16 or f16 tiles of one dtype into f32", where(i)));
          for (const Type* t : {&a, &b, &c}) check_tile_shape(i, *t);
          if (c.shape.size() == 2 && (c.shape[0] == 1 || c.shape[1] == 1))
            problem(fmt::format("{}: the accumulator must be the whole warps' tile", where(i)));
          break;
        }
        case Opcode::DotAsync:
          dot_async(i);
          break;
        case Opcode::DotWait:
          if (i.args.size() != i.results.size() || i.value < 0 || i.value != static_cast<int>(i.value))
            problem(fmt::format("{}: waits for accumulators, a result each, with a count of pending groups", where(i)));
          for (size_t k = 0; k < i.args.size() && k < i.results.size(); ++k)
            if (type(i.args[k]).frag != Frag::Acc || type(i.results[k]) != type(i.args[k]))
              problem(fmt::format("{}: %{} is not an accumulator of its result's type", where(i), i.args[k]));
          break;
        case Opcode::FenceAsync:
          break;
        case Opcode::Specialize: {
          if (role_ != Role::Block || &r != &p_.body || i.regions.size() != 2) {
            problem(fmt::format("{}: splits the program's body into a producer and consumers, once", where(i)));
            break;
          }
          if (i.regions[1].args.size() != 1 || !is_index(i.regions[1].args[0]))
            problem(fmt::format("{}: the consumers' region takes their group, an index", where(i)));
          for (Role part : {Role::Producer, Role::Consumers}) {
            role_ = part;
            std::set<int> inner = scope;
            const Region& r = i.regions[part == Role::Producer ? 0 : 1];
            inner.insert(r.args.begin(), r.args.end());
            region(r, inner, false);
          }
          role_ = Role::Block;
          break;
        }
        case Opcode::TmaLoad:
          tma_load(i);
          break;
        case Opcode::WaitFull:
        case Opcode::WaitEmpty:
        case Opcode::Release:
          stage_sync(i);
          break;
        case Opcode::CopyAsync:
          copy_async(i);
          break;
        case Opcode::LoadShared:
          load_shared(i);
          break;
        case Opcode::StoreShared:
          store_shared(i);
          break;
        case Opcode::WaitGroup:
          if (i.value < 0 || i.value != static_cast<int>(i.value))
            problem(fmt::format("{}: {} pending groups", where(i), i.value));
          break;
        case Opcode::CommitGroup:
        case Opcode::Barrier:
          break;
        case Opcode::LastArrival:
        case Opcode::ResetCount:
          // (Its thread 0 counts the block in: one group of consumers at most.)
          if (role_ == Role::Consumers && p_.consumer_groups > 1)
            problem(fmt::format("{}: counts the block in from one consumer group's thread 0; ping-pong groups "
                                "would race for it",
                                where(i)));
          if (i.param < 0 || i.param >= static_cast<int>(p_.params.size()) || !p_.params[static_cast<size_t>(i.param)].workspace)
            problem(fmt::format("{}: %arg{} is not the workspace", where(i), i.param));
          for (int a : i.args)
            if (!is_index(a)) problem(fmt::format("{}: %{} is not an index", where(i), a));
          break;
        case Opcode::Yield:
          if (!in_loop || n + 1 != r.body.size())
            problem("a yield that does not end a loop's (or a staged epilogue's) region");
          break;
        case Opcode::While:
          while_loop(i, scope);
          break;
        case Opcode::NumPrograms:
          if (i.axis != 0 || !is_index(i.results.at(0)))
            problem(fmt::format("{}: gives the blocks along grid axis 0 as an index", where(i)));
          break;
        case Opcode::FillStage:
          fill_stage(i);
          break;
        case Opcode::StageRow:
          bulk_ring_of(i);
          if (i.args.size() != 1 || !is_index(i.args[0]) || !is_index(i.results.at(0)))
            problem(fmt::format("{}: gives the row an index stage holds, as an index", where(i)));
          break;
        case Opcode::Claim:
          claim(i);
          break;
        case Opcode::Publish:
        case Opcode::GatherParts:
          parts(i);
          break;
        case Opcode::FetchParts:
          parts(i);
          if (!i.results.empty() && !i.args.empty()) fetched_row_[i.results[0]] = i.args[0];
          break;
      }
      for (int v : i.results) {
        if (!scope.insert(v).second) problem(fmt::format("{}: %{} is defined twice", where(i), v));
      }
    }
    --depth_;
  }

  // wgmma reads whole stages of 16-bit rings laid out for it: B [k, n] (n a multiple of 8 up to
  // 256), A [64 rows per warpgroup, k] from a ring or k/16 A fragments [M, 16] in registers; the
  // accumulator [M, n] of the warps (16 whole rows each). A K-major operand's k, an M- or N-major
  // one's M or N, is whole 128-byte panels (64 elements).
  void dot_async(const Inst& i) {
    const bool from_ring = i.ring >= 0;
    if (i.args.size() < 2 || (from_ring ? i.args.size() != 2 : i.args.size() == 2) || i.ring_b < 0 ||
        i.ring >= static_cast<int>(p_.shared.size()) || i.ring_b >= static_cast<int>(p_.shared.size())) {
      problem(fmt::format("{}: needs A (a ring or fragments), B's ring, a stage and an accumulator", where(i)));
      return;
    }
    const SharedRing& b = p_.shared[static_cast<size_t>(i.ring_b)];
    const Type& c = type(i.args[1]);
    if (!is_index(i.args[0])) problem(fmt::format("{}: the stage is not an index", where(i)));
    if (b.dtype != DType::BF16 && b.dtype != DType::F16) problem(fmt::format("{}: multiplies bf16 or f16", where(i)));
    // (Transposed, B is the stage's transpose: a ring stored the other way.)
    // (B's columns from b_col on, as many as the accumulator's: whole panels of the stage.)
    const int64_t k = b.tile.at(i.transposed ? 1 : 0), width = b.tile.at(i.transposed ? 0 : 1);
    const int64_t n = c.shape.size() == 2 ? c.shape[1] : width;
    if (!b.wgmma || (b.col_major != i.transposed ? k : n) % 64 != 0 || k % 16 != 0)
      problem(fmt::format("{}: B's ring is not laid out for wgmma in whole 128-byte panels", where(i)));
    if (i.b_col < 0 || i.b_col % 64 != 0 || i.b_col + n > width)
      problem(fmt::format("{}: B's columns {} to {} of @{}'s {} (from a multiple of 64, within the stage)",
                          where(i), i.b_col, i.b_col + n, b.name, width));
    if (from_ring) {
      const SharedRing& a = p_.shared[static_cast<size_t>(i.ring)];
      // (Transposed, A is the stage's transpose; read M-major where its stored rows run along M.)
      const int64_t a_k = a.tile.at(i.a_transposed ? 0 : 1), a_m = a.tile.at(i.a_transposed ? 1 : 0);
      if (!a.wgmma || a.dtype != b.dtype || a_k != k || (a.col_major != i.a_transposed ? a_m : k) % 64 != 0 ||
          (c.shape.size() == 2 && a_m != c.shape[0]))
        problem(fmt::format(
            "{}: A's ring is not B's dtype and k and the accumulator's rows, laid out for wgmma", where(i)));
      if (a.stages != 1 && a.stages != b.stages)
        problem(fmt::format("{}: A's ring has {} stages, neither B's {} nor one (read at every stage)", where(i),
                            a.stages, b.stages));
    } else {
      if (i.a_transposed) problem(fmt::format("{}: A in registers is not read transposed", where(i)));
      if (static_cast<int64_t>(i.args.size() - 2) * 16 != k)
        problem(fmt::format("{}: {} A fragments for B's k of {}", where(i), i.args.size() - 2, k));
      for (size_t f = 2; f < i.args.size(); ++f) {
        const Type& a = type(i.args[f]);
        if (a.frag != Frag::A || a.dtype != b.dtype || a.shape.size() != 2 || a.shape[1] != 16 || a.shape[0] != c.shape.at(0))
          problem(fmt::format("{}: %{} is not an A fragment [M, 16] of B's dtype", where(i), i.args[f]));
      }
    }
    if (!p_.mma || p_.mma->warp_m != 16 || p_.mma->warps_n != 1 || c.frag != Frag::Acc || c.dtype != DType::F32 ||
        c.shape.size() != 2 || c.shape[1] != n || c.shape[0] % 64 != 0 || n % 8 != 0 || n > 256 ||
        p_.block_threads() != 2 * c.shape[0] || type(i.results.at(0)) != c)
      problem(fmt::format("{}: needs an f32 accumulator [64·warpgroups, n ≤ 256] of warps of 16 whole rows", where(i)));
  }

  const Program& p_;
  std::vector<std::string> problems_;
  Role role_ = Role::Block;
  int depth_ = 0;  // regions entered (1: the program's body)
  std::map<int, size_t> values_of_words_;  // workspace → the values a task publishes (gathers)
  std::map<int, int> fetched_row_;         // a fetch_parts' words → the row it fetched
};

}  // namespace

std::vector<std::string> program_problems(const Program& p) { return Verifier(p).run(); }

void verify_program(const Program& p) {
  std::vector<std::string> problems = program_problems(p);
  if (!problems.empty())
    throw Error(fmt::format("tile IR of {} is invalid: {}", p.name, fmt::join(problems, "; ")));
}

}  // namespace tilefuse::tir
