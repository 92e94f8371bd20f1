#!/usr/bin/env bash
# (TF_ROLLED_PIECE: a switch of the measured build only, choosing 8- or 16-byte pieces; main has 16.)
# The rolled GEMM epilogue (--rolled-epilogue 1) on the GPU: tests, racecheck, timings against the
# unrolled epilogue and the peers, cold compiles; then issue 15's instruction counts.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz
. scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
T0=$(date +%s)
timeout 100 $B/tilefuse_tests --gtest_filter='GpuMatMul.ShapesLayoutsAndEpiloguesMatchReference' >"$OUT/tests.log" 2>&1
echo "tests rc $? ($(( $(date +%s) - T0 )) s)"; grep -E "^\[  (FAILED|PASSED) |^\[ +OK|Failure|rolled" "$OUT/tests.log" | head -20
TF_ROLLED_PIECE=8 timeout 60 $B/tilefuse_tests --gtest_filter='GpuMatMul.ShapesLayoutsAndEpiloguesMatchReference' >"$OUT/tests8.log" 2>&1
echo "tests (8-byte pieces) rc $? ($(( $(date +%s) - T0 )) s)"; grep -E "^\[  (FAILED|PASSED) |Failure" "$OUT/tests8.log" | head -10
export TILEFUSE_CACHE=0
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
PY
for r in 1 2; do
  python3 "$OUT/peer.py" | sed "s/^/r$r /"
  for g in matmul_bias_gelu_k1024 matmul_bias_gelu; do
    for ro in 0 1 8; do
      pc=16; [ $ro = 8 ] && pc=8
      TF_ROLLED_PIECE=$pc timeout 60 $B/tilefuse run $g --library-gemm never --rolled-epilogue $((ro > 0)) --bench --iters 30 2>&1 | grep -E "median|rror" | sed "s/^/r$r $g rolled=$ro /"
    done
  done
done | tee "$OUT/ab.log"
for r in 1; do
  for ro in 0 1 8; do
    pc=16; [ $ro = 8 ] && pc=8
    rm -rf /tmp/tfc; TF_ROLLED_PIECE=$pc TILEFUSE_CACHE=1 TILEFUSE_CACHE_DIR=/tmp/tfc $B/tilefuse cache time matmul matmul_bias_gelu matmul_bias_gelu_k1024 --library-gemm never --rolled-epilogue $((ro > 0)) 2>&1 | sed "s/^/r$r rolled=$ro /"
  done
done | tee "$OUT/compile.log"
echo "($(( $(date +%s) - T0 )) s)"
echo done
