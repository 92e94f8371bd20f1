#!/usr/bin/env bash
# softmax_256k_bf16: b3244e6 (old) against this build's split parts in other block shapes (ROUNDS,
# V: the variants, LOG: the log's name under $OUT). --part-elements as of 7318578–39b1b20: parts
# of 16384 elements, blocks of 16384 / N threads.
cd "$(dirname "$0")/../../.."
for d in bench/tmp/old bundle; do [ -f $d/libtilefuse.so ] || gzip -dk $d/libtilefuse.so.gz; done
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
run() { local tag=$1; shift; env "$@" 2>&1 | grep -E "median|rror|relative|FAIL" | sed "s/^/$tag /"; }
V=${V:-"b512x32 b1024x16 b256x64 b256x32x2"}
go() {  # variant name flags...: threads x elements a thread (x blocks an SM)
  local v=$1 n=$2; shift 2
  [ "$n" = softmax_256k ] && { [ "$v" = b256x64 ] || [ "$v" = b512x16x2 ]; } && return   # (f32: fewer)
  local f=""
  case $v in
    b512x16x2) f="--block-threads 512 --part-elements 16";;
    b512x32) f="--block-threads 512 --part-elements 32";;
    b256x32x2) f="--block-threads 256 --part-elements 32";;
    b256x64) f="--block-threads 256 --part-elements 64";;
  esac
  # shellcheck disable=SC2086
  run "$v $n" ${TF:-bundle/tilefuse} run $n $f "$@"
}
n=softmax_256k_bf16
{
for r in $(seq ${ROUNDS:-2}); do
  run "old $n" bench/tmp/old/tilefuse run $n --bench --iters 30
  for v in $V; do go $v $n --bench --iters 30; done
  if [ $r = 1 ]; then for v in b512x32 b256x64; do go $v $n --check --seed 5 --iters 3 | grep -E "relative|rror|FAIL"; done; fi
done
} | tee ${OUT:-/tmp}/${LOG:-ab3.log}
python3 scripts/ab_medians.py ${OUT:-/tmp}/${LOG:-ab3.log}
