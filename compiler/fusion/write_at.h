#pragma once
// The kernel of a write_at node (graph.h: a decode step's new keys or values appended to a KV
// cache in place): the node alone, its value's slices stored at the positions read at run time.
#include <string>

#include "compiler/fusion/device_profile.h"
#include "compiler/fusion/plan.h"

namespace tilefuse {

// Fills k (whose nodes are set) as a Write kernel: domain, schedule and cost; or false with the
// reason in `why` when k holds anything but one write_at (a write is a kernel of its own: it
// stores into its cache's memory, which no other kernel of the plan may read before it).
bool write_kernel(const Graph& g, Kernel& k, const DeviceProfile& p, std::string* why);

// The write's extents: the cache as [outer, extent, inner] along its axis, the value's slices n.
struct WriteExtents {
  int64_t outer = 1, extent = 1, inner = 1, slices = 1;
};
WriteExtents write_extents(const Graph& g, const Node& write);

}  // namespace tilefuse
