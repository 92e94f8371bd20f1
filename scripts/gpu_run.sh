#!/usr/bin/env bash
# On the GPU machine, in one call: the GPU tests, the benchmark against its ceiling and peers,
# Nsight Compute's DRAM byte counts beside the cost model's, and the SASS of the main kernel.
# Needs bundle/ (scripts/build_bundle.sh) and writes everything under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/tilefuse-gpu}
mkdir -p "$OUT"
B=bundle
export TILEFUSE_COMMIT=${TILEFUSE_COMMIT:-unknown}
export PYTHONUNBUFFERED=1
log="$OUT/tests.log"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  echo "== tests"
  $B/tilefuse_tests --gtest_brief=1
  echo "tests exit: $?"
  echo "== run --check"
  for e in bias_gelu bias_gelu_bf16 gelu_two_consumers; do $B/tilefuse run $e --check --bench; done
  echo "== schedule sweep (bias_gelu f32, bf16): block threads × rows per thread"
  for e in bias_gelu bias_gelu_bf16; do
    for t in 128 256 512; do
      for r in 1 2 4; do
        echo "$e threads=$t rows=$r: $($B/tilefuse run $e --bench --block-threads $t --rows-per-thread $r --seed 7 | grep -E 'median')"
      done
    done
  done
} >"$log" 2>&1
tail -45 "$log"

echo "== benchmark"
$B/tilefuse bench --json "$OUT/tilefuse.json" bias_gelu bias_gelu_bf16 2>&1 | tail -12
python3 bench/peers.py --out "$OUT/peers.json" --cases bias_gelu 2>&1 | tail -12

echo "== ncu"
for e in bias_gelu bias_gelu_bf16; do
  ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum --csv \
    $B/tilefuse run $e --bench --iters 3 2>/dev/null | grep -v '^==PROF==' || true
done >"$OUT/ncu.csv"
wc -l "$OUT/ncu.csv"

python3 bench/report.py --tilefuse "$OUT/tilefuse.json" --peers "$OUT/peers.json" \
  --ncu "$OUT/ncu.csv" --out "$OUT/results.json" --markdown "$OUT/results.md"

echo "== sass"
tmp=$(mktemp -d)
{
  for e in bias_gelu bias_gelu_bf16; do
    $B/tilefuse ptx $e >"$tmp/$e.ptx"
    ptxas -arch=sm_90 -v "$tmp/$e.ptx" -o "$tmp/$e.cubin" 2>&1
    cuobjdump -sass "$tmp/$e.cubin"
  done
} >"$OUT/sass.txt" 2>&1
grep -cE "LDG.E.128|STG.E.128" "$OUT/sass.txt" || true
