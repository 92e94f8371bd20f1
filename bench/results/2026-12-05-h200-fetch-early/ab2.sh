#!/usr/bin/env bash
# softmax rows: b3244e6 (old) against this build, with the early fetch or the fast factors off.
# (As run for ab2.log, on a build of 5093fe3 plus ebd640e's changes with two environment switches;
# in ebd640e the early fetch is --fetch-parts-early, and the accurate factors have no switch.)
cd "$(dirname "$0")/../../.."
for d in bench/tmp/old bundle; do [ -f $d/libtilefuse.so ] || gzip -dk $d/libtilefuse.so.gz; done
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
run() { local tag=$1; shift; env "$@" 2>&1 | grep -E "median|rror" | sed "s/^/$tag /"; }
for r in 1 2; do
  for n in ${N:-softmax_256k_bf16 softmax_256k softmax_bf16 softmax_32k_bf16 off_log_softmax_vocab_bf16}; do
    run "old $n" bench/tmp/old/tilefuse run $n --bench --iters 30
    run "new $n" bundle/tilefuse run $n --bench --iters 30
    run "nofetch $n" bundle/tilefuse run $n --bench --iters 30 --fetch-parts-early 0
  done
done | tee ${OUT:-/tmp}/ab2.log
python3 - ${OUT:-/tmp}/ab2.log <<'PY'
import re, statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\S+) +median ([0-9.]+) ms \(min ([0-9.]+)", line)
    if m: runs[(m[2], m[1])].append(float(m[3]))
names = list(dict.fromkeys(k[0] for k in runs))
for n in names:
    o = statistics.median(runs[(n, "old")])
    print(n, " ".join(f"{v}={statistics.median(runs[(n, v)]):.4f}({statistics.median(runs[(n, v)])/o:.3f})" for v in ["old", "new", "nofetch", "exact"] if runs[(n, v)]))
PY
