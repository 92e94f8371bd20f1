#pragma once
// Pipelining a row's parts: a Tile IR v2 pass over a `while` loop (straight in the program's body)
// whose body publishes a task's part and then gathers the row's parts (`gather_parts`, split
// rows). As built, each iteration waits for the other blocks' parts of its own task's row right
// after publishing its own: the wait — the slowest part's publish and an L2 round trip — sits on
// every task's path. The pass moves everything from the gather to the end of the body one
// iteration later: iteration j publishes task j's part, then (from the second iteration on)
// gathers task j − 1's row and finishes task j − 1, whose parts were published while task j was
// being reduced; the last task is finished after the loop. What the moved part reads from the
// iteration before it — the values the head or the part before the gather defined — is carried
// by the loop (constants are made again instead), with a flag that says a task is pending —
// fewer values where cheap per-row ones can be made again from others the loop carries (a
// softmax's task, warps' max, terms and block max, not also its row, "seen" bits and finite
// maxima). What moves must not touch stages, counters or barriers (refused).
// The yield's values must not come from the moved part.
// With `fetch_parts_early` the pending task's row's words are then fetched at the top of the
// body (`fetch_parts`: warp 0's lanes issue the loads, their L2 round trip under the stage's
// wait and the task's reduction) and gathered out of the pending branch — under its condition,
// from those words — in the place of the body's warps' gather, whose warps tiles it gathers
// behind the same block barrier: one barrier a task.
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

void pipeline_part_gathers(Program& p, bool fetch_parts_early);

}  // namespace tilefuse::tir
