#include "runtime/device_probe.h"

#include <algorithm>

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

void note_missing_libraries(DeviceProfile& p) {
  std::string why;
  if (cuda::available() && !cublaslt::available(&why)) p.library_gemm_missing = why;
}

}  // namespace tilefuse
