#!/usr/bin/env bash
# softmax_256k_bf16: b3244e6 (old) against this build's 16-bit parts of 64 KiB (default: 1024
# threads × 32 elements, the part carried in pairs and its exps made again), of 512 × 64, and
# parts of 32 KiB (1024 × 16, the former default); then the GPU tests and a GPU fuzz round.
cd "$(dirname "$0")/../../.."
for d in bench/tmp/old bundle; do [ -f $d/libtilefuse.so ] || gzip -dk $d/libtilefuse.so.gz; done
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
run() { local tag=$1; shift; env "$@" 2>&1 | grep -E "median|rror|relative|FAIL" | sed "s/^/$tag /"; }
flags() {
  case $1 in
    b512x64) echo "--part-elements 64";;
    b1024x16) echo "--part-elements 16";;
  esac
}
n=softmax_256k_bf16
{
for r in 1 2 3; do
  run "old $n" bench/tmp/old/tilefuse run $n --bench --iters 30
  for v in new b512x64 b1024x16; do
    # shellcheck disable=SC2046
    run "$v $n" bundle/tilefuse run $n $(flags $v) --bench --iters 30
  done
  if [ $r = 1 ]; then
    for v in new b512x64; do
      # shellcheck disable=SC2046
      run "$v $n" bundle/tilefuse run $n $(flags $v) --check --seed 5 --iters 3 | grep -E "relative|rror|FAIL"
    done
  fi
done
} | tee ${OUT:-/tmp}/ab5.log
python3 scripts/ab_medians.py ${OUT:-/tmp}/ab5.log
[ "${AB_ONLY:-0}" = 1 ] && exit 0
bundle/tilefuse_tests --gtest_brief=1 --gtest_filter='Gpu*' 2>&1 | tail -4 | tee ${OUT:-/tmp}/tests.log
bundle/tilefuse_fuzz --first 17200 --count 3000 --gpu --seconds 60 --jobs 12 --long-rows 0.4 2>&1 | tail -4 | tee ${OUT:-/tmp}/fuzz.log
