#pragma once
// The constants of the cost model. Defaults are the H200's measured figures (2026-11-30); the
// runtime can measure a device and replace them.
#include <string>

namespace tilefuse {

struct DeviceProfile {
  std::string name = "H200";
  double hbm_bytes_per_s = 4258e9;  // device-to-device copy, bytes read + written, measured
  // Thread-instructions issued per second: 132 SMs × 4 schedulers × 32 lanes × 1.98 GHz.
  double instructions_per_s = 33.4e12;
  double bf16_matmul_flops = 777e12;  // cuBLAS bf16 8192³, measured
  double launch_s = 2.5e-6;           // back-to-back launch on one stream
  double memory_latency_s = 800e-9;   // loaded DRAM latency that in-flight bytes must cover
  double l2_bytes = 50e6;             // last-level cache a re-read can hit
  int sm_count = 132;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int registers_per_sm = 65536;
  int max_registers_per_thread = 255;
  // Blocks one thread-block cluster may hold (sm_90: 8 portable, 16 with the non-portable
  // opt-in the runtime sets); 1 on a device without clusters.
  int max_cluster_blocks = 16;

  static DeviceProfile h200() { return {}; }
};

}  // namespace tilefuse
