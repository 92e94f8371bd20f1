#!/usr/bin/env bash
# Fourth call: the backward's kernels fed by TMA from a producer warpgroup
# (--attention-backward-tma 1; bundle/ at 370c9b3+ with it). The backward's GPU tests (TMA cases
# checked against float64; TrainingShapeTimed times each form alone), the small step checked,
# then one build, two schedules, interleaved, with SDPA's cuDNN training step in the same call.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 240 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttentionBackward.*' >"$OUT/backward_tests4.log" 2>&1
echo "backward tests exit $?"; grep -E "FAILED|PASSED|Failure|backward|tma, (64|128) rows" "$OUT/backward_tests4.log" | grep -vE "worst error 0.00[0-6]" | head -40
echo "check attention_train_small tma: $(timeout 30 bundle/tilefuse run attention_train_small --check --attention-backward-tma 1 --attention-dq-sums 0 2>&1 | grep -iE 'error|fail' | tr '\n' ' ')"
OLD=bundle NEW_FLAGS="--attention-backward-tma 1" NAMES="attention_train attention_train_causal" ROUNDS=3 ITERS=10 \
  timeout 260 bash scripts/gpu_ab.sh >/dev/null 2>&1
mv "$OUT/ab.log" "$OUT/ab_tma.log"; cat "$OUT/ab.md"; mv "$OUT/ab.md" "$OUT/ab_tma.md"
grep -E "_k[23]: median" "$OUT/ab_tma.log" | awk '{print $1, $3, $5}' | sort | uniq -c
timeout 100 python3 bench/attention_train_peers.py cudnn 2>&1 | tee "$OUT/attention_train_peers4.log"
