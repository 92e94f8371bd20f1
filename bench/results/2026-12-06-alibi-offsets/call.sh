#!/usr/bin/env bash
# ALiBi's key offsets kept apart (056bf7c): every GPU attention test, then attention_alibi,
# attention_decode_step and attention_causal (unchanged PTX: the control) against the previous
# bundle (bench/tmp/old, 1855445), two interleaved rounds of 30 runs, and FlexAttention on ALiBi.
# (The call ran the rounds as a loop of its own, new before old; scripts/gpu_ab.sh runs the same
# commands old before new.)
cd "$(dirname "$0")/../../.."
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
timeout 220 bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='GpuAttention.*' >"$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E "FAILED|PASSED|Failure|tests from" "$OUT/tests.log" | head -20
OLD=bench/tmp/old NAMES="attention_alibi attention_decode_step attention_causal" bash scripts/gpu_ab.sh
timeout 120 python3 bench/attention_peers.py attention_alibi 2>&1 | grep -E "^peer"
