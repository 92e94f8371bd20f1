#pragma once
// The Tile IR v2 verifier: run between passes and after parsing.
#include <string>
#include <vector>

#include "compiler/tile/ir.h"

namespace tilefuse::tir {

// Every value defined before its use, in its region or an enclosing one; operand and result
// types as each instruction needs them (tiles in the program's layout, loads and stores within
// their parameter's view, numpy broadcasting between tiles, a For's carried values matching its
// yield); a Yield only at the end of a For's region. Returns one sentence per problem.
std::vector<std::string> program_problems(const Program& p);
// Throws Error listing the problems, if any.
void verify_program(const Program& p);

}  // namespace tilefuse::tir
