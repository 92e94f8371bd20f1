#!/usr/bin/env bash
# Call 5 (not run in session 31: no device time left; ready for the next): bundle/ at main
# (b820371 or later: d 256 overlapped by default; the summed backward's reductions stored by
# warpgroup, one barrier a step between the warpgroups) against build-s31a/ (d9aabe2: the
# summed backward as call 1 measured it, 12.35 ms alone). Correct first (the GPU grid of the
# backward), then TrainingShapeTimed from both builds, then the summed backward in the step,
# interleaved. To time the L/D prefetch too: apply prefetch_ld.patch to a third build.
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
