#!/usr/bin/env bash
cd "$(dirname "$0")/../.."
gzip -dkf bundle/libtilefuse.so.gz 2>/dev/null
. scripts/gpu_env.sh
export TILEFUSE_CACHE_DIR=/tmp/tfc
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
echo "bundle $(cat $B/COMMIT)"
T0=$(date +%s)
el(){ echo "($(( $(date +%s) - T0 )) s)"; }
summ(){ python3 - "$1" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); c=d["ceiling"]["copy_gbps"]
for r in d["results"]:
    p=sum(k["predicted_ms"] for k in r["kernels"])
    print(f'{r["example"]:28s} {r["median_ms"]:.4f} ms {100*r["gbps"]/c:5.1f}% copy  pred {p:.4f}  meas/pred {r["median_ms"]/p:.2f}  ok {r["ok"]}')
PY
}
# 1. GPU tests touched by the changes (stores of single 16-bit elements, windowed weight ends)
timeout 230 $B/tilefuse_tests --gtest_filter='Gpu*:Codegen.OddWidth*' --gtest_brief=1 >"$OUT/tests.log" 2>&1
echo "tests rc $?"; grep -E "FAILED|PASSED|Failure|tests ran" "$OUT/tests.log" | head -20; el
# 2. matmul_odd without C7514 against a block per tile, alternated, and torch.matmul
for r in 1 2 3; do
  for v in "" "--persistent 0"; do
    timeout 60 $B/tilefuse run matmul_odd --library-gemm never --bench --iters 50 $v 2>&1 | grep -E "median|rror|FAIL" | sed "s/^/r$r [$v] /"
  done
done | tee "$OUT/odd.log"
python3 - <<'PY' | tee -a "$OUT/odd.log"
import sys, torch
sys.path.insert(0, "bench")
from gpu_timing import median_ms
a = torch.randn(8191, 4097, dtype=torch.bfloat16, device="cuda"); b = torch.randn(4097, 4095, dtype=torch.bfloat16, device="cuda")
for r in range(2): print(f"peer torch.matmul 8191x4095x4097 median {median_ms(lambda: a @ b, 50):.4f} ms")
PY
el
# 3. fuzz on the GPU
$B/tilefuse_fuzz --count 400 --gpu --jobs 12 --seconds 60 >"$OUT/fuzz.log" 2>&1; echo "fuzz rc $?"; grep -E "^FAILED|^fuzz" "$OUT/fuzz.log" | tail -5; el
# 4. windowed rows: default against --window 1 / 0
W="off_rmsnorm_w1003_bf16 off_rmsnorm_w1003 off_rmsnorm_w5003_bf16 off_layernorm_w2999 off_layernorm_w2999_bf16"
for w in default 1 0; do
  opt=(); [ $w != default ] && opt=(--window $w)
  timeout 120 $B/tilefuse bench "${opt[@]}" --json "/tmp/w$w.json" $W > /tmp/w$w.log 2>&1
  echo "== window $w rc $?"; grep -E "copy ceiling|FAIL" /tmp/w$w.log; summ /tmp/w$w.json
done 2>&1 | tee "$OUT/window.log"; el
# 5. benchmark shapes: measured beside predicted
[ $(( $(date +%s) - T0 )) -lt 430 ] && timeout 150 $B/tilefuse bench --json "$OUT/bench.json" bias_gelu bias_gelu_bf16 softmax softmax_bf16 softmax_32k softmax_32k_bf16 softmax_256k softmax_256k_bf16 layernorm layernorm_bf16 rmsnorm rmsnorm_bf16 > "$OUT/bench.log" 2>&1
echo "bench rc $?"; grep -E "copy ceiling|FAIL" "$OUT/bench.log"; summ "$OUT/bench.json"; el
