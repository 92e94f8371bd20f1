#!/usr/bin/env bash
# Call B: bundle/ at the lazy rescale (K loaded apart from V, V waited for at its product; the
# running max raised lazily on wgmma) against build-base/ (2a41412). GPU checks first (the grid,
# the wgmma plans, the climbing scores that move the lazy shift, the training step's gradients);
# then interleaved A/B of the two builds, and of the new build with the lazy rescale off (the
# waits alone); then cuDNN on the same shapes.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
timeout 150 bundle/tilefuse_tests --gtest_filter='GpuAttention.MatchesFloat64:GpuAttention.WgmmaPlansMatchFloat64:GpuAttention.GridMatchesFloat64:GpuAttention.LazyRescale*:GpuAttention.LogSumExpMatchesFloat64:GpuAttention.PrefillScheduleMatchesTheUnfusedPlan:GpuAttentionBackward.FusedPlansMatchFloat64' >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure" "$OUT/gpu_tests.log" | head -20
for n in attention_small attention_train_small; do
  echo "check $n: $(timeout 30 bundle/tilefuse run $n --check 2>&1 | grep -iE 'max|error|fail' | head -3 | tr '\n' ' ')"
done
echo "checks: $((SECONDS - start)) s"
OLD=build-base NAMES="attention attention_causal attention_d256 attention_d256_causal attention_n4097_causal" ROUNDS=2 ITERS=30 \
  timeout $((290 - SECONDS)) bash scripts/gpu_ab.sh 2>&1 | tail -7
mv "$OUT/ab.log" "$OUT/ab_builds.log"; mv "$OUT/ab.md" "$OUT/ab_builds.md"
echo "ab builds: $((SECONDS - start)) s"
OLD=bundle OLD_FLAGS="--attention-lazy-rescale 0" NAMES="attention attention_d256 attention_d256_causal" ROUNDS=1 ITERS=30 \
  timeout $((330 - SECONDS)) bash scripts/gpu_ab.sh 2>&1 | tail -5
mv "$OUT/ab.log" "$OUT/ab_lazy.log"; mv "$OUT/ab.md" "$OUT/ab_lazy.md"
echo "ab lazy: $((SECONDS - start)) s"
NAMES="attention attention_causal attention_d256 attention_d256_causal attention_n4097_causal" ROUNDS=1 \
  timeout $((480 - SECONDS)) bash scripts/gpu_attention_family.sh 2>&1 | tail -8
echo "all: $((SECONDS - start)) s"
