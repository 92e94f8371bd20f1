#!/usr/bin/env bash
# Call A (bundle/ at 2a41412): what the last session could not run on a GPU (bf16 erf's math
# tests, the grouped keys kernel's tile-major steps, the fuzzer's training steps), then Nsight
# Compute on attention's forward kernel beside cuDNN's on the same shape (full set, clocks free:
# where the 5-10% gap goes), then issue 12's GEMM bars and the headline attention pair.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
timeout 100 bundle/tilefuse_tests --gtest_filter='GpuMath.*:GpuAttentionBackward.*' >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure" "$OUT/gpu_tests.log" | head -20
for n in off_chain_long_bf16 attention_train_small; do
  echo "check $n: $(timeout 30 bundle/tilefuse run $n --check 2>&1 | grep -iE 'max|error|fail' | head -3 | tr '\n' ' ')"
done
timeout 50 bundle/tilefuse_fuzz --count 300 --attention 0.1 --gpu --jobs 12 --seconds 35 >"$OUT/fuzz.log" 2>&1; echo "fuzz exit $?"
grep -E "^FAILED|^fuzz: seeds" "$OUT/fuzz.log" | tail -4
echo "checks: $((SECONDS - start)) s"
export TILEFUSE_CACHE=0
timeout 120 ncu --clock-control none --set full -k regex:attention_k0 --launch-skip 1 --launch-count 1 -f -o "$OUT/ours" \
  bundle/tilefuse run attention --bench --iters 3 >"$OUT/ncu_ours_run.log" 2>&1; echo "ncu ours exit $?"
cat >"$OUT/sdpa.py" <<'PY'
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
torch.manual_seed(0)
q, k, v = (torch.randn(8, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(4):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()
PY
timeout 120 ncu --clock-control none --set full -k regex:"sdpa|fmha|flash|fprop" --launch-skip 2 --launch-count 1 -f -o "$OUT/cudnn" \
  python3 "$OUT/sdpa.py" >"$OUT/ncu_cudnn_run.log" 2>&1; echo "ncu cudnn exit $?"
for r in ours cudnn; do
  ncu -i "$OUT/$r.ncu-rep" --page details >"$OUT/${r}_details.txt" 2>&1
  ncu -i "$OUT/$r.ncu-rep" --page raw --csv >"$OUT/${r}_raw.csv" 2>&1
done
ncu -i "$OUT/ours.ncu-rep" --page source --csv --print-source sass >"$OUT/ours_sass.csv" 2>&1 || true
head -c 600 "$OUT/ours_sass.csv"; echo
grep -E "Duration|SM Frequency|Issue Slots Busy|Compute \(SM\) Throughput|Executed Ipc A|No Eligible|Eligible Warps|Warp Cycles Per Issued" "$OUT/ours_details.txt" "$OUT/cudnn_details.txt" | head -30
rm -f "$OUT"/*.ncu-rep.tmp
echo "ncu: $((SECONDS - start)) s"
TESTS=0 ROUNDS=1 timeout $((470 - SECONDS)) bash scripts/gpu_matmul_bars.sh 2>&1 | tail -14
echo "matmul: $((SECONDS - start)) s"
NAMES="attention attention_causal" ROUNDS=1 timeout $((585 - SECONDS)) bash scripts/gpu_attention_family.sh 2>&1 | tail -4
echo "all: $((SECONDS - start)) s"
