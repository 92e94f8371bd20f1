#!/usr/bin/env bash
# ALiBi's row part kept apart (one fma a score), one call: every GPU attention test (the 288-case
# grid, decode, split keys, lengths), then attention_alibi at 64 keys (the default) and 128 keys
# and attention_causal against the previous bundle (bench/tmp/old, 774f33b), two interleaved
# rounds of 30 runs, and FlexAttention on ALiBi.
cd "$(dirname "$0")/../../.."
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
[ -f bench/tmp/old/libtilefuse.so ] || gzip -dk bench/tmp/old/libtilefuse.so.gz
timeout 200 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.*' >"$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "FAILED|PASSED|Failure|tests from" "$OUT/tests.log" | head -20
for round in 1 2; do
  for run in "new attention_alibi" "new attention_alibi --attention-keys 128" "old attention_alibi" \
             "new attention_causal" "old attention_causal"; do
    set -- $run
    bin=bundle/tilefuse; [ "$1" = old ] && bin=bench/tmp/old/tilefuse
    shift
    timeout 60 $bin run "$@" --bench --iters 30 2>&1 | grep -E "median|rror" | sed "s/^/r$round $run /"
  done
done | tee "$OUT/ab.log"
timeout 120 python3 bench/attention_peers.py attention_alibi 2>&1 | grep -E "^peer"
