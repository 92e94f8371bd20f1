#!/usr/bin/env bash
# The GPU fuzzer on 056bf7c (seeds 80000 on, at most 90 s), then ALiBi against 1855445
# (bench/tmp/old), one round, on whichever card the call gets.
cd "$(dirname "$0")/../../.."
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
timeout 200 bundle/tilefuse_fuzz --first 80000 --count 400 --gpu --jobs 12 --seconds 90 >"$OUT/fuzz.log" 2>&1
echo "fuzz exit $?"
grep -E "passed|failed|FAIL" "$OUT/fuzz.log" | tail -8
OLD=bench/tmp/old NAMES=attention_alibi ROUNDS=1 bash scripts/gpu_ab.sh
