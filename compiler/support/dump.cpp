#include "compiler/support/dump.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "compiler/support/error.h"

namespace tilefuse {

bool dump_enabled(const std::string& stage) {
  const char* env = std::getenv("TILEFUSE_DUMP");
  if (!env) return false;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ','))
    if (item == stage || item == "all") return true;
  return false;
}

void dump(const std::string& stage, const std::string& name, const std::string& text) {
  if (!dump_enabled(stage)) return;
  const char* dir = std::getenv("TILEFUSE_DUMP_DIR");
  if (dir && *dir) {
    std::string path = fmt::format("{}/{}.{}", dir, name, stage);
    std::ofstream f(path);
    if (!f) throw Error(fmt::format("TILEFUSE_DUMP_DIR: cannot write {}", path));
    f << text;
    return;
  }
  fmt::print(stderr, "// ---- {} {} ----\n{}\n", stage, name, text);
}

}  // namespace tilefuse
