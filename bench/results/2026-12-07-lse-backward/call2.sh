#!/usr/bin/env bash
# Second call: bundle/ at b96322c plus --attention-backward-rows (the dK/dV kernel on 128 keys a
# block, two warpgroups sharing each Q/dO stage). The backward's GPU tests (their gradients now
# read after the six inputs), the 128-key kernel checked, then one build, two schedules, in
# interleaved rounds, with SDPA's cuDNN training step in the same call.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttentionBackward.*' >"$OUT/backward_tests2.log" 2>&1
echo "backward tests exit $?"; grep -E "FAILED|PASSED|Failure|timed|median|ms" "$OUT/backward_tests2.log" | head -16
for f in "" "--attention-backward-rows 128 --attention-dq-sums 0"; do
  echo "check attention_train_small $f: $(timeout 30 bundle/tilefuse run attention_train_small --check $f 2>&1 | grep -iE 'error|fail' | tr '\n' ' ')"; done
OLD=bundle NEW_FLAGS="--attention-backward-rows 128" NAMES="attention_train attention_train_causal" ROUNDS=2 ITERS=10 \
  timeout 200 bash scripts/gpu_ab.sh >/dev/null 2>&1
mv "$OUT/ab.log" "$OUT/ab_rows128.log"; cat "$OUT/ab.md"; mv "$OUT/ab.md" "$OUT/ab_rows128.md"
grep -E "_k2: median" "$OUT/ab_rows128.log" | awk '{print $1, $3, $5}'
timeout 120 python3 bench/attention_train_peers.py cudnn 2>&1 | tee "$OUT/attention_train_peers2.log"
