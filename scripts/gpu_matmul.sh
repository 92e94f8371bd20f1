#!/usr/bin/env bash
# On the GPU machine: the matmul's GPU tests, its timings (wgmma fed by TMA — persistent, a block
# per tile, ping-pong, clusters — or by cp.async, mma.sync staged and direct,
# with its epilogue, and a sweep of tiles, depths and tile orders) beside cuBLAS through PyTorch on the
# same shapes, and compute-sanitizer's racecheck over the small matmuls' shared-memory pipeline. Needs bundle/ (scripts/build_bundle.sh);
# writes its logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
echo "bundle $(cat $B/COMMIT 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
timeout 200 $B/tilefuse_tests --gtest_filter="GpuMatMul.*:GpuCublaslt.*${EXTRA_TESTS:-}" >"$OUT/matmul_tests.log" 2>&1
echo "tests exit: $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|seed|c\[" "$OUT/matmul_tests.log" | head -40
# SWEEP: further schedules of the own GEMM to time (";"-separated tilefuse run arguments, each
# run with --library-gemm never).
SWEEP=${SWEEP-"matmul --tma 0;matmul --persistent 0;matmul --pingpong 1;matmul --gemm-cluster 2;matmul --gemm-tile 128x128;matmul --gemm-tile 256x128;matmul --stages 3;matmul --wgmma 0 --gemm-tile 128x256 --gemm-group 8"}
IFS=';' read -ra sweep <<<"$SWEEP"
own=()
for args in "matmul" "matmul --wgmma 0" "matmul --stages 0" "matmul_bias_gelu" "matmul_bias_gelu --wgmma 0" "${sweep[@]}"; do
  own+=("$args --library-gemm never")
done
# The defaults (cuBLASLt where the plan says it is faster), then the own kernels.
for args in "matmul" "matmul_bias_gelu" "${own[@]}"; do
  echo "== tilefuse run $args"
  # shellcheck disable=SC2086
  timeout 40 $B/tilefuse run $args --bench --iters 20 2>&1 | grep -vE "^\s*$"
done | tee "$OUT/matmul_runs.log"
echo "== cuBLAS (PyTorch), same shapes"
timeout 60 python3 - <<'PY' 2>&1 | tee "$OUT/matmul_peers.log"
import torch
import sys
sys.path.insert(0, "bench")
from gpu_timing import median_ms
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda"); b = torch.randn_like(a)
t = median_ms(lambda: a @ b)
print(f"torch.matmul bf16 {n}^3: {t:.4f} ms, {2 * n**3 / t / 1e9:.1f} TFLOP/s")
a2, b2 = a[:, :4096].contiguous(), b[:4096].contiguous()
bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
t = median_ms(lambda: torch.nn.functional.gelu(a2 @ b2 + bias))
print(f"torch gelu(a @ b + bias) bf16 [{n}, 4096] x [4096, {n}]: {t:.4f} ms, {2 * n * n * 4096 / t / 1e9:.1f} TFLOP/s")
PY
echo "== racecheck (small matmuls)"
timeout 90 compute-sanitizer --tool racecheck $B/tilefuse_tests --gtest_filter='GpuMatMul.ShapesLayouts*' \
  >"$OUT/matmul_racecheck.log" 2>&1
echo "racecheck exit: $?"
grep -E "RACECHECK SUMMARY|Error|OK|FAILED" "$OUT/matmul_racecheck.log" | head -10
