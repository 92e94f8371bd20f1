#pragma once
// What the builders of Tile IR v2 programs from plan kernels share (build.cpp, row_reduction.cpp,
// row_loop.cpp): the schedule's layout, parameters through their views, elementwise nodes,
// iotas, and the output stores.
#include <functional>
#include <map>

#include "compiler/fusion/plan.h"
#include "compiler/tile/ir.h"

namespace tilefuse::tir {

// The kernel's schedule as a layout: each thread holds rows_per_thread rows thread_rows apart
// and, in each, chunks of vec contiguous columns threads_per_row·vec apart.
Layout layout_of(const TileSchedule& s);
// A parameter seen through the schedule's [rows, cols] view: its extents along the collapsed
// domain (view_of), merged to two axes; split along the row dimensions where it is broadcast
// along some of them but not others.
Param param_of(const Graph& g, NodeId id, bool output, const Shape& view, const TileSchedule& s);
// A program for kernel k: its name, the schedule's layout and grid, and whether its indices
// need 64 bits.
Program program_of(const Kernel& k);
// x as f32 (cast unless it is).
int as_f32(Builder& b, int x);
// Node id's value v as its uses in the kernel see it: rounded to id's dtype where they see the
// value that reaches memory (rounds_where_computed), v as it is elsewhere.
int as_used(Builder& b, const Graph& g, const Kernel& k, NodeId id, int v);
// Node `id` (elementwise) of its args' values, rounded to its dtype where its uses in the kernel
// see the value that reaches memory (rounds_where_computed).
int compute_node(Builder& b, const Graph& g, const Kernel& k, NodeId id, const std::vector<int>& args);
// The difference u − c of a 16-bit exp node e^(u − c) whose u runs along the row and c is one
// value per row (`spans_row` says which run along it), the difference computed in kernel k (not
// read from memory): softmax's exps. Null for other nodes.
const Node* shifted_exp_arg(const Graph& g, const Kernel& k, const Node& n,
                            const std::function<bool(NodeId)>& spans_row);
// −c·log2 e of an f32 value c: an exponent's shift in base 2.
int minus_log2e_times(Builder& b, int c);
// e^(x·k − c) as 2^(x·(k·log2 e) − c·log2 e) from the scalar `k_log2e` = k·log2 e and
// `minus_c2` = −c·log2 e: one fma and one ex2 (flushing subnormal results) an element.
int exp2_fma(Builder& b, int x, int k_log2e, int minus_c2);
// Such an exp's f32 value from u's and c's: 2^(u·log2 e − c·log2 e), one fma and one ex2 (flushing
// subnormal results, as a 16-bit exp's) an element and c·log2 e once a row, the difference not
// rounded to 16 bits on the way. c·log2 e's rounding scales the row by at most
// 1 + |c|·2^-24·ln 2 (1e-3 at |c| = 1e4, under half a bf16 ulp).
int shifted_exp2(Builder& b, int u, int c);
// exp(c_from − c_to) in f32: what brings terms exp(u − c_from) to exp(u − c_to). `fast` where
// the terms are shifted_exp2's: 2^((c_from − c_to)·log2 e), one multiply and one ex2 (flushing
// subnormal results) in place of the accurate exp's range reduction (about 17 instructions).
// The factor's relative error, ≈ |c_from − c_to|·2^-23, weighs on a sum only by its part's
// share of it, which is at most exp(c_from − c_to) of the whole.
int shift_factor(Builder& b, int c_from, int c_to, bool fast = false);
// An online sum's partial s (f32) of terms exp(u − c_from) brought to the shift c_to:
// s · exp(c_from − c_to), 0 where s is (so that 0 · inf stays 0; a NaN stays NaN).
int rescaled(Builder& b, int s, int c_from, int c_to, bool fast = false);
// The sum over a row of `cols` columns of a value x (of `dtype`) constant along it: x · cols, the
// width an f32 scalar (a 16-bit one would be rounded: 4097 in bf16 is 4096) and the product not
// rounded to `dtype` — a reduction's result is rounded only where its uses see memory
// (rounds_where_computed), as the callers do for every reduction.
int times_width(Builder& b, int x, int64_t cols, DType dtype);
// A graph iota in a kernel whose tiles run over the domain's elements in order (row·cols + col):
// the element's index along the iota's axis, from its index in the domain (a windowed row's
// columns, where `window` is its vector: Inst::window).
int iota_of(Builder& b, const Kernel& k, const Node& n, int row0, int col0, int window = 0);
// A row kernel held in one block's or one cluster's registers (windowed, staged, claimed,
// split too): row_reduction.cpp.
Program row_reduction(const Graph& g, const Kernel& k);
// A row kernel whose rows are visited by a loop over column tiles: few long rows in parts, a
// block each (TileSchedule::looped_parts), or whole rows; each reduction a partial per thread
// carried: row_loop.cpp.
Program row_loop(const Graph& g, const Kernel& k);

// Each output's value stored by store(param, tile) (splat first where it was computed from
// constants alone; cast to the output's dtype where it was computed in f32: a shifted exp); the
// first output whose value is not a tile of its view stops it: its node, or -1 when every one
// was stored.
template <typename TileShape, typename Store>
NodeId store_outputs(Builder& b, const Kernel& k, const std::map<NodeId, int>& value_of, TileShape tile_shape,
                     Store store) {
  const Program& p = b.program();
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    const size_t param = k.inputs.size() + i;
    const Param& prm = p.params[param];
    int v = value_of.at(k.outputs[i]);
    if (!p.types[static_cast<size_t>(v)].is_tile()) v = b.splat(v, tile_shape(prm));
    if (p.types[static_cast<size_t>(v)].shape != tile_shape(prm)) return k.outputs[i];
    if (p.types[static_cast<size_t>(v)].dtype != prm.dtype) v = b.compute(Op::Cast, {v}, prm.dtype);  // (f32-held)
    store(static_cast<int>(param), v);
  }
  return -1;
}
// The same, each at its view's offsets with its masks.
template <typename TileShape, typename Offsets, typename Masks>
NodeId store_outputs(Builder& b, const Kernel& k, const std::map<NodeId, int>& value_of, TileShape tile_shape,
                     Offsets offsets, Masks masks) {
  const Program& p = b.program();
  return store_outputs(b, k, value_of, tile_shape, [&](int param, int v) {
    const Param& prm = p.params[static_cast<size_t>(param)];
    b.store(param, offsets(prm), v, masks(prm));
  });
}


}  // namespace tilefuse::tir
