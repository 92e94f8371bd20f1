#!/usr/bin/env bash
set -uo pipefail
. scripts/gpu_env.sh
export TILEFUSE_CACHE=0
names="off_log_softmax_vocab_bf16 off_log_softmax_vocab off_cross_entropy_vocab"
for n in $names; do $B/tilefuse graph $n --json > $OUT/$n.graph.json; done
timeout 90 $B/tilefuse bench --json $OUT/bench.json $names > $OUT/bench.log 2>&1; echo "bench rc=$?"; grep -E "ceiling|tilefuse|:$" $OUT/bench.log
timeout 200 python3 bench/peers.py --out $OUT/peers.json --cases none --graphs $(for n in $names; do echo $OUT/$n.graph.json; done) > $OUT/peers.log 2>&1; echo "peers rc=$?"; tail -15 $OUT/peers.log
