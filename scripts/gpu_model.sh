#!/usr/bin/env bash
# On the GPU machine: the cost model against the clock. Every benchmark row example and every
# off-benchmark graph run once (`tilefuse run NAME --bench --measured-profile`: this device's
# copy bandwidth measured, then the plan timed beside its prediction), one line each in
# $OUT/model.log, and a summary: the cases outside ±15% and the median measured/predicted.
# matmul_odd beside torch.matmul first (MATMUL=0 skips it). LIMIT (seconds, default 400) stops
# taking cases; CASES replaces the list. Needs bundle/ (scripts/build_bundle.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
gzip -dkf bundle/libtilefuse.so.gz 2>/dev/null
. scripts/gpu_env.sh
LIMIT=${LIMIT:-400}
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
echo "bundle $(cat $B/COMMIT 2>/dev/null)"
if [ "${MATMUL:-1}" = 1 ]; then
  for r in 1 2; do
    timeout 60 $B/tilefuse run matmul_odd --library-gemm never --bench --iters 50 2>&1 | grep -E "median|TFLOP|rror|FAIL" | sed "s/^/r$r /"
  done
  python3 - <<'PY'
import sys, torch
sys.path.insert(0, "bench")
from gpu_timing import median_ms
a = torch.randn(8191, 4097, dtype=torch.bfloat16, device="cuda"); b = torch.randn(4097, 4095, dtype=torch.bfloat16, device="cuda")
for r in range(2): print(f"torch.matmul 8191x4095x4097 median {median_ms(lambda: a @ b, 50):.4f} ms")
PY
fi 2>&1 | tee "$OUT/matmul_odd.log"
ROWS="bias_gelu bias_gelu_bf16 softmax softmax_bf16 softmax_32k softmax_32k_bf16 softmax_256k softmax_256k_bf16
  layernorm layernorm_bf16 rmsnorm rmsnorm_bf16"
CASES=${CASES:-"$ROWS $($B/tilefuse list | awk '/\[off-benchmark\]/{print $1}')"}
for n in $CASES; do
  [ $(($(date +%s) - T0)) -gt "$LIMIT" ] && { echo "out of time before $n"; break; }
  echo "$n $(timeout 30 $B/tilefuse run "$n" --bench --measured-profile --iters 30 2>&1 |
    grep -E "^  (median|predicted)|FAIL|rror" | tr -s ' \n' ' ')"
done | tee "$OUT/model.log"
python3 - "$OUT/model.log" <<'PY'
import re, statistics, sys
ratios = {}
for line in open(sys.argv[1]):
    m = re.search(r"measured/predicted ([0-9.]+)", line)
    if m: ratios[line.split()[0]] = float(m.group(1))
if ratios:
    out = {n: r for n, r in ratios.items() if abs(r - 1) > 0.15}
    print(f"{len(ratios)} cases, median measured/predicted {statistics.median(ratios.values()):.3f}, "
          f"outside ±15%: {len(out)} {out}")
PY
