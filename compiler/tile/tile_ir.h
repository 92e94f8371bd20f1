#pragma once
// Tile IR: a kernel is a program over tiles. Each program instance (a block) owns one tile of
// the domain; values are tiles held in registers, distributed over the block's threads as the
// schedule says. A tile spans the tile's rows, its columns, both, or neither (broadcast).
#include <string>
#include <vector>

#include "compiler/fusion/schedule.h"
#include "compiler/graph/graph.h"

namespace tilefuse {

struct TileType {
  DType dtype = DType::F32;
  bool rows = true;  // varies along the tile's rows (else broadcast: one row)
  bool cols = true;  // varies along the tile's columns
};
std::string tile_type_str(const TileType& t, const TileSchedule& s);

enum class TileOpcode {
  Load,      // masked load of this program's tile of a parameter (its broadcast view)
  Constant,  // a scalar broadcast to any tile
  Compute,   // an elementwise graph op (unary, binary, comparison, where, cast)
  Reduce,    // reduction of a tile along its columns (the whole row): sum, max or min
  Store,     // masked store of a tile to an output parameter
};

struct TileInst {
  explicit TileInst(TileOpcode o) : opcode(o) {}
  TileOpcode opcode;
  int result = -1;        // value id; -1 for stores
  Op op = Op::Add;        // Compute, Reduce: the graph op
  std::vector<int> args;  // value ids
  int param = -1;         // Load/Store: parameter index
  double value = 0;       // Constant
  TileType type;          // result type (Store: the stored tile's type)
  int pass = 0;           // Reduce: the pass over the row that completes it (1-based)
  int online_with = -1;   // Reduce (sum): the max reduction whose pass it shares, by rescaling
  int online_shift = -1;  // Reduce (online sum of exp(u − c(m))): the value c(m)
  bool nonpositive_arg = false;  // Compute exp: its argument is never positive (graph/sign.h)
};

struct TileParam {
  std::string name;  // graph input name, output name, or %id of an intermediate
  NodeId node = -1;
  DType dtype = DType::F32;
  Shape view;  // aligned to schedule.dims: 1 where broadcast
  bool output = false;
};

struct TileProgram {
  std::string name;
  std::vector<TileParam> params;  // inputs first, then outputs
  TileSchedule schedule;
  std::vector<TileInst> body;
  int num_values = 0;
  int passes = 1;  // passes over each row (a looped row kernel re-reads its inputs in each)
};

std::string print_tile_program(const TileProgram& p);

}  // namespace tilefuse
