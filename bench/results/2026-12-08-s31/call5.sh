#!/usr/bin/env bash
# Call 5: bundle/ (d 256's forward overlapped by default; the one-kernel backward summed by TMA
# with the next step's L and D loaded after dQᵀ's product, 24–32 bytes spilled) against
# build-s31a/ (d9aabe2: d 256 plain by default; L and D loaded at their use). Correct first
# (the GPU grid of the backward, every wgmma chain), then TrainingShapeTimed from both builds,
# then the summed backward in the step, interleaved. (d 256's default was measured in call 3.)
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; gzip -dkf build-s31a/libtilefuse.so.gz; . scripts/gpu_env.sh
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
timeout 60 bundle/tilefuse_tests --gtest_filter='GpuAttentionBackward.MatchesFloat64' \
  >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure" "$OUT/gpu_tests.log" | head -10
for b in build-s31a bundle; do
  timeout 60 $b/tilefuse_tests --gtest_filter='GpuAttentionBackward.TrainingShapeTimed' 2>&1 | grep -E "TMA" | sed "s/^/$b /"
done | tee "$OUT/timed.log"
echo "tests: $((SECONDS - start)) s"
OLD=build-s31a FLAGS="--attention-dq-sums 1 --attention-dq-tma 1" NAMES="attention_train" ROUNDS=2 ITERS=20 \
  timeout 120 bash scripts/gpu_ab.sh 2>&1 | tail -3
grep -E "_k2: median" "$OUT/ab.log" | head -4
echo "all: $((SECONDS - start)) s"
