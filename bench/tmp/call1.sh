#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu_env.sh
start=$(date +%s)
mkdir -p $OUT/sass
$B/tilefuse ptx attention --target sm_90a > $OUT/sass/attention.ptx 2>&1
$B/tilefuse ptx matmul --target sm_90a --library-gemm never > $OUT/sass/matmul.ptx 2>&1
for k in attention matmul; do
  ptxas -arch=sm_90a -v $OUT/sass/$k.ptx -o /tmp/$k.cubin 2>&1 | grep -E "registers|spill"
  cuobjdump -sass /tmp/$k.cubin > $OUT/sass/$k.sass 2>&1
  echo "$k SASS lines: $(grep -cE '^\s+/\*[0-9a-f]+\*/' $OUT/sass/$k.sass)"
done
bash scripts/gpu_attention.sh 2>&1 | tee $OUT/gpu_attention.out | tail -80
echo "== elapsed $(( $(date +%s) - start )) s"
SWEEP="" timeout $(( 570 - ($(date +%s) - start) )) bash scripts/gpu_matmul.sh 2>&1 | tail -40
echo "== elapsed $(( $(date +%s) - start )) s"
