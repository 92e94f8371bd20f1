#!/usr/bin/env bash
# Call C: why GpuAttention.WgmmaPlansMatchFloat64 failed in call B on two chains whose first key
# tile is wholly masked (plain_max_first_keys_masked, window_after_a_prefix) in its cp.async
# variant — those chains with the lazy rescale off and on, by cp.async and by TMA, at call B's
# seed and two more (a scratch test, not landed); then the GPU checks call B's timeout cut.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
start=$SECONDS
timeout 60 bundle/tilefuse_tests --gtest_filter='Scratch.LazyOnMaskedFirstTiles' 2>&1 | grep -E "SCRATCH|FAILED|PASSED" | tee "$OUT/scratch.log"
echo "scratch: $((SECONDS - start)) s"
for n in attention_decode attention_decode_gqa attention_d256 attention_n4097_causal; do
  echo "check $n: $(timeout 40 bundle/tilefuse run $n --check 2>&1 | grep -iE 'max|error|fail' | head -2 | tr '\n' ' ')"
done | tee "$OUT/checks.log"
timeout $((200 - SECONDS)) bundle/tilefuse_tests --gtest_filter='GpuAttention.GridMatchesFloat64:GpuAttentionBackward.FusedPlansMatchFloat64' >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|FAILED" "$OUT/gpu_tests.log" | head -20
echo "all: $((SECONDS - start)) s"
