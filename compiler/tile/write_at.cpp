#include "compiler/tile/write_at.h"

#include <fmt/format.h>

#include <climits>

#include "compiler/fusion/write_at.h"
#include "compiler/support/error.h"
#include "compiler/tile/ir_verify.h"

namespace tilefuse::tir {

// Block (slice r of outer index o = r / n, piece c): the slice's piece loaded from the value
// ([outer·n, inner]) and stored into the cache ([outer·extent, inner]) at row o·extent + p + r % n,
// p = ⌈position[o]⌉ (at most the extent, so that the index cannot wrap), masked at and past the
// end of o's rows (a position too close to the end drops the slices that would pass it).
Program write_at_program(const Graph& g, const Kernel& k) {
  const TileSchedule& s = k.schedule;
  const Node& w = g.node(k.outputs.at(0));
  const Node &value = g.node(w.operands[1]), &position = g.node(w.operands[2]), &cache = g.node(w.operands[0]);
  const WriteExtents e = write_extents(g, w);
  const size_t axis = static_cast<size_t>(w.axes[0]);
  Program p;
  p.name = k.name;
  p.layout = {{1, s.vec}, {1, s.threads_per_row}, {1, 1}};
  p.grid = {s.grid()};
  p.wide_indices = (e.outer + 1) * e.extent * e.inner > INT32_MAX;
  // The parameters in the kernel's order (its inputs, then the cache it writes in place): the
  // runtime passes the tensors so.
  int value_param = -1, position_param = -1;
  for (NodeId id : k.inputs) {
    Param prm;
    prm.name = tensor_name(g.node(id));
    prm.dtype = g.node(id).dtype;
    if (id == value.id) {
      value_param = static_cast<int>(p.params.size());
      prm.view = {e.outer * e.slices, e.inner};
    } else if (id == position.id) {
      position_param = static_cast<int>(p.params.size());
      prm.view = {num_elements(position.shape), 1};
    } else {
      throw CodegenError(fmt::format("{}: a write kernel reads %{}, neither its value nor its position", k.name, id));
    }
    p.params.push_back(prm);
  }
  if (value_param < 0 || position_param < 0)
    throw CodegenError(fmt::format("{}: a write kernel needs its value and its position as inputs", k.name));
  Param out;
  out.name = tensor_name(cache);
  out.dtype = w.dtype;
  out.view = {e.outer * e.extent, e.inner};  // the cache, written in place
  out.output = true;
  const int cache_param = static_cast<int>(p.params.size());
  p.params.push_back(out);

  Builder b(p, p.body);
  const int pid = b.program_id(0), zero = b.index(0);
  const int64_t tile_cols = s.tile_cols();
  const int slice = b.div(pid, b.index(s.col_blocks()));
  const int col0 = b.mul(b.rem(pid, b.index(s.col_blocks())), b.index(tile_cols));
  const int outer = b.div(slice, b.index(e.slices));
  // The position's element for this outer index: its extents along the cache's axes before `axis`.
  const Shape outer_dims(cache.shape.begin(), cache.shape.begin() + static_cast<std::ptrdiff_t>(axis));
  Shape own(outer_dims.size(), 1);
  for (size_t i = 0; i < position.shape.size(); ++i) {
    const size_t d = cache.shape.size() - position.shape.size() + i;
    if (d < axis) own[d] = position.shape[i];
  }
  const int at = b.broadcast_index(outer, outer_dims, own);
  const int pos = b.min(b.ceil_index(b.load(position_param, {at, zero}, {1, 1})), b.index(e.extent));
  const int first = b.mul(outer, b.index(e.extent));
  const int row = b.add(first, b.add(pos, b.rem(slice, b.index(e.slices))));
  const bool ragged = e.inner % tile_cols != 0;
  const int v = b.load(value_param, {slice, col0}, {1, tile_cols}, {false, ragged});
  b.store(cache_param, {row, col0}, v, {true, ragged}, {b.add(first, b.index(e.extent)), -1});
  verify_program(p);
  return p;
}

}  // namespace tilefuse::tir
