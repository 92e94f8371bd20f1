#!/usr/bin/env bash
set -uo pipefail
. scripts/gpu_env.sh
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for round in 1 2; do
  for n in off_log_softmax_vocab_bf16 off_log_softmax_vocab off_cross_entropy_vocab; do
    for f in "" "--block-threads 256" "--block-threads 128" "--window-ir 2" "--window-ir 2 --block-threads 256" "--window-ir 2 --block-threads 256 --cluster-online 1"; do
      timeout 60 $B/tilefuse run $n --bench --iters 30 $f 2>&1 | grep -E "median|rror" | sed "s/^/[$f] $n /"
    done
  done
done | tee $OUT/blocks.log
python3 - $OUT/blocks.log <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"\[(.*)\] (\S+) +median ([0-9.]+) ms \(min ([0-9.]+)", line)
    if m: runs.setdefault(m[2], {}).setdefault(m[1], []).append((float(m[3]), float(m[4])))
for g, v in runs.items():
    base = statistics.median(x[0] for x in v[""])
    for k, r in v.items():
        print(f"{g:28s} {k:58s} median {statistics.median(x[0] for x in r):.4f} min {min(x[1] for x in r):.4f} ratio {statistics.median(x[0] for x in r)/base:.3f}")
PY
