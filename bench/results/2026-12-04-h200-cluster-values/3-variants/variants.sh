#!/usr/bin/env bash
# Run at 5530d69+rescale with two temporary switches in row_reduction.cpp (not in the repository):
# TF_X_EACH=1 exchanged each reduction alone, TF_X_RECOMPUTE=1 computed exp(u − c(M)) again
# instead of rescaling the block's terms. "merged" is --cluster-online 1 as landed, "each" the default.
set -uo pipefail
. scripts/gpu_env.sh
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
run() {  # label env flags name
  local label=$1 e=$2 f=$3 n=$4
  env $e timeout 60 $B/tilefuse run $n --bench --iters 30 $f 2>&1 | grep -E "median|rror" | sed "s/^/$label $n /"
}
for round in 1 2; do
  for n in softmax_32k softmax_32k_bf16; do
    run merged "X=1" "--stages 0" $n
    run each "TF_X_EACH=1" "--stages 0" $n
    run recompute "TF_X_RECOMPUTE=1" "--stages 0" $n
    run first "X=1" "--stages 0 --cluster-ir 1" $n
  done
  for n in off_log_softmax_vocab_bf16 off_log_softmax_vocab off_cross_entropy_vocab; do
    run merged "X=1" "--window-ir 2" $n
    run each "TF_X_EACH=1" "--window-ir 2" $n
    run recompute "TF_X_RECOMPUTE=1" "--window-ir 2" $n
    run first "X=1" "--window-ir 1" $n
  done
done | tee $OUT/variants.log
python3 - $OUT/variants.log <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\S+) +median ([0-9.]+) ms \(min ([0-9.]+)", line)
    if m: runs.setdefault(m[2], {}).setdefault(m[1], []).append((float(m[3]), float(m[4])))
for g, v in runs.items():
    base = statistics.median(x[0] for x in v.get("first", [(1, 1)]))
    print(g, " ".join(f"{k}={statistics.median(x[0] for x in r):.4f}({min(x[1] for x in r):.4f},{statistics.median(x[0] for x in r)/base:.3f})" for k, r in v.items()))
PY
