#pragma once
// A Tile IR v2 program run on the host: the semantics of its ops on whole tiles, independent of
// how codegen spreads a tile over threads (a `lanes` or `warps` tile is the array of the
// threads' or warps' values; a fragment is its tile's elements in row-major order). It checks
// the programs the passes build against the float64 reference where no GPU is present (CI), and
// it is stricter than the GPU where the IR leaves a value open: an element a masked load skips is
// NaN, not whatever the clamped address held; every access is bounds-checked; a cluster's blocks
// that exchange values a different number of times is an error, not a hang.
//
// The blocks run one after another (a cluster's blocks side by side, each on a thread of its
// own, meeting at each exchange), so a grid whose blocks wait for one another's writes cannot
// run here. Programs of warpgroup MMA, TMA or warp specialization are not interpreted.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/tile/ir.h"

namespace tilefuse::tir {

// A parameter's memory: its elements in its dtype (a workspace's f32 view, then u32 counters).
struct HostArg {
  uint8_t* data = nullptr;
  size_t bytes = 0;
};

// Why `p` cannot be interpreted (its first op that this interpreter lacks), or "" where it can.
std::string not_interpretable(const Program& p);

// Runs `p` over `args` (one per parameter, in order) as a launch of `blocks` blocks (a
// persistent grid's: its NumPrograms; 0: the program's grid). Throws Error where an access
// leaves its parameter's memory or a cluster's blocks fall out of step, UnsupportedError where
// not_interpretable says so.
void interpret(const Program& p, const std::vector<HostArg>& args, int64_t blocks = 0);

}  // namespace tilefuse::tir
