#!/usr/bin/env bash
# One call: bundle/ at c74c837 (the overlapped loop's first step without a P·V of zeros; Q released at the last S), build-f3b/
# at f3bd110. Correctness first, then the A/B of the headline pair with SDPA's peers in the same
# call, and (argument matmul, a second call) issue 12's bars in two rounds. The card is printed first.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
[ "${1:-attention}" = matmul ] && { ROUNDS=2 timeout 560 bash scripts/gpu_matmul_bars.sh 2>&1 | tail -14; exit; }
for n in attention_small attention_train_small; do
  echo "check $n: $(timeout 30 bundle/tilefuse run $n --check 2>&1 | grep -iE 'error|fail' | head -2 | tr '\n' ' ')"; done
timeout 90 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.MatchesFloat64:GpuAttention.WgmmaPlansMatchFloat64' >"$OUT/tests.log" 2>&1
echo "tests exit $?"; grep -E "FAILED|PASSED|Failure" "$OUT/tests.log" | head -8
OLD=build-f3b NAMES="attention attention_causal attention_d256" ROUNDS=2 ITERS=30 timeout 240 bash scripts/gpu_ab.sh 2>&1 | tail -5
timeout 150 python3 bench/attention_peers.py attention attention_causal attention_d256 2>&1 | grep -E "^peer" | tee "$OUT/peers.log"
# Calls made (2026-12-07, an H100 each time, asked for an H200): `call.sh attention` (ab_call1.*,
# peers_call1.log), `call.sh matmul` (matmul_bars.log, matmul_tests.log, matmul_few_rows.json), then,
# warm:
#   for r in 1 2 3; do for side in bundle build-f3b; do tilefuse cache time matmul matmul_bias_gelu_k1024 --library-gemm never; done; done
#   for r in 1..6: bundle/tilefuse cache time matmul matmul_odd matmul_bias_gelu_k1024 --library-gemm never
#   OLD=build-f3b NAMES="attention attention_causal" ROUNDS=3 ITERS=30 bash scripts/gpu_ab.sh   (ab_call2.*)
#   python3 bench/attention_peers.py attention attention_causal      (cuDNN 3.4664 / 1.8174 ms)
#   bundle/tilefuse_tests --gtest_filter='GpuAttention.GridMatchesFloat64:GpuAttention.FusedPlansMatchFloat64:GpuAttention.PrefillScheduleMatchesTheUnfusedPlan'
#     -> grid: 288 cases, 0 failed; PASSED 3 tests
# Cold compiles (ms, each a fresh cache dir; the host's load average was 4):
#   bundle    r1 matmul 54.0, k1024 89.9;  r2 88.0, 148.8;  r3 90.6, 151.7
#   build-f3b r1 78.1, 146.6;  r2 73.9, 150.6;  r3 61.0, 101.6
#   bundle x6: matmul 67.5 66.8 63.6 99.8 103.1 101.3; matmul_odd 88.7 87.8 85.7 138.1 141.1 137.4;
#              matmul_bias_gelu_k1024 109.0 107.9 105.3 164.0 173.3 166.3
# A last call (a fresh H100): OLD=build-f3b NAMES="attention_train attention_window attention_alibi attention_gqa" ROUNDS=2 ITERS=20 bash scripts/gpu_ab.sh  (ab_call3.*)
