#!/usr/bin/env bash
# One call (asked for an H200, ran on an H100): ALiBi with its key offsets apart (bundle/) against
# 1855445 (bench/tmp/old) and FlexAttention (issue 13's 1.3× bar), then every off-benchmark family
# graph checked against float64 and timed with its prediction beside (issue 15; the peers' times
# are the 6f69ba2 call's). (The call ran the rounds as a loop of its own, new before old, with
# attention_causal on the new bundle only; scripts/gpu_ab.sh runs the same commands on both.)
cd "$(dirname "$0")/../../.."
export TILEFUSE_CACHE=0 OUT=${OUT:-/tmp}
[ -f bundle/libtilefuse.so ] || gzip -dk bundle/libtilefuse.so.gz
OLD=bench/tmp/old NAMES="attention_alibi attention_causal" bash scripts/gpu_ab.sh
timeout 120 python3 bench/attention_peers.py attention_alibi 2>&1 | grep -E "^peer" | tee -a "$OUT/ab.log"
names=$(bundle/tilefuse list | awk '/\[off-benchmark\]/{print $1}')
# shellcheck disable=SC2086
timeout 300 bundle/tilefuse bench --json "$OUT/family_tilefuse.json" $names >"$OUT/family.log" 2>&1
echo "family bench exit $?"
python3 bench/report.py --tilefuse "$OUT/family_tilefuse.json" --out /tmp/family.json --markdown "$OUT/family.md" >/dev/null
grep -E "^\| off" "$OUT/family.md" | awk -F'|' '{printf "%-32s %-5s %9s %9s %6s %7s\n", $2, $3, $6, $7, $8, $10}'
