#!/usr/bin/env bash
# ALiBi's key offsets kept apart (056bf7c): every GPU attention test, then attention_alibi,
# attention_decode_step and attention_causal (unchanged PTX: the control) against the previous
# bundle (bench/tmp/old, 1855445), two interleaved rounds of 30 runs, and FlexAttention on ALiBi.
cd "$(dirname "$0")/../../.."
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
[ -f bench/tmp/old/libtilefuse.so ] || gzip -dk bench/tmp/old/libtilefuse.so.gz
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 220 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.*' >"$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "FAILED|PASSED|Failure|tests from" "$OUT/tests.log" | head -20
for round in 1 2; do
  for run in "new attention_alibi" "old attention_alibi" "new attention_decode_step" "old attention_decode_step" \
             "new attention_causal" "old attention_causal"; do
    set -- $run
    bin=bundle/tilefuse; [ "$1" = old ] && bin=bench/tmp/old/tilefuse
    shift
    timeout 60 $bin run "$@" --bench --iters 30 2>&1 | grep -E "median|rror" | sed "s/^/r$round $run /"
  done
done | tee "$OUT/ab.log"
timeout 120 python3 bench/attention_peers.py attention_alibi 2>&1 | grep -E "^peer"
