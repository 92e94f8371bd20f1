#pragma once
// TILEFUSE_DUMP=graph,plan,tile,llvm,ptx (or "all") prints those stages from any program that
// uses the library; TILEFUSE_DUMP_DIR=dir writes them to dir/<name>.<stage> instead of stderr.
// TILEFUSE_DUMP is read at the first dump; an unknown stage name is reported then, on stderr.
#include <string>

namespace tilefuse {

bool dump_enabled(const std::string& stage);
void dump(const std::string& stage, const std::string& name, const std::string& text);

}  // namespace tilefuse
