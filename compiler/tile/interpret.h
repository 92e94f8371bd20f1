#pragma once
// A Tile IR v2 program run on the host: the semantics of its ops on whole tiles, independent of
// how codegen spreads a tile over threads (a `lanes` or `warps` tile is the array of the
// threads' or warps' values; a fragment or a shared stage is its tile's elements in row-major
// order). It checks the programs the passes build against the float64 reference where no GPU
// is present (CI), and it is stricter than the GPU where the IR leaves a value open:
// - an element a masked load skips is NaN, not whatever the clamped address held; so is a
//   stage no copy has filled, and an element past a flat domain's end;
// - every access is bounds-checked, and an unmasked index past its view's extent is an error;
//   index arithmetic that goes negative or passes the program's 32-bit indices is one too;
// - an asynchronous copy lands when a WaitGroup has waited for its group (its stage NaN until
//   then), a TMA load completes its stage's phase once every panel has landed, and a wait for a
//   phase of the wrong parity waits; where every thread waits the launch fails as a deadlock,
//   naming what each waits for (a hang on the GPU);
// - a TMA or bulk stage is read only after this thread waited for that fill, a TMA fill comes
//   only after its thread waited for the stage's last release (and lands only where that release
//   is complete), and no stage is released or copied into while
//   a product that reads it is in flight (before its dot_wait); a turn is handed over only to a
//   group that took the last, and none is left over;
// - a cluster's blocks at different exchanges, or one exchanging after another finished, fail.
//
// The blocks run one after another; a cluster's blocks side by side, each on a thread of its own;
// past Specialize the producer and each consumer group on threads of their own, meeting at the
// stages' barriers (a consumer group's warps are one thread: its barriers and its warpgroups'
// turns at steps are no-ops). A grid whose blocks wait for one another's writes (split rows
// meeting in the workspace: GatherParts) runs every block side by side.
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

// Why `p` cannot be interpreted (a grid of other than one axis, which codegen has not either), or
// "" where it can.
std::string not_interpretable(const Program& p);

// Runs `p` over `args` (one per parameter, in order) as a launch of `blocks` blocks (a
// persistent grid's: its NumPrograms; 0: the program's grid), the launch's `epoch` stamped into
// the workspace's words (nonzero: a zeroed workspace holds none of this launch's). Throws Error
// where the program goes wrong as the header says (naming the kernel, and the block where one
// did), and UnsupportedError where not_interpretable says so.
void interpret(const Program& p, const std::vector<HostArg>& args, int64_t blocks = 0, uint32_t epoch = 1);

}  // namespace tilefuse::tir
