#!/usr/bin/env bash
# GELU-16 short form A/B (TF_OLD_GELU16=1: the degree-7 form, a switch of the measured build only, not in main), peers at 16384x4096x1024, SASS,
# cold compiles, and Nsight Compute on issue 15's worst model miss.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz
. scripts/gpu_env.sh
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
T0=$(date +%s)
# 1. correctness
timeout 150 $B/tilefuse_tests --gtest_filter='GpuMath.*:GpuMatMul.ShapesLayouts*:GpuMatMul.FullShapeSampled:GpuCublaslt.*' >"$OUT/tests.log" 2>&1
echo "tests rc $? ($(( $(date +%s) - T0 )) s)"; grep -E "^\[  (FAILED|PASSED) |^\[ +OK|worst|Failure" "$OUT/tests.log" | head -40
# 2. SASS of the GEMM+GELU kernel, both forms
for side in old new; do
  e=""; [ $side = old ] && e="TF_OLD_GELU16=1"
  env $e $B/tilefuse ptx matmul_bias_gelu_k1024 --library-gemm never --target sm_90a >"$OUT/k_$side.ptx" 2>/dev/null
  ptxas -arch=sm_90a -v "$OUT/k_$side.ptx" -o "$OUT/k_$side.cubin" 2>"$OUT/ptxas_$side.txt"
  cuobjdump -sass "$OUT/k_$side.cubin" >"$OUT/sass_$side.txt" 2>&1
  echo "$side: $(grep -cE '^\s+/\*[0-9a-f]+\*/' "$OUT/sass_$side.txt") SASS; $(grep -c MUFU.EX2 "$OUT/sass_$side.txt") EX2; $(grep -c FFMA "$OUT/sass_$side.txt") FFMA; $(grep -c F2FP "$OUT/sass_$side.txt") F2FP; $(grep -E 'registers|spill' "$OUT/ptxas_$side.txt" | tr '\n' ' ')"
done
# 3. interleaved: own old/new, torch eager, cuBLASLt tanh epilogue, plain matmul
cat >"$OUT/peer.py" <<'PY'
import sys, torch, torch.nn.functional as F
sys.path.insert(0, "bench")
from gpu_timing import median_ms
torch.manual_seed(1)
m, n, k = 16384, 4096, 1024
a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda"); b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
print(f"peer eager gelu(a@b+bias) median {median_ms(lambda: F.gelu(a @ b + bias), 50):.4f} ms")
print(f"peer cuBLASLt tanh epilogue median {median_ms(lambda: torch._addmm_activation(bias, a, b, use_gelu=True), 50):.4f} ms")
print(f"peer torch.matmul median {median_ms(lambda: a @ b, 50):.4f} ms")
PY
for r in 1 2 3; do
  python3 "$OUT/peer.py" | sed "s/^/r$r /"
  for side in old new; do
    e=""; [ $side = old ] && e="TF_OLD_GELU16=1"
    env $e timeout 60 $B/tilefuse run matmul_bias_gelu_k1024 --library-gemm never --bench --iters 50 2>&1 | grep -E "median|rror" | sed "s/^/r$r $side /"
  done
  for side in old new; do
    e=""; [ $side = old ] && e="TF_OLD_GELU16=1"
    env $e timeout 60 $B/tilefuse run bias_gelu_bf16 --bench --iters 30 2>&1 | grep -E "median|rror" | sed "s/^/r$r bias_gelu_bf16 $side /"
  done
done | tee "$OUT/ab.log"
echo "($(( $(date +%s) - T0 )) s)"
# 4. cold compiles on this CPU
for side in old new; do
  e=""; [ $side = old ] && e="TF_OLD_GELU16=1"
  for r in 1 2; do
    rm -rf /tmp/tfc; env $e TILEFUSE_CACHE=1 TILEFUSE_CACHE_DIR=/tmp/tfc $B/tilefuse cache time matmul matmul_bias_gelu matmul_bias_gelu_k1024 --library-gemm never 2>&1 | sed "s/^/$side r$r /"
  done
done | tee "$OUT/compile.log"
echo "($(( $(date +%s) - T0 )) s)"
# 5. issue 15: the worst model miss beside a bf16 row kernel that runs as predicted
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
for g in off_rmsnorm_w1003_bf16 rmsnorm_bf16 off_softmax_w1001_bf16; do
  timeout 90 $B/tilefuse run $g --bench --iters 20 2>&1 | grep -E "median|predicted|rror" | sed "s/^/$g /"
  timeout 120 ncu $sections -c 1 $B/tilefuse run $g >"$OUT/ncu_$g.txt" 2>&1
  echo "ncu $g rc $?"
done
echo "($(( $(date +%s) - T0 )) s)"
