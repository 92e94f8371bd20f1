#!/usr/bin/env bash
# On the GPU machine: two builds of tilefuse timed on the same graphs in interleaved rounds, one
# table of medians and minima. The H200's clock under a long attention kernel moves medians by
# up to ~12% between rounds of one call while the minima of 30 runs hold within ~1%
# (bench/NOTES.md, 2026-12-03): compare both, and only within a call.
#   OLD=dir with the other build's tilefuse and libtilefuse.so (or libtilefuse.so.gz, unpacked here)
#   NAMES="attention attention_causal"  ROUNDS=2  ITERS=30
#   FLAGS="…"      options for both builds;  NEW_FLAGS / OLD_FLAGS: options for one side only
#   (OLD=bundle with NEW_FLAGS="--cluster-online 1": one build, two schedules);  NEW_ENV / OLD_ENV:
#   environment for one side only
# Needs bundle/ (scripts/build_bundle.sh); logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
export TILEFUSE_CACHE=0
: "${OLD:?OLD= the folder of the build to compare against}"
[ -f "$OLD/libtilefuse.so" ] || gzip -dk "$OLD/libtilefuse.so.gz"
echo "new $(cat $B/COMMIT 2>/dev/null) old $(cat "$OLD/COMMIT" 2>/dev/null); $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for n in ${NAMES:-attention attention_causal}; do
    for side in old new; do
      bin=$B/tilefuse env=${NEW_ENV:-} flags=${NEW_FLAGS:-}
      [ $side = old ] && bin=$OLD/tilefuse env=${OLD_ENV:-} flags=${OLD_FLAGS:-}
      # shellcheck disable=SC2086
      env $env timeout 60 "$bin" run "$n" --bench --iters "${ITERS:-30}" ${FLAGS:-} $flags 2>&1 | grep -E "median|rror" |
        sed "s/^/$side $n /"
    done
  done
done | tee "$OUT/ab.log"
python3 - "$OUT/ab.log" <<'PY' | tee "$OUT/ab.md"
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(old|new) (\S+) +median ([0-9.]+) ms \(min ([0-9.]+)", line)
    if m: runs.setdefault((m[2], m[1]), []).append((float(m[3]), float(m[4])))
print("| graph | old median (min) ms | new median (min) ms | new/old median | new/old min |")
print("|---|---|---|---|---|")
for name in dict.fromkeys(k[0] for k in runs):
    o, n = runs.get((name, "old"), []), runs.get((name, "new"), [])
    if not o or not n: continue
    om, on = statistics.median(r[0] for r in o), min(r[1] for r in o)
    nm, nn = statistics.median(r[0] for r in n), min(r[1] for r in n)
    print(f"| {name} | {om:.3f} ({on:.3f}) | {nm:.3f} ({nn:.3f}) | {nm / om:.3f} | {nn / on:.3f} |")
PY
