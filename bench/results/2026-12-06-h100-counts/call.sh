#!/usr/bin/env bash
# Data for issue 15's model (instructions executed per kernel, family times) and matmul_odd's C7514 cost.
cd "$(dirname "$0")/../.."
gzip -dkf bundle/libtilefuse.so.gz 2>/dev/null
. scripts/gpu_env.sh
export TILEFUSE_CACHE_DIR=/tmp/tfc
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
T0=$(date +%s)
ROWS="bias_gelu bias_gelu_bf16 softmax softmax_bf16 softmax_32k softmax_32k_bf16 layernorm layernorm_bf16 rmsnorm rmsnorm_bf16 log_softmax"
OFF=$($B/tilefuse list | awk '/\[off-benchmark\]/{print $1}')
# 1. matmul_odd: default (C7514) against a block per tile and ping-pong (no note), alternated
for r in 1 2 3; do
  for v in "" "--persistent 0" "--pingpong 1"; do
    timeout 60 $B/tilefuse run matmul_odd --library-gemm never --bench --iters 50 $v 2>&1 | grep -E "median|rror" | sed "s/^/r$r [$v] /"
  done
done | tee "$OUT/odd.log"
python3 - <<'PY' | tee -a "$OUT/odd.log"
import sys, torch
sys.path.insert(0, "bench")
from gpu_timing import median_ms
a = torch.randn(8191, 4097, dtype=torch.bfloat16, device="cuda"); b = torch.randn(4097, 4095, dtype=torch.bfloat16, device="cuda")
print(f"peer torch.matmul 8191x4095x4097 median {median_ms(lambda: a @ b, 50):.4f} ms")
PY
echo "($(( $(date +%s) - T0 )) s)"
# 2. family + row benchmarks: measured beside predicted, one process
# shellcheck disable=SC2086
timeout 200 $B/tilefuse bench --json "$OUT/family.json" $OFF $ROWS >"$OUT/family.log" 2>&1
echo "bench rc $? ($(( $(date +%s) - T0 )) s)"
# 3. SASS of the worst model miss and its aligned peer
for g in off_rmsnorm_w1003_bf16 rmsnorm_bf16; do
  $B/tilefuse ptx $g >"/tmp/$g.ptx" 2>/dev/null
  ptxas -arch=sm_90 -v "/tmp/$g.ptx" -o "/tmp/$g.cubin" 2>/dev/null
  cuobjdump -sass "/tmp/$g.cubin" >"/tmp/sass_$g.txt" 2>&1
  echo "$g: $(grep -cE '^\s+/\*[0-9a-f]+\*/' /tmp/sass_$g.txt) SASS"
done
cp /tmp/sass_off_rmsnorm_w1003_bf16.txt "$OUT/"
# 4. instructions executed, DRAM bytes and issue activity of every kernel (one launch each)
M=smsp__inst_executed.sum,smsp__thread_inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum,smsp__warps_active.avg.per_cycle_active
for g in $OFF $ROWS; do
  [ $(( $(date +%s) - T0 )) -gt 520 ] && { echo "out of time before $g"; break; }
  timeout 40 ncu --metrics $M --csv $B/tilefuse run $g 2>/dev/null | grep -v "^==" | sed "s/^/\"$g\",/" >>"$OUT/ncu_sweep.csv"
done
echo "ncu done ($(( $(date +%s) - T0 )) s) $(wc -l < "$OUT/ncu_sweep.csv") lines"
