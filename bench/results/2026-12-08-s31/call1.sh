#!/usr/bin/env bash
# Call 1 (bundle d9aabe2+): the one-kernel attention backward with dQ summed by TMA's reductions
# (--attention-dq-tma 1) — correct on the GPU first (the GPU grid of GpuAttentionBackward, the
# plan test on small shapes), then timed alone (TrainingShapeTimed: both forms of the one kernel
# beside the two kernels) and in the training step against the default plan (one build, two
# schedules interleaved) with cuDNN's step in the same call.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
start=$SECONDS
timeout 150 bundle/tilefuse_tests --gtest_filter='FusionAttentionBackward.DqSummedByTmaWhereAskedFor:GpuAttentionBackward.MatchesFloat64:GpuAttentionBackward.TrainingShapeTimed' \
  >"$OUT/gpu_tests.log" 2>&1; echo "tests exit $?"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|one kernel|backward" "$OUT/gpu_tests.log" | grep -vE "worst error 0\.00[0-4]" | head -40
echo "tests: $((SECONDS - start)) s"
OLD=bundle NEW_FLAGS="--attention-dq-sums 1 --attention-dq-tma 1" NAMES="attention_train attention_train_causal" ROUNDS=2 ITERS=20 \
  timeout 150 bash scripts/gpu_ab.sh 2>&1 | tail -4
mv "$OUT/ab.log" "$OUT/ab_dq_tma.log"; mv "$OUT/ab.md" "$OUT/ab_dq_tma.md"
grep -E "attention_train(_causal)?_k[0-9]: median" "$OUT/ab_dq_tma.log" | head -12
timeout 40 python3 bench/attention_train_peers.py cudnn 2>&1 | tee "$OUT/train_peers.log"
echo "dq tma: $((SECONDS - start)) s"
