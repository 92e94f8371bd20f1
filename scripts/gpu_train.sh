#!/usr/bin/env bash
# On the GPU machine: the training examples and their peers in one call — the attention
# backward's GPU tests (float64 checks, the B8 H32 N4096 d128 kernels timed: two kernels, and one
# adding dQ up), attention_train (causal and not) and mlp_train through the CLI, and PyTorch's
# SDPA (cuDNN, flash) forward and backward and the MLP step (eager, torch.compile) on the same
# shapes; Nsight Compute's DRAM bytes of attention_train's kernels (no N×N term). Needs bundle/
# (scripts/build_bundle.sh); writes its logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
echo "bundle $(cat $B/COMMIT 2>/dev/null)"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 240 $B/tilefuse_tests --gtest_filter='GpuAttentionBackward.*' >"$OUT/backward_tests.log" 2>&1
echo "tests exit: $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|seed|worst|backward|Expected|Which" "$OUT/backward_tests.log" | head -80
echo "== tilefuse run"
for args in "attention_train --bench --iters 5" "attention_train_causal --bench --iters 5" \
  "mlp_train_small --check" "mlp_train --bench --iters 10"; do
  echo "-- tilefuse run $args"
  # shellcheck disable=SC2086
  timeout 120 $B/tilefuse run $args 2>&1 | grep -vE "^\s*$|^  output"
done | tee "$OUT/train_runs.log"
echo "== Nsight Compute: DRAM bytes of each attention_train kernel (q, k, v, dO, O 268435456 bytes each;"
echo "   an N×N bf16 tensor 8589934592)"
for n in attention_train attention_train_causal; do
  timeout 200 ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    -k regex:${n}_k -c 4 $B/tilefuse run $n 2>&1 | grep -E "^  ${n}_k. \(|dram__|gpu__time"
done | tee "$OUT/train_ncu.log"
echo "== PyTorch peers, same shapes"
timeout 150 python3 bench/mlp_train_peers.py 2>&1 | tee "$OUT/mlp_peers.log"
timeout 150 python3 bench/attention_train_peers.py 2>&1 | tee "$OUT/attention_train_peers.log"
