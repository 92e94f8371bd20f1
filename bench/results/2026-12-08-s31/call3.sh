#!/usr/bin/env bash
# Call 3 (bundle d9aabe2, the kernels of main): d 256's forward overlapped (--attention-overlap 1)
# against its plain loop, interleaved, with SDPA's cuDNN in the same call (call 2 had it at 0.96×
# and 1.04× causal, against 0.88× and 0.90× plain); the GPU checks call 2 ran out of time for:
# every chain's wgmma plans (the overlapped d 256 chain among them) and the fused backward plans.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
timeout 200 bundle/tilefuse_tests --gtest_filter='GpuAttention.WgmmaPlansMatchFloat64:GpuAttentionBackward.FusedPlansMatchFloat64' \
  >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure" "$OUT/gpu_tests.log" | head -20
echo "tests: $((SECONDS - start)) s"
OLD=bundle NEW_FLAGS="--attention-overlap 1" NAMES="attention_d256 attention_d256_causal" ROUNDS=3 ITERS=20 \
  timeout 150 bash scripts/gpu_ab.sh 2>&1 | tail -4
timeout 60 python3 bench/attention_peers.py attention_d256 attention_d256_causal 2>&1 | grep -E "^peer" | tee "$OUT/d256_peers.log"
echo "all: $((SECONDS - start)) s"
