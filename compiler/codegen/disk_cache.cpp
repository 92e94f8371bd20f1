#include "compiler/codegen/disk_cache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace tilefuse {

namespace fs = std::filesystem;

namespace {

constexpr const char* kMagic = "tilefuse-kernel 4";
constexpr const char* kSuffix = ".tfk";
constexpr int64_t kShards = 256;

bool cache_off() {
  const char* v = std::getenv("TILEFUSE_CACHE");
  return v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0);
}

int64_t limit_bytes() {
  if (const char* v = std::getenv("TILEFUSE_CACHE_MAX_MB")) {
    char* end = nullptr;
    const long long mb = std::strtoll(v, &end, 10);
    if (end != v && *end == 0 && mb > 0) return mb << 20;
  }
  return int64_t{512} << 20;
}

// A field: "name size\n" then the bytes and a newline.
void put(std::ostream& os, const char* name, const std::string& bytes) {
  os << name << ' ' << bytes.size() << '\n' << bytes << '\n';
}
bool get(std::istream& is, const char* name, std::string* bytes) {
  std::string word;
  size_t size = 0;
  if (!(is >> word >> size) || word != name || is.get() != '\n') return false;
  bytes->resize(size);
  if (!is.read(bytes->data(), static_cast<std::streamsize>(size))) return false;
  return is.get() == '\n';
}

// The whole entry in `path`, or nullopt for a file that is not one.
std::optional<CompiledKernel> read_entry(const fs::path& path, std::string* target) {
  std::ifstream in(path, std::ios::binary);
  std::string magic;
  if (!std::getline(in, magic) || magic != kMagic) return std::nullopt;
  CompiledKernel c;
  std::string numbers;
  if (!get(in, "target", target) || !get(in, "name", &c.name) || !get(in, "launch", &numbers) ||
      !get(in, "tile_ir", &c.tile_ir) || !get(in, "llvm_ir", &c.llvm_ir) || !get(in, "ptx", &c.ptx))
    return std::nullopt;
  std::istringstream ls(numbers);
  int persistent = 0, cooperative = 0;
  if (!(ls >> c.block_threads >> c.grid >> c.cluster_blocks >> c.dynamic_shared_bytes >> persistent >>
        c.workspace_bytes >> cooperative))
    return std::nullopt;
  c.persistent = persistent != 0;
  c.cooperative = cooperative != 0;
  std::string maps;
  if (!get(in, "tensor_maps", &maps)) return std::nullopt;
  std::istringstream ms(maps);
  size_t count = 0;
  if (!(ms >> count)) return std::nullopt;
  for (size_t k = 0; k < count; ++k) {
    TensorMapSpec m;
    int dtype = -1;
    if (!(ms >> m.tensor >> dtype >> m.dims[0] >> m.dims[1] >> m.dims[2] >> m.strides[0] >>
          m.strides[1] >> m.box[0] >> m.box[1] >> m.box[2]))
      return std::nullopt;
    if (dtype != static_cast<int>(DType::F32) && dtype != static_cast<int>(DType::F16) &&
        dtype != static_cast<int>(DType::BF16))
      return std::nullopt;
    m.dtype = static_cast<DType>(dtype);
    c.tensor_maps.push_back(m);
  }
  std::string end;
  if (!std::getline(in, end) || end != "end") return std::nullopt;
  return c;
}

// The entries of one folder.
std::vector<fs::directory_entry> entries_in(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), stop; !ec && it != stop; it.increment(ec))
    if (it->path().extension() == kSuffix && it->is_regular_file(ec)) out.push_back(*it);
  return out;
}

// Entries live in 256 shards named by their key's first two characters, each bounded by its
// share of the limit: a store looks over its own shard's hundred or so entries, not the whole
// cache (a scan of 26,000 entries took 70-90 ms, most of a matmul's cold compile).
fs::path shard_of(const std::string& dir, const std::string& key) {
  return fs::path(dir) / key.substr(0, std::min<size_t>(2, key.size()));
}

// Every entry: the shards', and any left at the top by the flat layout before them.
std::vector<fs::directory_entry> entries(const std::string& dir) {
  std::vector<fs::directory_entry> out = entries_in(dir);
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), stop; !ec && it != stop; it.increment(ec))
    if (it->is_directory(ec) && it->path().filename().string().size() == 2) {
      std::vector<fs::directory_entry> shard = entries_in(it->path());
      out.insert(out.end(), shard.begin(), shard.end());
    }
  return out;
}

// The flat layout's entries are never read again: removed when the first shard is made.
void remove_flat_entries(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : entries_in(dir)) fs::remove(e.path(), ec);
}

// Oldest first (reads touch their entry), until `all` is under 80% of `limit`; never `stored`,
// the entry just written.
void evict_oldest(const std::vector<fs::directory_entry>& all, int64_t limit, const fs::path& stored) {
  std::vector<std::pair<fs::file_time_type, fs::directory_entry>> by_age;
  int64_t total = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : all) {
    total += static_cast<int64_t>(e.file_size(ec));
    by_age.push_back({e.last_write_time(ec), e});
  }
  if (total <= limit) return;
  std::sort(by_age.begin(), by_age.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [when, e] : by_age) {
    if (total <= limit / 10 * 8) break;
    if (e.path() == stored) continue;
    const int64_t size = static_cast<int64_t>(e.file_size(ec));
    if (fs::remove(e.path(), ec)) total -= size;
  }
}

// A shard of many entries (a cache of over ~1000) holds its 1/256 of the limit, and only its own
// files are looked at; where shards hold a few, the whole cache is, cheaply, against the whole
// limit (a small limit is kept exactly).
void evict(const std::string& dir, const fs::path& shard, const fs::path& stored) {
  constexpr size_t kFewEntries = 4;
  std::vector<fs::directory_entry> own = entries_in(shard);
  if (own.size() <= kFewEntries)
    evict_oldest(entries(dir), limit_bytes(), stored);
  else
    evict_oldest(own, limit_bytes() / kShards, stored);
}

}  // namespace

std::string disk_cache_dir() {
  if (cache_off()) return "";
  if (const char* d = std::getenv("TILEFUSE_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "tilefuse").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "tilefuse").string();
  return "";
}

DiskCacheInfo disk_cache_info() {
  DiskCacheInfo info;
  info.dir = disk_cache_dir();
  info.limit_bytes = limit_bytes();
  if (info.dir.empty()) return info;
  std::error_code ec;
  for (const fs::directory_entry& e : entries(info.dir)) {
    std::string target;
    (read_entry(e.path(), &target) ? info.entries : info.invalid)++;
    info.bytes += static_cast<int64_t>(e.file_size(ec));
  }
  return info;
}

int64_t disk_cache_clear() {
  const std::string dir = disk_cache_dir();
  int64_t n = 0;
  std::error_code ec;
  if (!dir.empty())
    for (const fs::directory_entry& e : entries(dir)) n += fs::remove(e.path(), ec) ? 1 : 0;
  return n;
}

std::optional<CompiledKernel> disk_cache_load(const std::string& key, const std::string& tile_ir,
                                              const std::string& target) {
  const std::string dir = disk_cache_dir();
  if (dir.empty()) return std::nullopt;
  const fs::path path = shard_of(dir, key) / (key + kSuffix);
  std::string stored_target;
  std::optional<CompiledKernel> c = read_entry(path, &stored_target);
  // The key is a hash: the entry must be for this very Tile IR and target.
  if (!c || c->tile_ir != tile_ir || stored_target != target) return std::nullopt;
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // recently used: evicted last
  return c;
}

void disk_cache_store(const std::string& key, const std::string& target, const CompiledKernel& c) {
  const std::string dir = disk_cache_dir();
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path shard = shard_of(dir, key);
  if (fs::create_directories(shard, ec)) remove_flat_entries(dir);
  // A file of this process's own, renamed into place whole: concurrent writers of one key leave
  // one of their (identical) entries, and no reader sees a partial one. A cache that cannot be
  // written is only slower, so failures are silent.
  std::string pattern = (shard / fmt::format(".{}.XXXXXX", key)).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back(0);
  const int fd = mkstemp(name.data());
  if (fd < 0) return;
  ::close(fd);
  const std::string tmp = name.data();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << kMagic << '\n';
    put(out, "target", target);
    put(out, "name", c.name);
    put(out, "launch",
        fmt::format("{} {} {} {} {} {} {}", c.block_threads, c.grid, c.cluster_blocks, c.dynamic_shared_bytes,
                    c.persistent ? 1 : 0, c.workspace_bytes, c.cooperative ? 1 : 0));
    std::string maps = std::to_string(c.tensor_maps.size());
    for (const TensorMapSpec& m : c.tensor_maps)
      maps += fmt::format(" {} {} {} {} {} {} {} {} {} {}", m.tensor, static_cast<int>(m.dtype), m.dims[0],
                          m.dims[1], m.dims[2], m.strides[0], m.strides[1], m.box[0], m.box[1], m.box[2]);
    put(out, "tile_ir", c.tile_ir);
    put(out, "llvm_ir", c.llvm_ir);
    put(out, "ptx", c.ptx);
    put(out, "tensor_maps", maps);
    out << "end\n";
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return;
    }
  }
  const fs::path path = shard / (key + kSuffix);
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return;
  }
  evict(dir, shard, path);
}

}  // namespace tilefuse
