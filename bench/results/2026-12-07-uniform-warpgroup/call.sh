#!/usr/bin/env bash
# One call: bundle/ at be0cf8b (wgmma's A descriptor of a one-stage ring from a warp-uniform
# warpgroup: attention's step 503 -> 478 SASS instructions), build-10c/ at 10c35ce (the build
# before it). Correctness first, then the A/B of the attention examples and the training step,
# and SDPA's cuDNN on the headline pair in the same call. The card is printed first.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 150 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.MatchesFloat64:GpuAttention.WgmmaPlansMatchFloat64:GpuAttention.GridMatchesFloat64' >"$OUT/tests.log" 2>&1
echo "tests exit $?"; grep -E "FAILED|PASSED|Failure|cases" "$OUT/tests.log" | head -8
OLD=build-10c NAMES="attention attention_causal attention_gqa attention_d64 attention_d256 attention_train" ROUNDS=2 ITERS=20 \
  timeout 330 bash scripts/gpu_ab.sh >/dev/null 2>&1
cat "$OUT/ab.md"
timeout 100 python3 bench/attention_peers.py attention attention_causal 2>&1 | grep -E "^peer.*cudnn" | tee "$OUT/peers.log"
