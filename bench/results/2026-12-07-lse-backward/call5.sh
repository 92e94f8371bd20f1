#!/usr/bin/env bash
# Fifth call: with TMA the default (bundle/ at 10c35ce), the dK/dV kernel on 128 keys a block
# (two consumer warpgroups waiting on barriers of their own) against 64, interleaved, in the step.
cd "$(dirname "$0")/../../.."
gzip -dkf bundle/libtilefuse.so.gz; . scripts/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
echo "check attention_train_small rows 128: $(timeout 30 bundle/tilefuse run attention_train_small --check --attention-backward-rows 128 --attention-dq-sums 0 2>&1 | grep -iE 'error|fail' | tr '\n' ' ')"
OLD=bundle NEW_FLAGS="--attention-backward-rows 128" NAMES="attention_train attention_train_causal" ROUNDS=3 ITERS=10 \
  timeout 260 bash scripts/gpu_ab.sh >/dev/null 2>&1
mv "$OUT/ab.log" "$OUT/ab_tma_rows128.log"; cat "$OUT/ab.md"; mv "$OUT/ab.md" "$OUT/ab_tma_rows128.md"
grep -E "_k[23]: median" "$OUT/ab_tma_rows128.log" | awk '{print $1, $3, $5}' | sort | uniq -c
