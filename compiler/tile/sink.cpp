#include "compiler/tile/sink.h"

#include <algorithm>

namespace tilefuse::tir {

namespace {

// Instructions with no effect but their value, cheap to compute anywhere in their region.
bool movable(const Inst& i) {
  if (is_index_arithmetic(i.opcode)) return i.regions.empty();
  switch (i.opcode) {
    case Opcode::Const:
    case Opcode::Splat:
    case Opcode::InBounds:
    case Opcode::InWindow:
    case Opcode::Iota:
    case Opcode::Compute:
      return i.regions.empty();
    default:
      return false;
  }
}

bool uses(const Inst& i, int v) {
  auto has = [&](const std::vector<int>& ids) { return std::find(ids.begin(), ids.end(), v) != ids.end(); };
  if (has(i.args) || has(i.limits)) return true;
  for (const Region& r : i.regions)
    for (const Inst& inner : r.body)
      if (uses(inner, v)) return true;
  return false;
}

void sink(Region& r) {
  for (Inst& i : r.body)
    for (Region& inner : i.regions) sink(inner);
  // From the bottom up, so that a chain moves down behind its last link.
  for (size_t k = r.body.size(); k-- > 0;) {
    if (!movable(r.body[k])) continue;
    size_t first = k + 1;
    while (first < r.body.size() &&
           std::none_of(r.body[k].results.begin(), r.body[k].results.end(),
                        [&](int v) { return uses(r.body[first], v); }))
      ++first;
    if (first == r.body.size()) {  // nothing uses it
      r.body.erase(r.body.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    if (first == k + 1) continue;  // already there
    Inst moved = std::move(r.body[k]);
    r.body.erase(r.body.begin() + static_cast<std::ptrdiff_t>(k));
    r.body.insert(r.body.begin() + static_cast<std::ptrdiff_t>(first - 1), std::move(moved));
  }
}

}  // namespace

void sink_to_uses(Program& p) { sink(p.body); }

}  // namespace tilefuse::tir
