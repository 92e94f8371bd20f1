#include "compiler/tile/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "compiler/support/error.h"

namespace tilefuse::tir {

namespace {

// Copies of instructions with fresh results (and region args), their uses of values mapped.
struct Cloner {
  Program& p;
  std::map<int, int> to;
  int value(int v) const {
    const auto it = to.find(v);
    return it == to.end() ? v : it->second;
  }
  int fresh(int v) {
    const Type t = p.types.at(static_cast<size_t>(v));  // (a copy: add_value grows the table)
    return to[v] = p.add_value(t);
  }
  Inst clone(const Inst& i) {
    Inst c = i;
    for (int& a : c.args) a = value(a);
    for (int& l : c.limits)
      if (l >= 0) l = value(l);
    for (int& r : c.results) r = fresh(r);
    for (Region& r : c.regions) {
      for (int& a : r.args) a = fresh(a);
      for (Inst& inner : r.body) inner = clone(inner);
    }
    return c;
  }
};

void defined_in(const Inst& i, std::set<int>& out) {
  out.insert(i.results.begin(), i.results.end());
  for (const Region& r : i.regions) {
    out.insert(r.args.begin(), r.args.end());
    for (const Inst& inner : r.body) defined_in(inner, out);
  }
}
void used_in(const Inst& i, std::set<int>& out) {
  out.insert(i.args.begin(), i.args.end());
  for (int l : i.limits)
    if (l >= 0) out.insert(l);
  for (const Region& r : i.regions)
    for (const Inst& inner : r.body) used_in(inner, out);
}

Inst constant(Program& p, const Type& t, double v) {
  Inst c;
  c.opcode = Opcode::Const;
  c.value = v;
  c.results = {p.add_value(t)};
  return c;
}
Inst index_less(Program& p, int a, int b) {
  Inst c;
  c.opcode = Opcode::IndexLess;
  c.args = {a, b};
  c.results = {p.add_value(Type::scalar(DType::Bool))};
  return c;
}

// The index arithmetic (sunk to the yield) that makes the loop's next value v, moved from the
// part after the gather to the end of the part before it.
void hoist(const Program& p, int v, std::vector<Inst>& moved, std::vector<Inst>& before) {
  const auto at = std::find_if(moved.begin(), moved.end(), [&](const Inst& i) {
    return std::find(i.results.begin(), i.results.end(), v) != i.results.end();
  });
  if (at == moved.end()) return;
  if (at->opcode != Opcode::Const && !is_index_arithmetic(at->opcode))
    throw CodegenError(fmt::format("kernel {}: pipelining its parts' gather: the loop's next %{} comes from {} after it",
                                   p.name, v, opcode_name(at->opcode)));
  Inst i = *at;
  moved.erase(at);
  for (int a : i.args) hoist(p, a, moved, before);
  before.push_back(std::move(i));
}

// What the loop carries for the moved part: values, and the cheap instructions (with the
// constants they read) that make the rest again from them.
struct Carried {
  std::vector<int> values;
  std::set<const Inst*> remade;
  std::set<int> constants;
};

// A value that costs a register or so a thread (an index, a scalar, a per-thread or per-warp
// tile, one element), made by an instruction that is cheap to run again.
bool cheap(const Program& p, const Inst* def, int v) {
  if (!def || !def->regions.empty() || (def->opcode != Opcode::Compute && !is_index_arithmetic(def->opcode)))
    return false;
  const Type& t = p.types.at(static_cast<size_t>(v));
  return !t.is_tile() || t.frag == Frag::Lanes || t.frag == Frag::Warps || t.frag == Frag::WarpLanes ||
         num_elements(t.shape) == 1;
}

// A blocked tile made elementwise (Compute, Spread) that the loop could make again from what it
// is made of, where that holds fewer bytes a thread: a 16-bit part's exps (f32) from the part
// (16-bit) and its warps' max.
bool blocked_elementwise(const Program& p, const Inst* def, int v) {
  const Type& t = p.types.at(static_cast<size_t>(v));
  return def && def->regions.empty() && (def->opcode == Opcode::Compute || def->opcode == Opcode::Spread) &&
         t.is_tile() && t.frag == Frag::None;
}

// The bytes a thread holds of value v (made by `def`, if known), to compare what a loop carries:
// a blocked tile's share of its elements, each of a 16-bit tile in f32 but where exact in its
// dtype (exact_in_dtype); anything else (an index, a scalar, a lanes, warps or warp-lanes tile) a
// register.
int64_t thread_bytes(const Program& p, int v, const Inst* def) {
  const Type& t = p.types.at(static_cast<size_t>(v));
  if (!t.is_tile() || t.frag != Frag::None) return 4;
  const int64_t size = !def || exact_in_dtype(*def) ? static_cast<int64_t>(dtype_size(t.dtype)) : 4;
  return std::max<int64_t>(4, num_elements(t.shape) * size / std::max(1, p.layout.block_threads()));
}

// A value's roots (the values it is made from that the loop would carry), and the instructions
// and constants that make it from them.
struct Making {
  std::set<int> roots, consts;
  std::set<const Inst*> insts;
};

// A value a loop can carry: an index, a scalar or a tile.
bool carriable(const Program& p, int v) {
  const Type& t = p.types.at(static_cast<size_t>(v));
  return t.kind == Type::Kind::Index || t.kind == Type::Kind::Scalar || t.is_tile();
}

// The blocked tiles made again (their instructions and constants into `out`, their roots into
// `base`, the values carried anyway): all of them where the roots they add to `base` hold fewer
// bytes a thread than they do together, else each where its own do; the rest are carried (into
// `base`), but those whose roots all are carried by then. A tile whose roots the loop cannot
// carry is carried.
void remake_tiles(const Program& p, const std::map<int, Making>& tiles,
                  const std::map<int, const Inst*>& defs, std::set<int>& base, Carried& out) {
  auto bytes_of = [&](int v) {
    const auto d = defs.find(v);
    return thread_bytes(p, v, d == defs.end() ? nullptr : d->second);
  };
  auto added = [&](const std::set<int>& roots) {  // (none where a root cannot be carried)
    int64_t bytes = 0;
    for (int r : roots)
      if (!base.count(r)) {
        if (!carriable(p, r)) return std::optional<int64_t>();
        bytes += bytes_of(r);
      }
    return std::optional<int64_t>(bytes);
  };
  std::set<int> all_roots;
  int64_t all_bytes = 0;
  for (const auto& [v, m] : tiles) {
    all_roots.insert(m.roots.begin(), m.roots.end());
    all_bytes += bytes_of(v);
  }
  const std::optional<int64_t> all_added = added(all_roots);
  const bool all = all_added && *all_added < all_bytes;
  std::set<int> carried;
  for (const auto& [v, m] : tiles)
    if (const std::optional<int64_t> own = added(m.roots); all || (own && *own < bytes_of(v)))
      base.insert(m.roots.begin(), m.roots.end());
    else
      carried.insert(v);
  for (const auto& [v, m] : tiles) {
    if (carried.count(v) && !std::includes(base.begin(), base.end(), m.roots.begin(), m.roots.end())) {
      base.insert(v);
      continue;
    }
    out.remade.insert(m.insts.begin(), m.insts.end());
    out.constants.insert(m.consts.begin(), m.consts.end());
  }
}

// The values the moved part needs, fewer where cheap ones can be made again from others: a
// cheap value whose roots (through cheap instructions) are carried anyway is made again; cheap
// values whose roots are not are made again only where their roots together are fewer than they
// (a softmax's warps' max and its "seen" bit from the warps' raw max). A blocked tile made
// elementwise is made again where its roots hold fewer bytes a thread (remake_tiles: registers
// across the loop bound a part's size). `here`: the values the head and the part before the cut
// define; `defs`: the instructions of theirs that make them, by value.
Carried carry(const Program& p, const std::vector<int>& needed, const std::set<int>& here,
              const std::map<int, const Inst*>& defs) {
  auto def_of = [&](int v) -> const Inst* {
    const auto it = defs.find(v);
    return it == defs.end() ? nullptr : it->second;
  };
  std::set<int> base;
  // (Through the instructions `through` admits, stopping at values carried anyway.)
  using Admits = bool (*)(const Program&, const Inst*, int);
  std::function<void(int, Making&, Admits)> expand = [&](int v, Making& m, Admits through) {
    if (!here.count(v)) return;  // (from outside the loop)
    const Inst* def = def_of(v);
    if (def && def->opcode == Opcode::Const) {
      m.consts.insert(v);
    } else if (base.count(v) || !through(p, def, v)) {
      m.roots.insert(v);
    } else {
      m.insts.insert(def);
      for (int a : def->args) expand(a, m, through);
    }
  };
  std::vector<int> cheap_values, tile_values;
  for (int v : needed)
    if (cheap(p, def_of(v), v))
      cheap_values.push_back(v);
    else if (blocked_elementwise(p, def_of(v), v))
      tile_values.push_back(v);
    else
      base.insert(v);
  Carried out;
  std::map<int, Making> cheap_ones, tiles;
  auto cheap_or_elementwise = [](const Program& q, const Inst* def, int v) {
    return cheap(q, def, v) || blocked_elementwise(q, def, v);
  };
  for (int v : tile_values) expand(v, tiles[v], cheap_or_elementwise);
  remake_tiles(p, tiles, defs, base, out);
  for (int v : cheap_values) expand(v, cheap_ones[v], cheap);
  // (Those whose roots are carried anyway are made again; the rest too where their roots are fewer.)
  std::set<int> rest_roots;
  size_t rest = 0;
  for (const auto& [v, m] : cheap_ones)
    if (!std::includes(base.begin(), base.end(), m.roots.begin(), m.roots.end())) {
      ++rest;
      for (int r : m.roots)
        if (!base.count(r)) rest_roots.insert(r);
    }
  const bool remake_rest = rest_roots.size() < rest;
  for (const auto& [v, m] : cheap_ones) {
    if (!remake_rest && !std::includes(base.begin(), base.end(), m.roots.begin(), m.roots.end())) {
      out.values.push_back(v);
      continue;
    }
    out.remade.insert(m.insts.begin(), m.insts.end());
    out.constants.insert(m.consts.begin(), m.consts.end());
  }
  if (remake_rest) base.insert(rest_roots.begin(), rest_roots.end());
  out.values.insert(out.values.end(), base.begin(), base.end());
  std::sort(out.values.begin(), out.values.end());
  return out;
}

// What moves one iteration later must not touch the stages, counters or barriers the rest of
// the iteration relies on: a stage refilled late would never fill for the next wait, a stage
// read late would hold the next row.
void check_movable(const Program& p, const Inst& i) {
  switch (i.opcode) {
    case Opcode::FillStage:
    case Opcode::WaitFull:
    case Opcode::WaitEmpty:
    case Opcode::LoadShared:
    case Opcode::StoreShared:
    case Opcode::StageRow:
    case Opcode::Claim:
    case Opcode::LastArrival:
    case Opcode::ResetCount:
    case Opcode::Barrier:
    case Opcode::CopyAsync:
    case Opcode::CommitGroup:
    case Opcode::WaitGroup:
    case Opcode::TmaLoad:
    case Opcode::Release:
    case Opcode::Publish:
      throw CodegenError(fmt::format("kernel {}: pipelining its parts' gather would move {} an iteration later",
                                     p.name, opcode_name(i.opcode)));
    default:
      break;
  }
  for (const Region& r : i.regions)
    for (const Inst& inner : r.body) check_movable(p, inner);
}

void replace_uses(std::vector<Inst>& body, int from, int to) {
  for (Inst& i : body) {
    std::replace(i.args.begin(), i.args.end(), from, to);
    for (int& l : i.limits)
      if (l == from) l = to;
    for (Region& r : i.regions) replace_uses(r.body, from, to);
  }
}

// Where the pipelined body's gather (in the pending task's branch) waits on an L2 round trip
// after the publish, behind a block barrier of its own, fetch its words at the top of the body
// (the round trip under the stage's wait and the task's reduction) and gather them behind the
// warps' gather's barrier (one barrier a task): the row made at the top from what the loop
// carries, the gather taken out of the branch, under its condition, in the warps' gather's
// place — or just before the branch where the body has none.
void fetch_early(Program& p, Region& body) {
  const auto branch = std::find_if(body.body.begin(), body.body.end(), [](const Inst& i) { return i.opcode == Opcode::If; });
  if (branch == body.body.end() || branch == body.body.begin()) return;
  std::vector<Inst>& inner = branch->regions.at(0).body;
  const auto g = std::find_if(inner.begin(), inner.end(), [](const Inst& i) { return i.opcode == Opcode::GatherParts; });
  if (g == inner.end() || g->args.size() != 1) return;
  const Inst has = *(branch - 1);  // (the pending flag's test, made from the loop's args)
  if (has.opcode != Opcode::IndexLess || branch->args.at(0) != has.results.at(0)) return;
  // The row's index instructions, made again at the top of the body.
  std::map<int, const Inst*> defs;
  for (const Inst& i : inner)
    for (int v : i.results) defs[v] = &i;
  std::vector<Inst> top = {has};
  Cloner c{p, {}};
  std::function<bool(int)> remake = [&](int v) {
    const auto d = defs.find(v);
    if (d == defs.end()) return true;  // (from outside the branch)
    if (d->second->opcode != Opcode::Const && !is_index_arithmetic(d->second->opcode)) return false;
    if (c.to.count(v)) return true;
    for (int a : d->second->args)
      if (!remake(a)) return false;
    top.push_back(c.clone(*d->second));
    return true;
  };
  if (!remake(g->args[0])) return;
  const int row = c.value(g->args[0]);
  Inst fetch;
  fetch.opcode = Opcode::FetchParts;
  fetch.param = g->param;
  fetch.value = g->value;
  fetch.args = {row};
  fetch.results = {p.add_value(Type::words(static_cast<int64_t>(g->value), static_cast<int64_t>(g->results.size())))};
  top.push_back(fetch);
  Inst gather = *g;
  gather.args = {row, fetch.results[0], has.results[0]};
  const int old_row = g->args[0];
  inner.erase(g);
  replace_uses(inner, old_row, row);
  if (const auto d = defs.find(old_row); d != defs.end() && d->second->opcode != Opcode::Const)
    inner.erase(inner.begin() + (d->second - inner.data()));
  body.body.erase(branch - 1);  // (has: made at the top now)
  const auto warps = std::find_if(body.body.begin(), body.body.end(), [](const Inst& i) { return i.opcode == Opcode::GatherWarps; });
  if (warps != body.body.end()) {
    gather.args.insert(gather.args.end(), warps->args.begin(), warps->args.end());
    gather.results.insert(gather.results.end(), warps->results.begin(), warps->results.end());
    *warps = gather;
  } else {
    const auto at = std::find_if(body.body.begin(), body.body.end(), [](const Inst& i) { return i.opcode == Opcode::If; });
    body.body.insert(at, gather);
  }
  body.body.insert(body.body.begin(), top.begin(), top.end());
}

// The loop at `at` of the program's body, pipelined at its body's gather_parts `cut`.
void pipeline(Program& p, size_t at, size_t cut, bool fetch_parts_early) {
  Inst loop = p.body.body[at];
  Region& head = loop.regions.at(0);
  Region& body = loop.regions.at(1);
  std::vector<Inst> before(body.body.begin(), body.body.begin() + static_cast<std::ptrdiff_t>(cut));
  std::vector<Inst> moved(body.body.begin() + static_cast<std::ptrdiff_t>(cut), body.body.end() - 1);
  Inst yield = body.body.back();
  for (int v : yield.args) hoist(p, v, moved, before);
  // What the moved part reads from this iteration (the head's and the body's values before the
  // gather): carried — but constants, which it makes again.
  std::set<int> here(head.args.begin(), head.args.end()), used;
  for (const Inst& i : head.body) defined_in(i, here);
  for (const Inst& i : before) defined_in(i, here);
  for (const Inst& i : moved) {
    used_in(i, used);
    check_movable(p, i);
  }
  std::map<int, const Inst*> defs;  // (top level: what the moved part can read)
  for (const std::vector<Inst>* part : {&head.body, &before})
    for (const Inst& i : *part)
      for (int v : i.results) defs[v] = &i;
  std::set<int> constants;
  std::vector<int> needed;
  for (int v : used) {
    const auto def = defs.find(v);
    if (def != defs.end() && def->second->opcode == Opcode::Const)
      constants.insert(v);
    else if (here.count(v))
      needed.push_back(v);
  }
  const Carried carried = carry(p, needed, here, defs);
  constants.insert(carried.constants.begin(), carried.constants.end());
  const std::vector<int>& live = carried.values;
  for (int v : live)
    if (const Type& t = p.types.at(static_cast<size_t>(v)); t.kind != Type::Kind::Index && !t.is_tile() &&
                                                             t.kind != Type::Kind::Scalar)
      throw CodegenError(fmt::format("kernel {}: pipelining its parts' gather would carry %{} of {}", p.name, v,
                                     type_str(t)));

  // Before the loop: the carried values' first (unread) values, and the flag's 0 and 1.
  std::vector<Inst> prologue;
  auto make = [&](Inst i) {
    prologue.push_back(std::move(i));
    return prologue.back().results.at(0);
  };
  const int zero = make(constant(p, Type::index(), 0)), one = make(constant(p, Type::index(), 1));
  std::vector<int> inits = loop.args;
  for (int v : live) inits.push_back(make(constant(p, p.types.at(static_cast<size_t>(v)), 0)));
  inits.push_back(zero);

  // The moved part for the task a flag says is pending, reading `from` in place of the live values
  // (and its constants made again).
  auto finish = [&](const std::vector<int>& from, int pending, std::vector<Inst>& out) {
    Cloner c{p, {}};
    for (size_t k = 0; k < live.size(); ++k) c.to[live[k]] = from[k];
    Inst when;
    when.opcode = Opcode::If;
    Inst has = index_less(p, zero, pending);
    when.args = {has.results.at(0)};
    out.push_back(has);
    Region r;
    for (int v : constants) r.body.push_back(c.clone(*defs.at(v)));
    for (const std::vector<Inst>* part : {&head.body, &before})  // (in their order)
      for (const Inst& i : *part)
        if (carried.remade.count(&i)) r.body.push_back(c.clone(i));
    for (const Inst& i : moved) r.body.push_back(c.clone(i));
    when.regions.push_back(std::move(r));
    out.push_back(std::move(when));
  };

  // The loop: its head given the carried live values and the flag as args too.
  std::vector<int> head_live, head_args = head.args;
  for (int v : live) head_live.push_back(p.add_value(Type(p.types.at(static_cast<size_t>(v)))));
  head_args.insert(head_args.end(), head_live.begin(), head_live.end());
  const int pending = p.add_value(Type::index());
  head_args.push_back(pending);
  head.args = head_args;
  std::vector<Inst> new_body = before;
  finish(head_live, pending, new_body);
  yield.args.insert(yield.args.end(), live.begin(), live.end());
  yield.args.push_back(one);
  new_body.push_back(yield);
  body.body = std::move(new_body);
  if (fetch_parts_early) fetch_early(p, body);
  loop.args = inits;
  std::vector<int> after_live;  // (the loop's results after its own: the live values, the flag)
  for (int v : live) after_live.push_back(p.add_value(Type(p.types.at(static_cast<size_t>(v)))));
  const int after_pending = p.add_value(Type::index());
  loop.results.insert(loop.results.end(), after_live.begin(), after_live.end());
  loop.results.push_back(after_pending);
  std::vector<Inst> epilogue;
  finish(after_live, after_pending, epilogue);

  std::vector<Inst>& top = p.body.body;
  top[at] = std::move(loop);
  top.insert(top.begin() + static_cast<std::ptrdiff_t>(at) + 1, epilogue.begin(), epilogue.end());
  top.insert(top.begin() + static_cast<std::ptrdiff_t>(at), prologue.begin(), prologue.end());
}

}  // namespace

void pipeline_part_gathers(Program& p, bool fetch_parts_early) {
  for (size_t at = 0; at < p.body.body.size(); ++at) {
    const Inst& i = p.body.body[at];
    if (i.opcode != Opcode::While) continue;
    const std::vector<Inst>& body = i.regions.at(1).body;
    const auto gather = std::find_if(body.begin(), body.end(), [](const Inst& x) { return x.opcode == Opcode::GatherParts; });
    if (gather == body.end()) continue;
    pipeline(p, at, static_cast<size_t>(gather - body.begin()), fetch_parts_early);
    return;  // (one such loop a program)
  }
}

}  // namespace tilefuse::tir
