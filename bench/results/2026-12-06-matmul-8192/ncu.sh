#!/usr/bin/env bash
# The bf16 GEMM at 8192³, tilefuse's own kernel (--library-gemm never) against cuBLAS through
# torch.matmul: (1) the SM clock and power each holds over a second of back-to-back launches,
# sampled by nvidia-smi; (2) one launch of each under Nsight Compute with the clocks left free
# (speed of light, memory, compute, scheduler, warp states, launch, occupancy); (3) cold and warm
# compile times of the GEMM examples on this machine's CPU.
cd "$(dirname "$0")/../../.."
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
sample() {  # tag, command...: clocks and power every 50 ms while the command runs
  local tag=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 >"$OUT/smi_$tag.csv" &
  local p=$!
  "$@" 2>&1 | grep -E "median|TFLOP" | sed "s/^/$tag /"
  kill $p; wait $p 2>/dev/null
  python3 - "$OUT/smi_$tag.csv" "$tag" <<'PY'
import sys, statistics
rows = [l.split(",") for l in open(sys.argv[1]) if l.strip()]
c = [float(r[0]) for r in rows]; p = [float(r[1]) for r in rows]
hot = [i for i in range(len(p)) if p[i] > 0.6 * max(p)]
print(f"{sys.argv[2]} while busy ({len(hot)} samples): SM clock median {statistics.median(c[i] for i in hot):.0f} MHz, "
      f"power median {statistics.median(p[i] for i in hot):.0f} W")
PY
}
cat >"$OUT/peer.py" <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from gpu_timing import median_ms
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda"); b = torch.randn_like(a)
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 200
t = median_ms(lambda: a @ b, iters)
print(f"torch.matmul bf16 {n}^3: median {t:.4f} ms, {2 * n**3 / t / 1e9:.1f} TFLOP/s")
PY
for r in 1; do
  sample own bundle/tilefuse run matmul --library-gemm never --bench --iters 300
  sample cublas python3 "$OUT/peer.py" 300
done
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis
  --section SchedulerStats --section WarpStateStats --section LaunchStats --section Occupancy"
# shellcheck disable=SC2086
timeout 60 ncu --clock-control none --kernel-name regex:matmul --launch-skip 3 --launch-count 1 $sections \
  bundle/tilefuse run matmul --library-gemm never --bench --iters 5 >"$OUT/ncu_own.txt" 2>&1
# shellcheck disable=SC2086
timeout 60 ncu --clock-control none --kernel-name regex:'gemm|nvjet|xmma|cutlass' --launch-skip 3 --launch-count 1 \
  $sections python3 "$OUT/peer.py" 5 >"$OUT/ncu_cublas.txt" 2>&1
for f in own cublas; do
  echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|SM Frequency|DRAM Throughput|Compute \(SM\)|L2 Hit|L1/TEX Hit|Registers Per|Shared Memory Config|Achieved Occupancy|No Eligible|Issued Warp|Warp Cycles Per Issued|Block Size|Grid Size|Memory Throughput|Executed Ipc|Theoretical Occ|Dynamic Shared|Cluster" "$OUT/ncu_$f.txt" | head -40
done
unset TILEFUSE_CACHE
export TILEFUSE_CACHE_DIR=$(mktemp -d)
bundle/tilefuse cache time matmul matmul_ffn matmul_odd matmul_bias_gelu_k1024 attention --library-gemm never
