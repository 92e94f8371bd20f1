#!/usr/bin/env bash
cd "$(dirname "$0")/../../.."
. scripts/gpu_env.sh
export TILEFUSE_CACHE=0
cp bench/results/2026-12-06-h100-rolled/peer.py "$OUT/peer.py"
for r in 1 2 3; do
  python3 "$OUT/peer.py" | sed "s/^/r$r /"
  for ro in 0 1; do
    timeout 60 $B/tilefuse run matmul_bias_gelu_k1024 --library-gemm never --rolled-epilogue $ro --bench --iters 40 2>&1 | grep -E "median|rror" | sed "s/^/r$r rolled=$ro /"
  done
done | tee "$OUT/ab2.log"
for r in 2 3; do
  for ro in 0 1; do
    rm -rf /tmp/tfc; TILEFUSE_CACHE=1 TILEFUSE_CACHE_DIR=/tmp/tfc $B/tilefuse cache time matmul_bias_gelu matmul_bias_gelu_k1024 --library-gemm never --rolled-epilogue $ro 2>&1 | sed "s/^/r$r rolled=$ro /"
  done
done | tee "$OUT/compile2.log"
