#include "runtime/device_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "compiler/codegen/disk_cache.h"
#include "compiler/fusion/library_gemm.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda_driver.h"

namespace tilefuse {

Timing summarize_ms(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms[std::min(ms.size() - 1, ms.size() * 9 / 10)]};
}

int64_t minimum_bytes(const Graph& g) {
  int64_t b = 0;
  for (NodeId id : g.inputs()) b += num_elements(g.node(id).shape) * static_cast<int64_t>(dtype_size(g.node(id).dtype));
  for (const GraphOutput& o : g.outputs())
    b += num_elements(g.node(o.node).shape) * static_cast<int64_t>(dtype_size(g.node(o.node).dtype));
  return b;
}

double plan_flops(const Plan& p) {
  double flops = 0;
  for (const Kernel& k : p.kernels) flops += k.cost.flops;
  return flops;
}

Timing time_copy(size_t bytes, int iters) {
  cuda::DeviceBuffer src(bytes), dst(bytes);
  src.fill_u32(0x3f8ccccd);  // never time zeros
  cuda::Stream s;
  for (int i = 0; i < 5; ++i) cuda::copy_device_to_device(dst.ptr(), src.ptr(), bytes, s.get());
  std::vector<cuda::Event> start(iters), stop(iters);
  for (int i = 0; i < iters; ++i) {
    start[i].record(s.get());
    cuda::copy_device_to_device(dst.ptr(), src.ptr(), bytes, s.get());
    stop[i].record(s.get());
  }
  s.synchronize();
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) ms.push_back(cuda::Event::elapsed_ms(start[i], stop[i]));
  return summarize_ms(ms);
}

std::string foreign_profile_note(const DeviceProfile& p, const std::string& gpu) {
  if (gpu.find(p.name) != std::string::npos || p.name.find(gpu) != std::string::npos) return "";
  return fmt::format(
      "predicted times are the cost model's for the {}, not for this {} (--measured-profile: "
      "its own bandwidth, SMs and cuBLASLt rates)",
      p.name, gpu);
}

DeviceProfile measure_device_profile(int iters) {
  const cuda::DeviceInfo& info = cuda::Context::get().info();
  DeviceProfile p;
  p.name = info.name + " (measured)";
  p.sm_count = info.sm_count;
  if (info.l2_bytes > 0) p.l2_bytes = info.l2_bytes;
  if (info.cc_major < 9) {  // clusters, bulk copies and wgmma are sm_90's
    p.max_cluster_blocks = 1;
    p.bulk_copies = false;
    p.wgmma = false;
  }
  if (info.max_shared_per_block_optin > 0) p.max_shared_bytes_per_block = info.max_shared_per_block_optin;
  const size_t bytes = size_t{1} << 30;
  p.hbm_bytes_per_s = 2.0 * bytes / (time_copy(bytes, iters).median_ms * 1e-3);
  note_missing_libraries(p);
  return p;
}

namespace {

// Earlier measurements of the library: lines "<flop/s> <device>|<shape key>".
std::string library_rates_path() {
  const std::string dir = disk_cache_dir();
  return dir.empty() ? "" : dir + "/library_gemms.txt";
}
std::map<std::string, double> read_library_rates(const std::string& path) {
  std::map<std::string, double> rates;
  std::ifstream in(path);
  double rate = 0;
  std::string rest;
  while (in >> rate && std::getline(in, rest))
    if (rate > 0 && rest.size() > 1) rates[rest.substr(1)] = rate;
  return rates;
}

// Random 16-bit values in [-1, 1) (never time on zeros): a block drawn on the host, copied over
// the buffer.
void fill_random(cuda::DeviceBuffer& buf, DType dtype, uint64_t seed, CUstream stream) {
  const size_t block = std::min<size_t>(buf.size(), size_t{2} << 20);
  std::vector<uint16_t> host(block / 2);
  uint64_t x = seed;
  for (uint16_t& h : host) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const float v = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    h = dtype == DType::BF16 ? float_to_bf16_bits(v) : float_to_f16_bits(v);
  }
  buf.upload(host.data(), host.size() * 2);
  for (size_t at = block; at < buf.size(); at += block)
    cuda::copy_device_to_device(buf.ptr() + at, buf.ptr(), std::min(block, buf.size() - at), stream);
}

// The library's flop/s on shape s: the median of `iters` timed runs after ten.
double time_library_gemm(const LibraryGemmShape& s, int iters) {
  cublaslt::Gemm gemm;
  static_cast<LibraryGemmShape&>(gemm) = s;
  const size_t elem = dtype_size(s.dtype);
  cuda::DeviceBuffer a(static_cast<size_t>((s.shared_a ? 1 : s.batch) * s.m * s.k) * elem);
  cuda::DeviceBuffer b(static_cast<size_t>((s.shared_b ? 1 : s.batch) * s.k * s.n) * elem);
  cuda::DeviceBuffer c(static_cast<size_t>(s.batch * s.m * s.n) * elem);
  cuda::Stream st;
  fill_random(a, s.dtype, 1, st.get());
  fill_random(b, s.dtype, 2, st.get());
  for (int i = 0; i < 10; ++i) cublaslt::run(gemm, a.ptr(), b.ptr(), 0, c.ptr(), st.get());
  std::vector<cuda::Event> start(static_cast<size_t>(iters)), stop(static_cast<size_t>(iters));
  for (size_t i = 0; i < start.size(); ++i) {
    start[i].record(st.get());
    cublaslt::run(gemm, a.ptr(), b.ptr(), 0, c.ptr(), st.get());
    stop[i].record(st.get());
  }
  st.synchronize();
  std::vector<float> ms;
  for (size_t i = 0; i < start.size(); ++i) ms.push_back(cuda::Event::elapsed_ms(start[i], stop[i]));
  const double flops = 2.0 * static_cast<double>(s.batch * s.m * s.n) * static_cast<double>(s.k);
  return flops / (summarize_ms(ms).median_ms * 1e-3);
}

}  // namespace

int measure_library_gemms(const Graph& g, DeviceProfile& p, int iters) {
  if (!cuda::available() || !cublaslt::available()) return 0;
  const std::string device = cuda::Context::get().info().name;
  const std::string path = library_rates_path();
  const std::map<std::string, double> known = path.empty() ? std::map<std::string, double>{} : read_library_rates(path);
  int measured = 0;
  for (const Node& n : g.nodes()) {
    if (n.op != Op::MatMul || !library_cannot_run(g, n).empty()) continue;
    const LibraryGemmShape s = library_gemm_shape(g, n);
    const std::string key = s.key();
    if (p.library_gemm_flops.count(key)) continue;
    const auto it = known.find(device + "|" + key);
    if (it != known.end()) {
      p.library_gemm_flops[key] = it->second;
      continue;
    }
    const double rate = time_library_gemm(s, iters);
    p.library_gemm_flops[key] = rate;
    ++measured;
    if (path.empty()) continue;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    std::ofstream(path, std::ios::app) << fmt::format("{:.17g} {}|{}\n", rate, device, key);  // read back exactly
  }
  return measured;
}

void note_missing_libraries(DeviceProfile& p) {
  std::string why;
  if (cuda::available() && !cublaslt::available(&why)) p.library_gemm_missing = why;
}

}  // namespace tilefuse
