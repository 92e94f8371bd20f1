#!/usr/bin/env bash
# softmax_256k(_bf16): b3244e6 (old) against this build's split parts in other block shapes.
cd "$(dirname "$0")/../../.."
for d in bench/tmp/old bundle; do [ -f $d/libtilefuse.so ] || gzip -dk $d/libtilefuse.so.gz; done
export TILEFUSE_CACHE=0
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
run() { local tag=$1; shift; env "$@" 2>&1 | grep -E "median|rror|relative|FAIL" | sed "s/^/$tag /"; }
V="b512x32 b1024x16 b256x64 b256x32x2 b512x16x2"
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
n=${N:-softmax_256k_bf16}
{
for r in 1 2 3; do
  run "old $n" bench/tmp/old/tilefuse run $n --bench --iters 30
  for v in $V; do go $v $n --bench --iters 30; done
  if [ $r = 1 ]; then for v in b512x32 b256x64; do go $v $n --check --seed 5 --iters 3 | grep -E "relative|rror|FAIL"; done; fi
done
} | tee ${OUT:-/tmp}/ab4.log
python3 - ${OUT:-/tmp}/ab4.log <<'PY'
import re, statistics, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\S+) +median ([0-9.]+) ms \(min ([0-9.]+)", line)
    if m: runs[(m[2], m[1])].append(float(m[3]))
for n in dict.fromkeys(k[0] for k in runs):
    o = statistics.median(runs[(n, "old")])
    print(n, " ".join(f"{v}={statistics.median(x):.4f}({statistics.median(x)/o:.3f})" for (nn, v), x in runs.items() if nn == n))
PY
