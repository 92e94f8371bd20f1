#include "compiler/support/dump.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "compiler/support/error.h"

namespace tilefuse {

// The stages named in TILEFUSE_DUMP; an unknown name is reported once, on stderr.
static const std::set<std::string>& dump_stages() {
  static const std::set<std::string> stages = [] {
    static const std::set<std::string> known = {"graph", "plan", "tile", "llvm", "ptx", "all"};
    std::set<std::string> named;
    const char* env = std::getenv("TILEFUSE_DUMP");
    std::stringstream ss(env ? env : "");
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;
      if (!known.count(item))
        fmt::print(stderr, "tilefuse: TILEFUSE_DUMP names an unknown stage '{}' (known: graph, plan, tile, llvm, ptx, all)\n",
                   item);
      named.insert(item);
    }
    return named;
  }();
  return stages;
}

bool dump_enabled(const std::string& stage) { return dump_stages().count(stage) || dump_stages().count("all"); }

void dump(const std::string& stage, const std::string& name, const std::string& text) {
  if (!dump_enabled(stage)) return;
  const char* dir = std::getenv("TILEFUSE_DUMP_DIR");
  if (dir && *dir) {
    std::string path = fmt::format("{}/{}.{}", dir, name, stage);
    std::ofstream f(path);
    f << text;
    f.close();
    if (!f) throw Error(fmt::format("TILEFUSE_DUMP_DIR: cannot write {}: {}", path, std::strerror(errno)));
    return;
  }
  fmt::print(stderr, "// ---- {} {} ----\n{}\n", stage, name, text);
}

}  // namespace tilefuse
