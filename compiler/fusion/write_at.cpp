#include "compiler/fusion/write_at.h"

#include <fmt/format.h>

#include <algorithm>

namespace tilefuse {

WriteExtents write_extents(const Graph& g, const Node& write) {
  const size_t axis = static_cast<size_t>(write.axes.at(0));
  WriteExtents e;
  for (size_t d = 0; d < write.shape.size(); ++d) {
    if (d < axis) e.outer *= write.shape[d];
    if (d > axis) e.inner *= write.shape[d];
  }
  e.extent = write.shape[axis];
  e.slices = g.node(write.operands[1]).shape[axis];
  return e;
}

bool write_kernel(const Graph& g, Kernel& k, const DeviceProfile& p, std::string* why) {
  if (k.nodes.size() != 1 || g.node(k.nodes[0]).op != Op::WriteAt) {
    *why = "a write_at is a kernel of its own: it stores into its cache's memory in place";
    return false;
  }
  const Node& w = g.node(k.nodes[0]);
  const Node &value = g.node(w.operands[1]), &position = g.node(w.operands[2]);
  const WriteExtents e = write_extents(g, w);
  k.kind = ScheduleKind::Write;
  k.domain = value.shape;
  k.inputs = {std::min(value.id, position.id), std::max(value.id, position.id)};  // the cache is written, not read
  k.outputs = {w.id};
  TileSchedule& s = k.schedule;
  s = {};
  s.writes_in_place = true;
  s.rows = e.outer * e.slices;
  s.cols = e.inner;
  s.dims = {s.rows, s.cols};
  // 16-byte vectors where every slice starts 16-byte aligned; threads a power of two from a warp
  // to 256 covering the slice (its excess masked), more blocks along a longer one.
  const int size = static_cast<int>(dtype_size(w.dtype));
  s.vec = 16 / size;
  while (s.vec > 1 && e.inner % s.vec != 0) s.vec /= 2;
  const int64_t vectors = (e.inner + s.vec - 1) / s.vec;
  s.threads_per_row = 32;
  while (s.threads_per_row < 256 && s.threads_per_row < vectors) s.threads_per_row *= 2;
  KernelCost& c = k.cost;
  c = {};
  c.bytes_read = num_elements(value.shape) * size + num_elements(position.shape) * int64_t(dtype_size(position.dtype));
  c.bytes_written = num_elements(value.shape) * size;
  c.registers = 16;
  c.blocks_per_sm = 8;
  c.memory_s = static_cast<double>(c.bytes()) / p.hbm_bytes_per_s;
  c.predicted_s = c.memory_s + p.launch_s;
  return true;
}

}  // namespace tilefuse
