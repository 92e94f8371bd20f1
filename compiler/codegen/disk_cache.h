#pragma once
// Compiled kernels kept on disk between processes, keyed by everything that decides the code:
// the Tile IR text, the target, the LLVM version and a hash of the compiler's sources. One file
// per kernel, written to a temporary name and renamed into place (so a reader sees a whole entry
// or none, whatever other processes write at once), in one of 256 shards named by the key's first
// two characters. A store removes the least recently used entries past the size limit: of its
// own shard against its 1/256 of the limit where the shard holds many, else of the whole cache.
//
// Where: TILEFUSE_CACHE_DIR, else $XDG_CACHE_HOME/tilefuse, else $HOME/.cache/tilefuse.
// TILEFUSE_CACHE=0 (or off) turns it off; TILEFUSE_CACHE_MAX_MB bounds it (default 512).
#include <cstdint>
#include <optional>
#include <string>

#include "compiler/codegen/compile.h"

namespace tilefuse {

struct DiskCacheInfo {
  std::string dir;        // empty when the disk cache is off
  int64_t entries = 0;    // readable entries
  int64_t invalid = 0;    // files that are not whole entries (none, unless something else wrote there)
  int64_t bytes = 0;
  int64_t limit_bytes = 0;
};

std::string disk_cache_dir();
DiskCacheInfo disk_cache_info();
// Removes every entry; returns how many.
int64_t disk_cache_clear();

// The entry for `key` whose Tile IR and target are `tile_ir` and `target`, if the disk has it.
std::optional<CompiledKernel> disk_cache_load(const std::string& key, const std::string& tile_ir,
                                              const std::string& target);
void disk_cache_store(const std::string& key, const std::string& target, const CompiledKernel& c);

}  // namespace tilefuse
