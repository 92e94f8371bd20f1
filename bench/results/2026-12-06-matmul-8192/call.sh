#!/usr/bin/env bash
# Issue 12's 8192³ gap, one call: (1) the own bf16 GEMM's schedules at 8192³ interleaved with
# torch.matmul (cuBLAS), three rounds; (2) ncu.sh: clocks and power under each, one launch of each
# under Nsight Compute, compile times on this CPU.
cd "$(dirname "$0")/../../.."
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
cat >"$OUT/torch8192.py" <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from gpu_timing import median_ms
n = 8192
a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda"); b = torch.randn_like(a)
for _ in range(int(sys.argv[1])):
    t = median_ms(lambda: a @ b, 50)
    print(f"torch median {t:.4f} ms {2 * n**3 / t / 1e9:.1f} TFLOP/s")
PY
for round in 1 2 3; do
  python3 "$OUT/torch8192.py" 1 | sed "s/^/r$round /"
  for args in "" "--gemm-group 4" "--gemm-group 16" "--gemm-tile 256x128" "--pingpong 1" "--gemm-cluster 1"; do
    # shellcheck disable=SC2086
    timeout 60 bundle/tilefuse run matmul --library-gemm never --bench --iters 50 $args 2>&1 |
      grep -E "median" | sed "s/^/r$round own[$args] /"
  done
done | tee "$OUT/interleaved.log"
bash bench/results/2026-12-06-matmul-8192/ncu.sh 2>&1 | tee "$OUT/ncu.log"
