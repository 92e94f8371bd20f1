#pragma once
// The constants of the cost model. Defaults are the H200's measured figures (2026-11-30); the
// runtime can measure a device and replace them.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

namespace tilefuse {

struct DeviceProfile {
  std::string name = "H200";
  double hbm_bytes_per_s = 4258e9;  // device-to-device copy, bytes read + written, measured
  // Thread-instructions issued per second: 132 SMs × 4 schedulers × 32 lanes × 1.98 GHz.
  double instructions_per_s = 33.4e12;
  // Exponents (ex2.approx.f32, the MUFU pipe) per second: 132 SMs × 16 a clock × 1.98 GHz.
  double exp2_per_s = 4.18e12;
  double bf16_matmul_flops = 777e12;  // cuBLAS bf16 8192³, measured
  // cuBLASLt where a leading dimension is not a multiple of 8 elements (16 bytes), which its
  // fast kernels need: 152.9 TFLOP/s measured at bf16 8191×4095×4097 (bench/NOTES.md, call 48eca17).
  double bf16_matmul_unaligned_flops = 153e12;
  // cuBLASLt's throughput measured on this device per GEMM shape (LibraryGemmShape::key →
  // flop/s, the median of timed runs on random operands; runtime/device_probe.h): the plans
  // price those shapes at it instead of the constants above. Empty in the H200's defaults.
  std::map<std::string, double> library_gemm_flops;
  // tilefuse's own matmul on mma.sync, bf16 8192³, measured (bench/NOTES.md, matmul): operands
  // staged through shared memory, and fragments loaded straight from global memory.
  double mma_sync_flops = 356e12;
  double mma_sync_direct_flops = 59e12;
  // tilefuse's own matmul on warpgroup MMA (sm_90a wgmma from cp.async-filled shared memory,
  // 128×256 tiles taken 8 tile rows at a time), bf16 8192³, measured (bench/NOTES.md, "wgmma").
  double wgmma_flops = 634e12;
  // The same fed by TMA from a producer warpgroup on a persistent grid (TileSchedule::tma):
  // 694–782 TFLOP/s at 8192³ in 50-run medians, 736 at 4096³ (bench/NOTES.md, "TMA").
  double wgmma_tma_flops = 720e12;
  // The tensor cores' dense 16-bit flops per byte shared memory moves at full rate, an SM's: 4096
  // flops and 128 bytes a clock. What a wgmma GEMM's tile needs against it sets its share of the
  // rates above, which were measured at 128×256 (matmul_flops_rate).
  double smem_flops_per_byte = 32;
  bool wgmma = true;  // warpgroup MMA (sm_90a); false on a device without it
  // A matmul operand copied into a padded pitch (compiler/tile/pitch_copy.h: loads an element at
  // a time, 16-byte stores), bytes read + written. (The driver's cuMemcpy2DAsync, used before,
  // measured 1257–1387 GB/s for bf16 [8191, 4097] and [4097, 4095]; bench/NOTES.md, "Odd matmul
  // shapes".)
  double pitch_copy_bytes_per_s = 3000e9;
  double launch_s = 2.5e-6;           // back-to-back launch on one stream
  double memory_latency_s = 800e-9;   // loaded DRAM latency that in-flight bytes must cover
  double l2_bytes = 50e6;             // last-level cache a re-read can hit
  // f32 reduce-adds from every SM into one tensor at L2 (red.global.add, 8 bytes a thread):
  // measured on an H100 (2026-12-06), the one-kernel attention backward's 34 GB of dQ sums
  // adding ~10 ms to its products' time.
  double l2_reduce_bytes_per_s = 3.4e12;
  int sm_count = 132;
  int max_threads_per_sm = 2048;
  int max_blocks_per_sm = 32;
  int registers_per_sm = 65536;
  int max_registers_per_thread = 255;
  // Blocks one thread-block cluster may hold (sm_90: 8 portable, 16 with the non-portable
  // opt-in the runtime sets); 1 on a device without clusters.
  int max_cluster_blocks = 16;
  // Shared memory one block may use (sm_90: 227 KiB with the opt-in the runtime sets), and
  // whether bulk copies (cp.async.bulk completing on an mbarrier, sm_90) can fill it.
  int64_t max_shared_bytes_per_block = 232448;
  int64_t shared_bytes_per_sm = 233472;
  // A persistent row kernel's serial work per row beyond its bytes (copy to registers, the
  // dependent reduction chain, its block barrier) for rows one block holds, and what a cluster's
  // rows add (a second barrier, the exchange's round trip): fitted to the staged softmax rows on
  // the H200 (bench/NOTES.md v9 and v7).
  double row_step_s = 0.25e-6;
  double cluster_exchange_s = 0.85e-6;
  // A split row's task beyond its bytes: its share of the merge and the pair exchange (fitted
  // to 2048×262144 softmax on the H200, bench/NOTES.md v9).
  double split_step_s = 0.27e-6;
  bool bulk_copies = true;
  // Why cuBLASLt cannot run matmul kernels here, or empty where it can (the H200's profile
  // assumes it; the runtime fills this from runtime/cublaslt.h before it plans for a device).
  std::string library_gemm_missing;

  // Blocks of `threads` an SM's registers hold at `registers` a thread (allocated in steps of
  // 8): the register file is four sub-partitions, each holding whole warps, so 25 blocks of two
  // warps at 40 registers (13 warps on some sub-partitions) leave them only 32. At least 1.
  int blocks_by_registers(int registers, int threads) const {
    const int alloc = (registers + 7) / 8 * 8;
    const int warps_per_partition = registers_per_sm / 4 / (32 * alloc);
    return std::max(1, 4 * warps_per_partition / ((threads + 31) / 32));
  }
  // The registers a thread gets (in steps of 8) where `blocks` blocks of `threads` share an SM.
  int registers_at_blocks(int blocks, int threads) const {
    const int warps_per_partition = (blocks * ((threads + 31) / 32) + 3) / 4;
    return registers_per_sm / 4 / (32 * std::max(1, warps_per_partition)) / 8 * 8;
  }

  static DeviceProfile h200() { return {}; }
};

}  // namespace tilefuse
